"""harness.api: candidates' sources against one problem from Python, through the CLI's pipeline; records as their
pairs end, one reference worker for them all."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import FIXTURES, verdict, write_config
from harness import api
from harness.core.errors import UsageError
from harness.results.records import Record, Status
from harness.run import schedule

TREE = FIXTURES / "tree"
PROBLEM = TREE / "problems" / "level1" / "001_linear_relu.py"
CANDIDATES = TREE / "solutions" / "level1" / "001_linear_relu"
EXPECTED = {"correct_cpp": "ok", "incorrect": "incorrect", "segfault": "crashed"}


@pytest.fixture(scope="module")
def agent_loop(tmp_path_factory):
    """Three candidates (correct, incorrect, crashing) through iter_evaluate, noting for each record whether the
    run had finished when it came, and every reference worker the run layer set up."""
    tmp = tmp_path_factory.mktemp("api")
    config = write_config(tmp, TREE)
    started = []
    original = schedule.ReferenceSide

    def counted(*args, **kwargs):
        started.append(args[0].problem_id)
        return original(*args, **kwargs)

    schedule.ReferenceSide = counted
    try:
        came = []
        for record in api.iter_evaluate(PROBLEM, {name: (CANDIDATES / f"{name}.py").read_text() for name in EXPECTED},
                                        config=config):
            run_json = json.loads((tmp / "results" / record.run_id / "run.json").read_text())
            came.append((record, "finished_at" in run_json))
    finally:
        schedule.ReferenceSide = original
    return tmp, came, started


def test_statuses_are_those_of_a_cli_run(agent_loop):
    _, came, _ = agent_loop
    got = {record.solution.rsplit("/", 1)[-1]: record for record, _ in came}
    assert set(got) == set(EXPECTED)
    for name, status in EXPECTED.items():
        assert isinstance(got[name], Record)
        assert verdict(got[name].raw) == status, got[name].error
    assert "SIGSEGV" in got["segfault"].error and got["correct_cpp"].status in (Status.OK, Status.INVALID)


def test_records_come_as_their_pairs_end(agent_loop):
    """The first record is in the caller's hands while the run still goes on (run.json has no finished_at yet)."""
    _, came, _ = agent_loop
    assert len(came) == 3 and came[0][1] is False


def test_one_reference_worker_serves_every_candidate(agent_loop):
    _, came, started = agent_loop
    assert started == ["level1/001_linear_relu"]
    assert {record.problem for record, _ in came} == {"level1/001_linear_relu"}


def test_the_run_is_stored_like_a_cli_run(agent_loop):
    """Signed results.jsonl lines, the records handed out being those lines (without their signature)."""
    tmp, came, _ = agent_loop
    run_dir = tmp / "results" / came[0][0].run_id
    lines = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert all("hmac" in line for line in lines)
    assert [{k: v for k, v in line.items() if k != "hmac"} for line in lines] == [r.raw for r, _ in came]


def test_a_problem_given_as_source_and_one_candidate(tmp_path):
    """A problem's source and one candidate's source (an A/A control, nothing to build); evaluate() hands each record
    to the callback and returns them."""
    seen = []
    source = PROBLEM.read_text()
    records = api.evaluate(source, _aa(source),
                           config=write_config(tmp_path, TREE), name="linear_relu", on_record=seen.append)
    assert records == seen and len(records) == 1
    assert records[0].problem == "api/linear_relu" and records[0].solution == "api/linear_relu/candidate"
    assert verdict(records[0].raw) == "ok", records[0].error


def _aa(problem_source: str) -> str:
    """A candidate that is the problem's Model under the name ModelNew."""
    return problem_source + "\n\nclass ModelNew(Model):\n    pass\n"


def test_bad_names_and_no_candidates_are_usage_errors(tmp_path):
    with pytest.raises(UsageError):
        api.make_pairs(tmp_path, PROBLEM, {"../escape": "x"})
    with pytest.raises(UsageError):
        api.make_pairs(tmp_path, PROBLEM, [])
    pairs = api.make_pairs(tmp_path, PROBLEM, ["a = 1\n", "b = 2\n"])
    assert [p.candidate.id for p in pairs] == ["level1/001_linear_relu/candidate_000",
                                               "level1/001_linear_relu/candidate_001"]
    assert all(isinstance(p.problem.path, Path) for p in pairs)
