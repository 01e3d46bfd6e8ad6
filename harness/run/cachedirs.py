"""The folders of `cache_dir` that the workers running candidate code (build and candidate workers) must not see:
the run keys (harness.results.signing) and the reference's torch.compile caches (harness.run.compilecache), whose
code the reference imports; and the machine's per-core lock files (harness.run.coreshares), which a candidate could
otherwise open and flock, so that another run starting meanwhile found its cores held. The sandbox covers each with
an empty read-only folder (harness.worker.sandbox)."""
from __future__ import annotations

from pathlib import Path

from harness.results.signing import RunKey
from harness.run import coreshares

COMPILE_FOLDER = "compile"


def compile_root(cache_dir: str | Path) -> Path:
    """Where every toolchain's compile cache lies: `<cache_dir>/compile` (absolute: workers change directory)."""
    return Path(cache_dir).resolve() / COMPILE_FOLDER


def hidden_from_candidates(cache_dir: str | Path) -> list[str]:
    return [str(RunKey.keys_dir(cache_dir)), str(compile_root(cache_dir)), str(coreshares.lock_dir())]
