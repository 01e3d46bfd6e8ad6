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


def test_a_problems_flusher_starts_beside_its_references_setup(tmp_path, monkeypatch):
    """Issue 44 item 8: the pairs' flusher is started with the reference's job, so that its start (on the GPU a CUDA
    context of its own) runs beside the reference's setup: it has its job before the reference is ready, where it
    had been started at the problem's first pair, after it (workers' stage lines: KB_TRACE)."""
    import re
    from conftest import FIXTURES, run_cli, write_config
    monkeypatch.setenv("KB_TRACE", "1")
    config = write_config(tmp_path, FIXTURES / "tree")
    done = run_cli("--config", str(config), "--problem", "*001_linear_relu", "--candidate", "*/incorrect", "--json")
    assert '"incorrect"' in done.stdout, done.stderr[-2000:]

    def stage(pattern: str, what: str) -> float:
        log = next((tmp_path / "results").glob(f"*/logs/{pattern}"))
        hit = re.search(rf"kb-harness: trace (\d+\.\d+) {what}\b", log.read_text())
        assert hit, (log, what)
        return float(hit.group(1))

    assert stage("*001_linear_relu__flusher.log", "flusher job") < stage("*001_linear_relu__reference.log",
                                                                        "reference ready")
