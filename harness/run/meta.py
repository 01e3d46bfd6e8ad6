"""What a run records about where it ran: git, host, GPUs (from nvidia-smi, so the parent never creates a CUDA
context), driver, torch and CUDA versions."""
from __future__ import annotations

import ast
import functools
import importlib.util
import platform
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from harness.shared import sandboxprobe
from harness.run.workerproc import REPO_ROOT


def _run(cmd: list[str], timeout: float = 20.0) -> str | None:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO_ROOT)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


GPU_FIELDS = "index,name,driver_version,memory.total,compute_cap"


def gpus() -> list[dict[str, Any]]:
    """Visible GPUs as nvidia-smi lists them, each with its uuid (which physical GPU: `compare` tells machines
    apart by it) where nvidia-smi gives one; [] where there is none."""
    if shutil.which("nvidia-smi") is None:
        return []
    for fields in (GPU_FIELDS + ",uuid", GPU_FIELDS):          # an nvidia-smi without uuid still lists the GPUs
        listed = parse_gpus(_run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"]))
        if listed:
            return listed
    return []


def parse_gpus(out: str | None) -> list[dict[str, Any]]:
    """nvidia-smi's CSV lines of GPU_FIELDS, with or without a sixth field, the uuid."""
    result = []
    for line in (out or "").splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) in (5, 6) and parts[0].isdigit():
            gpu = {"index": int(parts[0]), "name": parts[1], "driver": parts[2], "memory_mib": parts[3],
                   "compute_capability": parts[4]}
            if len(parts) == 6 and parts[5]:
                gpu["uuid"] = parts[5]
            result.append(gpu)
    return result


def git_info() -> dict[str, Any]:
    sha = _run(["git", "rev-parse", "HEAD"])
    status = _run(["git", "status", "--porcelain"])
    return {"sha": sha, "dirty": bool(status) if status is not None else None}


@functools.lru_cache(maxsize=1)
def torch_versions() -> dict[str, Any]:
    """torch.__version__ and torch.version.cuda as `import torch` gives them. The parent needs nothing else of
    torch, and importing it was a large part of every run's start, before its first worker started:
    they are read from torch's version.py (two literal assignments) without importing torch, which is imported
    only where that file cannot be read that way."""
    if "torch" not in sys.modules:
        found = _version_file_values()
        if found is not None:
            return found
    import torch
    return {"torch": str(torch.__version__), "cuda": torch.version.cuda}


def _version_file_values() -> dict[str, Any] | None:
    try:
        spec = importlib.util.find_spec("torch")
        if spec is None or not spec.origin:
            return None
        tree = ast.parse(Path(spec.origin).with_name("version.py").read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError, ImportError):
        return None
    values: dict[str, Any] = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else \
            node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(target, ast.Name) and target.id in ("__version__", "cuda") and node.value is not None:
            try:
                values[target.id] = ast.literal_eval(node.value)
            except ValueError:
                return None
    if not isinstance(values.get("__version__"), str) or not isinstance(values.get("cuda", 0), (str, type(None))):
        return None                                    # ("cuda" missing reads as 0: not a version)
    return {"torch": values["__version__"], "cuda": values["cuda"]}


def collect(argv: list[str], gpu_list: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "argv": argv,
        "git": git_info(),
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        **torch_versions(),
        "gpus": gpu_list,
        "gpu_count": len(gpu_list),
        "driver": gpu_list[0]["driver"] if gpu_list else None,
        "sandbox": sandboxprobe.describe(),        # what confines the workers that run candidate code, here
    }
