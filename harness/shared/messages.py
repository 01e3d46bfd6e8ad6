"""The messages of the timing protocol between the parent and its workers, one dataclass each.

Requests go parent -> worker (they carry `op`), replies worker -> parent (they carry `kind`). `wire(msg)` makes the
dict the channel sends; `parse(cls, dict)` checks a received dict field by field against the dataclass (a worker
is untrusted: a wrong type is a protocol error, never a crash of the parent). A timing mode travels by name
(`TimingSpec.mode`, `ModeRequest.mode`) and a torch.compile baseline as a `compile:<mode>` name in
`TimingSpec.variants`, so a new one needs no new message here; the files a new timing mode does touch are listed in
harness.run.modes.
"""
from __future__ import annotations

import array
import base64
import dataclasses
import math
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar


class ProtocolError(Exception):
    """A message that does not have the shape its dataclass says."""


@dataclass(frozen=True)
class TimingSpec:
    """How both sides time a call. Sent once, in the job."""
    mode: str                   # "cold" | "graph" | "host" (the CPU path)
    warmup: int
    flush_l2: bool
    graph_calls: int
    variants: list[str] = field(default_factory=lambda: ["eager"])   # reference: eager and compile:<mode>
    graph_replays: int = 1      # graph mode: replays of the captured graph in one sample (the parent's choice)


# ---------------------------------------------------------------- jobs (parent -> worker, the first message)

@dataclass(frozen=True)
class ReferenceJob:
    """Starts the reference worker of one problem (harness.worker.reference)."""
    problem_path: str
    device: str
    seed: int                       # the run's base seed: weights and trial k's inputs (base + k)
    trials: int
    timing: TimingSpec
    compile_modes: list[str]        # torch.compile baselines to build beside eager
    probe_seeds: list[int]          # the cold probe that timing mode `auto` decides on
    scratch: str                    # the problem's folder: reference_state.pt for candidate workers
    defenses: bool
    precision: str | None = None
    gpu_memory_gb: float | None = None      # the pair's device memory budget in GiB (None: the card's; memplan)
    cuda_contexts: int = 2          # processes holding a CUDA context on the device during a pair (memplan)
    env: dict[str, str] = field(default_factory=dict)   # its torch.compile caches' folders (harness.run.compilecache),
                                                        # applied by the worker's entry point before the role runs


@dataclass(frozen=True)
class CandidateJob:
    """Starts the candidate worker of one pair (harness.worker.candidate). Its `env` (the candidate's build and
    Triton folders) is applied and removed by the worker's entry point before the role reads the job."""
    problem_path: str
    candidate_path: str
    device: str
    seed: int
    trials: int
    timing: TimingSpec
    scratch: str                    # the pair's own folder (trial outputs, the sandbox's writable tree)
    state_path: str                 # the reference's parameters, copied into the candidate's model
    defenses: bool
    precision: str | None = None
    hide: list[str] = field(default_factory=list)          # folders the sandbox makes unreadable (run keys)
    env: dict[str, str] = field(default_factory=dict)
    memory_share_bytes: int | None = None   # its device memory cap (memplan.PairPlan.candidate; None: none)
    staged: bool = False            # CPU path: build ModelNew, say Loaded, then only answer staged calls
                                    # (harness.worker.arena); else run the trials itself (GPU, run_eval.py profile)
    staged_samples: bool = False    # GPU: after its trials, time only calls on inputs the reference staged in device
                                    # memory it shares (harness.worker.arena); else the sampler's own samples
    executor: bool = False          # the reference's executor (harness.run.reference_executor): `candidate_path` is
                                    # the problem and its Model is built as a candidate's ModelNew is, with the
                                    # reference's state;
                                    # no trials, only staged calls (the reference's eager samples, CPU and GPU alike)
    output_orders: list[list[int] | None] | None = None     # the layout each timed output is held to (the reference's
                                    # where it is contiguous): one in another is copied into it inside the call
                                    # (harness.shared.layout)
    warm: bool = False              # the executor on the GPU: before it says Loaded, one call on inputs it draws from
                                    # the public base seed, so that its first call's start (libraries, modules) runs
                                    # beside the candidate's trials, as the candidate's runs in them


@dataclass(frozen=True)
class BuildJob:
    """Starts a build worker (harness.worker.build): import the candidate with CUDA hidden so that its
    load_inline calls compile into the build folder, and construct ModelNew once when nothing built at import."""
    candidate_path: str
    problem_path: str
    device_kind: str                # the toolchain's: what the candidate may build for (cuda | cpu)
    seed: int
    hide: list[str] = field(default_factory=list)          # folders the sandbox makes unreadable (run keys)


@dataclass(frozen=True)
class LintJob:
    """Starts a lint worker (harness.worker.lint) for one problem."""
    problem_path: str
    device: str
    seed: int
    precision: str | None = None
    samples: int = 20               # timed calls for the problem's timer-floor check
    gpu_memory_gb: float | None = None      # the device memory to lint within, in GiB (None: the card's)


@dataclass(frozen=True)
class FlusherJob:
    """Starts the flusher (harness.worker.flusher): `nbytes` written before every staged sample (0: twice the
    last-level cache, or on the GPU twice the L2, at least 128 MiB); `device`: "cpu", or the GPU ("cuda:0") whose L2
    it writes from a CUDA context of its own."""
    nbytes: int = 0
    device: str = "cpu"


@dataclass(frozen=True)
class CeilingsJob:
    """Starts the ceilings worker (harness.worker.ceilings): the device's copy bandwidth and matmul throughput."""
    device: str


# ---------------------------------------------------------------- requests (parent -> worker)

@dataclass(frozen=True)
class SampleRequest:
    """Time one call of `variant` on inputs drawn with `seed`: the worker learns the seed only now."""
    OP: ClassVar[str] = "sample"
    variant: str
    seed: int


@dataclass(frozen=True)
class LayoutEntry:
    """One input of a staged sample (harness.worker.arena): a tensor at `offset` bytes into the arena, with its
    dtype ("float32", ...), shape and strides in elements; or, where `dtype` is "", a plain value carried as it is
    (`tuple`: it was a tuple)."""
    dtype: str
    shape: list[int] = field(default_factory=list)
    strides: list[int] = field(default_factory=list)
    offset: int = 0
    value: Any = None
    tuple: bool = False


@dataclass(frozen=True)
class Layout:
    """Where a staged sample's inputs lie in the arena, and how many bytes the arena holds. On the GPU the arena is
    device memory the reference allocated: `handle` is its allocation's CUDA IPC handle (base64; "" for the
    reference's own arena and on the CPU) and `base` the arena's byte offset in that allocation. `sets`: graph mode's
    input sets, one per captured call, one after another (`entries` holds all of them)."""
    entries: list[LayoutEntry]
    bytes: int
    handle: str = ""
    base: int = 0
    sets: int = 1


@dataclass(frozen=True)
class ArenaRequest:
    """Reference only: stage the samples of `side` into the arena at `path` (CPU: the parent's /proc/<pid>/fd/<n> of
    that worker's memfd; "" forgets it) from now on; on the GPU the one device arena of every side (path "")."""
    OP: ClassVar[str] = "arena"
    path: str
    side: str = "candidate"                     # or "executor" (harness.run.reference_executor)


@dataclass(frozen=True)
class StageRequest:
    """Reference only (staged samples): check the inputs last written into `side`'s arena ("reference" or "candidate"),
    then draw the inputs for `seed` and write them there (harness.worker.arena.Stager).
    `seed` and `trial` None: the check alone (after a side's last sample)."""
    OP: ClassVar[str] = "stage"
    side: str
    seed: int | None = None
    trial: int | None = None    # instead of a seed: correctness trial `trial` (its place in the trial plan)


@dataclass(frozen=True)
class FlushRequest:
    """The flusher: write its buffer whole now (the caches of the timing cores, or the GPU's L2, emptied of everything
    else); `hot` (the GPU's graph mode, or timing.flush_l2 off): a few bytes only, so that the side about to run
    still starts right after another CUDA context ran, as it does after a flush."""
    OP: ClassVar[str] = "flush"
    hot: bool = False


@dataclass(frozen=True)
class CallRequest:
    """Both sides (CPU path): call `variant` now on the inputs staged in this worker's arena, and say where the
    output lies. No seed, no check: the parent's clock around this request is the sample's time."""
    OP: ClassVar[str] = "call"
    variant: str
    layout: Layout
    manual_seed: int | None = None      # a correctness trial's: torch.manual_seed(base + k) first (public, as in
                                        # KernelBench: a model that draws random numbers draws the reference's)
    label: str = ""                     # what a failure names: "trial 0", "trial 1 at size 'small'"; "" timed
    profile: bool = False               # GPU: the call under the profiler instead (untimed; Called.profile)


@dataclass(frozen=True)
class CheckRequest:
    """Reference only, after one of its own samples: its output's values at the positions drawn from `check_seed`
    (harness.shared.points; the parent draws it after the sample), in the output of each captured call listed in
    `slots` (graph mode; cold: [0]). No such request ever reaches the candidate: its outputs are read by the parent
    (CPU) or by the reference (GPU, ReadRequest)."""
    OP: ClassVar[str] = "check"
    check_seed: int
    slots: list[int] = field(default_factory=lambda: [0])


@dataclass(frozen=True)
class ReadRequest:
    """Reference only (GPU): read the candidate's output where its sample reply says it lies (CUDA IPC handles),
    while the candidate is stopped, at the positions drawn from `check_seed`; with `full`, also compare the whole
    output with the reference's on the same inputs (recomputed from the sample kept for it: KeepRequest) and
    measure both against float64."""
    OP: ClassVar[str] = "read"
    outputs: list[list[dict[str, Any]]]         # the chosen slots' Exported dicts, in `slots` order
    check_seed: int
    slots: list[int] = field(default_factory=lambda: [0])
    full: bool = False                          # also the whole output of the last slot listed
    remember: bool = True                       # read again at the candidate's next stage (False: the executor's)


@dataclass(frozen=True)
class Exported:
    """Where one output tensor of a sample lies in the worker that made it: what the trusted side needs to read it
    (harness.run.peek on the host, the reference's CUDA IPC mapping on the device)."""
    dtype: str                  # "torch.float32", ...
    shape: list[int]
    strides: list[int]          # in elements
    address: int                # host: the first element's address; device: its byte offset in the allocation
    handle: str = ""            # device: the allocation's IPC handle (base64); "" on the host


@dataclass(frozen=True)
class ModeRequest:
    """Set the timing mode before a pair (graph: with the replays a sample makes), or switch it back to cold when
    graph capture failed on one side."""
    OP: ClassVar[str] = "mode"
    mode: str
    graph_replays: int = 1
    graph_calls: int = 0        # graph mode: calls per captured graph, capped by the memory plan (0: the job's)


@dataclass(frozen=True)
class ProfileRequest:
    """One call of `variant` on inputs drawn with `seed`, under the profiler, to see whose kernels ran."""
    OP: ClassVar[str] = "profile"
    seed: int
    variant: str


@dataclass(frozen=True)
class SizeRequest:
    """Both sides: draw every later sample's inputs at the problem's declared size `size` (harness.worker.sizes;
    the main size's name: back to it). The parent sends it to both workers between whole rounds (timing.sizes all)."""
    OP: ClassVar[str] = "size"
    size: str


@dataclass(frozen=True)
class NcuRequest:
    """`run_eval.py profile`: `warmup` calls of `variant` on inputs drawn with `seed` (builds, JIT, autotuning), then
    one more on the same inputs between cudaProfilerStart and cudaProfilerStop, so that Nsight Compute (the worker
    runs under `ncu --profile-from-start off`) profiles that call's kernels and no others."""
    OP: ClassVar[str] = "ncu_call"
    seed: int
    variant: str
    warmup: int = 3


@dataclass(frozen=True)
class DeriveRequest:
    """Reference only, once per reference process: the figures the checks need that do not depend on the
    candidate (the forward's FLOPs and bytes, the float64 reference of trial 0). The parent asks right after
    handing the candidate worker its job, so the reference computes them while the candidate starts and runs its
    trials, and collects the reply before the first verify. `flops`: False when an earlier process pair of the
    same problem counted them already (counting imports torch._dynamo: seconds)."""
    OP: ClassVar[str] = "derive"
    flops: bool = True


@dataclass(frozen=True)
class VerifyRequest:
    """Reference only: each trial's outputs (TrialFile: a file, or where they lie in the GPU candidate's memory)
    against the expected ones; the reply is Verified, one FileCheck per file, in order."""
    OP: ClassVar[str] = "verify"
    files: list[TrialFile]


@dataclass(frozen=True)
class BudgetRequest:
    """Reference only (GPU), once after `ready`: the parent's plan for the pairs (harness.shared.memplan): the share of
    device memory to hold to from now on, and why the float64 checks are skipped (None: they fit)."""
    OP: ClassVar[str] = "budget"
    share_bytes: int | None
    fp64: str | None = None


@dataclass(frozen=True)
class MemoryRequest:
    """Either side (GPU): its allocator's peak and retries so far, for the record (`worker.memory`)."""
    OP: ClassVar[str] = "memory"


@dataclass(frozen=True)
class HealthRequest:
    """Reference only: whether it can still serve pairs (its device answers)."""
    OP: ClassVar[str] = "health"


@dataclass(frozen=True)
class PeerCloseRequest:
    """Reference only, at the end of a pair: drop its mappings of the candidate's memory, the candidate's arena and
    the outputs it kept for full checks."""
    OP: ClassVar[str] = "peer_close"


@dataclass(frozen=True)
class NextRequest:
    """Candidate only (GPU): its last TrialOut was compared; run the next trial."""
    OP: ClassVar[str] = "next"


@dataclass(frozen=True)
class ExitRequest:
    """Any worker: end now (every worker also ends on a request it does not serve)."""
    OP: ClassVar[str] = "exit"


# ---------------------------------------------------------------- replies (worker -> parent)

@dataclass(frozen=True)
class SampleResult:
    KIND: ClassVar[str] = "sample"
    ms: float                   # the sample: device time (cuda events) or host time (CPU path)
    host_ms: float              # host clock around the same region
    lag_ms: float               # device end minus current-stream end (work left on other streams)
    tampered: list[str]         # harness clock functions found replaced after the sample
    error: str | None = None    # the sample could not run in this mode (e.g. "graph capture failed: ...")
    flush_ms: float = 0.0       # host time of the cache flush before the call (the CPU path's; 0 on the GPU)
    outputs: list[list[dict[str, Any]]] = field(default_factory=list)   # per captured call, per tensor: Exported
    output_error: str | None = None     # the output is not a list of readable tensors (one line)
    not_plain: bool = False     # the output is a tensor subclass or lazy object
    mutated: bool = False       # the call changed its inputs (as the worker saw it)
    changed_after_return: bool = False     # the previous sample's output changed after its call returned


@dataclass(frozen=True)
class SizeSet:
    KIND: ClassVar[str] = "size_set"
    size: str


@dataclass(frozen=True)
class CheckResult:
    KIND: ClassVar[str] = "checked"
    values: str                 # the floats at the drawn positions, packed (pack_floats)
    shapes: list[list[int]]
    error: str | None = None    # the output cannot be read (one line)


@dataclass(frozen=True)
class ReadResult:
    KIND: ClassVar[str] = "read"
    values: str                 # the candidate's floats at the drawn positions, packed
    shapes: list[list[int]]
    error: str | None = None    # its memory could not be read (one line): a failed check
    full: FileCheck | None = None       # with `full`: ok, reason, max_abs_err, fp64 errors (sent as a dict)
    aliased: str | None = None  # an output lies in the arena the reference staged its inputs in (one line)


@dataclass(frozen=True)
class Profile:
    """What ran in one profiled call (harness.worker.profiling): kernels launched, the candidate's own among them
    and their share of the GPU time, the library kernels beside them."""
    kernels: int
    custom_kernels: list[str]
    custom_share: float
    other_kernels: list[str]


@dataclass(frozen=True)
class ProfileResult:
    KIND: ClassVar[str] = "profile"
    profile: Profile | None             # None on the CPU


@dataclass(frozen=True)
class NcuCalled:
    """The reply to NcuRequest: the warm-up calls ran and the one profiled call returned (device synchronized)."""
    KIND: ClassVar[str] = "ncu_called"
    warmup: int
    ms: float                           # host time of the profiled call, profiler overhead included (not a timing)


@dataclass(frozen=True)
class Work:
    """What one forward must do at least: its FLOPs (None when the counter does not know an op) and the bytes of
    its inputs, parameters, buffers and outputs."""
    flops: int | None
    bytes: int


@dataclass(frozen=True)
class Derived:
    KIND: ClassVar[str] = "derived"
    work: Work | None                       # None with the defenses off, or when not asked to count
    fp64_reference_max_abs_err: float | None = None     # eager's own error against the float64 reference
    fp64_output_scale: float | None = None  # the largest |value| of the float64 reference's outputs
    fp64: str | None = None                 # why there is no float64 reference ("skipped: needs X GiB, budget Y GiB")
    signature: str | None = None            # why no reduced-precision signature is measured (docs/precision.md)


# ---------------------------------------------------------------- replies to jobs and other requests (worker -> parent)

@dataclass(frozen=True)
class ProblemChecks:
    """The cheap checks of a problem's outputs (harness.worker.lint.degenerate_checks), in `ready` and `lint`."""
    zeros_pass: bool
    constant_pass: bool
    identity_pass: bool
    nan_or_inf: bool
    input_dependent: bool | None
    degenerate: bool
    reasons: list[str]


@dataclass(frozen=True)
class CompileNote:
    """One torch.compile baseline's compilation on the reference side (error None: it compiled and agrees)."""
    error: str | None
    compile_seconds: float


@dataclass(frozen=True)
class SizeInfo:
    """One of the problem's input sizes (harness.worker.sizes), as the reference drew it for trial 0."""
    name: str
    main: bool
    overrides: dict[str, Any]           # the module-level constants it sets ({} for the main size)
    input_shapes: list[Any]             # per input: its shape, or None where it is not a tensor
    input_bytes: int


@dataclass(frozen=True)
class Ready:
    """The reference worker has its problem, expected outputs and baselines (the reply to ReferenceJob)."""
    KIND: ClassVar[str] = "ready"
    dtype: str
    dtype_source: str
    atol: float
    rtol: float
    allow_tf32: bool
    output_shapes: list[list[int]]
    parameters: int
    module_mode: str                    # "train" | "eval"
    footprint_bytes: int                # one trial's inputs, outputs, parameters and buffers
    lint: ProblemChecks
    compile: dict[str, CompileNote]     # compile mode -> its note
    timer_floor_ms: float
    cold_probe_ms: float | None
    memory: dict[str, Any] | None = None    # GPU: what it measured and keeps, and the budget (harness.shared.memplan)
    sizes: list[SizeInfo] = field(default_factory=list)     # the problem's sizes, as declared (one: the main size)
    output_strides: list[list[int]] | None = None   # its trial 0 outputs' strides (harness.shared.layout)


@dataclass(frozen=True)
class Error:
    """A reference or lint worker could not do its job (its problem failed at `stage`)."""
    KIND: ClassVar[str] = "error"
    error: str
    stage: str = "problem"
    oom: bool = False
    traceback: str | None = None
    harness_oom: str | None = None      # ran out of its memory share: the line naming the need and the budget


@dataclass(frozen=True)
class HarnessError(Error):
    """Any worker's role raised: a harness fault (harness.worker.__main__)."""
    KIND: ClassVar[str] = "harness_error"
    sandbox: dict[str, Any] | None = None       # when it is the first message of a confined worker


@dataclass(frozen=True)
class TrialFile:
    """One correctness trial's outputs for the reference to check: a file the candidate worker wrote (`path`), or
    on the GPU where they lie in the candidate's memory (`outputs`: rawread.export's Exported dicts, `path` "";
    the candidate handed them over as a TrialOut and they were compared then, the candidate stopped)."""
    label: str
    path: str
    trial: int
    outputs: list[dict[str, Any]] | None = None
    shapes: list[list[int]] | None = None       # a file the parent copied out of a CPU candidate's memory: one flat
    strides: list[list[int]] | None = None      # tensor per output, viewed with these
    check_seed: int | None = None               # trial -1 (a timed output the parent copied out): the sample whose
                                                # kept reference output it is compared with (KeepRequest)


@dataclass(frozen=True)
class TrialOut:
    """GPU: one correctness trial's outputs left where they lie in the candidate's memory, for the reference to
    compare through CUDA IPC while the candidate is stopped; the candidate waits for NextRequest before its
    next trial (its Outputs then lists this trial with path "")."""
    KIND: ClassVar[str] = "trial"
    label: str
    trial: int
    outputs: list[dict[str, Any]]
    sandbox: dict[str, Any] | None = None       # when it is the candidate's first message


@dataclass(frozen=True)
class Outputs:
    """The candidate ran its correctness trials (its first reply)."""
    KIND: ClassVar[str] = "outputs"
    param_match: str                    # "state_dict" | "seed" | "no_parameters"
    extensions: list[str]               # the extensions it loaded
    module_mode: str
    files: list[TrialFile]
    mutates_inputs: bool
    unsynchronized_work: bool
    output_not_plain_tensor: bool
    sandbox: dict[str, Any] | None = None       # the sandbox's report (harness.worker.sandbox; parts.Sandbox)


@dataclass(frozen=True)
class Failed:
    """The candidate failed: its code raised, did not build or load, or gave no tensors (the status it earns)."""
    KIND: ClassVar[str] = "failed"
    status: str
    error: str | None
    detail: str | None = None
    sandbox: dict[str, Any] | None = None


@dataclass(frozen=True)
class FileCheck:
    """One output checked by the reference worker (verify, a read's `full`). The errors may be NaN or Inf, which
    travel as strings: they are read with harness.core.numbers."""
    ok: bool
    label: str | None = None
    reason: str | None = None
    hint: str | None = None             # why a trial failed, where the reference can tell (eval mode, ...)
    max_abs_err: Any = None
    max_rel_err: Any = None
    fp64_max_abs_err: Any = None
    fp64_reference_max_abs_err: Any = None
    fp64_output_scale: Any = None
    precision_signature: dict[str, Any] | None = None   # scheme -> {share, z, ratio} (docs/precision.md)
    first_mismatch: dict[str, Any] | None = None    # free-form: where and what (index, got, expected)


@dataclass(frozen=True)
class Verified:
    KIND: ClassVar[str] = "verified"
    results: list[FileCheck]            # one per file asked for, in order


@dataclass(frozen=True)
class Staged:
    KIND: ClassVar[str] = "staged"
    layout: Layout | None = None
    mutated: bool = False       # the inputs staged before these had been changed by the call that read them
    error: str | None = None    # the inputs could not be staged (one line)
    manual_seed: int | None = None      # a trial's: what the call is made after (CallRequest.manual_seed)
    changed_after_return: bool = False  # GPU: the side's last output, read again now, differs from the trusted read


@dataclass(frozen=True)
class FlusherReady:
    KIND: ClassVar[str] = "flusher_ready"
    nbytes: int


@dataclass(frozen=True)
class Flushed:
    KIND: ClassVar[str] = "flushed"
    ms: float


@dataclass(frozen=True)
class Called:
    KIND: ClassVar[str] = "called"
    outputs: list[dict[str, Any]] = field(default_factory=list)     # per output tensor: Exported
    output_error: str | None = None
    not_plain: bool = False
    # the GPU's staged samples: the call's own CUDA events (the parent's clock around the request checks them)
    ms: float = 0.0
    host_ms: float = 0.0
    lag_ms: float = 0.0
    slots: list[list[dict[str, Any]]] = field(default_factory=list)     # graph mode: every captured call's outputs
    capture_error: str | None = None    # graph mode: the call cannot be captured (the pair goes back to cold)
    profile: Profile | None = None    # a profiled call's (CallRequest.profile)


@dataclass(frozen=True)
class Loaded:
    """CPU path: the candidate worker built ModelNew and serves calls now (its first reply, in place of Outputs: the
    parent runs the trials as staged calls, harness.run.evaluate)."""
    KIND: ClassVar[str] = "loaded"
    param_match: str
    extensions: list[str]
    module_mode: str
    sandbox: dict[str, Any] | None = None


@dataclass(frozen=True)
class KeepRequest:
    """Reference only, before the candidate's output of the timed sample `seed` is read whole: keep that seed and
    captured call `slot` under `check_seed`, to recompute the reference's output on the same inputs when the
    candidate's is compared. The parent sends the seed it staged (or, unstaged, drew) the sample from, so the
    candidate's sample may come before or after the reference side's on the same inputs."""
    OP: ClassVar[str] = "keep"
    check_seed: int
    seed: int
    slot: int = 0


@dataclass(frozen=True)
class Kept:
    KIND: ClassVar[str] = "kept"
    error: str | None = None


@dataclass(frozen=True)
class ArenaSet:
    KIND: ClassVar[str] = "arena_set"
    error: str | None = None


@dataclass(frozen=True)
class ModeSet:
    KIND: ClassVar[str] = "mode"
    mode: str


@dataclass(frozen=True)
class BudgetSet:
    """The reply to BudgetRequest: the share the reference holds to now, and its float64 note."""
    KIND: ClassVar[str] = "budget"
    share_bytes: int | None
    fp64: str | None = None


@dataclass(frozen=True)
class MemoryPeak:
    """The reply to MemoryRequest (also `ready`'s setup peak): the allocator's peak so far, allocated and reserved,
    and how often it met its cap; apart from them, `arena_bytes`: the most device bytes the staged inputs' arena
    (allocated outside the allocator, harness.worker.arena) held at once in this process, 0 where it held none
    (harness.worker.sampler.peak_memory). All None on the CPU."""
    KIND: ClassVar[str] = "memory"
    peak_allocated_bytes: int | None = None
    peak_reserved_bytes: int | None = None
    alloc_retries: int | None = None
    ooms: int | None = None
    arena_bytes: int | None = None


@dataclass(frozen=True)
class Health:
    KIND: ClassVar[str] = "health"
    ok: bool


@dataclass(frozen=True)
class PeerClosed:
    KIND: ClassVar[str] = "peer_closed"


@dataclass(frozen=True)
class Built:
    """The build worker imported the candidate (its extensions built, or why not)."""
    KIND: ClassVar[str] = "built"
    status: str                         # built | compile_error | skipped
    error: str | None
    compiler_output: str | None
    extensions: list[str]
    seconds: float
    import_error: str | None = None
    sandbox: dict[str, Any] | None = None


@dataclass(frozen=True)
class Ceilings:
    """The device's measured copy bandwidth and matmul throughput."""
    KIND: ClassVar[str] = "ceilings"
    copy_gbps: float
    matmul_tflops_bf16: float
    matmul_tflops_fp32: float


@dataclass(frozen=True)
class LintReport:
    """A problem's lint (harness.worker.lint): the checks, the scale of its output and its eager time."""
    KIND: ClassVar[str] = "lint"
    zeros_pass: bool
    constant_pass: bool
    identity_pass: bool
    nan_or_inf: bool
    input_dependent: bool | None
    degenerate: bool
    reasons: list[str]
    deterministic: bool | None          # None: skipped for memory (named in `skipped`)
    run_to_run_max_abs: float | None
    param_dependent: bool | None
    mean_abs: float | str               # NaN or Inf travel as strings ('nan': the output holds no finite value)
    std: float | str
    dtype: str
    atol: float
    rtol: float
    output_shapes: list[list[int]]
    eager_ms: float
    peak_memory_gb: float | None
    skipped: list[str] = field(default_factory=list)   # checks skipped for the memory budget, named
    sizes: list[dict[str, Any]] = field(default_factory=list)  # SIZES: per size its verdict, reasons, eager ms


def pack_floats(values: list[float]) -> str:
    """Floats (NaN and Inf included) as base64 of native float64: what a check carries over the local pipe."""
    return base64.b64encode(array.array("d", values).tobytes()).decode("ascii")


def unpack_floats(text: str) -> list[float]:
    """The floats pack_floats packed; ProtocolError for anything else."""
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
        if len(raw) % 8:
            raise ValueError("not a whole number of float64s")
        return array.array("d", raw).tolist()
    except (ValueError, UnicodeEncodeError) as exc:
        raise ProtocolError(f"packed floats that do not unpack: {exc}") from None


def wire(message: Any) -> dict[str, Any]:
    """The message as a dict for the channel. Shallow (messages are flat; a nested dataclass is converted): a check
    result carries thousands of floats, and asdict's deep copy of them cost milliseconds on every sample."""
    data = {}
    for f in dataclasses.fields(message):
        data[f.name] = _plain(getattr(message, f.name))
    if getattr(message, "OP", None):
        return {"op": message.OP, **data}
    return {"kind": message.KIND, **data} if getattr(message, "KIND", None) else data   # a job has no tag


def _plain(value: Any) -> Any:
    """A field's value for the wire: a nested dataclass as a dict, alone, as a list item or as a dict value (one level
    down: lists of floats and dicts pass as they are)."""
    if dataclasses.is_dataclass(value):
        return dataclasses.asdict(value)
    if isinstance(value, list) and value and dataclasses.is_dataclass(value[0]):
        return [dataclasses.asdict(v) if dataclasses.is_dataclass(v) else v for v in value]
    if isinstance(value, dict) and value and dataclasses.is_dataclass(next(iter(value.values()))):
        return {k: dataclasses.asdict(v) if dataclasses.is_dataclass(v) else v for k, v in value.items()}
    return value


def from_fields(cls: type, data: dict[str, Any]) -> Any:
    """A reply `cls` built by a worker from its own dict of figures: the entries that name a field of `cls` (the rest
    are what parse drops on the parent's side), unchecked (a NaN stays a float: the channel sends it as a string)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in names})


def payload(message: Any) -> dict[str, Any]:
    """A message's fields as a dict: its wire form without its tag (`kind` or `op`)."""
    return {k: v for k, v in wire(message).items() if k not in ("kind", "op")}


def parse(cls: type, data: dict[str, Any]) -> Any:
    """The dataclass `cls` from a received dict, or ProtocolError naming the first wrong field. Nested messages (a
    job's TimingSpec, a reply's parts) are parsed too: alone, in a union, as list items or as dict values."""
    tag = getattr(cls, "KIND", None)
    if tag is not None and data.get("kind") != tag:
        raise ProtocolError(f"expected a {tag!r} message, got {data.get('kind')!r}: {str(data.get('error'))[:200]}")
    hints = _hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
                continue
            raise ProtocolError(f"{cls.__name__}: missing field {f.name!r}")
        try:
            kwargs[f.name] = _value(data[f.name], hints[f.name])
        except _Mismatch:
            raise ProtocolError(f"{cls.__name__}: field {f.name!r} has a {type(data[f.name]).__name__}") from None
    return cls(**kwargs)


def parse_reply(data: dict[str, Any], *classes: type) -> Any:
    """The reply `data` as whichever of `classes` its kind names (ProtocolError: none, or not of that shape)."""
    for cls in classes:
        if data.get("kind") == cls.KIND:
            return parse(cls, data)
    wanted = " or ".join(repr(cls.KIND) for cls in classes)
    raise ProtocolError(f"expected {wanted}, got {data.get('kind')!r}: {str(data.get('error'))[:200]}")


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


class _Mismatch(Exception):
    """A value that does not fit its field's type."""


def _nested(hint: Any) -> type | None:
    """The message dataclass a hint names, alone or in a union."""
    options = typing.get_args(hint) if _is_union(hint) else (hint,)
    return next((h for h in options if dataclasses.is_dataclass(h)), None)


def _value(value: Any, hint: Any) -> Any:
    """`value` checked against `hint`, its nested messages parsed (_Mismatch when it does not fit)."""
    nested = _nested(hint)
    if nested is not None and isinstance(value, dict):
        return parse(nested, value)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is list and args and _nested(args[0]) and isinstance(value, list):
        return [_value(v, args[0]) for v in value]
    if origin is dict and len(args) == 2 and _nested(args[1]) and isinstance(value, dict):
        return {k: _value(v, args[1]) for k, v in value.items()}
    if not _fits(value, hint):
        raise _Mismatch()
    return value


def _is_union(hint: Any) -> bool:
    origin = typing.get_origin(hint)
    return origin is typing.Union or str(origin) == "<class 'types.UnionType'>"


def _fits(value: Any, hint: Any) -> bool:
    origin = typing.get_origin(hint)
    if _is_union(hint):
        return any(_fits(value, h) for h in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is Any:
        return True
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if hint is str:
        return isinstance(value, str)
    if origin is dict:
        return isinstance(value, dict)
    if origin is list:
        (item,) = typing.get_args(hint) or (Any,)
        return isinstance(value, list) and (item is Any or all(_fits(v, item) for v in value))
    return isinstance(value, hint)
