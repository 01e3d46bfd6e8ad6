"""import-kernelbench: a KernelBench checkout's problems and a run folder's kernels land where discover finds them."""
from __future__ import annotations

from pathlib import Path

import pytest

from conftest import run_cli
from harness.core.discover import discover
from harness.core.errors import UsageError
from harness.commands.kbimport import cmd_import, import_kernelbench

PROBLEM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """{doc}"""
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
'''

KERNEL = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """{doc}"""
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)
'''

KB_FILES = {
    "level1/19_ReLU.py": PROBLEM.format(doc="relu"),
    "level1/23_Softmax.py": PROBLEM.format(doc="softmax"),
    "level2/1_Conv2D_ReLU_BiasAdd.py": PROBLEM.format(doc="conv relu bias\r\nwindows line end"),
    "level4/1_hf_model.py": PROBLEM.format(doc="needs huggingface"),
    "level1/relu helper.py": PROBLEM.format(doc="bad name"),
}
RUN_FILES = ("level_1_problem_19_sample_0_kernel.py", "level_1_problem_19_sample_1_kernel.py",
             "level_2_problem_1_sample_0_kernel.py", "level_1_problem_99_sample_0_kernel.py")
EXPECTED_PROBLEMS = {"kernelbench-level1/019_ReLU.py": "level1/19_ReLU.py",
                     "kernelbench-level1/023_Softmax.py": "level1/23_Softmax.py",
                     "kernelbench-level2/001_Conv2D_ReLU_BiasAdd.py": "level2/1_Conv2D_ReLU_BiasAdd.py"}
EXPECTED_CANDIDATES = {"kernelbench-level1/019_ReLU/my_run_sample_0.py": "level_1_problem_19_sample_0_kernel.py",
                       "kernelbench-level1/019_ReLU/my_run_sample_1.py": "level_1_problem_19_sample_1_kernel.py",
                       "kernelbench-level2/001_Conv2D_ReLU_BiasAdd/my_run_sample_0.py":
                           "level_2_problem_1_sample_0_kernel.py"}


@pytest.fixture
def kb(tmp_path: Path) -> Path:
    """A fake KernelBench checkout: <tmp>/kb/KernelBench/level<N>/<n>_<name>.py."""
    for rel, text in KB_FILES.items():
        path = tmp_path / "kb" / "KernelBench" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode())
    return tmp_path / "kb"


@pytest.fixture
def run(tmp_path: Path) -> Path:
    """A fake KernelBench run folder: <tmp>/runs/my_run/level_<L>_problem_<P>_sample_<S>_kernel.py."""
    folder = tmp_path / "runs" / "my_run"
    folder.mkdir(parents=True)
    for name in RUN_FILES:
        (folder / name).write_bytes(KERNEL.format(doc=name).encode())
    (folder / "eval_results.json").write_text("{}")
    return folder


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    return tmp_path / "problems", tmp_path / "solutions"


def tree_files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()} \
        if root.exists() else {}


def test_checkout_copies_levels_1_to_3_byte_for_byte(kb, dirs):
    problems, solutions = dirs
    report = import_kernelbench(kb, problems, solutions)
    assert report.layout == "checkout"
    assert tree_files(problems) == {dest: (kb / "KernelBench" / src).read_bytes()
                                    for dest, src in EXPECTED_PROBLEMS.items()}
    assert sorted(d.relative_to(problems).as_posix() for _, d in report.copied) == sorted(EXPECTED_PROBLEMS)
    reasons = {src.name: why for src, why in report.skipped}
    assert set(reasons) == {"level4", "relu helper.py"}
    assert "level 4" in reasons["level4"] and "network" in reasons["level4"]
    assert "<number>_<name>.py" in reasons["relu helper.py"]
    assert not report.unmatched and not solutions.exists()


def test_checkout_accepts_the_kernelbench_folder_itself(kb, dirs):
    report = import_kernelbench(kb / "KernelBench", *dirs)
    assert sorted(d.relative_to(dirs[0]).as_posix() for _, d in report.copied) == sorted(EXPECTED_PROBLEMS)


def test_run_folder_becomes_candidates_of_imported_problems(kb, run, dirs):
    problems, solutions = dirs
    import_kernelbench(kb, problems, solutions)
    report = import_kernelbench(run, problems, solutions)
    assert report.layout == "run"
    assert tree_files(solutions) == {dest: (run / src).read_bytes() for dest, src in EXPECTED_CANDIDATES.items()}
    assert [(src.name, "import the KernelBench problems first" in why) for src, why in report.unmatched] == \
        [("level_1_problem_99_sample_0_kernel.py", True)]
    assert not report.skipped


def test_run_folder_before_problems_is_all_unmatched(run, dirs):
    report = import_kernelbench(run, *dirs)
    assert not report.copied and len(report.unmatched) == len(RUN_FILES)
    assert not dirs[1].exists()


def test_level4_kernels_are_skipped(kb, run, dirs):
    (run / "level_4_problem_1_sample_0_kernel.py").write_text(KERNEL.format(doc="l4"))
    import_kernelbench(kb, *dirs)
    report = import_kernelbench(run, *dirs)
    assert [(src.name, "level 4" in why) for src, why in report.skipped] == \
        [("level_4_problem_1_sample_0_kernel.py", True)]
    assert not (dirs[1] / "kernelbench-level4").exists()


def test_reimport_is_idempotent(kb, run, dirs):
    problems, solutions = dirs
    import_kernelbench(kb, problems, solutions)
    import_kernelbench(run, problems, solutions)
    before = tree_files(problems), tree_files(solutions)
    again_kb = import_kernelbench(kb, problems, solutions)
    again_run = import_kernelbench(run, problems, solutions)
    assert (tree_files(problems), tree_files(solutions)) == before
    assert not again_kb.copied and len(again_kb.unchanged) == len(EXPECTED_PROBLEMS)
    assert not again_run.copied and len(again_run.unchanged) == len(EXPECTED_CANDIDATES)
    assert {src.name for src, _ in again_kb.skipped} == {"level4", "relu helper.py"}


def test_conflicting_existing_files_are_not_overwritten(kb, run, dirs):
    problems, solutions = dirs
    mine = problems / "kernelbench-level1" / "019_ReLU.py"
    mine.parent.mkdir(parents=True)
    mine.write_text("# the user's own edit\n")
    report = import_kernelbench(kb, problems, solutions)
    assert mine.read_text() == "# the user's own edit\n"
    assert [(src.name, "exists and differs" in why) for src, why in report.skipped if src.name == "19_ReLU.py"] == \
        [("19_ReLU.py", True)]
    assert (problems / "kernelbench-level1" / "023_Softmax.py").is_file()
    cand = solutions / "kernelbench-level1" / "019_ReLU" / "my_run_sample_0.py"
    cand.parent.mkdir(parents=True)
    cand.write_text("# mine\n")
    report = import_kernelbench(run, problems, solutions)
    assert cand.read_text() == "# mine\n"
    assert any(src.name == "level_1_problem_19_sample_0_kernel.py" and "exists and differs" in why
               for src, why in report.skipped)


def test_dry_run_writes_nothing(kb, run, dirs):
    problems, solutions = dirs
    report = import_kernelbench(kb, problems, solutions, dry_run=True)
    assert len(report.copied) == len(EXPECTED_PROBLEMS) and not problems.exists()
    import_kernelbench(kb, problems, solutions)
    report = import_kernelbench(run, problems, solutions, dry_run=True)
    assert len(report.copied) == len(EXPECTED_CANDIDATES) and not solutions.exists()


def test_discover_pairs_imported_candidates_with_their_problems(kb, run, dirs):
    problems, solutions = dirs
    import_kernelbench(kb, problems, solutions)
    import_kernelbench(run, problems, solutions)
    found, pairs = discover(problems, solutions)
    assert sorted(p.id for p in found) == sorted(k.removesuffix(".py") for k in EXPECTED_PROBLEMS)
    assert all(p.error is None for p in found)
    assert sorted(pair.candidate.id for pair in pairs) == sorted(k.removesuffix(".py") for k in EXPECTED_CANDIDATES)
    for pair in pairs:
        assert pair.problem is not None and pair.problem.id == pair.problem_id
        assert pair.candidate.error is None


@pytest.mark.parametrize("make", ["missing", "file", "empty", "both"])
def test_bad_paths_are_usage_errors(tmp_path, kb, run, dirs, make):
    path = {"missing": tmp_path / "nope", "file": tmp_path / "f.py", "empty": tmp_path / "empty",
            "both": kb}[make]
    if make == "file":
        path.write_text("x = 1\n")
    elif make == "empty":
        path.mkdir()
    elif make == "both":
        (kb / "level_1_problem_19_sample_0_kernel.py").write_text(KERNEL.format(doc="stray"))
    with pytest.raises(UsageError) as info:
        cmd_import([str(path), "--problems-dir", str(dirs[0]), "--solutions-dir", str(dirs[1])])
    assert str(path) in str(info.value) and "\n" not in str(info.value)
    assert not dirs[0].exists() and not dirs[1].exists()


def test_cmd_import_prints_skips_and_totals(kb, run, dirs, capsys):
    args = ["--problems-dir", str(dirs[0]), "--solutions-dir", str(dirs[1])]
    assert cmd_import([str(kb), *args]) == 0
    assert cmd_import([str(run), *args, "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert any(line.startswith("skipped") and "level 4" in line for line in out)
    assert any(line.startswith("unmatched") and "problem_99" in line for line in out)
    assert "copied 3, already there 0, skipped 2, unmatched 0 (problems)" in out
    assert "would copy 3, already there 0, skipped 0, unmatched 1 (candidates, dry run)" in out
    assert not dirs[1].exists()


def test_cli_import_kernelbench(kb, run, dirs, tmp_path):
    args = ["--problems-dir", str(dirs[0]), "--solutions-dir", str(dirs[1])]
    result = run_cli("import-kernelbench", str(kb), *args, timeout=120)
    assert result.returncode == 0, result.stderr
    result = run_cli("import-kernelbench", str(run), *args, timeout=120)
    assert result.returncode == 0, result.stderr
    assert tree_files(dirs[1]).keys() == EXPECTED_CANDIDATES.keys()
    missing = tmp_path / "no_such_checkout"
    result = run_cli("import-kernelbench", str(missing), *args, timeout=120)
    assert result.returncode == 2
    assert str(missing) in result.stderr
