"""The A/A test, built in: every selected problem's own Model, as a candidate (`class ModelNew(Model): pass`),
through the full candidate path against the reference. On a machine the harness can be trusted on, every
speedup reads 1.0 within `timing.target_rel_ci` and every CI contains 1.0."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable

from harness.core import flags
from harness.results import fit
from harness.results.fit import Col
from harness.core.discover import Candidate, Pair, Problem
from harness.run import between
from harness.results.records import Record, RecordLike, Status, as_records

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


def rows(records: Iterable[RecordLike], target: float) -> list[Row]:
    return [row(r, target) for r in sorted(as_records(records), key=lambda r: r.problem)]


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


def write(path: Path, run_id: str, target: float, table: list[Row]) -> None:
    path.write_text(json.dumps({"run_id": run_id, "target_rel_ci": target, **verdict(table),
                                "rows": [asdict(r) for r in table]}, indent=2) + "\n")


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


def readings(records: Iterable[RecordLike]) -> list[between.ProcessReading]:
    """Every `ok` A/A pair's process pairs, each with the CI of its own rounds."""
    found = []
    for r in as_records(records):
        processes = r.timing.processes if r.timing is not None else None
        if r.status is not Status.OK or not isinstance(processes, list):
            continue
        for p in processes:
            s, ci = p.speedup, p.speedup_ci
            if isinstance(s, (int, float)) and isinstance(ci, list) and len(ci) == 2 and s > 0 and ci[0] > 0:
                found.append(between.ProcessReading(r.problem, str(r.timing.mode), float(s), float(ci[0]),
                                                    float(ci[1])))
    return found


def keep_between_term(store, cache_dir: str) -> tuple[Path, dict[str, Any]] | None:
    """Derive this machine's between-process term from the run's A/A process pairs and keep it in the cache (None
    where the run had one process pair per problem: nothing to measure it from)."""
    found = readings(store.records())
    if not found:
        return None
    meta = store.metadata()
    key = between.machine_key(meta.get("device") or "cpu", meta.get("gpus") or [], str(meta.get("torch")))
    entry = between.derive(found, store.run_id, key, str(meta.get("finished_at") or meta.get("started_at")))
    return between.save(cache_dir, key, entry), entry


def between_lines(entry: dict[str, Any]) -> list[str]:
    modes = ", ".join(f"{mode} {v['rel_sd']:.2%} ({v['readings']} process pairs)" for mode, v in entry["modes"].items())
    return [f"between-process term for {entry['key']}: {modes}; one-process-pair runs here widen their CIs by it"]
