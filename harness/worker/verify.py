"""Stage 4, verify: compare a candidate's outputs with the reference's, elementwise, with diagnostics.

Runs in the reference worker, the process where candidate code never ran. Every comparison works through the
tensors in flat slices (pieces) of at most CHUNK_BYTES of working data, on the device asked for: a 16 GiB output
costs a few slices' worth of temporaries, not five copies of itself, and an output kept on the host is compared
on the device a slice at a time. Slicing changes no figure: the same elementwise arithmetic, maxima of maxima, sums
of counts, and the first mismatch's index in the whole shape.
"""
from __future__ import annotations

import math
from typing import Any, Iterator

import torch

from harness.shared.memplan import CHUNK_BYTES


def _index(flat: int, shape: tuple[int, ...]) -> list[int]:
    idx = []
    for dim in reversed(shape):
        idx.append(flat % dim if dim else 0)
        flat //= dim if dim else 1
    return list(reversed(idx))


# ---------------------------------------------------------------- flat pieces

def pieces(shape: tuple[int, ...], limit: int, prefix: tuple = (), offset: int = 0) -> Iterator[tuple]:
    """(flat offset, index prefix, (start, stop) or None) for pieces of a tensor of `shape`, in row-major order,
    each at most `limit` elements (a single row of a 1-D tensor excepted: never), cut from the shape alone, so
    that two tensors of one shape are cut alike whatever their strides. A piece is `piece(t, prefix, span)`."""
    if not shape:
        yield offset, prefix, None
        return
    rows, inner = shape[0], math.prod(shape[1:])
    if rows == 0 or inner == 0:
        return
    if inner <= limit:
        step = max(1, limit // inner)
        count = -(-rows // step)
        step = -(-rows // count)                       # even pieces: no sliver at the end
        for start in range(0, rows, step):
            yield offset + start * inner, prefix, (start, min(rows, start + step))
    else:
        for i in range(rows):
            yield from pieces(shape[1:], limit, prefix + (i,), offset + i * inner)


def piece(t: torch.Tensor, prefix: tuple, span: tuple[int, int] | None) -> torch.Tensor:
    """One piece of `t` as a 1-D tensor (a view where the piece is contiguous, else a copy of the piece alone)."""
    view = t[prefix] if prefix else t
    if span is None:
        return view.reshape(1)
    return view[span[0]:span[1]].reshape(-1)


def moved(t: torch.Tensor, device: Any, dtype: torch.dtype) -> torch.Tensor:
    """`t` on `device` in `dtype`: it crosses in its own dtype and is converted where it lands. `t.to(device, dtype)`
    from the host to a GPU converts on the host first, one thread there, and moves the converted bytes (twice a
    float32 piece's, from pageable memory): 2.5 GiB of float32 in pinned memory took 1.28-1.50 s that way on an H200,
    0.05 s this way (benchmarks/host_link.py; docs/measurements.md, twenty-first session)."""
    return t.to(device).to(dtype)


def flat_pieces(t: torch.Tensor, chunk_bytes: int | None = None, element_bytes: int | None = None) \
        -> Iterator[tuple[int, torch.Tensor]]:
    """(flat offset, 1-D piece) over `t`, each piece at most chunk_bytes counted at element_bytes an element."""
    limit = max(1, (chunk_bytes or CHUNK_BYTES) // (element_bytes or t.element_size()))
    for offset, prefix, span in pieces(tuple(t.shape), limit):
        yield offset, piece(t, prefix, span)


# ---------------------------------------------------------------- comparisons

def compare_tensor(out: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float, chunk_bytes: int | None = None,
                   device: Any = None) -> dict[str, Any]:
    """{'ok', 'max_abs_err', 'max_rel_err', 'mismatches', 'first_mismatch', 'reason'} for one output tensor.

    Passing means: same shape, same dtype, NaN and Inf at the same positions, and |out-ref| <= atol + rtol*|ref|
    everywhere else. max_rel_err is taken over elements with |ref| > atol (elsewhere a relative error says
    nothing). Works in pieces of `chunk_bytes` (memplan.CHUNK_BYTES) of float32 (float64 for a float64 reference)
    on `device` (default: the reference's device), with the same figures as over the whole.
    """
    if tuple(out.shape) != tuple(ref.shape):
        return _fail(f"shape {tuple(out.shape)} != expected {tuple(ref.shape)}")
    if out.dtype != ref.dtype:
        return _fail(f"dtype {str(out.dtype).replace('torch.', '')} != expected {str(ref.dtype).replace('torch.', '')}")
    if out.numel() == 0:
        return {"ok": True, "max_abs_err": 0.0, "max_rel_err": 0.0, "mismatches": 0, "first_mismatch": None,
                "reason": None}
    work = torch.float64 if ref.dtype == torch.float64 else torch.float32
    where = ref.device if device is None else torch.device(device)
    limit = max(1, (chunk_bytes or CHUNK_BYTES) // (8 if work == torch.float64 else 4))
    shape = tuple(ref.shape)
    max_abs = max_rel = 0.0
    n_bad = n_nan = 0
    first = None
    for offset, prefix, span in pieces(shape, limit):
        a = moved(piece(out, prefix, span), where, work)
        b = moved(piece(ref, prefix, span), where, work)
        special = ~torch.isfinite(b) | ~torch.isfinite(a)
        same_special = ((torch.isnan(a) & torch.isnan(b))
                        | (torch.isinf(a) & torch.isinf(b) & (torch.sign(a) == torch.sign(b))))
        bad_special = special & ~same_special
        finite = ~special
        err = torch.where(finite, (a - b).abs(), torch.zeros_like(a))
        bad = bad_special | (err > atol + rtol * b.abs())
        bad_here = int(bad.sum())
        rel_mask = finite & (b.abs() > atol)
        rel = torch.where(rel_mask, err / b.abs().clamp_min(1e-30), torch.zeros_like(a))
        max_abs = max(max_abs, float(err.max()))
        max_rel = max(max_rel, float(rel.max()))
        if bad_here:
            n_bad += bad_here
            n_nan += int((bad_special & torch.isnan(a)).sum())
            if first is None:
                local = int(bad.nonzero()[0, 0])
                first = (offset + local, float(a[local]), float(b[local]))
        del a, b, special, same_special, bad_special, finite, err, bad, rel_mask, rel
    result = {
        "ok": n_bad == 0,
        "max_abs_err": max_abs,
        "max_rel_err": max_rel,
        "mismatches": n_bad,
        "first_mismatch": None,
        "reason": None,
    }
    if n_bad:
        flat, got, want = first
        result["first_mismatch"] = {"index": _index(flat, shape), "got": got, "expected": want}
        what = f"{n_nan} NaN where the reference is finite, " if n_nan else ""
        result["reason"] = (f"{what}{n_bad} of {ref.numel()} elements out of tolerance; first at "
                            f"{result['first_mismatch']['index']}: got {got:.6g}, expected {want:.6g}")
    return result


def _fail(reason: str) -> dict[str, Any]:
    return {"ok": False, "max_abs_err": None, "max_rel_err": None, "mismatches": None, "first_mismatch": None,
            "reason": reason}


def compare_outputs(outs: list[torch.Tensor], refs: list[torch.Tensor], atol: float, rtol: float,
                    chunk_bytes: int | None = None, device: Any = None) -> dict[str, Any]:
    """Compare every output of one call; the result of the first failing output is the reason."""
    if len(outs) != len(refs):
        return _fail(f"{len(outs)} outputs, expected {len(refs)}")
    results = [compare_tensor(o, r, atol, rtol, chunk_bytes, device) for o, r in zip(outs, refs)]
    merged = {"ok": all(r["ok"] for r in results), "reason": None, "first_mismatch": None}
    for key in ("max_abs_err", "max_rel_err"):
        values = [r[key] for r in results if r[key] is not None]
        merged[key] = max(values) if len(values) == len(results) else None
    for i, r in enumerate(results):
        if not r["ok"]:
            prefix = f"output {i}: " if len(results) > 1 else ""
            merged["reason"] = prefix + r["reason"]
            merged["first_mismatch"] = r["first_mismatch"] and {"output": i, **r["first_mismatch"]}
            break
    return merged


# ---------------------------------------------------------------- float64 figures, in pieces

def _nan_max(values: list[float]) -> float:
    """max() as torch's over the whole: NaN when any piece's maximum is NaN."""
    return math.nan if any(math.isnan(v) for v in values) else max(values)


def max_abs_diff64(outs: list, refs: list, chunk_bytes: int | None = None, device: Any = None) -> float | None:
    """max |out - ref| in float64 over every output of matching shape (None: none match, or a count differs),
    on `device` (default: each reference's), a piece at a time."""
    if len(outs) != len(refs):
        return None
    values = []
    try:
        for o, r in zip(outs, refs):
            if o.shape != r.shape or not o.numel():
                continue
            where = r.device if device is None else torch.device(device)
            limit = max(1, (chunk_bytes or CHUNK_BYTES) // 8)
            for _, prefix, span in pieces(tuple(r.shape), limit):
                a = moved(piece(o, prefix, span), where, torch.float64)
                b = moved(piece(r, prefix, span), where, torch.float64)
                values.append(float((a - b).abs().max()))
    except torch.OutOfMemoryError:
        raise
    except Exception:                                  # noqa: BLE001 - a figure that cannot be had is None
        return None
    return _nan_max(values) if values else None


def max_magnitude(outs: list, chunk_bytes: int | None = None, device: Any = None) -> float | None:
    """The largest |value| over the floating outputs (None: there are none), a piece at a time."""
    values = []
    try:
        for o in outs or []:
            if not (o.numel() and o.is_floating_point()):
                continue
            where = o.device if device is None else torch.device(device)
            for _, part in flat_pieces(o, chunk_bytes):
                values.append(float(part.to(where).abs().max()))
    except torch.OutOfMemoryError:
        raise
    except Exception:                                  # noqa: BLE001
        return None
    return _nan_max(values) if values else None


def all_finite(outs: list, chunk_bytes: int | None = None, device: Any = None) -> bool:
    """Whether every floating output holds no NaN or Inf, a piece at a time."""
    for o in outs:
        if o.is_floating_point():
            where = o.device if device is None else torch.device(device)
            for _, part in flat_pieces(o, chunk_bytes):
                if not bool(torch.isfinite(part.to(where)).all()):
                    return False
    return True


# ---------------------------------------------------------------- reduced-precision signature (docs/precision.md)

SIGNATURE_ELEMENTS = 1 << 20    # output elements a signature is measured on (24 MiB kept): more only narrows a narrow z


def sample_index(shapes: list, count: int = SIGNATURE_ELEMENTS, offset: int = 0, device: Any = None) -> list:
    """Flat indices into each of outputs of `shapes`, for at most `count` elements in all: every element where
    there are no more, else every stride-th of the outputs laid end to end, from `offset` modulo the stride (a
    secret offset: a candidate cannot tell which elements are measured, nor leave a fraction of them out)."""
    sizes = [math.prod(shape) for shape in shapes]
    stride = max(1, -(-sum(sizes) // max(1, count)))
    first, base, found = offset % stride, 0, []
    for size in sizes:
        start = (first - base) % stride
        found.append(torch.arange(start, size, stride, device=device))
        base += size
    return found


def take(outs: list, sample: list, device: Any = None) -> list:
    """Each output's elements at its flat indices in `sample`, as 1-D float64 on `device` (default: the output's),
    without a copy of the whole of a non-contiguous output."""
    taken = []
    for t, idx in zip(outs, sample):
        idx = idx.to(t.device)
        flat = t.reshape(-1)[idx] if t.is_contiguous() else t[torch.unravel_index(idx, tuple(t.shape))]
        taken.append(moved(flat, t.device if device is None else torch.device(device), torch.float64))
    return taken


def rounding_error(emulated: list, exact: list) -> list:
    """A scheme's own error, emulated - exact, as float32 (a signature needs ~1% of its value, not float64's
    digits): on `take`n samples, or whole outputs."""
    return [(moved(t, r.device, torch.float64) - r.to(torch.float64)).to(torch.float32)
            for t, r in zip(emulated, exact)]


def precision_signature(outs: list, exact: list, signature: list, chunk_bytes: int | None = None,
                        device: Any = None) -> dict[str, float] | None:
    """How much of a candidate's error against float64, e = out - exact, is a rounding scheme's own error s
    (`signature`: rounding_error of the float64 forward with the scheme's rounded operands, harness.worker.precision):
    the least-squares share beta = <e, s> / <s, s> (1 for a candidate that rounds as the scheme does, 0 for fp32
    arithmetic in any order, whose error does not follow the operands' dropped bits), its z = beta / se, with
    se = sqrt(sum (e - beta s)^2 s^2) / <s, s> (robust to unequal variances), and `ratio` = |e| / |s|. Elements
    where e or s is not finite are left out. None where the signature is zero or the outputs do not match in
    count or shape. In float64 on `device` (default: each reference's), a piece at a time."""
    if not (len(outs) == len(exact) == len(signature)):
        return None
    sums = [0.0] * 6                                   # es, ss, ee, eess, esss, ssss
    limit = max(1, (chunk_bytes or CHUNK_BYTES) // 8)
    for o, r, t in zip(outs, exact, signature):
        if not (o.shape == r.shape == t.shape):
            return None
        where = r.device if device is None else torch.device(device)
        for _, prefix, span in pieces(tuple(r.shape), limit):
            e = moved(piece(o, prefix, span), where, torch.float64) - \
                moved(piece(r, prefix, span), where, torch.float64)
            s = moved(piece(t, prefix, span), where, torch.float64)
            keep = torch.isfinite(e) & torch.isfinite(s)
            e, s = e[keep], s[keep]
            s2 = s * s
            for n, v in enumerate((e * s, s2, e * e, e * e * s2, e * s * s2, s2 * s2)):
                sums[n] += float(v.sum())
            del e, s, s2, keep
    es, ss, ee, eess, esss, ssss = sums
    if not ss > 0:
        return None
    beta = es / ss
    var = max(0.0, eess - 2 * beta * esss + beta * beta * ssss) / (ss * ss)
    z = beta / math.sqrt(var) if var > 0 else (math.inf if beta else 0.0)
    return {"share": beta, "z": z, "ratio": math.sqrt(ee / ss)}


def signature_figures(outs: list, exact: list, signatures: dict[str, list], sample: list,
                      device: Any = None) -> dict[str, Any] | None:
    """A candidate's precision_signature for each scheme: `outs` whole, `exact` (float64) and `signatures`
    (rounding_error) at `sample`. None where there are no signatures or the outputs do not fit the sample."""
    if not signatures or len(outs) != len(sample):
        return None
    try:
        got = take(outs, sample, device)
    except torch.OutOfMemoryError:
        raise
    except (IndexError, RuntimeError, ValueError):                # an output of another size than the sample's
        return None
    return {scheme: precision_signature(got, exact, sig) for scheme, sig in signatures.items()}
