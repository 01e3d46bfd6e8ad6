"""The harness's exceptions. Library code raises these; only harness.cli turns them into messages and exit codes."""
import argparse
import contextlib
import difflib
import os
import select
import shlex
import signal
import sys
import threading
from pathlib import Path
from typing import Iterator


class HarnessError(Exception):
    """Base class for errors the harness reports as one line."""

    exit_code = 1


class UsageError(HarnessError):
    """A bad flag, config value or input file: the user can fix it. Exit code 2."""

    exit_code = 2


class InputError(UsageError):
    """A malformed problem, candidate or config file, named in the message."""


def _transposed(a: str, b: str) -> bool:
    """`a` is `b` with two neighbouring letters swapped (a typo difflib scores low on short words: cvs, csv)."""
    diff = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
    return len(a) == len(b) and len(diff) == 2 and diff[1] == diff[0] + 1 and a[diff[0]] == b[diff[1]] \
        and a[diff[1]] == b[diff[0]]


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is a UsageError: one line (with --help pointed at), not the usage block, and a
    mistyped command, choice or flag gets a suggestion. Every command's parser is one of these. `not_here` maps a
    flag that other commands take to why this one does not."""

    not_here: dict[str, str] = {}

    def error(self, message: str):
        raise UsageError(f"{message} (see {self.prog} --help)")

    def parse_args(self, args=None, namespace=None):
        self._words = list(sys.argv[1:] if args is None else args)
        parsed, extras = self.parse_known_args(self._words, namespace)
        if extras:
            self.chosen(parsed).reject(extras)
        return parsed

    def chosen(self, parsed: argparse.Namespace) -> "OneLineParser":
        """The (sub)command parser that `parsed` went through last: the one whose flags an unknown word missed."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                sub = action.choices.get(getattr(parsed, action.dest, None) or "")
                if isinstance(sub, OneLineParser):
                    return sub.chosen(parsed)
        return self

    def reject(self, extras: list[str]):
        """Words no argument took: a flag of another command says why not here; a near miss, what was meant."""
        flags = [word.split("=", 1)[0] for word in extras if word.startswith("--")]
        for flag in flags:
            if flag in self.not_here:
                self.error(f"{self.prog} takes no {flag}: {self.not_here[flag]}")
        near = {flag: close for flag in flags if (close := self.nearest_flag(flag))}
        hint = ", ".join(close if len(near) == 1 else f"{close} for {flag}" for flag, close in near.items())
        self.error(f"unrecognized arguments: {' '.join(extras)}" + (f"; did you mean {hint}?" if hint else ""))

    def nearest_flag(self, flag: str) -> str | None:
        """The flag of this parser that `flag` most likely meant (compared without the dashes, which all share)."""
        names = {option.lstrip("-"): option for option in self._option_string_actions if option.startswith("--")}
        word = flag.lstrip("-")
        close = difflib.get_close_matches(word, list(names), n=1, cutoff=0.7)
        close = close or [name for name in names if _transposed(word, name)][:1]    # --cvs: --csv
        return names[close[0]] if close else None

    def _check_value(self, action: argparse.Action, value) -> None:
        """A value outside the choices names the nearest one. A word where a command would go is an unknown
        command, unless it is the value of an unknown flag before it: then that flag is what went wrong."""
        if action.choices is None or value in action.choices:
            return
        choices = [str(choice) for choice in action.choices]
        close = difflib.get_close_matches(str(value), choices, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        if not isinstance(action, argparse._SubParsersAction):
            raise argparse.ArgumentError(action, f"invalid choice: {value!r} (choose from {', '.join(choices)}){hint}")
        flag = self._unknown_flag_before(value)
        if flag is not None:
            self.reject([flag, value])
        listed = hint or f" (commands: {', '.join(choices)})"
        raise argparse.ArgumentError(None, f"unknown command {value!r}{listed}")

    def _unknown_flag_before(self, word: str) -> str | None:
        words = getattr(self, "_words", [])
        for before, this in zip(words, words[1:]):
            if this == word and before.startswith("--") and "=" not in before and \
                    not any(option.startswith(before) for option in self._option_string_actions):
                return before
        return None


def command_line(args: list[str]) -> str:
    """A run_eval.py command to print for the user to run next, with run_eval.py as this one was started (a path
    when it was started from another folder), quoted for the shell."""
    script = sys.argv[0] if sys.argv and Path(sys.argv[0]).name == "run_eval.py" else "run_eval.py"
    return shlex.join(["python", script, *args])


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread (terminate_as_interrupt): a KeyboardInterrupt, so it unwinds as Ctrl-C
    does (workers closed, the run's scratch removed); exit 143, as a process killed by SIGTERM."""

    exit_code = 143


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) once a run has its folder: the message names the run and how to go on with it. A
    KeyboardInterrupt, so every handler of one still sees it."""

    def __init__(self, message: str, exit_code: int = 130):
        super().__init__(message)
        self.message, self.exit_code = message, exit_code


def interrupted_message(exc: KeyboardInterrupt) -> str:
    if isinstance(exc, RunInterrupted):
        return exc.message
    return f"{'terminated' if isinstance(exc, Terminated) else 'interrupted'} (before any pair ran)"


def interrupted_code(exc: KeyboardInterrupt) -> int:
    """130 for Ctrl-C, 143 for SIGTERM."""
    return getattr(exc, "exit_code", 130)


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """While the block runs (in the main thread), the first SIGTERM raises Terminated there instead of killing the
    process at once, so cleanup runs (a later one is ignored, so the cleanup is not cut short; SIGKILL remains)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


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
