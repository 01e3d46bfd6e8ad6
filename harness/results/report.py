"""Stage 7, report: pure functions over records (a results.jsonl), so any past run can be re-rendered. They take
`Record`s, as RunStore.records() gives them (records.as_records types JSON objects from elsewhere)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from harness.shared.stats import geomean
from harness.core import flags, ranking
from harness.core.numbers import number
from harness.results.records import Record
from harness.core.untrusted import show_name

FAST_P = (0.0, 1.0, 1.5, 2.0)
CPU_EXAMPLES = "examples/cpu"           # problems and candidates that run on a machine without a GPU
CPU_HINT = (f"a tree that runs on the CPU: python run_eval.py --problems-dir {CPU_EXAMPLES}/problems "
            f"--solutions-dir {CPU_EXAMPLES}/solutions")

Records = Iterable[Record]


def _fmt_ms(median_ms: float | None) -> str:
    return "-" if median_ms is None else f"{median_ms:.3f}"


def _fmt_err(record: Record) -> str:
    err = number(record.correctness.max_abs_err, finite=False) if record.correctness else None
    return "-" if err is None else f"{err:.1e}"


@dataclass(frozen=True)
class Outcome:
    """What the counts read of one pair: its status, whether it is correct (`ok`), whether it is ranked
    (harness.core.ranking: correct, no flag keeps it off, not a control), its speedup and whether it is a
    control."""
    status: str
    correct: bool
    ranked: bool
    speedup: float | None
    control: bool = False


def aggregate(records: Records, calibrate: bool = False) -> dict[str, Any]:
    """Counts over records. `calibrate`: the records are a calibrate run's (all controls)."""
    return tally(outcome(r, calibrate) for r in records)


def outcome(record: Record, calibrate: bool = False) -> Outcome:
    """What the counts read of one record (harness.core.ranking decides `ranked`)."""
    return Outcome(record.status.value, record.ok, ranking.ranks(record.candidate, record.ok, record.flags, calibrate),
                   record.speedup, ranking.is_control(record.candidate, calibrate))


def tally(outcomes: Iterable[Outcome]) -> dict[str, Any]:
    """pairs, correct, correctness rate, ranked (harness.core.ranking), controls (correct or not), the geomean
    speedup and fast_p over the ranked ones (fast_p as a share of all pairs that are not controls), count per
    status."""
    outcomes = list(outcomes)
    total = sum(1 for o in outcomes if not o.control)
    correct = sum(1 for o in outcomes if o.correct)
    ranked = [o.speedup for o in outcomes if o.correct and o.ranked]
    speedups = [s for s in ranked if s is not None and s > 0]
    by_status: dict[str, int] = {}
    for o in outcomes:
        by_status[o.status] = by_status.get(o.status, 0) + 1
    return {
        "pairs": len(outcomes),
        "correct": correct,
        "correctness_rate": correct / len(outcomes) if outcomes else 0.0,
        "ranked": len(ranked),
        "controls": len(outcomes) - total,
        "correct_controls": sum(1 for o in outcomes if o.control and o.correct),
        "geomean_speedup": geomean(speedups),
        "fast_p": {str(p): (sum(1 for s in speedups if s > p) / total if total else 0.0) for p in FAST_P},
        "by_status": dict(sorted(by_status.items())),
    }


def fmt_ci(ci: Any) -> str | None:
    """"[lo, hi]" for a sound confidence interval, else None (schema 1 records have none: unknown)."""
    if not isinstance(ci, (list, tuple)) or len(ci) != 2:
        return None
    lo, hi = ci
    if number(lo) is None or number(hi) is None:
        return None
    return f"[{lo:.2f}, {hi:.2f}]"


def fmt_speedup(value: Any, ci: Any = None, with_ci: bool = True) -> str:
    """"1.23x [1.21, 1.25]"; "1.23x" without a CI; "-" without a speedup."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return "-"
    text = f"{value:.2f}x"
    interval = fmt_ci(ci) if with_ci else None
    return f"{text} {interval}" if interval else text


def _has_compile(records: list[Record]) -> bool:
    return any(r.speedup_vs_compile is not None for r in records)


def abbreviate(text: str, limit: int) -> str:
    """text cut to `limit` characters, the cut marked with an ellipsis."""
    if len(text) <= limit:
        return text
    return text[: max(0, limit - 1)] + "\u2026" if limit > 0 else ""


def abbreviate_problem(problem: str, limit: int) -> str:
    """"<level>/<NNN>_<name>" within `limit` characters, cut in its middle so that its number and the end of its
    name, which tell problems apart, survive (harness.results.fit.elide_middle)."""
    from harness.results.fit import elide_middle
    return elide_middle(problem, limit)


def split_names(room: int, problem: int, candidate: int, problem_min: int, candidate_min: int) -> tuple[int, int]:
    """Widths for the problem and candidate columns within `room` characters: their natural widths when both fit,
    else 3:2, never under the minimums, never over the natural widths."""
    if problem + candidate <= room:
        return problem, candidate
    c = min(candidate, max(candidate_min, room * 2 // 5))
    p = min(problem, max(problem_min, room - c))
    return p, min(candidate, max(candidate_min, room - p))


COMPACT_BELOW = 120         # console width under which the table is compact


def table(records: Records, title: str, width: int | None = None):
    """The run's table. `width` is the console's width: under COMPACT_BELOW columns the table is compact (no max
    err, no ref/cand ms, names abbreviated, one line per row); None or wider keeps every column."""
    from rich.table import Table
    from rich.text import Text
    records = sorted(records, key=lambda r: r.key)
    compile_col = _has_compile(records)
    style = {"ok": "green", "incorrect": "red", "skipped": "dim"}
    if width is not None and width < COMPACT_BELOW:
        return _compact_table(records, title, width, compile_col, style)
    t = Table(title=title, title_justify="left")
    columns = [("problem", "left"), ("candidate", "left"), ("status", "left"), ("max err", "right"),
               ("ref ms", "right"), ("cand ms", "right"), ("speedup [95% CI]", "right")]
    if compile_col:
        columns.append(("vs compile [95% CI]", "right"))
    columns += [("flags", "left"), ("error", "left")]
    for name, justify in columns:
        t.add_column(name, justify=justify, overflow="fold")
    for r in records:
        row = [_text(r.problem), _text(r.candidate), Text(r.status.value, style=style.get(r.status.value, "yellow")),
               _fmt_err(r), _fmt_ms(r.median_ms("reference")), _fmt_ms(r.median_ms("candidate")),
               fmt_speedup(r.speedup, r.speedup_ci)]
        if compile_col:
            row.append(fmt_speedup(r.speedup_vs_compile, r.speedup_vs_compile_ci))
        row += [_flags_text(r), _text((r.error or "")[:160])]
        t.add_row(*row)
    return t


SIZES_COLUMNS = ("problem", "candidate", "size", "shape", "trials", "speedup [95% CI]", "geomean over sizes")


def sizes_table(records: Records, title: str, width: int | None = None):
    """The pairs of problems that declare several input sizes, a row per size (its shape, trials passed, speedup
    where timed) and the pair's geometric mean over its timed sizes; None when no record has sizes. Within `width`
    columns the shape and trials go first (harness.results.fit)."""
    from harness.results.fit import Col, table as fit_table
    rows = [(r, size) for r in sorted(records, key=lambda r: r.key) for size in r.sizes or ()
            if size is not None]
    if not rows:
        return None
    cols = [Col("problem", cut="middle", least=12), Col("candidate", cut="middle", least=10), Col("size"),
            Col("shape", keep=3, cut="end", least=10), Col("trials", keep=2, justify="right"),
            Col("speedup [95% CI]", justify="right", cut="end", least=16),
            Col("geomean over sizes", keep=1, justify="right")]
    cells = []
    for r, size in rows:
        trials = f"{size.trials_passed}/{size.trials}" if size.trials is not None else "-"
        note = f" ({size.error})" if size.error and size.speedup is None else ""
        cells.append([r.problem, r.candidate, f"{size.name}{' (main)' if size.main else ''}", str(size.shape or ""),
                      trials, fmt_speedup(size.speedup, size.speedup_ci) + abbreviate(note, 60),
                      fmt_speedup(r.sizes_geomean) if size.main else ""])
    return fit_table(cols, cells, title, width)


def _text(value: str):
    """A table cell of text read from a record: control characters (an ANSI escape in an error message, a
    newline in a name) shown escaped, never sent to the terminal."""
    from rich.text import Text
    return Text(show_name(value))


def _flags_text(record: Record):
    from rich.text import Text
    text = Text()
    for i, flag in enumerate(record.flags):
        if i:
            text.append(",")
        text.append(flag, style="yellow" if flags.ranks([flag]) else "bold yellow")   # bold: off the ranking
    return text


def _compact_table(records: list[Record], title: str, width: int, compile_col: bool,
                   style: dict[str, str]):
    """One line per record within `width`: problem, candidate, status, speedup [CI], then (where room is left)
    speedup vs compile, flags and the error. Names are cut to fit with an ellipsis; no cell ever wraps."""
    from rich import box
    from rich.table import Table
    from rich.text import Text
    gap = 2                                             # SIMPLE_HEAD, collapsed padding: " " + pad
    cells: dict[str, list[str]] = {
        "problem": [r.problem for r in records],
        "candidate": [r.candidate for r in records],
        "status": [r.status.value for r in records],
        "speedup [CI]": [fmt_speedup(r.speedup, r.speedup_ci) for r in records],
        "vs compile": [fmt_speedup(r.speedup_vs_compile, None) for r in records],
        "flags": [",".join(r.flags) for r in records],
        "error": [" ".join((r.error or "").split()) for r in records],
    }

    def natural(name: str) -> int:
        return max([len(name), *map(len, cells[name])])

    names_min = {"problem": min(natural("problem"), 14), "candidate": min(natural("candidate"), 8)}

    def used(ws: dict[str, int]) -> int:
        return sum(ws.values()) + gap * (len(ws) - 1)

    widths = {name: natural(name) for name in ("status", "speedup [CI]")}
    if used({**widths, **names_min}) > width:           # very narrow: the speedup without its CI
        cells["speedup [CI]"] = [fmt_speedup(r.speedup, None) for r in records]
        widths["speedup [CI]"] = natural("speedup [CI]")
    optional = [("flags", min(natural("flags"), 12))] if any(cells["flags"]) else []
    if compile_col:
        optional.append(("vs compile", natural("vs compile")))
    for name, w in optional:                            # keep an optional column only when the names still fit
        if used({**widths, **names_min, name: w}) <= width:
            widths[name] = w
    rest = width - used({**widths, "problem": 0, "candidate": 0})
    widths["problem"], widths["candidate"] = split_names(rest, natural("problem"), natural("candidate"),
                                                         names_min["problem"], names_min["candidate"])
    error_room = width - used(widths) - gap
    if any(cells["error"]) and error_room >= 12:
        widths["error"] = min(natural("error"), error_room)
    order = [n for n in ("problem", "candidate", "status", "speedup [CI]", "vs compile", "flags", "error")
             if n in widths]
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
              padding=(0, 1), collapse_padding=True)
    for name in order:
        t.add_column(name, justify="right" if name in ("speedup [CI]", "vs compile") else "left",
                     width=widths[name], no_wrap=True, overflow="ellipsis")
    for i, r in enumerate(records):
        row = []
        for name in order:
            w = widths[name]
            if name == "problem":
                row.append(_text(abbreviate_problem(cells[name][i], w)))
            elif name == "status":
                row.append(Text(abbreviate(cells[name][i], w), style=style.get(r.status.value, "yellow")))
            elif name == "flags":
                cell = _flags_text(r)
                cell.truncate(w, overflow="ellipsis")
                row.append(cell)
            elif name == "candidate":
                row.append(_text(abbreviate_problem(cells[name][i], w)))
            else:
                row.append(_text(abbreviate(cells[name][i], w)))
        t.add_row(*row)
    return t


# A calibrated between-process term whose widening (1.96 rel_sd, harness.run.between) is more than WIDE_FACTOR times
# the target half-width is said when calibrate keeps it and named under every table whose CIs it widens.
WIDE_FACTOR = 3.0


def widening(rel_sd: float) -> float:
    """How far a between-process term alone widens a 95% CI on the log scale, as a fraction."""
    return 1.96 * rel_sd


def calibration_date(term: Mapping[str, Any]) -> str:
    """The date of the calibration a record's timing.between_process names: its measured_at, else the date in its
    run id (`calibrate 20261128-...`), else the run id itself."""
    when = str(term.get("measured_at") or "")
    if len(when) >= 10 and when[4] == "-":
        return when[:10]
    run = str(term.get("source") or "").removeprefix("calibrate ")
    return f"{run[:4]}-{run[4:6]}-{run[6:8]}" if len(run) >= 8 and run[:8].isdigit() else run


def widening_lines(records: Records, target: float | None) -> list[str]:
    """"CI widened by calibration of DATE: +/-X% (N pairs; ...)": one line per calibrated term that widened some of
    the records' CIs by more than WIDE_FACTOR times `target` (the run's target_rel_ci); none without a target."""
    if not target or target <= 0:
        return []
    wide: dict[tuple[str, float], int] = {}
    for r in records:
        term = getattr(r.timing, "between_process", None) if r.timing is not None else None
        rel_sd = number(term.get("rel_sd")) if isinstance(term, dict) else None
        if rel_sd is None or not str(term.get("source") or "").startswith("calibrate"):
            continue
        if widening(rel_sd) > WIDE_FACTOR * target:
            key = (calibration_date(term), round(widening(rel_sd), 4))
            wide[key] = wide.get(key, 0) + 1
    return [f"CI widened by calibration of {date}: +/-{extra:.1%} ({n} pair{'s' if n != 1 else ''}, "
            f"{extra / target:.0f}x the target +/-{target:.1%}; run_eval.py calibrate --forget drops the term)"
            for (date, extra), n in sorted(wide.items())]


def never_built(record: Record) -> bool:
    """A `skipped` pair whose candidate was never built (CUDA or Triton code on a machine without a GPU): the
    table leaves it to unbuilt_lines."""
    return record.status.value == "skipped" and (record.build is None or record.build.status == "skipped")


def unbuilt_lines(records: Records) -> list[str]:
    """For the pairs never_built: one line with their count per problem family (the level), then the hint that
    names a tree that runs on the CPU; none when there are none."""
    skipped = [r for r in records if never_built(r)]
    if not skipped:
        return []
    families: dict[str, int] = {}
    for r in skipped:
        family = r.problem.split("/", 1)[0]
        families[family] = families.get(family, 0) + 1
    counts = ", ".join(f"{family} {n}" for family, n in sorted(families.items()))
    return [f"skipped, never built (candidates that hold CUDA code, where there is no GPU): {len(skipped)} "
            f"pairs: {counts}", CPU_HINT]


def summary_lines(agg: dict[str, Any]) -> list[str]:
    geo = agg["geomean_speedup"]
    fast = "  ".join(f"fast_{p}={v:.0%}" for p, v in agg["fast_p"].items())
    statuses = ", ".join(f"{k} {v}" for k, v in agg["by_status"].items())
    ranked, controls = agg.get("ranked", agg["correct"]), agg.get("controls", 0)
    return [
        f"pairs {agg['pairs']}, correct {agg['correct']} ({agg['correctness_rate']:.0%}); statuses: {statuses}",
        f"geomean speedup over {ranked} ranked{_unranked_note(agg)}: {'-' if geo is None else f'{geo:.2f}x'};  "
        f"{fast}" + (f" (of {agg['pairs'] - controls} pairs, controls aside)" if controls else ""),
    ]


def _unranked_note(agg: dict[str, Any]) -> str:
    """" (2 controls, 1 correct but flagged off the ranking)": the pairs that are not ranked and why, where the
    counts say (a correct control is neither flagged nor ranked)."""
    controls = agg.get("controls", 0)
    flagged = agg["correct"] - agg.get("ranked", agg["correct"]) - agg.get("correct_controls", 0)
    parts = [f"{controls} control{'s' if controls != 1 else ''} never ranked"] if controls else []
    parts += [f"{flagged} correct but flagged off the ranking"] if flagged > 0 else []
    return f" ({', '.join(parts)})" if parts else ""


def best_ranked(records: list[Record]) -> dict[str, Record]:
    """Per problem, the ranked record (ok, no flag keeps it off the ranking) with the highest speedup."""
    best: dict[str, Record] = {}
    for r in records:
        current = best.get(r.problem)
        if r.ranked and (current is None or (r.speedup or 0) > (current.speedup or 0)):
            best[r.problem] = r
    return best


def _no_best(records: list[Record], pid: str) -> str:
    """The candidate cell of a problem without a ranked record: the correct ones flagged off it, with their flags."""
    flagged = [r for r in records if r.problem == pid and r.ok and not r.control]
    if not flagged:
        controls = any(r.problem == pid and r.control for r in records)
        return "(no correct candidate; controls are never ranked)" if controls else "(no correct candidate)"
    named = ", ".join(f"{r.candidate}: {', '.join(flags.unranked(r.flags))}" for r in flagged)
    return f"(no ranked candidate; correct but flagged: {named})"


def leaderboard(records: Records, run_id: str) -> str:
    """Markdown: the best ranked candidate per problem (correct, and no flag keeps it off: harness.core.flags). A
    problem whose correct candidates are all flagged off the ranking names them, with their flags, and no speedup."""
    records = list(records)
    best = best_ranked(records)
    problems = sorted({r.problem for r in records})
    compile_col = _has_compile(records)
    header = "| problem | best candidate | speedup [95% CI] |" + (" vs torch.compile [95% CI] |" if compile_col else "")
    header += " candidate ms | reference ms | flags |"
    lines = [f"# Leaderboard — run {run_id}", "", header,
             "| --- | --- | ---: |" + (" ---: |" if compile_col else "") + " ---: | ---: | --- |"]
    for pid in problems:
        r = best.get(pid)
        if r is None:
            lines.append(f"| {pid} | {_no_best(records, pid)} | - |" + (" - |" if compile_col else "") + " - | - | |")
            continue
        cells = [pid, r.candidate, fmt_speedup(r.speedup, r.speedup_ci)]
        if compile_col:
            cells.append(fmt_speedup(r.speedup_vs_compile, r.speedup_vs_compile_ci))
        cells += [_fmt_ms(r.median_ms("candidate")), _fmt_ms(r.median_ms("reference")), ", ".join(r.flags)]
        lines.append("| " + " | ".join(cells) + " |")
    agg = aggregate(records)
    lines += ["", *[f"- {line}" for line in summary_lines(agg)], ""]
    lines += _sizes_markdown([best[pid] for pid in problems if pid in best])
    return "\n".join(lines)


def _sizes_markdown(records: list[Record]) -> list[str]:
    """The leaderboard's best candidates at each declared input size (problems with several sizes)."""
    rows = [(r, size) for r in records for size in r.sizes or () if size is not None]
    if not rows:
        return []
    lines = ["## Input sizes of the best candidates", "",
             "| problem | candidate | size | shape | trials | speedup [95% CI] | geomean over sizes |",
             "| --- | --- | --- | --- | ---: | ---: | ---: |"]
    for r, size in rows:
        trials = f"{size.trials_passed}/{size.trials}" if size.trials is not None else "-"
        shape = str(size.shape or "").replace("|", "/")
        lines.append(f"| {r.problem} | {r.candidate} | {size.name}{' (main)' if size.main else ''} | {shape} | "
                     f"{trials} | {fmt_speedup(size.speedup, size.speedup_ci)} | "
                     f"{fmt_speedup(r.sizes_geomean) if size.main else ''} |")
    return lines + [""]


CSV_COLUMNS = ("problem", "solution", "status", "correct", "speedup", "speedup_ci_lo", "speedup_ci_hi",
               "speedup_vs_compile", "candidate_median_ms", "reference_median_ms", "flags", "error",
               "sizes_geomean", "sizes", "ranked")


def _csv_number(value: Any) -> Any:
    """A finite number as it is, anything else (None, a NaN written as a string) empty."""
    return value if number(value) is not None else ""


def csv_rows(records: Records) -> list[list[Any]]:
    """One row per record, in CSV_COLUMNS order, sorted like the table (problem, solution); `ranked` is
    harness.core.ranking's decision (controls never)."""
    rows = []
    for r in sorted(records, key=lambda r: r.key):
        lo, hi = r.speedup_ci or (None, None)
        rows.append([r.problem, r.solution, r.status.value, "true" if r.correct else "false",
                     _csv_number(r.speedup), _csv_number(lo), _csv_number(hi), _csv_number(r.speedup_vs_compile),
                     _csv_number(r.median_ms("candidate")), _csv_number(r.median_ms("reference")),
                     ";".join(r.flags), " ".join((r.error or "").split()), _csv_number(r.sizes_geomean),
                     _csv_sizes(r.sizes), "true" if r.ranked else "false"])
    return rows


def _csv_sizes(sizes) -> str:
    """Per declared size, `name=speedup` where it was timed, `name=incorrect` where its trials failed, `name=ok`
    else, joined by `;` (empty for a problem with one size)."""
    def one(size) -> str:
        if not size.correct:
            return f"{size.name}=incorrect"
        return f"{size.name}={size.speedup:.6g}" if number(size.speedup) is not None else f"{size.name}=ok"
    return ";".join(one(size) for size in sizes or ())


def write_csv(records: Records, stream) -> None:
    import csv
    writer = csv.writer(stream, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    writer.writerows(csv_rows(records))
