"""The harness's exceptions. Library code raises these; only harness.cli turns them into messages and exit codes."""


class HarnessError(Exception):
    """Base class for errors the harness reports as one line."""

    exit_code = 1


class UsageError(HarnessError):
    """A bad flag, config value or input file: the user can fix it. Exit code 2."""

    exit_code = 2


class InputError(UsageError):
    """A malformed problem, candidate or config file, named in the message."""
