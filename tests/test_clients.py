"""harness.run.clients: the parent's one client per worker role (issue 46 item 1). Every request the parent sends goes
through a client method, so that a new request type touches messages.py, the worker's handler and its client only;
a reply of the wrong shape is a protocol fault, and only a candidate's Failed is CandidateFailed."""
from __future__ import annotations

import ast
import dataclasses

import pytest

from harness.run.clients import CandidateClient, CandidateFailed, ReferenceClient
from harness.run.workerproc import WorkerExit
from harness.shared import messages as m
from test_import_graph import MODULES, _folder

CLIENTS = "harness.run.clients"
WORKERPROC = "harness.run.workerproc"      # Worker.close sends ExitRequest, to every role alike
ZYGOTE = "harness.run.zygote"              # asks the zygote to fork a worker: how a worker starts, not a message to it


def _calls(module: str, names: set[str]) -> set[str]:
    tree = ast.parse(MODULES[module].read_text())
    return {node.func.attr for node in ast.walk(tree) if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute) and node.func.attr in names}


def test_only_the_clients_talk_to_workers():
    """No parent module but the clients sends a worker a message or reads one (Worker.close's ExitRequest and the
    zygote's spawn requests aside): the one-job workers (build, lint, ceilings) too."""
    talking = {mod for mod in MODULES if _folder(mod) not in ("worker", "shared") and _calls(mod, {"send", "recv"})}
    assert talking - {CLIENTS, WORKERPROC, ZYGOTE} == set(), sorted(talking - {CLIENTS, WORKERPROC, ZYGOTE})


def test_every_request_type_has_its_client_method():
    source = MODULES[CLIENTS].read_text()
    requests = [cls.__name__ for cls in vars(m).values()
                if isinstance(cls, type) and dataclasses.is_dataclass(cls) and getattr(cls, "OP", None)]
    missing = [name for name in requests if f"m.{name}" not in source and name != "ExitRequest"]
    assert not missing, missing


class _Scripted:
    def __init__(self, reply: dict):
        self.reply, self.sent = reply, []

    def send(self, message: dict) -> None:
        self.sent.append(message)

    def recv(self, deadline: float) -> dict:
        return self.reply


FAILED = {"kind": "failed", "status": "runtime_error", "error": "RuntimeError: boom"}


def test_a_candidates_failure_is_candidate_failed_and_the_references_a_protocol_fault():
    with pytest.raises(CandidateFailed, match="boom"):
        CandidateClient(_Scripted(FAILED)).size("small", 0.0)
    with pytest.raises(WorkerExit, match="the reference sent a malformed 'size_set' reply") as caught:
        ReferenceClient(_Scripted(FAILED)).size("small", 0.0)
    assert caught.value.kind == "protocol"


def test_a_request_goes_out_as_its_dataclass_and_its_reply_comes_back_typed():
    reference = _Scripted({"kind": "budget", "share_bytes": 1 << 30, "fp64": None})
    reply = ReferenceClient(reference).budget(1 << 30, None, 0.0)
    assert reference.sent == [m.wire(m.BudgetRequest(1 << 30, None))]
    assert reply == m.BudgetSet(1 << 30, None)


def test_the_references_executor_failing_is_the_harness_fault_not_the_candidates():
    """The executor is a worker of the candidate's role running the reference's own Model: its Failed is
    ExecutorFailed (the pair `crashed`, a harness fault), never CandidateFailed (which would blame the candidate)."""
    from harness.run.reference_executor import ExecutorClient, ExecutorFailed
    with pytest.raises(ExecutorFailed, match="the reference's executor: runtime_error: RuntimeError: boom"):
        ExecutorClient(_Scripted(FAILED), "reference's executor").size("small", 0.0)
    assert ExecutorClient(_Scripted({"kind": "size_set", "size": "small"})).size("small", 0.0).size == "small"


def test_a_one_job_workers_reply_is_typed_and_a_wrong_one_a_protocol_fault():
    from harness.run.clients import BuildClient, CeilingsClient, LintClient
    built = {"kind": "built", "status": "built", "error": None, "compiler_output": None, "extensions": [],
             "seconds": 1.5}
    worker = _Scripted(built)
    job = m.BuildJob("cand.py", "prob.py", "cpu", 1)
    assert BuildClient(worker).build(job, 0.0) == m.parse(m.Built, built)
    assert worker.sent == [m.wire(job)]
    harness_fault = {"kind": "harness_error", "error": "ImportError: x"}
    assert isinstance(LintClient(_Scripted(harness_fault)).lint(m.LintJob("prob.py", "cpu", 1, None), 0.0),
                      m.HarnessError)
    with pytest.raises(WorkerExit, match="the ceilings worker sent a malformed 'ceilings' reply") as caught:
        CeilingsClient(_Scripted(built)).measure(m.CeilingsJob("cuda"), 0.0)
    assert caught.value.kind == "protocol"
