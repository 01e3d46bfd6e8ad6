"""The between-process term of a one-process-pair CI (timing.between_process).

Two processes running the same code differ by a bias of their own that no number of rounds inside one pair averages
away (harness.run.paired.combine): a pair measured in one process pair (`timing.processes: 1`, the default) has a CI
from its rounds alone, which missed 1.0 for far more than 5% of A/A pairs (docs/measurements.md). Each such CI is
widened on the log scale by a term for that bias:

    half = sqrt(half_rounds**2 + (1.96 * rel_sd)**2)

`rel_sd` is measured once per machine by `run_eval.py calibrate` (A/A pairs in several process pairs each): the
smallest spread that makes at least COVERAGE of its process pairs' single-process CIs hold 1.0, per timing mode and
per problem, kept in the cache (`<cache_dir>/between_process.json`) under the machine's key (GPU or CPU model,
driver, torch). Where calibrate has not run on this machine, DEFAULT_REL_SD applies. Every record that uses a term
says which (`timing.between_process`: its rel_sd, source and scope), and keeps the rounds' own CI
(`timing.speedup_ci_rounds`)."""
from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from harness.core.atomic import write_json_atomic
from harness.run.paired import Estimate

FILE = "between_process.json"
COVERAGE = 0.975                # of the calibrating process pairs' CIs; above 0.95 so that a new pair meets 95%
Z95 = 1.96
# Before this machine is calibrated: about what the A/A passes showed between process pairs, per mode (GPU-bound
# cold calls spread least, launch-bound graph ones and the CPU path more): docs/measurements.md.
DEFAULT_REL_SD = {"cold": 0.006, "graph": 0.015, "host": 0.02}
# A mode calibrated from fewer process pairs than this never reads below its default: three readings that all held
# 1.0 (a one-problem calibrate, as the GPU tests run) say 0%, which no default run should trust.
MIN_READINGS = 30


# A calibration is kept only when it is sound (calibrate.soundness): every problem in at least MIN_PROCESS_PAIRS
# process pairs of at least the run's min_rounds rounds each, its own A/A rows all `ok`, and the machine quiet.
MIN_PROCESS_PAIRS = 3


@dataclass(frozen=True)
class Term:
    rel_sd: float               # the sd of log(speedup) between process pairs
    source: str                 # "calibrate <run id>" or "default"
    scope: str                  # "problem" (this problem's own calibration) | "mode" (its timing mode's) | "default"
    measured_at: str | None = None      # when the calibration ran (calibrate's run)

    def record(self) -> dict[str, Any]:
        out = {"rel_sd": round(self.rel_sd, 6), "source": self.source, "scope": self.scope}
        return {**out, "measured_at": self.measured_at} if self.measured_at else out


def widen(est: Estimate, term: Term | None) -> Estimate:
    """`est` (one process pair's rounds) with the between-process term added to its log-scale half-width."""
    if term is None or term.rel_sd <= 0 or est.value <= 0 or est.lo <= 0:
        return est
    lo, hi = math.log(est.lo / est.value), math.log(est.hi / est.value)
    extra = (Z95 * term.rel_sd) ** 2
    return Estimate(est.value, est.value * math.exp(-math.sqrt(lo * lo + extra)),
                    est.value * math.exp(math.sqrt(hi * hi + extra)), est.rounds)


def machine_key(device: str, gpu_list: list[dict[str, Any]], torch_version: str) -> str:
    if device == "cpu" or not gpu_list:
        return f"cpu | {_cpu_model()} | torch {torch_version}"
    gpu = gpu_list[0]
    return f"{gpu.get('name')} | driver {gpu.get('driver')} | torch {torch_version}"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown cpu"


@dataclass(frozen=True)
class Terms:
    """What a run knows of this machine: the calibrated terms (or none) and the defaults."""
    key: str
    calibrated: dict[str, Any] | None           # the cache entry for `key`

    def for_pair(self, problem: str, mode: str) -> Term:
        default = DEFAULT_REL_SD.get(mode, max(DEFAULT_REL_SD.values()))
        entry = self.calibrated
        if entry:
            source, when = f"calibrate {entry.get('run_id')}", entry.get("measured_at")
            when = str(when) if when else None
            by_problem = (entry.get("problems") or {}).get(problem) or {}
            by_mode = (entry.get("modes") or {}).get(mode) or {}
            own, pooled = by_problem.get("rel_sd"), by_mode.get("rel_sd")
            if isinstance(pooled, (int, float)) and (by_mode.get("readings") or 0) < MIN_READINGS:
                pooled = max(float(pooled), default)        # too few process pairs to go below the default
            if isinstance(own, (int, float)) and by_problem.get("mode") == mode:
                return Term(max(float(own), float(pooled if pooled is not None else default)), source, "problem",
                            when)
            if isinstance(pooled, (int, float)):
                return Term(float(pooled), source, "mode", when)
        return Term(default, "default", "default")


def load(cache_dir: str | Path, key: str) -> Terms:
    """The terms for `key` from the cache (a missing or unreadable file: the defaults)."""
    try:
        entries = json.loads((Path(cache_dir) / FILE).read_text())
        entry = entries.get(key) if isinstance(entries, dict) else None
    except (OSError, ValueError):
        entry = None
    return Terms(key, entry if isinstance(entry, dict) else None)


def save(cache_dir: str | Path, key: str, entry: dict[str, Any]) -> Path:
    """Store `entry` under `key` (other machines' entries are kept); atomic."""
    path = Path(cache_dir) / FILE
    try:
        entries = json.loads(path.read_text())
        entries = entries if isinstance(entries, dict) else {}
    except (OSError, ValueError):
        entries = {}
    entries[key] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, entries)
    return path


def forget(cache_dir: str | Path, key: str) -> dict[str, Any] | None:
    """Remove `key`'s entry from the cache (other machines' entries are kept); the entry removed, or None when
    there was none."""
    path = Path(cache_dir) / FILE
    try:
        entries = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(entries, dict) or key not in entries:
        return None
    entry = entries.pop(key)
    write_json_atomic(path, entries)
    return entry if isinstance(entry, dict) else {}


# ---------------------------------------------------------------- measuring it (calibrate)


@dataclass(frozen=True)
class ProcessReading:
    """One A/A process pair's speedup and the CI of its own rounds."""
    problem: str
    mode: str
    speedup: float
    lo: float
    hi: float
    rounds: int | None = None


def thin_problems(readings: Iterable[ProcessReading], problems: Iterable[str], min_rounds: int) -> list[str]:
    """The problems with fewer than MIN_PROCESS_PAIRS process pairs of at least `min_rounds` rounds each."""
    counts: dict[str, int] = {p: 0 for p in problems}
    for r in readings:
        if r.rounds is None or r.rounds >= min_rounds:
            counts[r.problem] = counts.get(r.problem, 0) + 1
    return sorted(p for p, n in counts.items() if n < MIN_PROCESS_PAIRS)


def needed_sd(readings: Iterable[ProcessReading], coverage: float = COVERAGE) -> float:
    """The smallest rel_sd with which at least `coverage` of the readings' widened CIs hold 1.0 (A/A: the truth)."""
    needs = sorted(_need(r) for r in readings)
    if not needs:
        return 0.0
    k = min(len(needs) - 1, max(0, math.ceil(coverage * len(needs)) - 1))
    return needs[k]


def _need(r: ProcessReading) -> float:
    """The rel_sd this one reading needs for its widened CI to hold 1.0."""
    if r.speedup <= 0 or r.lo <= 0:
        return math.inf
    miss = -math.log(r.speedup)                       # log(1 / speedup): where 1.0 lies from the estimate
    half = math.log(r.hi / r.speedup) if miss > 0 else math.log(r.speedup / r.lo)
    if abs(miss) <= half:
        return 0.0
    return math.sqrt(miss * miss - half * half) / Z95


def derive(readings: list[ProcessReading], run_id: str, key: str, measured_at: str) -> dict[str, Any]:
    """The cache entry from calibrate's readings: per timing mode (pooled) and per problem."""
    modes: dict[str, Any] = {}
    for mode in sorted({r.mode for r in readings}):
        mine = [r for r in readings if r.mode == mode]
        modes[mode] = {"rel_sd": round(needed_sd(mine), 6), "readings": len(mine),
                       "problems": len({r.problem for r in mine})}
    problems: dict[str, Any] = {}
    for problem in sorted({r.problem for r in readings}):
        mine = [r for r in readings if r.problem == problem]
        logs = [math.log(r.speedup) for r in mine if r.speedup > 0]
        problems[problem] = {"rel_sd": round(max(_need(r) for r in mine), 6), "mode": mine[0].mode,
                             "readings": len(mine),
                             "spread": round(statistics.pstdev(logs), 6) if len(logs) > 1 else None}
    return {"key": key, "run_id": run_id, "measured_at": measured_at, "coverage": COVERAGE, "modes": modes,
            "problems": problems}
