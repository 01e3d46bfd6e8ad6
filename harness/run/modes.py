"""The timing modes on the parent's side, one object per mode, mirroring the workers' measurement objects
(harness.worker.timing: ColdCuda, GraphCuda, HostClock): which mode a problem gets (`choose`), what the workers are
told (`spec`), how the reference is made ready for it (`prepare`), what one sample stands for (`calls_per_sample`),
where it falls back to (`fallback`) and what the record says of it (`record`).

Adding a mode touches several files: a class here and its row in MODES; its measurement object and its branch of
`measurement` in harness.worker.timing; its name in TIMING_MODES (harness.core.config), for a user to ask for it; its
row of DEFAULT_REL_SD (harness.run.between), else it gets the largest; and, for a mode whose sample holds more than
one call as graph's does, the branches on "graph" in harness.worker.sampler, harness.worker.arena and
harness.run.memory. The messages (harness.shared.messages) carry the mode by name: only the comment on
TimingSpec.mode, which lists the names, changes there."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar

from harness.core.config import Config
from harness.run.interleave import GraphFallback, Interleaver
from harness.shared.messages import TimingSpec
from harness.shared.stats import graph_replays


@dataclass(frozen=True)
class Mode:
    NAME: ClassVar[str] = ""
    STAGED: ClassVar[bool] = False               # inputs staged by the reference (harness.worker.arena) always
    FLUSHED: ClassVar[bool] = True               # a sample starts from flushed caches (with timing.flush_l2)
    error: str | None = None                     # why a faster mode was given up for this problem

    def spec(self, cfg: Config, variants: list[str]) -> TimingSpec:
        t = cfg.timing
        return TimingSpec(self.NAME, t.warmup, t.flush_l2, t.graph_calls, variants, self.replays())

    def replays(self) -> int:
        return 1

    def calls_per_sample(self, cfg: Config) -> int:
        return 1

    def prepare(self, inter: Interleaver, cfg: Config) -> "Mode":
        """Tell the reference worker (inter.reference) this mode and the Interleaver what a sample is; returns the
        mode the problem goes on with (graph: sized, or cold where the reference cannot be captured)."""
        inter.set_mode(inter.reference, self.NAME, self.replays())
        inter.use_mode(self.calls_per_sample(cfg), self.staged(cfg), self.flushed(cfg))
        return self

    def staged(self, cfg: Config) -> bool:
        """Whether the reference stages every sample's inputs (harness.worker.arena): always on the CPU path, on
        the GPU with timing.staged_gpu."""
        return self.STAGED or cfg.timing.staged_gpu

    def flushed(self, cfg: Config) -> bool:
        """Whether a sample starts from flushed caches (the flusher's whole write before each call)."""
        return bool(cfg.timing.flush_l2 and self.FLUSHED)

    def fallback(self, error: str) -> "Mode":
        return self

    def capped(self, graph_calls: int, why: str | None) -> "Mode":
        """This mode within the memory plan's calls per captured graph (harness.run.memory)."""
        return self

    def record(self, cfg: Config) -> dict[str, Any]:
        return {"mode": self.NAME, "l2_flush": self.flushed(cfg),
                "graph_replays": None, "graph_error": self.error, "graph_calls": None, "graph_calls_capped": None}


@dataclass(frozen=True)
class Cold(Mode):
    """One call a sample, the L2 flushed before it."""
    NAME: ClassVar[str] = "cold"


@dataclass(frozen=True)
class Host(Mode):
    """The CPU path: one call a sample on the host's clock, the CPU's caches flushed before it."""
    NAME: ClassVar[str] = "host"
    STAGED: ClassVar[bool] = True


@dataclass(frozen=True)
class Graph(Mode):
    """Calls too short for a cold sample: graph_calls calls captured in a CUDA graph, replayed `sized` times a
    sample, hot. The replays are sized once per problem from the reference's own replay time."""
    NAME: ClassVar[str] = "graph"
    FLUSHED: ClassVar[bool] = False
    sized: int | None = None
    calls: int | None = None            # calls per captured graph: timing.graph_calls, or the memory plan's cap
    capped_why: str | None = None

    def replays(self) -> int:
        return self.sized or 1

    def graph_calls(self, cfg: Config) -> int:
        return self.calls or cfg.timing.graph_calls

    def spec(self, cfg: Config, variants: list[str]) -> TimingSpec:
        return replace(super().spec(cfg, variants), graph_calls=self.graph_calls(cfg))

    def calls_per_sample(self, cfg: Config) -> int:
        return self.graph_calls(cfg) * self.replays()

    def prepare(self, inter: Interleaver, cfg: Config) -> Mode:
        calls = self.graph_calls(cfg)
        if self.sized is None:
            inter.set_mode(inter.reference, self.NAME, 1, calls)
            inter.use_mode(calls, False)
            try:
                sized = replace(self, sized=graph_replays(min(inter.reference_blocks(1)), calls))
            except GraphFallback as fell:               # the reference cannot be captured: cold for the problem
                return self.fallback(f"reference: {fell.error}").prepare(inter, cfg)
            return sized.prepare(inter, cfg)
        inter.set_mode(inter.reference, self.NAME, self.replays(), calls)
        inter.use_mode(self.calls_per_sample(cfg), self.staged(cfg), self.flushed(cfg))
        return self

    def capped(self, graph_calls: int, why: str | None) -> Mode:
        return replace(self, calls=graph_calls, capped_why=why)

    def fallback(self, error: str) -> Mode:
        return Cold(error=error)

    def record(self, cfg: Config) -> dict[str, Any]:
        return {**super().record(cfg), "graph_replays": self.replays(), "graph_calls": self.graph_calls(cfg),
                "graph_calls_capped": self.capped_why}


MODES: dict[str, type[Mode]] = {"cold": Cold, "graph": Graph, "host": Host}


def choose(cfg: Config, device: str, probe_ms: Any) -> Mode:
    """The problem's mode: host on the CPU; timing.mode where it names one; auto: graph for a reference call
    shorter than graph_below_ms (the cold probe), else cold."""
    t = cfg.timing
    if device == "cpu":
        return Host()
    if t.mode != "auto":
        return MODES[t.mode]()
    fast = isinstance(probe_ms, (int, float)) and probe_ms < t.graph_below_ms
    return Graph() if fast else Cold()


def initial(device: str) -> Mode:
    """The mode the reference worker starts in (its cold probe), before `choose` has the probe."""
    return Host() if device == "cpu" else Cold()
