"""The GPU memory budget, on the CPU where it runs there: chunked comparisons give the figures of whole ones, the
mutation check's checksums agree with its copies, the budget planner's arithmetic (harness.shared.memplan), the
graph_calls cap, the `gpu_memory_gb` plumbing, and a reference side that runs out of memory giving `skipped` +
`harness_oom` rather than a candidate's `oom`. The GPU side of it is in test_gpu.py (test_memory_*)."""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch

from conftest import FIXTURES, cuda_available, json_records, PAIR_TIMEOUT_ARG, run_cli, verdict, write_config
from harness.core import flags
from harness.core.config import load_config
from harness.core.errors import InputError
from harness.shared import memplan
from harness.shared.memplan import GIB, MIB, Needs
from harness.worker import float64, sampler, verify
from harness.worker.common import Settings, device_input_set_at, device_input_sets


@pytest.fixture(autouse=True)
def _no_grad():
    with torch.no_grad():                               # as in the workers (common.setup_torch)
        yield


# ---------------------------------------------------------------- the unchunked compare, as it was: the oracle

def whole_compare(out, ref, atol, rtol):
    if tuple(out.shape) != tuple(ref.shape) or out.dtype != ref.dtype:
        return verify.compare_tensor(out, ref, atol, rtol)
    if out.numel() == 0:
        return verify.compare_tensor(out, ref, atol, rtol)
    work = torch.float64 if ref.dtype == torch.float64 else torch.float32
    a = out.to(ref.device).reshape(-1).to(work)
    b = ref.reshape(-1).to(work)
    special = ~torch.isfinite(b) | ~torch.isfinite(a)
    same_special = (torch.isnan(a) & torch.isnan(b)) | (torch.isinf(a) & torch.isinf(b) & (torch.sign(a) == torch.sign(b)))
    bad_special = special & ~same_special
    finite = ~special
    err = torch.where(finite, (a - b).abs(), torch.zeros_like(a))
    bad = bad_special | (err > atol + rtol * b.abs())
    n_bad = int(bad.sum())
    rel_mask = finite & (b.abs() > atol)
    rel = torch.where(rel_mask, err / b.abs().clamp_min(1e-30), torch.zeros_like(a))
    result = {"ok": n_bad == 0, "max_abs_err": float(err.max()), "max_rel_err": float(rel.max()),
              "mismatches": n_bad, "first_mismatch": None, "reason": None}
    if n_bad:
        flat = int(bad.nonzero()[0, 0])
        got, want = float(a[flat]), float(b[flat])
        result["first_mismatch"] = {"index": verify._index(flat, tuple(ref.shape)), "got": got, "expected": want}
        n_nan = int((bad_special & torch.isnan(a)).sum())
        what = f"{n_nan} NaN where the reference is finite, " if n_nan else ""
        result["reason"] = (f"{what}{n_bad} of {ref.numel()} elements out of tolerance; first at "
                            f"{result['first_mismatch']['index']}: got {got:.6g}, expected {want:.6g}")
    return result


def _same(a: dict, b: dict) -> bool:
    """Equal results, NaN equal to NaN (repr spells floats exactly)."""
    return repr(a) == repr(b)


def _cases():
    g = torch.Generator().manual_seed(1)
    ref = torch.randn(37, 29, generator=g)
    late = ref.clone()
    late[36, 28] += 1.0                                # the only mismatch, in the last chunk
    late[30, 3] = float("nan")                          # a NaN where the reference is finite, in a late chunk
    special_ref = ref.clone()
    special_ref[5, 5], special_ref[20, 1], special_ref[33, 7] = float("inf"), float("nan"), float("-inf")
    special_out = special_ref.clone()
    special_out[33, 7] = float("inf")                   # -inf became +inf: a mismatch
    special_out[34, 0] = float("inf")                   # an Inf where the reference is finite
    big = ref * 3e38                                    # |a - b| overflows to inf
    near = ref + 1e-6 * torch.randn(37, 29, generator=g)
    t = torch.randn(29, 37, generator=g)
    yield "late", late, ref
    yield "special", special_out, special_ref
    yield "overflow", -big, big
    yield "within", near, ref
    yield "equal", ref.clone(), ref
    yield "transposed out", t.t(), t.t().contiguous() + 0.0
    yield "transposed both", (t + 1e-3).t(), t.t()
    yield "strided", ref[::2, 1::3] + 1e-2, ref[::2, 1::3].contiguous()
    yield "expanded", torch.zeros(()).expand(37, 29), ref
    yield "3-d", torch.randn(4, 3, 50, generator=g), torch.randn(4, 3, 50, generator=g)
    yield "0-d", torch.tensor(1.0), torch.tensor(1.5)
    yield "float64", ref.double() + 1e-9, ref.double()
    yield "bf16", ref.bfloat16() + 0.5, ref.bfloat16()
    yield "fp16", ref.half(), ref.half()
    yield "int", torch.arange(100), torch.arange(100).flip(0)
    yield "shape", ref[:3], ref
    yield "dtype", ref.double(), ref
    yield "empty", torch.empty(0, 3), torch.empty(0, 3)


@pytest.mark.parametrize("chunk_bytes", [4, 64, 1000, 4096, None])
def test_chunked_compare_gives_the_whole_compares_figures(chunk_bytes):
    for name, out, ref in _cases():
        chunked = verify.compare_tensor(out, ref, 1e-4, 1e-4, chunk_bytes=chunk_bytes)
        assert _same(chunked, whole_compare(out, ref, 1e-4, 1e-4)), (name, chunked)


def test_chunked_compare_of_several_outputs_names_the_first_failing_one():
    g = torch.Generator().manual_seed(2)
    a, b = torch.randn(64, 64, generator=g), torch.randn(10, generator=g)
    bad = b.clone()
    bad[9] += 1
    for chunk in (16, 256, None):
        whole = verify.compare_outputs([a, bad], [a, b], 1e-4, 1e-4)
        assert verify.compare_outputs([a, bad], [a, b], 1e-4, 1e-4, chunk_bytes=chunk) == whole
        assert whole["reason"].startswith("output 1: 1 of 10 elements") and whole["first_mismatch"]["index"] == [9]
        assert whole["first_mismatch"]["output"] == 1


def test_pieces_cover_every_element_once_in_order_within_the_limit():
    for shape, limit in [((7, 5, 3), 4), ((2, 100), 30), ((1, 1000), 64), ((13,), 5), ((), 1), ((3, 0, 2), 4),
                         ((5, 33), 33), ((5, 34), 33)]:
        t = torch.arange(math.prod(shape)).reshape(shape) if shape else torch.tensor(0)
        seen = []
        for offset, prefix, span in verify.pieces(shape, limit):
            part = verify.piece(t, prefix, span)
            assert part.numel() <= max(limit, 1) and part.tolist() == list(range(offset, offset + part.numel()))
            seen += part.tolist()
        assert seen == list(range(t.numel())), shape


def test_float64_figures_in_pieces_equal_the_whole():
    g = torch.Generator().manual_seed(3)
    out, exact = torch.randn(40, 30, generator=g), torch.randn(40, 30, generator=g).double()
    whole = float((out.double() - exact).abs().max())
    assert verify.max_abs_diff64([out], [exact], chunk_bytes=64) == whole
    assert verify.max_magnitude([exact], chunk_bytes=64) == float(exact.abs().max())
    nan = out.clone()
    nan[39, 29] = float("nan")
    assert math.isnan(verify.max_abs_diff64([nan], [exact], chunk_bytes=64))       # torch's max: NaN wins
    assert verify.max_abs_diff64([out], [exact, exact]) is None
    assert verify.all_finite([out], chunk_bytes=64) and not verify.all_finite([nan], chunk_bytes=64)


# ---------------------------------------------------------------- the mutation check: checksums agree with copies

def test_checksums_agree_with_copies():
    g = torch.Generator().manual_seed(4)
    x = torch.randn(50, 40, generator=g)
    x[3, 3] = 0.0
    x[4, 4] = float("nan")
    key = 12345
    d = sampler.Digest(x, key)
    variants = {"same": x.clone(), "minus zero": x.clone(), "other nan": x.clone(), "one changed": x.clone(),
                "swapped": x.clone(), "shape": x.reshape(40, 50).clone(), "dtype": x.double(),
                "transposed copy": x.t().contiguous().t()}
    variants["minus zero"][3, 3] = -0.0
    variants["other nan"][4, 4] = -float("nan")
    variants["one changed"][49, 39] = torch.nextafter(x[49, 39], torch.tensor(1e9))
    variants["swapped"][0, 0], variants["swapped"][0, 1] = x[0, 1], x[0, 0]
    for name, y in variants.items():
        assert d.same(y, key) == sampler.same_tensor(y, x), name
    for small in (16, 64, 4096):
        assert sampler.checksum(x, key, small) == sampler.checksum(x, key)
    ints = torch.arange(1000)
    assert sampler.Digest(ints, 7).same(ints.clone(), 7) and not sampler.Digest(ints, 7).same(ints.flip(0), 7)
    flags_ = torch.tensor([True, False, True])
    assert not sampler.Digest(flags_, 7).same(torch.tensor([True, True, True]), 7)


def test_checksums_are_the_same_however_a_tensor_is_cut_across_weight_periods(monkeypatch):
    """Pieces that straddle the weights' period (checksum's W repeats every PERIOD elements, each period under its
    own multiplier) give the sum of the whole; an element changed, or two swapped, in any period shows."""
    monkeypatch.setattr(sampler, "PERIOD", 37)
    sampler._weights_cache.clear()
    x = torch.randn(23, 19, generator=torch.Generator().manual_seed(9))
    whole = sampler.checksum(x, 99, 1 << 20)
    assert all(sampler.checksum(x, 99, size) == whole for size in (8, 24, 40, 296, 1000))
    for i in (0, 36, 37, 300, 436):
        y = x.clone().reshape(-1)
        y[i] += 1
        assert sampler.checksum(y.reshape(23, 19), 99, 40) != whole, i
    y = x.clone().reshape(-1)
    y[36], y[37] = x.reshape(-1)[37], x.reshape(-1)[36]            # a swap across a period boundary
    assert sampler.checksum(y.reshape(23, 19), 99) != whole
    assert sampler.checksum(x, 98) != whole                        # another key, other weights
    sampler._weights_cache.clear()


def test_checksums_of_every_width_see_one_changed_element_wherever_the_tensor_is_cut(monkeypatch):
    """Elements of 1, 2, 4 and 8 bytes (products wrap at 32 bits up to 4, at 64 for 8) and complex ones (their two
    parts): the same sum however the tensor is cut into pieces and periods, and a single element changed in its
    lowest bit, in any period, shows."""
    monkeypatch.setattr(sampler, "PERIOD", 16)
    sampler._weights_cache.clear()
    g = torch.Generator().manual_seed(3)
    base = torch.randn(11, 13, generator=g)
    tensors = {
        "float16": base.half(), "bfloat16": base.bfloat16(), "float32": base, "float64": base.double(),
        "int64": (base * 1e6).long(), "int32": (base * 1e6).int(), "uint8": (base * 50).abs().to(torch.uint8),
        "bool": base > 0, "complex64": torch.complex(base, -base),
        "complex128": torch.complex(base.double(), base.double()),
    }
    for name, x in tensors.items():
        whole = sampler.checksum(x, 77, 1 << 20)
        assert all(sampler.checksum(x, 77, size) == whole for size in (16, 48, 200, 520)), name
        assert sampler.Digest(x, 77).same(x.clone(), 77), name
        for i in (0, 15, 16, 100, 142):
            y = x.clone().reshape(-1)
            if name == "bool":
                y[i] = ~y[i]
            elif x.is_complex():
                torch.view_as_real(y)[i, 1].view(torch.int32 if name == "complex64" else torch.int64)[()] ^= 1
            else:
                bits = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[x.element_size()]
                y.view(bits)[i] ^= 1
            assert sampler.checksum(y.reshape(11, 13), 77, 48) != whole, (name, i)
    sampler._weights_cache.clear()


def test_snapshot_copies_small_inputs_and_checksums_large_ones(monkeypatch):
    x, n = torch.randn(64, 64), 3
    small = sampler.snapshot([x, n])
    assert small[0] == 0 and torch.equal(small[1][0], x) and small[1][1] == 3
    monkeypatch.setattr(sampler, "PRISTINE_BYTES", 1024)
    large = sampler.snapshot([[x, n], [x.clone(), n]])                   # graph mode: a set per captured call
    assert large[0] and all(isinstance(d, sampler.Digest) for d in large[1][::2])
    assert not sampler.differs([[x, n], [x.clone(), n]], large)
    y = x.clone()
    y[63, 63] += 1
    assert sampler.differs([[x, n], [y, n]], large)
    assert sampler.differs([x * 2, n], small) and not sampler.differs([x.clone(), n], small)


def test_one_captured_calls_inputs_drawn_again_are_those_of_the_set():
    problem = type("P", (), {"get_inputs": staticmethod(lambda: [torch.randn(3, 4), 7, torch.randint(0, 9, (5,))])})
    sets = device_input_sets(problem, 99, Settings(), "cpu", 4)
    for k in range(4):
        again = device_input_set_at(problem, 99, Settings(), "cpu", k)
        assert all(torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b for a, b in zip(again, sets[k]))


# ---------------------------------------------------------------- the planner's arithmetic

RELU = Needs(eager_peak=5 * GIB, sample_peak=5 * GIB + 200 * MIB, kept=0, params=0, inputs=5 * GIB // 2,
             outputs=5 * GIB // 2)


def test_budget_is_the_flag_or_the_card():
    assert memplan.budget_bytes(None, 80 * GIB) == 80 * GIB
    assert memplan.budget_bytes(24, 80 * GIB) == 24 * GIB
    assert memplan.budget_bytes(100, 80 * GIB) == 80 * GIB
    assert memplan.setup_share(24 * GIB, 3) == 24 * GIB - 3 * memplan.CONTEXT_BYTES
    assert memplan.fraction(20 * GIB, 80 * GIB) == 0.25 and memplan.fraction(90 * GIB, 80 * GIB) == 1.0


def test_a_large_elementwise_problem_fits_an_80_gb_card_within_the_target():
    plan = memplan.plan_pair(80 * GIB, 3, RELU)
    assert plan.error is None and plan.fp64 is None                    # room for the float64 checks too
    assert plan.reference + plan.candidate + plan.arena + 3 * memplan.CONTEXT_BYTES == 80 * GIB
    assert plan.arena == RELU.inputs and plan.record()["arena_bytes"] == plan.arena   # staged inputs, either side
    assert memplan.plan_pair(80 * GIB, 3, RELU, staged=False).arena == 0     # timing.staged_gpu off: none
    assert plan.candidate >= plan.candidate_need
    cold = memplan.plan_pair(80 * GIB, 3, RELU, fp64=False)
    # without float64, what each side is planned to hold is within 2x the eager peak + 1.5 GiB together
    assert memplan.reference_need(RELU) + memplan.candidate_need(RELU) <= 2 * RELU.eager_peak + 2 * GIB
    assert cold.reference_need == memplan.reference_need(RELU)
    # the room beyond both needs is split evenly: in an A/A pair both allocators work under caps of one size
    assert cold.reference == cold.candidate == (80 * GIB - 3 * memplan.CONTEXT_BYTES - cold.arena) // 2


def test_each_side_gets_at_least_its_need_and_half_the_room_where_the_other_leaves_it():
    usable = 24 * GIB - 2 * memplan.CONTEXT_BYTES
    assert memplan.even_share(usable, GIB, GIB) == usable // 2
    assert memplan.even_share(usable, 20 * GIB, GIB) == 20 * GIB                # the reference needs more than half
    assert memplan.even_share(usable, GIB, 20 * GIB) == usable - 20 * GIB      # the candidate does
    plan = memplan.plan_pair(23 * GIB, 2, RELU)     # the float64 reference: 10.44 of the 19.5 GiB beside the contexts
    room = 23 * GIB - 2 * memplan.CONTEXT_BYTES - plan.arena        # ... and the inputs' arena (2.5 GiB)
    assert plan.fp64 is None and plan.reference == plan.reference_need > room // 2
    assert plan.candidate == room - plan.reference >= plan.candidate_need


def test_float64_is_skipped_and_said_where_it_does_not_fit():
    plan = memplan.plan_pair(15 * GIB, 2, RELU)
    assert plan.error is None
    assert plan.fp64.startswith("skipped: needs ") and ", budget " in plan.fp64 and "GiB" in plan.fp64
    assert plan.reference_need == memplan.reference_need(RELU)


def test_a_pair_that_cannot_fit_is_refused_with_the_need_and_the_budget():
    plan = memplan.plan_pair(8 * GIB, 2, RELU)
    assert plan.error.startswith("harness_oom: the pair needs ") and plan.error.endswith("budget 8.0 GiB")
    # level1/040 (1 + 0.2 * randn of 6 GiB): get_inputs holds twice its inputs while it draws them, on each side
    drawn = Needs(eager_peak=6 * GIB, sample_peak=12 * GIB, kept=0, params=0, inputs=6 * GIB, outputs=GIB // 5)
    plan = memplan.plan_pair(24 * GIB, 2, drawn, fp64=False)
    assert plan.error.endswith("budget 24.0 GiB; each side's sample peaks at 12.0 GiB while get_inputs draws its "
                               "inputs (the forward alone: 6.0 GiB)"), plan.error
    eager = memplan.plan_pair(4 * GIB, 2, RELU)
    assert eager.error == ("harness_oom: the problem's eager forward needs 5.0 GiB, budget 4.0 GiB (3.0 GiB beside "
                           "2 CUDA contexts)")


def test_graph_calls_are_capped_by_what_a_call_holds():
    assert memplan.graph_calls_cap(20, 0, 0) == 20
    assert memplan.graph_calls_cap(20, 10 * MIB, 10 * MIB) == 20              # 40 MiB a call: 25 fit 1 GiB
    assert memplan.graph_calls_cap(20, 100 * MIB, 100 * MIB) == 2             # 400 MiB a call
    assert memplan.graph_calls_cap(20, GIB, GIB) == 1                         # never fewer than one
    mid = Needs(eager_peak=300 * MIB, sample_peak=400 * MIB, kept=0, params=0, inputs=100 * MIB, outputs=100 * MIB)
    plan = memplan.plan_pair(80 * GIB, 3, mid, graph_calls=20)
    assert plan.graph_calls == 2 and plan.graph_capped.startswith("2 of 20 calls captured")
    assert memplan.plan_pair(80 * GIB, 3, mid, graph_calls=0).graph_calls == 0
    tiny = Needs(eager_peak=MIB, sample_peak=2 * MIB, kept=MIB, params=0, inputs=MIB // 4, outputs=MIB // 4)
    uncapped = memplan.plan_pair(80 * GIB, 3, tiny, graph_calls=20)
    assert uncapped.graph_calls == 20 and uncapped.graph_capped is None
    tight = memplan.plan_pair(3 * GIB + GIB // 2, 2, mid, graph_calls=20)   # what is left beside the cold needs
    assert tight.error is None and tight.graph_calls == 1 and tight.graph_capped.startswith("1 of 20")
    assert tight.reference + tight.candidate + tight.arena + 2 * memplan.CONTEXT_BYTES == tight.budget
    assert tight.arena == mid.inputs * tight.graph_calls


def test_trial_0_is_made_again_beside_the_float64_outputs_only_where_that_fits_and_the_plan_counts_it():
    """Issue 44 item 8: trial 0's large expected outputs are computed again when checked (not moved to the host and
    back) where an eager call beside the float64 outputs stays within 2x the eager peak + 1.5 GiB, and the
    reference's float64 share holds that check."""
    assert memplan.first_made_again(RELU.eager_peak, RELU.outputs)               # elementwise: outputs ~ inputs
    check = RELU.eager_peak + 2 * RELU.outputs + memplan.CHECK_CHUNKS * memplan.CHUNK_BYTES
    assert check <= 2 * RELU.eager_peak + 3 * GIB // 2 and memplan.fp64_need(RELU) >= check
    # level1/007_matmul_small_k: a 2.25 GiB output of 6 MiB of inputs; beside its 4.5 GiB in float64 it is not
    small_k = Needs(eager_peak=9 * GIB // 4 + 6 * MIB, sample_peak=5 * GIB // 2, kept=0, params=0, inputs=6 * MIB,
                    outputs=9 * GIB // 4)
    assert not memplan.first_made_again(small_k.eager_peak, small_k.outputs)
    assert memplan.fp64_need(small_k) == small_k.stranded + 2 * small_k.eager_peak + memplan.HEADROOM_BYTES
    assert not memplan.first_made_again(None, RELU.outputs)                       # no peak measured (the CPU path)


def test_needs_from_the_references_report():
    report = {"eager_peak_bytes": 5, "sample_peak_bytes": 6, "kept_bytes": 0, "param_bytes": 1, "input_bytes": 2,
              "output_bytes": 2, "trials": 3}
    assert Needs.from_report(report) == Needs(5, 6, 0, 1, 2, 2, 3)
    assert Needs.from_report({**report, "stranded_bytes": 7}) == Needs(5, 6, 0, 1, 2, 2, 3, stranded=7)
    assert Needs.from_report({**report, "eager_peak_bytes": None}) is None
    assert Needs.from_report(None) is None


def test_the_references_share_holds_what_its_allocator_cannot_give_back():
    """Memory reserved beyond what is allocated after the reference emptied its cache (a live tensor inside a large
    freed segment) is part of what the reference holds: its share grows by it, and so does its float64 share."""
    plain = memplan.plan_pair(80 * GIB, 2, RELU, fp64=False)
    stranded = memplan.plan_pair(80 * GIB, 2, dataclasses.replace(RELU, stranded=GIB), fp64=False)
    assert stranded.reference_need == plain.reference_need + GIB
    assert memplan.fp64_need(dataclasses.replace(RELU, stranded=GIB)) == memplan.fp64_need(RELU) + GIB


# ---------------------------------------------------------------- configuration and flags

def test_gpu_memory_gb_in_the_config_and_on_the_command_line(tmp_path):
    from harness import cli
    assert load_config(None, {}).gpu_memory_gb is None
    path = tmp_path / "c.yaml"
    path.write_text("gpu_memory_gb: 24\n")
    assert load_config(path, {}).gpu_memory_gb == 24.0
    for bad in ("0", "-1", "lots", "true"):
        path.write_text(f"gpu_memory_gb: {bad}\n")
        with pytest.raises(InputError, match="gpu_memory_gb"):
            load_config(path, {})
    args = cli._run_parser().parse_args(["--gpu-memory-gb", "6"])
    assert cli._overrides(args)["gpu_memory_gb"] == 6.0
    assert load_config(None, cli._overrides(args)).gpu_memory_gb == 6.0
    assert "--gpu-memory-gb" in cli.build_parser().format_help()
    assert "--gpu-memory-gb" in cli.command_parser("lint").format_help()
    shipped = (Path(__file__).resolve().parent.parent / "config.yaml").read_text()
    assert "\ngpu_memory_gb: null" in shipped


def test_harness_oom_is_a_warning_row_that_keeps_a_pair_off_the_ranking():
    row = flags.get("harness_oom")
    assert row is flags.HARNESS_OOM and not row.invalidates and not row.ranked and not row.retry
    assert row.meaning == "the harness could not fit this problem in the memory budget; the candidate is not blamed"


# ---------------------------------------------------------------- blame, end to end on the CPU path

@pytest.fixture(scope="module")
def memory_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("memory")
    config = write_config(tmp, FIXTURES / "memory")
    done = run_cli("--config", str(config), "--json", "--timeout", PAIR_TIMEOUT_ARG)
    assert done.returncode == 0, done.stderr
    return json_records(done.stdout)


def test_a_reference_that_runs_out_of_memory_in_setup_is_not_the_candidates_oom(memory_run):
    record = memory_run["aa_setup"]
    assert record["status"] == "skipped" and record["flags"] == ["harness_oom"], record["error"]
    assert record["error"].startswith("harness_oom: ") and "get_inputs()" in record["error"]
    assert record["flag_details"]["harness_oom"] == record["error"]


def test_a_reference_that_runs_out_of_memory_mid_pair_is_not_the_candidates_oom(memory_run):
    record = memory_run["aa_midpair"]
    assert record["status"] == "skipped" and "harness_oom" in record["flags"], (record["error"], record["worker"])
    assert record["error"].startswith("harness_oom: the reference ran out of memory in "), record["error"]


def test_a_candidate_that_runs_out_of_memory_stays_oom(memory_run):
    record = memory_run["oom_candidate"]
    assert record["status"] == "oom" and "harness_oom" not in record["flags"], record["error"]


def test_an_aa_pair_on_a_problem_that_fits_is_ok(memory_run):
    record = memory_run["aa_fits"]
    assert verdict(record) == "ok", record["error"]
    assert record["correctness"]["fp64"] is None and record["correctness"]["fp64_reference_max_abs_err"] is not None


def test_lint_skips_a_check_that_does_not_fit_and_says_which(tmp_path):
    import json
    done = run_cli("lint", "--problems-dir", str(FIXTURES / "memory_lint" / "problems"), "--device", "cpu",
                   "--output-dir", str(tmp_path), "--json")
    assert done.returncode == 0, done.stderr
    results = {json.loads(l)["problem"].split("/")[1]: json.loads(l) for l in done.stdout.splitlines()}
    checks = results["001_checks_oom"]
    assert checks["verdict"] == "ok" and checks["deterministic"] is None and checks["param_dependent"] is None
    assert [s.split(":")[0] for s in checks["skipped"]] == ["deterministic", "param_dependent"], checks["skipped"]
    assert "out of memory in a second identical run" in checks["skipped"][0]
    assert checks["input_dependent"] is True and checks["eager_ms"] > 0
    eager = results["002_eager_oom"]
    assert eager["verdict"] == "oom" and "forward" in eager["reasons"][0]


# ---------------------------------------------------------------- the reference's GPU-side choices, on the CPU

class _Problem:
    """A problem module's stand-in: Linear -> ReLU on fresh randn inputs."""

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(24, 16)

        def forward(self, x):
            return torch.relu(self.linear(x))

    @staticmethod
    def get_inputs():
        return [torch.randn(40, 24)]


def _trials(monkeypatch, keep_bytes: int):
    from harness.worker import reference
    monkeypatch.setattr(reference, "KEEP_BYTES", keep_bytes)
    monkeypatch.setattr(float64, "KEEP_BYTES", keep_bytes)           # Parked's small draws
    torch.manual_seed(0)
    model = _Problem.Model()
    trials = reference._Trials(_Problem, Settings(), "cpu", 1000, 3, keep_all=False)
    originals = []
    for k in range(3):
        x = trials.inputs(k)
        originals.append([t.clone() for t in x])
        torch.manual_seed(1000 + k)
        trials.add(k, x, [model(*x)])
    return reference, model, trials, originals


def test_large_trials_keep_their_outputs_off_the_device_and_draw_their_inputs_again(monkeypatch):
    reference, model, trials, originals = _trials(monkeypatch, keep_bytes=1024)      # everything is "large"
    assert not trials.keep_outputs and not trials.keep_first_inputs and trials.kept_inputs == {}
    for k in range(3):
        again = trials.inputs(k)
        assert torch.equal(again[0], originals[k][0])                    # the same draw: seed + k
        assert torch.equal(trials.expected[k][0], model(*again))
    small = _trials(monkeypatch, keep_bytes=1 << 20)[2]
    assert small.keep_outputs and set(small.kept_inputs) == {0}          # trial 0's inputs stay, the rest are drawn


def test_the_trials_outputs_stay_on_the_device_only_within_half_of_keep_bytes(monkeypatch):
    """Three trials' outputs of 2560 bytes each (7680 together) under a KEEP_BYTES of 10000: within it, but not
    within its half, so they are not kept (level3/007's five 48 MiB outputs, 240 MiB under 256, took its reference
    past 2x eager + 1.5 GiB), while trial 0's 3840-byte inputs still are; every expected output is the same."""
    reference, model, trials, originals = _trials(monkeypatch, keep_bytes=10000)
    assert trials.output_bytes * trials.count == 7680
    assert not trials.keep_outputs and trials.keep_first_inputs and set(trials.kept_inputs) == {0}
    for k in range(3):
        assert torch.equal(trials.expected[k][0], model(*originals[k]))


def test_a_large_output_file_is_verified_from_the_host_with_the_same_figures(monkeypatch, tmp_path):
    from harness.shared import messages as m
    from harness.shared.tensorfile import write_tensors
    reference, model, trials, _ = _trials(monkeypatch, keep_bytes=1024)
    settings = Settings()
    out = trials.expected[1][0].clone()
    out[39, 15] += 1
    results = []
    for keep in (1024, 1 << 30):                         # read to the host (large) and to the device (small)
        monkeypatch.setattr(reference, "KEEP_BYTES", keep)
        monkeypatch.setattr(float64, "KEEP_BYTES", keep)           # Parked's small draws
        path = write_tensors([out], str(tmp_path / f"trial1-{keep}.kbt"))
        item = m.TrialFile("trial1", path, 1)
        result = reference._verify_file(item, trials, None, None, settings, "cpu", verify, None)
        result.pop("outputs")
        results.append(result)
    assert results[0] == results[1] and results[0]["first_mismatch"]["index"] == [39, 15]


def test_a_full_check_recomputes_the_references_output_from_the_samples_seed(monkeypatch):
    from harness.worker import reference
    from harness.shared import messages as m
    torch.manual_seed(0)
    model = _Problem.Model()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    spec = m.TimingSpec("host", 0, False, 20)
    s = sampler.Sampler({"eager": lambda x: model(*x)}, _Problem, Settings(), "cpu", spec, defenses=True,
                        trusted=True)
    memo = type("M", (), {"fp64_note": None})()
    full = reference._FullCheck(model, state, Settings(), True, s, memo, "cpu")
    s.sample(m.SampleRequest("eager", 4242))
    s.keep(m.KeepRequest(77, 4242, 0))
    assert s.kept[77] == (4242, 0)                       # a seed and a captured call, not tensors
    honest = model(*sampler.device_inputs(_Problem, 4242, Settings(), "cpu"))
    result = full.compare([honest.clone()], s.kept[77])
    assert result["ok"] and result["fp64_max_abs_err"] is not None and "fp64" not in result
    memo.fp64_note = "skipped: needs 9.0 GiB, budget 4.0 GiB"
    wrong = full.compare([honest + 1], s.kept[77])
    assert not wrong["ok"] and wrong["fp64"] == memo.fp64_note and "fp64_max_abs_err" not in wrong


def test_a_samples_inputs_are_the_only_input_set_alive_when_drawn():
    """The first sample of a variant runs that variant's warm-up calls on inputs of their own: drawn before the
    sample's inputs, not beside them (a problem with 1 GiB of inputs peaked at 2 GiB a sample: issue 29's H100
    figures). At every draw of get_inputs() no earlier input set may still be alive."""
    import weakref
    from harness.shared import messages as m
    alive: list = []
    most = []

    class Counting(_Problem):
        @staticmethod
        def get_inputs():
            most.append(sum(1 for ref in alive if ref() is not None))
            x = torch.randn(40, 24)
            alive.append(weakref.ref(x))
            return [x]

    torch.manual_seed(0)
    model = Counting.Model()
    spec = m.TimingSpec("host", 3, False, 20)              # three warm-up calls before the first sample
    s = sampler.Sampler({"eager": lambda x: model(*x)}, Counting, Settings(), "cpu", spec, defenses=True,
                        trusted=True)
    for seed in (11, 12, 13):
        s.sample(m.SampleRequest("eager", seed))
    assert len(most) == 6 and max(most) == 0, most


def _prepare(monkeypatch, tmp_path, problem_source: str, keep_bytes: int = 1024, device: str = "cpu"):
    """reference._prepare on a problem file, on the CPU (or `device`) with the GPU's choices (keep_all off)."""
    from types import SimpleNamespace
    from harness.worker import reference
    monkeypatch.setattr(reference, "KEEP_BYTES", keep_bytes)
    monkeypatch.setattr(float64, "KEEP_BYTES", keep_bytes)           # Parked's small draws
    real = reference._Trials

    def gpu_choices(*args, **kwargs):
        kwargs["keep_all"] = False
        return real(*args, **kwargs)

    monkeypatch.setattr(reference, "_Trials", gpu_choices)
    path = tmp_path / "problem.py"
    path.write_text(problem_source)
    job = SimpleNamespace(problem_path=str(path), precision="fp32", seed=7, trials=4, scratch=str(tmp_path))
    memory = SimpleNamespace(reset_peak=lambda: None, peak=lambda: None)
    return reference._prepare(job, device, memory)


STATELESS = '''
import torch
class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(24, 16)
    def forward(self, x):
        return torch.nn.functional.dropout(torch.relu(self.linear(x)), 0.5)
def get_inputs():
    return [torch.randn(40, 24)]
def get_init_inputs():
    return []
'''


def test_large_outputs_of_a_stateless_model_are_computed_again_when_checked(monkeypatch, tmp_path):
    """Past trial 0, large expected outputs are not copied to the host: the check computes them again from the
    trial's seed (dropout included), the same as they were at setup. Trial 0's waits on the host once the setup is
    done: it is checked while the float64 reference's outputs are on the device, and made again there it would sit
    beside them."""
    kept = _prepare(monkeypatch, tmp_path, STATELESS, keep_bytes=1 << 30)[3]        # small: every output kept
    _, model, _, trials, _ = _prepare(monkeypatch, tmp_path, STATELESS)
    assert kept.forward is None and all(e is not None for e in kept.expected)
    assert trials.forward is model and trials.expected[0] is not None and trials.expected[1:] == [None] * 3
    first = trials.expected[0][0]
    trials.settle_first()                          # the setup's checks are done with trial 0: to the host
    assert trials.expected[1:] == [None] * 3 and trials.kept_bytes() == 0
    assert trials.expected[0][0].device.type == "cpu" and torch.equal(trials.expected[0][0], first)
    for k in range(4):
        assert torch.equal(trials.expected_for(k)[0], kept.expected[k][0])
    assert not torch.equal(trials.expected_for(1)[0], trials.expected_for(2)[0])


def test_trial_0s_large_output_is_made_again_when_checked_where_it_fits_beside_the_float64_outputs(monkeypatch,
                                                                                                   tmp_path):
    """Issue 44 item 8: where memplan.first_made_again allows it, trial 0's large expected outputs are dropped once
    the setup is done with them and computed again from its seed when checked, the same values; where it does not,
    they wait on the host as before."""
    _, model, _, trials, _ = _prepare(monkeypatch, tmp_path, STATELESS)
    first = trials.expected[0][0].clone()
    trials.settle_first(eager_peak=1 << 40)           # an eager peak that holds twice the outputs
    assert trials.expected[0] is None and trials.kept_bytes() == 0
    assert torch.equal(trials.expected_for(0)[0], first)
    _, model, _, trials, _ = _prepare(monkeypatch, tmp_path, STATELESS)
    monkeypatch.setattr(memplan, "FIRST_SLACK", 0)
    trials.settle_first(eager_peak=0)                  # outputs that dwarf the eager peak: to the host
    assert trials.expected[0][0].device.type == "cpu" and torch.equal(trials.expected_for(0)[0], first)


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="needs a CUDA GPU")
def test_trial_0s_large_output_waits_on_the_host_in_pinned_memory(monkeypatch, tmp_path):
    """Issue 44 item 8: once the setup is done with them, trial 0's large expected outputs wait on the host in pinned
    memory, the same values, so that each check's copy back to the device is not a pageable copy."""
    _, model, _, trials, _ = _prepare(monkeypatch, tmp_path, STATELESS.replace("0.5)", "0.0)"), device="cuda")
    first = trials.expected[0][0].clone()
    trials.settle_first()
    moved = trials.expected[0][0]
    assert moved.device.type == "cpu" and moved.is_pinned() and torch.equal(moved, first.cpu())


_SPREAD = """
import json, os, sys, threading
from harness.worker import common, hostpin
seen = {}
common.pin_for_timing()                                 # the reference's derive runs held to its timing core
seen["held"] = sorted(os.sched_getaffinity(0))
with hostpin.spread_out():
    seen["inside"] = sorted(os.sched_getaffinity(0))
    box = []
    t = threading.Thread(target=lambda: box.append(sorted(os.sched_getaffinity(0)))); t.start(); t.join()
    seen["started inside"] = box[0]
seen["after"] = sorted(os.sched_getaffinity(0))
if sys.argv[1] == "cuda":
    import torch
    seen["threads"] = hostpin.register_pinned()
    x = torch.arange(1 << 24, dtype=torch.float32, device="cuda")
    host = hostpin.host_empty(x.shape, x.dtype).copy_(x)
    seen["pinned"] = host.is_pinned() and torch.equal(host.to("cuda"), x)
    seen["after pinning"] = sorted(os.sched_getaffinity(0))
print(json.dumps(seen))
"""


def _spread(device: str) -> dict:
    import json
    import os
    import subprocess
    import sys
    from conftest import REPO
    cores = sorted(os.sched_getaffinity(0))
    env = {**os.environ, "PYTHONPATH": str(REPO), "KB_TIMING_CPUS": str(cores[0]), "KB_CPUS": ",".join(map(str, cores)),
           "KB_SPARE_CPUS": ",".join(map(str, cores[1:]))}
    done = subprocess.run([sys.executable, "-c", _SPREAD, device], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return {"cores": cores, **json.loads(done.stdout.splitlines()[-1])}


def test_host_memory_is_pinned_on_the_spare_cores_then_the_timing_core_holds_again():
    """A GPU reference's derive runs held to its timing core, and torch's host allocator touches a new pinned block's
    pages in threads that the pinning call starts: spread_out puts that call, and the threads it starts, on the
    slot's spare cores, then holds the thread to its timing core again (one core took as long with 8 threads as
    cudaHostAlloc did: docs/measurements.md, twenty-second session)."""
    import os
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two cores")
    seen = _spread("cpu")
    cores = seen["cores"]
    assert seen["held"] == [cores[0]] and seen["after"] == [cores[0]]
    assert seen["inside"] == cores[1:] and seen["started inside"] == cores[1:]


@pytest.mark.parametrize("spare, threads", [("3", 0), ("3,4", 2), ("1,2,3,4,5", 4), (",".join(map(str, range(15))), 8)])
def test_pinned_pages_are_touched_by_a_power_of_two_threads_within_the_spare_cores(monkeypatch, spare, threads):
    """register_pinned asks torch's host allocator for as many page-touching threads as the spare cores hold (a power
    of two, at most REGISTER_THREADS), and changes nothing where there is a single core to touch them on."""
    from harness.worker import hostpin
    asked = []
    monkeypatch.setattr(torch._C, "_accelerator_setAllocatorSettings", asked.append, raising=False)
    monkeypatch.setenv("KB_SPARE_CPUS", spare)
    assert hostpin.register_pinned() == threads
    assert asked == ([f"pinned_use_cuda_host_register:True,pinned_num_register_threads:{threads}"] if threads else [])


@pytest.mark.skipif(cuda_available(), reason="a machine where no pinned memory can be had")
def test_a_host_copy_is_pageable_where_no_pinned_memory_can_be_had():
    """host_empty, where torch has no pinned memory to give (here: no accelerator), gives pageable memory of the
    shape and dtype asked for, so that a copy still waits on the host (Parked, settle_first, the bf16x3 correction)."""
    from harness.worker import hostpin
    host = hostpin.host_empty((3, 5), torch.float64)
    assert host.shape == (3, 5) and host.dtype == torch.float64 and host.device.type == "cpu" and not host.is_pinned()


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="needs a CUDA GPU")
def test_a_gpu_references_host_copies_are_pinned_by_registered_pages():
    """On the GPU: with register_pinned's setting made at run time (the reference worker's first step), host_empty
    gives pinned memory that crosses both ways bit for bit, and the thread is held to its timing core again after."""
    import os
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two cores")
    seen = _spread("cuda")
    assert seen["threads"] >= 1 and seen["pinned"] is True and seen["after pinning"] == [seen["cores"][0]]


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="needs a CUDA GPU")
def test_float64_figures_of_an_output_kept_on_the_host_are_those_of_the_device():
    """A float32 output kept on the host crosses in float32 and becomes float64 on the device (verify.moved): the
    same figures, bit for bit, as with both on the device."""
    out = torch.randn(3, 1 << 20, device="cuda")
    ref = (out.double() + 1e-6 * torch.randn(3, 1 << 20, device="cuda", dtype=torch.float64))
    host = out.cpu().pin_memory()
    assert verify.max_abs_diff64([host], [ref], device="cuda") == verify.max_abs_diff64([out], [ref], device="cuda")
    assert verify.moved(host, "cuda", torch.float64).equal(out.double())
    figures = verify.compare_outputs([host], [out.clone()], 0.0, 0.0, device="cuda")
    assert figures["ok"] and figures["max_abs_err"] == 0.0


def test_a_model_that_changes_its_state_keeps_every_output(monkeypatch, tmp_path):
    """A forward that changes the model's buffers (here only from its second call on): every trial's output is
    kept as computed, in order, from the initial state."""
    source = STATELESS.replace("        return torch.nn.functional.dropout(",
                               "        self.calls += 1\n        if self.calls > 1:\n"
                               "            self.bias_buf += 1.0\n"
                               "        return self.bias_buf + torch.nn.functional.dropout(")
    source = source.replace("        self.linear = torch.nn.Linear(24, 16)",
                            "        self.linear = torch.nn.Linear(24, 16)\n        self.calls = 0\n"
                            "        self.register_buffer('bias_buf', torch.zeros(16))")
    _, model, _, trials, _ = _prepare(monkeypatch, tmp_path, source)
    first = trials.expected[0][0]
    trials.settle_first()                          # trial 0's outputs go to the host: they cannot be made again
    assert trials.forward is None and all(e is not None for e in trials.expected)
    assert torch.equal(trials.expected[0][0], first)
    assert [float(e[0].min()) >= k for k, e in enumerate(trials.expected)] == [True] * 4


def test_large_float64_outputs_are_dropped_after_a_candidate_and_made_again_for_the_next(monkeypatch, tmp_path):
    """Large trials: the float64 reference's outputs serve one candidate's trial 0, then go (not to the host);
    the next candidate's trial 0 gets the same figure from outputs made again."""
    from harness.worker import reference
    from types import SimpleNamespace
    _, model, _, trials, state = _prepare(monkeypatch, tmp_path, STATELESS.replace("0.5)", "0.0)"))
    memory = SimpleNamespace(fp64_note=None)
    fp64 = float64.Float64(model, state, trials, "cpu")
    reference._derive(model, trials, True, "cpu", False, memory, fp64)
    outputs = fp64.outputs
    assert outputs is not None and outputs[0].dtype == torch.float64
    candidate = [trials.expected[0][0] * (1 + 1e-6)]
    first = fp64.max_abs_err(candidate)
    assert fp64.outputs is None and fp64.wanted()
    assert fp64.max_abs_err(candidate) == first > 0
    small = float64.Float64(model, state, _prepare(monkeypatch, tmp_path, STATELESS, keep_bytes=1 << 30)[3], "cpu")
    small.outputs = outputs
    small.max_abs_err(candidate)
    assert small.outputs is outputs                   # small trials keep them for the reference's life
    assert not float64.Float64(model, state, trials, "cpu").wanted()   # no float64 made: nothing measured


ELEMENTWISE = STATELESS.replace("torch.relu(self.linear(x))", "torch.relu(x)")


@pytest.mark.parametrize("source, products", [(STATELESS, True), (ELEMENTWISE, False)], ids=["linear", "relu"])
def test_a_forward_with_no_product_to_round_makes_no_signature_forward(monkeypatch, tmp_path, source, products):
    """Issue 44 item 8: the derive's FLOP count also tells whether the forward has a product for the signature
    forwards to round; where it has none, none of the four float64 signature forwards runs (each cost a float64
    forward of the problem, inputs and all), in the derive or in a timed output's full check, and the signature says
    why, as it did after the first of them."""
    from types import SimpleNamespace
    from harness.shared import messages as m
    from harness.worker import precision, reference
    problem, model, settings, trials, state = _prepare(monkeypatch, tmp_path, source.replace("0.5)", "0.0)"))
    float64_calls = []
    forward = type(model).forward

    def spy(self, *xs):
        float64_calls.append(xs[0].dtype == torch.float64)
        return forward(self, *xs)

    monkeypatch.setattr(type(model), "forward", spy)
    fp64 = float64.Float64(model, state, trials, "cpu")
    derived = reference._derive(model, trials, True, "cpu", True, SimpleNamespace(fp64_note=None), fp64)
    assert derived.work.flops is not None and (derived.work.flops > 0) == products
    assert sum(float64_calls) == (1 + len(precision.SCHEMES) if products else 1), float64_calls
    assert (derived.signature == float64.NO_PRODUCTS) != products and fp64.wanted()
    spec = m.TimingSpec("host", 0, False, 20)
    s = sampler.Sampler({"eager": lambda x: model(*x)}, problem, settings, "cpu", spec, defenses=True, trusted=True)
    full = reference._FullCheck(model, state, settings, True, s, SimpleNamespace(fp64_note=None), "cpu", trials, fp64)
    s.sample(m.SampleRequest("eager", 4242))
    s.keep(m.KeepRequest(77, 4242, 0))
    honest = model(*sampler.device_inputs(problem, 4242, settings, "cpu"))
    float64_calls.clear()
    checked = full.compare([honest.clone()], s.kept[77])
    assert checked["ok"] and checked["fp64_max_abs_err"] is not None
    assert sum(float64_calls) == (1 + len(precision.SCHEMES) if products else 1), float64_calls
    assert ("precision_signature" in checked) == products


@pytest.mark.parametrize("slack, on_device", [(1 << 30, True), (-(1 << 20), False)])
def test_the_exact_float64_forward_converts_a_large_draw_on_the_device_where_it_fits(monkeypatch, tmp_path, slack,
                                                                                    on_device):
    """Issue 44 item 8: a large draw waits on the host (float64.Parked) for the signature forwards, which round the
    float64 inputs in place and write them back from their float32 values; the exact float64 forward needs those
    values no longer once converted, so its draw stays where it was made (on a GPU, no trip to the host and back; run here with
    "cpu" as the host), unless its inputs beside their float64 copies would pass the reference's 2x eager + 1.5 GiB
    (inputs over twice the outputs plus CONVERT_SLACK: here 3840 bytes against 2 x 2560 + `slack`, a negative one
    standing for inputs much larger than the outputs, as matrix_vector's). The same outputs, bit for bit, either
    way."""
    from harness.worker import reference
    monkeypatch.setattr(float64, "CONVERT_SLACK", slack)
    _, model, _, trials, state = _prepare(monkeypatch, tmp_path, STATELESS.replace("0.5)", "0.0)"))
    moved: list = []
    real = float64.relocated

    def spy(tensors, devices):
        moved.append(len(tensors))                 # (the host is this device here: nothing crosses)
        return real(tensors, devices)

    monkeypatch.setattr(float64, "relocated", spy)
    fp64 = float64.Float64(model, state, trials, "cpu")
    fp64.host = "cpu"                                              # the GPU's path
    fp64.make_signatures()
    assert moved == [1] and fp64.emulated                          # the 40x24 draw (over KEEP_BYTES) parked
    parked_draw = float64.Parked(lambda: trials.inputs(0), trials, "cpu", "cpu")
    with parked_draw as draw:
        want, _ = float64.float64_reference(model, state, draw, device="cpu")
    moved.clear()
    got, note = fp64.make()
    assert note is None and moved == ([] if on_device else [1]) and torch.equal(got[0], want[0])


MATVEC = '''
import torch
class Model(torch.nn.Module):
    def forward(self, A, x, At):
        return torch.matmul(A, x) + At.sum(0).unsqueeze(1)
def get_inputs():
    A = torch.randn(40, 24)
    return [A, torch.randn(24, 1), A.t()]                # the third shares the first's memory
def get_init_inputs():
    return []
'''


def test_float64_work_runs_with_the_kept_float32_inputs_off_the_device(monkeypatch, tmp_path):
    """Issue 44 item 8: while each float64 forward runs (the four signature forwards, the float64 reference, a full
    check's), trial 0's kept float32 inputs are not held on the device (the GPU's path, run here with "cpu" as the
    host: the kept tensors are let go, weakrefs show it); after, the same list holds them again bit for bit, with
    their dtype, shape, strides, offsets and shared memory; every figure as without the move."""
    import secrets
    import weakref
    from harness.shared import messages as m
    from harness.worker import reference
    problem, model, settings, trials, state = _prepare(monkeypatch, tmp_path, MATVEC, keep_bytes=1 << 30)
    kept = trials.kept_inputs[0]
    values = [t.clone() for t in kept]
    layout = [(t.dtype, t.shape, t.stride(), t.storage_offset()) for t in kept]
    assert kept[0].untyped_storage().data_ptr() == kept[2].untyped_storage().data_ptr()
    originals = [weakref.ref(t) for t in kept]
    held = []
    forward = type(model).forward

    def spy(self, *xs):
        if xs[0].dtype == torch.float64:
            held.append(sum(r() is not None for r in originals))
        return forward(self, *xs)

    monkeypatch.setattr(type(model), "forward", spy)
    monkeypatch.setattr(secrets, "randbelow", lambda n: 12345)        # the same sample both ways
    spec = m.TimingSpec("host", 0, False, 20)
    s = sampler.Sampler({"eager": lambda x: model(*x)}, problem, settings, "cpu", spec, defenses=True, trusted=True)
    s.sample(m.SampleRequest("eager", 4242))
    s.keep(m.KeepRequest(77, 4242, 0))
    honest = model(*sampler.device_inputs(problem, 4242, settings, "cpu"))
    memo = type("M", (), {"fp64_note": None})()
    figures = []
    for host in (None, "cpu"):                  # as the CPU path runs it, then as the GPU's does
        fp64 = float64.Float64(model, state, trials, "cpu")
        full = reference._FullCheck(model, state, settings, True, s, memo, "cpu", trials)
        fp64.host = full.host = host
        fp64.make_signatures()
        outs, note = fp64.make()
        checked = full.compare([honest.clone()], s.kept[77])
        figures.append((outs, fp64.exact, fp64.signatures, checked))
        assert note is None and checked["ok"] and "precision_signature" in checked
    assert held[:10] == [3] * 10 and held[10:] == [0] * 10, held    # 4 + 1 forwards, 4 + 1 in the full check
    assert trials.kept_inputs[0] is kept and all(r() is None for r in originals)      # copies back, not the same
    assert [(t.dtype, t.shape, t.stride(), t.storage_offset()) for t in kept] == layout
    assert all(torch.equal(t, v) for t, v in zip(kept, values))
    assert kept[0].untyped_storage().data_ptr() == kept[2].untyped_storage().data_ptr()
    (outs, exact, signatures, checked), (outs2, exact2, signatures2, checked2) = figures
    assert torch.equal(outs[0], outs2[0]) and torch.equal(exact[0], exact2[0]) and checked == checked2
    assert signatures.keys() == signatures2.keys() and all(torch.equal(signatures[k][0], signatures2[k][0])
                                                           for k in signatures)


class _LargestNew:
    """A dispatch mode that keeps the most bytes of memory any op under it allocated for its outputs (memory none
    of its inputs lay in)."""

    def __init__(self):
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_leaves
        seen = self

        class Largest(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                given = {t.untyped_storage().data_ptr() for t in tree_leaves((args, kwargs))
                         if isinstance(t, torch.Tensor)}
                for t in tree_leaves(out):
                    if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in given:
                        seen.most = max(seen.most, t.untyped_storage().nbytes())
                return out

        self.most, self.mode = 0, Largest


@pytest.mark.parametrize("forward", [
    "torch.matmul(A, x) + A.sum(1, keepdim=True)",                 # A read again after its product
    "torch.matmul(A.mul_(2), x) + A.sum(1, keepdim=True)",         # changed before its product: rounded in a copy
    "torch.matmul(torch.matmul(A, A.t()), A) @ x",                 # one memory as both operands: in a copy
])
def test_a_rounded_float64_forward_rounds_its_input_in_place_and_writes_it_back(monkeypatch, forward):
    """Issue 44 item 8: a signature forward on float64 inputs made from their float32 copies off the device (the
    GPU's path, float64_reference's `device`) rounds an input operand in place and writes it back from that copy
    after the product, so that no second operand-sized float64 tensor is made (matrix_vector: 8 GiB beside its
    8 GiB input); the outputs are those of rounding a copy, bit for bit, also where the forward reads the input
    again, changed it first, or passes its memory as both operands."""
    from harness.worker import precision, reference
    monkeypatch.setattr(precision, "CHUNK_ELEMENTS", 64)
    monkeypatch.setattr(precision, "COPY_ELEMENTS", 100)             # copy_into: 4 rows a slice
    monkeypatch.setattr(precision, "SLICE_BYTES", 64)                # bf16x3's lo*lo: 8 rows of A's 40 a slice
    largest: list = []

    class Model(torch.nn.Module):
        def forward(self, A, x):
            seen = _LargestNew()
            with seen.mode():
                out = eval(forward)
            largest.append(seen.most)
            return out

    torch.manual_seed(0)
    A, x = torch.randn(40, 24), torch.randn(24, 1)
    original = A.clone()
    operand = A.numel() * 8                      # bytes of A in float64
    for scheme in precision.SCHEMES:
        got = []
        for device in (None, "cpu"):            # a copy rounded (the CPU path), then the GPU's path
            mode = precision.Rounded(scheme)
            outs, note = float64.float64_reference(Model(), {}, lambda: [A, x], mode=mode, device=device)
            assert note is None and mode.rounded >= 1 and not mode._sources, (scheme, note)
            got.append(outs[0])
        assert torch.equal(got[0], got[1]), (scheme, forward)
        copied, in_place = largest[-2:]
        assert copied >= operand or scheme == "tf32:b"                # (tf32:b rounds x, not A)
        if forward.startswith("torch.matmul(A, x)"):
            assert in_place < operand, (scheme, in_place)
        else:
            assert in_place == copied
    assert torch.equal(A, original)


def test_each_sides_allocator_retries_are_recorded_beside_its_peak():
    """worker.memory says how often each side's allocator met its cap (a retry synchronises the device inside what
    is timed): the figures of both workers' `memory` replies, absent where a worker gave none."""
    from types import SimpleNamespace
    from harness.run import memory
    ready = SimpleNamespace(memory={"eager_peak_bytes": 100})
    record = memory.record(ready, "cuda:0", None, memory.Seen(300, 0, 0), memory.Seen(200, 4, 1))
    assert record == {"eager_peak_bytes": 100, "reference_peak_bytes": 200, "reference_alloc_retries": 4,
                      "reference_ooms": 1, "candidate_peak_bytes": 300, "candidate_alloc_retries": 0,
                      "candidate_ooms": 0}
    assert memory.record(ready, "cuda:0", None, None, memory.Seen(200)) == {
        "eager_peak_bytes": 100, "reference_peak_bytes": 200, "candidate_peak_bytes": None}
    assert memory.record(ready, "cpu", None, None, None) is None


def test_the_staged_arena_is_recorded_apart_from_the_references_peak():
    """The staged path's arena holds the inputs the candidate reads (on the in-process path the candidate's own
    process holds them): worker.memory keeps it out of `reference_peak_bytes` (the allocator's peak alone) and
    reports the most it held at once as `arena_peak_bytes`, beside the plan's `arena_bytes`."""
    from types import SimpleNamespace
    from harness.run import memory
    from harness.shared import memplan
    ready = SimpleNamespace(memory={"eager_peak_bytes": 100})
    found = memplan.PairPlan(1000, 2, 400, 300, 0, 0, None, None, None, arena=150)
    record = memory.record(ready, "cuda:0", found, memory.Seen(300, 0, 0, 0), memory.Seen(200, 4, 1, 120))
    assert record["reference_peak_bytes"] == 200 and record["candidate_peak_bytes"] == 300
    assert record["arena_peak_bytes"] == 120 and record["arena_bytes"] == 150     # measured, and planned
    assert "arena_peak_bytes" not in memory.record(ready, "cuda:0", None, None, memory.Seen(200))   # not reported


def test_a_memory_reply_carries_the_arena_apart_from_the_allocators_peak(monkeypatch):
    """sampler.peak_memory reports torch's allocator peaks as they are and the arena's most bytes at once beside
    them (held_outside); the parent's reading (memory.peak) keeps a figure that is a count, else None."""
    import torch
    from types import SimpleNamespace
    from harness.run import memory
    from harness.shared import messages as m
    from harness.worker import sampler
    monkeypatch.setattr(sampler, "_outside", [0, 0])
    monkeypatch.setattr(torch.cuda, "memory_stats", lambda: {"num_alloc_retries": 2, "num_ooms": 0})
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda: 1000)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda: 1200)
    assert sampler.peak_memory("cuda:0").arena_bytes == 0                   # no arena held: 0, not None
    sampler.held_outside(300)
    sampler.held_outside(-300)
    sampler.held_outside(200)                                               # grown again, smaller: the most stays
    assert sampler.peak_memory("cuda:0") == m.MemoryPeak(1000, 1200, 2, 0, arena_bytes=300)
    assert sampler.peak_memory("cpu") == m.MemoryPeak()

    def seen(reply):
        side = SimpleNamespace(worker=SimpleNamespace(alive=lambda: True), memory=lambda deadline: reply)
        return memory.peak(side, "cuda:0")
    assert seen(m.MemoryPeak(1000, 1200, 2, 0, arena_bytes=300)) == memory.Seen(1000, 2, 0, 300)
    assert seen(m.MemoryPeak(1000, 1200, 2, 0, arena_bytes=-1)).arena is None
    assert seen(m.MemoryPeak(1000, 1200, 2, 0)).arena is None


def test_a_float64_output_holds_only_its_own_bytes():
    """mse_loss (as smooth_l1_loss) writes an input-sized result and resizes it to a scalar, which keeps the whole
    buffer: the float64 reference's outputs, kept for the reference's life, are copied where that happens."""
    from harness.worker.float64 import _own_storage
    x, y = torch.randn(256, 1024, dtype=torch.float64), torch.randn(256, 1024, dtype=torch.float64)
    loss = torch.nn.functional.mse_loss(x, y)
    own = _own_storage(loss)
    assert own.untyped_storage().nbytes() == 8 and torch.equal(own, loss)
    plain = torch.randn(64, 64)
    assert _own_storage(plain) is plain                 # nothing to give back: the same tensor
    column = torch.randn(512, 512)[:, 0]
    assert _own_storage(column).untyped_storage().nbytes() == 512 * 4

