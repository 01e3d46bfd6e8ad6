"""harness.run.resume, in process: --resume continues a run with the config and selection its run.json recorded;
where-and-how flags apply, a flag that would change what is measured is refused naming the flag and the recorded
value, and a run that cannot be continued (no recorded config, its key file gone) is one clear error.
(test_nothing_lost runs the same through the CLI on a real run.)"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness import cli
from harness.core.config import config_to_dict, load_config
from harness.core.errors import InputError, UsageError
from harness.core.request import RunRequest
from harness.results.signing import KeyFileError
from harness.results.store import RunStore
from harness.run.resume import FREE_FLAGS, selection_record

PARSER = cli._run_parser()


def parse(*argv: str):
    return PARSER.parse_args(list(argv))


def record_run(tmp: Path, *argv: str, config: dict | None = None, drop: str | None = None) -> tuple[Path, str]:
    """A run folder as the pipeline leaves one (run.json with "config" and "selection", a key file), for the run
    that `run_eval.py --config FILE *argv` would have started; `drop` leaves that key out of run.json."""
    tmp.mkdir(exist_ok=True)
    path = tmp / "config.yaml"
    values = {"problems_dir": str(tmp / "problems"), "solutions_dir": str(tmp / "solutions"),
              "cache_dir": str(tmp / "cache"), "device": "cpu", "trials": 3, **(config or {})}
    path.write_text("".join(f"{k}: {v}\n" for k, v in values.items()))
    args = parse("--config", str(path), *argv)
    cfg, request = cli.load_run(args)
    meta = {"config": config_to_dict(cfg), "selection": selection_record(cfg, request)}
    meta.pop(drop, None)
    out = tmp / "results"
    store = RunStore.create(out, meta)
    return out, store.run_id


def resume(out: Path, run_id: str, *argv: str):
    """The resumed run's Config and RunRequest, as `run_eval.py --resume RUN_ID --output-dir OUT *argv` has them."""
    return cli.load_run(parse("--resume", run_id, "--output-dir", str(out), *argv))


def test_every_flag_that_sets_the_config_is_matched_against_the_record():
    """A flag is checked on --resume through the config keys it sets, found by passing it through the CLI's own
    overrides: a flag added there is covered. Only where-and-how flags and the pair files set none."""
    keys = cli.flag_keys(PARSER, cli._overrides)
    uncovered = {dest for dest, (_, set_keys) in keys.items() if not set_keys}
    assert uncovered <= set(FREE_FLAGS) | {"problem_file", "solution_file"}, uncovered
    names = cli.flag_names(PARSER, cli._overrides)
    assert names["trials"] == "--trials" and names["timing.samples"] == "--samples"
    assert names["timing.target_rel_ci"] == "--target-rel-ci" and names["timing.mode"] == "--timing-mode"
    assert names["timing.compile_modes"] == "--compile-modes" and names["problems_dir"] == "--problems-dir"


def test_resume_takes_the_recorded_config_and_selection(tmp_path, monkeypatch):
    """From another folder, with another config.yaml there: the run's own settings, and its trees where they were
    (a relative problems_dir was recorded absolute in the selection)."""
    monkeypatch.chdir(tmp_path)
    out, run_id = record_run(tmp_path, "--candidate", "cpp*", "--trials", "4", "--target-rel-ci", "0.2",
                             config={"problems_dir": "problems"})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "config.yaml").write_text("trials: 9\nproblems_dir: other\n")    # today's config: not read
    monkeypatch.chdir(elsewhere)
    cfg, request = resume(out, run_id)
    assert cfg.trials == 4 and cfg.timing.target_rel_ci == 0.2 and cfg.candidate == "cpp*"
    assert cfg.problems_dir == str(tmp_path / "problems") and cfg.cache_dir == str(tmp_path / "cache")
    assert cfg.output_dir == str(out)
    assert request.problem_file is None and request.solution_file is None


def test_where_and_how_flags_apply_and_the_recorded_values_are_accepted(tmp_path):
    out, run_id = record_run(tmp_path, "--level", "level1", "--trials", "4")
    cfg, _ = resume(out, run_id, "--jobs", "1", "--timeout", "99", "--gpus", "1,2", "--trials", "4", "--level", "1",
                    "--problems-dir", str(tmp_path / "sub" / ".." / "problems"), "--json")
    assert (cfg.jobs, cfg.timeout, cfg.gpus) == (1, 99.0, (1, 2))
    assert cfg.trials == 4 and cfg.level == "level1"


@pytest.mark.parametrize("flags, words", [
    (["--trials", "7"], "--trials 7 differs from the run's recorded trials 3; --resume continues a run with its "
                        "own settings"),
    (["--samples", "9"], "--samples 9 differs from the run's recorded timing.samples null"),
    (["--target-rel-ci", "0.01"], "--target-rel-ci 0.01 differs from the run's recorded timing.target_rel_ci 0.005"),
    (["--compile-modes", "none"], "--compile-modes none differs from the run's recorded timing.compile_modes "
                                  "default,max-autotune-no-cudagraphs"),
    (["--seed", "3"], "--seed 3 differs from the run's recorded seed null"),
    (["--device", "auto"], "--device auto differs from the run's recorded device cpu"),
    (["--problem", "*relu*"], "--problem *relu* differs from the run's recorded problem *"),
    (["--level", "2"], "--level 2 differs from the run's recorded level null"),
    (["--problems-dir", "/elsewhere/problems"], "--problems-dir /elsewhere/problems differs from the run's recorded "
                                                "problems_dir "),
    (["--problem-file", "p.py", "--solution-file", "s.py"], "--problem-file p.py differs"),
])
def test_a_flag_that_changes_what_is_measured_is_refused(tmp_path, flags, words):
    out, run_id = record_run(tmp_path)
    with pytest.raises(UsageError) as caught:
        resume(out, run_id, *flags)
    assert words in str(caught.value) and "\n" not in str(caught.value)


def test_a_bad_runtime_flag_names_the_flag(tmp_path):
    out, run_id = record_run(tmp_path)
    with pytest.raises(UsageError, match="--jobs"):
        resume(out, run_id, "--jobs", "-3")


def test_a_pair_run_resumes_with_its_files(tmp_path):
    """A run of one pair (--problem-file, --solution-file) records both as absolute paths; the resume sets them."""
    problem, solution = tmp_path / "p.py", tmp_path / "s.py"
    out, run_id = record_run(tmp_path, "--problem-file", str(problem), "--solution-file", str(solution))
    _, request = resume(out, run_id)
    assert (request.problem_file, request.solution_file) == (problem, solution)


def test_selection_paths_are_recorded_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = load_config(None, {"problems_dir": "mine/problems", "level": "1"})
    recorded = selection_record(cfg, RunRequest(problem_file=Path("p.py"), solution_file=Path("s.py")))
    assert recorded["problems_dir"] == str(tmp_path / "mine" / "problems")
    assert recorded["problem_file"] == str(tmp_path / "p.py") and recorded["level"] == "1"


def test_a_run_recorded_before_selection_existed_resumes_with_its_config(tmp_path):
    out, run_id = record_run(tmp_path, "--problem", "*relu*", drop="selection")
    cfg, _ = resume(out, run_id)
    assert cfg.problem == "*relu*"
    with pytest.raises(UsageError, match="--problem \\*gelu\\* differs"):
        resume(out, run_id, "--problem", "*gelu*")


def test_a_run_that_cannot_be_continued_says_why(tmp_path):
    out, run_id = record_run(tmp_path, drop="config")
    with pytest.raises(InputError, match='no recorded "config"; this run cannot be resumed'):
        resume(out, run_id)
    out, run_id = record_run(tmp_path / "keyless")
    key_file = Path(json.loads((out / run_id / "run.json").read_text())["signing"]["key_file"])
    key_file.unlink()
    with pytest.raises(KeyFileError, match="cannot be resumed"):
        resume(out, run_id)
    with pytest.raises(UsageError, match="no such run"):
        resume(out, "20990101-000000-beef")


# ---------------------------------------------------------------- which pairs a resume runs (issue 47)

def _pairs(*names: str):
    from harness.core.discover import Candidate, Pair
    return [Pair(None, Candidate(f"level1/001_x/{n}", Path(f"{n}.py"), "", None), "level1/001_x") for n in names]


def test_resume_never_adds_a_pair_the_run_did_not_have():
    from harness.run.resume import pair_keys, resume_note, resume_selection
    recorded = _pairs("a", "b", "c")
    meta = {"pairs": pair_keys(recorded), "finished_at": "t"}
    today = _pairs("a", "b", "c", "new1", "new2")                  # two candidates written since the run started
    done = {("level1/001_x", "level1/001_x/a")}
    resumed = resume_selection(today, meta, done, add_new=False)
    assert [p.candidate.id for p in resumed.todo] == ["level1/001_x/b", "level1/001_x/c"]
    assert resumed.keys == pair_keys(recorded)                       # the run's selection stays what it was
    note = resume_note(resumed, "r1")
    assert "2 pairs" in note and "not in run r1" in note and "--add-new" in note
    added = resume_selection(today, meta, done, add_new=True)
    assert [p.candidate.id.rsplit("/", 1)[-1] for p in added.todo] == ["b", "c", "new1", "new2"]
    assert len(added.keys) == 5 and resume_note(added, "r1").startswith("--add-new: adding 2 pairs")
    assert resume_note(resume_selection(recorded, meta, done, False), "r1") is None


def test_a_finished_run_recorded_before_its_pair_list_gains_no_pair():
    from harness.run.resume import resume_selection
    done = {p.key for p in _pairs("a", "b")}
    resumed = resume_selection(_pairs("a", "b", "new"), {"finished_at": "t"}, done, add_new=False)
    assert resumed.todo == [] and [p.candidate.id for p in resumed.new] == ["level1/001_x/new"]


def test_add_new_goes_with_resume(tmp_path):
    with pytest.raises(UsageError, match="--add-new goes with --resume"):
        cli.load_run(parse("--add-new", "--problems-dir", str(tmp_path)))
