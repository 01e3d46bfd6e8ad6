"""The run layer takes a Config and a RunRequest, never the argparse Namespace (issue 46 item 3): nothing under
harness/run/ imports argparse; the CLI builds the request from its flags (harness.cli.load_run, one place) and the
flags a user scripts against still reach the run; harness.api builds one without argparse."""
from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from harness import api, cli
from harness.core.config import config_to_dict
from harness.core.request import RunRequest
from harness.results.store import RunStore
from harness.run import pipeline
from harness.run.resume import selection_record

REPO = Path(__file__).resolve().parent.parent
RUN = REPO / "harness" / "run"
CPU = REPO / "examples" / "cpu"
PROBLEM = CPU / "problems" / "level1" / "001_relu_scale.py"


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_no_module_of_the_run_layer_imports_argparse_or_takes_a_namespace():
    modules = sorted(RUN.rglob("*.py"))
    assert RUN / "executors" / "local.py" in modules
    offenders = [str(p.relative_to(REPO)) for p in modules if "argparse" in _imports(p) or "Namespace" in p.read_text()]
    assert not offenders, offenders


def test_the_request_is_frozen_and_says_what_each_field_is():
    request = RunRequest()
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.resume = "x"                                            # type: ignore[misc]
    source = (REPO / "harness" / "core" / "request.py").read_text()
    tree = ast.parse(source)
    body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "RunRequest").body
    documented = {a.target.id for a, b in zip(body, body[1:]) if isinstance(a, ast.AnnAssign)
                  and isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant)}
    assert documented == {f.name for f in dataclasses.fields(RunRequest)}


@pytest.fixture
def caught(monkeypatch):
    """run_pipeline's arguments, for the command that calls it, instead of a run."""
    calls: list[dict] = []

    def fake(cfg, request, pairs=None, conclude=None, on_record=None):
        calls.append({"cfg": cfg, "request": request, "pairs": pairs})
        return 0

    monkeypatch.setattr(pipeline, "run_pipeline", fake)
    return calls


def test_the_run_flags_reach_the_run(caught, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = ["--problems-dir", str(CPU / "problems"), "--solutions-dir", str(CPU / "solutions"), "--gpus", "1,2",
            "--executor", "dask", "--scheduler", "tcp://10.0.0.5:8786", "--problem", "*relu*", "--json"]
    assert cli.main(argv) == 0
    cfg, request = caught[0]["cfg"], caught[0]["request"]
    assert request == RunRequest(tuple(argv), json=True, gpus_given=True)
    assert cfg.gpus == (1, 2) and cfg.executor == "dask" and cfg.scheduler == "tcp://10.0.0.5:8786"
    assert cfg.problem == "*relu*" and caught[0]["pairs"] is None       # the run selects its own pairs


def test_one_pair_flags_reach_the_run(caught, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    solution = CPU / "solutions" / "level1" / "001_relu_scale" / "cpp_loop.py"
    assert cli.main(["--problem-file", str(PROBLEM), "--solution-file", str(solution), "--device", "cpu"]) == 0
    request = caught[0]["request"]
    assert (request.problem_file, request.solution_file) == (PROBLEM, solution) and not request.gpus_given
    assert cli.main(["--problem-file", str(PROBLEM)]) == 2 and len(caught) == 1


def test_resume_and_add_new_reach_the_run_with_the_recorded_pair_files(caught, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    solution = tmp_path / "s.py"
    first = cli.load_run(cli._run_parser().parse_args(["--problem-file", str(PROBLEM), "--solution-file",
                                                       str(solution), "--device", "cpu", "--trials", "3"]))
    cfg, request = first
    out = tmp_path / "results"
    run_id = RunStore.create(out, {"config": config_to_dict(cfg), "selection": selection_record(cfg, request)}).run_id
    argv = ["--resume", run_id, "--output-dir", str(out), "--add-new", "--gpus", "0"]
    assert cli.main(argv) == 0
    cfg, request = caught[0]["cfg"], caught[0]["request"]
    assert request == RunRequest(tuple(argv), PROBLEM, solution, resume=run_id, add_new=True, gpus_given=True)
    assert cfg.trials == 3 and cfg.device == "cpu" and cfg.output_dir == str(out)


def test_calibrate_hands_the_run_its_command_and_pairs(caught, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = ["calibrate", "--problems-dir", str(CPU / "problems"), "--solutions-dir", str(CPU / "solutions"),
            "--problem", "*relu*", "--device", "cpu", "--processes", "2"]
    assert cli.main(argv) == 0
    cfg, request = caught[0]["cfg"], caught[0]["request"]
    assert request.argv == tuple(argv) and request.resume is None
    assert cfg.timing.processes == 2 and len(caught[0]["pairs"]) == 1


def test_the_api_builds_its_run_without_argparse(caught, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert api.evaluate(PROBLEM, {"mine": "class ModelNew: pass\n"}, overrides={"device": "cpu"}) == []
    request = caught[0]["request"]
    assert type(request) is RunRequest and request.argv == ("api", "level1/001_relu_scale")
    assert request.problem_file == PROBLEM and request.solution_file is None and request.resume is None
    assert [p.candidate.id for p in caught[0]["pairs"]] == ["level1/001_relu_scale/mine"]
    assert "argparse" not in _imports(REPO / "harness" / "api.py")
