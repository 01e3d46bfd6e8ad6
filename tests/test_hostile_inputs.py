"""Hostile inputs: every path, file and value the harness reads is untrusted, like candidate code.

Each case ends in one clear line or one record: nothing lost, nothing hangs, nothing written outside the output and
cache folders. One real CPU run over a hostile tree (names that are not UTF-8, control characters, link loops,
FIFOs, a name past NAME_MAX once escaped, x.py beside x.md) is shared by the tests that read its records."""
from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import PAIR_TIMEOUT_ARG, REPO, proc_children, proc_read, run_cli, run_dirs, verdict, write_config

EXAMPLE = REPO / "examples" / "cpu"
PROBLEM = EXAMPLE / "problems" / "level1" / "001_relu_scale.py"
AA = (EXAMPLE / "solutions" / "level1" / "001_relu_scale" / "aa_same_ops.py").read_text()
BAD = b"bad\xff"                                   # not UTF-8
ESC = "esc\x1b[31mred"                             # an ANSI escape in a name
LONG = "n" * 60 + "\u00e9" * 90                    # 240 bytes: a log name made of it would pass NAME_MAX
BOM = b"\xef\xbb\xbf"                                  # UTF-8's byte order mark, which Python's import skips


def _tree(root: Path) -> Path:
    probs, sols = root / "problems" / "level1", root / "solutions" / "level1"
    probs.mkdir(parents=True)
    (probs / "001_relu_scale.py").write_bytes(BOM + PROBLEM.read_bytes())    # Python imports it as it is
    os.mkfifo(probs / "002_fifo.py")                                # a problem that would block a plain read
    folder = sols / "001_relu_scale"
    folder.mkdir(parents=True)
    (sols / "002_fifo").mkdir()
    (sols / "002_fifo" / "aa.py").write_text(AA)
    with open(os.path.join(os.fsencode(folder), BAD + b".py"), "w") as f:
        f.write(AA)
    (folder / f"{LONG}.py").write_text(AA)
    (folder / f"{ESC}.py").write_text("this is not python (\n")
    (folder / "bom.py").write_bytes(BOM + AA.replace("\n", "\r\n").encode())
    (folder / "bom_md.md").write_bytes(BOM + f"```python\n{AA}```\n".encode())
    (folder / "latin.py").write_bytes(b"# -*- coding: latin-1 -*-\n# caf\xe9\n" + AA.encode())
    (folder / "undeclared.py").write_bytes(b"# caf\xe9, not UTF-8 and no coding line\n" + AA.encode())
    (folder / "twin.py").write_text("class Nope: pass\n")
    (folder / "twin.md").write_text("no code here\n")
    os.symlink("loop.py", folder / "loop.py")
    os.symlink("/nonexistent/kb-harness-target.py", folder / "dangling.py")
    os.mkfifo(folder / "fifo.py")
    (folder / "dir.py").mkdir()
    (folder / "notes.json").write_text("{}")
    (sols / "stray.py").write_text(AA)
    return root


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile")
    tree = _tree(tmp / "tree")
    config = write_config(tmp, tree)
    done = run_cli("--config", str(config), "--json", "--timeout", PAIR_TIMEOUT_ARG, timeout=1800)
    (run_dir,) = run_dirs(tmp)
    lines = (run_dir / "results.jsonl").read_text().splitlines()
    records = {json.loads(line)["solution"].rsplit("/", 1)[-1]: json.loads(line) for line in lines}
    return tmp, done, records, run_dir


def test_a_name_that_is_not_utf8_is_a_record_and_the_run_goes_on(hostile_run):
    _, done, records, _ = hostile_run
    assert done.returncode == 0, done.stderr
    assert "harness fault" not in done.stderr and "Traceback" not in done.stderr
    record = records["bad\\xff"]                                    # shown escaped, as text
    assert verdict(record) == "ok", record["error"]
    assert record["solution"] == "level1/001_relu_scale/bad\\xff"


def test_every_candidate_file_has_one_record(hostile_run):
    _, _, records, run_dir = hostile_run
    assert set(records) == {"bad\\xff", LONG, "esc\\x1b[31mred", "twin", "twin.md", "loop", "dangling", "fifo", "aa",
                            "bom", "bom_md", "latin", "undeclared"}
    lines = (run_dir / "results.jsonl").read_text().splitlines()
    keys = [(json.loads(l)["problem"], json.loads(l)["solution"]) for l in lines]
    assert len(keys) == len(set(keys))


@pytest.mark.parametrize("name", ["bom", "bom_md", "latin"])
def test_a_source_python_imports_is_evaluated_whatever_its_bom_or_coding_line(hostile_run, name):
    record = hostile_run[2][name]                   # and every pair of the tree ran against a BOM-prefixed problem
    assert verdict(record) == "ok", record["error"]


def test_a_source_python_cannot_decode_is_a_load_error_saying_so(hostile_run):
    record = hostile_run[2]["undeclared"]
    assert record["status"] == "load_error" and "not Python source text" in record["error"], record["error"]


def test_new_and_lint_read_a_bom_prefixed_problem(tmp_path):
    tree = _tree(tmp_path / "tree")
    made = run_cli("new", "level1/001_relu_scale", "mine", "--problems-dir", str(tree / "problems"),
                   "--solutions-dir", str(tree / "solutions"), timeout=120)
    assert made.returncode == 0, made.stderr
    assert (tree / "solutions" / "level1" / "001_relu_scale" / "mine.py").is_file()
    os.unlink(tree / "problems" / "level1" / "002_fifo.py")
    linted = run_cli("lint", "--problems-dir", str(tree / "problems"), "--device", "cpu", "--json",
                     "--output-dir", str(tmp_path / "out"), timeout=300)
    assert linted.returncode == 0, linted.stderr
    assert json.loads(linted.stdout.splitlines()[0])["verdict"] == "ok", linted.stdout


@pytest.mark.parametrize("name, words", [
    ("loop", "Too many levels of symbolic links"),
    ("dangling", "No such file"),
    ("fifo", "not a regular file (a FIFO)"),
])
def test_an_unreadable_candidate_is_a_load_error(hostile_run, name, words):
    record = hostile_run[2][name]
    assert record["status"] == "load_error" and words in record["error"]
    assert "\n" not in record["error"]


def test_a_fifo_problem_is_a_load_error_not_a_hang(hostile_run):
    record = hostile_run[2]["aa"]
    assert record["status"] == "load_error" and "not a regular file (a FIFO)" in record["error"]


def test_same_stem_with_two_suffixes_gives_two_records(hostile_run):
    records = hostile_run[2]
    assert records["twin"]["status"] == "load_error" and "no ModelNew" in records["twin"]["error"]
    assert records["twin.md"]["status"] == "load_error" and "twin.md" in records["twin.md"]["error"]


def test_control_characters_in_a_name_are_escaped_in_records_and_output(hostile_run):
    _, done, records, _ = hostile_run
    record = records["esc\\x1b[31mred"]
    assert record["status"] == "load_error" and "\x1b" not in record["error"]
    assert "\x1b[31m" not in done.stdout + done.stderr


def test_a_long_name_gets_its_record_and_a_bounded_log_name(hostile_run):
    _, _, records, run_dir = hostile_run
    assert verdict(records[LONG]) == "ok", records[LONG]["error"]
    assert all(len(os.fsencode(p.name)) <= 255 for p in (run_dir / "logs").iterdir())


def test_every_skipped_entry_is_named_in_one_line(hostile_run):
    stderr = hostile_run[1].stderr
    for name, why in [("dir.py", "a folder"), ("notes.json", "not a candidate file"),
                      ("stray.py", "not in a problem folder")]:
        lines = [line for line in stderr.splitlines() if f"/{name}: skipped" in line]
        assert len(lines) == 1 and why in lines[0], stderr


def test_an_unreadable_candidate_without_root_is_a_load_error(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root reads any file")
    from harness.core.discover import load_candidate
    path = tmp_path / "noperm.py"
    path.write_text(AA)
    path.chmod(0)
    candidate = load_candidate(path, "l/p/noperm")
    assert candidate.error is not None and "Permission denied" in candidate.error


def test_seeds_hash_any_name():
    from harness.core.seeds import RunSeed
    RunSeed.resolve(1).stream("samples", "level1/p", "level1/p/bad\udcff").next()


# ------------------------------------------------------------------------------------------------ configs


def _config_error(tmp_path: Path, text: str, *flags: str) -> str:
    """The run's one error line for a config of `text`: exit 2, no traceback, within 60 s."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    done = run_cli("--config", str(cfg), "--problems-dir", str(tmp_path / "none"), *flags, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {cfg}"), done.stderr
    return lines[0]


def _laughs(key: str = "trials") -> str:
    lines = [f"{key}:", '  - &x0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"  - &x{i} [{', '.join([f'*x{i - 1}'] * 9)}]" for i in range(1, 10)]
    return "\n".join(lines) + "\n"


def test_billion_laughs_in_a_known_key_is_refused_at_once(tmp_path):
    line = _config_error(tmp_path, _laughs())
    assert "aliases are expanded" in line and len(line) < 300


def test_billion_laughs_in_an_unknown_key_is_refused(tmp_path):
    assert "aliases are expanded" in _config_error(tmp_path, _laughs("lols"))


def test_a_key_given_twice_names_the_key_and_both_lines(tmp_path):
    line = _config_error(tmp_path, "trials: 3\ndevice: cpu\ntrials: 7\n")
    assert "'trials' given twice (lines 1 and 3)" in line


def test_a_nested_key_given_twice_is_refused(tmp_path):
    assert "'warmup' given twice (lines 2 and 4)" in _config_error(tmp_path, "timing:\n  warmup: 1\n  mode: cold\n"
                                                                                   "  warmup: 2\n")


@pytest.mark.parametrize("text, words", [
    ("a: &a [*a]\n", "an alias refers to a value that holds it"),
    ("trials: " + "[" * 3000 + "]" * 3000 + "\n", "nested more than"),
    ("trials: " + "[" * 40 + "]" * 40 + "\n", "nested more than 16 levels"),
    ("x: !!python/object/apply:os.system [\"echo pwned\"]\n", "invalid YAML"),
    ("device: \"" + "x" * 100_000 + "\"\n", "'device' must be auto, cuda or cpu"),
])
def test_hostile_yaml_is_one_line(tmp_path, text, words):
    assert words in _config_error(tmp_path, text)


def test_a_bad_value_is_shown_as_a_short_prefix(tmp_path):
    line = _config_error(tmp_path, "trials: \"" + "y" * 100_000 + "\"\n")
    assert "must be an integer" in line and len(line) < 300 and "..." in line


def test_a_config_that_is_a_fifo_or_huge_is_one_line(tmp_path):
    from harness.core.config import load_config
    from harness.core.errors import InputError
    os.mkfifo(tmp_path / "fifo.yaml")
    with pytest.raises(InputError, match="not a regular file"):
        load_config(tmp_path / "fifo.yaml", {})
    (tmp_path / "big.yaml").write_text("# " + "x" * (2 << 20) + "\n")
    with pytest.raises(InputError, match="too large"):
        load_config(tmp_path / "big.yaml", {})


def test_timing_that_is_not_a_mapping_with_a_timing_flag_is_one_line(tmp_path):
    assert "'timing' must be a mapping" in _config_error(tmp_path, "timing: [1, 2]\n", "--target-rel-ci", "0.1")


def test_show_value_never_expands_a_shared_structure():
    from harness.core.untrusted import show_value
    value: list = ["lol"] * 9
    for _ in range(30):                                              # 9 ** 30 leaves once expanded
        value = [value] * 9
    assert len(show_value(value)) <= 80


# ------------------------------------------------------------------------------------------------ build cache


# The control with an import of load_inline: a candidate that may build an extension, so a real build worker runs
# (harness.run.build.may_build_extensions) and writes its build.log, as these tests need.
AA_BUILT = AA.replace("import torch\n", "import torch\nfrom torch.utils.cpp_extension import load_inline  # noqa: F401\n", 1)


def _pair(tmp_path: Path, suffix: str = ".py"):
    from harness.core.discover import load_candidate, load_problem
    from harness.core.discover import Pair
    path = tmp_path / f"cand{suffix}"
    path.write_text(AA_BUILT if suffix == ".py" else f"```python\n{AA_BUILT}```\n")
    return Pair(load_problem(PROBLEM, "level1/001_relu_scale"), load_candidate(path, "level1/001_relu_scale/cand"),
                "level1/001_relu_scale")


def _toolchain():
    import torch
    from harness.run.build import Toolchain
    return Toolchain("cpu", torch.__version__, None, None, sys.version.split()[0])


def _build(pair, root: Path):
    from harness.run.build import build_one
    return build_one(pair, root, _toolchain(), 120, 0)


@pytest.fixture(scope="module")
def built_once(tmp_path_factory) -> Path:
    """The candidate built once by a real build worker: its cache root (<tmp>/cache/builds)."""
    tmp = tmp_path_factory.mktemp("built")
    pair, root = _pair(tmp), tmp / "cache" / "builds"
    first = _build(pair, root)
    assert first.status == "built" and not first.cached and first.warning is None
    return root


@pytest.fixture()
def cached(tmp_path, built_once):
    """A candidate built once into tmp/cache/builds (a copy of built_once's entry, which holds no path of its
    candidate's): (pair, cache root, its entry)."""
    pair, root = _pair(tmp_path), tmp_path / "cache" / "builds"
    shutil.copytree(built_once, root, symlinks=True)
    (entry,) = root.iterdir()
    from harness.run.build import build_key
    assert entry.name == build_key(pair.candidate.source, _toolchain())
    return pair, root, entry


def test_a_sound_entry_is_used(cached):
    pair, root, _ = cached
    again = _build(pair, root)
    assert again.cached and again.warning is None


def test_build_json_that_is_a_folder_is_rebuilt_with_a_warning(cached):
    pair, root, entry = cached
    (entry / "build.json").unlink()
    (entry / "build.json").mkdir()
    result = _build(pair, root)
    assert result.status == "built" and not result.cached
    assert "build.json cannot be read: not a regular file (a directory)" in result.warning
    assert (entry / "build.json").is_file() and _build(pair, root).cached            # once: then it is sound


@pytest.mark.parametrize("saved", ['{"status": "built"', '[1]', '{"status": "built", "error": null, '
                                   '"compiler_output": null, "extensions": 5, "seconds": 1, "sandbox": null}',
                                   '{"status": "pwned", "error": null, "compiler_output": null, "extensions": [], '
                                   '"seconds": 1, "sandbox": null}'])
def test_build_json_that_is_not_a_build_result_is_rebuilt(cached, saved):
    pair, root, entry = cached
    (entry / "build.json").write_text(saved)
    result = _build(pair, root)
    assert result.status == "built" and not result.cached and "build.json" in result.warning


def test_a_link_in_an_entry_is_never_written_through(cached, tmp_path):
    pair, root, entry = cached
    outside = tmp_path / "outside.log"
    outside.write_text("keep\n")
    (entry / "build.json").unlink()
    (entry / "build.log").unlink()
    os.symlink(outside, entry / "build.log")
    result = _build(pair, root)
    assert result.status == "built" and "build.log is a link" in result.warning
    assert outside.read_text() == "keep\n" and not (entry / "build.log").is_symlink()


def test_an_entry_that_is_a_link_or_a_file_is_replaced(cached, tmp_path):
    pair, root, entry = cached
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.rmtree(entry)
    os.symlink(elsewhere, entry)
    result = _build(pair, root)
    assert result.status == "built" and "not a folder" in result.warning and list(elsewhere.iterdir()) == []
    shutil.rmtree(entry)
    entry.write_text("x")
    assert _build(pair, root).status == "built"


def test_an_extracted_candidate_that_was_changed_is_rebuilt(tmp_path):
    pair, root = _pair(tmp_path, ".md"), tmp_path / "cache" / "builds"
    first = _build(pair, root)
    assert first.status == "built"
    Path(first.candidate_path).write_text("import os  # not the candidate\n" + AA)
    result = _build(pair, root)
    assert "candidate.py is not the candidate's code" in result.warning
    assert Path(result.candidate_path).read_text() == pair.candidate.source


# ------------------------------------------------------------------------------------------------ run folders


@pytest.fixture()
def run_copy(hostile_run, tmp_path):
    """A copy of the hostile run's folder in a fresh output folder: (output dir, run id)."""
    _, _, _, run_dir = hostile_run
    out = tmp_path / "results"
    shutil.copytree(run_dir, out / "run1", symlinks=True)
    for name in ("leaderboard.md", "index.html"):
        (out / "run1" / name).unlink(missing_ok=True)
    shutil.rmtree(out / "run1" / "logs")
    return out, "run1"


def _one_line_exit_2(done: subprocess.CompletedProcess, *words: str) -> str:
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("error: ") and all(w in line for w in words), done.stderr
    return line


def test_report_on_a_dangling_results_link_creates_nothing(run_copy, tmp_path):
    out, rid = run_copy
    target = tmp_path / "outside" / "target.jsonl"
    (tmp_path / "outside").mkdir()
    (out / rid / "results.jsonl").unlink()
    os.symlink(target, out / rid / "results.jsonl")
    for argv in (["report", rid, "--jsonl"], ["report", rid], ["compare", rid, rid],
                 ["export-kernelbench", rid, "-o", "-"]):
        done = run_cli(*argv, "--output-dir", str(out), timeout=120)
        _one_line_exit_2(done, "results.jsonl", "outside the run folder")
    assert not target.exists() and not (out / rid / "logs").exists()


def test_report_does_not_read_a_results_link_out_of_the_run(run_copy, tmp_path):
    out, rid = run_copy
    target = tmp_path / "elsewhere.jsonl"
    shutil.move(out / rid / "results.jsonl", target)
    os.symlink(target, out / rid / "results.jsonl")
    _one_line_exit_2(run_cli("report", rid, "--output-dir", str(out), timeout=120), "not followed")


def test_report_on_a_run_without_results_writes_no_results_file(run_copy):
    out, rid = run_copy
    (out / rid / "results.jsonl").unlink()
    done = run_cli("report", rid, "--jsonl", "--output-dir", str(out), timeout=120)
    assert done.returncode == 0 and done.stdout == "", done.stderr
    assert not (out / rid / "results.jsonl").exists() and not (out / rid / "logs").exists()


def test_report_replaces_a_planted_leaderboard_link(run_copy, tmp_path):
    out, rid = run_copy
    victim = tmp_path / "victim.txt"
    victim.write_text("keep\n")
    os.symlink(victim, out / rid / "leaderboard.md")
    os.symlink(victim, out / rid / "index.html")
    done = run_cli("report", rid, "--output-dir", str(out), timeout=120)
    assert done.returncode == 0, done.stderr
    assert victim.read_text() == "keep\n" and (out / rid / "leaderboard.md").is_file()
    assert not (out / rid / "leaderboard.md").is_symlink()


def test_deeply_nested_json_in_a_run_is_one_line_or_a_skipped_line(run_copy):
    out, rid = run_copy
    with open(out / rid / "results.jsonl", "a") as f:
        f.write("[" * 100_000 + "]" * 100_000 + "\n")
    done = run_cli("report", rid, "--jsonl", "--output-dir", str(out), timeout=120)
    assert done.returncode == 0 and "not a JSON line; skipped" in done.stderr, done.stderr
    (out / rid / "run.json").write_text("[" * 100_000 + "]" * 100_000)
    _one_line_exit_2(run_cli("report", rid, "--output-dir", str(out), timeout=120), "run.json")


def test_export_replaces_a_planted_output_link(run_copy, tmp_path):
    out, rid = run_copy
    victim = tmp_path / "victim.json"
    victim.write_text("keep\n")
    os.symlink(victim, out / rid / "eval_results.json")
    run_cli("export-kernelbench", rid, "--output-dir", str(out), timeout=120)
    assert victim.read_text() == "keep\n"


def test_report_html_leaves_out_a_linked_run_folder(run_copy, tmp_path):
    out, rid = run_copy
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(out / rid, elsewhere, symlinks=True)
    os.symlink(elsewhere, out / "linked")
    done = run_cli("report", "--html", "--output-dir", str(out), timeout=120)
    assert done.returncode == 0 and "linked: a link to another folder" in done.stderr, done.stderr
    assert not (elsewhere / "index.html").exists()


def test_a_record_s_control_characters_never_reach_the_terminal(hostile_run):
    from rich.console import Console
    from harness.results.records import as_records
    from harness.results.report import table
    record = dict(hostile_run[2]["twin"], error="boom \x1b]0;PWNED\x07 \x1b[2J")
    buffer = io.StringIO()
    Console(file=buffer, force_terminal=True, width=200).print(table(as_records([record]), "t"))
    assert "\x1b]0;" not in buffer.getvalue() and "\x1b[2J" not in buffer.getvalue()


def test_a_key_file_that_is_a_fifo_or_a_device_is_one_line(tmp_path):
    from harness.results.signing import KeyFileError, RunKey, lookup
    os.mkfifo(tmp_path / "k.key")
    for path in (tmp_path / "k.key", Path("/dev/zero"), tmp_path):
        with pytest.raises(KeyFileError, match="not a regular file"):
            RunKey.load(path)
    meta = {"signing": {"algorithm": "hmac-sha256", "key_file": str(tmp_path / "k.key")}}
    assert lookup(meta).key is None and "FIFO" in lookup(meta).unverified_because


def test_resume_replaces_a_logs_link_instead_of_writing_through_it(hostile_run, tmp_path):
    from harness.results.store import RunStore
    _, _, _, run_dir = hostile_run
    out = tmp_path / "results"
    shutil.copytree(run_dir, out / "run1", symlinks=True)
    shutil.rmtree(out / "run1" / "logs")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, out / "run1" / "logs")
    said: list[str] = []
    store = RunStore.resume(out, "run1", said.append)
    assert (store.dir / "logs").is_dir() and not (store.dir / "logs").is_symlink()
    assert any("logs: not a folder" in line for line in said)


def test_import_never_writes_through_a_dangling_link(tmp_path):
    from harness.commands.kbimport import ImportReport, _place
    src, outside = tmp_path / "src.py", tmp_path / "outside.py"
    src.write_text("x = 1\n")
    os.symlink(outside, tmp_path / "dest.py")
    report = ImportReport(layout="run")
    _place(src, tmp_path / "dest.py", report, dry_run=False, tree=tmp_path)
    assert not outside.exists() and report.skipped and not report.copied


def _kb_checkout(root: Path, outside: Path) -> Path:
    """A KernelBench checkout whose level1 holds a real problem, a link out of the checkout and a link within it."""
    level1 = root / "KernelBench" / "level1"
    level1.mkdir(parents=True)
    shutil.copy(PROBLEM, level1 / "1_ReLU.py")
    os.symlink(outside, level1 / "2_Secret.py")
    os.symlink("1_ReLU.py", level1 / "3_Same.py")
    return root


@pytest.mark.parametrize("dry_run", [False, True])
def test_import_never_copies_a_file_from_outside_the_checkout(tmp_path, dry_run):
    secret = tmp_path / "secret.py"
    secret.write_text("TOKEN = 'do not copy'\n")
    tree = _kb_checkout(tmp_path / "kb", secret)
    done = run_cli("import-kernelbench", str(tree), "--problems-dir", str(tmp_path / "problems"),
                   "--solutions-dir", str(tmp_path / "solutions"), *(["--dry-run"] if dry_run else []), timeout=120)
    assert done.returncode == 0, done.stderr
    skipped = [line for line in done.stdout.splitlines() if "2_Secret.py" in line]
    assert len(skipped) == 1 and "outside" in skipped[0] and "not copied" in skipped[0], done.stdout
    copied = sorted(p.name for p in (tmp_path / "problems").rglob("*.py"))
    assert copied == ([] if dry_run else ["001_ReLU.py", "003_Same.py"])
    assert "do not copy" not in "".join(p.read_text() for p in (tmp_path / "problems").rglob("*.py"))


def test_import_never_copies_a_kernel_linked_from_outside_the_run_folder(tmp_path):
    secret = tmp_path / "secret.py"
    secret.write_text("TOKEN = 'do not copy'\n")
    problems = tmp_path / "problems"
    run_cli("import-kernelbench", str(_kb_checkout(tmp_path / "kb", secret)), "--problems-dir", str(problems),
            timeout=120)
    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    (run / "level_1_problem_1_sample_0_kernel.py").write_text(AA)
    os.symlink(secret, run / "level_1_problem_1_sample_1_kernel.py")
    os.mkfifo(run / "level_1_problem_1_sample_2_kernel.py")
    done = run_cli("import-kernelbench", str(run), "--problems-dir", str(problems), "--solutions-dir",
                   str(tmp_path / "solutions"), timeout=120)
    assert done.returncode == 0, done.stderr
    assert [p.name for p in (tmp_path / "solutions").rglob("*.py")] == ["r1_sample_0.py"]
    assert any("sample_1_kernel.py" in line and "outside" in line for line in done.stdout.splitlines())


# ------------------------------------------------------------------------------------------------ numbers


HUGE = int("9" * 400)                       # json reads it back as an int that no float can hold


def _resigned(run_dir: Path, change) -> None:
    """Rewrite results.jsonl with `change(record)` applied to every line, each signed again with the run's key (a
    hostile writer who has the key, or a run whose key is gone: the reader meets the values themselves)."""
    from harness.results.signing import FIELD, RunKey, sign
    key = RunKey.load(json.loads((run_dir / "run.json").read_text())["signing"]["key_file"])
    lines = []
    for line in (run_dir / "results.jsonl").read_text().splitlines():
        record = json.loads(line)
        change(record)
        body = {k: v for k, v in record.items() if k != FIELD}
        lines.append(json.dumps({**body, FIELD: sign(body, key)}) + "\n")     # Infinity as JSON's reader takes it
    (run_dir / "results.jsonl").write_text("".join(lines))


def _hostile_numbers(record: dict) -> None:
    record["speedup"] = 1.7e308 if "bom" in record["solution"] else HUGE      # a float near the top overflows too
    record["speedup_ci"] = [-HUGE, HUGE]
    record["speedup_vs_compile"] = float("inf")
    timing = record.get("timing") or {}
    for side in ("reference", "candidate"):
        if isinstance(timing.get(side), dict):
            timing[side]["median_ms"] = HUGE
    if isinstance(record.get("correctness"), dict):
        record["correctness"]["max_abs_err"] = -HUGE


@pytest.mark.parametrize("argv", [["report", "run1"], ["report", "run1", "--csv"], ["report", "run1", "--json"],
                                  ["report", "run1", "--kernelbench"], ["report", "--html"],
                                  ["compare", "run1", "run1"], ["export-kernelbench", "run1", "-o", "-"],
                                  ["--resume", "run1"]])
def test_a_number_past_a_float_s_range_in_a_record_is_read_as_no_number(run_copy, argv):
    out, rid = run_copy
    _resigned(out / rid, _hostile_numbers)
    done = run_cli(*argv, "--output-dir", str(out), timeout=120)
    assert "Traceback" not in done.stderr and "harness fault" not in done.stderr, done.stderr
    assert done.returncode in (0, 2), done.stderr                   # export: the run holds no KernelBench import
    assert "9999999999" not in done.stdout


@pytest.mark.parametrize("argv", [["report", "run1"], ["report", "--html"], ["compare", "run1", "run1"]])
def test_a_number_past_a_float_s_range_in_run_json_is_read_as_no_number(run_copy, argv):
    out, rid = run_copy
    meta = json.loads((out / rid / "run.json").read_text())
    meta["config"]["timing"]["target_rel_ci"] = HUGE
    meta["wall_seconds"] = HUGE
    (out / rid / "run.json").write_text(json.dumps(meta))
    done = run_cli(*argv, "--output-dir", str(out), timeout=120)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr


def test_numbers_module_reads_a_huge_integer_as_infinite():
    from harness.core.numbers import number
    assert number(HUGE) is None and number(-HUGE, finite=False) == float("-inf")
    assert number(1.7e308) is None and number(1.7e308, finite=False) == 1.7e308 and number(10 ** 30) == 1e30


def test_ci_baseline_with_a_huge_number_is_read_without_a_fault(run_copy):
    from harness.commands import ci
    out, rid = run_copy
    _resigned(out / rid, _hostile_numbers)
    _, records, _ = ci.load_baseline(str(out / rid))
    assert records and all(r.speedup is None for r in records)


@pytest.mark.parametrize("flags, words", [
    (["--timeout", "inf"], "--timeout: must be a finite number, got inf"),
    (["--timeout", "nan"], "--timeout: must be a finite number, got nan"),
    (["--max-pair-seconds", "1e300"], "--max-pair-seconds: must be at most 604800 seconds"),
    (["--trials", "9" * 400], "--trials: must be at most 100000"),
    (["--cpu-threads", "100000000"], "--cpu-threads: must be at most"),
    (["--gpu-memory-gb", "inf"], "--gpu-memory-gb: must be a positive number of GiB"),
])
def test_an_unbounded_number_in_a_flag_is_exit_2_naming_it(tmp_path, flags, words):
    from harness.core.config import load_config
    from harness.core.errors import UsageError
    from harness.cli import _overrides, _run_parser, build_parser, flag_names
    args = build_parser().parse_args(flags)
    with pytest.raises(UsageError) as caught:
        load_config(None, _overrides(args), flag_names(_run_parser(), _overrides))
    assert str(caught.value).startswith(words.split(":")[0]) and words in str(caught.value)


@pytest.mark.parametrize("text, words", [
    ("timeout: .inf\n", "'timeout' must be a finite number, got inf"),
    ("build_timeout: -.inf\n", "'build_timeout' must be a finite number"),
    ("timing:\n  max_pair_seconds: .nan\n", "'timing.max_pair_seconds' must be a finite number"),
    ("cpu_timing:\n  max_pair_seconds: .inf\n", "'cpu_timing.max_pair_seconds' must be a finite number"),
    (f"reference_timeout: {'9' * 400}\n", "'reference_timeout' must be a finite number"),
    ("timing:\n  max_rounds: 100000000000\n", "'timing.max_rounds' must be at most 100000"),
    ("worker_memory_gb: .inf\n", "'worker_memory_gb' must be a number of GB"),
    ("cpu_threads: 100000000\n", "'cpu_threads' must be at most"),
])
def test_an_unbounded_number_in_a_config_is_one_line_naming_the_key(tmp_path, text, words):
    assert words in _config_error(tmp_path, text)


@pytest.mark.parametrize("argv, words", [
    (["lint", "--timeout", "inf"], "error: --timeout: must be a finite number, got inf"),
    (["lint", "--per-gpu", "100000000"], "error: --per-gpu 100000000: must be between 1 and"),
    (["calibrate", "--timeout", "inf"], "error: --timeout: must be a finite number, got inf"),
    (["calibrate", "--cpu-threads", "100000000"], "error: --cpu-threads: must be at most"),
    (["ci", "--base", "HEAD", "--timeout", "inf"], "error: --timeout: must be a finite number, got inf"),
    (["profile", "--warmup", "99999999999"], "error: --warmup 99999999999: must be between 0 and 100000"),
    (["profile", "--timeout", "inf"], "error: --timeout: must be a finite number, got inf"),
])
def test_every_command_that_reads_config_numbers_bounds_them(tmp_path, argv, words):
    done = run_cli(*argv, "--output-dir", str(tmp_path / "out"), timeout=120)
    _one_line_exit_2(done, words)
    assert not (tmp_path / "out").exists()


def test_a_resumed_run_with_an_infinite_recorded_timeout_is_one_line(run_copy):
    out, rid = run_copy
    meta = json.loads((out / rid / "run.json").read_text())
    meta["config"]["timeout"] = "inf"
    (out / rid / "run.json").write_text(json.dumps(meta))
    meta["config"]["timeout"] = float("inf")
    (out / rid / "run.json").write_text(json.dumps(meta))           # json writes it as Infinity, which it reads
    _one_line_exit_2(run_cli("--resume", rid, "--output-dir", str(out), timeout=120), "'timeout'", "finite")


# ------------------------------------------------------------------------------------------------ ci


@pytest.fixture(scope="module")
def git_tree(tmp_path_factory) -> Path:
    """A git repository holding a copy of the hostile tree's problem with one candidate, committed."""
    root = tmp_path_factory.mktemp("ci") / "repo"
    (root / "problems" / "level1").mkdir(parents=True)
    (root / "solutions" / "level1" / "001_relu_scale").mkdir(parents=True)
    shutil.copy(PROBLEM, root / "problems" / "level1" / "001_relu_scale.py")
    (root / "solutions" / "level1" / "001_relu_scale" / "aa.py").write_text(AA)
    for args in (["init", "-q"], ["add", "."], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"]):
        subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)
    return root


def _ci(repo: Path, out: Path, *flags: str) -> subprocess.CompletedProcess:
    return run_cli("ci", "--problems-dir", str(repo / "problems"), "--solutions-dir", str(repo / "solutions"),
                   "--output-dir", str(out), *flags, timeout=120)


@pytest.mark.parametrize("base, words", [
    ("--output={victim}", "--base --output="),
    ("-p", "--base -p: not a git ref"),
    ("nosuchref", "--base nosuchref: no such branch, tag or commit"),
    ("HEAD~5", "--base HEAD~5: no such branch, tag or commit"),
])
def test_a_base_that_is_an_option_or_no_ref_is_one_line_and_writes_nothing(git_tree, tmp_path, base, words):
    victim = tmp_path / "victim.txt"
    done = _ci(git_tree, tmp_path / "out", f"--base={base.format(victim=victim)}")
    _one_line_exit_2(done, words.format(victim=victim))
    assert not victim.exists() and not (tmp_path / "out").exists()
    assert "usage: git" not in done.stderr


@pytest.mark.parametrize("where", ["flag", "env"])
def test_a_summary_that_is_a_folder_is_refused_before_anything_runs(git_tree, tmp_path, monkeypatch, where):
    folder = tmp_path / "summary"
    folder.mkdir()
    if where == "env":
        monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(folder))
    done = _ci(git_tree, tmp_path / "out", "--base", "HEAD", *(["--summary", str(folder)] if where == "flag" else []))
    name = "--summary" if where == "flag" else "$GITHUB_STEP_SUMMARY"
    _one_line_exit_2(done, f"{name} {folder}: not a regular file (a directory)")
    assert not (tmp_path / "out").exists()


def test_a_summary_in_a_missing_folder_is_refused(git_tree, tmp_path):
    done = _ci(git_tree, tmp_path / "out", "--base", "HEAD", "--summary", str(tmp_path / "no" / "s.md"))
    _one_line_exit_2(done, "--summary", "no folder")


# ------------------------------------------------------------------------------------------------ full disk, scratch


def _small_files(limit: int = 4096):
    """A child's file size limit (RLIMIT_FSIZE): every write past `limit` bytes fails as on a full disk."""
    import resource
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def _run_limited(*args: str, limit: int = 4096) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "run_eval.py"), *args], cwd=REPO, capture_output=True,
                          text=True, timeout=300, preexec_fn=_small_files(limit))


def _our_scratch() -> set[str]:
    from harness.run.executors import scratch_root
    base = scratch_root("x").parent
    return {p.name for p in base.iterdir() if p.name.startswith("kbharness-")}


def test_a_full_disk_stops_a_run_as_a_failed_write_blaming_no_pair(tmp_path):
    from harness.run.executors import scratch_root
    tree = _tree(tmp_path / "tree")
    config = write_config(tmp_path, tree)
    for limit, where in ((4096, "run.json"), (65536, "kbharness-")):     # at the run's start; at the probe
        done = _run_limited("--config", str(config), limit=limit)
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        line = done.stderr.strip().splitlines()[-1]
        assert line.startswith("error: cannot write ") and line.endswith("File too large"), done.stderr
        assert where in line, line
    for results in (tmp_path / "results").rglob("results.jsonl"):
        assert results.read_text() == ""                            # no problem or candidate blamed
    runs = run_dirs(tmp_path)                     # these runs' own scratch (a test beside it may be running one)
    assert len(runs) == 2 and not any(scratch_root(run.name).exists() for run in runs)


MIB = 1 << 20
BIG = PROBLEM.read_text().replace("rows, cols = 256, 1024", "rows, cols = 1024, 1024")        # 4 MiB in, 4 out
WIDE = BIG.replace("return torch.relu(x) * self.scale", "return torch.relu(x).repeat(1024, 1) * self.scale").replace(
    "rows, cols = 1024, 1024", "rows, cols = 1, 1024")                                  # 4 KiB in, 4 MiB out
WEIGHTS = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)

    def forward(self, x):
        return self.lin(x)


def get_inputs():
    return [torch.randn(4, 1024)]


def get_init_inputs():
    return [1024]
"""                                                                              # 4 MiB of weights to save
LIAR = AA.replace("return torch.relu(x) * self.scale",
                  "raise OSError(28, 'No space left on device (SIGBUS, File too large)')")
CHATTY = AA.replace("self.scale = scale", "self.scale = scale\n        print('x' * 3 * 2 ** 20)")


def _write_fault_tree(root: Path) -> Path:
    """Three problems whose pairs need files past 2 MiB, each written by someone else: the reference worker's
    arena for 4 MiB of inputs, the parent's copy of 4 MiB of outputs, the reference worker's torch.save of 4 MiB
    of weights; a problem that fits, with a control, a candidate that raises a write error of its own, and one
    whose 3 MiB of output overrun its log."""
    same = {text: {"aa": text.replace("class Model(", "class ModelNew(")} for text in (WIDE, WEIGHTS)}
    for name, problem, candidates in (("001_big", BIG, {"aa": AA}), ("002_wide", WIDE, same[WIDE]),
                                      ("003_weights", WEIGHTS, same[WEIGHTS]),
                                      ("004_fits", PROBLEM.read_text(), {"aa": AA, "liar": LIAR, "chatty": CHATTY})):
        (root / "problems" / "level1").mkdir(parents=True, exist_ok=True)
        (root / "problems" / "level1" / f"{name}.py").write_text(problem)
        folder = root / "solutions" / "level1" / name
        folder.mkdir(parents=True)
        for candidate, text in candidates.items():
            (folder / f"{candidate}.py").write_text(text)
    return root


def test_a_failed_write_inside_a_pair_is_the_harness_s_and_the_run_goes_on(tmp_path):
    """Past the start's probe, a write that fails while a pair runs (a file size limit here; a full /dev/shm the
    same) is `skipped` with `harness_write`, naming the folder and the system's reason, whoever wrote: the
    reference worker (its arena, its torch.save at the problem's setup) or the parent (a copy of the outputs).
    Before, these read `crashed` and the problem's `load_error`. A candidate that only says a write failed is not
    believed, and a worker log that cannot be written is one warning: the run goes on."""
    tree = _write_fault_tree(tmp_path / "tree")
    config = write_config(tmp_path, tree)
    done = _run_limited("--config", str(config), limit=2 * MIB)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    (run_dir,) = run_dirs(tmp_path)
    records = {r["solution"]: r for r in map(json.loads, (run_dir / "results.jsonl").read_text().splitlines())}
    for name in ("001_big", "002_wide", "003_weights"):
        record = records[f"level1/{name}/aa"]
        assert record["status"] == "skipped" and record["flags"] == ["harness_write"], (name, record["error"])
        assert record["error"].startswith("harness_write: cannot write "), record["error"]
        assert "File too large" in record["error"] and record["flag_details"]["harness_write"] == record["error"]
    assert records["level1/004_fits/aa"]["status"] == "ok", records["level1/004_fits/aa"]["error"]
    liar = records["level1/004_fits/liar"]
    assert liar["status"] == "runtime_error" and "harness_write" not in liar["flags"], liar["error"]
    assert records["level1/004_fits/chatty"]["status"] == "ok", records["level1/004_fits/chatty"]["error"]
    said = [line for line in done.stderr.splitlines() if line.startswith("warning: cannot write ")]
    assert len(set(said)) == len(said) and any("004_fits__chatty.log: File too large" in line for line in said)
    assert all(line.endswith("(the run goes on)") for line in said), done.stderr    # its build's log, if built


def test_a_disk_the_candidate_filled_is_not_the_harness_s(tmp_path):
    """The parent's copy of a candidate's output fails for want of space (ENOSPC). Where the candidate's own files in
    the pair's folder (its private temporary folder is there) hold at least what the copy needed, the candidate
    filled the disk: `runtime_error`, not `skipped` with `harness_write`, which `ci` lets pass (red team,
    2026-11-29). The parent's own earlier files there are not the candidate's, and a sparse file counts only the
    blocks it takes."""
    import errno
    from harness.results.records import Status, finish, new_record
    from harness.run import scratch
    from harness.run.schedule import write_fault

    def failed(folder: Path, candidate_bytes: int, sparse: bool = False) -> dict:
        pair = folder / "cand"
        (pair / ".kb-tmp-x").mkdir(parents=True)
        junk = pair / ".kb-tmp-x" / "fill"
        with open(junk, "wb") as f:
            if sparse:
                f.truncate(1 << 40)
            else:
                f.write(b"\1" * candidate_bytes)
        mine = pair / "trial0.kbt"
        mine.write_bytes(b"\2" * (1 << 20))              # the parent's own copy of trial 0, written before
        scratch.wrote(mine)
        scratch.failed_write(pair / "trial1.kbt", OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), 1 << 19)
        record = finish(new_record("level1/p", "level1/p/c", "cpu", "r"), Status.CRASHED, "harness fault: ...")
        return write_fault(record, folder).to_json()

    filled = failed(tmp_path / "a", 1 << 20)
    assert filled["status"] == "runtime_error" and "candidate filled" in filled["error"], filled["error"]
    assert "harness_write" not in filled["flags"]
    for name, kwargs in (("b", {"candidate_bytes": 1 << 10}), ("c", {"candidate_bytes": 0, "sparse": True})):
        record = failed(tmp_path / name, **kwargs)
        assert record["status"] == "skipped" and record["flags"] == ["harness_write"], (name, record["error"])


def test_an_append_that_fails_leaves_no_torn_line(tmp_path):
    """results.jsonl filled up mid-line: the append is undone, so a reader (or a resumed run's next append) meets
    only whole lines, and the failure is one WriteError naming the file."""
    script = f"""
import json, sys
sys.path.insert(0, {str(REPO)!r})
from harness.core.untrusted import WriteError
from harness.results.store import RunStore
store = RunStore.create(__import__("pathlib").Path({str(tmp_path)!r}), {{"config": {{}}}})
record = {{"schema_version": 2, "run_id": store.run_id, "problem": "level1/x", "solution": "level1/x/c",
          "status": "ok", "correct": True, "flags": [], "error": "e" * 3000, "speedup": 1.0, "device": "cpu"}}
try:
    for i in range(100):
        store.append({{**record, "solution": f"level1/x/c{{i}}"}})
except WriteError as exc:
    print(exc)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          preexec_fn=_small_files(10000))
    assert done.stdout.startswith("cannot write ") and "results.jsonl: File too large" in done.stdout, done
    (results,) = tmp_path.rglob("results.jsonl")
    data = results.read_bytes()
    assert data and data.endswith(b"\n") and all(json.loads(line) for line in data.splitlines())


@pytest.mark.parametrize("argv", [["report", "--html"], ["report", "run1"]])
def test_a_page_that_cannot_be_written_is_one_line_naming_it(run_copy, argv):
    out, _ = run_copy
    done = _run_limited(*argv, "--output-dir", str(out))
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith(f"error: cannot write {out}") and "index.html: File too large" in line, done.stderr


def test_import_into_a_full_disk_is_a_failed_write(tmp_path):
    tree = _kb_checkout(tmp_path / "kb", tmp_path / "none.py")
    done = _run_limited("import-kernelbench", str(tree), "--problems-dir", str(tmp_path / "p"), limit=100)
    assert done.returncode == 1 and "error: cannot write" in done.stderr and "File too large" in done.stderr


def _stale_scratch(owner: str, base: Path | None = None) -> Path:
    from harness.run.executors import scratch_root
    folder = scratch_root(f"test-{os.urandom(4).hex()}")
    folder = folder if base is None else base / folder.name
    folder.mkdir()
    (folder / "reference_state.pt").write_bytes(b"x" * 1000)
    if owner:
        (folder / "owner").write_text(owner)
    return folder


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_scratch_of_a_dead_run_is_swept_and_said_and_a_live_one_kept(tmp_path):
    from harness.run import scratch
    dead = _stale_scratch(f"{_dead_pid()} 1\n", tmp_path)
    reused = _stale_scratch(f"{os.getppid()} 1\n", tmp_path)  # a live pid, but not the process that made it
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        live = _stale_scratch(f"{sleeper.pid} {scratch._started(sleeper.pid)}\n", tmp_path)
        unowned = _stale_scratch("", tmp_path)
        said: list[str] = []
        assert sorted(scratch.sweep(tmp_path, said.append)) == sorted([dead, reused])
        assert not dead.exists() and not reused.exists() and live.exists() and unowned.exists()
        assert len(said) == 2 and all("is gone" in line for line in said) and str(dead) in " ".join(said)
    finally:
        sleeper.kill()


def _owned_by(folder: Path, pid: int) -> bool:
    try:
        return (folder / "owner").read_text().split()[0] == str(pid)
    except (OSError, IndexError):
        return False


def _pair_workers_of(pid: int) -> list[int]:
    """The reference and candidate workers among a run's children (workers are its children, forked or not)."""
    found = []
    for child in proc_children(pid):
        argv = proc_read(f"/proc/{child}/cmdline").split(b"\0")
        if b"harness.worker" in argv and (b"reference" in argv or b"candidate" in argv):
            found.append(child)
    return found


def test_sigterm_removes_the_run_s_scratch_and_a_later_run_removes_a_killed_one(tmp_path):
    import signal
    import time
    from harness.run.executors import scratch_root
    stale = _stale_scratch(f"{_dead_pid()} 1\n")
    tree = _tree(tmp_path / "tree")
    config = write_config(tmp_path, tree)
    before = _our_scratch()
    proc = subprocess.Popen([sys.executable, str(REPO / "run_eval.py"), "--config", str(config)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not _pair_workers_of(proc.pid):
        time.sleep(0.05)                                        # into the pairs: their workers write the scratch
    assert any(_owned_by(scratch_root("x").parent / name, proc.pid) for name in _our_scratch() - before)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 143 and "Traceback" not in stderr, stderr
    assert "interrupted: finished pairs are in" in stderr
    assert not stale.exists()               # this run or another one on the machine removed it (and said so)
    (run_dir,) = run_dirs(tmp_path)
    assert not scratch_root(run_dir.name).exists()
