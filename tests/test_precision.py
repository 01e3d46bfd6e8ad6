"""The reduced-precision rule (docs/precision.md): the rounding the reference emulates (harness.worker.precision),
the signature figure (harness.worker.verify.precision_signature) and the parent's verdict
(harness.run.defenses.precision_verdict), with figures from scripts/precision_study.py."""
from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from harness.run import defenses
from harness.shared import messages as m
from harness.worker import precision, verify

READY = m.Ready("float32", "default", 1e-3, 1e-3, False, [[4]], 0, "train", 64 << 20,
                m.ProblemChecks(False, False, False, False, True, False, []), {}, 0.001, None)


# ---------------------------------------------------------------- the rounding

def test_round_mantissa_is_to_nearest_with_ties_to_even_in_both_float_widths():
    one = 1.0
    cases = [(one + 2 ** -11, one), (one + 3 * 2 ** -11, one + 2 ** -9), (one + 2 ** -11 + 2 ** -20, one + 2 ** -10),
             (-(one + 3 * 2 ** -11), -(one + 2 ** -9)), (0.0, 0.0)]
    for dtype in (torch.float32, torch.float64):
        x = torch.tensor([c for c, _ in cases], dtype=dtype)
        assert precision.round_mantissa(x, precision.TF32_BITS).tolist() == [r for _, r in cases]
        assert precision.round_mantissa(x, precision.TF32_BITS, truncate=True)[1].item() == one + 2 ** -10
    special = torch.tensor([float("inf"), float("-inf"), float("nan"), 3.4e38])
    got = precision.round_mantissa(special, 7)
    assert got[0] == float("inf") and got[1] == float("-inf") and got[2].isnan() and got[3] == float("inf")


def test_bf16_rounding_matches_torch_and_the_split_keeps_sixteen_bits():
    x = torch.randn(100_000) * 1e3
    assert torch.equal(precision.round_mantissa(x, precision.BF16_BITS), x.bfloat16().float())
    assert torch.equal(precision.round_mantissa(x.double(), precision.BF16_BITS), x.bfloat16().double())
    hi, lo = precision.split(x.double(), precision.BF16_BITS)
    assert torch.equal(hi, x.bfloat16().double()) and torch.equal(lo, (x - x.bfloat16().float()).bfloat16().double())
    assert float(((hi + lo - x.double()) / x.double()).abs().max()) <= 2 ** -16


def _old_round(x: torch.Tensor, bits: int, truncate: bool = False) -> torch.Tensor:
    """round_mantissa as it was written first, on the whole tensor (about five copies of x at its peak)."""
    int_type, total = {torch.float64: (torch.int64, 52), torch.float32: (torch.int32, 23)}[x.dtype]
    drop = total - bits
    raw = x.contiguous().view(int_type)
    if not truncate:
        raw = raw + ((1 << (drop - 1)) - 1) + ((raw >> drop) & 1)
    return torch.where(torch.isfinite(x), (raw & ~((1 << drop) - 1)).view(x.dtype), x)


_EXP_NAN = {torch.int64: 0x7FF << 52, torch.int32: 0xFF << 23}      # an all-ones exponent: with a payload, a NaN


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view({torch.float64: torch.int64, torch.float32: torch.int32}[t.dtype])


@pytest.mark.parametrize("chunk", [7, 1 << 22])
def test_rounding_in_place_a_slice_at_a_time_gives_the_whole_tensor_formulas_bits(monkeypatch, chunk):
    """Every bit as before, NaN payloads too, in both widths and modes, across slice ends (a 7-element slice), for
    strided views as well; and bf16x3's parts as the old whole-tensor split gave them."""
    monkeypatch.setattr(precision, "CHUNK_ELEMENTS", chunk)
    torch.manual_seed(5)
    for dtype, int_type in ((torch.float64, torch.int64), (torch.float32, torch.int32)):
        tiny = torch.finfo(dtype).tiny
        edge = [0.0, -0.0, tiny, -tiny, tiny / 8, float("inf"), float("-inf"), float(torch.finfo(dtype).max),
                1 + 2 ** -8, 1 + 3 * 2 ** -8, 1 + 2 ** -11, -(1 + 3 * 2 ** -11)]
        x = torch.cat([torch.tensor(edge, dtype=dtype), torch.randn(997, dtype=dtype) * 1e3])
        nans = torch.tensor([1, 5, 9], dtype=int_type) | torch.tensor(_EXP_NAN[int_type], dtype=int_type)
        x = torch.cat([x, nans.view(dtype), (-nans.view(dtype).abs())])
        for view in (x, x.view(-1, 35).t(), x[::3]):
            for bits in (precision.BF16_BITS, precision.TF32_BITS):
                for truncate in (False, True):
                    got, want = precision.round_mantissa(view, bits, truncate), _old_round(view, bits, truncate)
                    assert torch.equal(_bits(got), _bits(want)), (dtype, bits, truncate, view.shape)
        for truncate in (False, True):
            hi = _old_round(x, precision.BF16_BITS, truncate)
            lo = _old_round(x - hi, precision.BF16_BITS, truncate)
            rest = (x - hi) - lo
            for kept, want in ((True, x - rest), (False, lo)):
                got = precision._part(x, truncate, kept)
                assert torch.equal(_bits(got), _bits(want)), (dtype, truncate, kept)


def test_bf16x3_on_strided_operands_gives_what_the_three_products_give():
    """The parts are contiguous whatever the operands' layout; the sums stay exact, so a transposed or sliced operand
    changes nothing beyond float64 rounding."""
    torch.manual_seed(6)
    a, b = torch.randn(48, 80, dtype=torch.float64), torch.randn(96, 80, dtype=torch.float64)
    for truncate, scheme in ((False, "bf16x3"), (True, "bf16x3:rz")):
        (ah, al), (bh, bl) = precision.split(a, 7, truncate), precision.split(b, 7, truncate)
        want = ah @ bh.t() + ah @ bl.t() + al @ bh.t()
        with precision.Rounded(scheme):
            got = [a @ b.t(), torch.mm(a, b.t()), torch.einsum("ik,jk->ij", a, b)]
            sliced = a[:, ::2] @ b[:, ::2].t()
        for out in got:
            assert torch.allclose(out, want, rtol=1e-14, atol=1e-12)
        (sh, sl), (th, tl) = precision.split(a[:, ::2], 7, truncate), precision.split(b[:, ::2], 7, truncate)
        assert torch.allclose(sliced, sh @ th.t() + sh @ tl.t() + sl @ th.t(), rtol=1e-14, atol=1e-12)


@pytest.mark.parametrize("slice_bytes", [1, 1 << 40])
def test_bf16x3_makes_its_correction_a_slice_of_rows_at_a_time_with_the_whole_products_values(monkeypatch,
                                                                                             slice_bytes):
    """Issue 44 item 8: where an op's output rows are its first operand's (a batched convolution, linear, mm, mv,
    matmul by a matrix), or a batch's rows of both operands (bmm, matmul of two batches of one size), bf16x3's lo*lo
    product is made a slice of rows at a time (one row a slice, or all at once) and gives the three products'
    values; where they are not (an unbatched convolution, einsum), the whole product as before."""
    monkeypatch.setattr(precision, "SLICE_BYTES", slice_bytes)
    torch.manual_seed(7)
    d = torch.float64
    x3, w, v = torch.randn(3, 5, 40, dtype=d), torch.randn(24, 40, dtype=d), torch.randn(40, dtype=d)
    img, ker, bias = torch.randn(4, 3, 9, 9, dtype=d), torch.randn(6, 3, 3, 3, dtype=d), torch.randn(6, dtype=d)
    seq, tker = torch.randn(5, 4, 11, dtype=d), torch.randn(4, 2, 3, dtype=d)
    batch_a, batch_b = torch.randn(3, 5, 40, dtype=d), torch.randn(3, 40, 7, dtype=d)
    calls = [  # (the op on its operands as `f` gives them, whether its rows are the first operand's)
        (lambda f: F.linear(f(x3), f(w), bias[:1].expand(24).contiguous()), True),
        (lambda f: torch.mm(f(x3[0]), f(w.t())), True),
        (lambda f: torch.mv(f(w), f(v)), True),
        (lambda f: torch.matmul(f(x3), f(w.t())), True),
        (lambda f: F.conv2d(f(img), f(ker), bias, padding=1), True),
        (lambda f: F.conv_transpose1d(f(seq), f(tker), stride=2), True),
        (lambda f: F.conv2d(f(img[0]), f(ker), bias), False),
        (lambda f: torch.bmm(f(batch_a), f(batch_b)), True),
        (lambda f: torch.matmul(f(batch_a), f(batch_b)), True),
        (lambda f: torch.einsum("bik,bkj->bij", f(batch_a), f(batch_b)), False),
    ]
    for truncate, scheme in ((False, "bf16x3"), (True, "bf16x3:rz")):
        for op, rows in calls:
            with precision.Rounded(scheme) as mode:
                got = op(lambda t: t)
            assert mode.rounded == 1
            want = _three_products(op, truncate)
            assert torch.allclose(got, want, rtol=1e-13, atol=1e-12), (scheme, rows, (got - want).abs().max())
    a_rows, both = precision.ROWS_OF_A, precision.ROWS_OF_BOTH
    assert [precision._row_wise(f, a, b) for f, a, b in ((F.conv2d, img, ker), (F.conv2d, img[0], ker),
            (torch.bmm, batch_a, batch_b), (torch.matmul, x3, w.t()), (torch.matmul, x3, batch_b),
            (torch.matmul, x3, batch_b[:1]), (torch.baddbmm, batch_a, batch_b))] == [
        a_rows, None, both, a_rows, both, None, None]


def _three_products(op, truncate: bool):
    """op's hi*hi + hi*lo + lo*hi: `op(f)` applies f to its first operand, then to its second; each product takes
    the split's part (0: hi, 1: lo) the pair names, and the op's additive term (a bias), counted in each, is taken
    off twice (op on zeros gives it alone)."""
    def parts(which: tuple[int, int]):
        seen: list = []

        def f(t):
            seen.append(t)
            return precision.split(t, 7, truncate)[which[len(seen) - 1]]
        return f
    hh, hl, lh = (op(parts(which)) for which in ((0, 0), (0, 1), (1, 0)))
    return hh + hl + lh - 2 * op(lambda t: torch.zeros_like(t))


def test_the_mode_rounds_one_operand_of_every_matmul_like_op():
    torch.manual_seed(0)
    x, w, b = torch.randn(8, 64, dtype=torch.float64), torch.randn(16, 64, dtype=torch.float64), torch.randn(16)
    r = lambda t: precision.round_mantissa(t, precision.TF32_BITS)        # noqa: E731
    img, ker = torch.randn(1, 3, 9, 9, dtype=torch.float64), torch.randn(4, 3, 3, 3, dtype=torch.float64)
    bias = b.double()
    calls = [   # (the call, its result with the input operand rounded, with the weight operand rounded)
        (lambda: F.linear(x, w, bias), lambda: F.linear(r(x), w, bias), lambda: F.linear(x, r(w), bias)),
        (lambda: x @ w.t(), lambda: r(x) @ w.t(), lambda: x @ r(w.t())),
        (lambda: torch.einsum("ik,jk->ij", x, w), lambda: r(x) @ w.t(), lambda: x @ r(w).t()),
        (lambda: torch.addmm(bias, x, w.t()), lambda: bias + r(x) @ w.t(), lambda: bias + x @ r(w).t()),
        (lambda: F.conv2d(img, ker, padding=1), lambda: F.conv2d(r(img), ker, padding=1),
         lambda: F.conv2d(img, r(ker), padding=1)),
    ]
    for call, with_a, with_b in calls:
        for scheme, want in (("tf32:a", with_a), ("tf32:b", with_b)):
            mode = precision.Rounded(scheme)
            with mode:
                out = call()
            assert torch.allclose(out, want(), rtol=0, atol=1e-12) and mode.rounded == 1, scheme
    mode = precision.Rounded("tf32:a")
    with mode:
        assert torch.equal(torch.relu(x), x.clamp_min(0))                              # not a product
    assert mode.rounded == 0
    for scheme, truncate in (("bf16x3", False), ("bf16x3:rz", True)):
        with precision.Rounded(scheme):
            out = F.linear(x, w, bias)
        (xh, xl), (wh, wl) = precision.split(x, 7, truncate), precision.split(w, 7, truncate)
        assert torch.allclose(out, xh @ wh.t() + xh @ wl.t() + xl @ wh.t() + bias, rtol=0, atol=1e-12)


# ---------------------------------------------------------------- the signature

def _matmul_variants(a: torch.Tensor, b: torch.Tensor) -> dict[str, torch.Tensor]:
    """fp32 results of a @ b: torch's; one accumulator per output in K order (fused adds); 8-way split K; TF32;
    3xBF16 (hi*hi + hi*lo + lo*hi, fp32 GEMMs of bf16 values)."""
    acc = torch.zeros(a.shape[0], b.shape[1])
    for k in range(a.shape[1]):
        acc = (acc.double() + a[:, k:k + 1].double() * b[k:k + 1].double()).float()
    chunks = [a[:, i:i + 64] @ b[i:i + 64] for i in range(0, a.shape[1], 64)]
    split = chunks[0]
    for c in chunks[1:]:
        split = split + c
    tf32 = precision.round_mantissa(a, 10) @ precision.round_mantissa(b, 10)
    (ah, al), (bh, bl) = precision.split(a, 7), precision.split(b, 7)
    return {"eager": a @ b, "sequential": acc, "split_k": split, "tf32": tf32, "bf16x3": (ah @ bl + al @ bh) + ah @ bh}


@pytest.fixture(scope="module")
def matmul_figures():
    torch.manual_seed(3)
    a, b = torch.randn(128, 512), torch.randn(512, 96)
    exact = [a.double() @ b.double()]
    sample = verify.sample_index([exact[0].shape], count=6000, offset=11)      # every second element
    signatures = {}
    for scheme in precision.SCHEMES:
        with precision.Rounded(scheme):
            emulated = [a.double() @ b.double()]
        signatures[scheme] = verify.rounding_error(verify.take(emulated, sample), verify.take(exact, sample))
    return {name: ({s: verify.precision_signature(verify.take([out.t().contiguous().t()], sample),
                                                  verify.take(exact, sample), sig, chunk_bytes=1 << 12)
                    for s, sig in signatures.items()}, verify.max_abs_diff64([out], exact))
            for name, out in _matmul_variants(a, b).items()}


def test_honest_orders_share_none_of_either_signature(matmul_figures):
    for name in ("eager", "sequential", "split_k"):
        sig, _ = matmul_figures[name]
        for scheme in precision.SCHEMES:
            assert abs(sig[scheme]["share"]) < 0.02 and abs(sig[scheme]["z"]) < 5, (name, scheme, sig)
        assert defenses.signature_excess(sig, READY) is None


def test_tf32_and_split_bf16_carry_their_own_signature(matmul_figures):
    tf32, _ = matmul_figures["tf32"]
    bf16x3, err = matmul_figures["bf16x3"]
    for operand in ("tf32:a", "tf32:b"):                # both operands rounded: both signatures, whole
        assert tf32[operand]["share"] == pytest.approx(1, abs=0.1) and tf32[operand]["z"] > 30
    assert bf16x3["bf16x3"]["share"] == pytest.approx(1, abs=0.01) and bf16x3["bf16x3"]["z"] > 100
    # split bf16 is inside the old magnitude rule (~12x eager at K = 512): the signature is what catches it
    assert err < defenses.PRECISION_FACTOR * matmul_figures["eager"][1]
    assert "split bf16" in defenses.signature_excess(bf16x3, READY)
    assert "TF32" in defenses.signature_excess(tf32, READY)


def test_the_sample_is_strided_from_its_offset_across_the_outputs():
    sample = verify.sample_index([(3, 5), (4,), (2, 2, 2)], count=10, offset=1)      # 27 elements: stride 3
    assert [i.tolist() for i in sample] == [[1, 4, 7, 10, 13], [1], [0, 3, 6]]
    assert sum(i.numel() for i in verify.sample_index([(64, 64)], count=1 << 22)) == 64 * 64
    t = torch.arange(15.0).view(5, 3).t()                                              # not contiguous
    assert verify.take([t], [torch.tensor([0, 1, 5])])[0].tolist() == [0.0, 3.0, 1.0]


def test_the_signature_is_none_where_it_cannot_be_told():
    x = torch.randn(10, dtype=torch.float64)
    assert verify.precision_signature([x.float()], [x], [torch.zeros(10)]) is None       # no rounding, no matmul
    assert verify.precision_signature([x.float()], [x], [torch.zeros(5)]) is None         # shapes differ
    assert verify.precision_signature([x.float()], [x, x], [torch.ones(10)]) is None      # counts differ
    sample = [torch.tensor([12])]                                                         # past the output's end
    assert verify.signature_figures([x.float()], [x[:1]], {"tf32:a": [torch.ones(1)]}, sample) is None
    assert verify.signature_figures([x.float()], [x[:1]], {}, [torch.tensor([2])]) is None  # no signatures


# ---------------------------------------------------------------- the parent's verdict, on the study's figures

# Figures of scripts/precision_study.py (docs/precision.md): level1/001 (K 4096, 256 x 256 outputs), level1/014,
# level2/025 and level2/011 (GEMM + sigmoid + row sum, K 512, at 512 and 8192 rows).
HONEST_SEQ = {"tf32:a": {"share": -5.5e-07, "z": -0.026}, "tf32:b": {"share": 2.9e-05, "z": 1.4},
              "bf16x3": {"share": 0.0015, "z": 1.5}, "bf16x3:rz": {"share": 2.6e-05, "z": 0.11}}
HONEST_MIN_POOL = {"tf32:b": {"share": 0.00021, "z": 7.1}, "bf16x3": {"share": 0.0075, "z": 9.3},   # level2/025
                   "bf16x3:rz": {"share": 0.00075, "z": 13.0}}      # a z over 6 on a share of nothing: not flagged
HONEST_FEW_ROWS = {"tf32:b": {"share": 0.0064, "z": 1.8}, "bf16x3": {"share": -0.1, "z": -0.59}}  # 011, 512 rows
BF16X3 = {"tf32:a": {"share": -7.9e-05, "z": -0.95}, "bf16x3": {"share": 1.0, "z": 8700.0},
          "bf16x3:rz": {"share": -0.0063, "z": -9.8}}
BF16X3_RZ = {"bf16x3": {"share": -0.2, "z": -12.0}, "bf16x3:rz": {"share": 1.0, "z": 59000.0}}      # level1/014
TF32 = {"tf32:a": {"share": 1.0, "z": 250.0}, "tf32:b": {"share": 1.0, "z": 260.0},
        "bf16x3": {"share": -0.56, "z": -2.2}}
TF32_ROWSUM = {"tf32:a": {"share": 1.0, "z": 91.0}, "tf32:b": {"share": 1.0, "z": 89.0}}     # 011, 8192 rows: 21.7x
BF16X3_FEW_ROWS = {"bf16x3": {"share": 0.86, "z": 5.3}}            # 011 at 512 rows; 0.94, z 24 at 8192


@pytest.mark.parametrize("cand, eager, signatures, flagged", [
    (6.99e-04, 9.04e-05, HONEST_SEQ, False),           # sequential fp32 at K 4096: 7.7x eager, no signature
    (7.18e-08, 1.91e-07, HONEST_MIN_POOL, False),      # a min over channels: systematic but tiny shares
    (6.16e-04, 6.16e-04, HONEST_FEW_ROWS, False),      # a share of 0.1 from noise: z 0.6
    (1.24e-03, 9.04e-05, BF16X3, True),                # 3xBF16: 13.8x eager, inside 64x: its signature
    (1.24e-03, 6.99e-04, BF16X3, True),                # against a sequential eager (the GPU's): 1.8x
    (7.05e-05, 1.37e-06, BF16X3_RZ, True),             # the truncated split: 51.6x, its own signature
    (7.94e-02, 9.04e-05, TF32, True),                  # TF32: 878x eager, and its signature
    (1.50e-02, 6.92e-04, TF32_ROWSUM, True),           # TF32 under a row sum: 21.7x eager, the signature alone
    (7.94e-02, 9.04e-05, None, True),                  # no signature sent: the magnitude rule alone
    (1.24e-03, 9.04e-05, None, False),                 # ... which 3xBF16 passes: what the signature is for
    (6.75e-04, 6.16e-04, BF16X3_FEW_ROWS, False),      # too few outputs to tell (z 5.3)
    (6.99e-04, 9.04e-05, {"tf32:a": None, "bf16x3": {"share": "nan", "z": "nan"}}, False),   # cannot be told
])
def test_precision_verdict_on_the_study_figures(cand, eager, signatures, flagged):
    assert bool(defenses.precision_verdict(cand, eager, 64.0, signatures, READY)) is flagged


def test_a_small_share_or_a_weak_z_does_not_flag():
    assert defenses.signature_excess({"bf16x3": {"share": 0.05, "z": 400}}, READY) is None
    assert defenses.signature_excess({"bf16x3": {"share": 0.9, "z": 4}}, READY) is None
    assert defenses.signature_excess({"tf32:a": {"share": -0.5, "z": -69}}, READY)     # truncated TF32's sign


def test_problems_that_allow_tf32_or_are_not_fp32_are_not_judged():
    for ready in (dataclasses.replace(READY, allow_tf32=True), dataclasses.replace(READY, dtype="float16")):
        assert defenses.precision_verdict(7.94e-02, 9.04e-05, 64.0, TF32, ready) is None


def test_check_precision_flags_the_record_from_trial_0s_signatures():
    from harness.results.records import RecordDraft
    from harness.run import verdicts
    record = RecordDraft.from_json({"flags": []})
    derived = m.Derived(None, 9.04e-05, 64.0)
    verdicts.write(record, defenses.check_precision(1.24e-03, READY, derived))
    assert record.flags == []                          # inside 64x, and no signature sent
    verdicts.write(record, defenses.check_precision(1.24e-03, READY, derived, BF16X3))
    assert record.flags == ["reduced_precision"]
    assert "1.00 of its error" in record.flag_details["reduced_precision"]
