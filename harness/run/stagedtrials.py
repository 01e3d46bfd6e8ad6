"""The CPU path's correctness trials, run by the parent (README, Hardening: the candidate's process runs the call
and nothing else).

The candidate worker builds ModelNew and says so (messages.Loaded); from then on it only answers calls. For each
trial of the plan the reference writes the trial's inputs into the candidate's arena (drawn from base + k, as the
reference drew its own) and checks the previous trial's inputs against its copy; the candidate is woken for the
call alone (after the trial's public torch.manual_seed) and stopped at its reply; the parent copies the whole output
out of its memory into a file for the reference to compare with the expected output. With the defenses on, the
candidate then runs for `SETTLE_S` and its output is read again: a change is work it left running after the call
returned (`unsynchronized_work`). Nothing of the check runs in the candidate's process.
"""
from __future__ import annotations

import hashlib
import os
import time

from harness.run import peek, sizes
from harness.run.clients import CandidateClient, CandidateFailed
from harness.run.interleave import CANDIDATE, Interleaver
from harness.run.trusted import copy_out, read_whole
from harness.run.workerproc import Worker, WorkerExit
from harness.shared import messages as m

SETTLE_S = 0.05             # how long the candidate runs after a trial before its output is read again


def run_trials(candidate: CandidateClient, loaded: m.Loaded, ready: m.Ready, inter: Interleaver, count: int, scratch: str,
               defenses: bool) -> m.Outputs:
    """Every trial of the plan as a staged call; what the candidate's own trials used to report (messages.Outputs),
    its files for the reference to check. CandidateFailed for a call that raised or returned no tensors."""
    inter.attach(candidate)
    worker = candidate.worker
    files: list[m.TrialFile] = []
    mutated = unsynchronized = lazy = False
    for j, label in enumerate(sizes.expected_labels(ready, count)):
        staged = inter.stage(m.StageRequest(CANDIDATE, trial=j))
        mutated = mutated or staged.mutated
        text = sizes.trial_label_text(label) + ("" if "@" not in label else f" at size {label.split('@', 1)[1]!r}")
        called, _, _ = inter.call(candidate, CANDIDATE, staged, label=text, flush=False)
        lazy = lazy or called.not_plain
        if called.output_error or not called.outputs:
            raise CandidateFailed(m.Failed("incorrect", f"{text}: {called.output_error or 'no output'}"))
        exported = _exported(called.outputs)
        try:           # (an OSError writing the copy is the harness's, not the candidate's: it goes up as it is)
            copied = copy_out(worker.proc.pid, exported, os.path.join(scratch, f"{label}.kbt"))
        except peek.PeekError as exc:
            raise CandidateFailed(m.Failed("incorrect", f"{text}: its output could not be read: {exc}")) from None
        if copied is None:
            raise WorkerExit("protocol", None, f"{text}: an output larger than the parent copies")
        path, shapes, strides, data = copied
        if defenses:
            unsynchronized = _changed_later(worker, exported, data) or unsynchronized
        files.append(m.TrialFile(label, path, j, shapes=shapes, strides=strides))
    mutated = inter.stage(m.StageRequest(CANDIDATE)).mutated or mutated      # the last trial's inputs
    return m.Outputs(loaded.param_match, loaded.extensions, loaded.module_mode, files, mutated, unsynchronized,
                     lazy, sandbox=loaded.sandbox)


def _changed_later(worker: Worker, exported: list[m.Exported], data: list[bytes]) -> bool:
    """Whether the output's memory changed while the candidate ran on for SETTLE_S after its reply (it is stopped
    again before the read)."""
    before = hashlib.sha256(b"".join(data)).digest()
    worker.resume()
    time.sleep(SETTLE_S)
    worker.pause()
    try:
        again = read_whole(worker.proc.pid, exported)
    except peek.PeekError:
        return True                                 # its output's memory went away: not the values it handed over
    return again is not None and hashlib.sha256(b"".join(again)).digest() != before


def _exported(items: list[dict]) -> list[m.Exported]:
    try:
        return [m.parse(m.Exported, e) for e in items]
    except (m.ProtocolError, TypeError) as exc:
        raise WorkerExit("protocol", None, f"worker described its output as {exc}") from None
