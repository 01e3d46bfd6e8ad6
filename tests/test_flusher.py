"""harness.worker.flusher: the CPU path's cache flush, in a process of its own."""
from __future__ import annotations

from harness.worker import flusher


def test_every_flush_writes_a_new_value_from_every_core_of_the_slot(monkeypatch):
    visited: list[set[int]] = []
    monkeypatch.setattr(flusher.os, "sched_setaffinity", lambda pid, cores: visited.append(set(cores)))
    flush = flusher.Flush(1 << 20, [3, 5, 7])
    seen = set()
    for _ in range(3):
        assert flush() >= 0.0
        data = bytes(flush.buffer)
        assert set(data) == {flush.value}                 # the whole buffer, from the first core
        seen.add(flush.value)
    assert len(seen) == 3                                   # never the same write twice in a row
    assert visited == [{3}, {5}, {7}] * 3


def test_the_slot_cores_come_from_the_slot(monkeypatch):
    monkeypatch.setenv("KB_CPUS", "4,2,2")
    assert flusher.slot_cores() == [2, 4]
    monkeypatch.delenv("KB_CPUS")
    assert flusher.slot_cores()                             # else the cores this process may use
    assert flusher.flush_bytes(0) == 2 * flusher.ASSUMED_CACHE
    assert flusher.flush_bytes(1 << 30) == flusher.MAX_BYTES
