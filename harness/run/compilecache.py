"""The torch.compile baselines' caches: Inductor's on-disk caches (the FX graph and AOTAutograd caches, the
autotuning results, the generated code) and Triton's, kept for the reference worker in
`<cache_dir>/compile/<key>/` so that a later run of a problem loads its baselines instead of compiling them again.

Inductor caches across processes by default (torch._inductor.config.fx_graph_cache and
torch._functorch.config.enable_autograd_cache are on outside fbcode), but in `<tmpdir>/torchinductor_<user>`: a
folder of the machine's temp dir, shared with whatever else the user runs there, lost with a fresh machine or a
cleaned /tmp, and readable by candidate code. Here it is keyed like a build (the toolchain: device kind, torch,
CUDA, arch, Python; and COMPILE_FORMAT), checked like one before it is trusted (harness.run.build.entry_damage:
an entry that is a link, not a folder, or holds a link is removed and made again, with a warning), and hidden
from the workers that run candidate code, as the run keys are (harness.run.cachedirs): Inductor's cache holds
code the reference imports, so a candidate must never write it and need not read it. A candidate's own
torch.compile and Triton caches stay in its private temporary folder and its pair's scratch
(harness.worker.sandbox, harness.run.evaluate.candidate_job)."""
from __future__ import annotations

import hashlib
from pathlib import Path

from harness.run.build import Toolchain, entry_damage, remove_entry
from harness.run.cachedirs import compile_root
from harness.core.untrusted import show_path

COMPILE_FORMAT = 1      # bump to start every compile cache afresh (a change in how the baselines are compiled)


def compile_key(toolchain: Toolchain) -> str:
    digest = hashlib.sha256()
    for part in (str(COMPILE_FORMAT), toolchain.as_key()):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:20]


def entry(cache_dir: str | Path, toolchain: Toolchain) -> Path:
    return compile_root(cache_dir) / compile_key(toolchain)


def prepare(cache_dir: str | Path, toolchain: Toolchain) -> str | None:
    """Make the compile folder and this toolchain's entry before the run's workers start (the folder must exist to
    be hidden from candidate workers), removing a damaged one first as a build's is removed. Returns the warning
    that says so, or None. OSError when a folder cannot be made."""
    said = []
    for folder in (compile_root(cache_dir), entry(cache_dir, toolchain)):
        damage = entry_damage(folder)
        if damage is not None:
            said.append(f"compile cache {show_path(folder)}: {damage}; removed and made again")
            remove_entry(folder)
    entry(cache_dir, toolchain).mkdir(parents=True, exist_ok=True)
    return "; ".join(said) or None


def reference_env(cache_dir: str | Path, toolchain: Toolchain) -> dict[str, str]:
    """The variables that point the reference worker's Inductor and Triton at the entry: its job's `env`, applied
    by the worker before anything imports torch._inductor, which reads its folder at import
    (torch._dynamo.package's DynamoCache)."""
    path = entry(cache_dir, toolchain)
    return {"TORCHINDUCTOR_CACHE_DIR": str(path), "TRITON_CACHE_DIR": str(path / "triton")}
