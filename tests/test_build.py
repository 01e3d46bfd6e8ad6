"""harness.run.build: build keys, the cache, and what is never built."""
from __future__ import annotations

import pytest


def test_a_triton_candidate_is_skipped_on_the_cpu_without_a_build_worker(tmp_path, monkeypatch):
    """The CPU notice says Triton candidates are skipped there: they are, before anything imports them (they used
    to reach the import and fail as load_error: No module named 'triton')."""
    from harness.run import build
    from harness.core.discover import Candidate, Pair, Problem, needs_cuda, uses_triton
    source = "import torch\nimport triton\nimport triton.language as tl\n\n@triton.jit\ndef k(x):\n    pass\n"
    path = tmp_path / "tri.py"
    path.write_text(source)
    pair = Pair(Problem("level1/001_p", tmp_path / "p.py", None), Candidate("level1/001_p/tri", path, source, None),
                "level1/001_p")
    assert uses_triton(pair.candidate) and needs_cuda(pair.candidate)
    assert not uses_triton(Candidate("c", path, "import torch  # not triton\nx = 'triton'\n", None))
    monkeypatch.setattr(build, "Worker", lambda *a, **k: pytest.fail("a build worker was started"))
    cpu = build.Toolchain("cpu", "2.13.0", None, None, "3.11")
    result = build.build_one(pair, tmp_path / "builds", cpu, 60, 0)
    assert result.status == "skipped" and "Triton" in result.error and "CPU" in result.error
