"""harness.worker.arena: the CPU path's inputs, written by the stager (the reference) into a worker's arena and
viewed there by the executor, in separate mappings of one memfd as in two processes."""
from __future__ import annotations

import os

import pytest
import torch

from harness.run.workerproc import new_arena
from harness.shared import messages as m
from harness.worker import arena


@pytest.fixture
def staged(monkeypatch):
    fd = new_arena()
    monkeypatch.setenv(arena.ARENA_VAR, str(fd))
    inputs = {"sets": []}

    def draw(seed: int) -> list:
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(4, 6, generator=g)
        made = [x.t(), torch.randn(3, generator=g).expand(2, 3), 7, (1, 2), torch.arange(5)]
        inputs["sets"].append(made)
        return [made]                   # the sample's input sets: one (graph mode on the GPU: one per captured call)

    stager = arena.Stager(draw, defenses=True)
    stager.attach("reference", None)
    yield stager, arena.Executor(), inputs
    os.close(fd)


def test_the_executor_sees_what_the_stager_wrote_with_its_strides(staged):
    stager, executor, inputs = staged
    for seed in (1, 2):
        layout, mutated = stager.stage("reference", seed)
        assert not mutated
        seen = executor.views(layout)
        drawn = inputs["sets"][-1]
        assert torch.equal(seen[0], drawn[0]) and seen[0].stride() == (1, 6)    # a transposed input stays so
        assert torch.equal(seen[1], drawn[1]) and seen[1].is_contiguous()        # an expanded one is written whole
        assert seen[2:4] == [7, (1, 2)] and torch.equal(seen[4], drawn[4])
        assert all(e.offset % arena.ALIGN == 0 for e in layout.entries if e.dtype)


def test_a_change_to_the_inputs_is_seen_at_the_next_stage_or_check(staged):
    stager, executor, _ = staged
    layout, _ = stager.stage("reference", 1)
    executor.views(layout)[0].mul_(2)
    assert stager.stage("reference", 2)[1] is True             # the previous sample's inputs had changed
    assert stager.check("reference") is False                   # this one's are as written (then forgotten)
    layout, _ = stager.stage("reference", 3)
    executor.views(layout)[4][0] += 1                           # one element of an integer input
    assert stager.check("reference") is True


def test_each_call_gets_fresh_tensor_objects(staged):
    stager, executor, _ = staged
    layout, _ = stager.stage("reference", 1)
    first = executor.views(layout)
    first[0].t_()                                               # a call that transposes its input in place
    assert executor.views(layout)[0].shape == (6, 4)


def test_an_arena_smaller_than_its_layout_and_an_unplaceable_input_are_errors(staged):
    stager, executor, _ = staged
    layout, _ = stager.stage("reference", 1)
    with pytest.raises(arena.ArenaError, match="the layout"):
        executor.views(m.Layout(layout.entries, layout.bytes * 64))
    with pytest.raises(arena.ArenaError, match="item 0 is a object"):
        arena.layout_of([object()])


def test_the_arena_cannot_be_cut_under_the_stager(staged):
    stager, _, _ = staged
    stager.stage("reference", 1)
    fd = int(os.environ[arena.ARENA_VAR])
    with pytest.raises(PermissionError):
        os.ftruncate(fd, 0)                                     # sealed against shrinking
