"""What a run records about where it ran: git, host, GPUs (from nvidia-smi, so the parent never creates a CUDA
context), driver, torch and CUDA versions."""
from __future__ import annotations

import ast
import functools
import importlib.util
import os
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


def nvidia_smi(args: list[str]) -> str | None:
    """nvidia-smi's output for `args`, or None where it fails or is missing."""
    return _run(["nvidia-smi", *args])


def gpus() -> list[dict[str, Any]]:
    """The GPUs this run may use (visible(): CUDA_VISIBLE_DEVICES honoured), each with its uuid (which physical
    GPU: `compare` tells machines apart by it) where nvidia-smi gives one; [] where there is none."""
    return visible(machine_gpus(), os.environ.get("CUDA_VISIBLE_DEVICES"))


def visible(listed: list[dict[str, Any]], setting: str | None) -> list[dict[str, Any]]:
    """nvidia-smi's GPUs (`listed`, every GPU of the machine whatever CUDA_VISIBLE_DEVICES says) narrowed and
    ordered the way CUDA reads `setting` (the process's CUDA_VISIBLE_DEVICES; None: unset, all of them): entries
    are nvidia-smi indices or GPU UUIDs (a unique prefix is enough), and the first entry that names no GPU ends
    the list ("" or "-1": none). Each GPU's `index` is its position in that list, which is what --gpus names and
    torch's cuda:N counts; `machine_index` is nvidia-smi's, and `visible_as` what a worker's CUDA_VISIBLE_DEVICES
    holds to see that GPU alone. Without this, a run started with CUDA_VISIBLE_DEVICES=1 timed on GPU 0
    (docs/measurements.md, twenty-fifth session)."""
    if setting is None:
        chosen = list(listed)
    else:
        chosen = []
        for entry in (e.strip() for e in setting.split(",")):
            found = _named_gpu(listed, entry)
            if found is None or found in chosen:
                break
            chosen.append(found)
    return [{**g, "index": position, "machine_index": g["index"], "visible_as": str(g["index"])}
            for position, g in enumerate(chosen)]


def _named_gpu(listed: list[dict[str, Any]], entry: str) -> dict[str, Any] | None:
    """The GPU a CUDA_VISIBLE_DEVICES entry names: an nvidia-smi index, or a UUID or unique prefix of one."""
    if entry.isdigit():
        return next((g for g in listed if g["index"] == int(entry)), None)
    if not entry.startswith("GPU-"):                    # MIG-... and anything else: not a GPU nvidia-smi lists
        return None
    named = [g for g in listed if str(g.get("uuid", "")).startswith(entry)]
    return named[0] if len(named) == 1 else None


def machine_gpus() -> list[dict[str, Any]]:
    """Every GPU of this machine as nvidia-smi lists them (whatever CUDA_VISIBLE_DEVICES says), each `index`
    nvidia-smi's; [] where there is none."""
    if shutil.which("nvidia-smi") is None:
        return []
    for fields in (GPU_FIELDS + ",uuid", GPU_FIELDS):          # an nvidia-smi without uuid still lists the GPUs
        listed = parse_gpus(nvidia_smi([f"--query-gpu={fields}", "--format=csv,noheader,nounits"]))
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
