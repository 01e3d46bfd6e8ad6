"""The reference worker's view of a GPU candidate's timed outputs: CUDA IPC mappings of the candidate's memory.

After each candidate sample the candidate's reply says where each output lies (messages.Exported: the IPC handle
of the allocation and the offset in it); the parent stops the candidate and asks the reference (ReadRequest) to
read the values at positions it has only now drawn (harness.shared.points), or the whole output. The reference maps
the allocation with the CUDA driver (bound before anything else ran in it; no candidate code ever runs here) and
wraps it in a tensor through `__cuda_array_interface__`, so its own torch reads and compares it. Bounds come from
the driver's size of the mapped allocation, not from the candidate's claim.

Mappings are kept for the pair (an honest candidate's outputs come from a few allocations that its allocator
reuses) and closed when the pair ends (`close`). Runs only inside the reference worker.
"""
from __future__ import annotations

import base64
from typing import Any

from harness.shared import points
from harness.worker import cudadriver

MAX_MAPPINGS = 64                # more distinct allocations than this in one pair: the oldest are closed


class PeerError(Exception):
    """The candidate's output cannot be mapped or lies outside its allocation (message says why)."""


class _Interface:
    """A device buffer for torch.as_tensor, without a copy."""

    def __init__(self, address: int, nbytes: int):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (address, False),
                                         "version": 3, "strides": None, "stream": None}


class PeerReader:
    def __init__(self) -> None:
        self.mapped: dict[str, tuple[int, int]] = {}        # handle (base64) -> (address here, nbytes)
        self.last_read: tuple[list, int, list[float]] | None = None     # ([(Exported, slot)], check seed, values)

    def remember(self, read: list[tuple[list, int]], seed: int, values: list[float]) -> None:
        """The outputs just read (per slot, as the reply described them) and their values, to be read again at the
        candidate's next stage (mapped again then, should their mapping have been closed since)."""
        self.last_read = (read, seed, values)

    def changed_since_read(self) -> bool:
        """Whether the outputs read last hold other values now, at the same positions (work the candidate left
        running past its reply, on a stream of its own, finished later); then they are forgotten."""
        if self.last_read is None:
            return False
        read, seed, values = self.last_read
        self.last_read = None
        try:
            again: list[float] = []
            for exported, slot in read:
                again += slot_values([self.tensor(e) for e in exported], seed, slot)
        except (PeerError, RuntimeError, ValueError, TypeError, KeyError):
            return True                     # its memory went away: not the values it handed over
        return not points.same(again, values)

    def _map(self, handle: str) -> tuple[int, int]:
        found = self.mapped.pop(handle, None)
        if found is not None:
            self.mapped[handle] = found         # the most recently used last: the oldest use is closed first
            return found
        if cudadriver.open_handle is None:
            raise PeerError("the CUDA driver's IPC functions are not bound in the reference")
        try:
            raw = base64.b64decode(handle.encode("ascii"), validate=True)
        except (ValueError, UnicodeEncodeError):
            raise PeerError("the output's IPC handle is not base64") from None
        if len(raw) != cudadriver.IPC_HANDLE_BYTES:
            raise PeerError(f"the output's IPC handle has {len(raw)} bytes")
        opened = cudadriver.open_handle(raw)
        if isinstance(opened, int):
            raise PeerError(f"cannot map the output's memory (CUresult {opened})")
        if len(self.mapped) >= MAX_MAPPINGS:
            self._close_one(next(iter(self.mapped)))
        self.mapped[handle] = opened
        return opened

    def tensor(self, e: dict[str, Any]):
        """The candidate's output tensor `e` (an Exported dict), as a view of its memory in this process."""
        import torch
        dtype, shape, strides, offset = str(e["dtype"]), list(e["shape"]), list(e["strides"]), int(e["address"])
        size = points.SIZES.get(dtype)
        if size is None:
            raise PeerError(f"cannot read dtype {dtype}")
        if len(shape) != len(strides) or any(d < 0 for d in shape) or any(s < 0 for s in strides):
            raise PeerError(f"shape {shape} with strides {strides}")
        torch_dtype = getattr(torch, dtype.replace("torch.", ""))
        if points.numel(shape) == 0:
            return torch.empty(shape, dtype=torch_dtype, device="cuda")
        address, nbytes = self._map(str(e["handle"]))
        span = (sum((d - 1) * s for d, s in zip(shape, strides)) + 1) * size
        if offset < 0 or offset % size or offset + span > nbytes:
            raise PeerError("the output's strides reach outside its allocation")
        raw = torch.as_tensor(_Interface(address + offset, span), device="cuda")
        return raw.view(torch_dtype).as_strided(shape, strides)

    def close(self) -> None:
        self.last_read = None
        for handle in list(self.mapped):
            self._close_one(handle)

    def _close_one(self, handle: str) -> None:
        address, _ = self.mapped.pop(handle)
        if cudadriver.close_handle is not None:
            cudadriver.close_handle(address)


def values_at(t, flat: list[int]) -> list[float]:
    """The values of tensor `t` at row-major flat indices (complex: the real part), read with torch."""
    import torch
    if not flat:
        return []
    offsets = points.offsets(list(t.shape), list(t.stride()), flat)
    span = t.as_strided((max(offsets) + 1,), (1,))         # from the first element, in memory order
    picked = span[torch.tensor(offsets, device=t.device)]
    if picked.is_complex():
        picked = picked.real
    return picked.to("cpu", torch.float64).tolist()


def slot_values(outs: list, seed: int, slot: int) -> list[float]:
    """The values of every tensor of one captured call's output (cold and host samples: slot 0) at the positions
    drawn from `seed` (harness.shared.points): what the reference reads of its own output and of the candidate's."""
    values: list[float] = []
    for j, t in enumerate(outs):
        values += values_at(t, points.output_positions(seed, slot, j, t.numel()))
    return values
