"""Input sizes (docs/AUTHORING.md, Sizes): a problem's SIZES, correctness at every size, per-size records and their
geometric mean, and KernelBench's format kept (its loader still loads the files, import stays byte for byte)."""
from __future__ import annotations

import ast
import csv
import io
import json
import math
import types
from pathlib import Path

import pytest

from conftest import REPO, json_records, run_cli, run_dirs, write_config
from harness.commands.kbimport import import_kernelbench
from harness.results.records import Record, RecordDraft, Status, finish
from harness.results.parts import SizeResult
from harness.run import sizes as parent_sizes
from harness.shared import messages as m
from harness.shared import sizes as shared
from harness.worker import sizes

PROBLEM = '''"""ReLU, then a constant scale, at three sizes."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return torch.relu(x) * self.scale


rows, cols = 64, 256
SIZES = {"small": {"rows": 4, "cols": 32}, "medium": {"rows": 16}, "large": {}}


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return [2.5]
'''

GENERAL = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return torch.clamp(x, min=0) * self.scale
'''

MAIN_ONLY = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Right at the main size (64 x 256) only: at any other shape it forgets the scale."""
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        if tuple(x.shape) == (64, 256):
            return torch.relu(x) * self.scale
        return torch.relu(x)
'''

STEM = "001_relu_sizes"
NOISE_FLAGS = {"interference", "timing_inconsistent", "noisy"}


def _tree(root: Path, candidates: dict[str, str]) -> Path:
    (root / "problems" / "level1").mkdir(parents=True)
    (root / "problems" / "level1" / f"{STEM}.py").write_text(PROBLEM)
    folder = root / "solutions" / "level1" / STEM
    folder.mkdir(parents=True)
    for name, text in candidates.items():
        (folder / f"{name}.py").write_text(text)
    return root


def _module(text: str, name: str = "kb_problem_test") -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(text, name, "exec"), module.__dict__)
    return module


# ---------------------------------------------------------------- end to end, on the CPU

@pytest.fixture(scope="module")
def sizes_run(tmp_path_factory):
    """One CPU run over a problem with three sizes: a general candidate and one right at the main size only, every
    size timed (--time-sizes all)."""
    tmp = tmp_path_factory.mktemp("sizes-run")
    tree = _tree(tmp / "tree", {"general": GENERAL, "main_only": MAIN_ONLY})
    config = write_config(tmp, tree, trials=2)
    done = run_cli("--config", str(config), "--json", "--time-sizes", "all")
    assert done.returncode == 0, done.stderr
    return tmp, json_records(done.stdout)


def test_correct_only_at_the_main_size_is_incorrect_naming_the_size(sizes_run):
    _, records = sizes_run
    r = records["main_only"]
    assert r["status"] == "incorrect"
    assert r["error"].startswith("wrong at size 'small' (rows=4, cols=32; inputs [4, 32]): trial 0: ")
    by_name = {s["name"]: s for s in r["sizes"]}
    assert by_name["large"]["main"] and by_name["large"]["correct"] and by_name["large"]["trials_passed"] == 2
    assert not by_name["small"]["correct"] and not by_name["medium"]["correct"]
    assert r["correctness"]["trials"] == 6 and r["correctness"]["trials_passed"] == 2
    assert r["correctness"]["first_mismatch"]["trial"] == "trial0@small"


def test_a_general_candidate_gets_a_speedup_per_size_and_their_geomean(sizes_run):
    _, records = sizes_run
    r = records["general"]
    # a busy machine may make a pair invalid for its timing (interference, timing_inconsistent): never for outputs
    assert r["status"] == "ok" or set(r["flags"]) <= NOISE_FLAGS, (r["status"], r["error"], r["flags"])
    assert [s["name"] for s in r["sizes"]] == ["small", "medium", "large"]
    assert [s["inputs"] for s in r["sizes"]] == [[[4, 32]], [[16, 256]], [[64, 256]]]
    assert all(s["correct"] and s["trials"] == 2 and s["timed"] for s in r["sizes"])
    for s in r["sizes"]:
        lo, hi = s["speedup_ci"]
        assert lo <= s["speedup"] <= hi and s["rounds"] >= 1
    main = next(s for s in r["sizes"] if s["main"])
    assert main["speedup"] == r["speedup"] and main["speedup_ci"] == r["speedup_ci"]
    speedups = [s["speedup"] for s in r["sizes"]]
    assert r["sizes_geomean"] == pytest.approx(math.exp(sum(map(math.log, speedups)) / 3))
    # the other sizes' timed outputs were checked too (their checks join the main size's)
    assert r["correctness"]["timed_outputs_checked"] > r["timing"]["rounds"] * 2 * 2


def test_the_records_read_back_and_the_reports_show_the_sizes(sizes_run):
    tmp, records = sizes_run
    run = run_dirs(tmp)[0]
    lines = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    for line in lines:
        record = Record.from_json(line, "test")
        assert record.sizes is not None and all(isinstance(s, SizeResult) for s in record.sizes)
    shown = run_cli("report", run.name, "--output-dir", str(tmp / "results"))
    assert shown.returncode == 0, shown.stderr
    assert "input sizes" in shown.stdout and "large (main)" in shown.stdout
    page = (run / "index.html").read_text()
    assert "Input sizes" in page and "geomean over sizes" in page
    if records["general"]["status"] == "ok":             # the best candidates' sizes: only a ranked pair is one
        assert "Input sizes of the best candidates" in (run / "leaderboard.md").read_text()
    compared = run_cli("compare", run.name, run.name, "--output-dir", str(tmp / "results"))
    assert compared.returncode == 0, compared.stderr
    assert "geomean" in compared.stdout and "medium" in compared.stdout
    exported = run_cli("report", run.name, "--output-dir", str(tmp / "results"), "--csv")
    assert exported.returncode == 0, exported.stderr
    rows = {row["solution"].rsplit("/", 1)[-1]: row for row in csv.DictReader(io.StringIO(exported.stdout))}
    general, wrong = records["general"], rows["main_only"]
    if general["status"] == "ok":
        assert rows["general"]["sizes"] == ";".join(f"{s['name']}={s['speedup']:.6g}" for s in general["sizes"])
        assert float(rows["general"]["sizes_geomean"]) == pytest.approx(general["sizes_geomean"])
    assert wrong["sizes"].split(";") == ["small=incorrect", "medium=incorrect", "large=ok"]
    assert wrong["sizes_geomean"] == ""


def test_lint_checks_every_size(tmp_path):
    tree = _tree(tmp_path / "tree", {})
    done = run_cli("lint", "--problems-dir", str(tree / "problems"), "--output-dir", str(tmp_path / "out"),
                   "--device", "cpu", "--json")
    assert done.returncode == 0, done.stderr
    (result,) = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert result["verdict"] == "ok", result
    assert [(s["name"], s["verdict"], s["output_shapes"]) for s in result["sizes"]] == [
        ("small", "ok", [[4, 32]]), ("medium", "ok", [[16, 256]]), ("large", "ok", [[64, 256]])]


# ---------------------------------------------------------------- the declaration, worker side

def test_declared_sizes_and_the_main_one():
    found = sizes.declared(_module(PROBLEM))
    assert [(s.name, s.main) for s in found] == [("small", False), ("medium", False), ("large", True)]
    plan = sizes.plan(found, 2)
    assert [t.label for t in plan] == ["trial0", "trial1", "trial0@small", "trial1@small", "trial0@medium",
                                       "trial1@medium"]
    assert [t.index for t in plan] == list(range(6)) and [t.k for t in plan] == [0, 1] * 3
    without = sizes.declared(_module(PROBLEM.replace("SIZES = ", "_SIZES = ")))
    assert without == [sizes.MAIN_ONLY]
    unnamed = sizes.declared(_module(PROBLEM.replace(', "large": {}', "")))
    assert [(s.name, s.main) for s in unnamed] == [("main", True), ("small", False), ("medium", False)]


def test_a_size_applies_to_get_inputs_only_and_is_put_back():
    problem = _module(PROBLEM)
    small = sizes.by_name(sizes.declared(problem), "small")
    with sizes.applied(problem, small):
        assert problem.get_inputs()[0].shape == (4, 32)
    assert (problem.rows, problem.cols) == (64, 256) and problem.get_inputs()[0].shape == (64, 256)
    sizes.check_init(problem, sizes.declared(problem), problem.get_init_inputs())


@pytest.mark.parametrize("declaration, why", [
    ('SIZES = {"small": {"rowz": 4}, "large": {}}', "does not define"),
    ('SIZES = {"a": {}, "b": {}}', "the same size"),
    ('SIZES = {"bad name": {"rows": 4}}', "not a size name"),
    ('SIZES = {"small": {"get_inputs": 4}}', "not a constant"),
    ('SIZES = [("small", {"rows": 4})]', "must be a non-empty dict"),
    ('SIZES = {"main": {"rows": 4}}', "names the main size"),
])
def test_a_declaration_the_harness_cannot_use_is_the_problems_error(declaration, why):
    text = PROBLEM.replace('SIZES = {"small": {"rows": 4, "cols": 32}, "medium": {"rows": 16}, "large": {}}',
                           declaration)
    with pytest.raises(sizes.ProblemError, match=why):
        sizes.declared(_module(text))


def test_a_size_that_changes_the_init_inputs_is_refused():
    text = PROBLEM.replace("return [2.5]", "return [float(cols)]")
    problem = _module(text)
    with pytest.raises(sizes.ProblemError, match="changes get_init_inputs"):
        sizes.check_init(problem, sizes.declared(problem), problem.get_init_inputs())


# ---------------------------------------------------------------- the parent's side

READY_SIZES = [m.SizeInfo("small", False, {"rows": 4}, [[4, 32]], 512),
               m.SizeInfo("large", True, {}, [[64, 256]], 65536)]


def _ready(found: list[m.SizeInfo]) -> m.Ready:
    checks = m.ProblemChecks(False, False, False, False, True, False, [])
    return m.Ready("float32", "default", 1e-4, 1e-4, False, [[64, 256]], 0, "train", 0, checks, {}, 0.001, None,
                   sizes=found)


def test_the_candidate_must_hand_over_every_sizes_outputs():
    ready = _ready(READY_SIZES)
    assert parent_sizes.expected_labels(ready, 2) == ["trial0", "trial1", "trial0@small", "trial1@small"]
    files = [m.TrialFile(label, f"/x/{label}.kbt", i) for i, label in enumerate(["trial0", "trial1"])]
    outputs = m.Outputs("seed", [], "train", files, False, False, False)
    assert "not the trials asked for" in parent_sizes.missing_outputs(outputs, ready, 2)
    every = [m.TrialFile(label, "", i) for i, label in enumerate(parent_sizes.expected_labels(ready, 2))]
    assert parent_sizes.missing_outputs(m.Outputs("seed", [], "train", every, False, False, False), ready, 2) is None
    assert parent_sizes.expected_labels(_ready([]), 2) == ["trial0", "trial1"]      # an older reference: one size


def test_the_verdict_names_the_size_and_the_per_size_results():
    ready = _ready(READY_SIZES)
    assert parent_sizes.wrong_at("trial1@small", ready) == "wrong at size 'small' (rows=4; inputs [4, 32]): "
    assert parent_sizes.wrong_at("trial0", ready) == "wrong at size 'large' (the main size, inputs [64, 256]): "
    assert parent_sizes.wrong_at("trial0", _ready(READY_SIZES[1:])) == ""
    checks = [m.FileCheck(True, "trial0", max_abs_err=0.0), m.FileCheck(False, "trial0@small", max_abs_err=2.0)]
    small, large = parent_sizes.results(checks, ready)
    assert (small.name, small.correct, small.trials, small.max_abs_err) == ("small", False, 1, 2.0)
    assert (large.name, large.main, large.correct, large.shape) == ("large", True, True, "inputs [64, 256]")


def test_geomean_over_the_timed_sizes():
    assert parent_sizes.geomean([2.0, 0.5]) == pytest.approx(1.0)
    assert parent_sizes.geomean([2.0, None]) is None and parent_sizes.geomean([]) is None


def test_a_record_with_sizes_writes_the_json_it_reads():
    record = finish(RecordDraft(run_id="r", problem="level1/p", solution="level1/p/c", device="cpu"), Status.OK)
    assert "sizes" not in record.to_json()                  # one size: nothing new on the record
    record.sizes = [SizeResult("small", False, {"rows": 4}, [[4, 32]], "rows=4; inputs [4, 32]", 2, 2, True, 0.0,
                               True, 1.1, [1.0, 1.2], 6)]
    record.sizes_geomean = 1.1
    data = json.loads(json.dumps(record.to_json()))
    back = Record.from_json(data, "test")
    assert back.sizes[0].to_json() == data["sizes"][0] and back.sizes_geomean == 1.1
    assert list(data)[-2:] == ["sizes", "sizes_geomean"]


def test_labels_are_shared_by_both_ends():
    assert shared.labels(["small", "large"], "large", 1) == ["trial0", "trial0@small"]
    assert shared.size_of("trial3@medium") == "medium" and shared.size_of("trial3") is None


# ---------------------------------------------------------------- KernelBench's format

SIZED = sorted(p for p in (REPO / "problems").rglob("*.py") if "SIZES = " in p.read_text())


def kernelbench_load(source: str):
    """KernelBench's loader, as its eval does it: exec the source, then Model(*get_init_inputs()) and
    get_inputs() with no arguments (tensors on the meta device here: the shipped sizes are large)."""
    import torch
    namespace: dict = {}
    exec(compile(source, "<problem>", "exec"), namespace)
    with torch.device("meta"):
        init = namespace["get_init_inputs"]()
        model = namespace["Model"](*init)
        inputs = namespace["get_inputs"]()
        out = model(*inputs)
    return namespace, inputs, out


def test_at_least_twenty_shipped_problems_declare_three_sizes():
    assert len(SIZED) >= 20
    for path in SIZED:
        problem = _module(path.read_text(), "kb_shipped")
        found = sizes.declared(problem)
        assert len(found) >= 3 and [s.name for s in found if s.main] == ["large"], path


@pytest.mark.parametrize("path", SIZED, ids=lambda p: p.stem)
def test_a_shipped_problem_with_sizes_still_loads_in_kernelbenchs_loader(path):
    namespace, inputs, out = kernelbench_load(path.read_text())
    assert inputs[0].shape[0] == namespace["batch_size"]       # the main size: the file's own constants
    tree = ast.parse(path.read_text())
    declared = [n for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "SIZES"]
    assert len(declared) == 1 and ast.literal_eval(declared[0].value)       # a plain literal, nothing executed
    problem = _module(path.read_text(), "kb_shipped")
    import torch
    found = sizes.declared(problem)
    sizes.check_init(problem, found, problem.get_init_inputs())
    for size in found:
        with torch.device("meta"), sizes.applied(problem, size):
            shape = problem.get_inputs()[0].shape
        assert shape[0] == size.overrides.get("batch_size", namespace["batch_size"])


def test_a_kernelbench_problem_imports_byte_identical_and_has_one_size(tmp_path):
    source = PROBLEM.replace('SIZES = {"small": {"rows": 4, "cols": 32}, "medium": {"rows": 16}, "large": {}}\n', "")
    checkout = tmp_path / "KernelBench" / "KernelBench" / "level1"
    checkout.mkdir(parents=True)
    (checkout / "19_ReLU.py").write_bytes(source.encode())
    report = import_kernelbench(tmp_path / "KernelBench", tmp_path / "problems", tmp_path / "solutions")
    ((_, dest),) = report.copied
    assert dest.read_bytes() == source.encode()
    assert sizes.declared(_module(dest.read_text())) == [sizes.MAIN_ONLY]
    kernelbench_load(dest.read_text())
    # the same file with SIZES added still loads in KernelBench's loader, at its own (main) size
    _, inputs, _ = kernelbench_load(PROBLEM)
    assert tuple(inputs[0].shape) == (64, 256)
