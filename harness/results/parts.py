"""The parts of a record (README, The record), one dataclass each: what the writers fill in (harness.run.evaluate,
schedule, defenses, merge, build) and what the readers read back (Record's typed fields). Each is written as the
JSON object it always was: its fields in order, a field holding ABSENT left out (harness.results.jsonobj).

Read back from a file, every field holds what the line held (a part that is not an object reads as None, a missing
key as the field's default), so readers check numbers with harness.core.numbers.number."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.results.jsonobj import ABSENT, Absent, JsonObject
from harness.shared.stats import summarize


@dataclass
class Gpu(JsonObject):
    """The GPU a pair ran on (its index on the host, its name); null on the CPU."""
    index: int | None
    name: str | None


@dataclass
class Seed(JsonObject):
    """The run's base seed (weights, trial inputs) and whether the config fixed it."""
    base: int
    fixed: bool


@dataclass
class Sandbox(JsonObject):
    """What confined a worker that runs candidate code (harness.worker.sandbox's report, carried by its first
    message)."""
    mode: str | None = None
    landlock_abi: int | None = None
    filesystem: bool = False
    network: bool = False
    network_via: str | None = None
    no_new_privs: bool = False
    scoped: list[str] = field(default_factory=list)
    writable: list[str] = field(default_factory=list)
    hidden: list[str] = field(default_factory=list)
    error: str | None = None
    unconfined_threads: int | None = None
    relaxed: list[str] | Absent = ABSENT    # under Nsight Compute (run_eval.py profile): what ncu's library needs
    privileges: dict[str, Any] | Absent = ABSENT    # capabilities and scheduling limits dropped (sandbox.drop_privileges)
    device_ioctl: str | Absent = ABSENT     # "listed devices only" (Landlock ABI >= 5, not under ncu) or "open"


@dataclass
class Build(JsonObject):
    """The candidate's build (harness.run.build.BuildResult.record)."""
    status: str                     # built | compile_error | skipped | timeout | oom | crashed
    cached: bool
    seconds: float
    key: str
    extensions: list[str]
    compiler_output: str | None
    sandbox: Sandbox | None


@dataclass
class Precision(JsonObject):
    """The dtype the pair ran in: the run's request (--precision), the dtype and where it came from."""
    requested: str | None
    dtype: str | None
    source: str | None


@dataclass
class Correctness(JsonObject):
    """The correctness trials, checked by the reference worker, and the timed outputs checked after them."""
    trials: int
    trials_passed: int
    max_abs_err: float | None
    max_rel_err: float | None
    atol: float | None
    rtol: float | None
    dtype: str | None
    first_mismatch: dict[str, Any] | None     # free-form: the first failing trial's label, reason and the worker's
    param_match: str | None                   # diagnostics of where (index, got, expected)
    module_mode: str | None
    fp64_max_abs_err: float | None
    fp64_reference_max_abs_err: float | None
    reference_module_mode: str | None
    seed: int | None
    fp64: str | None | Absent = ABSENT  # why there is no float64 reference (the memory budget); null when it ran
    timed_outputs_checked: int = 0
    timed_outputs_full_checked: int = 0


@dataclass
class SideStats(JsonObject):
    """One side's timed samples (harness.shared.stats.summarize: only `n` when there are none), with the host
    clock's median and the stream lag where the samples had them."""
    n: int
    median_ms: float | Absent = ABSENT
    mean_ms: float | Absent = ABSENT
    stdev_ms: float | Absent = ABSENT
    min_ms: float | Absent = ABSENT
    max_ms: float | Absent = ABSENT
    iqr_ms: float | Absent = ABSENT
    samples_ms: list[float] | Absent = ABSENT
    host_median_ms: float | Absent = ABSENT
    stream_lag_median_ms: float | Absent = ABSENT

    @classmethod
    def of(cls, samples_ms: list[float]) -> "SideStats":
        return cls(**summarize(samples_ms))


@dataclass
class Baseline(JsonObject):
    """A torch.compile baseline: its compilation, and where it was timed its samples' summary and the speedup
    against it."""
    error: str | None
    compile_seconds: float | None
    n: int | Absent = ABSENT
    median_ms: float | Absent = ABSENT
    mean_ms: float | Absent = ABSENT
    stdev_ms: float | Absent = ABSENT
    min_ms: float | Absent = ABSENT
    max_ms: float | Absent = ABSENT
    speedup: float | Absent = ABSENT
    speedup_ci: list[float] | Absent = ABSENT


@dataclass
class Interference(JsonObject):
    """The reference's block medians before, during and after the candidate (the `interference` check)."""
    before_ms: list[float]
    after_ms: list[float]
    during_ms: list[float]
    tolerance: float
    found: bool


@dataclass
class Consistency(JsonObject):
    """The parent's clock around the samples against what each side reported (the `timing_inconsistent` check)."""
    reference_unexplained_ms: float | None
    candidate_unexplained_ms: float | None
    reference_flush_ms: float | None
    allowed_ms: float | None
    found: bool


@dataclass
class ProcessKernels(JsonObject):
    """The kernels each side ran in one process pair's profiled calls."""
    candidate: list[str]
    reference: list[str]


@dataclass
class ProcessEstimate(JsonObject):
    """One process pair's estimates (timing.processes, with --processes N)."""
    speedup: float | None
    speedup_ci: list[float] | None
    speedup_vs_compile: float | None
    speedup_vs_compile_ci: list[float] | None
    rounds: int | None
    seconds: float | None
    kernels: ProcessKernels | None
    phases: dict[str, float] | None


@dataclass
class Timing(JsonObject):
    """How the pair was timed and what the rounds measured; `interference` and `consistency` where those checks
    ran, `processes` where several process pairs did."""
    clock: str
    mode: str
    l2_flush: bool
    timer_floor_ms: float | None
    cold_probe_ms: float | None
    graph_replays: int | None
    graph_error: str | None
    cpu_threads: int
    block_samples: int
    block_warmup: int
    profiled_calls: int
    rounds: int
    seconds: float
    target_rel_ci: float
    rel_ci_half_width: float
    noisy: bool
    round_ratios: list[float]
    reference: SideStats
    candidate: SideStats
    baselines: dict[str, Baseline]
    baseline_before_ms: list[float]
    baseline_after_ms: list[float]
    interference: Interference | Absent = ABSENT
    consistency: Consistency | Absent = ABSENT
    processes: list[ProcessEstimate] | Absent = ABSENT
    between_process: dict[str, Any] | None | Absent = ABSENT   # one process pair: the term its CIs were widened by
    speedup_ci_rounds: list[float] | None | Absent = ABSENT    # the CI of the rounds alone, before that term
    graph_calls: int | None | Absent = ABSENT                  # graph mode: calls per captured graph
    graph_calls_capped: str | None | Absent = ABSENT           # why fewer than timing.graph_calls (memory budget)
    cpu_cores: dict[str, float | None] | Absent = ABSENT        # CPU path: cores each side used while awake
    cpu_cores_counted: str | Absent = ABSENT    # what counted their CPU: "cgroup" or "process tree" (run.cores)
    cpu_cores_median_sample: dict[str, float | None] | Absent = ABSENT   # and in each side's median timed sample
    cpu_work_while_stopped: dict[str, float | None] | Absent = ABSENT    # each side's share of its CPU work done
                                                                          # while stopped, outside the clock


@dataclass
class WorkerRun(JsonObject):
    """The candidate worker's run: its exit, its time, its log's tail (when the pair is not ok), the seconds of
    each phase of the pair, and whether the device was still usable after a crash."""
    exit_code: int | None
    seconds: float
    log_tail: str | None
    phases: dict[str, float] | Absent = ABSENT
    device_usable_after: bool | Absent = ABSENT
    memory: dict[str, Any] | None | Absent = ABSENT   # GPU: each side's peak, the eager peak and the plan


@dataclass
class Kernels(JsonObject):
    """What ran in the profiled calls (GPU only): the candidate's own kernels, their share of the GPU time, the
    library kernels beside them and eager PyTorch's."""
    profiled_calls: int
    kernels: int
    custom_kernels: list[str]
    custom_share: float | None
    custom_shares: list[float]
    other_kernels: list[str]
    reference_kernels: list[str]


@dataclass
class Performance(JsonObject):
    """Achieved rates against the device's measured ceilings; the roofline floor where both ceilings are known."""
    flops: int | None
    bytes: int | None
    ceilings: dict[str, float] | None
    achieved_tflops: float | None
    achieved_gbps: float | None
    floor_ms: float | Absent = ABSENT
    pct_of_peak_bandwidth: float | None | Absent = ABSENT
    pct_of_peak_flops: float | None | Absent = ABSENT


@dataclass
class Retried(JsonObject):
    """Why an `invalid` pair was measured a second time, the first try's detail of that flag, and where its time went
    (its worker.phases: the record's own are the second try's, so without them a retried pair's cost reads as one
    try's, its reference's setup left out)."""
    reason: str
    first_try: str | None
    first_try_phases: dict[str, float] | None | Absent = ABSENT


@dataclass
class SizeResult(JsonObject):
    """One of the problem's declared input sizes (docs/AUTHORING.md, Sizes): its correctness trials and, where it
    was timed (timing.sizes), its speedup. Written only for problems that declare several sizes."""
    name: str
    main: bool
    sets: dict[str, Any]            # the module-level constants it sets ({} for the main size)
    inputs: list[Any]               # per input: its shape, or null where it is not a tensor
    shape: str                      # one line: what it sets and its inputs' shapes
    trials: int
    trials_passed: int
    correct: bool
    max_abs_err: float | None
    timed: bool = False
    speedup: float | None = None
    speedup_ci: list[float] | None = None
    rounds: int | None = None
    error: str | None = None        # why it was not timed, where it was to be (graph capture, the pair's end)


@dataclass
class KernelRow(JsonObject):
    """One kernel of a profiled call, as Nsight Compute measured it (harness.run.ncu): its duration, DRAM and SM
    throughput as % of peak, achieved occupancy (% of the SM's warps) and registers per thread. A figure ncu did not
    report is None."""
    name: str
    duration_us: float | None
    dram_pct: float | None
    sm_pct: float | None
    occupancy_pct: float | None
    registers: int | None


@dataclass
class ProfileSide(JsonObject):
    """One side's profiled call (`run_eval.py profile`): its kernels, where ncu's report is, and why there are no
    rows when there are none."""
    report: str | None              # the .ncu-rep file, or None when ncu wrote none
    kernels: list[KernelRow]
    error: str | None = None

    @property
    def duration_us(self) -> float | None:
        """The call's kernels' durations summed (None when ncu gave none)."""
        values = [k.duration_us for k in self.kernels if k.duration_us is not None]
        return sum(values) if values else None


@dataclass
class Profile(JsonObject):
    """`run_eval.py profile`'s part of a record: one call of each side under Nsight Compute after `warmup` calls,
    the ncu command line the workers ran under (without the report path and the worker's own) and each side's
    kernels."""
    ncu: list[str]
    ncu_version: str | None
    warmup: int
    reference: ProfileSide | None
    candidate: ProfileSide | None
