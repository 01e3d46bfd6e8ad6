"""Stage 4, verify: compare a candidate's outputs with the reference's, elementwise, with diagnostics.

Runs in the reference worker, the process where candidate code never ran.
"""
from __future__ import annotations

from typing import Any

import torch


def _index(flat: int, shape: tuple[int, ...]) -> list[int]:
    idx = []
    for dim in reversed(shape):
        idx.append(flat % dim if dim else 0)
        flat //= dim if dim else 1
    return list(reversed(idx))


def compare_tensor(out: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float) -> dict[str, Any]:
    """{'ok', 'max_abs_err', 'max_rel_err', 'mismatches', 'first_mismatch', 'reason'} for one output tensor.

    Passing means: same shape, same dtype, NaN and Inf at the same positions, and |out-ref| <= atol + rtol*|ref|
    everywhere else. max_rel_err is taken over elements with |ref| > atol (elsewhere a relative error says
    nothing).
    """
    if tuple(out.shape) != tuple(ref.shape):
        return _fail(f"shape {tuple(out.shape)} != expected {tuple(ref.shape)}")
    if out.dtype != ref.dtype:
        return _fail(f"dtype {str(out.dtype).replace('torch.', '')} != expected {str(ref.dtype).replace('torch.', '')}")
    if out.numel() == 0:
        return {"ok": True, "max_abs_err": 0.0, "max_rel_err": 0.0, "mismatches": 0, "first_mismatch": None,
                "reason": None}
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
    result = {
        "ok": n_bad == 0,
        "max_abs_err": float(err.max()),
        "max_rel_err": float(rel.max()),
        "mismatches": n_bad,
        "first_mismatch": None,
        "reason": None,
    }
    if n_bad:
        flat = int(bad.nonzero()[0, 0])
        got, want = float(a[flat]), float(b[flat])
        result["first_mismatch"] = {"index": _index(flat, tuple(ref.shape)), "got": got, "expected": want}
        n_nan = int((bad_special & torch.isnan(a)).sum())
        what = f"{n_nan} NaN where the reference is finite, " if n_nan else ""
        result["reason"] = (f"{what}{n_bad} of {ref.numel()} elements out of tolerance; first at "
                            f"{result['first_mismatch']['index']}: got {got:.6g}, expected {want:.6g}")
    return result


def _fail(reason: str) -> dict[str, Any]:
    return {"ok": False, "max_abs_err": None, "max_rel_err": None, "mismatches": None, "first_mismatch": None,
            "reason": reason}


def compare_outputs(outs: list[torch.Tensor], refs: list[torch.Tensor], atol: float, rtol: float) -> dict[str, Any]:
    """Compare every output of one call; the result of the first failing output is the reason."""
    if len(outs) != len(refs):
        return _fail(f"{len(outs)} outputs, expected {len(refs)}")
    results = [compare_tensor(o, r, atol, rtol) for o, r in zip(outs, refs)]
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
