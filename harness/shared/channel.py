"""The private channel between the parent and a worker: two pipes the parent creates, one JSON object per line.

The worker's stdout and stderr go to a log file; only what arrives on the result pipe, carrying the token the
parent handed out, can become a record.
"""
from __future__ import annotations

import json
import math
import os
import select
import time
from typing import Any

MAX_MESSAGE_BYTES = 16 * 1024 * 1024


class ChannelClosed(Exception):
    """The other side closed its end (the worker exited or died)."""


class ChannelTimeout(Exception):
    """No message arrived before the deadline."""


class ChannelProtocolError(Exception):
    """Something arrived that is not a valid message from the harness."""


def clean_json(value: Any) -> Any:
    """JSON has no NaN/Inf: encode them as strings so the line stays valid JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: clean_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean_json(v) for v in value]
    return value


def encode(message: dict[str, Any]) -> bytes:
    try:                                    # the common case, finite numbers only: no walk over the message
        text = json.dumps(message, separators=(",", ":"), allow_nan=False)
    except ValueError:
        text = json.dumps(clean_json(message), separators=(",", ":"))
    return (text + "\n").encode()


class LineReader:
    """Reads newline-terminated JSON objects from a file descriptor with a deadline."""

    def __init__(self, fd: int):
        self.fd = fd
        self.buffer = bytearray()     # grown in place and scanned once: reading a line is linear in its length

    def read(self, deadline: float | None) -> dict[str, Any]:
        scanned = 0
        while (end := self.buffer.find(b"\n", scanned)) < 0:
            scanned = len(self.buffer)
            if scanned > MAX_MESSAGE_BYTES:             # refused before the rest of it is read
                raise ChannelProtocolError("message larger than 16 MiB")
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self.fd], [], [], remaining)
            if not ready:
                raise ChannelTimeout()
            chunk = os.read(self.fd, 1 << 20)
            if not chunk:
                raise ChannelClosed()
            self.buffer += chunk
        if end > MAX_MESSAGE_BYTES:                 # this line alone, not the next message read in the same chunk
            raise ChannelProtocolError("message larger than 16 MiB")
        line = self.buffer[:end]
        del self.buffer[:end + 1]
        try:
            message = json.loads(line)
        except (ValueError, RecursionError):        # RecursionError: JSON nested deeper than the parser's stack
            raise ChannelProtocolError("a line that is not JSON") from None
        if not isinstance(message, dict):
            raise ChannelProtocolError("a JSON value that is not an object")
        return message


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
