"""CPU check of the cand3 candidates (now in solutions/) against their reference Models (no GPU).

    python scripts/emulate_cand3.py [--full] [name-substring ...]

CUDA candidates: each candidate file is imported with torch.utils.cpp_extension.load_inline replaced by a recorder
that hands back a CPU stand-in for the extension: plain-torch functions that take the kernels' own arguments and
redo the kernel's arithmetic and index math (windows taken with Tensor.unfold from the kernel's own kernel/stride
arguments, plane sums in float64, the finalize formulas, the in-place / fresh-output contract). Then the
reference Model and ModelNew are built under the same seed, the reference's state_dict is loaded into ModelNew
(as the harness does), both run on the same inputs, and outputs, buffers (BatchNorm running statistics,
num_batches_tracked) and the untouched inputs are compared (|out - ref| <= atol + rtol*|ref|, the problem's
tolerance, default 1e-4). This checks the Python glue and the arithmetic; it does not run the CUDA code itself.

Triton candidates run their real @triton.jit kernels in Triton's CPU interpreter (TRITON_INTERPRET=1; triton is
looked for on sys.path and in /tmp/triton_pkg), so their index math and masks are exercised as written.

Sizes: each problem runs at its own get_inputs() sizes where a 2-core CPU can afford it (--full adds the heavy
ones) and at smaller / odd sizes (not divisible by the vector width or the pooling window).
"""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")
sys.path.append("/tmp/triton_pkg")

import torch
import torch.nn.functional as F
import torch.utils.cpp_extension as cpp_ext

ROOT = Path(__file__).resolve().parent.parent
PENDING = ROOT / "solutions"               # written into solutions-pending/, moved once ok on the GPU
torch.set_num_threads(max(1, os.cpu_count() or 1))


# ---------------------------------------------------------------- stand-ins for the extensions (by name prefix)
def _win3(y, kd, kh, kw, sd, sh, sw):
    return y.unfold(2, kd, sd).unfold(3, kh, sh).unfold(4, kw, sw)          # (N, C, PD, PH, PW, kd, kh, kw)


def _finalize(s, q, cnt, gamma, beta, rm, rv, update, factor, eps):
    mean = s / cnt
    var = (q / cnt - mean * mean).clamp_min(0)
    a = gamma.double() / torch.sqrt(var + eps)
    if update:
        unb = var * cnt / (cnt - 1) if cnt > 1 else var
        rm.copy_(((1 - factor) * rm.double() + factor * mean).float())
        rv.copy_(((1 - factor) * rv.double() + factor * unb).float())
    return [a.float(), (beta.double() - mean * a).float()]


class SElu:
    @staticmethod
    def elu_forward(x, alpha):
        assert x.is_contiguous()
        return torch.where(x > 0, x, alpha * torch.expm1(x))


class STanh:
    @staticmethod
    def tanh_forward(x, alpha):
        assert x.is_contiguous()
        return torch.tanh(x)


class SMish:
    @staticmethod
    def mish_add_hardtanh_scale_(y, add, lo, hi, scale):
        assert y.is_contiguous()
        v = y * torch.tanh(torch.log1p(torch.exp(y)))
        y.copy_(torch.clamp(v + add, lo, hi) * scale)
        return y


class SPoolMeanTanh:
    @staticmethod
    def pool_clamp_mean_tanh(y, kh, kw, sh, sw, lo, hi):
        assert y.is_contiguous() and y.dim() == 4
        w = y.unfold(2, kh, sh).unfold(3, kw, sw)                             # (N, C, PH, PW, kh, kw)
        m = w.amax((-1, -2)).clamp(lo, hi)
        P = m.shape[2] * m.shape[3]
        return torch.tanh(m.sum((2, 3), keepdim=True) / P)


class SSoftmaxPool:
    @staticmethod
    def chan_softmax_maxpool3d(y, kd, kh, kw, sd, sh, sw):
        assert y.is_contiguous() and y.dim() == 5
        w = _win3(y, kd, kh, kw, sd, sh, sw)
        m = w.amax(1, keepdim=True)
        s = torch.exp(w - m).sum(1, keepdim=True)
        return (torch.exp(w - m) / s).amax((-1, -2, -3))


class SMinSoftmax:
    @staticmethod
    def depthmin_chansoftmax(y):
        assert y.is_contiguous() and y.dim() == 5
        m = y.amin(2)
        M = m.amax(1, keepdim=True)
        e = torch.exp(m - M)
        return e / e.sum(1, keepdim=True)


class SBnAvgPool:
    @staticmethod
    def bn_batch_scale_shift(x, gamma, beta, rm, rv, update, factor, eps):
        assert x.is_contiguous()
        N, C = x.shape[:2]
        xd = x.reshape(N, C, -1).double()
        cnt = xd.shape[0] * xd.shape[2]
        return _finalize(xd.sum((0, 2)), (xd * xd).sum((0, 2)), cnt, gamma, beta, rm, rv, update, factor, eps)

    @staticmethod
    def affine_avgpool3d(x, scale, shift, kd, kh, kw, sd, sh, sw):
        assert x.is_contiguous() and x.dim() == 5
        w = _win3(x, kd, kh, kw, sd, sh, sw)
        sh_ = (1, -1, 1, 1, 1, 1, 1, 1)
        return (w * scale.view(sh_) + shift.view(sh_)).sum((-1, -2, -3)) * (1.0 / (kd * kh * kw))


class SDense:
    @staticmethod
    def plane_sums(src, dst, copy, c_off, psum, psq):
        assert src.is_contiguous() and psum.dtype == torch.float64
        Cs = src.shape[1]
        assert c_off + Cs <= psum.shape[1]
        if copy:
            assert dst.is_contiguous() and c_off + Cs <= dst.shape[1]
            dst[:, c_off:c_off + Cs] = src
        sd = src.double()
        psum[:, c_off:c_off + Cs] = sd.sum((2, 3))
        psq[:, c_off:c_off + Cs] = (sd * sd).sum((2, 3))

    @staticmethod
    def bn_scale_shift(psum, psq, C, HW, gamma, beta, rm, rv, update, factor, eps):
        cnt = psum.shape[0] * HW
        return _finalize(psum[:, :C].sum(0), psq[:, :C].sum(0), cnt, gamma, beta, rm, rv, update, factor, eps)

    @staticmethod
    def bn_relu(src, C, scale, shift, inplace):
        assert src.is_contiguous()
        assert not inplace or C == src.shape[1]
        v = torch.clamp_min(src[:, :C] * scale.view(1, -1, 1, 1) + shift.view(1, -1, 1, 1), 0.0)
        if inplace:
            src.copy_(v)
            return src
        return v.contiguous()


class SLenet:
    @staticmethod
    def lenet_features(x, w1, b1, w2, b2):
        def stage(inp, w, b):
            K = w.shape[2]
            pt = inp.unfold(2, K, 1).unfold(3, K, 1)                        # (N, Cin, Oh, Ow, K, K)
            conv = torch.einsum("ncijkl,ockl->noij", pt, w)                  # bias-free conv sums
            Ph, Pw = conv.shape[2] // 2, conv.shape[3] // 2
            c = conv[:, :, :2 * Ph, :2 * Pw].reshape(conv.shape[0], conv.shape[1], Ph, 2, Pw, 2)
            return torch.clamp_min(c.amax((3, 5)) + b.view(1, -1, 1, 1), 0.0)   # max, + bias, ReLU
        for t in (x, w1, b1, w2, b2):
            assert t.is_contiguous()
        return stage(stage(x, w1, b1), w2, b2).reshape(x.shape[0], -1)


class SBiasSigmoid:
    @staticmethod
    def bias_sigmoid_(z, bias):
        assert z.is_contiguous() and z.dim() == 2 and bias.shape == (z.shape[1],)
        z.copy_(1.0 / (1.0 + torch.exp(-(z + bias))))
        return z


class SVgg:
    bn_batch_scale_shift = SBnAvgPool.bn_batch_scale_shift

    @staticmethod
    def bn_relu_(x, scale, shift):
        assert x.is_contiguous()
        sh = (1, -1) + (1,) * (x.dim() - 2)
        x.copy_(torch.clamp_min(x * scale.view(sh) + shift.view(sh), 0.0))
        return x

    @staticmethod
    def bn_relu_maxpool2(x, scale, shift):
        assert x.is_contiguous() and x.dim() == 4
        N, C, H, W = x.shape
        v = torch.clamp_min(x * scale.view(1, -1, 1, 1) + shift.view(1, -1, 1, 1), 0.0)
        PH, PW = H // 2, W // 2
        return v[:, :, :2 * PH, :2 * PW].reshape(N, C, PH, 2, PW, 2).amax((3, 5))


class SUnet:
    bn_batch_scale_shift = SBnAvgPool.bn_batch_scale_shift
    bn_relu_ = SVgg.bn_relu_

    @staticmethod
    def bn_relu_full_maxpool2(x, scale, shift, full):
        assert x.is_contiguous() and full.is_contiguous() and x.dim() == 4
        N, C, H, W = x.shape
        assert H % 2 == 0 and W % 2 == 0 and full.shape[1] >= C
        v = torch.clamp_min(x * scale.view(1, -1, 1, 1) + shift.view(1, -1, 1, 1), 0.0)
        full[:, :C] = v
        return v.reshape(N, C, H // 2, 2, W // 2, 2).amax((3, 5))


STANDINS = {
    "kb_l1_023_elu": SElu, "kb_l1_025_tanh": STanh,
    "kb_l2_040_": SMish, "kb_l2_039_": SPoolMeanTanh, "kb_l2_032_": SSoftmaxPool, "kb_l2_033_": SMinSoftmax,
    "kb_l2_038_": SBnAvgPool, "kb_l3_013_": SDense, "kb_l3_002_": SLenet, "kb_l3_016_": SBiasSigmoid, "kb_l3_003_": SVgg, "kb_l3_011_": SUnet,
}


def fake_load_inline(name, cpp_sources, cuda_sources=None, functions=None, **kw):
    for prefix, cls in STANDINS.items():
        if name.startswith(prefix):
            for f in (functions or []):
                assert hasattr(cls, f), f"stand-in {cls.__name__} lacks {f}"
            return cls
    raise KeyError(f"no CPU stand-in for extension {name}")


def load_module(path: Path, modname: str):
    spec = importlib.util.spec_from_file_location(modname, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def load_candidate(path: Path):
    orig = cpp_ext.load_inline
    cpp_ext.load_inline = fake_load_inline
    try:
        return load_module(path, "cand_" + path.stem)
    finally:
        cpp_ext.load_inline = orig


def close(out, ref, atol, rtol):
    if out.shape != ref.shape or out.dtype != ref.dtype:
        return False, f"shape/dtype {tuple(out.shape)} {out.dtype} vs {tuple(ref.shape)} {ref.dtype}"
    err = (out - ref).abs()
    bad = err > atol + rtol * ref.abs()
    ok = not bool(bad.any()) and torch.equal(torch.isnan(out), torch.isnan(ref))
    return ok, f"max abs err {err.max().item():.3g}, ref absmax {ref.abs().max().item():.3g}"


def check(problem: Path, cand: Path, init, inputs_fn, label, steps=1, eval_mode=False):
    P = load_module(problem, "prob_" + problem.stem)
    C = load_candidate(cand)
    atol = getattr(P, "ATOL", 1e-4)
    rtol = getattr(P, "RTOL", 1e-4)
    torch.manual_seed(0)
    ref_m = P.Model(*init)
    torch.manual_seed(0)
    new_m = C.ModelNew(*init)
    new_m.load_state_dict(ref_m.state_dict())
    if eval_mode:                          # BatchNorm from running statistics (made non-trivial first)
        for m in ref_m.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
        new_m.load_state_dict(ref_m.state_dict())
        ref_m.eval()
        new_m.eval()
    ok = True
    msgs = []
    for step in range(steps):             # several calls: running statistics keep matching
        torch.manual_seed(100 + step)
        inputs = inputs_fn()
        keep = [t.clone() if torch.is_tensor(t) else t for t in inputs]
        with torch.no_grad():
            ref = ref_m(*[t.clone() if torch.is_tensor(t) else t for t in inputs])
            out = new_m(*inputs)
        o, m = close(out, ref, atol, rtol)
        ok &= o
        msgs.append(m)
        for a, b in zip(inputs, keep):
            if torch.is_tensor(a) and not torch.equal(a, b):
                ok = False
                msgs.append("INPUT MUTATED")
    rs, ns = ref_m.state_dict(), new_m.state_dict()
    for k in rs:
        if not torch.allclose(rs[k].double(), ns[k].double(), atol=1e-5, rtol=1e-5):
            ok = False
            msgs.append(f"state {k} differs")
    print(f"{'OK  ' if ok else 'FAIL'} {cand.relative_to(ROOT)} [{label}] {'; '.join(msgs[-2:])}", flush=True)
    return ok


# ---------------------------------------------------------------- the cases
def pend(level, stem, name):
    return ROOT / "problems" / level / f"{stem}.py", PENDING / level / stem / name


CASES = []


def case(level, stem, name, heavy=False):
    def deco(fn):
        CASES.append((level, stem, name, fn, heavy))
        return fn
    return deco


def rn(*s):
    return lambda: [torch.randn(*s)]


def ru(*s):
    return lambda: [torch.rand(*s)]


@case("level1", "018_relu", "triton_relu_body_tail.py")
def _(p, c):
    return all([check(p, c, [], rn(4, 163840), "4x163840"), check(p, c, [], rn(3, 4097), "3x4097 tail"),
                check(p, c, [], rn(5), "5 tail only"), check(p, c, [], rn(2, 4096), "exact tiles")])


@case("level1", "024_leaky_relu", "triton_leaky_body_tail.py")
def _(p, c):
    return all([check(p, c, [0.01], rn(4, 163840), "4x163840"), check(p, c, [0.01], rn(3, 4097), "3x4097 tail"),
                check(p, c, [0.2], rn(7), "slope .2, tail only")])


@case("level1", "023_elu", "cuda_elu_float4_unroll2.py")
def _(p, c):
    return all([check(p, c, [1.0], rn(4, 163840), "4x163840"), check(p, c, [0.5], rn(3, 4097), "alpha .5, odd")])


@case("level1", "025_tanh", "cuda_tanh_float4_unroll2.py")
def _(p, c):
    return all([check(p, c, [], rn(4, 163840), "4x163840"), check(p, c, [], rn(3, 4097), "odd")])


@case("level2", "040_conv_transpose2d_mish_add_hardtanh_scale", "cuda_fused_mish_add_hardtanh_scale.py")
def _(p, c):
    return all([check(p, c, [32, 64, 4, 2, 1, 0.25, 2.0], ru(4, 32, 64, 64), "problem sizes, batch 4"),
                check(p, c, [5, 7, 3, 2, 1, -0.5, 0.7], lambda: [torch.randn(3, 5, 9, 11) * 3], "odd sizes")])


@case("level2", "039_conv_transpose2d_maxpool_hardtanh_mean_tanh", "cuda_fused_pool_clamp_planemean_tanh.py")
def _(p, c):
    return all([check(p, c, [32, 64, 4, 2, 1, 2, -1.0, 1.0], ru(8, 32, 64, 64), "problem sizes, batch 8"),
                check(p, c, [4, 6, 3, 2, 1, 2, -0.3, 0.2], lambda: [torch.randn(3, 4, 10, 12)], "odd H,W (19x23)"),
                check(p, c, [4, 6, 3, 1, 0, 3, -0.5, 0.5], lambda: [torch.randn(2, 4, 12, 9)], "pool 3, 14x11")])


@case("level2", "032_conv3d_softmax_maxpool", "cuda_fused_chansoftmax_maxpool3d.py")
def _(p, c):
    return all([check(p, c, [8, 16, 3, 2], ru(2, 8, 32, 64, 64), "problem channels, 2x32x64x64"),
                check(p, c, [3, 5, 3, 2], lambda: [torch.randn(2, 3, 8, 11, 13)], "odd dims"),
                check(p, c, [3, 7, 2, 3], lambda: [torch.randn(2, 3, 9, 10, 11)], "pool 3")])


@case("level2", "032_conv3d_softmax_maxpool", "cuda_fused_chansoftmax_maxpool3d.py", heavy=True)
def _(p, c):
    return check(p, c, [8, 16, 3, 2], ru(16, 8, 32, 128, 128), "problem sizes (get_inputs)")


@case("level2", "033_conv3d_min_depth_softmax", "cuda_fused_depthmin_chansoftmax.py")
def _(p, c):
    return all([check(p, c, [8, 32, 3, 2], ru(2, 8, 16, 64, 64), "problem channels, 2x16x64x64"),
                check(p, c, [3, 5, 3, 2], lambda: [torch.randn(2, 3, 5, 9, 7)], "odd dims"),
                check(p, c, [3, 5, 3, 3], lambda: [torch.randn(2, 3, 5, 9, 7)], "dim=3 (fallback)")])


@case("level2", "033_conv3d_min_depth_softmax", "cuda_fused_depthmin_chansoftmax.py", heavy=True)
def _(p, c):
    return check(p, c, [8, 32, 3, 2], ru(16, 8, 16, 128, 128), "problem sizes (get_inputs)")


@case("level2", "038_conv_transpose3d_batchnorm_avgpool", "cuda_bn_stats_fused_apply_avgpool.py")
def _(p, c):
    return all([check(p, c, [32, 32, 3, 2, 1, 1], ru(4, 32, 8, 16, 16), "problem channels, 4x8x16x16", steps=2),
                check(p, c, [3, 5, 3, 2, 1, 0], lambda: [torch.randn(3, 3, 4, 5, 6)], "odd dims (7x9x11)", steps=2),
                check(p, c, [3, 5, 3, 2, 1, 0], lambda: [torch.randn(3, 3, 4, 5, 6)], "eval mode", eval_mode=True)])


@case("level2", "038_conv_transpose3d_batchnorm_avgpool", "cuda_bn_stats_fused_apply_avgpool.py", heavy=True)
def _(p, c):
    return check(p, c, [32, 32, 3, 2, 1, 1], ru(32, 32, 16, 32, 32), "problem sizes (get_inputs)")


@case("level3", "013_densenet_dense_block", "cuda_fused_bn_relu_concat_free.py")
def _(p, c):
    return all([check(p, c, [6, 64, 32, 4], rn(2, 64, 56, 56), "problem channels, batch 2, 56x56", steps=2),
                check(p, c, [3, 5, 3, 2], rn(3, 5, 7, 9), "odd sizes", steps=2),
                check(p, c, [3, 5, 3, 2], rn(3, 5, 7, 9), "eval mode", eval_mode=True)])


@case("level3", "002_lenet5", "cuda_fused_conv_relu_pool_x2.py")
def _(p, c):
    return all([check(p, c, [10], rn(4096, 1, 32, 32), "batch 4096"), check(p, c, [7], rn(3, 1, 32, 32), "batch 3")])


@case("level3", "002_lenet5", "cuda_fused_conv_relu_pool_x2.py", heavy=True)
def _(p, c):
    return check(p, c, [10], rn(32768, 1, 32, 32), "problem sizes (get_inputs)")


@case("level3", "016_mlp_autoencoder", "cuda_lt_relu_epilogue_bias_sigmoid.py")
def _(p, c):
    return all([check(p, c, [4096, [2048, 512], 128], ru(64, 4096), "problem dims, batch 64"),
                check(p, c, [37, [19, 11], 5], ru(13, 37), "odd dims (vector-free bias path)")])


@case("level3", "016_mlp_autoencoder", "cuda_lt_relu_epilogue_bias_sigmoid.py", heavy=True)
def _(p, c):
    return check(p, c, [4096, [2048, 512], 128], ru(4096, 4096), "problem sizes (get_inputs)")


@case("level3", "003_vgg_bn_stack", "cuda_fused_bn_relu_maxpool.py")
def _(p, c):
    return all([check(p, c, [3, [64, 128, 256], 1000, 64], rn(4, 3, 64, 64), "problem dims, batch 4", steps=2),
                check(p, c, [2, [5, 6], 7, 18], rn(3, 2, 18, 18), "small, odd pooled sizes (18->9->4)", steps=2),
                check(p, c, [2, [5, 6], 7, 18], rn(3, 2, 18, 18), "eval mode", eval_mode=True)])


@case("level3", "011_unet_stage", "cuda_fused_bn_relu_skip_into_cat.py")
def _(p, c):
    return all([check(p, c, [32, 64, 32], rn(2, 32, 64, 64), "problem channels, 2x64x64", steps=2),
                check(p, c, [3, 4, 5], rn(3, 3, 10, 14), "small even", steps=2),
                check(p, c, [3, 4, 5], rn(2, 3, 10, 14), "eval mode", eval_mode=True)])


def main():
    full = "--full" in sys.argv
    sel = [a for a in sys.argv[1:] if not a.startswith("--")]
    ok = True
    for level, stem, name, fn, heavy in CASES:
        if heavy and not full:
            continue
        if sel and not any(s in f"{level}/{stem}/{name}" for s in sel):
            continue
        p, c = pend(level, stem, name)
        if not c.exists():
            print(f"MISS {c}")
            ok = False
            continue
        try:
            ok &= bool(fn(p, c))
        except Exception as e:  # a crash of the glue is a failure
            import traceback
            traceback.print_exc()
            print(f"FAIL {c.relative_to(ROOT)}: {type(e).__name__}: {e}")
            ok = False
    print("ALL OK" if ok else "SOME FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
