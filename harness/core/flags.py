"""Every flag the harness can put on a record, in one table (README, Hardening: "Flags").

A flag is one row: its name (the word in a record's `flags`), what it means (the default `flag_details` text),
whether it invalidates (the pair becomes `invalid`: its output or timing cannot be trusted), whether it is
load-sensitive (a burst of load on a shared machine can raise it too, so a pair whose invalidating flags are all
such is measured once more; schedule) and whether a correct pair carrying it is ranked (may be a problem's best
and counts in the geometric mean and fast_p). Everything that decides on flags reads this table; nothing else
lists flag names. Pure data and functions: no torch, no processes, no other harness module."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True)
class Flag:
    """One flag. `retry` only for invalidating flags; an invalidating flag is never ranked (the pair is not ok)."""
    name: str
    meaning: str
    invalidates: bool
    retry: bool = False
    ranked: bool = True

    def __post_init__(self) -> None:
        if self.retry and not self.invalidates:
            raise ValueError(f"flag {self.name}: only an invalidating flag is retried")
        if self.invalidates and self.ranked:
            raise ValueError(f"flag {self.name}: an invalidating flag cannot be ranked")

    def __str__(self) -> str:
        return self.name


def _invalid(name: str, meaning: str, retry: bool = False) -> Flag:
    return Flag(name, meaning, invalidates=True, retry=retry, ranked=False)


def _warning(name: str, meaning: str, ranked: bool) -> Flag:
    return Flag(name, meaning, invalidates=False, ranked=ranked)


MUTATES_INPUTS = _invalid("mutates_inputs", "the candidate changed its input tensors")
OUTPUT_CHANGED_UNDER_TIMING = _invalid(
    "output_changed_under_timing",
    "a timed output differed from the reference's output for the same inputs")
UNSYNCHRONIZED_WORK = _invalid(
    "unsynchronized_work", "outputs kept changing after the call returned and the device was idle")
TAMPERED_TIMER = _invalid("tampered_timer", "candidate code replaced clock, harness or problem functions")
FASTER_THAN_PHYSICS = _invalid(
    "faster_than_physics", "the candidate's time is under 60% of the roofline floor for the problem's work")
OUTPUT_NOT_PLAIN_TENSOR = _invalid(
    "output_not_plain_tensor", "the call returned a tensor subclass or lazy object, not a plain tensor")
INTERFERENCE = _invalid(
    "interference", "the reference ran slower while the candidate was alive than before it started and after it "
                    "was killed", retry=True)
REDUCED_PRECISION = _invalid(
    "reduced_precision", "an fp32 problem's output is within tolerance but its error against float64 is beyond "
                         "what fp32 arithmetic gives (TF32, bf16 or fp16 inside)")
TIMING_INCONSISTENT = _invalid(
    "timing_inconsistent", "the parent's clock saw more time around the candidate's samples than the reference's, "
                           "beyond what the candidate reported", retry=True)
ALIASED_OUTPUT = _invalid(
    "aliased_output", "an output lies in memory the harness gave the call (its inputs' arena), not in memory of its "
                      "own")
SCHEDULING_CHANGED = _invalid(
    "scheduling_changed", "a worker's scheduling policy or priority changed while the pair was timed")
EXTRA_CORES = _invalid(
    "extra_cores", "the candidate's processes used more CPU cores at once while timed than cpu_threads allows")
WORK_WHILE_STOPPED = _invalid(
    "work_while_stopped", "the candidate's processes went on working after the parent's clock had stopped them (a "
                          "copy or read the kernel was doing for them)")
NOISY = _warning("noisy", "the speedup's 95% CI did not reach the target width within the time cap", ranked=True)
NO_CUSTOM_KERNEL = _warning(
    "no_custom_kernel", "no GPU kernel from the candidate's own extension or Triton ran in a profiled call",
    ranked=False)
LITTLE_CUSTOM_WORK = _warning(
    "little_custom_work", "the candidate's own kernels took under 10% of a profiled call's GPU time", ranked=True)
DEGENERATE_PROBLEM = _warning(
    "degenerate_problem", "the problem's outputs are degenerate (zeros, a constant, an input, NaN/Inf or not "
                          "input-dependent), so a trivial candidate could pass", ranked=False)
HARNESS_OOM = _warning(
    "harness_oom", "the harness could not fit this problem in the memory budget; the candidate is not blamed",
    ranked=False)
HARNESS_WRITE = _warning(
    "harness_write", "the harness could not write a file this pair needs (a full disk or a file size limit); the "
                     "candidate is not blamed", ranked=False)

FLAGS: tuple[Flag, ...] = (
    MUTATES_INPUTS, OUTPUT_CHANGED_UNDER_TIMING, UNSYNCHRONIZED_WORK, TAMPERED_TIMER, FASTER_THAN_PHYSICS,
    OUTPUT_NOT_PLAIN_TENSOR, INTERFERENCE, REDUCED_PRECISION, TIMING_INCONSISTENT, ALIASED_OUTPUT,
    SCHEDULING_CHANGED, EXTRA_CORES, WORK_WHILE_STOPPED, NOISY, NO_CUSTOM_KERNEL, LITTLE_CUSTOM_WORK,
    DEGENERATE_PROBLEM, HARNESS_OOM, HARNESS_WRITE,
)
BY_NAME: dict[str, Flag] = {f.name: f for f in FLAGS}
NAMES: tuple[str, ...] = tuple(BY_NAME)
INVALIDATING: tuple[str, ...] = tuple(f.name for f in FLAGS if f.invalidates)
RETRIED: tuple[str, ...] = tuple(f.name for f in FLAGS if f.retry)
DETAILS: dict[str, str] = {f.name: f.meaning for f in FLAGS}


def get(name: str) -> Flag | None:
    """The table's row for `name`, or None for a word this harness does not set."""
    return BY_NAME.get(name)


def invalidating(names: Iterable[str]) -> list[str]:
    """The invalidating flags among `names`, in their order."""
    return [n for n in names if n in INVALIDATING]


def retryable(names: Iterable[str]) -> str | None:
    """The first invalidating flag when `names` has some and all of them are load-sensitive (retried), else None."""
    found = invalidating(names)
    return found[0] if found and all(n in RETRIED for n in found) else None


def unranked(names: Iterable[str]) -> list[str]:
    """The flags among `names` that keep a correct pair off a problem's best and out of the geometric mean and
    fast_p. A word the table does not know counts among them: a reader older than the writer fails closed."""
    return [n for n in names if not getattr(BY_NAME.get(n), "ranked", False)]


def ranks(names: Iterable[str]) -> bool:
    """Whether a correct pair carrying the flags `names` may be ranked."""
    return not unranked(names)
