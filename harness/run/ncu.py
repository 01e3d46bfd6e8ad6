"""Nsight Compute (`ncu`) for `run_eval.py profile`: where it is, the command line a worker runs under, what its
output says went wrong, and each kernel's figures read back from a report (`ncu --import R --csv --page raw`).

No torch and no workers here (harness.run.profile drives those): each function takes what it needs, so the tests
run it on a machine without ncu or a GPU.

The metrics (Nsight Compute's names; the sections below hold them, and they are also asked for by name so that a
report always has them):
  gpu__time_duration.sum                                 the kernel's duration
  dram__throughput.avg.pct_of_peak_sustained_elapsed     DRAM throughput, % of peak (SpeedOfLight's "DRAM Throughput")
  sm__throughput.avg.pct_of_peak_sustained_elapsed       SM throughput, % of peak (SpeedOfLight's "Compute (SM)")
  sm__warps_active.avg.pct_of_peak_sustained_active      achieved occupancy (Occupancy's "Achieved Occupancy")
  launch__registers_per_thread                           registers per thread (LaunchStats)
"""
from __future__ import annotations

import csv
import io
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from harness.core.errors import UsageError
from harness.results.parts import KernelRow

SECTIONS = ("SpeedOfLight", "Occupancy", "LaunchStats")
METRICS = {"duration": "gpu__time_duration.sum",
           "dram_pct": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
           "sm_pct": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
           "occupancy_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
           "registers": "launch__registers_per_thread"}
# ncu talks to its target process over TCP on its default base port and the ports after it (one per connection):
# the worker's sandbox opens exactly these to it (harness.worker.sandbox, KB_NCU).
BASE_PORT, PORT_COUNT = 49152, 64

MISSING = ("profile: ncu (Nsight Compute) not found on PATH; install the CUDA toolkit's nsight-compute or run on "
           "the GPU image")
NO_CUDA = "profile needs a CUDA GPU"
NO_COUNTERS = ("profile: ncu may not read the GPU's performance counters (ERR_NVGPUCTRPERM); run as root or set "
               "NVreg_RestrictProfilingToAdminUsers=0")

# Duration units as ncu writes them in the units row, in microseconds.
_TIME_UNITS = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3,
               "second": 1e6, "s": 1e6}
_NAME_COLUMNS = ("Kernel Name", "Function Name", "Name")

Runner = Callable[..., subprocess.CompletedProcess]


class ProfileUnavailable(UsageError):
    """Profiling cannot happen on this machine (no ncu, no GPU, no access to the counters): one line, exit 2."""


@dataclass(frozen=True)
class Ncu:
    path: str
    version: str | None


def locate(path_env: str | None = None, run: Runner = subprocess.run) -> Ncu:
    """ncu on PATH (`path_env`: a PATH to search instead), with its version line; ProfileUnavailable when absent."""
    found = shutil.which("ncu", path=path_env)
    if found is None:
        raise ProfileUnavailable(MISSING)
    return Ncu(found, version(found, run))


def version(path: str, run: Runner = subprocess.run) -> str | None:
    """`ncu --version`'s last line (e.g. 'Version 2025.3.0.0 (build ...)'), or None when it does not answer."""
    try:
        done = run([path, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [line.strip() for line in (done.stdout or "").splitlines() if line.strip()]
    return lines[-1][:200] if done.returncode == 0 and lines else None


def options() -> list[str]:
    """ncu's options for one worker, without its report path: the worker process alone (not what it starts), no
    kernel profiled until the worker's cudaProfilerStart (messages.NcuRequest), the three sections and the metrics
    by name. Caches are flushed before each kernel's replay and the clocks held at base (ncu's defaults, said
    here so that the record says them)."""
    return ["--target-processes", "application-only", "--profile-from-start", "off", "--cache-control", "all",
            "--clock-control", "base", *[word for section in SECTIONS for word in ("--section", section)],
            "--metrics", ",".join(METRICS.values())]


def launch_argv(ncu: str, report: Path) -> list[str]:
    """What a worker's command line goes after (workerproc.Worker's `wrapper`): ncu writing `report`."""
    return [ncu, *options(), "--export", str(report), "--force-overwrite"]


def import_argv(ncu: str, report: Path) -> list[str]:
    """The command that prints a report's kernels as CSV: one row per kernel, a header row and a units row."""
    return [ncu, "--import", str(report), "--csv", "--page", "raw", "--metrics", ",".join(METRICS.values())]


def diagnose(output: str) -> str | None:
    """One line for what went wrong in ncu's output (a worker's log: ncu writes there), or None: counters not
    permitted (NO_COUNTERS), ncu's last ==ERROR== line, or that it profiled no kernel."""
    if "ERR_NVGPUCTRPERM" in output:
        return NO_COUNTERS
    errors = [line.split("==ERROR==", 1)[1].strip() for line in output.splitlines() if "==ERROR==" in line]
    if errors:
        return f"ncu: {errors[-1][:300]}"
    if "No kernels were profiled" in output:
        return "ncu: no kernels were profiled in the call"
    return None


def read_report(ncu: str, report: Path, run: Runner = subprocess.run, timeout: float = 300) -> list[KernelRow]:
    """The kernels of a report (ProfileUnavailable for NO_COUNTERS; ValueError, in one line, for anything else)."""
    try:
        done = run(import_argv(ncu, report), capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError) as exc:
        raise ValueError(f"ncu --import {report.name}: {exc}") from None
    if done.returncode != 0:
        said = diagnose(f"{done.stdout}\n{done.stderr}")
        if said == NO_COUNTERS:
            raise ProfileUnavailable(said)
        last = [line for line in f"{done.stderr}\n{done.stdout}".splitlines() if line.strip()]
        raise ValueError(said or f"ncu --import {report.name} exited {done.returncode}: "
                                 f"{last[-1].strip()[:300] if last else '(no output)'}")
    return parse_raw_csv(done.stdout)


def parse_raw_csv(text: str) -> list[KernelRow]:
    """The kernels in `ncu --csv --page raw` output: lines before the header row (==PROF== and the like) skipped, the
    header row (ID, ..., Kernel Name, ..., one column per metric), a units row when the row after it has no ID,
    then one row per kernel. A value ncu left empty or 'n/a' reads as None; thousands separators are dropped."""
    rows = list(csv.reader(io.StringIO(text)))
    start = next((i for i, row in enumerate(rows) if "ID" in row and any(n in row for n in _NAME_COLUMNS)), None)
    if start is None:
        raise ValueError("ncu's CSV has no header row (ID, Kernel Name, ...)")
    header = rows[start]
    column = {name: i for i, name in enumerate(header)}
    name_at = next(column[n] for n in _NAME_COLUMNS if n in column)
    body = rows[start + 1:]
    units: list[str] = []
    if body and _cell(body[0], column["ID"]) == "":
        units, body = body[0], body[1:]
    at = {key: column.get(metric) for key, metric in METRICS.items()}
    scale = _TIME_UNITS.get(_cell(units, at["duration"]).strip().lower(), 1e-3) if units else 1e-3
    kernels = []
    for row in body:
        if len(row) < len(header) or not _cell(row, column["ID"]).strip():
            continue                                    # a blank or cut line
        duration = _number(_cell(row, at["duration"]))
        registers = _number(_cell(row, at["registers"]))
        kernels.append(KernelRow(
            name=_cell(row, name_at), duration_us=None if duration is None else duration * scale,
            dram_pct=_number(_cell(row, at["dram_pct"])), sm_pct=_number(_cell(row, at["sm_pct"])),
            occupancy_pct=_number(_cell(row, at["occupancy_pct"])),
            registers=None if registers is None else int(round(registers))))
    return kernels


def _cell(row: list[str], index: int | None) -> str:
    return row[index] if index is not None and index < len(row) else ""


def _number(text: str) -> float | None:
    cleaned = text.strip().replace(",", "")
    if not cleaned or cleaned.lower() in ("n/a", "nan", "-"):
        return None
    try:
        value = float(cleaned)
    except ValueError:
        return None
    return value if value == value and abs(value) != float("inf") else None
