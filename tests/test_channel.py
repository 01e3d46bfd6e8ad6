"""harness.shared.channel, the private channel between the parent and a worker (issue 46, item 6): one JSON object
per line over real pipes. A torn frame (the writer gone mid-line) is ChannelClosed, a line over 16 MiB is refused
before the rest of it is read, anything but a JSON object is ChannelProtocolError, a deadline is ChannelTimeout;
and the token the parent hands out (harness.worker.common.Conn, harness.run.workerproc.Worker.recv) is what makes
a line a message. A few tests read from a regular file instead of a pipe: there each read returns exactly 1 MiB,
so where a chunk ends (which the test is about) does not depend on the scheduler."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from harness.shared import channel
from harness.shared.channel import (MAX_MESSAGE_BYTES, ChannelClosed, ChannelProtocolError, ChannelTimeout, LineReader,
                                    encode, write_all)

GENEROUS = 30.0                 # a deadline no healthy read comes near, so that a loaded box never fails a test
MIB = 1 << 20


class Pipe:
    """os.pipe() whose ends the test may close early; both closed at the end."""

    def __init__(self) -> None:
        self.r, self.w = os.pipe()
        self.open = {self.r, self.w}

    def close(self, fd: int) -> None:
        if fd in self.open:
            self.open.discard(fd)
            os.close(fd)

    def close_all(self) -> None:
        for fd in list(self.open):
            self.close(fd)


@pytest.fixture
def pipe():
    p = Pipe()
    yield p
    p.close_all()


class Feeder(threading.Thread):
    """Writes `pieces` to `fd` from a thread (a pipe holds 64 KiB; the reader drains it), counting what went in."""

    def __init__(self, fd: int, pieces, close_after: Pipe | None = None):
        super().__init__(daemon=True)
        self.fd, self.pieces, self.close_after = fd, pieces, close_after
        self.sent, self.broken = 0, False

    def run(self) -> None:
        try:
            for piece in self.pieces:
                write_all(self.fd, piece)
                self.sent += len(piece)
        except BrokenPipeError:
            self.broken = True
        if self.close_after is not None:
            self.close_after.close(self.fd)


def _deadline() -> float:
    return time.monotonic() + GENEROUS


def _file_reader(tmp_path, data: bytes) -> tuple[LineReader, int]:
    path = tmp_path / "stream"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    return LineReader(fd), fd


# --- a good round trip ---------------------------------------------------------------------------------------------

def test_messages_round_trip_in_order_whether_written_together_or_byte_by_byte(pipe):
    messages = [{"token": "t", "kind": "result", "values": [1.5, -2, 3e-300], "nested": {"ü": "ok", "n": None}},
                {"op": "exit"}, {"big": 2**70, "empty": [], "flag": True}]
    reader = LineReader(pipe.r)
    write_all(pipe.w, b"".join(encode(m) for m in messages[:2]))          # two in one write
    assert reader.read(_deadline()) == messages[0]
    assert reader.read(_deadline()) == messages[1]
    for i in range(len(data := encode(messages[2]))):                      # one in as many writes as it has bytes
        write_all(pipe.w, data[i:i + 1])
    assert reader.read(_deadline()) == messages[2]


def test_a_large_message_crosses_a_pipe_whole(pipe):
    message = {"kind": "values", "data": "x" * (4 * MIB), "tail": list(range(1000))}
    feeder = Feeder(pipe.w, [encode(message)])
    feeder.start()
    assert LineReader(pipe.r).read(_deadline()) == message
    feeder.join(GENEROUS)
    assert feeder.sent == len(encode(message))


def test_encode_is_one_line_of_json_and_nan_and_inf_become_strings():
    data = encode({"a": float("nan"), "b": [float("inf"), (float("-inf"), 1.0)], "c": {"d": float("nan")}, "s": "x\ny"})
    assert data.endswith(b"\n") and data.count(b"\n") == 1                 # a newline in a string is escaped
    assert json.loads(data) == {"a": "nan", "b": ["inf", ["-inf", 1.0]], "c": {"d": "nan"}, "s": "x\ny"}
    assert json.loads(encode({"x": 0.1, "t": (1, 2)})) == {"x": 0.1, "t": [1, 2]}


def test_write_all_finishes_after_short_writes(pipe, monkeypatch):
    real_write, calls = os.write, []

    def short_write(fd, data):                                              # what a pipe near full does
        calls.append(len(data))
        return real_write(fd, bytes(data[:3]))

    monkeypatch.setattr(channel.os, "write", short_write)
    write_all(pipe.w, encode({"kind": "result", "n": 12345}))
    monkeypatch.undo()
    assert len(calls) > 5
    assert LineReader(pipe.r).read(_deadline()) == {"kind": "result", "n": 12345}


def test_write_all_to_a_closed_reader_is_broken_pipe(pipe):
    pipe.close(pipe.r)
    with pytest.raises(BrokenPipeError):                  # Worker.send turns this into "the worker is gone"
        write_all(pipe.w, encode({"op": "exit"}))


# --- a torn frame --------------------------------------------------------------------------------------------------

def test_a_frame_torn_by_the_writer_closing_is_channel_closed_not_a_message(pipe):
    reader = LineReader(pipe.r)
    write_all(pipe.w, encode({"kind": "ok"}) + b'{"kind": "result", "values": [1.0, 2.')
    pipe.close(pipe.w)
    assert reader.read(_deadline()) == {"kind": "ok"}     # the whole line before the tear still arrives
    with pytest.raises(ChannelClosed):
        reader.read(_deadline())
    with pytest.raises(ChannelClosed):                    # and again: the torn bytes never become a message
        reader.read(_deadline())


def test_a_closed_channel_with_nothing_in_it_is_channel_closed(pipe):
    pipe.close(pipe.w)
    with pytest.raises(ChannelClosed):
        LineReader(pipe.r).read(_deadline())


def test_a_worker_killed_mid_frame_is_channel_closed(pipe):
    """A real process holding the write end writes half a line and is killed: the parent's read ends with
    ChannelClosed (not a timeout, not a message), once the parent's own copy of the write end is closed."""
    code = ("import os, signal, sys; fd = int(sys.argv[1]); os.write(fd, b'{\"token\": \"t\", \"kind\": \"res');"
            "os.kill(os.getpid(), signal.SIGKILL)")
    child = subprocess.Popen([sys.executable, "-c", code, str(pipe.w)], pass_fds=(pipe.w,))
    pipe.close(pipe.w)
    try:
        with pytest.raises(ChannelClosed):
            LineReader(pipe.r).read(_deadline())
    finally:
        child.kill()
        child.wait(GENEROUS)
    assert child.returncode == -9


# --- an oversized frame --------------------------------------------------------------------------------------------

def test_an_oversized_frame_is_refused_after_at_most_a_chunk_past_the_limit(pipe):
    """64 MiB without a newline: refused once 16 MiB are in, and the rest is never read (the writer stays blocked
    on the full pipe until the reader's end is closed)."""
    piece = b"x" * MIB
    feeder = Feeder(pipe.w, [piece] * 64)
    feeder.start()
    reader = LineReader(pipe.r)
    with pytest.raises(ChannelProtocolError, match="larger than 16 MiB"):
        reader.read(_deadline())
    assert len(reader.buffer) <= MAX_MESSAGE_BYTES + MIB                    # one read past the limit at most
    pipe.close(pipe.r)
    feeder.join(GENEROUS)
    assert feeder.broken and not feeder.is_alive()
    assert feeder.sent <= MAX_MESSAGE_BYTES + 3 * MIB                       # read + what a pipe holds + one piece


def test_an_oversized_frame_from_a_file_stops_reading_at_the_limit(tmp_path):
    reader, fd = _file_reader(tmp_path, b"[" + b"0," * (20 * MIB) + b"0]\n")
    try:
        with pytest.raises(ChannelProtocolError, match="larger than 16 MiB"):
            reader.read(_deadline())
        assert os.lseek(fd, 0, os.SEEK_CUR) <= MAX_MESSAGE_BYTES + MIB
    finally:
        os.close(fd)


def test_the_limit_is_on_the_line_not_on_the_chunk_that_ends_it(tmp_path):
    """A line of exactly 16 MiB is a message; one byte more is not. The first line here ends inside a chunk that
    also holds the start of the next message and takes the buffer past 16 MiB: the line is still accepted (the
    check once counted the next message's bytes against this one)."""
    def line(n: int, key: str) -> bytes:                 # a JSON object line of exactly n bytes, without its newline
        head = b'{"%s":"' % key.encode()
        return head + b"y" * (n - len(head) - 2) + b'"}'

    small, exact = encode({"kind": "first"}), line(MAX_MESSAGE_BYTES, "exact")
    reader, fd = _file_reader(tmp_path, small + exact + b"\n" + line(2 * MIB, "next") + b"\n"
                              + line(MAX_MESSAGE_BYTES + 1, "over") + b"\n")
    try:
        assert reader.read(_deadline()) == {"kind": "first"}
        got = reader.read(_deadline())
        assert list(got) == ["exact"] and len(encode(got)) == MAX_MESSAGE_BYTES + 1
        assert list(reader.read(_deadline())) == ["next"]
        with pytest.raises(ChannelProtocolError, match="larger than 16 MiB"):
            reader.read(_deadline())
    finally:
        os.close(fd)


# --- garbage -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("line, why", [
    (b"not json at all", "not JSON"),
    (b"\xff\xfe\x00\x80 binary", "not JSON"),                  # not UTF-8
    (b"", "not JSON"),                                         # an empty line
    (b'{"token": "t", "kind": "res', "not JSON"),              # a frame cut short by a newline
    (b'{"a": 1} trailing', "not JSON"),
    (b"1" * 5000, "not JSON"),                                 # an int over Python's digit limit
    (b"[" * 100_000, "not JSON"),                              # nested past the parser's recursion limit
    (b'{"a":' * 100_000, "not JSON"),
    (b"[1, 2, 3]", "not an object"),
    (b'"token"', "not an object"),
    (b"null", "not an object"),
    (b"42", "not an object"),
], ids=["text", "not-utf8", "empty", "cut-short", "trailing", "huge-int", "deep-array", "deep-object", "array",
        "string", "null", "number"])
def test_garbage_is_a_protocol_error(pipe, line, why):
    feeder = Feeder(pipe.w, [line + b"\n"])
    feeder.start()
    with pytest.raises(ChannelProtocolError, match=why):
        LineReader(pipe.r).read(_deadline())
    feeder.join(GENEROUS)


# --- deadlines -----------------------------------------------------------------------------------------------------

def test_no_message_before_the_deadline_is_a_timeout_and_never_an_early_one(pipe):
    started = time.monotonic()
    with pytest.raises(ChannelTimeout):
        LineReader(pipe.r).read(started + 0.2)
    assert 0.19 <= time.monotonic() - started < GENEROUS


def test_a_passed_deadline_still_reads_what_is_already_there(pipe):
    reader = LineReader(pipe.r)
    with pytest.raises(ChannelTimeout):
        reader.read(time.monotonic() - 1)
    write_all(pipe.w, encode({"kind": "late"}))
    assert reader.read(time.monotonic() - 1) == {"kind": "late"}


def test_a_line_trickling_in_without_an_end_times_out_at_the_deadline(pipe):
    """Bytes keep coming but never a newline: the deadline is absolute, not renewed by each chunk."""
    stop = threading.Event()

    def trickle():
        write_all(pipe.w, b'{"kind": "')
        while not stop.wait(0.02):
            write_all(pipe.w, b"a")

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    started = time.monotonic()
    try:
        with pytest.raises(ChannelTimeout):
            LineReader(pipe.r).read(started + 0.3)
        assert time.monotonic() - started < GENEROUS / 3      # the trickle would go on until stopped
    finally:
        stop.set()
        thread.join(GENEROUS)


def test_no_deadline_waits_for_the_message(pipe):
    timer = threading.Timer(0.1, lambda: write_all(pipe.w, encode({"kind": "eventually"})))
    timer.start()
    try:
        assert LineReader(pipe.r).read(None) == {"kind": "eventually"}
    finally:
        timer.cancel()


# --- the token -----------------------------------------------------------------------------------------------------

def test_the_worker_takes_the_parents_token_and_signs_every_reply_with_it():
    from harness.shared import messages as m
    from harness.worker.common import Conn
    cmd, res = Pipe(), Pipe()
    try:
        conn = Conn(cmd.r, res.w)
        write_all(cmd.w, encode({"token": "secret-1", "op": "job", "n": 1}))
        assert conn.recv() == {"op": "job", "n": 1}                   # the token is not part of the message
        conn.with_next_reply(sandbox={"mode": "off"})              # a confined worker's report, on its first reply
        conn.reply(m.Failed("runtime_error", "boom"))
        conn.reply(m.Flushed(2.5))
        reader = LineReader(res.r)
        assert reader.read(_deadline()) == {"token": "secret-1", "kind": "failed", "status": "runtime_error",
                                            "error": "boom", "detail": None, "sandbox": {"mode": "off"}}
        assert reader.read(_deadline()) == {"token": "secret-1", "kind": "flushed", "ms": 2.5}
    finally:
        cmd.close_all()
        res.close_all()


def _parent_side(fd: int, token: str):
    """A harness.run.workerproc.Worker around a pipe, without a process: recv() alone, kill() recorded."""
    from harness.run.workerproc import Worker
    worker = Worker.__new__(Worker)
    worker.reader, worker.token, worker.kills = LineReader(fd), token, []
    worker.kill = lambda: worker.kills.append(True)
    return worker


@pytest.mark.parametrize("sent, accepted", [
    ({"token": "right", "kind": "result", "v": 1}, True),
    ({"token": "wrong", "kind": "result", "v": 1}, False),          # a forged record
    ({"kind": "result", "v": 1}, False),                             # no token at all
    ({"token": None, "kind": "result", "v": 1}, False),
])
def test_the_parent_accepts_only_messages_with_its_token(pipe, sent, accepted):
    from harness.run.workerproc import WorkerExit
    worker = _parent_side(pipe.r, "right")
    write_all(pipe.w, encode(sent))
    if accepted:
        assert worker.recv(_deadline()) == {"kind": "result", "v": 1} and not worker.kills
        return
    with pytest.raises(WorkerExit) as caught:
        worker.recv(_deadline())
    assert caught.value.kind == "protocol" and "token" in caught.value.detail and worker.kills


def test_the_parent_turns_garbage_and_silence_into_a_killed_worker(pipe):
    from harness.run.workerproc import WorkerExit
    worker = _parent_side(pipe.r, "right")
    Feeder(pipe.w, [b"[" * 100_000 + b"\n"]).start()                     # more than a pipe holds
    with pytest.raises(WorkerExit) as caught:
        worker.recv(_deadline())
    assert caught.value.kind == "protocol" and len(worker.kills) == 1
    with pytest.raises(WorkerExit) as caught:
        worker.recv(time.monotonic() + 0.05)
    assert caught.value.kind == "timeout" and len(worker.kills) == 2
