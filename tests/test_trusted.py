"""Commit, then check (harness.shared.points, harness.run.peek, harness.run.trusted): the trusted side reads an output
where its worker says it lies, at positions drawn after it was handed over, from the worker's memory as it is."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch

from harness.run import peek
from harness.shared import points
from harness.run.trusted import slots_for

CHILD = textwrap.dedent("""
    import json, sys, torch
    t = torch.arange(60, dtype=torch.float32).reshape(6, 10).t()[2:, :]     # strided, with an offset
    b = torch.arange(12, dtype=torch.float32).to(torch.bfloat16)
    print(json.dumps({"t": [t.data_ptr(), list(t.shape), list(t.stride())],
                      "b": [b.data_ptr(), list(b.shape), list(b.stride())],
                      "values": t.reshape(-1).tolist(), "bvalues": b.float().tolist()}), flush=True)
    sys.stdin.read()
""")


@pytest.fixture
def child():
    proc = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        yield proc, json.loads(proc.stdout.readline())
    finally:
        proc.kill()
        proc.wait()


def test_the_parent_reads_a_child_output_where_it_lies(child):
    proc, info = child
    if peek.readable() is not None:
        pytest.skip(f"process_vm_readv is refused here: {peek.readable()}")
    address, shape, strides = info["t"]
    flat = points.tensor_positions(12345, 0, points.numel(shape), 40)
    got = peek.read_points(proc.pid, "torch.float32", shape, strides, address, flat)
    assert got == [info["values"][i] for i in flat]
    address, shape, strides = info["b"]
    assert peek.read_points(proc.pid, "torch.bfloat16", shape, strides, address, [0, 5, 11]) == [0.0, 5.0, 11.0]


def test_an_address_that_is_not_mapped_is_a_failed_read(child):
    proc, _ = child
    if peek.readable() is not None:
        pytest.skip("process_vm_readv is refused here")
    with pytest.raises(peek.PeekError, match="cannot read the worker's memory"):
        peek.read_points(proc.pid, "torch.float32", [4], [1], 16, [0, 1])


@pytest.mark.parametrize("make", [
    lambda: torch.randn(5, 7),
    lambda: torch.randn(6, 4).t(),
    lambda: torch.randn(10, 10)[2:, 3:],
    lambda: torch.randn(3, 1).expand(3, 5),
    lambda: torch.randn(2, 3, 4).permute(2, 0, 1)[:, :, ::2],
])
def test_offsets_follow_the_strides_as_torch_does(make):
    t = make()
    flat = points.tensor_positions(7, 0, t.numel(), 64)
    offsets = points.offsets(list(t.shape), list(t.stride()), flat)
    storage = torch.tensor([], dtype=t.dtype).set_(t.untyped_storage())
    got = [float(storage[t.storage_offset() + o]) for o in offsets]
    assert got == t.reshape(-1)[torch.tensor(flat)].tolist()


def test_positions_are_fixed_by_the_seed_and_differ_per_tensor_and_slot():
    assert points.output_positions(5, 0, 0, 10**6) == points.output_positions(5, 0, 0, 10**6)
    assert points.output_positions(5, 0, 0, 10**6) != points.output_positions(5, 0, 1, 10**6)
    assert points.output_positions(5, 0, 0, 10**6) != points.output_positions(5, 3, 0, 10**6)
    assert len(points.output_positions(5, 0, 0, 10**6)) == points.CHECK_POINTS
    assert len(points.output_positions(5, 0, 0, 10)) == 10 and points.output_positions(5, 0, 0, 0) == []


def test_graph_samples_read_the_last_captured_call_two_drawn_and_any_one_whole():
    """Points of the last captured call and two others drawn at random; the one listed last (read whole where the
    sample is checked whole) is any captured call, not only the last."""
    seen, whole = set(), set()
    for seed in range(400):
        slots = slots_for(seed, 20)
        assert 19 in slots and len(set(slots)) == len(slots) and 3 <= len(slots) <= 4
        assert slots[:-1] == sorted(slots[:-1]) and slots == slots_for(seed, 20)
        seen.update(slots)
        whole.add(slots[-1])
    assert seen == set(range(20)) and whole == set(range(20))   # every captured call can be read, and whole
    assert slots_for(1, 1) == [0]


def test_whole_checks_are_spread_over_the_whole_pair():
    """FULL_CHECKS among the rounds every pair runs, then one in each doubling window up to max_rounds: a check may
    come in any round of a long pair, at any of a round's counted samples (both halves: 2 x 4 here), and there are
    only about log2(max_rounds / min_rounds) more."""
    import random
    from harness.run.interleave import FULL_CHECKS, full_check_samples
    rounds_seen, places_seen = set(), set()
    for seed in range(2000):
        chosen = full_check_samples(random.Random(seed), 10, 200, 8)
        early = [r for r, _ in chosen if r < 10]
        assert len(early) == FULL_CHECKS and all(0 <= i < 8 for _, i in chosen)
        windows = [(10, 20), (20, 40), (40, 80), (80, 160), (160, 200)]
        assert all(sum(lo <= r < hi for r, _ in chosen) == 1 for lo, hi in windows)
        rounds_seen.update(r for r, _ in chosen)
        places_seen.update(i for _, i in chosen)
    assert rounds_seen >= set(range(10, 200, 7))        # late rounds are as likely a place as any in their window
    assert places_seen == set(range(8))                 # the backward half's samples as well as the forward's


def test_a_pair_cut_short_by_the_time_cap_still_checks_whole_and_profiles():
    """A slow problem's pair may end by the time cap after two rounds, before the rounds its whole checks and
    profiled calls were drawn among (red team, 2026-11-29: bf16 only once timed, 3 runs of 3 with no whole check).
    The round the parent expects to be the last takes the missing ones, at places drawn from its secret."""
    import random
    from harness.run.interleave import FULL_CHECKS, likely_last, top_up
    from harness.run.paired import StopRule
    rule = StopRule(min_rounds=10, max_rounds=200, target_rel_ci=0.01, max_seconds=8.0)
    assert not likely_last(0.0, 0, rule) and not likely_last(3.0, 3, rule)
    assert likely_last(4.0, 1, rule) and likely_last(7.5, 10, rule)
    for seed in range(200):
        draw = random.Random(seed)
        chosen = {(5, 1), (8, 3)}                        # drawn among the first ten rounds; round 1 is the last
        top_up(chosen, 1, range(4), FULL_CHECKS, draw)
        assert len({x for x in chosen if x[0] == 1}) == FULL_CHECKS and {(5, 1), (8, 3)} <= chosen
        profiled = {(0, 1), (7, 0), (9, 1)}
        top_up(profiled, 1, (0, 1), 3, draw)
        assert {x for x in profiled if x[0] <= 1} == {(0, 1), (1, 0), (1, 1)}
        kept = {(0, 2), (1, 3)}                          # enough already: nothing added
        top_up(kept, 1, range(4), FULL_CHECKS, draw)
        assert kept == {(0, 2), (1, 3)}


def test_a_raw_copy_round_trips_through_the_tensor_file(tmp_path):
    from harness.shared.tensorfile import read_tensors, write_raw
    t = torch.randn(6, 4).t()
    span = (sum((d - 1) * s for d, s in zip(t.shape, t.stride())) + 1)
    data = bytes(t.untyped_storage())[t.storage_offset() * 4:(t.storage_offset() + span) * 4]
    path = write_raw([("float32", span, data)], str(tmp_path / "x.kbt"))
    (flat,) = read_tensors(path, "cpu")
    assert torch.equal(flat.as_strided(t.shape, t.stride()), t)


def test_captured_calls_that_hand_back_one_buffer_are_named():
    """Graph mode: a sample's captured calls each hand back an output of their own; one buffer kept by the model and
    written by every call (reuse_buffer) is named as such, not left to read as values that differ."""
    import base64
    from harness.run.trusted import shared_between_calls
    handle = base64.b64encode(b"a" * 64).decode()
    other = base64.b64encode(b"b" * 64).decode()

    def out(address: int, at: str = handle, shape=(4, 4)) -> dict:
        return {"dtype": "torch.float32", "shape": list(shape), "strides": [shape[1], 1], "address": address,
                "handle": at}
    # four calls, one buffer: the same allocation at the same offset
    found = shared_between_calls([[out(0)], [out(0)], [out(0)], [out(0)]])
    assert found is not None and found.startswith("captured calls 0 and 1 handed back the same memory")
    # outputs of their own: one allocation at offsets 64 bytes apart (4 x 4 floats), or other allocations
    assert shared_between_calls([[out(0)], [out(64)], [out(128)]]) is None
    assert shared_between_calls([[out(0)], [out(0, other)]]) is None
    # overlapping, not equal: the second starts inside the first
    assert shared_between_calls([[out(0)], [out(32)]]) is not None
    # two outputs of one call may share an allocation (the check is between calls); host outputs have no handle
    assert shared_between_calls([[out(0), out(64)], [out(128), out(192)]]) is None
    assert shared_between_calls([[out(0, "")], [out(0, "")]]) is None


def test_a_shared_buffer_in_graph_mode_is_the_reason_timed_outputs_fail():
    from harness.run import defenses
    from harness.run.interleave import CANDIDATE, Collected
    from harness.run.trusted import Checked
    out = Collected()
    out.checks[1] = {CANDIDATE: Checked([1.0], [[1]]), "reference": Checked([2.0], [[1]])}
    assert "values read" in defenses.check_timed_outputs(out, 1e-4, 1e-4)[2]
    out.shared_outputs = "captured calls 0 and 1 handed back the same memory"
    assert defenses.check_timed_outputs(out, 1e-4, 1e-4)[2] == out.shared_outputs
