"""The harness's exceptions. Library code raises these; only harness.cli turns them into messages and exit codes."""
import argparse
import os
import select
import shlex
import sys
from pathlib import Path


class HarnessError(Exception):
    """Base class for errors the harness reports as one line."""

    exit_code = 1


class UsageError(HarnessError):
    """A bad flag, config value or input file: the user can fix it. Exit code 2."""

    exit_code = 2


class InputError(UsageError):
    """A malformed problem, candidate or config file, named in the message."""


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is a UsageError: one line (with --help pointed at), not the usage block. Every
    command's parser is one of these."""

    def error(self, message: str):
        raise UsageError(f"{message} (see {self.prog} --help)")


def command_line(args: list[str]) -> str:
    """A run_eval.py command to print for the user to run next, with run_eval.py as this one was started (a path
    when it was started from another folder), quoted for the shell."""
    script = sys.argv[0] if sys.argv and Path(sys.argv[0]).name == "run_eval.py" else "run_eval.py"
    return shlex.join(["python", script, *args])


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C once a run has its folder: the message names the run and how to go on with it. A KeyboardInterrupt,
    so every handler of one still sees it."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


def interrupted_message(exc: KeyboardInterrupt) -> str:
    if isinstance(exc, RunInterrupted):
        return exc.message
    return "interrupted (before any pair ran)"


def stdout_pipe_closed() -> bool:
    """Whether stdout is a pipe whose reader has gone (`... | head`): poll reports an error on its write end."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):       # no real stdout (a test's capture), or no poll here
        return False


def silence_stdout() -> None:
    """After a closed pipe: point stdout at /dev/null, so the interpreter's own flush at exit finds nowhere to fail
    (what Python's docs on SIGPIPE recommend)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
