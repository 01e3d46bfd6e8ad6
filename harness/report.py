"""Stage 7, report: pure functions over records (a results.jsonl), so any past run can be re-rendered."""
from __future__ import annotations

import math
from typing import Any, Iterable

FAST_P = (0.0, 1.0, 1.5, 2.0)
# Flags that make a timing or an output untrustworthy keep a pair out of fast_p and the geometric mean.
COUNTS_AS_CORRECT = ("ok",)


def _fmt_ms(stats: dict[str, Any] | None) -> str:
    if not stats or stats.get("median_ms") is None:
        return "-"
    return f"{stats['median_ms']:.3f}"


def _fmt_err(record: dict[str, Any]) -> str:
    c = record.get("correctness") or {}
    err = c.get("max_abs_err")
    return "-" if err is None else f"{err:.1e}"


def aggregate(records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    records = list(records)
    total = len(records)
    correct = [r for r in records if r.get("status") in COUNTS_AS_CORRECT and r.get("correct")]
    speedups = [r["speedup"] for r in correct if isinstance(r.get("speedup"), (int, float)) and r["speedup"] > 0]
    by_status: dict[str, int] = {}
    for r in records:
        by_status[r["status"]] = by_status.get(r["status"], 0) + 1
    return {
        "pairs": total,
        "correct": len(correct),
        "correctness_rate": len(correct) / total if total else 0.0,
        "geomean_speedup": math.exp(sum(math.log(s) for s in speedups) / len(speedups)) if speedups else None,
        "fast_p": {str(p): (sum(1 for s in speedups if s > p) / total if total else 0.0) for p in FAST_P},
        "by_status": dict(sorted(by_status.items())),
    }


def table(records: list[dict[str, Any]], title: str):
    from rich.table import Table
    t = Table(title=title, title_justify="left")
    for name, justify in (("problem", "left"), ("candidate", "left"), ("status", "left"), ("max err", "right"),
                          ("ref ms", "right"), ("cand ms", "right"), ("speedup", "right"), ("flags", "left"),
                          ("error", "left")):
        t.add_column(name, justify=justify, overflow="fold")
    style = {"ok": "green", "incorrect": "red", "skipped": "dim"}
    for r in sorted(records, key=lambda r: (r["problem"], r["solution"])):
        timing = r.get("timing") or {}
        speedup = r.get("speedup")
        t.add_row(r["problem"], r["solution"].rsplit("/", 1)[-1], f"[{style.get(r['status'], 'yellow')}]{r['status']}",
                  _fmt_err(r), _fmt_ms(timing.get("reference")), _fmt_ms(timing.get("candidate")),
                  "-" if speedup is None else f"{speedup:.2f}x", ",".join(r.get("flags") or []) or "",
                  (r.get("error") or "")[:160])
    return t


def summary_lines(agg: dict[str, Any]) -> list[str]:
    geo = agg["geomean_speedup"]
    fast = "  ".join(f"fast_{p}={v:.0%}" for p, v in agg["fast_p"].items())
    statuses = ", ".join(f"{k} {v}" for k, v in agg["by_status"].items())
    return [
        f"pairs {agg['pairs']}, correct {agg['correct']} ({agg['correctness_rate']:.0%}); statuses: {statuses}",
        f"geomean speedup over correct: {'-' if geo is None else f'{geo:.2f}x'};  {fast}",
    ]


def leaderboard(records: list[dict[str, Any]], run_id: str) -> str:
    """Markdown: the best correct candidate per problem."""
    best: dict[str, dict[str, Any]] = {}
    problems = sorted({r["problem"] for r in records})
    for r in records:
        if r.get("status") not in COUNTS_AS_CORRECT or not r.get("correct"):
            continue
        current = best.get(r["problem"])
        if current is None or (r.get("speedup") or 0) > (current.get("speedup") or 0):
            best[r["problem"]] = r
    lines = [f"# Leaderboard — run {run_id}", "", "| problem | best candidate | speedup | candidate ms | reference ms |",
             "| --- | --- | ---: | ---: | ---: |"]
    for pid in problems:
        r = best.get(pid)
        if r is None:
            lines.append(f"| {pid} | (no correct candidate) | - | - | - |")
            continue
        timing = r.get("timing") or {}
        speed = "-" if r.get("speedup") is None else f"{r['speedup']:.2f}x"
        lines.append(f"| {pid} | {r['solution'].rsplit('/', 1)[-1]} | {speed} | {_fmt_ms(timing.get('candidate'))} "
                     f"| {_fmt_ms(timing.get('reference'))} |")
    agg = aggregate(records)
    lines += ["", *[f"- {line}" for line in summary_lines(agg)], ""]
    return "\n".join(lines)
