"""harness.worker.timing: graph replays, the CPU path's cache flush."""
from __future__ import annotations


def test_graph_replays_fill_a_sample_with_about_three_ms():
    from harness.worker.timing import GRAPH_MAX_REPLAYS, graph_replays
    assert graph_replays(0.0145, 20) == 10          # 20 calls of 0.0145 ms: 0.29 ms a replay
    assert graph_replays(0.2, 20) == 1              # already longer than the target
    assert graph_replays(1e-6, 20) == GRAPH_MAX_REPLAYS
    assert graph_replays(None, 20) == 1 and graph_replays(0.0, 20) == 1


def _sysfs_cache(root, caches):
    for i, (kind, size) in enumerate(caches):
        index = root / f"index{i}"
        index.mkdir(parents=True)
        (index / "type").write_text(kind + "\n")
        (index / "size").write_text(size + "\n")
    return str(root)


def test_cpu_cache_size_is_the_largest_data_cache_sysfs_lists(tmp_path):
    from harness.worker import timing
    tree = _sysfs_cache(tmp_path / "c", [("Data", "48K"), ("Instruction", "64M"), ("Unified", "1024K"),
                                         ("Unified", "32768K")])
    assert timing.cpu_cache_bytes(tree) == 32 << 20              # the instruction cache is not what a call's data hits
    assert timing.cpu_cache_bytes(str(tmp_path / "none")) == 0
    broken = _sysfs_cache(tmp_path / "b", [("Data", "lots"), ("Unified", "2M")])
    assert timing.cpu_cache_bytes(broken) == 2 << 20


def test_a_cpu_sample_flushes_the_caches_before_the_clock_starts():
    from harness.worker import timing
    flusher = timing.HostCacheFlusher(cache_bytes=1 << 20)
    assert flusher.bytes == 16 << 20                              # never less than 16 MiB
    assert timing.HostCacheFlusher(cache_bytes=1 << 30).bytes == 512 << 20
    assert timing.HostCacheFlusher(cache_bytes=0).bytes == 64 << 20   # sysfs silent: 32 MiB assumed
    events = []

    class Watched(timing.HostCacheFlusher):
        def __call__(self):
            super().__call__()
            events.append(("flush", int(self.buffer[-1])))

    meter = timing.measurement("cold", "cpu", Watched(cache_bytes=1 << 20), 1)
    assert isinstance(meter, timing.HostClock)
    for _ in range(2):
        meter.measure(lambda x: events.append(("call", None)), [])
    assert [e[0] for e in events] == ["flush", "call", "flush", "call"]
    assert events[0][1] != events[2][1]                           # each flush writes a new value: none is skipped
    assert isinstance(timing.make_flusher("cpu"), timing.HostCacheFlusher)
    assert timing.measurement("cold", "cpu", timing.make_flusher("cpu"), 1).flusher is not None
