#!/usr/bin/env python3
"""The shipped candidates' speedups, from one run of the suite made of many run folders: a report, not a test.

A suite run with `--processes 3` and the torch.compile baseline takes longer than one device command, so one run of
the suite is several run folders (`gpu_check.sh suite`, split by LEVEL and continued with RESUME). This reads their
records (through the store's one reader), keeps one record per pair (the latest run's, by run id), and prints the
rows of docs/candidates-h200.md's tables: problem, candidate, status, speedup vs eager and vs torch.compile, each
with its 95% CI, rounds and flags. With --against (an earlier run's folders), each pair's two readings side by side
and issue 8's criterion for two runs of the shipped candidates, each speedup inside the other run's CI, vs eager and
vs torch.compile; beside it z, the change over its own standard error (the two CIs combined), and how many pairs
exact CIs would give on each count (compare.Agreement says why the first is 83% per pair, not 95%).

    python scripts/candidate_table.py RUN_DIR... [--against RUN_DIR...]

Always exits 0 unless an argument is unusable (exit 2, one line).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from harness.commands.compare import Agreement, agreement, latest_records, resolve_run  # noqa: E402
from harness.core.errors import UsageError  # noqa: E402
from harness.results.records import Record  # noqa: E402

Key = tuple[str, str]                                           # (problem, solution)


def latest(runs: list[str]) -> dict[Key, Record]:
    """(problem, solution) -> its record in the latest run (by run id) that has one."""
    return latest_records(resolve_run(spec, Path(".")) for spec in runs)


def _reading(value: float | None, ci: tuple[float, float] | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else f"{value:.3f}"


def markdown_row(r: Record) -> str:
    rounds = r.timing.rounds if r.timing and "rounds" in r.raw["timing"] else "-"
    return (f"| {r.problem} | {r.solution.rsplit('/', 1)[-1]} | {r.status.value} | "
            f"{_reading(r.speedup, r.speedup_ci)} | {_reading(r.speedup_vs_compile, r.speedup_vs_compile_ci)} | "
            f"{rounds} | {', '.join(r.flags) or '-'} |")


def _word(held: Agreement | None) -> str:
    return "- | -" if held is None else f"{'yes' if held.inside else 'no'} | {held.z:+.1f}"


def _summary(name: str, held: list[Agreement | None]) -> str:
    """One side's counts: inside each other's CIs against what exact CIs would give, and apart beyond the
    difference's own CI against the 5% expected by chance."""
    read = [h for h in held if h is not None]
    inside = sum(h.inside for h in read)
    expected = sum(h.p_inside for h in read)
    apart = sum(h.apart for h in read)
    return (f"vs {name}: {inside} of {len(read)} inside each other's CIs ({expected:.1f} expected if the CIs are "
            f"exact), {apart} apart beyond their combined CI (|z| > 1.96; {0.05 * len(read):.1f} expected by "
            f"chance), {len(held) - len(read)} without a reading")


def against_rows(table: dict[Key, Record], earlier: dict[Key, Record]) -> tuple[list[str], list[str]]:
    """The side-by-side rows of the pairs ok in both runs (each side: the two readings, the change, whether each
    lies inside the other's CI, z), and the summary lines."""
    common = sorted(k for k in set(table) & set(earlier) if table[k].ok and earlier[k].ok)
    rows, eager, compiled = [], [], []
    for k in common:
        a, b = earlier[k], table[k]
        e = agreement(a.speedup, a.speedup_ci, b.speedup, b.speedup_ci)
        c = agreement(a.speedup_vs_compile, a.speedup_vs_compile_ci, b.speedup_vs_compile, b.speedup_vs_compile_ci)
        eager.append(e)
        compiled.append(c)
        change = f"{b.speedup / a.speedup - 1:+.1%}" if a.speedup and b.speedup else "-"
        rows.append(f"| {k[0]} | {k[1].rsplit('/', 1)[-1]} | {_reading(a.speedup, a.speedup_ci)} | "
                    f"{_reading(b.speedup, b.speedup_ci)} | {change} | {_word(e)} | "
                    f"{_reading(a.speedup_vs_compile, a.speedup_vs_compile_ci)} | "
                    f"{_reading(b.speedup_vs_compile, b.speedup_vs_compile_ci)} | {_word(c)} |")
    lines = [f"{len(common)} pairs ok in both runs", _summary("eager", eager), _summary("torch.compile", compiled)]
    only = sorted(set(table) ^ set(earlier))
    if only:
        lines.append(f"in one run only: {len(only)} pairs")
    return rows, lines


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run folders of the suite (or their results.jsonl)")
    p.add_argument("--against", nargs="+", default=[], metavar="RUN_DIR", help="an earlier run's folders")
    args = p.parse_args(argv)
    try:
        table = latest(args.runs)
        earlier = latest(args.against) if args.against else {}
    except UsageError as exc:
        print(f"candidate_table: {exc}", file=sys.stderr)
        return 2
    for key in sorted(table):
        print(markdown_row(table[key]))
    ok = sum(r.ok for r in table.values())
    print(f"\n{len(table)} pairs, {ok} ok")
    if earlier:
        rows, lines = against_rows(table, earlier)
        print()
        print("\n".join(rows))
        print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
