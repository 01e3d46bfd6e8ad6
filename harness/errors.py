"""The harness's exceptions. Library code raises these; only harness.cli turns them into messages and exit codes."""
import argparse


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
