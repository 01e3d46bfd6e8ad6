"""Confinement (harness.worker.sandbox): candidate and build workers write only their own folders, open no TCP
connection, and every process they start stays confined; the run itself still works, and KB_SANDBOX=off turns it
all off. The escapes are real candidates run through the CLI over tests/fixtures/sandbox (copied: an escape that
worked must not change the repository)."""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from conftest import FIXTURES, REPO, _keep, json_records, run_dirs, write_config

from harness.shared import sandboxprobe
from harness.worker import sandbox
from harness.results.store import read_records

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux-only")

LANDLOCK = sandbox.landlock_abi()[0] is not None
needs_landlock = pytest.mark.skipif(not LANDLOCK, reason="this kernel has no Landlock")
PROBE = "KB-SANDBOX-PROBE "

# What the escape candidate tries (kb_sandbox_probe.escape_everything): these must fail ...
DENIED = {"results_append", "results_dir_new_file", "solutions_new_file", "problem_append", "own_build_marker",
          "other_build_new_file", "other_ext_new_file", "reference_state_append", "problem_scratch_new_file",
          "dev_shm_new_file", "tmp_new_file", "tcp_connect", "signal_parent", "child_process_results_append",
          "read_run_key"}
# ... and these, its own folders and /dev/null, must work (the probe itself is sound).
ALLOWED = {"found_config", "own_ext_write", "tmpdir_write", "scratch_write", "dev_null_write"}


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != sandbox.MODE_VAR}
    return {**env, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO), **extra}


class Listener:
    """A TCP socket on 127.0.0.1 that records every connection made to it."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections: list[bytes] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            conn.settimeout(1)
            try:
                self.connections.append(conn.recv(100))
            except OSError:
                self.connections.append(b"")
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(2)
        self.sock.close()


# ---------------------------------------------------------------- a whole run with escaping candidates

@pytest.fixture(scope="module")
def sandbox_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sandbox")
    tree = tmp / "tree"
    shutil.copytree(FIXTURES / "sandbox", tree)
    listener = Listener()
    (tree / "port.txt").write_text(str(listener.port))
    config = write_config(tmp, tree, cache_dir=tmp / "cache")     # the build worker must run, keys looked at
    try:
        done = subprocess.run([sys.executable, str(REPO / "run_eval.py"), "--config", str(config), "--json",
                               "--timeout", "60"], cwd=REPO, capture_output=True, text=True, timeout=600,
                              env=_env())
    finally:
        listener.close()
    _keep(("--config", str(config)), done)
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = run_dirs(tmp)
    probes = []
    for log in [*(run_dir / "logs").glob("*.log"), *(tmp / "cache" / "builds").glob("*/build.log")]:
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith(PROBE):
                probes.append({**json.loads(line[len(PROBE):]), "log": log.name})
    return {"tmp": tmp, "tree": tree, "run_dir": run_dir, "records": json_records(done.stdout), "probes": probes,
            "connections": listener.connections}


def _ran_correctly(record: dict) -> bool:
    """Correct on every trial and timed to the end: `ok`, or `invalid` only through the checks a busy machine can
    trip whatever the sandbox does (the flag table's `retry` flags: interference, timing_inconsistent), which a
    tiny CPU problem on two loaded cores does."""
    from harness.core import flags
    load = set(flags.RETRIED)
    trials = record.get("correctness") or {}
    clean = record["status"] == "ok" or (record["status"] == "invalid" and bool(set(record["flags"]) & load)
                                         and set(record["flags"]) <= load | {"noisy"})
    return clean and trials.get("trials") and trials.get("trials_passed") == trials.get("trials")


def test_every_pair_still_gets_its_record(sandbox_run):
    records = sandbox_run["records"]
    assert sorted(records) == ["escape_writes", "honest_cpp", "setsid_child"]
    assert all(_ran_correctly(r) for r in records.values()), {n: r["error"] for n, r in records.items()}


def test_honest_cpp_candidate_builds_and_runs_confined(sandbox_run):
    record = sandbox_run["records"]["honest_cpp"]
    assert record["build"]["status"] == "built" and not record["build"]["cached"]
    assert record["build"]["extensions"] == ["kb_sandbox_relu_cpp"]
    assert _ran_correctly(record), record["error"]


@needs_landlock
@pytest.mark.parametrize("role", ["build", "candidate"])
def test_escape_attempts_fail_in_both_workers(sandbox_run, role):
    mine = [p for p in sandbox_run["probes"] if p["role"] == role and not p["name"].startswith("setsid_")]
    tried = {p["name"] for p in mine}
    if role == "candidate":     # by then every build folder exists, and the worker has a scratch of its own
        assert DENIED | ALLOWED <= tried, (DENIED | ALLOWED) - tried
    else:
        assert (DENIED | ALLOWED) - {"scratch_write", "reference_state_append", "problem_scratch_new_file",
                                     "other_build_new_file", "other_ext_new_file"} <= tried
    worked = {p["name"] for p in mine if p["ok"]}
    assert not worked & DENIED, [p for p in mine if p["ok"] and p["name"] in DENIED]
    assert tried & ALLOWED <= worked, [p for p in mine if not p["ok"] and p["name"] in ALLOWED]
    failed = [p for p in mine if p["name"] in DENIED - {"read_run_key"}]
    assert all("Permission denied" in p["error"] or "Operation not permitted" in p["error"] for p in failed), failed


@needs_landlock
def test_the_run_key_is_out_of_sight_of_confined_workers(sandbox_run):
    """The key file run.json names exists for the parent, but a confined worker sees <cache_dir>/keys empty, and
    Landlock keeps it from unmounting what covers it."""
    tmp, run_dir = sandbox_run["tmp"], sandbox_run["run_dir"]
    key_file = Path(json.loads((run_dir / "run.json").read_text())["signing"]["key_file"])
    assert key_file.is_file()
    keys = str((tmp / "cache" / "keys").resolve())
    compiled = str((tmp / "cache" / "compile").resolve())     # the reference's torch.compile caches, hidden too
    for name, record in sandbox_run["records"].items():
        assert record["sandbox"]["hidden"] == [keys, compiled], (name, record["sandbox"])
        assert record["build"]["sandbox"]["hidden"] == [keys, compiled], (name, record["build"]["sandbox"])
    tries = [p for p in sandbox_run["probes"] if p["name"] == "read_run_key"]
    assert {p["role"] for p in tries} == {"build", "candidate"} and not any(p["ok"] for p in tries), tries


@needs_landlock
def test_run_files_and_trees_are_untouched(sandbox_run):
    tmp, tree, run_dir = sandbox_run["tmp"], sandbox_run["tree"], sandbox_run["run_dir"]
    lines = (run_dir / "results.jsonl").read_text().splitlines()
    assert len(lines) == 3 and all(json.loads(line)["run_id"] == run_dir.name for line in lines)
    # no line was added or changed by a worker: three records, each this run's and signed by it ("pwned" may
    # still appear inside a record: the worker's log tail, which echoes what the probe tried)
    assert sorted(json.loads(line)["solution"].rsplit("/", 1)[-1] for line in lines) == sorted(sandbox_run["records"])
    warnings: list[str] = []
    assert len(list(read_records(run_dir / "results.jsonl", warnings.append))) == 3 and warnings == []
    assert "pwned" not in (run_dir / "run.json").read_text()
    assert sorted(p.name for p in run_dir.iterdir()) == ["index.html", "leaderboard.md", "logs", "results.jsonl", "run.json"]
    assert [str(p) for p in tmp.rglob("*pwned*")] == []
    original = FIXTURES / "sandbox" / "problems" / "level1" / "001_linear_relu.py"
    assert (tree / "problems" / "level1" / "001_linear_relu.py").read_bytes() == original.read_bytes()
    for build in (tmp / "cache" / "builds").iterdir():
        json.loads((build / "build.json").read_text())          # no build marker was appended to
    assert sandbox_run["connections"] == []                       # no TCP connection reached the listener
    stray = [p for d in ("/dev/shm", "/tmp") for p in Path(d).glob("pwned-kb-sandbox-*")]
    assert stray == []


@needs_landlock
def test_setsid_grandchild_stays_confined(sandbox_run):
    tries = [p for p in sandbox_run["probes"]
             if p["name"].startswith("setsid_results") and p["role"] == "candidate"]
    assert tries, "the setsid grandchild never tried"
    assert not [p for p in tries if p["ok"]]
    assert any(p["name"] == "setsid_results_append" for p in tries)
    lines = (sandbox_run["run_dir"] / "results.jsonl").read_text().splitlines()
    assert not [line for line in lines if json.loads(line)["solution"].endswith("/pwned")]
    for pid in {p["pid"] for p in tries}:                   # and the harness still killed it (containment)
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        assert state in ("Z", "X"), f"setsid grandchild {pid} still alive"


# ---------------------------------------------------------------- describe, modes, the worker's report

def test_describe_says_what_this_machine_gives():
    info = sandbox.describe()
    assert {"mode", "landlock_abi", "filesystem", "network", "network_via", "no_new_privs", "scoped",
            "reason"} <= info.keys()
    json.dumps(info)
    abi = sandbox.landlock_abi()[0]
    if sandbox.mode() != "off":
        assert info["filesystem"] == (abi is not None)
        assert info["no_new_privs"] is True
        if abi is not None and abi >= 4:
            assert info["network"] and info["network_via"] == "landlock (TCP)"
        if abi is not None and abi >= 6:
            assert info["scoped"] == ["abstract_unix_socket", "signal"]


def test_describe_off_and_bad_mode(monkeypatch):
    monkeypatch.setenv("KB_SANDBOX", "off")
    off = sandbox.describe()
    assert off["mode"] == "off" and not off["filesystem"] and not off["network"] and "off" in off["reason"]
    monkeypatch.setenv("KB_SANDBOX", "sometimes")
    bad = sandbox.describe()
    assert not bad["filesystem"] and "sometimes" in bad["reason"]


def _build_worker(tmp_path: Path, mode: str | None):
    """A build worker whose candidate writes a file beside itself (outside every folder of its own); returns its
    first message and whether the file appeared."""
    from harness.run import workerproc as procs
    candidate = tmp_path / "writes_outside.py"
    candidate.write_text(textwrap.dedent("""
        from pathlib import Path
        try:
            Path(__file__).with_name("escaped.txt").write_text("x")
        except OSError as exc:
            print("denied:", exc)
        class ModelNew:
            pass
    """))
    extra = {"KB_DEVICE": "cpu", "CUDA_VISIBLE_DEVICES": "", "TORCH_EXTENSIONS_DIR": str(tmp_path / "b" / "ext")}
    saved = os.environ.pop(sandbox.MODE_VAR, None)
    if mode is not None:
        os.environ[sandbox.MODE_VAR] = mode          # the parent's environment reaches the worker (ENV_WHITELIST)
    try:
        worker = procs.Worker("build", procs.worker_env(extra), tmp_path / "worker.log")
    finally:
        os.environ.pop(sandbox.MODE_VAR, None)
        if saved is not None:
            os.environ[sandbox.MODE_VAR] = saved
    try:
        worker.send({"candidate_path": str(candidate), "problem_path": str(candidate), "device_kind": "cpu",
                     "seed": 0})
        message = worker.recv(time.monotonic() + 60)
    finally:
        worker.close()
    return message, (tmp_path / "escaped.txt").exists()


@needs_landlock
def test_worker_reports_the_sandbox_in_its_first_message(tmp_path):
    message, escaped = _build_worker(tmp_path, None)
    assert message["kind"] == "built"
    report = message["sandbox"]
    assert report["mode"] == "auto" and report["filesystem"] and report["no_new_privs"] and report["network"]
    assert report["unconfined_threads"] == 0 and report["error"] is None
    assert any(p.startswith(str((tmp_path / "b" / "ext").resolve())) for p in report["writable"])
    assert not escaped
    assert not list((tmp_path / "b" / "ext").glob(".kb-tmp-*"))     # the private TMPDIR is gone with the worker


def test_kb_sandbox_off_disables_it(tmp_path):
    message, escaped = _build_worker(tmp_path, "off")
    assert message["kind"] == "built"
    assert message["sandbox"]["mode"] == "off" and not message["sandbox"]["filesystem"]
    assert escaped                                                # nothing stopped the write


def test_a_bad_mode_refuses_the_job(tmp_path):
    message, escaped = _build_worker(tmp_path, "sometimes")
    assert message["kind"] == "harness_error" and "KB_SANDBOX" in message["error"]
    assert not escaped


# ---------------------------------------------------------------- confine() itself, in a throwaway process

def _confined(tmp_path: Path, body: str, **env: str) -> subprocess.CompletedProcess:
    """Run `body` in a fresh Python after setup code; `allowed` is the one writable folder, `outside` is not."""
    script = textwrap.dedent("""
        import json, os, socket, sys, threading, time
        from pathlib import Path
        from harness.worker import sandbox
        allowed, outside = Path(sys.argv[1]), Path(sys.argv[2])
    """) + textwrap.dedent(body)
    (tmp_path / "allowed").mkdir(exist_ok=True)
    (tmp_path / "outside").mkdir(exist_ok=True)
    return subprocess.run([sys.executable, "-c", script, str(tmp_path / "allowed"), str(tmp_path / "outside")],
                          cwd=REPO, capture_output=True, text=True, timeout=60, env=_env(**env))


@needs_landlock
def test_confine_writes_threads_children_and_network(tmp_path):
    listener = Listener()
    try:
        done = _confined(tmp_path, f"""
            report = sandbox.confine([str(allowed)])
            out = {{"report": report}}
            def try_(name, fn):
                try:
                    fn()
                    out[name] = "ok"
                except OSError as exc:
                    out[name] = exc.errno
            try_("inside", lambda: (allowed / "a").write_text("x"))
            try_("outside", lambda: (outside / "a").write_text("x"))
            try_("devnull", lambda: open("/dev/null", "w").write("x"))
            gate = threading.Event()
            t = threading.Thread(target=gate.wait, daemon=True)
            t.start()                                   # what the CUDA driver does to name its threads
            try_("thread_comm", lambda: open(f"/proc/self/task/{{t.native_id}}/comm", "w").write("kb-test"))
            try_("parent_proc", lambda: open(f"/proc/{{os.getppid()}}/oom_score_adj", "w").write("0"))
            try_("thread_outside", lambda: (outside / "t").write_text("x"))   # a new thread is confined too
            gate.set()
            try_("tcp", lambda: socket.create_connection(("127.0.0.1", {listener.port}), timeout=2))
            r, w = os.pipe()
            if os.fork() == 0:                          # a double-forked, setsid grandchild
                os.setsid()
                if os.fork() == 0:
                    time.sleep(0.3)                     # its parent is gone by now
                    try:
                        (outside / "grandchild").write_text("x")
                        os.write(w, b"ok")
                    except OSError as exc:
                        os.write(w, str(exc.errno).encode())
                    os._exit(0)
                os._exit(0)
            os.close(w)
            out["grandchild"] = os.read(r, 100).decode()
            print(json.dumps(out))
        """)
    finally:
        listener.close()
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.splitlines()[-1])
    assert out["report"]["filesystem"] and out["report"]["unconfined_threads"] == 0
    assert out["inside"] == "ok" and out["devnull"] == "ok" and out["thread_comm"] == "ok"
    assert out["outside"] == 13 and out["thread_outside"] == 13 and out["parent_proc"] == 13
    assert out["grandchild"] == "13"
    if out["report"]["landlock_abi"] >= 4:
        assert out["tcp"] == 13 and listener.connections == []
    assert not list((tmp_path / "outside").iterdir())


@needs_landlock
def test_without_landlock_network_rules_a_network_namespace(tmp_path):
    if not sandboxprobe.netns_possible():
        pytest.skip("no unprivileged user namespaces here")
    listener = Listener()
    try:
        done = _confined(tmp_path, f"""
            report = sandbox.confine([str(allowed)], max_abi=3)       # as on a kernel before 6.7
            try:
                socket.create_connection(("127.0.0.1", {listener.port}), timeout=2)
                tcp = "ok"
            except OSError as exc:
                tcp = exc.errno
            (allowed / "a").write_text("x")             # our own folders stay ours (uid mapped)
            print(json.dumps({{"report": report, "tcp": tcp}}))
        """)
    finally:
        listener.close()
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.splitlines()[-1])
    assert out["report"]["network_via"] == "network namespace" and out["report"]["filesystem"]
    assert out["tcp"] != "ok" and listener.connections == []


def test_no_landlock_auto_runs_and_require_refuses(tmp_path):
    body = """
        sandbox.landlock_abi = lambda: (None, "Landlock unavailable: test")
        try:
            report = sandbox.confine_worker("candidate", {"scratch": str(allowed)})
            print(json.dumps({"report": report}))
        except sandbox.SandboxError as exc:
            print(json.dumps({"refused": str(exc)}))
    """
    auto = json.loads(_confined(tmp_path, body).stdout.splitlines()[-1])
    assert not auto["report"]["filesystem"] and "Landlock unavailable" in auto["report"]["error"]
    required = json.loads(_confined(tmp_path, body, KB_SANDBOX="require").stdout.splitlines()[-1])
    assert "require" in required["refused"] and "Landlock unavailable" in required["refused"]


@needs_landlock
def test_device_ioctls_are_confined_to_the_listed_devices_where_asked(tmp_path):
    """A worker under device_ioctl=False (Landlock ABI >= 5) may ioctl only the device files the
    runtime needs: a loop device (whose kernel worker copied for a red team's candidate outside its cgroup) is
    refused, /dev/null still answers (ENOTTY: it is no terminal, not EACCES). device_ioctl=True leaves them open."""
    import errno
    from harness.shared.sandboxprobe import landlock_abi
    abi, _ = landlock_abi()
    if abi is None or abi < 5:
        pytest.skip("Landlock ABI < 5: device ioctls cannot be handled")
    if not os.path.exists("/dev/loop-control"):
        pytest.skip("no /dev/loop-control here")
    body = """
        import fcntl, termios
        report = sandbox.confine([str(allowed)], device_ioctl={open_})
        out = {{"report": report["device_ioctl"]}}
        for name, path, request in (("loop", "/dev/loop-control", 0x4C82), ("null", "/dev/null", termios.TCGETS)):
            fd = os.open(path, os.O_RDONLY)
            try:
                fcntl.ioctl(fd, request, bytes(64) if name == "null" else 0)
                out[name] = "ok"
            except OSError as exc:
                out[name] = exc.errno
            finally:
                os.close(fd)
        print(json.dumps(out))
    """
    done = _confined(tmp_path, body.format(open_=False))
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out == {"report": "listed devices only", "loop": errno.EACCES, "null": errno.ENOTTY}, out
    done = _confined(tmp_path, body.format(open_=True))
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["report"] == "open" and out["loop"] != errno.EACCES, out


@needs_landlock
def test_every_worker_but_one_under_ncu_gets_the_device_ioctl_rule(tmp_path):
    """The rule as a worker applies it: on the CPU path and on the GPU alike (the CUDA driver's ioctls go to the
    listed /dev/nvidia*; test_gpu.py runs its pairs under it), and not under Nsight Compute, whose report says
    so in `relaxed`."""
    from harness.shared.sandboxprobe import landlock_abi
    abi, _ = landlock_abi()
    if abi is None or abi < 5:
        pytest.skip("Landlock ABI < 5: device ioctls cannot be handled")
    body = """
        report = sandbox.confine_worker("candidate", {"scratch": str(allowed)})
        print(json.dumps({"ioctl": report["device_ioctl"], "relaxed": report.get("relaxed", [])}))
    """
    for device in ("cpu", "cuda"):
        done = _confined(tmp_path, body, KB_DEVICE=device)
        assert done.returncode == 0, done.stderr
        out = json.loads(done.stdout.strip().splitlines()[-1])
        assert out == {"ioctl": "listed devices only", "relaxed": []}, (device, out)
    done = _confined(tmp_path, body, KB_DEVICE="cuda", KB_NCU="40000:2", KB_NCU_TMP=str(tmp_path / "ncu"))
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["ioctl"] == "open" and "ncu: ioctl on every device file" in out["relaxed"], out
