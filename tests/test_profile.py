"""`run_eval.py profile` (issue 32, part 3): ncu's CSV read back, the one-line messages where profiling cannot
happen, ncu's command line around the worker's, a worker started under a launcher (one that keeps or one that
closes the inherited pipes) answering the profiled call, the sandbox's ncu rules, the record's `profile` part; on
a GPU (marked `gpu`), the command itself on one pair."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import FIXTURES, REPO, cuda_available, run_cli, write_config
from harness import cli
from harness.commands import profile as command
from harness.core.config import load_config
from harness.results.parts import KernelRow, Profile, ProfileSide
from harness.results.records import Record, RecordDraft, Status, finish, new_record
from harness.run import ncu
from harness.run.workerproc import Worker, WorkerExit, worker_argv, worker_env
from harness.shared import messages as m
from harness.worker import sandbox

RAW = FIXTURES / "ncu" / "raw_page.csv"
CPU_PROBLEM = REPO / "examples" / "cpu" / "problems" / "level1" / "001_relu_scale.py"
CPU_CANDIDATE = REPO / "examples" / "cpu" / "solutions" / "level1" / "001_relu_scale" / "aa_same_ops.py"


# ---------------------------------------------------------------- reading ncu's CSV

def test_the_raw_page_reads_as_one_row_per_kernel():
    rows = ncu.parse_raw_csv(RAW.read_text())
    assert len(rows) == 2
    gelu, reduce = rows
    assert gelu.name.startswith("void at::native::vectorized_elementwise_kernel<(int)4, at::native::<unnamed>::Gelu")
    assert gelu.name.endswith("(int, T2, T3)")             # the commas inside the quoted name stayed in it
    assert gelu.duration_us == pytest.approx(1034.21)      # usecond, thousands separator dropped
    assert (gelu.dram_pct, gelu.sm_pct, gelu.occupancy_pct, gelu.registers) == (91.84, 22.47, 83.05, 16)
    assert reduce.dram_pct is None                         # n/a
    assert reduce.duration_us == pytest.approx(18.5) and reduce.registers == 32 and reduce.occupancy_pct == 12.5


def test_units_and_lines_before_the_header():
    """Durations in nanoseconds or milliseconds become microseconds; ==PROF== lines before the header and a blank
    line at the end are skipped; columns are found by name, in whatever order."""
    text = RAW.read_text().replace('"usecond"', '"nsecond"')
    rows = ncu.parse_raw_csv("==PROF== Connected to process 1\n==WARNING== something\n" + text + "\n")
    assert rows[0].duration_us == pytest.approx(1.03421) and rows[1].duration_us == pytest.approx(0.0185)
    assert ncu.parse_raw_csv(text.replace('"nsecond"', '"msecond"'))[1].duration_us == pytest.approx(18500.0)
    header = ['"ID"', '"Kernel Name"', '"gpu__time_duration.sum"', '"launch__registers_per_thread"']
    rows = ncu.parse_raw_csv("\n".join([",".join(header), '"","","usecond","register/thread"', '"0","k","2.5","40"']))
    assert rows == [KernelRow("k", 2.5, None, None, None, 40)]


def test_csv_without_a_header_is_a_one_line_error():
    with pytest.raises(ValueError, match="no header row"):
        ncu.parse_raw_csv("==ERROR== the report could not be opened\n")


def test_read_report_runs_ncu_import_and_says_why_it_failed(tmp_path):
    calls = []

    def fake(argv, **kwargs):
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 0, RAW.read_text(), "")

    report = tmp_path / "x.candidate.ncu-rep"
    assert len(ncu.read_report("/opt/ncu", report, run=fake)) == 2
    assert calls == [["/opt/ncu", "--import", str(report), "--csv", "--page", "raw", "--metrics",
                      ",".join(ncu.METRICS.values())]]

    def failing(argv, **kwargs):
        return subprocess.CompletedProcess(argv, 1, "", "==ERROR== Failed to open report file\n")

    with pytest.raises(ValueError, match="ncu: Failed to open report file"):
        ncu.read_report("/opt/ncu", report, run=failing)

    def no_counters(argv, **kwargs):
        return subprocess.CompletedProcess(argv, 1, "==ERROR== ERR_NVGPUCTRPERM - The user does not have "
                                                    "permission to access NVIDIA GPU Performance Counters", "")

    with pytest.raises(ncu.ProfileUnavailable, match="ERR_NVGPUCTRPERM"):
        ncu.read_report("/opt/ncu", report, run=no_counters)


def test_diagnose_ncus_output():
    assert ncu.diagnose("==PROF== Connected\n==ERROR== ERR_NVGPUCTRPERM - no permission\n") == ncu.NO_COUNTERS
    assert ncu.diagnose("==ERROR== first\nx\n==ERROR== Failed to connect to target\n") == \
        "ncu: Failed to connect to target"
    assert ncu.diagnose("==WARNING== No kernels were profiled.\n") == "ncu: no kernels were profiled in the call"
    assert ncu.diagnose("==PROF== Disconnected from process 7\n") is None


# ---------------------------------------------------------------- where profiling cannot happen: one line each

def _fake_ncu(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "ncu"
    path.write_text("#!/bin/sh\necho 'NVIDIA (R) Nsight Compute Command Line Profiler'\n"
                    "echo 'Version 2099.1.0.0 (build 1) (public-release)'\n")
    path.chmod(0o755)
    return path


def _run(*args: str, path: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": path, "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, str(REPO / "run_eval.py"), *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env=env)


def test_without_ncu_on_path_one_line_and_exit_2(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    done = _run("profile", "level1/019_gelu", path=str(empty))
    assert done.returncode == 2
    assert done.stderr.strip() == f"error: {ncu.MISSING}"
    with pytest.raises(ncu.ProfileUnavailable, match="not found on PATH"):
        ncu.locate(str(empty))


def test_ncu_found_with_its_version(tmp_path):
    fake = _fake_ncu(tmp_path / "bin")
    found = ncu.locate(str(fake.parent))
    assert found == ncu.Ncu(str(fake), "Version 2099.1.0.0 (build 1) (public-release)")


def test_without_a_gpu_one_line_and_exit_2(tmp_path):
    fake = _fake_ncu(tmp_path / "bin")
    cfg = load_config(None, {})
    with pytest.raises(ncu.ProfileUnavailable, match="^profile needs a CUDA GPU$"):
        command.check_machine(cfg, [], False, path_env=str(fake.parent))
    with pytest.raises(ncu.ProfileUnavailable, match="^profile needs a CUDA GPU$"):
        command.check_machine(load_config(None, {"device": "cpu"}), [{"index": 0, "name": "H100"}], True,
                              path_env=str(fake.parent))
    if cuda_available():
        return                                          # the command's own check is the GPU test's business
    done = _run("profile", "level1/019_gelu", path=f"{fake.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    assert done.returncode == 2 and done.stderr.strip() == "error: profile needs a CUDA GPU", done.stderr


def test_counters_not_permitted_ends_the_command_in_one_line(monkeypatch, capsys):
    def refuse(cfg, gpu_list, has_cuda, path_env=None):
        raise ncu.ProfileUnavailable(ncu.NO_COUNTERS)

    monkeypatch.setattr(command, "check_machine", refuse)
    assert cli.main(["profile", "level1/019_gelu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {ncu.NO_COUNTERS}"]


def test_a_side_without_a_report_says_why(tmp_path):
    from harness.run.profile import read_side
    run = type("Run", (), {"ncu": ncu.Ncu("/opt/ncu", None)})()
    side = read_side(run, tmp_path / "none.ncu-rep", "==PROF== x\n==ERROR== Failed to connect to target\n")
    assert side == ProfileSide(None, [], "ncu: Failed to connect to target")
    with pytest.raises(ncu.ProfileUnavailable):
        read_side(run, tmp_path / "none.ncu-rep", "==ERROR== ERR_NVGPUCTRPERM\n")


# ---------------------------------------------------------------- the command line

def test_selection_is_a_problem_or_candidate_id_or_glob():
    assert command.split_selection(None) == ("*", None)
    assert command.split_selection("level1/019_gelu") == ("level1/019_gelu", None)
    assert command.split_selection("019_gelu") == ("019_gelu", None)
    assert command.split_selection("level1/*/cuda_*") == ("level1/*", "cuda_*")
    assert command.split_selection("level1/019_gelu/cuda_gelu_float4/") == ("level1/019_gelu", "cuda_gelu_float4")


def test_selection_picks_the_pairs_a_run_would(tmp_path):
    args = cli.build_parser("profile").parse_args(["profile", "level1/001_*", "--problems-dir",
                                                   "examples/cpu/problems", "--solutions-dir",
                                                   "examples/cpu/solutions", "--candidate", "cpp_*"])
    pairs = command.select(command.load(args))
    assert [p.candidate.id for p in pairs] == ["level1/001_relu_scale/cpp_loop"]
    args = cli.build_parser("profile").parse_args(["profile", "level1/00[12]_*/aa_same_ops", "--problems-dir",
                                                   "examples/cpu/problems", "--solutions-dir",
                                                   "examples/cpu/solutions"])
    assert [p.candidate.id for p in command.select(command.load(args))] == [
        "level1/001_relu_scale/aa_same_ops", "level1/002_row_softmax/aa_same_ops"]


def test_profile_is_in_help(capsys):
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert any(line.split()[:1] == ["profile"] for line in out.splitlines())
    assert cli.main(["profile", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: run_eval.py profile") and "SELECTION" in out and "--warmup" in out


def test_ncu_wraps_the_worker_command_line(tmp_path):
    report = tmp_path / "level1__x__c.candidate.ncu-rep"
    argv = [*ncu.launch_argv("/usr/local/cuda/bin/ncu", report), *worker_argv("candidate", 5, 8)]
    assert argv[0] == "/usr/local/cuda/bin/ncu"
    assert argv[argv.index("--profile-from-start") + 1] == "off"
    assert argv[argv.index("--target-processes") + 1] == "application-only"
    assert argv[argv.index("--export") + 1] == str(report) and "--force-overwrite" in argv
    assert [argv[i + 1] for i, w in enumerate(argv) if w == "--section"] == list(ncu.SECTIONS)
    assert argv[argv.index("--metrics") + 1].split(",") == list(ncu.METRICS.values())
    assert argv[-6:] == [sys.executable, "-m", "harness.worker", "candidate", "5", "8"]


def test_reports_and_record_sit_beside_each_other(tmp_path):
    from harness.core.discover import load_candidate, Pair
    from harness.run.profile import ProfileRun, record_path, report_paths
    run = ProfileRun(None, ncu.Ncu("ncu", None), tmp_path / "profile-x", tmp_path, {}, None, "profile-x")
    pair = Pair(None, load_candidate(CPU_CANDIDATE, "level1/001_relu_scale/aa_same_ops"), "level1/001_relu_scale")
    paths = report_paths(run, pair)
    assert paths == {side: tmp_path / "profile-x" / f"level1__001_relu_scale__aa_same_ops.{side}.ncu-rep"
                     for side in ("reference", "candidate")}
    assert record_path(run, pair) == tmp_path / "profile-x" / "level1__001_relu_scale__aa_same_ops.json"


# ---------------------------------------------------------------- the record's `profile` part

def _profiled() -> RecordDraft:
    record = new_record("level1/019_gelu", "level1/019_gelu/cuda_gelu_float4", "cuda", "profile-x")
    rows = ncu.parse_raw_csv(RAW.read_text())
    record.profile = Profile(["ncu", *ncu.options()], "Version 2025.3", 3,
                             ProfileSide("/r/a.reference.ncu-rep", rows, None),
                             ProfileSide(None, [], "ncu: no kernels were profiled in the call"))
    return finish(record, Status.OK)


def test_the_profile_part_round_trips():
    record = _profiled()
    data = json.loads(json.dumps(record.to_json()))
    assert list(data)[-1] == "profile"
    assert data["profile"]["reference"]["kernels"][0] == {
        "name": record.profile.reference.kernels[0].name, "duration_us": 1034.21, "dram_pct": 91.84,
        "sm_pct": 22.47, "occupancy_pct": 83.05, "registers": 16}
    assert RecordDraft.from_json(data).to_json() == data
    typed = Record.from_json(data, "test")
    assert isinstance(typed.profile, Profile) and typed.profile.reference.kernels[1].dram_pct is None
    assert typed.profile.reference.duration_us == pytest.approx(1034.21 + 18.5)
    assert typed.profile.candidate.error.startswith("ncu: no kernels")


def test_a_record_without_a_profile_has_no_such_key():
    record = finish(new_record("p", "p/c", "cpu", "r"), Status.OK)
    assert "profile" not in record.to_json() and Record.from_json(record.to_json(), "test").profile is None


def test_the_table_has_a_row_per_kernel_and_a_total(capsys):
    rows = command.table_rows(_profiled())
    assert [r[0] for r in rows] == ["reference", "reference", "reference", "candidate"]
    assert rows[0][2:] == ("1034.21", "91.8", "22.5", "83.0", "16") and rows[1][3] == ""
    assert len(rows[0][1]) == command.NAME_WIDTH and rows[0][1].endswith("...")
    assert rows[2][1] == "(total, 2 kernels)" and rows[2][2] == "1052.71"
    assert rows[3][1] == "(no kernels: ncu: no kernels were profiled in the call)"
    from harness.results.render import wide_console
    command.render(_profiled(), wide_console())
    out = capsys.readouterr().out
    assert "level1/019_gelu/cuda_gelu_float4: ok" in out and "[lambda() (instance 2)]" not in out  # cut, not markup


# ---------------------------------------------------------------- workers under a launcher, on the CPU

def _launchers(tmp_path: Path) -> dict[str, list[str]]:
    """Two stand-ins for ncu: one that keeps the inherited pipes for its child (sh), one that closes them (the
    worker then opens them again through /proc/<launcher>/fd)."""
    closing = tmp_path / "closing_launcher.py"
    closing.write_text("import subprocess, sys\nsys.exit(subprocess.call(sys.argv[1:], close_fds=True))\n")
    return {"keeps_fds": ["/bin/sh", "-c", '"$@"; exit $?', "sh"], "closes_fds": [sys.executable, str(closing)]}


def _recv(worker: Worker, cls, seconds: float = 120):
    return m.parse(cls, worker.recv(time.monotonic() + seconds))


@pytest.mark.parametrize("launcher", ["keeps_fds", "closes_fds"])
def test_workers_under_a_launcher_answer_the_profiled_call(tmp_path, launcher):
    """The reference and the candidate worker started behind a launcher (as under ncu) get their job, run, report
    the candidate's sandbox with what ncu would need opened, and answer NcuRequest (on the CPU: the warm-up calls
    and the call, no profiler)."""
    wrapper = _launchers(tmp_path)[launcher]
    scratch = tmp_path / "scratch"
    (scratch / "pair").mkdir(parents=True)
    tmp = tmp_path / "ncu-tmp"
    tmp.mkdir()
    env = worker_env({"CUDA_VISIBLE_DEVICES": "", "KB_DEVICE": "cpu", "KB_NCU": "49152:64",
                      "KB_NCU_TMP": str(tmp), "TMPDIR": str(tmp)})
    spec = m.TimingSpec("host", 1, False, 1)
    reference = Worker("reference", env, tmp_path / "reference.log", wrapper=wrapper)
    candidate = None
    try:
        reference.send(m.wire(m.ReferenceJob(str(CPU_PROBLEM), "cpu", 1, 1, spec, [], [11], str(scratch), True)))
        ready = reference.recv(time.monotonic() + 120)
        assert ready["kind"] == "ready", (ready, reference.log_tail())
        reference.send(m.wire(m.NcuRequest(5, "eager", 2)))
        assert _recv(reference, m.NcuCalled).warmup == 2
        candidate = Worker("candidate", env, tmp_path / "candidate.log", wrapper=wrapper)
        candidate.send(m.wire(m.CandidateJob(str(CPU_PROBLEM), str(CPU_CANDIDATE), "cpu", 1, 1, spec,
                                             str(scratch / "pair"), str(scratch / "reference_state.pt"), True)))
        outputs = _recv(candidate, m.Outputs)
        if sandbox.landlock_abi()[0] is not None:
            assert outputs.sandbox["filesystem"] is True
            assert os.path.realpath(tmp) in outputs.sandbox["writable"]
            assert any("TCP bind/connect on ports 49152-49215" in r or "no network namespace" in r
                       for r in outputs.sandbox["relaxed"])
        candidate.send(m.wire(m.NcuRequest(5, "candidate", 1)))
        assert _recv(candidate, m.NcuCalled).ms >= 0
    except WorkerExit as exc:
        pytest.fail(f"{exc.detail}: {reference.log_tail()} {candidate.log_tail() if candidate else ''}")
    finally:
        for worker in (candidate, reference):
            if worker is not None:
                worker.close(wait_s=30)


def test_a_worker_whose_parent_is_not_the_harness_exits(tmp_path):
    """The launcher relaxation only looks a few ancestors up: a worker told the harness is its parent's parent,
    started by something else, still refuses to run (containment.setup_worker)."""
    env = {**worker_env({"CUDA_VISIBLE_DEVICES": "", "KB_DEVICE": "cpu"}), "KB_PARENT_WRAPPED": "1:2",
           "KB_PARENT_PID": "999999999"}
    r, w = os.pipe()
    done = subprocess.run([*worker_argv("reference", r, w)], pass_fds=(r, w), cwd=REPO, env=env, timeout=120,
                          capture_output=True)
    os.close(r)
    os.close(w)
    assert done.returncode == 3


# ---------------------------------------------------------------- the sandbox's rules for ncu

@pytest.mark.skipif(not sys.platform.startswith("linux") or (sandbox.landlock_abi()[0] or 0) < 4,
                    reason="needs Landlock's network rules (ABI 4)")
def test_confined_under_ncu_only_its_ports_are_open(tmp_path):
    def free_port() -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    allowed, other = free_port(), free_port()
    script = textwrap.dedent(f"""
        import json, socket
        from harness.worker import sandbox
        report = sandbox.confine([{str(tmp_path)!r}], ncu=range({allowed}, {allowed + 1}))
        out = {{"report": report}}
        for name, port in (("allowed", {allowed}), ("other", {other})):
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", port))
                out[name] = "ok"
            except OSError as exc:
                out[name] = exc.errno
            finally:
                s.close()
        print(json.dumps(out))
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.splitlines()[-1])
    assert out["allowed"] == "ok" and out["other"] == 13
    assert out["report"]["filesystem"] and out["report"]["network_via"] == "landlock (TCP)"
    assert out["report"]["relaxed"][0] == f"ncu: TCP bind/connect on ports {allowed}-{allowed}"
    if out["report"]["landlock_abi"] >= 6:
        assert out["report"]["scoped"] == ["signal"]


# ---------------------------------------------------------------- on the GPU

@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="needs a CUDA GPU")
def test_profile_one_pair_on_the_gpu(tmp_path):
    """`run_eval.py profile` on one honest CUDA candidate: both reports written, and each side's table has kernels
    with a positive duration and figures in range."""
    config = write_config(tmp_path, FIXTURES / "gpu_tree", device="cuda")
    done = run_cli("profile", "level1/001_scale_relu/cuda_fused", "--config", str(config), "--json", timeout=600)
    assert done.returncode == 0, done.stderr
    record = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("{")))
    assert record["status"] == "ok" and record["error"] is None, (record["error"], done.stderr[-3000:])
    assert record["sandbox"]["filesystem"] is True and record["sandbox"]["relaxed"], record["sandbox"]
    for side in ("reference", "candidate"):
        got = record["profile"][side]
        assert got["error"] is None and Path(got["report"]).is_file(), got
        assert got["kernels"] and all(k["duration_us"] > 0 for k in got["kernels"]), got
        assert all(0 <= (k["sm_pct"] or 0) <= 100 and (k["registers"] or 0) > 0 for k in got["kernels"]), got
    assert any("scale_relu" in k["name"] for k in record["profile"]["candidate"]["kernels"])
    assert "duration us" in done.stderr and "(total, " in done.stderr


# ---------------------------------------------------------------- a pair end to end, on the CPU, behind a fake ncu

FAKE_NCU = '''#!{python}
"""A stand-in for ncu: --version, --import (prints the fixture's CSV), or a launch: the worker's command line after
ncu's own options, run as a child with the inherited pipes closed (as a launcher may), then the report written."""
import subprocess, sys
argv = sys.argv[1:]
if argv == ["--version"]:
    print("Version 2099.1.0.0 (fake)")
    sys.exit(0)
if argv[0] == "--import":
    sys.stdout.write(open({csv!r}).read())
    sys.exit(0)
print("==PROF== Connected to process (fake)", flush=True)
report = argv[argv.index("--export") + 1]
code = subprocess.call(argv[argv.index("--force-overwrite") + 1:], close_fds=True)
open(report, "w").write("fake report")
sys.exit(code)
'''


def test_a_pair_end_to_end_behind_a_fake_ncu(tmp_path, candidate="aa_same_ops"):
    """harness.run.profile.profile_pair on the CPU with a fake ncu: both workers start behind it, the reference and
    the candidate each make their call, each report is written and read back into the record; the candidate's
    sandbox says what was opened for ncu."""
    from harness.core.discover import discover
    from harness.core.seeds import RunSeed
    from harness.run.build import build_all
    from harness.run.evaluate import PairContext
    from harness.run.pipeline import toolchain_for
    from harness.run.profile import ProfileRun, profile_config, profile_pair
    fake = tmp_path / "bin" / "ncu"
    fake.parent.mkdir()
    fake.write_text(FAKE_NCU.format(python=sys.executable, csv=str(RAW)))
    fake.chmod(0o755)
    import conftest
    cache = conftest.SHARED_CACHE or tmp_path / "cache"             # the session's builds (cpp_loop's included)
    cfg = load_config(None, {"device": "cpu", "trials": 1, "timeout": 120, "cache_dir": str(cache),
                             "problems_dir": "examples/cpu/problems", "solutions_dir": "examples/cpu/solutions"})
    cfg = profile_config(cfg.for_device("cpu"))
    _, pairs = discover(Path(cfg.problems_dir), Path(cfg.solutions_dir), None, "level1/001_*", candidate)
    toolchain = toolchain_for("cpu", cfg, [])
    seed = RunSeed.resolve(1)
    builds = build_all(pairs, cache / "builds", toolchain, 1, 300, seed.base)
    folder, scratch, tmp = tmp_path / "profile-x", tmp_path / "scratch", tmp_path / "scratch" / "ncu-tmp"
    for path in (folder / "logs", tmp):
        path.mkdir(parents=True)
    env = worker_env({"CUDA_VISIBLE_DEVICES": "", "KB_DEVICE": "cpu", "KB_NCU": "49152:64", "KB_NCU_TMP": str(tmp),
                      "TMPDIR": str(tmp)})
    run = ProfileRun(PairContext(cfg, seed, builds, toolchain, {}, folder / "logs"), ncu.locate(str(fake.parent)),
                     folder, scratch, env, None, "profile-x", warmup=1, device="cpu")
    record = profile_pair(pairs[0], run)
    data = record.to_json()
    assert Record.from_json(json.loads(json.dumps(data)), "test").profile is not None
    assert data["status"] == "ok", (data["error"], [p.read_text()[-2000:] for p in (folder / "logs").iterdir()])
    assert data["error"] is None and data["profile"]["ncu"][:3] == ["ncu", "--target-processes", "application-only"]
    assert data["profile"]["ncu_version"] == "Version 2099.1.0.0 (fake)" and data["profile"]["warmup"] == 1
    for side in ("reference", "candidate"):
        got = data["profile"][side]
        assert got["report"] == str(folder / f"level1__001_relu_scale__{candidate}.{side}.ncu-rep")
        assert Path(got["report"]).read_text() == "fake report" and len(got["kernels"]) == 2
        assert "==PROF== Connected" in (folder / "logs" / f"level1__001_relu_scale__{candidate}.{side}.log").read_text()
    if sandbox.landlock_abi()[0] is not None:
        assert data["sandbox"]["filesystem"] is True and data["sandbox"]["relaxed"]
