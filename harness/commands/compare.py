"""`run_eval.py compare RUN_A RUN_B`: what changed between two runs, pair by pair.

Pairs are matched by (problem, solution). Two correct pairs are compared by the 95% confidence intervals of their
speedups (nvbench's compare, on ratios): FASTER when B's interval lies entirely above A's, SLOWER when entirely
below, else SAME. A record without an interval (schema 1, or a v2 record that has none) gets
[s / (1 + tol), s * (1 + tol)] around its speedup s. With a minimum change m (`--min-change`), FASTER and SLOWER
also need |B's speedup / A's - 1| > m; without one, a pair measured on the CPU needs more than CPU_MIN_CHANGE plus
how far its reference's own median moved between the runs (floor_for). A pair correct in only one run is FIXED (not
ok in A, ok in B) or BROKEN (ok in A, not ok in B); a pair failing in both is FAILING; a pair in one run only is
ONLY_A or ONLY_B.
Exit code 1 when any pair is SLOWER or BROKEN (for CI), 0 otherwise, 2 for a usage error.

A speedup's CI covers the run it comes from, not the machine (docs/candidates-h200.md): so `compare` also says
when the runs' GPUs differ (by the uuids in run.json), or when it cannot tell; only then, as a weaker hint, when
their hosts launch at different speeds (the records' median `timing.timer_floor_ms`).

Everything but `add_arguments` and `main` is a pure function over lists of `Record`s (as read_records gives
them)."""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable

from harness.core.errors import UsageError
from harness.core.numbers import number
from harness.results.records import Record
from harness.results import report
from harness.core.untrusted import ReadError, load_json, read_run_file, show_name

SAME, FASTER, SLOWER = "SAME", "FASTER", "SLOWER"
FIXED, BROKEN, FAILING = "FIXED", "BROKEN", "FAILING"
ONLY_A, ONLY_B = "ONLY_A", "ONLY_B"
VERDICTS = (SLOWER, BROKEN, FASTER, FIXED, SAME, FAILING, ONLY_A, ONLY_B)
GATING = (SLOWER, BROKEN)                 # verdicts that make the exit code 1
DEFAULT_TOLERANCE = 0.02
# Timer floors further apart than this (relative) are named, where GPU uuids cannot tell the machines apart: a weak
# hint, since the processes of one machine can read timer floors far apart (docs/measurements.md).
FLOOR_APART = 0.25
# The CPU path's noise floor (README: The CPU path's defaults). On a shared CPU an A/A pair's reading moves by a few
# percent from run to run, more than its CI says, so the CI rule alone calls some A/A run pairs FASTER or SLOWER; a
# candidate's speedup moves with its reference's own median (a memory-bound reference slowed by other processes'
# memory traffic while a compute-bound candidate is not), and a run's median of round ratios can lie far from the
# ratio of its sides' medians. Without --min-change, a pair measured on the CPU in either run reads FASTER or SLOWER
# only when its change exceeds CPU_MIN_CHANGE (about 2 sd of two A/A readings' difference) plus how far the
# reference's own median moved plus the larger estimator gap of the two records. The runs this rule was chosen on,
# and their figures: docs/measurements.md.
CPU_MIN_CHANGE = 0.08

_STYLE = {SLOWER: "bold red", BROKEN: "bold red", FASTER: "green", FIXED: "green", SAME: "", FAILING: "dim",
          ONLY_A: "yellow", ONLY_B: "yellow"}


@dataclass(frozen=True)
class Side:
    """One run's view of a pair."""
    status: str
    speedup: float | None
    ci: tuple[float, float] | None        # the interval the verdict used
    ci_source: str | None                 # "record" (the record's speedup_ci) | "tolerance" (none in the record)
    speedup_vs_compile: float | None
    flags: tuple[str, ...]
    ranked: bool = False                  # harness.core.ranking's decision, as every output reads it


@dataclass(frozen=True)
class SizeChange:
    """One declared input size of a pair (or `geomean`, the geometric mean over the timed sizes) in both runs: its
    speedups, the change and the verdict by their CIs (as a pair's; shown, never gating the exit code)."""
    size: str
    a: float | None
    a_ci: tuple[float, float] | None
    b: float | None
    b_ci: tuple[float, float] | None
    change: float | None
    verdict: str


@dataclass(frozen=True)
class Row:
    problem: str
    solution: str
    verdict: str
    a: Side | None
    b: Side | None
    change: float | None                  # B's speedup / A's speedup - 1, when both have one
    floor: float = 0.0                    # the least |change| FASTER / SLOWER needed (floor_for)
    sizes: tuple[SizeChange, ...] = ()    # problems with several sizes, correct in both runs: per size

    @property
    def candidate(self) -> str:
        return self.solution.rsplit("/", 1)[-1]

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        for key in ("a", "b"):
            if out[key] is not None:
                out[key]["ci"] = list(out[key]["ci"]) if out[key]["ci"] is not None else None
                out[key]["flags"] = list(out[key]["flags"])
        if not self.sizes:
            del out["sizes"]
        return out


def size_changes(a: Record, b: Record, floor: float) -> tuple[SizeChange, ...]:
    """Each size both records timed, and their geometric means, compared as pairs are (by_ci, then the floor)."""
    if not (a.ok and b.ok and a.sizes and b.sizes):
        return ()
    theirs = {s.name: s for s in b.sizes if s is not None}
    out = []
    for mine in (s for s in a.sizes if s is not None):
        other = theirs.get(mine.name)
        if other is not None:
            out.append(_size_change(str(mine.name), number(mine.speedup), _ci(mine.speedup_ci),
                                    number(other.speedup), _ci(other.speedup_ci), floor))
    if a.sizes_geomean is not None or b.sizes_geomean is not None:
        out.append(_size_change("geomean", a.sizes_geomean, None, b.sizes_geomean, None, floor))
    return tuple(out)


def _ci(value: Any) -> tuple[float, float] | None:
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        return None
    lo, hi = number(value[0]), number(value[1])
    return (lo, hi) if lo is not None and hi is not None and lo <= hi else None


def _size_change(name: str, a: float | None, a_ci: tuple[float, float] | None, b: float | None,
                 b_ci: tuple[float, float] | None, floor: float) -> SizeChange:
    change = b / a - 1 if a and b else None
    verdict = by_ci(a_ci, b_ci) if a_ci and b_ci else SAME
    if change is not None and abs(change) <= floor:
        verdict = SAME
    return SizeChange(name, a, a_ci, b, b_ci, change, verdict)


def record_ci(record: Record, tolerance: float) -> tuple[tuple[float, float] | None, str | None]:
    """(interval, source) for a record's speedup: its own speedup_ci when it has a sound one, else the tolerance
    band around the speedup; (None, None) without a positive speedup."""
    s = record.speedup
    if s is None or s <= 0:
        return None, None
    if record.speedup_ci is not None and record.speedup_ci[0] <= record.speedup_ci[1]:
        return record.speedup_ci, "record"
    return (s / (1 + tolerance), s * (1 + tolerance)), "tolerance"


def side(record: Record, tolerance: float) -> Side:
    ci, source = record_ci(record, tolerance)
    return Side(record.status.value, record.speedup, ci, source, record.speedup_vs_compile, record.flags,
                record.ranked)


def by_ci(a: tuple[float, float] | None, b: tuple[float, float] | None) -> str:
    """FASTER when b lies entirely above a, SLOWER when entirely below, else (overlap or unknown) SAME."""
    if a is None or b is None:
        return SAME
    if b[0] > a[1]:
        return FASTER
    if b[1] < a[0]:
        return SLOWER
    return SAME


def reference_median(record: Record | None) -> float | None:
    """The reference's own median time in a record (timing.reference.median_ms), or None."""
    median = record.median_ms("reference") if record is not None else None
    return float(median) if median is not None and median > 0 else None


def reference_drift(a: Record | None, b: Record | None) -> float:
    """How far the reference's own median moved from A to B (|B / A - 1|; 0 when either lacks one): the same code
    in both runs, so what the machine did between them."""
    ma, mb = reference_median(a), reference_median(b)
    return abs(mb / ma - 1) if ma and mb else 0.0


def estimator_gap(record: Record | None) -> float:
    """How far a record's speedup (the median of its rounds' ratios) lies from the ratio of its two sides' medians,
    |speedup / (reference median / candidate median) - 1|; 0 when it lacks them. Two estimates from the same
    samples: they part when the rounds were not alike (stretches of rounds with one side slowed), which the CI,
    built on independent rounds, does not see."""
    median = reference_median(record)
    candidate = record.median_ms("candidate") if record is not None else None
    if not median or candidate is None or candidate <= 0 or not record.speedup:
        return 0.0
    return abs(record.speedup / (median / candidate) - 1)


def floor_for(a: Record | None, b: Record | None, min_change: float | None) -> float:
    """The least |change| FASTER/SLOWER need: --min-change when given; else, when either record was measured on
    the CPU, CPU_MIN_CHANGE plus the reference's own drift between the runs plus the larger estimator gap of the
    two; else 0."""
    if min_change is not None:
        return min_change
    if any(r is not None and r.device.startswith("cpu") for r in (a, b)):
        return CPU_MIN_CHANGE + reference_drift(a, b) + max(estimator_gap(a), estimator_gap(b))
    return 0.0


def compare_pair(a: Record | None, b: Record | None,
                 tolerance: float = DEFAULT_TOLERANCE, min_change: float | None = None) -> Row:
    if a is None and b is None:
        raise ValueError("compare_pair needs at least one record")
    key = a if a is not None else b
    sa = side(a, tolerance) if a is not None else None
    sb = side(b, tolerance) if b is not None else None
    change = None                         # only between two correct pairs: other speedups are not trusted
    if a is not None and b is not None and a.ok and b.ok and sa.speedup and sb.speedup:
        change = sb.speedup / sa.speedup - 1
    floor = floor_for(a, b, min_change) if a is not None and b is not None else 0.0
    if a is None:
        verdict = ONLY_B
    elif b is None:
        verdict = ONLY_A
    elif a.ok and b.ok:
        verdict = by_ci(sa.ci, sb.ci)
        if change is not None and abs(change) <= floor:
            verdict = SAME
    elif b.ok:
        verdict = FIXED
    elif a.ok:
        verdict = BROKEN
    else:
        verdict = FAILING
    sizes = size_changes(a, b, floor) if a is not None and b is not None else ()
    return Row(key.problem, key.solution, verdict, sa, sb, change, floor, sizes)


def _index(records: Iterable[Record]) -> dict[tuple[str, str], Record]:
    """(problem, solution) -> record; a later record of the same pair replaces an earlier one."""
    return {r.key: r for r in records}


def compare_runs(records_a: Iterable[Record], records_b: Iterable[Record],
                 tolerance: float = DEFAULT_TOLERANCE, min_change: float | None = None) -> list[Row]:
    a, b = _index(records_a), _index(records_b)
    return [compare_pair(a.get(k), b.get(k), tolerance, min_change) for k in sorted(a.keys() | b.keys())]


# ---------------------------------------------------------------- where the runs ran

@dataclass(frozen=True)
class Machine:
    """Where a run's pairs ran, as far as its files say: the uuids of the GPUs its records name (run.json's gpus,
    from nvidia-smi; None when run.json has none, as runs recorded before it listed them do not) and the median
    timer floor over its records (two CUDA events, or host clock reads, around an empty call: the host's speed)."""
    on_gpu: bool
    gpu_uuids: frozenset[str] | None
    timer_floor_ms: float | None


def machine_of(meta: dict[str, Any] | None, records: Iterable[Record]) -> Machine:
    records, meta = list(records), meta or {}
    config = meta.get("config") if isinstance(meta.get("config"), dict) else {}
    by_index = {g.get("index"): g.get("uuid") for g in meta.get("gpus") or [] if isinstance(g, dict)}
    if config.get("executor") == "dask":        # run.json lists the client's GPUs, not the dask workers'
        by_index = {}
    used = {by_index.get(r.gpu.index) for r in records if r.gpu}
    uuids = frozenset(used) if used and None not in used else None
    floors = [f for r in records if r.timing and (f := number(r.timing.timer_floor_ms)) is not None and f > 0]
    on_gpu = any(r.device.startswith("cuda") for r in records)
    return Machine(on_gpu, uuids, statistics.median(floors) if floors else None)


def machine_notes(a: Machine, b: Machine, names: tuple[str, str] = ("A", "B")) -> list[str]:
    """One line per way the two runs' machines differ, or cannot be told apart; [] when they look the same. The
    GPU uuids decide where both runs have them; the timer floors are named only where they do not."""
    na, nb = names
    notes = []
    told = a.on_gpu and b.on_gpu and a.gpu_uuids is not None and b.gpu_uuids is not None
    if told and a.gpu_uuids != b.gpu_uuids:
        notes.append(f"{na} and {nb} ran on different GPUs ({', '.join(sorted(a.gpu_uuids))} and "
                     f"{', '.join(sorted(b.gpu_uuids))})")
    elif a.on_gpu and b.on_gpu and not told:   # (a CPU run has no GPU to tell apart)
        notes.append(f"cannot tell whether {na} and {nb} ran on the same GPUs (a run.json without GPU uuids)")
    fa, fb = a.timer_floor_ms, b.timer_floor_ms
    if not told and fa and fb and max(fa, fb) / min(fa, fb) - 1 > FLOOR_APART:
        notes.append(f"the hosts may differ: timer floor {fa * 1000:.1f} us in {na}, {fb * 1000:.1f} us in {nb}")
    return notes


def machine_hint(min_change: float) -> str:
    """The line after machine_notes: what a difference of machines does to the verdicts."""
    if min_change:
        return f"a speedup's CI does not cover the machine: changes within {min_change:.1%} read SAME (--min-change)"
    return ("a speedup's CI does not cover the machine: a change the machines made reads as FASTER or SLOWER; "
            "--min-change 0.03 keeps one under 3% out of the verdicts")


def cpu_floor_note() -> str:
    return (f"pairs measured on the CPU read FASTER or SLOWER only past a change of {CPU_MIN_CHANGE:.0%} plus how far "
            f"the reference's own time moved between the runs (what one run's CI does not cover there; --min-change "
            f"sets a fixed floor instead)")


def counts(rows: Iterable[Row]) -> dict[str, int]:
    c = Counter(r.verdict for r in rows)
    return {v: c.get(v, 0) for v in VERDICTS}


def exit_code(rows: Iterable[Row]) -> int:
    return 1 if any(r.verdict in GATING for r in rows) else 0


def ranking_lines(runs: Iterable[tuple[str, str, list[Record]]]) -> list[str]:
    """Per run (its letter, name and records): the geomean and fast_p over its ranked pairs, as the run's own
    summary reads them (harness.core.ranking)."""
    return [f"{letter} {name}: {report.summary_lines(report.aggregate(records))[1]}"
            for letter, name, records in runs]


def summary_line(rows: list[Row]) -> str:
    c = counts(rows)
    shown = ", ".join(f"{k} {v}" for k, v in c.items() if v or k in (SAME, FASTER, SLOWER))
    return f"pairs {len(rows)}: {shown}"


# ---------------------------------------------------------------- rendering

def fmt_side(s: Side | None, with_ci: bool = True) -> str:
    """"1.23x [1.21, 1.25]"; "1.23x [?]" when the record had no CI (the --tolerance band was used); the status
    for a pair that is not ok (an invalid pair's speedup is not to be trusted)."""
    if s is None:
        return "(absent)"
    if s.status != "ok" or s.speedup is None:
        return s.status
    text = f"{s.speedup:.2f}x"
    if with_ci and s.ci is not None:
        text += f" [{s.ci[0]:.2f}, {s.ci[1]:.2f}]" if s.ci_source == "record" else " [?]"
    return text


def fmt_change(change: float | None) -> str:
    return "-" if change is None else f"{change:+.1%}"


HEADERS = ("problem", "candidate", "A speedup [CI]", "B speedup [CI]", "change", "verdict")


def table(rows: list[Row], title: str, width: int | None = None):
    """A rich table. Under 120 columns it is compact: one line per pair, names cut with an ellipsis (and, when
    even that does not fit, the speedups without their CIs)."""
    from rich import box
    from rich.table import Table
    from rich.text import Text
    from harness.results.report import COMPACT_BELOW, abbreviate_problem, split_names
    compact = width is not None and width < COMPACT_BELOW
    cells = [[r.problem, r.candidate, fmt_side(r.a), fmt_side(r.b), fmt_change(r.change), r.verdict] for r in rows]
    widths: list[int | None] = [None] * len(HEADERS)
    if compact:
        gap = 2                                         # SIMPLE_HEAD, collapsed padding: " " + pad

        def natural(i: int) -> int:
            return max([len(HEADERS[i]), *(len(c[i]) for c in cells)])

        fixed = sum(natural(i) for i in range(2, 6)) + gap * 5
        if fixed + 12 + 6 > width:
            for c, r in zip(cells, rows):
                c[2], c[3] = fmt_side(r.a, with_ci=False), fmt_side(r.b, with_ci=False)
            fixed = sum(natural(i) for i in range(2, 6)) + gap * 5
        problem_w, candidate_w = split_names(max(width - fixed, 0), natural(0), natural(1), 12, 6)
        widths = [problem_w, candidate_w, *(natural(i) for i in range(2, 6))]
        for c in cells:
            c[0], c[1] = abbreviate_problem(c[0], problem_w), abbreviate_problem(c[1], candidate_w)
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD if compact else box.HEAVY_HEAD,
              show_edge=not compact, pad_edge=not compact, collapse_padding=compact)
    for name, w in zip(HEADERS, widths):
        justify = "right" if name in HEADERS[2:5] else "left"
        if compact:
            t.add_column(name, justify=justify, width=w, no_wrap=True, overflow="ellipsis")
        else:
            t.add_column(name, justify=justify, overflow="fold")
    for c, r in zip(cells, rows):
        t.add_row(*(Text(show_name(v)) for v in c[:5]), Text(show_name(c[5]), style=_STYLE.get(r.verdict, "")))
    return t


def sizes_table(rows: list[Row], title: str, width: int | None = None):
    """A row per declared size (and the geometric mean) of each pair with sizes in both runs; within `width`
    columns, ids cut in their middle (harness.results.fit)."""
    from harness.results.fit import Col, table as fit_table
    cols = [Col("problem", cut="middle", least=12), Col("candidate", cut="middle", least=10), Col("size"),
            Col("A speedup [CI]", justify="right", keep=1), Col("B speedup [CI]", justify="right", keep=1),
            Col("change", justify="right"), Col("verdict")]
    cells = [[r.problem, r.candidate, s.size, _fmt_size(s.a, s.a_ci), _fmt_size(s.b, s.b_ci), fmt_change(s.change),
              s.verdict] for r in rows for s in r.sizes]
    verdicts = [s.verdict for r in rows for s in r.sizes]
    return fit_table(cols, cells, title, width, lambda row, col: _STYLE.get(verdicts[row], "") if col == 6 else None)


def _fmt_size(value: float | None, ci: tuple[float, float] | None) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}x" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")


# ---------------------------------------------------------------- the command

def resolve_run(spec: str, output_dir: Path) -> Path:
    """A run's results.jsonl from a run folder, a results.jsonl path, or a run id under output_dir."""
    path = Path(spec)
    if path.is_file() and path.suffix == ".jsonl":
        return path
    for folder in (path, output_dir / spec):    # a link there is named by read_records, never followed out
        if (folder / "results.jsonl").is_file() or (folder / "results.jsonl").is_symlink():
            return folder / "results.jsonl"
    raise UsageError(f"unknown run '{spec}': not a run folder, and no {output_dir / spec / 'results.jsonl'}")


def load_run(spec: str, output_dir: Path) -> tuple[str, list[Record]]:
    return load_results(resolve_run(spec, output_dir))


def run_meta(results: Path) -> dict[str, Any] | None:
    """The run.json beside a results.jsonl, or None where there is none or it does not parse."""
    try:
        meta = load_json(read_run_file(results.parent, "run.json") or b"null")
    except (ReadError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def latest_records(paths: Iterable[Path]) -> dict[tuple[str, str], Record]:
    """(problem, solution) -> its record in the latest of several runs' results.jsonl that has one (by run folder
    name, which starts with the run's start time): one reading per pair of a suite measured in many runs."""
    loaded = sorted((load_results(path) for path in paths), key=lambda named: named[0])
    return {record.key: record for _, records in loaded for record in records}


def inside_each_other(a: float | None, ci_a: tuple[float, float] | None,
                      b: float | None, ci_b: tuple[float, float] | None) -> bool | None:
    """Whether each of two readings lies inside the other's CI; None when either lacks a reading or a CI."""
    if a is None or b is None or ci_a is None or ci_b is None:
        return None
    return ci_b[0] <= a <= ci_b[1] and ci_a[0] <= b <= ci_a[1]


@dataclass(frozen=True)
class Agreement:
    """Two runs' readings of one speedup, each CI taken as a normal 95% interval on the log scale (its standard error
    is half its log width over 1.96). Each reading lies inside the other's CI only when the two differ by less than
    the narrower CI's half-width, so even two exact CIs of equal width both hold the other's reading only 83% of the
    time when nothing changed; the test that the runs agree is the difference against its own CI: |z| <= 1.96."""
    inside: bool                    # each reading inside the other's CI
    z: float                        # log(b / a) over the two standard errors combined
    p_inside: float                 # how often `inside` holds when the CIs are exact and nothing changed

    @property
    def apart(self) -> bool:
        """The two readings differ beyond their combined 95% CI (5% of pairs by chance alone)."""
        return abs(self.z) > 1.96


def agreement(a: float | None, ci_a: tuple[float, float] | None,
              b: float | None, ci_b: tuple[float, float] | None) -> Agreement | None:
    """The Agreement of two readings; None when either lacks a reading or a CI, or a value is not positive."""
    inside = inside_each_other(a, ci_a, b, ci_b)
    if inside is None or min(a, b, *ci_a, *ci_b) <= 0:
        return None
    half_a, half_b = (math.log(ci_a[1] / ci_a[0]) / 2, math.log(ci_b[1] / ci_b[0]) / 2)
    spread = math.hypot(half_a, half_b) / 1.96
    if spread == 0:
        return Agreement(inside, 0.0 if a == b else math.copysign(math.inf, b - a), 1.0)
    p_inside = math.erf(min(half_a, half_b) / (spread * math.sqrt(2)))
    return Agreement(inside, math.log(b / a) / spread, p_inside)


def load_results(path: Path) -> tuple[str, list[Record]]:
    """(run name, records) of a results.jsonl, through the store's one reader: lines are verified with the run's
    key, and a line that fails, or a second line for a pair, is named in a warning and left out."""
    from harness.results.store import read_records
    return path.parent.name, list(read_records(path))


def _tolerance(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (0 <= value < 1):
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {value}")
    return value


def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """`compare`'s description and arguments, on run_eval.py's subparser (or a parser of its own)."""
    p.description = ("Compare two runs pair by pair (matched by problem and candidate). Verdicts: FASTER / SLOWER "
                     "when B's speedup CI lies entirely above / below A's, else SAME; FIXED (not ok in A, ok in B), "
                     "BROKEN (ok in A, not ok in B), FAILING (not ok in both), ONLY_A / ONLY_B.")
    p.epilog = "Exit codes: 1 when any pair is SLOWER or BROKEN, 0 otherwise, 2 for a usage error."
    p.add_argument("run_a", metavar="RUN_A", help="the baseline: a run id under --output-dir, or a run folder")
    p.add_argument("run_b", metavar="RUN_B", help="the new run: a run id under --output-dir, or a run folder")
    p.add_argument("--output-dir", default=None, help="where run ids are looked up (default: output_dir in "
                                                      "config, or results)")
    p.add_argument("--config", type=Path, help="config file for the default --output-dir")
    p.add_argument("--tolerance", type=_tolerance, default=DEFAULT_TOLERANCE, metavar="TOL",
                   help="a record without a CI (schema 1) gets [s/(1+TOL), s*(1+TOL)] (default: 0.02)")
    p.add_argument("--min-change", type=_tolerance, default=None, metavar="FRAC",
                   help="FASTER / SLOWER also need the speedup to change by more than FRAC (default: 0; for a pair "
                        f"measured on the CPU, {CPU_MIN_CHANGE:g} plus how far the reference's own median moved "
                        "between the runs, which one run's CI does not cover there); between runs on different "
                        "machines, whose difference a CI does not cover, 0.03")
    p.add_argument("--json", action="store_true", help="print one JSON object per pair instead of a table")
    return p


def main(args: argparse.Namespace) -> int:
    """`run_eval.py compare RUN_A RUN_B`, parsed."""
    from harness.results.render import config_output_dir as _config_output_dir, wide_console
    if args.config is not None and not args.config.is_file():
        raise UsageError(f"{args.config}: no such config file")
    output_dir = Path(args.output_dir or _config_output_dir(args.config))
    paths = [resolve_run(spec, output_dir) for spec in (args.run_a, args.run_b)]     # both found before either is read
    (name_a, records_a), (name_b, records_b) = map(load_results, paths)
    rows = compare_runs(records_a, records_b, args.tolerance, args.min_change)
    notes = [] if paths[0].resolve() == paths[1].resolve() else \
        machine_notes(*(machine_of(run_meta(p), r) for p, r in zip(paths, (records_a, records_b))))
    notes += [machine_hint(args.min_change)] if notes else []
    notes += ranking_lines((("A", name_a, records_a), ("B", name_b, records_b)))
    if args.min_change is None and any(r.device.startswith("cpu") for r in (*records_a, *records_b)):
        notes.append(cpu_floor_note())
    if args.json:
        for r in rows:
            print(json.dumps(r.to_json()))
        for line in (*notes, summary_line(rows)):
            print(line, file=sys.stderr)
    else:
        console = wide_console()
        console.print(table(rows, f"compare A = {name_a}  B = {name_b}", width=console.width))
        if any(r.sizes for r in rows):
            console.print(sizes_table(rows, "input sizes (shown; the verdict above is the main size's)",
                                      console.width))
        for line in (*notes, summary_line(rows)):
            console.print(line, highlight=False)
    return exit_code(rows)
