"""Outputs read from memory (harness.worker.rawread): the same values torch reads for every layout and dtype a
candidate may return, and not the values a patched torch shows."""
from __future__ import annotations

import pytest
import torch

from harness.worker import rawread


POINTS = 32


@pytest.fixture(scope="module", autouse=True)
def bound():
    rawread.bind(cuda=False)


def _torch_reads(t: torch.Tensor, seed: int) -> list[float]:
    idx = torch.tensor(rawread.positions(seed, t.numel(), min(POINTS, t.numel())))
    picked = t.reshape(-1)[idx]
    return (picked.real if picked.is_complex() else picked).to(torch.float64).tolist()


@pytest.mark.parametrize("make", [
    lambda: torch.randn(5, 7),
    lambda: torch.randn(6, 4).t(),                          # transposed
    lambda: torch.randn(10, 10)[2:, 3:],                    # a view with a storage offset
    lambda: torch.randn(3, 1).expand(3, 5),                 # stride 0
    lambda: torch.randn(2, 3, 4).permute(2, 0, 1)[:, :, ::2],
    lambda: torch.randn(3, 4).to(torch.bfloat16),
    lambda: torch.randn(2, 3, dtype=torch.float16),
    lambda: torch.randn(4, dtype=torch.float64),
    lambda: torch.randint(-9, 9, (4, 5)),
    lambda: torch.randint(0, 255, (7,), dtype=torch.uint8),
    lambda: torch.rand(5) > 0.5,
    lambda: torch.randn(4, dtype=torch.complex64),
    lambda: torch.tensor(3.5),                              # a scalar
    lambda: torch.randn(700, 700),                          # positions over more than SPAN_BYTES: one read each
])
def test_raw_values_are_what_torch_reads(make):
    t = make()
    for seed in (0, 12345, 2**40 + 7):
        assert rawread.read([t], seed, POINTS) == _torch_reads(t, seed)


def test_several_outputs_and_empty_ones():
    a, b, empty = torch.randn(3, 3), torch.randn(100), torch.empty(0, 4)
    got = rawread.read([a, empty, b], 9, POINTS)
    assert got == _torch_reads(a, 9) + _torch_reads(b, 9 + 7919 * 2)
    assert len(got) == 9 + POINTS


def test_positions_are_fixed_by_the_seed_and_spread():
    assert rawread.positions(5, 1000, 32) == rawread.positions(5, 1000, 32)
    assert rawread.positions(5, 1000, 32) != rawread.positions(6, 1000, 32)
    spread = rawread.positions(1, 10**6, 32)
    assert all(0 <= i < 10**6 for i in spread) and len(set(spread)) == 32


def test_patched_torch_does_not_change_what_is_read(monkeypatch):
    t = torch.zeros(8, 8)
    monkeypatch.setattr(torch.Tensor, "__getitem__", lambda self, index: torch.ones(32))
    monkeypatch.setattr(torch.Tensor, "data_ptr", lambda self: 0)
    monkeypatch.setattr(torch.Tensor, "stride", lambda self, *a: (0, 0))
    assert rawread.read([t], 3, POINTS) == [0.0] * 32


def test_an_output_larger_than_its_storage_is_refused():
    t = torch.randn(64)
    view = t[32:]
    t.untyped_storage().resize_(16)                        # the view now claims bytes its storage no longer has
    with pytest.raises(rawread.RawReadError, match="outside its storage"):
        rawread.read([view], 1, POINTS)


def test_values_compare_with_nan_equal_and_seeds_are_fresh():
    nan = float("nan")
    assert rawread.same([1.0, nan, -0.0], [1.0, nan, 0.0])
    assert not rawread.same([1.0, nan], [1.0, 2.0]) and not rawread.same([1.0], [1.0, 1.0])
    assert len({rawread.fresh_seed() for _ in range(100)}) == 100


def test_a_host_output_of_a_cuda_worker_is_refused_by_name(monkeypatch):
    """A GPU candidate whose output lies in host memory (torch.empty without a device, filled later by a thread):
    the trusted side maps only device memory, so export says which output and why, and the trials fall back to a
    file and the worker's own checks (background_thread: `unsynchronized_work`), instead of a handle of 0 bytes."""
    monkeypatch.setattr(rawread, "_device_outputs", True)
    with pytest.raises(rawread.RawReadError, match="output 1 lies in host memory"):
        rawread.export([torch.empty(0), torch.ones(3)])
    monkeypatch.setattr(rawread, "_device_outputs", False)
    assert rawread.export([torch.ones(3)])[0]["handle"] == ""            # the CPU path: the host address
