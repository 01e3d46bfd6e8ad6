#!/usr/bin/env python3
"""One A/A pass over a suite, put together from the calibrate runs that measured it: a report, not a test.

A whole-suite `run_eval.py calibrate` on one GPU takes longer than one device command, so a pass is many runs
(`gpu_check.sh calibrate` with SELS=...). This reads their records (each run folder's results.jsonl, through the
store's one reader), keeps one reading per problem (the latest run's, by run id), and prints the rows of
docs/calibration-h200.md's tables (problem, tree, speedup, 95% CI, each process pair's speedup, rounds, verdict)
and the pass's verdict against issue 8's criteria: |speedup - 1| <= target for at least 95% of problems, and 1.0
inside every problem's CI (blocked as stricter than one process pair's spread allows: the `spread` line), and against
issue 44's: within the target for at least 80%. With --against, the same problems' readings in an earlier pass: how
many have each reading inside the other's CI, and the ones that do not.

    python scripts/calibration_table.py RUN_DIR... [--tree LABEL] [--against RUN_DIR...] [--target 0.005]

Always exits 0 unless an argument is unusable (exit 2, one line).
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from harness.commands import calibrate  # noqa: E402
from harness.commands.compare import inside_each_other, latest_records, resolve_run  # noqa: E402
from harness.core.errors import UsageError  # noqa: E402
from harness.results.records import Record  # noqa: E402

SHARE_WITHIN = 0.95         # issue 8: at least this share of problems within the target
SHARE_WITHIN_44 = 0.80       # issue 44 item 8: the staged path's A/A may not fall below this share within the target


@dataclass(frozen=True)
class Reading:
    row: calibrate.Row
    pairs: list[float]                          # each process pair's speedup (timing.processes)
    rounds_half: float | None = None            # the rounds' own CI half-width, relative (timing.speedup_ci_rounds)


def readings(runs: list[str], target: float) -> dict[str, Reading]:
    """problem -> its reading in the latest run (by run id) that has one."""
    records = latest_records(resolve_run(spec, Path(".")) for spec in runs).values()
    return {record.problem: Reading(calibrate.row(record, target), _pairs(record), _rounds_half(record))
            for record in records}


def _rounds_half(record: Record) -> float | None:
    ci = getattr(record.timing, "speedup_ci_rounds", None) if record.timing else None
    if not isinstance(ci, list) or len(ci) != 2 or not record.speedup or record.speedup <= 0:
        return None
    return (ci[1] - ci[0]) / 2 / record.speedup


def _pairs(record: Record) -> list[float]:
    processes = (record.timing.processes if record.timing else None) or []
    return [p.speedup for p in processes if isinstance(p.speedup, (int, float))]


def verdict_word(r: calibrate.Row) -> str:
    if r.status != "ok" or r.speedup is None:
        return r.status
    word = "ok" if r.good else "miss"
    return f"{word}, noisy" if r.noisy else word


def markdown_row(reading: Reading, tree: str) -> str:
    r = reading.row
    if r.speedup is None:
        return f"| {r.problem} | {tree} | - | - | - | - | {verdict_word(r)} |"
    ci = f"[{r.ci[0]:.4f}, {r.ci[1]:.4f}]" if r.ci else "-"
    pairs = ", ".join(f"{s:.4f}" for s in reading.pairs) or "-"
    return f"| {r.problem} | {tree} | {r.speedup:.4f} | {ci} | {pairs} | {r.rounds} | {verdict_word(r)} |"


def summary(table: dict[str, Reading], target: float) -> list[str]:
    rows = [x.row for x in table.values()]
    v = calibrate.verdict(rows)
    n = v["problems"]
    lines = [f"{n} problems: {v['within_target']} within 1.000 +/- {target:.1%} "
             f"({v['within_target'] / n:.1%}), 1.0 inside the CI for {v['one_inside_ci']}, not ok {v['not_ok']}"
             if n else "no problems"]
    speedups = [r.speedup for r in rows if r.speedup and r.speedup > 0]
    if len(speedups) > 1:
        logs = [math.log(s) for s in speedups]
        lines.append(f"geometric mean {math.exp(statistics.fmean(logs)):.4f}, sd {statistics.stdev(logs):.2%}; "
                     f"{sum(s > 1 for s in speedups)} above 1, {sum(s < 1 for s in speedups)} below")
    lines += spread(table, target)
    if n:
        holds = v["within_target"] >= SHARE_WITHIN * n and v["one_inside_ci"] == n
        lines.append(f"issue 8's criteria (>= {SHARE_WITHIN:.0%} within, 1.0 inside every CI): "
                     f"{'hold' if holds else 'do not hold'}")
        lines.append(f"issue 44's criterion (>= {SHARE_WITHIN_44:.0%} within): "
                     f"{'holds' if v['within_target'] >= SHARE_WITHIN_44 * n else 'does not hold'}")
    return lines


def spread(table: dict[str, Reading], target: float) -> list[str]:
    """Where an A/A pass's scatter comes from: the rounds' own standard error (from each CI of the rounds alone)
    against the readings' observed spread around 1.0 (robust: 1.4826 x the median distance from 1.0, so that a few
    outlying process pairs do not set it); what is left is the bias of each process pair, which more rounds cannot
    shrink. Then what share of readings a normal spread of that size puts within the target, and how many process
    pairs a reading would need for 95% of them to fall there."""
    ok = [x for x in table.values() if x.row.speedup and x.rounds_half is not None]
    if len(ok) < 3:
        return []
    within = statistics.fmean(x.rounds_half for x in ok) / 1.96
    rms = math.sqrt(statistics.fmean((x.row.speedup - 1) ** 2 for x in ok))
    robust = 1.4826 * statistics.median(abs(x.row.speedup - 1) for x in ok)
    between = math.sqrt(max(0.0, robust ** 2 - within ** 2))
    share = math.erf(target / (robust * math.sqrt(2))) if robust > 0 else 1.0
    needed = (target / 1.96) ** 2 - within ** 2
    pairs = "never (the rounds alone are too wide)" if needed <= 0 else \
        f"{max(1, math.ceil(between ** 2 / needed))} process pair(s)"
    return [f"spread: the rounds' own standard error {within:.2%}; readings around 1.0 {robust:.2%} (robust; rms "
            f"{rms:.2%}), so between process pairs {between:.2%}; a normal spread that wide puts {share:.0%} "
            f"within +/-{target:.1%}; 95% within it takes {pairs} a reading"]


def against(table: dict[str, Reading], earlier: dict[str, Reading]) -> list[str]:
    common = sorted(set(table) & set(earlier))
    apart = [p for p in common if not inside_each_other(earlier[p].row.speedup, earlier[p].row.ci,
                                                        table[p].row.speedup, table[p].row.ci)]
    lines = [f"against the earlier pass: {len(common) - len(apart)} of {len(common)} problems read inside each "
             f"other's CI"]
    for p in apart:
        a, b = earlier[p].row, table[p].row
        lines.append(f"  {p}: {_fmt(a)} then {_fmt(b)}")
    return lines


def _fmt(r: calibrate.Row) -> str:
    if r.speedup is None or not r.ci:
        return r.status
    return f"{r.speedup:.4f} [{r.ci[0]:.4f}, {r.ci[1]:.4f}]"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="calibrate run folders (or their results.jsonl)")
    p.add_argument("--against", nargs="+", default=[], metavar="RUN_DIR", help="an earlier pass's run folders")
    p.add_argument("--tree", default="-", help="the tree column's label (the commit the pass ran on)")
    p.add_argument("--target", type=float, default=0.005, help="timing.target_rel_ci of the runs (default 0.005)")
    args = p.parse_args(argv)
    try:
        table = readings(args.runs, args.target)
        earlier = readings(args.against, args.target) if args.against else {}
    except UsageError as exc:
        print(f"calibration_table: {exc}", file=sys.stderr)
        return 2
    for problem in sorted(table):
        print(markdown_row(table[problem], args.tree))
    print()
    print("\n".join(summary(table, args.target)))
    if earlier:
        print("\n".join(against(table, earlier)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
