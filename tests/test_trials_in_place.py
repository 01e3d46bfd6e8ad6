"""harness.run.evaluate's correctness trials on the GPU path, against scripted workers (no processes): a candidate
hands each trial's outputs over where they lie (messages.TrialOut), the reference compares them while the candidate
is stopped, and only then is the candidate told to go on; a trial it was not asked for ends the pair, and a trial
its Outputs lists as checked in place without having handed it over fails. The real exchange (CUDA IPC) runs in
tests/test_gpu.py; the CPU path's trial files in every end-to-end test."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from harness.results.records import RecordDraft
from harness.run.clients import CandidateClient, ReferenceClient
from harness.run.evaluate import ReferenceSide, trials
from harness.run.workerproc import WorkerExit
from harness.shared import messages as m

EXPORTED = [{"dtype": "torch.float32", "shape": [4], "strides": [1], "address": 0, "handle": "AAAA"}]


class Candidate:
    """Replies from a script; records what it was sent and whether it was stopped when the reference checked."""

    def __init__(self, replies: list[dict]):
        self.replies, self.sent, self.paused = list(replies), [], False

    def recv(self, deadline: float) -> dict:
        return self.replies.pop(0)

    def send(self, message: dict) -> None:
        assert not self.paused, "the candidate was sent a message while stopped"
        self.sent.append(message)

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False


class Reference:
    """Answers verify: ok unless the output's address is 1; notes whether the candidate was stopped meanwhile."""

    def __init__(self, candidate: Candidate):
        self.candidate, self.asked, self.reply = candidate, [], None

    def resume(self) -> None:
        pass

    def send(self, message: dict) -> None:
        assert message["op"] == "verify"
        assert self.candidate.paused, "the reference read the candidate's outputs while it ran"
        item = message["files"][0]
        self.asked.append((item["label"], item["trial"], item["path"], item["outputs"]))
        self.reply = {"kind": "verified", "results": [
            {"ok": item["outputs"][0]["address"] != 1, "label": item["label"], "reason": "out of tolerance"}]}

    def recv(self, deadline: float) -> dict:
        return self.reply


def _reference(candidate: Candidate) -> ReferenceSide:
    side = ReferenceSide.__new__(ReferenceSide)
    side.client, side.derive = ReferenceClient(Reference(candidate)), "read"
    side.pc = SimpleNamespace(cfg=SimpleNamespace(reference_timeout=60))
    side.ready = SimpleNamespace(sizes=[])
    return side


def _draft() -> RecordDraft:
    return RecordDraft(run_id="r", problem="level1/p", solution="level1/p/c", device="cuda")


def _trial(k: int, address: int = 0, label: str | None = None) -> dict:
    return {"kind": "trial", "label": label or f"trial{k}", "trial": k, "outputs": [{**EXPORTED[0], "address": address}]}


def _outputs(count: int) -> dict:
    return {"kind": "outputs", "param_match": "state_dict", "extensions": [], "module_mode": "eval",
            "files": [{"label": f"trial{k}", "path": "", "trial": k} for k in range(count)], "mutates_inputs": False,
            "unsynchronized_work": False, "output_not_plain_tensor": False}


def test_each_trial_is_checked_while_the_candidate_is_stopped_before_it_goes_on():
    candidate = Candidate([_trial(0), _trial(1, address=1), _trial(2), _outputs(3)])
    reference = _reference(candidate)
    outputs, in_place = trials(CandidateClient(candidate), _draft(), reference, 3, 1e18)
    assert [a[:3] for a in reference.worker.asked] == [("trial0", 0, ""), ("trial1", 1, ""), ("trial2", 2, "")]
    assert candidate.sent == [{"op": "next"}] * 3 and not candidate.paused
    checks = reference.checks(outputs.files, in_place)
    assert [c.ok for c in checks] == [True, False, True] and checks[1].reason == "out of tolerance"


@pytest.mark.parametrize("bad", [_trial(7), _trial(0, label="trial1")])
def test_a_trial_not_asked_for_ends_the_pair(bad):
    candidate = Candidate([_trial(0), bad, _outputs(2)])
    with pytest.raises(WorkerExit, match="not one asked for"):
        trials(CandidateClient(candidate), _draft(), _reference(candidate), 2, 1e18)


def test_a_trial_listed_as_checked_in_place_but_never_handed_over_fails():
    """Trial 1 handed over twice (its outputs right once) and trial 2 never: trial 2 fails, naming why."""
    candidate = Candidate([_trial(0), _trial(1, address=1), _trial(1), _outputs(3)])
    reference = _reference(candidate)
    outputs, in_place = trials(CandidateClient(candidate), _draft(), reference, 3, 1e18)
    checks = reference.checks(outputs.files, in_place)
    assert [c.ok for c in checks] == [True, True, False]
    assert checks[2].reason == "its outputs were never handed over"


def test_trial_files_and_in_place_checks_keep_the_trials_order():
    """A trial whose outputs could not be exported goes through its file; the checks come back in trial order."""
    reference = _reference(Candidate([]))
    in_place = {(f"trial{k}", k): m.FileCheck(True, f"trial{k}") for k in (0, 2)}
    files = [m.TrialFile("trial0", "", 0), m.TrialFile("trial1", "/x/trial1.kbt", 1), m.TrialFile("trial2", "", 2)]
    reference.verify = lambda on_file: [m.FileCheck(False, f.label, "from its file") for f in on_file]
    checks = reference.checks(files, in_place)
    assert [(c.label, c.ok) for c in checks] == [("trial0", True), ("trial1", False), ("trial2", True)]


@pytest.mark.parametrize("status, device, verdict", [
    ("incorrect", "cuda", "incorrect"), ("runtime_error", "cuda", "runtime_error"), ("oom", "cuda", "oom"),
    ("skipped", "cpu", "skipped"),              # an extension with CUDA sources on the CPU path
    ("skipped", "cuda", "crashed"), ("ok", "cuda", "crashed"), ("timeout", "cpu", "crashed"),
    ("invalid", "cuda", "crashed"), ("fast", "cuda", "crashed")])
def test_a_candidate_reports_only_the_statuses_a_candidate_can_earn(status, device, verdict):
    """A candidate that reaches its message pipe cannot give its pair a status only the harness gives (`skipped`
    passes `ci`): such a report is `crashed`, saying what it claimed."""
    from harness.run.evaluate import candidate_failed
    record = RecordDraft(run_id="r", problem="level1/p", solution="level1/p/c", device=device)
    candidate_failed(record, m.Failed(status, "it says so"), device)
    assert record.status == verdict, record.error
    if verdict == "crashed":
        assert "which only the harness gives" in record.error and repr(status) in record.error
