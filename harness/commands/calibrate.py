"""The A/A test, built in: every selected problem's own Model, as a candidate (`class ModelNew(Model): pass`),
through the full candidate path against the reference. On a machine the harness can be trusted on, every
speedup reads 1.0 within `timing.target_rel_ci` and every CI contains 1.0."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable

from harness.core import flags
from harness.results import fit, report
from harness.results.fit import Col
from harness.core.discover import Candidate, Pair, Problem
from harness.core.untrusted import write_text
from harness.run import between
from harness.results.records import Record, Status

AA_NAME = "aa_reference"


def aa_source(problem: Problem) -> str:
    text = problem.path.read_text(errors="replace")
    return f"{text}\n\n\nclass ModelNew(Model):          # the A/A candidate: the reference itself\n    pass\n"


def aa_pairs(problems: list[Problem]) -> list[Pair]:
    pairs = []
    for problem in problems:
        cid = f"{problem.id}/{AA_NAME}"
        if problem.error:
            pairs.append(Pair(problem, Candidate(cid, problem.path, None, problem.error), problem.id))
        else:
            virtual = problem.path.with_name(problem.path.name + ".aa")     # no .py: the build writes the source
            pairs.append(Pair(problem, Candidate(cid, virtual, aa_source(problem), None), problem.id))
    return pairs


@dataclass(frozen=True)
class Row:
    problem: str
    status: str
    speedup: float | None
    ci: list[float] | None
    rounds: int | None
    mode: str | None
    noisy: bool
    within_target: bool             # |speedup - 1| <= target_rel_ci
    one_inside_ci: bool
    error: str | None

    @property
    def good(self) -> bool:
        """What the machine needs of this problem: 1.0 within the target and inside the CI."""
        return self.within_target and self.one_inside_ci

    @property
    def word(self) -> str:
        """The row's verdict, as the table shows it and the summary counts it."""
        if self.status != "ok" or self.speedup is None:
            return NOT_MEASURED
        return "ok" if self.good else OUTSIDE_TARGET if not self.within_target else OUTSIDE_CI


NOT_MEASURED, OUTSIDE_TARGET, OUTSIDE_CI = "not measured", "outside target", "1.0 outside CI"
WORDS = ("ok", OUTSIDE_TARGET, OUTSIDE_CI, NOT_MEASURED)


def rows(records: Iterable[Record], target: float) -> list[Row]:
    return [row(r, target) for r in sorted(records, key=lambda r: r.problem)]


def row(r: Record, target: float) -> Row:
    s, ci, timing = r.speedup, r.speedup_ci, r.timing
    ok = r.status is Status.OK and s is not None
    return Row(r.problem, r.status.value, s, None if ci is None else list(ci), timing.rounds if timing else None,
               timing.mode if timing else None, flags.NOISY.name in r.flags, ok and abs(s - 1) <= target,
               ok and ci is not None and ci[0] <= 1.0 <= ci[1], r.error)


def verdict(table: list[Row]) -> dict[str, Any]:
    """The counts the summary prints, each a count of the rows' own verdict words (Row.word)."""
    n = len(table)
    words = {w: sum(r.word == w for r in table) for w in WORDS}
    return {"problems": n,
            "within_target": sum(r.within_target for r in table),
            "one_inside_ci": sum(r.one_inside_ci for r in table),
            "not_ok": sum(r.status != "ok" for r in table),
            "verdicts": words,
            "passed": n > 0 and words["ok"] == n}


def summary_line(table: list[Row], target: float) -> str:
    """'1 of 3 ok (1.0 within 1 +/- 5.00% and inside the CI); 2 outside target; ...': what the rows say."""
    v = verdict(table)
    rest = "; ".join(f"{n} {w}" for w, n in v["verdicts"].items() if w != "ok" and n)
    return (f"{v['verdicts']['ok']} of {v['problems']} ok (1.0 within 1 +/- {target:.2%} and inside the CI)"
            + (f"; {rest}" if rest else ""))


def write(path: Path, run_id: str, target: float, table: list[Row], load: dict[str, Any] | None = None,
          why_not: list[str] | None = None) -> None:
    """calibrate-<run>.json: the verdict, the machine's load during the run and why no term was kept (if so)."""
    write_text(path, json.dumps({"run_id": run_id, "target_rel_ci": target, **verdict(table), "load": load,
                                 "unsound": why_not or [], "rows": [asdict(r) for r in table]}, indent=2) + "\n")


CALIBRATE_COLUMNS = (Col("problem", cut="middle", least=14), Col("speedup", justify="right"),
                     Col("95% CI", justify="right"), Col("verdict", cut="end", least=14),
                     Col("rounds", keep=2, justify="right"), Col("mode", keep=3), Col("status", keep=1))


def render(table: list[Row], target: float, console) -> None:
    rows = []
    for r in table:
        if r.word == NOT_MEASURED:
            rows.append([r.problem, "-", "-", f"{NOT_MEASURED}: {r.error or r.status}", "-", "-", r.status])
            continue
        ci = f"[{r.ci[0]:.4f}, {r.ci[1]:.4f}]" if r.ci else "-"
        rows.append([r.problem, f"{r.speedup:.4f}", ci, r.word + (" (noisy)" if r.noisy else ""), str(r.rounds),
                     str(r.mode), r.status])

    def style(row: int, col: int) -> str | None:
        word = table[row].word
        return None if col != 3 else "green" if word == "ok" else "yellow" if word == NOT_MEASURED else "red"
    console.print(fit.table(CALIBRATE_COLUMNS, rows, f"A/A calibration (target: 1.0 +/- {target:.2%})",
                            console.width, style))
    console.print(summary_line(table, target), highlight=False)


# ---------------------------------------------------------------- the between-process term (harness.run.between)


def readings(records: Iterable[Record]) -> list[between.ProcessReading]:
    """Every `ok` A/A pair's process pairs, each with the CI of its own rounds."""
    found = []
    for r in records:
        processes = r.timing.processes if r.timing is not None else None
        if r.status is not Status.OK or not isinstance(processes, list):
            continue
        for p in processes:
            s, ci = p.speedup, p.speedup_ci
            if isinstance(s, (int, float)) and isinstance(ci, list) and len(ci) == 2 and s > 0 and ci[0] > 0:
                found.append(between.ProcessReading(r.problem, str(r.timing.mode), float(s), float(ci[0]),
                                                    float(ci[1]), p.rounds if isinstance(p.rounds, int) else None))
    return found


class LoadWatch:
    """The machine's load while calibrate runs: the 1-minute load average, read every `every` seconds on a thread
    of its own (and at start and stop). The run's own workers add about HARNESS_LOAD; beyond that, more than one
    runnable process per core means the A/A readings measure the other jobs as much as the machine."""
    HARNESS_LOAD = 2.0

    def __init__(self, every: float = 2.0) -> None:
        import os
        import threading
        self.cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        self.samples: list[float] = []
        self._stop, self._every = threading.Event(), every
        self._thread = threading.Thread(target=self._watch, name="calibrate-load", daemon=True)

    @staticmethod
    def read() -> float | None:
        import os
        try:
            return os.getloadavg()[0]
        except OSError:
            return None

    def _watch(self) -> None:
        while True:
            value = self.read()
            if value is not None:
                self.samples.append(value)
            if self._stop.wait(self._every):
                return

    def start(self) -> "LoadWatch":
        self._thread.start()
        return self

    def stop(self) -> dict[str, Any]:
        """What run.json and calibrate-<run>.json keep: the samples' max and mean, the cores and the limit."""
        self._stop.set()
        self._thread.join(timeout=5)
        samples = self.samples or [v for v in [self.read()] if v is not None]
        limit = self.cores + self.HARNESS_LOAD
        peak = max(samples) if samples else None
        return {"max": peak, "mean": round(sum(samples) / len(samples), 2) if samples else None,
                "samples": len(samples), "cores": self.cores, "limit": limit,
                "busy": peak is not None and peak > limit}


def soundness(table: list[Row], found: list[between.ProcessReading], load: dict[str, Any] | None,
              min_rounds: int) -> list[str]:
    """Why the run's readings cannot be kept as this machine's term (none: sound): its own A/A rows not all ok, too
    few process pairs (or rounds) for a problem, or a busy machine."""
    why = []
    off = [r.problem for r in table if r.word != "ok"]
    if off:
        why.append(f"{len(off)} of {len(table)} of its own A/A rows are not ok ({', '.join(off[:3])}"
                   f"{', ...' if len(off) > 3 else ''})")
    thin = between.thin_problems(found, [r.problem for r in table], min_rounds)
    if thin:
        why.append(f"{len(thin)} problems have fewer than {between.MIN_PROCESS_PAIRS} process pairs of "
                   f"{min_rounds} rounds or more ({', '.join(thin[:3])}{', ...' if len(thin) > 3 else ''})")
    if load and load.get("busy"):
        why.append(f"the machine was busy (load average up to {load['max']:.1f} on {load['cores']} cores, over "
                   f"{load['limit']:.0f}: other jobs ran beside it)")
    return why


def keep_between_term(store, cache_dir: str, why_not: list[str] | None = None,
                      load: dict[str, Any] | None = None) -> tuple[Path, dict[str, Any]] | None:
    """Derive this machine's between-process term from the run's A/A process pairs and keep it in the cache, with
    the load the machine was under (`load`); None where the run had one process pair per problem (nothing to
    measure it from) or `why_not` says it is not sound (the term kept before, if any, stays)."""
    found = readings(store.records())
    if not found or why_not:
        return None
    meta = store.metadata()
    key = between.machine_key(meta.get("device") or "cpu", meta.get("gpus") or [], str(meta.get("torch")))
    entry = between.derive(found, store.run_id, key, str(meta.get("finished_at") or meta.get("started_at")))
    if load is not None:
        entry["load"] = load
    return between.save(cache_dir, key, entry), entry


def between_lines(entry: dict[str, Any], target: float) -> list[str]:
    """What calibrate says of the term it kept; a term that widens CIs beyond WIDE_FACTOR times the target is said
    loudly, with what to do about it."""
    modes = ", ".join(f"{mode} {v['rel_sd']:.2%} ({v['readings']} process pairs)" for mode, v in entry["modes"].items())
    busy = (entry.get("load") or {}).get("busy")
    lines = [f"between-process term for {entry['key']}: {modes}; one-process-pair runs here widen their CIs by it"
             + (" (kept with --busy-ok: the machine was busy while it was measured)" if busy else "")]
    widest = max((report.widening(v["rel_sd"]) for v in entry["modes"].values()), default=0.0)
    if target > 0 and widest > report.WIDE_FACTOR * target:
        lines.append(f"warning: this term widens every later one-process-pair CI here by up to +/-{widest:.1%}, "
                     f"{widest / target:.0f}x the target (+/-{target:.2%}); if the machine was busy, run calibrate "
                     f"again on a quiet one, or drop the term with: run_eval.py calibrate --forget")
    return lines


def not_kept_line(why_not: list[str]) -> str:
    return ("between-process term not kept (an unsound calibration; the term kept before, if any, stays): "
            + "; ".join(why_not))
