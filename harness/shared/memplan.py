"""The GPU memory plan of a pair: how much of the budget (`gpu_memory_gb`, else the card's memory) each side may
hold, how many calls a CUDA graph may capture, whether the float64 checks fit. Pure arithmetic on byte counts, no
torch: the parent plans with it from what the reference reports in `ready` (`memory`), the workers apply the
shares they are given (torch.cuda.set_per_process_memory_fraction) and size their own work with its constants.

A pair's processes on one GPU: the reference worker, the candidate worker and, where spare workers are on, the next
reference (its CUDA context, for the profiler's warm-up); each holds a CUDA context outside torch's allocator
(CONTEXT_BYTES). The reference is alone while it sets up (its share then: the budget less every context); at
`ready` it has measured the eager call's peak and its own timing path's, and the parent splits the budget:

  reference  needs what it keeps between requests (and what its allocator cannot give back: `stranded`), plus
             the larger of its timed sample's peak and one eager call beside a check's work (a check compares in
             CHUNK_BYTES slices), plus the float64 reference when that fits, plus graph mode's captured calls;
  candidate  needs at least what the same timing path needs (an A/A pair: the reference's own sample peak) and
             its correctness trials (an eager call, plus the trials' inputs where they are small enough to keep);

and beside both, outside either allocator, the arena in which the reference stages each sample's inputs for the side
that runs it (arena_bytes; harness.worker.arena). Each side gets its need, and the room beyond both is shared so that both caps are half the budget where the needs
allow (even_share: two allocators under caps of one size behave alike); a pair whose two needs do not fit is not
run: the candidate is not blamed for memory the harness lacks (`harness_oom`, harness.core.flags)."""
from __future__ import annotations

from dataclasses import dataclass

GIB = 1 << 30
MIB = 1 << 20
CONTEXT_BYTES = GIB // 2        # one process's CUDA context (outside torch's allocator), rounded up
CHUNK_BYTES = 32 * MIB          # compares, checksums and float64 errors run in flat slices of this many bytes
KEEP_BYTES = 256 * MIB          # trial tensors stay on the device while all of them together are at most this
HEADROOM_BYTES = 256 * MIB      # per side: allocator rounding and what a measured peak did not see
GRAPH_BYTES = GIB               # per side: graph mode's captured calls' inputs and outputs together, at most this
# A sample's inputs up to this are copied for the mutation check; larger: checksums, twice a sample, which cost tens
# of milliseconds a sample on GiBs of inputs (docs/measurements.md). Raised to 8 GiB, the reference's planned share
# no longer held its samples (harness_oom): the plan must count the copies first (issue 29).
PRISTINE_BYTES = 256 * MIB
CHECK_CHUNKS = 6                # a check's working slices (CHUNK_BYTES each) beside the outputs it compares
FIRST_SLACK = GIB               # first_made_again: of the 1.5 GiB beyond 2x the eager peak (issue 44 item 8)


def gib(n: int | float | None) -> str:
    """Bytes as '31.2 GiB' (what error lines and notes say)."""
    return "?" if n is None else f"{n / GIB:.1f} GiB"


def budget_bytes(gpu_memory_gb: float | None, card_bytes: int) -> int:
    """The memory a pair plans within: `gpu_memory_gb` GiB, never more than the card has (None: the card's)."""
    if gpu_memory_gb is None or gpu_memory_gb <= 0:
        return card_bytes
    return min(card_bytes, int(gpu_memory_gb * GIB))


def setup_share(budget: int, contexts: int) -> int:
    """The reference's share while it sets up alone: the budget less every process's context."""
    return max(0, budget - contexts * CONTEXT_BYTES)


def fraction(share: int, card_bytes: int) -> float:
    """set_per_process_memory_fraction's argument for `share` bytes on a card of `card_bytes` (0 < f <= 1)."""
    if card_bytes <= 0:
        return 1.0
    return min(1.0, max(share, MIB) / card_bytes)


def per_graph_call(inputs: int, outputs: int) -> int:
    """Device bytes one captured call costs in graph mode: its static input copy, the fresh inputs copied into it,
    their pristine copy (the mutation check) and its static output."""
    return 3 * inputs + outputs


def arena_bytes(inputs: int, calls: int = 0) -> int:
    """The staged samples' arena (harness.worker.arena): device memory the reference allocates outside its
    allocator, one input set (graph mode: one per captured call), where it stages the inputs of whichever side runs
    next (the two never run at once)."""
    return max(1, calls) * inputs


def graph_calls_cap(wanted: int, inputs: int, outputs: int, room: int = GRAPH_BYTES) -> int:
    """How many calls a graph may capture: `wanted` (timing.graph_calls), at most as many as fit `room`, at least 1."""
    each = per_graph_call(inputs, outputs)
    if each <= 0:
        return max(1, wanted)
    return max(1, min(wanted, room // each))


def graph_extra(needs: "Needs", graph_calls: int) -> int:
    """What graph mode with `graph_calls` captured calls holds beyond one cold call's inputs and output."""
    if not graph_calls:
        return 0
    return max(0, graph_calls * per_graph_call(needs.inputs, needs.outputs) - needs.inputs - needs.outputs)


@dataclass(frozen=True)
class Needs:
    """What the reference measured by `ready` (bytes; its `memory`)."""
    eager_peak: int             # one eager forward: model, inputs, output and temporaries (max_memory_allocated)
    sample_peak: int            # its peak over its cold probe samples: the timing path both sides run
    kept: int                   # trial tensors it keeps on the device between requests
    params: int                 # the model's parameters and buffers
    inputs: int                 # one call's inputs
    outputs: int                # one call's outputs
    trials: int = 5             # correctness trials (the candidate keeps their inputs where they are small)
    stranded: int = 0           # reserved beyond allocated after the reference emptied its allocator's cache

    @staticmethod
    def from_report(memory: dict) -> "Needs | None":
        """From the reference's `memory` report; None when a figure is missing (the CPU path)."""
        keys = ("eager_peak_bytes", "sample_peak_bytes", "kept_bytes", "param_bytes", "input_bytes", "output_bytes")
        values = [memory.get(k) for k in keys] if isinstance(memory, dict) else [None]
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
            return None
        trials, stranded = memory.get("trials"), memory.get("stranded_bytes")
        return Needs(*values, trials=trials if isinstance(trials, int) and trials > 0 else 5,
                     stranded=stranded if isinstance(stranded, int) and stranded > 0 else 0)


@dataclass(frozen=True)
class PairPlan:
    budget: int
    contexts: int
    reference: int              # the reference's share while pairs run (its per-process cap)
    candidate: int              # the candidate's share: the rest
    candidate_need: int         # the least the candidate's share must be
    graph_calls: int            # calls per captured graph (graph mode)
    graph_capped: str | None    # why graph_calls is below timing.graph_calls (None: not capped)
    fp64: str | None            # None: the float64 checks fit; else "skipped: needs X GiB, budget Y GiB"
    error: str | None           # the pair does not fit the budget: "harness_oom: ..." (None: it does)
    reference_need: int = 0     # the least the reference's share must be (float64 included where it runs)
    arena: int = 0              # the staged samples' arena, beside both shares (arena_bytes)

    def record(self) -> dict:
        """The plan as a record shows it (`worker.memory`)."""
        return {"budget_bytes": self.budget, "reference_share_bytes": self.reference,
                "candidate_share_bytes": self.candidate, "arena_bytes": self.arena, "cuda_contexts": self.contexts,
                "fp64": self.fp64 or "run"}


def _sample_need(needs: Needs) -> int:
    """One side's timed samples (cold): the reference measured its own; the candidate runs the same path."""
    return max(needs.sample_peak - needs.kept, needs.eager_peak)


def reference_need(needs: Needs, graph_calls: int = 0) -> int:
    """The reference's share without float64: what it keeps, plus its timed samples or an eager call beside a
    check's slices (a full check recomputes the reference's output; the candidate's stays in the candidate's memory,
    a trial's large output file is read to the host; the reference drops its own last sample's output first), plus
    graph mode's captured calls. An eval-mode hint that does not fit is left out, not planned for."""
    check = needs.eager_peak + CHECK_CHUNKS * CHUNK_BYTES
    graph = needs.eager_peak + graph_extra(needs, graph_calls)
    return needs.kept + needs.stranded + max(_sample_need(needs), check, graph) + HEADROOM_BYTES


def first_made_again(eager_peak: int | None, outputs: int) -> bool:
    """Whether trial 0's large expected outputs may be computed again when checked, as the later trials' are
    (harness.worker.reference._Trials.settle_first), instead of waiting on the host. Trial 0 is checked while the
    float64 reference's outputs, twice its outputs' bytes, are on the device: made again, it holds an eager call
    beside them. That is allowed where it stays within twice the eager peak plus FIRST_SLACK (an elementwise
    problem, whose eager peak holds its inputs and outputs); not where the outputs dwarf the inputs
    (matmul_small_k: a 2.25 GiB output of small inputs). fp64_need plans for it."""
    return eager_peak is not None and 2 * outputs + CHECK_CHUNKS * CHUNK_BYTES <= eager_peak + FIRST_SLACK


def fp64_need(needs: Needs) -> int:
    """The reference's share with the float64 reference, beside the float32 model and what it keeps: a float64 model
    copy, and either the inputs while they become float64 (one float32 input and its float64 copy at a time, at
    worst all of them) or the float64 forward (twice an eager call less the float32 parameters). The reduced-precision
    signature forwards round a float64 input in place (harness.worker.precision.Rounded.source); an operand that is
    not an input is rounded in a copy, which is not counted here. Where trial 0's outputs are computed again when
    checked (first_made_again), the check of trial 0 beside the float64 outputs: an eager call, twice the outputs and
    the check's slices."""
    convert = 2 * needs.params + 3 * needs.inputs
    forward = 2 * needs.eager_peak
    first = needs.eager_peak + 2 * needs.outputs + CHECK_CHUNKS * CHUNK_BYTES \
        if first_made_again(needs.eager_peak, needs.outputs) else 0
    return needs.kept + needs.stranded + needs.params + max(convert, forward, first) + HEADROOM_BYTES


def candidate_need(needs: Needs, graph_calls: int = 0) -> int:
    """The least share the candidate gets: the timing path as the reference ran it (graph mode: its captured
    calls), and its trials (an eager call, a working copy of the inputs, the trials' inputs where kept)."""
    kept_inputs = needs.trials * needs.inputs if needs.trials * needs.inputs <= KEEP_BYTES else 0
    pristine = needs.inputs if needs.inputs <= PRISTINE_BYTES else 0       # larger: checksums (sampler.snapshot)
    trials = needs.eager_peak + pristine + kept_inputs
    graph = needs.eager_peak + graph_extra(needs, graph_calls)
    return max(_sample_need(needs), trials, graph) + HEADROOM_BYTES


def plan_pair(budget: int, contexts: int, needs: Needs, graph_calls: int = 0, fp64: bool = True,
              staged: bool = True) -> PairPlan:
    """The split of `budget` between the two sides of a pair. `graph_calls`: timing.graph_calls when the pair is
    timed in graph mode (0: cold); `fp64`: whether the float64 checks are wanted (the defenses on); `staged`: the
    reference stages each sample's inputs in an arena (always on the CPU path, on the GPU with timing.staged_gpu),
    outside either share: it comes off the budget first."""
    arena = arena_bytes(needs.inputs) if staged else 0
    usable = budget - contexts * CONTEXT_BYTES - arena
    calls, capped = 0, None
    if graph_calls:
        room = (usable - reference_need(needs) - candidate_need(needs)) // 2     # what graph mode may add, per side
        room += needs.inputs + needs.outputs                                     # ... beyond one cold call's
        calls = graph_calls_cap(graph_calls, needs.inputs, needs.outputs, min(GRAPH_BYTES, max(0, room)))
        if calls < graph_calls:
            capped = (f"{calls} of {graph_calls} calls captured: each holds "
                      f"{gib(per_graph_call(needs.inputs, needs.outputs))} on each side")
        if staged:
            usable -= arena_bytes(needs.inputs, calls) - arena
            arena = arena_bytes(needs.inputs, calls)
    ref, cand = reference_need(needs, calls), candidate_need(needs, calls)
    note = None
    if fp64:
        with64 = max(ref, fp64_need(needs))
        if with64 + cand <= usable:
            ref = with64
        else:
            note = f"skipped: needs {gib(with64)}, budget {gib(max(0, usable - cand))}"
    error = None
    beside = budget - contexts * CONTEXT_BYTES
    if needs.eager_peak > beside:
        error = (f"harness_oom: the problem's eager forward needs {gib(needs.eager_peak)}, budget {gib(budget)} "
                 f"({gib(beside)} beside {contexts} CUDA contexts)")
    elif ref + cand > usable:
        error = (f"harness_oom: the pair needs {gib(ref + cand + arena + contexts * CONTEXT_BYTES)} (reference "
                 f"{gib(ref)}, candidate {gib(cand)}, the inputs' arena {gib(arena)}, {contexts} CUDA contexts "
                 f"{gib(contexts * CONTEXT_BYTES)}), budget {gib(budget)}{_draw_note(needs)}")
    share = ref if error else even_share(usable, ref, cand)
    return PairPlan(budget, contexts, share, max(0, usable - share), cand, calls or graph_calls, capped, note, error,
                    ref, arena)


def _draw_note(needs: Needs) -> str:
    """Where a timed sample peaks well above the eager forward (its inputs drawn by get_inputs hold temporaries,
    e.g. `1 + 0.2 * randn(...)` holds two input-sized tensors), the refusal says so: each side draws its own."""
    sample = _sample_need(needs)
    if sample <= needs.eager_peak + max(needs.eager_peak // 4, 256 * MIB):
        return ""
    return (f"; each side's sample peaks at {gib(sample)} while get_inputs draws its inputs (the forward alone: "
            f"{gib(needs.eager_peak)})")


def even_share(usable: int, ref: int, cand: int) -> int:
    """The reference's cap where both needs fit `usable`: half of it, or more where its need is more, or less where
    the candidate's need leaves less. Both sides then work under caps of one size wherever the budget has room: a
    side capped near its measured peak can meet its cap when its allocator's cache fragments (the allocator frees
    its cache and retries, synchronising the device inside a timed call) while the other side never does, and an
    A/A pair then reads the harness's asymmetry instead of 1.0."""
    return max(ref, min(usable // 2, usable - cand))
