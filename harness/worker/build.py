"""The build side: import the candidate with CUDA hidden so its load_inline calls compile into the build
directory (TORCH_EXTENSIONS_DIR), then report what happened. The execute worker later finds the built
extensions there and compiles nothing."""
from __future__ import annotations

import time
from typing import Any

from harness.worker.common import (Conn, SkipCandidate, compiler_summary, describe, init_inputs,
    install_extension_hooks, load_module)


def run(conn: Conn, data: dict[str, Any]) -> None:
    import torch
    from harness.shared import messages as m
    job = m.parse(m.BuildJob, data)
    log = install_extension_hooks(job.device_kind)
    started = time.monotonic()
    module, import_error = None, None
    try:
        module = load_module("kb_candidate", job.candidate_path)
    except SkipCandidate:
        pass
    except BaseException as exc:                       # noqa: BLE001 - reported at execution as a load error
        import_error = describe(exc)
    if module is not None and not log.calls and hasattr(module, "ModelNew"):
        # No extension at import: it may build in __init__. Construct once on the CPU to trigger that build.
        try:
            problem = load_module("kb_problem", job.problem_path)
            torch.manual_seed(job.seed)
            module.ModelNew(*init_inputs(problem))
        except BaseException:                          # noqa: BLE001 - the execute stage reports these
            pass
    payload = {"extensions": log.calls, "seconds": round(time.monotonic() - started, 3),
               "import_error": import_error, "status": "built", "error": None, "compiler_output": None}
    if log.skip_reason:
        payload.update(status="skipped", error=log.skip_reason)
    elif log.compile_errors:
        line, detail = compiler_summary(log.compile_errors[-1])
        payload.update(status="compile_error", error=line, compiler_output=detail)
    conn.reply(m.Built(**payload))
