"""Worker processes as the parent sees them: launched with a whitelisted environment and two private pipes,
read with deadlines, killed with their whole process group (ninja, nvcc, stray children)."""
from __future__ import annotations

import itertools
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .channel import (ChannelClosed, ChannelProtocolError, ChannelTimeout, LineReader, encode, write_all)

REPO_ROOT = Path(__file__).resolve().parent.parent

# Variables a worker inherits; everything else in the parent's environment stays behind.
ENV_WHITELIST = ("PATH", "HOME", "USER", "LANG", "LC_ALL", "TMPDIR", "CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH",
                 "CC", "CXX", "NVCC", "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS",
                 "VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONHOME")


def worker_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: os.environ[k] for k in ENV_WHITELIST if k in os.environ}
    env["PYTHONPATH"] = str(REPO_ROOT)
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra)
    return env


class WorkerExit(Exception):
    """The worker ended (or was ended) without the message the parent waited for."""

    def __init__(self, kind: str, returncode: int | None, detail: str):
        super().__init__(detail)
        self.kind = kind                    # "exited" | "timeout" | "protocol"
        self.returncode = returncode
        self.detail = detail


class Worker:
    def __init__(self, role: str, env: dict[str, str], log_path: Path):
        cmd_r, cmd_w = os.pipe()
        res_r, res_w = os.pipe()
        self.log_path = log_path
        self.started = time.monotonic()
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "harness.workers", role, str(cmd_r), str(res_w)],
                pass_fds=(cmd_r, res_w), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=env, cwd=str(REPO_ROOT), start_new_session=True)
        os.close(cmd_r)
        os.close(res_w)
        self.cmd_w = cmd_w
        self.reader = LineReader(res_r)
        self.token = secrets.token_hex(16)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def move_log(self, path: Path) -> None:
        """Give a spare worker its job's log name (the open file follows the rename)."""
        target, n = path, 1
        while target.exists():
            n += 1
            target = path.with_name(f"{path.stem}.{n}{path.suffix}")
        try:
            os.replace(self.log_path, target)
            self.log_path = target
        except OSError:
            pass

    def send(self, message: dict[str, Any]) -> None:
        try:
            write_all(self.cmd_w, encode({"token": self.token, **message}))
        except (BrokenPipeError, OSError):
            pass                                        # the worker is gone; recv() will say how

    def recv(self, deadline: float) -> dict[str, Any]:
        """The next message carrying our token. Raises WorkerExit on death, timeout or garbage."""
        try:
            message = self.reader.read(deadline)
        except ChannelTimeout:
            self.kill()
            raise WorkerExit("timeout", None, "no answer before the timeout") from None
        except ChannelClosed:
            code = self.wait(5.0)
            raise WorkerExit("exited", code, describe_exit(code)) from None
        except ChannelProtocolError as exc:
            self.kill()
            raise WorkerExit("protocol", None, f"sent {exc} on the result channel") from None
        if message.pop("token", None) != self.token:
            self.kill()
            raise WorkerExit("protocol", None, "sent a message without the harness's token (a forged record?)")
        return message

    def wait(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return self.proc.returncode

    def pause(self) -> None:
        """Stop every process of this worker (SIGSTOP to its process group) while the other side is timed."""
        try:
            os.killpg(self.proc.pid, signal.SIGSTOP)
        except (ProcessLookupError, PermissionError):
            pass

    def resume(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGCONT)
        except (ProcessLookupError, PermissionError):
            pass

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass

    def close(self) -> int | None:
        """Tell the worker to stop, give it a moment, then make sure the whole group is gone."""
        self.send({"op": "exit"})
        code = self.wait(10.0)
        self.kill()
        for fd in (self.cmd_w, self.reader.fd):
            try:
                os.close(fd)
            except OSError:
                pass
        return code

    def log_tail(self, limit: int = 2000) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - limit))
                return f.read().decode(errors="replace")
        except OSError:
            return ""


class SpareWorkers:
    """Workers started before they are needed, one per role. A new worker spends its first seconds importing
    torch (no GPU work yet); a spare does that while the job before it runs, so the next job starts at once.
    Every job still gets a process of its own that no earlier job has touched."""

    _serial = itertools.count()

    def __init__(self, env: dict[str, str], log_dir: Path, tag: str, enabled: bool):
        self.env, self.log_dir, self.tag, self.enabled = env, log_dir, tag, enabled
        self.spares: dict[str, Worker] = {}

    def take(self, role: str, log_path: Path) -> Worker:
        worker = self.spares.pop(role, None)
        if worker is not None and worker.alive():
            worker.move_log(log_path)
        else:
            if worker is not None:
                self._discard(worker)
            worker = Worker(role, self.env, log_path)
        if self.enabled:
            spare_log = self.log_dir / f"spare-{self.tag}-{role}-{next(self._serial)}.log"
            self.spares[role] = Worker(role, self.env, spare_log)
        return worker

    def close(self) -> None:
        for worker in self.spares.values():
            self._discard(worker)
        self.spares.clear()

    @staticmethod
    def _discard(worker: Worker) -> None:
        worker.kill()                                   # a spare never got a job: nothing to wait for
        worker.close()
        try:
            if worker.log_path.stat().st_size == 0:
                worker.log_path.unlink()
        except OSError:
            pass


def describe_exit(code: int | None) -> str:
    if code is None:
        return "worker did not exit"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"worker killed by {name}"
    return f"worker exited with code {code} before reporting"
