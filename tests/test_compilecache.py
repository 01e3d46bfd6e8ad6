"""harness.run.compilecache: the reference's torch.compile caches under cache_dir, keyed and checked like builds,
hidden from the workers that run candidate code."""
from __future__ import annotations

import json
import os
from pathlib import Path

from conftest import REPO, PAIR_TIMEOUT_ARG, run_cli, write_config
from harness.run import build, compilecache
from harness.run.cachedirs import compile_root, hidden_from_candidates

CPU = build.Toolchain("cpu", "2.13.0", None, None, "3.11.7")


def test_the_cache_lies_under_cache_dir_keyed_by_the_toolchain(tmp_path):
    entry = compilecache.entry(tmp_path, CPU)
    assert entry.parent == (tmp_path / "compile").resolve()
    assert compilecache.entry(tmp_path, build.Toolchain("cpu", "2.13.0", None, None, "3.11.7")) == entry
    for other in (build.Toolchain("cpu", "2.11.0", None, None, "3.11.7"),
                  build.Toolchain("cuda", "2.13.0", "12.8", "9.0", "3.11.7"),
                  build.Toolchain("cuda", "2.13.0", "12.8", "10.0", "3.11.7"),
                  build.Toolchain("cpu", "2.13.0", None, None, "3.12.1")):
        assert compilecache.entry(tmp_path, other) != entry


def test_the_reference_env_points_inductor_and_triton_at_the_entry(tmp_path):
    env = compilecache.reference_env(tmp_path, CPU)
    entry = compilecache.entry(tmp_path, CPU)
    assert env == {"TORCHINDUCTOR_CACHE_DIR": str(entry), "TRITON_CACHE_DIR": str(entry / "triton")}


def test_prepare_makes_the_entry_and_removes_a_damaged_one_like_a_build(tmp_path):
    assert compilecache.prepare(tmp_path, CPU) is None
    entry = compilecache.entry(tmp_path, CPU)
    assert entry.is_dir()
    (entry / "fxgraph").mkdir()
    assert compilecache.prepare(tmp_path, CPU) is None and (entry / "fxgraph").is_dir()    # a sound one is kept
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "kept").write_text("x")
    os.symlink(elsewhere, entry / "link")
    warning = compilecache.prepare(tmp_path, CPU)
    assert warning is not None and "link" in warning and "removed and made again" in warning
    assert entry.is_dir() and not entry.is_symlink() and list(entry.iterdir()) == []
    assert (elsewhere / "kept").read_text() == "x"                   # a link is removed, never followed


def test_prepare_replaces_a_compile_folder_that_is_a_link(tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    (tmp_path / "cache").mkdir()
    os.symlink(target, tmp_path / "cache" / "compile")
    warning = compilecache.prepare(tmp_path / "cache", CPU)
    assert warning is not None and "not a folder" in warning
    assert not (tmp_path / "cache" / "compile").is_symlink() and list(target.iterdir()) == []


def test_candidate_code_does_not_see_the_compile_cache(tmp_path):
    """The build and candidate workers' sandbox hides the run keys and the compile caches alike."""
    hidden = hidden_from_candidates(tmp_path)
    assert str(compile_root(tmp_path)) in hidden and str((tmp_path / "keys").resolve()) in hidden


def test_a_second_run_finds_the_baseline_in_cache_dir(tmp_path):
    """A CPU run with a torch.compile baseline leaves Inductor's FX graph and AOTAutograd caches under
    <cache_dir>/compile/<key>/; the candidate worker's sandbox hid that folder (where the machine can hide one)."""
    tree = REPO / "examples" / "cpu"
    config = write_config(tmp_path, tree, cache_dir=tmp_path / "cache")
    done = run_cli("--config", str(config), "--problem", "001_*", "--candidate", "aa_*", "--compile-modes",
                   "default", "--json", "--timeout", PAIR_TIMEOUT_ARG)
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads([line for line in done.stdout.splitlines() if line.startswith("{")][0])
    assert record["timing"]["baselines"]["compile:default"]["error"] is None
    (entry,) = (tmp_path / "cache" / "compile").iterdir()
    assert any((entry / "fxgraph").rglob("*")) and (entry / "aotautograd").is_dir()
    hidden = record["sandbox"]["hidden"]
    assert not hidden or str(entry.parent.resolve()) in hidden
