"""Measure the device's two ceilings once per run: memory bandwidth (a large device-to-device copy, counting
bytes read plus bytes written) and matrix throughput (8192^3 products in bf16 and in fp32 without TF32)."""
from __future__ import annotations

from typing import Any

from harness.worker.common import Conn


def _best_ms(fn, repeats: int = 10) -> float:
    import torch
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def run(conn: Conn, data: dict[str, Any]) -> None:
    import torch
    from harness.shared import messages as m
    torch.backends.cuda.matmul.allow_tf32 = False
    device = m.parse(m.CeilingsJob, data).device
    n = 1 << 30                                         # 1 Gi floats = 4 GiB each way
    src = torch.rand(n, device=device)
    dst = torch.empty_like(src)
    copy_ms = _best_ms(lambda: dst.copy_(src))
    src = dst = None                                    # free 8 GiB before the matmuls
    dim = 8192
    result = {"copy_gbps": 2 * n * 4 / (copy_ms * 1e-3) / 1e9}
    for name, dtype in (("matmul_tflops_bf16", torch.bfloat16), ("matmul_tflops_fp32", torch.float32)):
        a = torch.randn(dim, dim, device=device, dtype=dtype)
        b = torch.randn(dim, dim, device=device, dtype=dtype)
        ms = _best_ms(lambda: a @ b, repeats=5)
        result[name] = 2 * dim ** 3 / (ms * 1e-3) / 1e12
    conn.reply(m.Ceilings(**{k: round(v, 1) for k, v in result.items()}))
