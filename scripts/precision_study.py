"""The precision error model's study (docs/precision.md): on the CPU, for the shipped fp32 problems with a matmul,
linear or convolution, the error against float64 of eager fp32, of fp32 kernels that sum in other orders, and of
TF32 and split-bf16 products, with the figures `reduced_precision` decides on.

    python scripts/precision_study.py [--problems 'level1/00*'] [--json out.json] [--threads 2]

Each problem runs at reduced batch and spatial sizes (SHRINK) with its reduction length K as shipped: K is what the
error depends on. Every variant runs the problem's own forward, with its matmul-like ops (F.linear, torch.matmul,
bmm, einsum, convolutions) replaced inside this script by the emulated kernel (a TorchFunctionMode); the epilogue
runs in eager fp32. The variants:

honest fp32 (must not be flagged)
  eager      torch's own fp32 kernel (MKL / oneDNN here)
  seq_fma    one accumulator per output, K fused multiply-adds in order (a CUDA thread's loop over K)
  seq        the same with each product rounded to fp32 before the add
  split_k    16 partial sums over K-chunks (torch's kernel on each), added in order
  atomics    the same 16 partials added in a random order per output element (atomicAdd)
  pairwise   products rounded to fp32, summed as a binary tree
  sorted     (2-D matmuls, first rows only) products sorted from largest to smallest and summed in that order with
             fused adds: an adversarial order, the worst "any order" of honest fp32 the issue's wording admits
reduced precision (must be flagged)
  tf32       both operands rounded to nearest at 10 mantissa bits, fp32 accumulation
  tf32_rz    the same, truncated (the hardware's conversion when a kernel feeds fp32 registers to the MMA)
  tf32_a     only the input (activation) operand rounded, the weight kept
  bf16x3     hi = bf16(x), lo = bf16(x - hi); hi*hi + hi*lo + lo*hi in fp32 (three fp32 GEMMs of bf16 values)
  bf16x3_rz  the same split by truncation (masking the low 16 bits)
  bf16x2     the input split, the weight in bf16 alone: hi*hi + lo*hi
  tf32x3     reported only: the 3xTF32 split (big + small), ~22 bits an operand: as exact as fp32

Figures (per variant, against the float64 forward): max and RMS |err|; `x_eager` = max |err| over eager's (the
magnitude rule: flagged above 64, `old`); at the first matmul's output, `nmax` = max |err| / (u * (|A| @ |B|)) with
u = 2^-24 (the a-priori fp32 unit); per scheme of harness.worker.precision (tf32:a, tf32:b, bf16x3, bf16x3:rz) the
share of the variant's error that is the scheme's signature and its z (harness.worker.verify.precision_signature,
as the reference computes it); `tol` whether it passes the problem's tolerance; and the verdict of
harness.run.defenses.precision_verdict (the rule now). Then a summary a problem, and quantised probe inputs (level 1
matmuls) on which fp32 accumulation is exact in any order. `--set batch_size=8192 --variants eager,bf16x3` runs one
problem nearer its shipped size. The whole study takes ~25 minutes on 2 cores.
"""
from __future__ import annotations

import argparse
import copy
import fnmatch
import importlib.util
import json
import math
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from harness.run import defenses                                   # noqa: E402
from harness.worker import precision, verify                        # noqa: E402

U = 2.0 ** -24
HONEST = ("eager", "seq_fma", "seq", "split_k", "atomics", "pairwise")
REDUCED = ("tf32", "tf32_rz", "tf32_a", "bf16x3", "bf16x3_rz", "bf16x2")
INFO = ("tf32x3",)
SPLITS = 16

# Module globals set before the problem's get_init_inputs()/get_inputs(): batch and spatial sizes only (K kept),
# and, where one global sets K and the output alike, a slice of the inputs after they are drawn.
SHRINK: dict[str, dict] = {
    "level1/001": {"slice": (256, 256)},
    "level1/002": {"M": 1024},
    "level1/003": {"batch_size": 2, "m": 256, "n": 256},
    "level1/004": {"M": 256, "N": 256},
    "level1/005": {"M": 1024},
    "level1/006": {"batch_size": 2, "dim_i": 256, "dim_k": 256},
    "level1/007": {"M": 1024, "N": 1024},
    "level1/008": {"batch_size": 256, "out_features": 512},
    "level1/009": {"batch_size": 2, "length": 512},
    "level1/010": {"batch_size": 1, "height": 32, "width": 32},
    "level1/011": {"batch_size": 1, "height": 64, "width": 64},
    "level1/012": {"batch_size": 1, "height": 32, "width": 32},
    "level1/013": {"batch_size": 1, "height": 32, "width": 32},
    "level1/014": {"batch_size": 1, "height": 64, "width": 64},
    "level1/015": {"batch_size": 1, "depth": 8, "height": 16, "width": 16},
    "level1/016": {"batch_size": 1, "height": 16, "width": 16},
    "level1/017": {"batch_size": 2, "length": 256},
}
LEVEL2_GEMM = {"batch_size": 32}
for _key in ("level2/006", "level2/011", "level2/019"):      # one output a row: enough rows for the share's z
    SHRINK[_key] = {"batch_size": 512}
SHRINK["level2/023"] = SHRINK["level2/039"] = {"batch_size": 32, "height": 32, "width": 32}     # one a channel
SHRINK["level2/028"] = {"batch_size": 8, "height": 64, "width": 64}
LEVEL2_CONV = {"batch_size": 2, "height": 64, "width": 64, "depth": 8}
LEVEL2_CONV3D = {"batch_size": 1, "height": 32, "width": 32, "depth": 8}


# ---------------------------------------------------------------- one matmul-like op, cut along its reduction

class Op:
    """A call of a matmul-like op: its two product operands, its bias, and the op on a sub-range [k0, k1) of the
    reduction (`part`), without the bias. Matmuls are cut by slicing the contracted dimension; convolutions by
    selecting input channels and masking the kernel's taps outside the range (a product with a zero weight is an
    exact zero, and adding it changes no sum)."""

    def __init__(self, func, args, kwargs):
        self.func, self.kwargs = func, dict(kwargs)
        args = list(args)
        if func is torch.einsum:
            self.kind, self.eq, (self.a, self.b), self.bias = "einsum", args[0], args[1:3], None
            ins, out = self.eq.replace(" ", "").split("->")
            x, y = ins.split(",")
            (letter,) = [c for c in x if c in y and c not in out]
            self.da, self.db = x.index(letter), y.index(letter)
        elif func is F.linear:
            self.kind, self.a, self.b = "slice", args[0], args[1]
            self.bias = args[2] if len(args) > 2 else self.kwargs.pop("bias", None)
            self.da, self.db = self.a.dim() - 1, 1
        elif func in (torch.matmul, torch.bmm, torch.mm, torch.Tensor.matmul, torch.Tensor.__matmul__):
            self.kind, self.a, self.b, self.bias = "slice", args[0], args[1], None
            self.da, self.db = self.a.dim() - 1, self.b.dim() - 2
        else:                                          # conv and conv_transpose, positional as nn modules call them
            self.kind, self.a, self.b, self.bias = "conv", args[0], args[1], args[2] if len(args) > 2 else None
            self.rest, self.transposed = args[3:], "transpose" in func.__name__
            self.groups = self.rest[3]             # conv: stride, padding, dilation, groups; transposed: stride,
                                                   # padding, output_padding, groups, dilation
            self.taps = math.prod(self.b.shape[2:])
            self.cg = self.b.shape[0] // self.groups if self.transposed else self.b.shape[1]
        self.K = self.cg * self.taps if self.kind == "conv" else self.a.shape[self.da]

    def call(self, a, b):
        """The op on (a, b) in their dtype, without the bias."""
        if self.kind == "einsum":
            return torch.einsum(self.eq, a, b)
        if self.kind == "conv":
            return self.func(a, b, None, *self.rest)
        if self.func is F.linear:
            return F.linear(a, b)
        return self.func(a, b)

    def part(self, k0: int, k1: int, dtype) -> torch.Tensor:
        if self.kind != "conv":
            return self.call(self.a.narrow(self.da, k0, k1 - k0).to(dtype),
                             self.b.narrow(self.db, k0, k1 - k0).to(dtype))
        c0, c1 = k0 // self.taps, (k1 - 1) // self.taps + 1
        nc, g = c1 - c0, self.groups
        chans = torch.tensor([gi * self.cg + c for gi in range(g) for c in range(c0, c1)])
        x = self.a.index_select(1, chans).to(dtype)
        b = (self.b.index_select(0, chans) if self.transposed else self.b[:, c0:c1]).to(dtype)
        flat = torch.arange(c0 * self.taps, c1 * self.taps).view(nc, *self.b.shape[2:])
        mask = ((flat >= k0) & (flat < k1)).to(dtype)
        if self.transposed:
            w = b.view(g, nc, *b.shape[1:]) * mask.view(1, nc, 1, *b.shape[2:])
            w = w.view(g * nc, *b.shape[1:])
        else:
            w = b * mask.unsqueeze(0)
        return self.func(x, w, None, *self.rest)

    def add_bias(self, out: torch.Tensor) -> torch.Tensor:
        if self.bias is None:
            return out
        return out + (self.bias.view(1, -1, *[1] * (out.dim() - 2)) if self.kind == "conv" else self.bias)


# ---------------------------------------------------------------- the variants, each the op's result in fp32

def _sequential(op: Op, fused: bool) -> torch.Tensor:
    acc = None
    for k in range(op.K):
        if fused:                                      # exact product, one rounding of the sum (an FMA)
            p = op.part(k, k + 1, torch.float64)
            acc = p.float() if acc is None else (acc.double() + p).float()
        else:
            p = op.part(k, k + 1, torch.float32)
            acc = p if acc is None else acc + p
    return acc


def _partials(op: Op) -> list[torch.Tensor]:
    bounds = [round(i * op.K / SPLITS) for i in range(SPLITS + 1)]
    return [op.part(k0, k1, torch.float32) for k0, k1 in zip(bounds, bounds[1:]) if k1 > k0]


def _split_k(op: Op) -> torch.Tensor:
    parts = _partials(op)
    acc = parts[0]
    for p in parts[1:]:
        acc = acc + p
    return acc


def _atomics(op: Op, gen: torch.Generator) -> torch.Tensor:
    stack = torch.stack(_partials(op))
    order = torch.rand(stack.shape, generator=gen).argsort(dim=0)
    stack = stack.gather(0, order)
    acc = stack[0]
    for p in stack[1:]:
        acc = acc + p
    return acc


def _pairwise(op: Op) -> torch.Tensor:
    """A binary tree over the fp32 products, built as they stream in (a stack of partial sums by level)."""
    stack: list[tuple[int, torch.Tensor]] = []
    for k in range(op.K):
        level, value = 0, op.part(k, k + 1, torch.float32)
        while stack and stack[-1][0] == level:
            value = stack.pop()[1] + value
            level += 1
        stack.append((level, value))
    acc = stack.pop()[1]
    while stack:
        acc = stack.pop()[1] + acc
    return acc


def _tf32(op: Op, truncate=False, only_a=False) -> torch.Tensor:
    a = precision.round_mantissa(op.a, precision.TF32_BITS, truncate)
    b = op.b if only_a else precision.round_mantissa(op.b, precision.TF32_BITS, truncate)
    return op.call(a, b)


def _bf16x3(op: Op, truncate=False) -> torch.Tensor:
    a_hi, a_lo = precision.split(op.a, precision.BF16_BITS, truncate)
    b_hi, b_lo = precision.split(op.b, precision.BF16_BITS, truncate)
    return (op.call(a_lo, b_hi) + op.call(a_hi, b_lo)) + op.call(a_hi, b_hi)


def _bf16x2(op: Op) -> torch.Tensor:
    a_hi, a_lo = precision.split(op.a, precision.BF16_BITS)
    b_hi = precision.round_mantissa(op.b, precision.BF16_BITS)
    return op.call(a_lo, b_hi) + op.call(a_hi, b_hi)


def _tf32x3(op: Op) -> torch.Tensor:
    a_big, a_small = precision.split(op.a, precision.TF32_BITS)
    b_big, b_small = precision.split(op.b, precision.TF32_BITS)
    return (op.call(a_small, b_big) + op.call(a_big, b_small)) + op.call(a_big, b_big)


def variant_result(name: str, op: Op, gen: torch.Generator) -> torch.Tensor:
    """The op's fp32 result in variant `name`, bias included (added in fp32 after the sum, as an epilogue)."""
    if name == "eager":
        return op.func(op.a, op.b, op.bias, *op.rest) if op.kind == "conv" else op.add_bias(op.call(op.a, op.b))
    table = {"seq_fma": lambda: _sequential(op, True), "seq": lambda: _sequential(op, False),
             "split_k": lambda: _split_k(op), "atomics": lambda: _atomics(op, gen), "pairwise": lambda: _pairwise(op),
             "tf32": lambda: _tf32(op), "tf32_rz": lambda: _tf32(op, truncate=True),
             "tf32_a": lambda: _tf32(op, only_a=True), "bf16x3": lambda: _bf16x3(op),
             "bf16x3_rz": lambda: _bf16x3(op, truncate=True), "bf16x2": lambda: _bf16x2(op),
             "tf32x3": lambda: _tf32x3(op)}
    return op.add_bias(table[name]())


MATMUL_LIKE = {F.linear, torch.matmul, torch.bmm, torch.mm, torch.einsum, torch.Tensor.matmul, torch.Tensor.__matmul__,
               F.conv1d, F.conv2d, F.conv3d, F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d}


class Variant(TorchFunctionMode):
    """The model's fp32 forward with each matmul-like op computed as variant `name`; the first op is kept."""

    def __init__(self, name: str, seed: int = 0):
        super().__init__()
        self.name, self.first = name, None
        self.gen = torch.Generator().manual_seed(seed)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func not in MATMUL_LIKE or (func is torch.einsum and len(args) != 3):
            return func(*args, **(kwargs or {}))
        op = Op(func, args, kwargs or {})
        out = variant_result(self.name, op, self.gen)
        if self.first is None:
            self.first, self.first_result = op, out
        return out


# ---------------------------------------------------------------- a problem

def load(path: Path, overrides: dict):
    spec = importlib.util.spec_from_file_location(f"study_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name, value in overrides.items():
        if name != "slice" and hasattr(module, name):
            setattr(module, name, value)
    return module


def shrink_for(key: str, path: Path) -> dict:
    if key in SHRINK:
        return SHRINK[key]
    if "conv3d" in path.name or "transpose3d" in path.name:
        return LEVEL2_CONV3D
    return LEVEL2_CONV if "conv" in path.name else LEVEL2_GEMM


def build(path: Path, overrides: dict):
    module = load(path, overrides)
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs()).float()
    torch.manual_seed(1)
    inputs = [x.float() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in module.get_inputs()]
    if "slice" in overrides:
        m, n = overrides["slice"]
        inputs = [inputs[0][:m].contiguous(), inputs[1][:, :n].contiguous()]
    return module, model, inputs


def forward(model, state, inputs, dtype=torch.float32, mode=None) -> list[torch.Tensor]:
    net = copy.deepcopy(model).to(dtype)
    net.load_state_dict({k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()})
    xs = [x.to(dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
    torch.manual_seed(0)
    with torch.no_grad():
        if mode is None:
            out = net(*xs)
        else:
            with mode:
                out = net(*xs)
    return list(out) if isinstance(out, (tuple, list)) else [out]


def ready(module) -> SimpleNamespace:
    return SimpleNamespace(dtype="float32", allow_tf32=False, atol=float(getattr(module, "ATOL", 1e-4)),
                           rtol=float(getattr(module, "RTOL", 1e-4)))


@torch.no_grad()
def matmul_level(op: Op, result: torch.Tensor) -> dict:
    """At the first matmul's output (bias left out): max and RMS |err| / (u * (|A| @ |B|)) against float64."""
    a, b = op.a.double(), op.b.double()
    exact = op.call(a, b)
    bound = op.call(a.abs(), b.abs()) * U
    err = result.double() - op.add_bias(exact)
    ratio = (err.abs() / bound.clamp_min(1e-300))[bound > 0]
    return {"nmax": float(ratio.max()), "nrms": float(ratio.square().mean().sqrt())}


@torch.no_grad()
def study(key: str, path: Path, with_sorted: bool = True, names: tuple = HONEST + REDUCED + INFO,
          overrides: dict | None = None) -> dict:
    overrides = overrides or shrink_for(key, path)
    module, model, inputs = build(path, overrides)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    started = time.monotonic()
    exact = forward(model, state, inputs, torch.float64)
    sample = verify.sample_index([tuple(t.shape) for t in exact], offset=7)    # every element at these sizes
    exact_s = verify.take(exact, sample)
    signatures = {}                                    # scheme -> its own error, as the reference keeps it
    for scheme in precision.SCHEMES:
        emulated = forward(model, state, inputs, torch.float64, precision.Rounded(scheme))
        signatures[scheme] = verify.rounding_error(verify.take(emulated, sample), exact_s)
    rd = ready(module)
    scale = verify.max_magnitude(exact)
    row = {"problem": key, "name": path.stem, "atol": rd.atol, "rtol": rd.rtol, "variants": {}}
    eager_max = None
    for name in names:
        mode = Variant(name)
        outs = forward(model, state, inputs, torch.float32, mode)
        op = mode.first
        row["K"] = op.K
        row["K_eff"] = round(float(op.call(torch.ones_like(op.a), torch.ones_like(op.b)).mean()))
        row["output_elements"] = sum(o.numel() for o in outs)
        err_max = verify.max_abs_diff64(outs, exact)
        err_rms = math.sqrt(sum(float((o.double() - r).square().sum()) for o, r in zip(outs, exact))
                            / max(1, row["output_elements"]))
        if name == "eager":
            eager_max = err_max
        sig = {s: verify.precision_signature(verify.take(outs, sample), exact_s, signatures[s])
               for s in precision.SCHEMES}
        passes = verify.compare_outputs(outs, forward(model, state, inputs), rd.atol, rd.rtol)["ok"]
        figures = {"max": err_max, "rms": err_rms, "within_tolerance": passes,
                   "x_eager": err_max / max(eager_max, scale * defenses.FP32_EPS),
                   "old_rule": defenses.PRECISION_FACTOR * max(eager_max, scale * defenses.FP32_EPS) < err_max,
                   "signature": sig,
                   "verdict": defenses.precision_verdict(err_max, eager_max, scale, sig, rd)}
        figures.update(matmul_level(op, mode.first_result))
        row["variants"][name] = figures
    if with_sorted and row["K"] >= 64:
        row["variants"]["sorted"] = adversarial(model, inputs)
    row["seconds"] = round(time.monotonic() - started, 1)
    return row


@torch.no_grad()
def adversarial(model, inputs) -> dict | None:
    """The first matmul of a 2-D-input model, on its first rows: products sorted from largest to smallest, summed
    with fused adds, against the same rows' eager and TF32 errors."""
    mode = Variant("eager")
    forward(model, model.state_dict(), inputs, torch.float32, mode)
    op = mode.first
    if op.kind != "slice" or op.a.dim() != 2 or op.b.dim() != 2:
        return None
    rows = max(1, min(op.a.shape[0], (1 << 24) // (op.K * (op.b.shape[0] if op.func is F.linear else op.b.shape[1]))))
    a = op.a[:rows].double()
    b = op.b.double().t() if op.func is F.linear else op.b.double()          # (K, N)
    prods = (a.unsqueeze(2) * b.unsqueeze(0)).sort(dim=1, descending=True).values    # (rows, K, N), exact
    acc = prods[:, 0].float()
    for k in range(1, op.K):
        acc = (acc.double() + prods[:, k]).float()
    exact = a @ b
    sub = SimpleNamespace(**vars(op))
    sub.a = op.a[:rows]
    tf32 = Op.call(sub, precision.round_mantissa(sub.a, 10), precision.round_mantissa(op.b, 10))
    eager = Op.call(sub, sub.a, op.b)
    return {"rows": rows, "max": float((acc.double() - exact).abs().max()),
            "eager_max": float((eager.double() - exact).abs().max()),
            "tf32_max": float((tf32.double() - exact).abs().max())}


# ---------------------------------------------------------------- quantised probes

@torch.no_grad()
def probe(key: str, path: Path) -> dict | None:
    """Level 1 matmuls: A of 18-bit integers (|a| in [2^17, 2^18)), B of +-1 with 32 non-zeros a column on
    average (the rest 0), so that every partial sum of every order is an integer below 2^24 (but for the rare
    column with over 64): fp32 accumulation is exact in any order. TF32 (11 bits) and split bf16 (hi + lo: 16
    bits, 17 with the sign of lo) lose low bits of A."""
    overrides = shrink_for(key, path)
    module, model, inputs = build(path, overrides)
    mode = Variant("eager")
    forward(model, model.state_dict(), inputs, torch.float32, mode)
    op = mode.first
    if op.kind == "conv" or op.func is torch.einsum:
        return None
    gen = torch.Generator().manual_seed(5)
    a = (torch.randint(1 << 17, 1 << 18, op.a.shape, generator=gen) *
         (torch.randint(0, 2, op.a.shape, generator=gen) * 2 - 1)).float()
    sign = (torch.randint(0, 2, op.b.shape, generator=gen) * 2 - 1).float()
    keep = torch.rand(op.b.shape, generator=gen) < min(1.0, 32 / op.K)
    b = sign * keep
    sub = SimpleNamespace(**vars(op))
    sub.a, sub.b, sub.bias = a, b, None
    sub.part = lambda k0, k1, dtype: Op.part(sub, k0, k1, dtype)
    sub.call = lambda x, y: Op.call(sub, x, y)
    sub.add_bias = lambda out: out
    exact = Op.call(sub, a.double(), b.double())
    got = {}
    for name in ("eager", "seq_fma", "split_k", "pairwise", "tf32", "bf16x3", "bf16x3_rz", "tf32x3"):
        got[name] = float((variant_result(name, sub, torch.Generator().manual_seed(0)).double() - exact).abs().max())
    return got


# ---------------------------------------------------------------- the tables

def _g(x) -> str:
    return "-" if x is None else f"{x:.2g}"


def print_row(row: dict) -> None:
    v = row["variants"]
    print(f"\n{row['problem']} {row['name']}  K={row['K']} (terms an output: {row['K_eff']})  "
          f"outputs={row['output_elements']}  "
          f"tol={row['atol']:g}/{row['rtol']:g}  ({row['seconds']} s)")
    print(f"  {'variant':10} {'max':>8} {'rms':>8} {'x_eager':>8} {'nmax':>7} "
          + "".join(f"{s + ' share/z':>19}" for s in precision.SCHEMES) + f" {'tol':>4} {'old':>4}  verdict")
    for name in [n for n in HONEST + REDUCED + INFO if n in v]:
        f = v[name]
        sig = "".join(f"{_g((f['signature'][s] or {}).get('share')):>9}/{_g((f['signature'][s] or {}).get('z')):<9}"
                      for s in precision.SCHEMES)
        print(f"  {name:10} {f['max']:8.2e} {f['rms']:8.2e} {f['x_eager']:8.3g} {f['nmax']:7.2f} {sig} "
              f"{'ok' if f['within_tolerance'] else 'out':>4} {'FLAG' if f['old_rule'] else '-':>4}  "
              f"{'FLAG' if f['verdict'] else '-'}")
    s = v.get("sorted")
    if s:
        print(f"  sorted order (first {s['rows']} rows): max {s['max']:.2e}  eager {s['eager_max']:.2e}  "
              f"tf32 {s['tf32_max']:.2e}  (sorted/eager {s['max'] / s['eager_max']:.3g}, "
              f"tf32/sorted {s['tf32_max'] / s['max']:.3g})")


def summary(rows: list[dict]) -> None:
    print("\nSummary over problems (honest: the largest figure of any honest variant; reduced: the smallest)")
    print("  hon: the honest variants' largest x_eager, |share| and |z| (of a share that would count, |share| >= "
          f"{defenses.SIGNATURE_SHARE}); red: the reduced variants' smallest largest-|share| and its z")
    print(f"  {'problem':12} {'K':>6} {'outputs':>8} {'hon x':>6} {'tf32 x':>7} {'seq x':>6} {'bf16x3 x':>8} "
          f"{'hon share':>9} {'hon z':>6} {'red share':>9} {'red z':>7}  {'honest flagged':14} reduced missed")
    for row in rows:
        v = row["variants"]
        hon_x = max(v[n]["x_eager"] for n in HONEST)
        figures = lambda n: [f for f in v[n]["signature"].values() if f]                          # noqa: E731
        hon = [f for n in HONEST for f in figures(n)]
        hon_share = max((abs(f["share"]) for f in hon), default=0.0)
        hon_z = max((abs(f["z"]) for f in hon if abs(f["share"]) >= defenses.SIGNATURE_SHARE), default=0.0)
        red = [max(figures(n), key=lambda f: abs(f["share"]), default={"share": 0.0, "z": 0.0}) for n in REDUCED]
        weakest = min(red, key=lambda f: abs(f["share"]) * min(1.0, abs(f["z"]) / defenses.SIGNATURE_Z))
        flagged = [n for n in HONEST if v[n]["verdict"]]
        missed = [n for n in REDUCED if v[n]["within_tolerance"] and not v[n]["verdict"]]
        print(f"  {row['problem']:12} {row['K']:6d} {row['output_elements']:8d} {hon_x:6.3g} "
              f"{v['tf32']['x_eager']:7.3g} {v['tf32']['max'] / v['seq_fma']['max']:6.3g} "
              f"{v['bf16x3']['x_eager']:8.3g} {hon_share:9.3f} {hon_z:6.2g} {abs(weakest['share']):9.3f} "
              f"{abs(weakest['z']):7.2g}  {','.join(flagged) or '-':14} {','.join(missed) or '-'}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--problems", default="*", help="glob over level1/NNN and level2/NNN (default: all with a matmul)")
    p.add_argument("--json", help="write the figures here")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--no-probes", action="store_true")
    p.add_argument("--variants", help="only these variants, comma-separated (eager first; no summary table)")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="a problem global instead of SHRINK's (e.g. batch_size=16384: the shipped size)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    paths = sorted((REPO / "problems" / "level1").glob("0*.py"))[:17]
    paths += sorted((REPO / "problems" / "level2").glob("*.py"))
    rows, probes = [], {}
    for path in paths:
        key = f"{path.parent.name}/{path.stem[:3]}"
        if not fnmatch.fnmatch(key, args.problems):
            continue
        names = tuple(args.variants.split(",")) if args.variants else HONEST + REDUCED + INFO
        overrides = {k: int(v) for k, v in (item.split("=", 1) for item in args.set)} or None
        row = study(key, path, not args.variants, names, overrides)
        print_row(row)
        rows.append(row)
        if args.variants:
            continue
        if not args.no_probes and path.parent.name == "level1":
            got = probe(key, path)
            if got:
                probes[key] = got
    if not args.variants:
        summary(rows)
    if probes:
        print("\nQuantised probes (exact in fp32 in any order): max |err|")
        names = list(next(iter(probes.values())))
        print("  " + f"{'problem':12}" + "".join(f"{n:>11}" for n in names))
        for key, got in probes.items():
            print("  " + f"{key:12}" + "".join(f"{got[n]:11.3g}" for n in names))
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "probes": probes}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
