"""A problem's declared input sizes, from the parent's side (docs/AUTHORING.md, Sizes): which trial outputs the
candidate must hand over, the per-size verdicts on the record, the name of the size a candidate is wrong at, and
the timing of the sizes beside the main one (timing.sizes all).

The reference worker reports the sizes it found (messages.Ready.sizes); every correctness trial runs at every
size (harness.shared.sizes.labels); the main size is timed as every problem is, and with timing.sizes `all` each
other size in rounds of its own after the main size's, each with its own stopping rule. Their timed outputs are
checked as the main size's are (their checks join the main rounds' for the defenses); the speedup, its CI and the
rounds that ended the pair stay the main size's. Without SIZES (one size) nothing here touches the record.
"""
from __future__ import annotations

from dataclasses import dataclass

from harness.results.parts import SizeResult
from harness.results.records import RecordDraft
from harness.run import paired
from harness.run.defenses import largest
from harness.run.between import Term, widen
from harness.run.clients import CandidateClient
from harness.run.interleave import EAGER, Collected, GraphFallback, Interleaver, ratios
from harness.shared import messages as m
from harness.shared import sizes as shared
from harness.shared.stats import geomean


def declared(ready: m.Ready | None) -> list[m.SizeInfo]:
    """The sizes the reference found (one, the main size, for a problem without SIZES or an older worker)."""
    return list(ready.sizes) if ready is not None else []


def several(ready: m.Ready | None) -> bool:
    return len(declared(ready)) > 1


def main_size(ready: m.Ready) -> m.SizeInfo | None:
    return next((s for s in declared(ready) if s.main), None)


def expected_labels(ready: m.Ready, trials: int) -> list[str]:
    """The trial outputs the candidate must hand over, in order."""
    found = declared(ready)
    main = main_size(ready)
    if main is None:
        return [shared.trial_label(k, shared.MAIN, True) for k in range(trials)]
    return shared.labels([s.name for s in found], main.name, trials)


def missing_outputs(outputs: m.Outputs, ready: m.Ready, trials: int) -> str | None:
    """One line when the candidate's trial files are not exactly the trials asked for (labels and indices in
    order), else None: a candidate that leaves out the sizes it gets wrong must not pass on the others."""
    want = expected_labels(ready, trials)
    got = [f.label for f in outputs.files]
    if got == want and [f.trial for f in outputs.files] == list(range(len(want))):
        return None
    return f"the candidate worker handed over trial outputs {got[:12]}, not the trials asked for {want[:12]}"


def line(size: m.SizeInfo) -> str:
    """One line for a size: what it sets and its inputs' shapes."""
    return shared.describe(size.overrides, size.input_shapes)


def wrong_at(label: str | None, ready: m.Ready) -> str:
    """The prefix of an `incorrect` verdict that names the size a failing trial ran at ("" without sizes)."""
    if not several(ready):
        return ""
    name = shared.size_of(label)
    size = next((s for s in declared(ready) if s.name == name), None) if name else main_size(ready)
    if size is None:
        return ""
    what = line(size)
    main = "the main size" + (f", {what}" if what else "")
    return f"wrong at size {size.name!r} ({main if size.main else what}): "


def trial_label_text(label: str | None) -> str:
    """`trial0@small` -> `trial 0` (the size is named by wrong_at)."""
    text = str(label).split("@", 1)[0]
    return text.replace("trial", "trial ")


def results(checks: list[m.FileCheck], ready: m.Ready) -> list[SizeResult]:
    """Each declared size's correctness, from the reference's verdicts on its trials."""
    main = main_size(ready)
    out = []
    for size in declared(ready):
        mine = [c for c in checks if (shared.size_of(c.label) or (main.name if main else None)) == size.name]
        out.append(SizeResult(
            name=size.name, main=size.main, sets=dict(size.overrides), inputs=list(size.input_shapes),
            shape=line(size), trials=len(mine), trials_passed=sum(1 for c in mine if c.ok),
            correct=bool(mine) and all(c.ok for c in mine), max_abs_err=largest([c.max_abs_err for c in mine])))
    return out


@dataclass
class SizeTiming:
    """One size's own rounds (timing.sizes all)."""
    name: str
    estimate: paired.Estimate | None
    error: str | None = None


def time_others(candidate: CandidateClient, inter: Interleaver, ready: m.Ready, rule: paired.StopRule,
                main_rounds: Collected) -> list[SizeTiming]:
    """Every size but the main one, in rounds of its own on both workers (inter.reference and `candidate`); each
    size's timed-output checks and sample flags join `main_rounds` (the defenses read them there). The reference is
    back at the main size after it, for its `after` bracket."""
    main = main_size(ready)
    timed = []
    for size in declared(ready):
        if size.main:
            continue
        inter.release()
        for side in (inter.reference, candidate):
            inter.set_size(side, size.name)
        try:
            rounds = inter.rounds(candidate, rule)
        except GraphFallback as fell:
            timed.append(SizeTiming(size.name, None, f"not timed: {fell.side}: {fell.error}"))
            break
        _join(main_rounds, rounds)
        est = ratios(rounds, EAGER)
        timed.append(SizeTiming(size.name, paired.estimate(est) if est else None))
    inter.release()
    if main is not None and timed:
        inter.set_size(inter.reference, main.name)
    return timed


def _join(main: Collected, other: Collected) -> None:
    """A size's rounds' checks and sample flags, added to the main size's for the defenses."""
    main.checks.update(other.checks)
    main.mutated = main.mutated or other.mutated
    main.changed_after_return = main.changed_after_return or other.changed_after_return
    main.not_plain = main.not_plain or other.not_plain
    main.output_errors.extend(other.output_errors)
    main.shared_outputs = main.shared_outputs or other.shared_outputs
    main.tampered.update(other.tampered)


def add_timing(record: RecordDraft, timed: list[SizeTiming], term: Term | None, timed_all: bool) -> None:
    """The record's per-size speedups (the main size's is the record's own) and their geometric mean over the
    timed sizes (null where one of them has no speedup)."""
    if record.sizes is None or not isinstance(record.sizes, list):
        return
    by_name = {t.name: t for t in timed}
    for entry in record.sizes:
        if entry.main:
            entry.timed = record.speedup is not None
            entry.speedup, entry.speedup_ci = record.speedup, record.speedup_ci or None
            entry.rounds = record.timing.rounds if record.timing else None
        elif entry.name in by_name:
            t = by_name[entry.name]
            est = widen(t.estimate, term) if t.estimate is not None else None
            entry.timed = est is not None
            entry.speedup, entry.speedup_ci = (est.value, est.ci()) if est else (None, None)
            entry.rounds, entry.error = (est.rounds if est else None), t.error
        elif timed_all:
            entry.error = "not timed: the pair ended first"
    record.sizes_geomean = geomean([e.speedup for e in record.sizes if e.main or timed_all])

