"""harness.run.evaluate: the reference side's protocol, against a scripted worker."""
from __future__ import annotations

import pytest

from harness.core.config import load_config


class _ScriptedReference:
    """A reference worker that records what it was sent and answers from a script."""

    def __init__(self, replies: list[dict]):
        self.sent, self.replies = [], list(replies)

    def resume(self) -> None:
        pass

    def send(self, message: dict) -> None:
        self.sent.append(message)

    def recv(self, deadline: float) -> dict:
        return self.replies.pop(0)


def _reference_side(worker, known: dict):
    from types import SimpleNamespace
    from harness.run.evaluate import ReferenceSide
    from harness.shared import messages as m
    from harness.run.clients import ReferenceClient
    side = ReferenceSide.__new__(ReferenceSide)      # the protocol alone: no process behind it
    side.client, side.known, side.ready, side.derive = ReferenceClient(worker), known, None, "not asked"
    side.derived = m.Derived(None)
    side.pc = SimpleNamespace(cfg=load_config(None, {}))
    return side


def test_later_process_pairs_reuse_the_flop_count_and_still_report_it():
    """Counting a forward's FLOPs imports torch._dynamo (seconds): the first reference process of a problem counts
    them, the later ones (timing.processes) are asked not to and their pairs report the first count. Each asks
    once, and its reply is read before anything else is asked of it."""
    import dataclasses
    from harness.run.workerproc import WorkerExit
    from harness.shared import messages as m
    known: dict = {}
    first = _ScriptedReference([{"kind": "derived", "work": {"flops": 10, "bytes": 20},
                                 "fp64_reference_max_abs_err": 1e-7, "fp64_output_scale": 2.0}])
    side = _reference_side(first, known)
    side.ask_derived()
    side.ask_derived()
    assert first.sent == [{"op": "derive", "flops": True}]
    side.read_derived()
    side.read_derived()
    assert side.derived.work == m.Work(10, 20) and side.derived.fp64_reference_max_abs_err == 1e-7
    later = _ScriptedReference([{"kind": "derived", "work": None, "fp64_reference_max_abs_err": 2e-7}])
    side = _reference_side(later, known)
    side.ask_derived()
    side.read_derived()
    assert later.sent == [{"op": "derive", "flops": False}]
    assert side.derived.work == m.Work(10, 20) and side.derived.fp64_reference_max_abs_err == 2e-7
    assert not side.beside_trials()                 # no `ready` yet: nothing known of its size
    ready = m.Ready("float32", "default", 1e-4, 1e-4, False, [[2]], 0, "train", 64 << 20,
                    m.ProblemChecks(False, False, False, False, True, False, []), {}, 0.001, None)
    side.ready = ready
    assert side.beside_trials()                     # small: worked out while the candidate runs its trials
    side.ready = dataclasses.replace(ready, footprint_bytes=4 << 30)
    assert not side.beside_trials()                 # its float64 copy could run the candidate out of memory
    wrong = _reference_side(_ScriptedReference([{"kind": "sample", "ms": 1.0}]), {})
    wrong.ask_derived()
    with pytest.raises(WorkerExit, match="derive"):
        wrong.read_derived()


class _GoneWorker:
    """A worker that ended before it answered (its pipe closed)."""

    def __init__(self):
        self.closed = 0

    def recv(self, deadline: float) -> dict:
        from harness.run.workerproc import WorkerExit
        raise WorkerExit("exited", 1, "the reference's executor exited with code 1")

    def close(self) -> int:
        self.closed += 1
        return 1

    def alive(self) -> bool:
        return False


def test_an_executor_that_ends_before_it_loaded_is_the_harness_fault_and_is_closed():
    """The staged GPU path reads its executor's Loaded only after the candidate's trials (_executor_beside). An
    executor that ended meanwhile is the harness's fault (ExecutorFailed: the pair is `crashed`, a harness fault),
    never read as the candidate's exit, and its worker is closed."""
    from types import SimpleNamespace
    from harness.run import evaluate, reference_executor
    worker = _GoneWorker()
    executor = reference_executor.ExecutorClient(worker)
    with pytest.raises(reference_executor.ExecutorFailed, match="exited with code 1"):
        evaluate._executor_beside(SimpleNamespace(deadline=0.0), executor, None, {})
    assert worker.closed >= 1
