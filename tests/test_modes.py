"""The timing modes on the parent's side (harness.run.modes): which mode a problem gets, what a sample stands for,
how graph mode sizes its replays and falls back, and what the record says."""
from __future__ import annotations

import dataclasses

from harness.core.config import Config, TimingConfig
from harness.run import modes
from harness.run.interleave import GraphFallback


def cfg(**timing) -> Config:
    return Config(timing=dataclasses.replace(TimingConfig(), **timing))


class FakeInterleaver:
    """Records what the mode tells it; reference_blocks answers with `block_ms` or raises GraphFallback."""

    def __init__(self, block_ms: float | None):
        self.block_ms, self.told, self.calls_per_sample, self.prepare = block_ms, [], None, None
        self.reference = "ref"

    def set_mode(self, side, mode, replays=1, graph_calls=0):
        assert side == self.reference
        self.told.append((mode, replays))

    def use_mode(self, calls_per_sample, prepared_apart, flushed=True):
        self.calls_per_sample, self.prepare, self.flushed = calls_per_sample, prepared_apart, flushed

    def reference_blocks(self, count):
        if self.block_ms is None:
            raise GraphFallback("reference", "capture failed")
        return [self.block_ms]


def test_choose_picks_host_on_the_cpu_and_graph_for_short_calls():
    assert isinstance(modes.choose(cfg(), "cpu", 0.001), modes.Host)
    assert isinstance(modes.choose(cfg(), "cuda", 0.05), modes.Graph)          # under graph_below_ms (0.1)
    assert isinstance(modes.choose(cfg(), "cuda", 0.5), modes.Cold)
    assert isinstance(modes.choose(cfg(), "cuda", None), modes.Cold)
    assert isinstance(modes.choose(cfg(mode="graph"), "cuda", 5.0), modes.Graph)


def test_graph_sizes_its_replays_once_then_a_sample_is_calls_times_replays():
    inter = FakeInterleaver(block_ms=0.02)
    mode = modes.Graph().prepare(inter, cfg(graph_calls=20, staged_gpu=False))
    assert isinstance(mode, modes.Graph) and mode.sized and mode.sized > 1
    assert inter.told == [("graph", 1), ("graph", mode.sized)]
    assert inter.calls_per_sample == 20 * mode.sized and inter.prepare is False
    assert inter.flushed is False                       # hot: a flusher (staged_gpu) only runs before each call
    staged = FakeInterleaver(block_ms=0.02)
    mode.prepare(staged, cfg(graph_calls=20, staged_gpu=True))
    assert staged.prepare is True                       # staged by the reference (timing.staged_gpu)
    again = FakeInterleaver(block_ms=None)              # sized already: no sizing block, no capture asked
    assert mode.prepare(again, cfg(graph_calls=20)) == mode and again.told == [("graph", mode.sized)]
    record = mode.record(cfg(graph_calls=20))
    assert record == {"mode": "graph", "l2_flush": False, "graph_replays": mode.sized, "graph_error": None,
                      "graph_calls": 20, "graph_calls_capped": None}
    capped = mode.capped(5, "each call holds 2 GiB")
    assert capped.calls_per_sample(cfg(graph_calls=20)) == 5 * mode.sized
    assert capped.record(cfg(graph_calls=20))["graph_calls_capped"] == "each call holds 2 GiB"


def test_a_reference_that_cannot_be_captured_goes_cold_for_the_problem_and_says_why():
    inter = FakeInterleaver(block_ms=None)
    mode = modes.Graph().prepare(inter, cfg())
    assert isinstance(mode, modes.Cold) and mode.error == "reference: capture failed"
    assert inter.told[-1] == ("cold", 1) and inter.calls_per_sample == 1
    assert mode.record(cfg())["graph_error"] == "reference: capture failed"


def test_host_mode_stages_cold_with_staged_gpu_and_cold_flushes_per_config():
    for mode, config, staged in ((modes.Host(), cfg(), True), (modes.Cold(), cfg(staged_gpu=False), False),
                                 (modes.Cold(), cfg(staged_gpu=True), True)):
        inter = FakeInterleaver(block_ms=1.0)
        mode.prepare(inter, config)
        assert inter.prepare is staged and inter.calls_per_sample == 1
    assert modes.Cold().record(cfg(flush_l2=False))["l2_flush"] is False
    assert modes.Host().spec(cfg(), ["eager"]).mode == "host"


def test_every_mode_a_user_may_ask_for_has_its_parent_side_object():
    """The one list of selectable modes (config, the CLI's choices) and the parent-side table agree: a mode added to
    harness.run.modes.MODES and to TIMING_MODES is selectable everywhere."""
    from harness.core.config import TIMING_MODES
    from harness.run.modes import MODES
    assert set(TIMING_MODES) - {"auto"} <= set(MODES)
    assert all(MODES[name].NAME == name for name in MODES)
