"""What the HTML pages show, worked out from records (no HTML here): a record flattened to a `Pair`, which pairs are
controls, the verdict of a speedup against 1.0, the standings across runs (each metric from the newest record that
has it, with its run) and each problem's best over the runs.

Controls never rank (never a problem's best, never in the geometric mean or fast_p): a candidate named `aa_*` or
`control_*` and every pair of a calibrate run. Whether a pair ranks is harness.core.ranking's call, the one every
output reads."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterable

from harness.core import flags as flag_table, ranking
from harness.core.numbers import number
from harness.results.records import Record
from harness.results.report import Outcome

SKIPPED = "skipped"
is_calibrate_run = ranking.is_calibrate_run


def compile_modes(meta: dict[str, Any]) -> list[str] | None:
    """The torch.compile baseline modes the run measured ([] when off), or None when run.json does not say."""
    modes = _dict(_dict(_dict(meta).get("config")).get("timing")).get("compile_modes")
    return [str(m) for m in modes] if isinstance(modes, list) else None


def interval(ci: Any) -> tuple[float, float] | None:
    """A sound [lo, hi] as floats, else None."""
    if not isinstance(ci, (list, tuple)) or len(ci) != 2:
        return None
    lo, hi = (number(x) for x in ci)
    return (lo, hi) if lo is not None and hi is not None and lo <= hi else None


def verdict(value: float | None, ci: Any) -> str | None:
    """Against 1.0: `faster` (the CI entirely above 1), `slower` (entirely below), `same` (it contains 1); None
    without a value or a CI (a schema 1 record: no verdict can be read off one number)."""
    bounds = interval(ci)
    if value is None or bounds is None:
        return None
    return "faster" if bounds[0] > 1.0 else "slower" if bounds[1] < 1.0 else "same"


@dataclass(frozen=True)
class SizeRow:
    """One of a pair's declared input sizes (the record's `sizes`), as the pages show it."""
    name: str
    main: bool
    shape: str
    trials_passed: int | None
    trials: int | None
    correct: bool
    speedup: float | None
    speedup_ci: Any
    error: str

    @classmethod
    def from_part(cls, part: Any) -> "SizeRow":
        def whole(value: Any) -> int | None:
            return value if isinstance(value, int) and not isinstance(value, bool) else None
        return cls(name=str(part.name), main=part.main is True, shape=str(part.shape or ""),
                   trials_passed=whole(part.trials_passed), trials=whole(part.trials), correct=part.correct is True,
                   speedup=number(part.speedup), speedup_ci=part.speedup_ci, error=str(part.error or ""))


@dataclass(frozen=True)
class Pair:
    """One record, flattened to what the pages show; a missing or malformed field becomes None / empty.
    `compile_run` / `perf_run` name the run vs-torch.compile / the roofline figures come from when that is not
    `run_id` (the standings borrow them from an earlier record of the pair)."""
    problem: str
    candidate: str
    status: str
    speedup: float | None
    speedup_ci: Any
    vs_compile: float | None
    vs_compile_ci: Any
    pct_bandwidth: float | None
    pct_flops: float | None
    floor_ms: float | None
    candidate_ms: float | None
    flags: tuple[str, ...]
    error: str
    gpu: str | None
    run_id: str = ""
    calibrate: bool = False                 # a pair of a calibrate run: a control whatever its name
    compile_run: str | None = None
    perf_run: str | None = None
    sizes: tuple[SizeRow, ...] = ()         # problems that declare several sizes: one row per size
    sizes_geomean: float | None = None

    @property
    def key(self) -> tuple[str, str]:
        return self.problem, self.candidate

    @property
    def correct(self) -> bool:
        return self.status == "ok"

    @property
    def skipped(self) -> bool:
        return self.status == SKIPPED

    @property
    def control(self) -> bool:
        return ranking.is_control(self.candidate, self.calibrate)

    @property
    def flag_ranked(self) -> bool:
        """Correct, and no flag keeps it off the ranking (harness.core.flags)."""
        return self.correct and flag_table.ranks(self.flags)

    @property
    def ranked(self) -> bool:
        """May be a problem's best and counts in the geomean and fast_p (harness.core.ranking)."""
        return ranking.ranks(self.candidate, self.correct, self.flags, self.calibrate)

    @property
    def has_perf(self) -> bool:
        return self.pct_bandwidth is not None or self.pct_flops is not None

    @property
    def outcome(self) -> Outcome:
        """What report.tally counts."""
        return Outcome(self.status, self.correct, self.ranked, self.speedup, self.control)

    @classmethod
    def from_record(cls, r: Record) -> "Pair":
        perf = r.performance
        return cls(problem=r.problem, candidate=r.candidate, status=r.status.value, speedup=r.speedup,
                   speedup_ci=r.speedup_ci, vs_compile=r.speedup_vs_compile, vs_compile_ci=r.speedup_vs_compile_ci,
                   pct_bandwidth=number(perf.pct_of_peak_bandwidth) if perf else None,
                   pct_flops=number(perf.pct_of_peak_flops) if perf else None,
                   floor_ms=number(perf.floor_ms) if perf else None,
                   candidate_ms=number(r.median_ms("candidate")), flags=r.flags,
                   error=" ".join((r.error or "").split()), gpu=_gpu_name(r.gpu.name if r.gpu else None),
                   run_id=r.run_id or "",
                   sizes=tuple(SizeRow.from_part(p) for p in r.sizes or () if p is not None),
                   sizes_geomean=r.sizes_geomean)


def pairs_of(records: Iterable[Record] | None, run_id: str = "", calibrate: bool = False) -> list[Pair]:
    """A Pair per record. `run_id` fills in a record's missing run_id; in a calibrate run every pair is a control."""
    out = []
    for record in records or []:
        p = Pair.from_record(record)
        out.append(replace(p, run_id=p.run_id or run_id, calibrate=p.calibrate or calibrate))
    return out


@dataclass(frozen=True)
class Run:
    run_id: str
    meta: dict[str, Any]
    pairs: list[Pair]

    @property
    def calibrate(self) -> bool:
        return is_calibrate_run(self.meta)

    @classmethod
    def of(cls, run_id: str, meta: Any, records: Iterable[Record] | None) -> "Run":
        meta = _dict(meta)
        return cls(run_id, meta, pairs_of(records, run_id, is_calibrate_run(meta)))


def merge(older: Pair | None, newer: Pair) -> Pair:
    """A pair's standing after `newer` given its standing `older`: the newer record, except that a skipped record
    does not replace a measured one, and a ranked newer record that lacks vs-torch.compile or the roofline figures
    takes them from the older one when that was ranked too (its run named in compile_run / perf_run)."""
    if older is None:
        return newer
    if newer.skipped and not older.skipped:
        return older
    if not (newer.flag_ranked and older.flag_ranked):
        return newer
    if newer.vs_compile is None and older.vs_compile is not None:
        newer = replace(newer, vs_compile=older.vs_compile, vs_compile_ci=older.vs_compile_ci,
                        compile_run=older.compile_run or older.run_id)
    if not newer.has_perf and older.has_perf:
        newer = replace(newer, pct_bandwidth=older.pct_bandwidth, pct_flops=older.pct_flops,
                        floor_ms=older.floor_ms, candidate_ms=older.candidate_ms,
                        perf_run=older.perf_run or older.run_id)
    return newer


def standings(runs: Iterable[Run]) -> list[Pair]:
    """Each (problem, candidate)'s standing over `runs` (oldest first; merge): what the suite reads now when runs
    cover parts of it (a level at a time, a CI job, a resumed run, one with compile baselines off)."""
    table: dict[tuple[str, str], Pair] = {}
    for run in runs:
        for pair in run.pairs:
            table[pair.key] = merge(table.get(pair.key), pair)
    return [table[key] for key in sorted(table)]


STATUS_RANK = ("ok", "invalid", "incorrect", "runtime_error", "timeout", "oom", "load_error", "compile_error",
               "crashed", "skipped")


def best_per_problem(pairs: list[Pair]) -> dict[str, Pair]:
    """Per problem, sorted: the ranked pair with the highest speedup, else the best attempt (a correct pair that is
    not ranked, else the status nearest ok). Only a ranked pair is a problem's best (`Pair.ranked`); a problem with
    controls only is left out (controls have a section of their own)."""
    def key(p: Pair) -> tuple[int, int, int, float]:
        rank = STATUS_RANK.index(p.status) if p.status in STATUS_RANK else len(STATUS_RANK)
        return (int(p.control), 0 if p.ranked else 1 if p.correct else 2, rank, -(p.speedup or 0.0))
    best: dict[str, Pair] = {}
    for p in pairs:
        if p.problem not in best or key(p) < key(best[p.problem]):
            best[p.problem] = p
    return {k: v for k, v in sorted(best.items()) if not v.control}


@dataclass(frozen=True)
class BestPoint:
    """A problem's best ranked pair as of one run; `measured` when that run measured it (else carried over)."""
    run_id: str
    pair: Pair
    measured: bool


def best_history(runs: list[Run]) -> dict[str, list[BestPoint]]:
    """Per problem, its best ranked pair after each run (oldest first), from the standings as of that run: a run
    that did not measure the previous best (a run of other candidates, a calibrate run, a skipped record) keeps it,
    so the line drops only when a measurement does. A run before the problem had a ranked pair has no point."""
    history: dict[str, list[BestPoint]] = {}
    table: dict[tuple[str, str], Pair] = {}
    for run in runs:
        for pair in run.pairs:
            table[pair.key] = merge(table.get(pair.key), pair)
        for problem, best in best_per_problem(list(table.values())).items():
            if best.ranked and best.speedup is not None:
                history.setdefault(problem, []).append(BestPoint(run.run_id, best, best.run_id == run.run_id))
    return dict(sorted(history.items()))


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _gpu_name(name: Any) -> str | None:
    """A record's gpu.name as text, or None."""
    return str(name) if name else None
