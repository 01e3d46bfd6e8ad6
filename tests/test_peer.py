"""harness.worker.peer and harness.worker.cudadriver (issue 46, item 6): the reference worker's reads of a GPU
candidate's outputs through CUDA IPC.

Without a GPU: a handle that is not 64 bytes of base64 never reaches the driver, a driver error is a PeerError,
bounds come from the mapped allocation's size, MAX_MAPPINGS closes the oldest mapping, values_at reads what torch
reads, and cudadriver's ctypes glue (argument types, the handle passed by value) is exercised against C callbacks
standing in for libcuda; bind() without libcuda leaves every function None.

On a GPU (marked `gpu`): a tensor exported by one process (rawread.export) is opened, read and closed by another
(PeerReader), with the values written; and a peer that died, before or after the mapping, gives the values or a
clean error in the reader, never a hang or a crash. Two processes because a process cannot open its own IPC handle.
"""
from __future__ import annotations

import ast
import base64
import ctypes
import inspect
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from ctypes import CFUNCTYPE, POINTER, c_int, c_size_t, c_uint, c_uint64, c_void_p

import pytest
import torch

from conftest import REPO, cuda_available
from harness.shared import points
from harness.shared.channel import LineReader, encode, write_all
from harness.worker import cudadriver, rawread
from harness.worker.peer import MAX_MAPPINGS, PeerError, PeerReader, slot_values, values_at

BASE = 0x7F00_0000_0000                  # where the fake driver maps allocations in "this process"
# every function cudadriver.bind() sets (its `global` statements), so that one added there is checked here too
DRIVER_GLOBALS = sorted({name for node in ast.walk(ast.parse(inspect.getsource(cudadriver.bind)))
                         if isinstance(node, ast.Global) for name in node.names})


def handle(i: int, nbytes: int = cudadriver.IPC_HANDLE_BYTES) -> str:
    return base64.b64encode(bytes([i % 256]) * nbytes).decode("ascii")


class FakeDriver:
    """cudadriver.open_handle / close_handle: each new handle maps an allocation of `nbytes` at its own address,
    or fails with `error` (a CUresult)."""

    def __init__(self, nbytes: int = 4096, error: int | None = None):
        self.nbytes, self.error = nbytes, error
        self.opened: list[bytes] = []
        self.closed: list[int] = []

    def open_handle(self, raw: bytes):
        self.opened.append(raw)
        if self.error is not None:
            return self.error
        return BASE + (len(self.opened) << 32), self.nbytes

    def close_handle(self, address: int) -> int:
        self.closed.append(address)
        return 0


@pytest.fixture
def driver(monkeypatch):
    """cudadriver's globals restored after the test; open/close replaced by a FakeDriver."""
    for name in DRIVER_GLOBALS:
        monkeypatch.setattr(cudadriver, name, getattr(cudadriver, name))
    fake = FakeDriver()
    monkeypatch.setattr(cudadriver, "open_handle", fake.open_handle)
    monkeypatch.setattr(cudadriver, "close_handle", fake.close_handle)
    return fake


# --- PeerReader._map: the handle, the driver's answer, the mappings kept ----------------------------------------

def test_a_handle_is_opened_once_and_its_mapping_kept(driver):
    reader = PeerReader()
    first = reader._map(handle(1))
    assert first == (BASE + (1 << 32), 4096) and driver.opened == [bytes([1]) * 64]
    assert reader._map(handle(1)) == first and len(driver.opened) == 1          # the pair's mapping, reused
    assert reader._map(handle(2)) != first and len(driver.opened) == 2


@pytest.mark.parametrize("bad, why", [
    ("not base64!", "not base64"),
    ("ÄÖÜ" * 30, "not base64"),                                                 # not ASCII
    (handle(1)[:-2], "not base64"),                                             # padding cut off
    (handle(1)[:40] + "\n" + handle(1)[40:], "not base64"),                     # a character outside the alphabet
    ("", "has 0 bytes"),
    (handle(1, 63), "has 63 bytes"),
    (handle(1, 65), "has 65 bytes"),
    (handle(1, 4096), "has 4096 bytes"),
])
def test_a_handle_that_is_not_64_bytes_of_base64_never_reaches_the_driver(driver, bad, why):
    reader = PeerReader()
    with pytest.raises(PeerError, match=why):
        reader._map(bad)
    assert driver.opened == [] and reader.mapped == {}


def test_a_driver_error_is_a_peer_error_and_nothing_is_kept(driver):
    driver.error = 201                                                          # CUDA_ERROR_INVALID_CONTEXT
    reader = PeerReader()
    with pytest.raises(PeerError, match="CUresult 201"):
        reader._map(handle(3))
    assert reader.mapped == {} and driver.closed == []
    driver.error = None                                                         # a later try opens it again
    assert reader._map(handle(3))[1] == 4096 and len(driver.opened) == 2


def test_without_the_drivers_ipc_functions_nothing_is_mapped(monkeypatch):
    monkeypatch.setattr(cudadriver, "open_handle", None)
    with pytest.raises(PeerError, match="not bound"):
        PeerReader()._map(handle(1))


def test_past_max_mappings_the_oldest_is_closed_through_the_driver(driver):
    reader = PeerReader()
    addresses = [reader._map(handle(i))[0] for i in range(MAX_MAPPINGS + 3)]
    assert len(reader.mapped) == MAX_MAPPINGS
    assert driver.closed == addresses[:3]                                       # oldest first, one per new mapping
    assert handle(0) not in reader.mapped and handle(MAX_MAPPINGS + 2) in reader.mapped
    assert reader._map(handle(0))[0] not in addresses and len(driver.opened) == MAX_MAPPINGS + 4   # opened afresh
    assert driver.closed[-1] == addresses[3]


def test_a_mapping_used_by_the_request_being_read_is_not_the_one_closed(driver):
    """The mapping closed when the table is full is the least recently used: a request whose first output hits the
    oldest mapping and whose next needs a new one keeps the first (the reference maps a request's outputs, then
    reads them)."""
    reader = PeerReader()
    for i in range(MAX_MAPPINGS):
        reader._map(handle(i))
    in_use = reader._map(handle(0))[0]                  # the request's first output: the oldest mapping, reused
    reader._map(handle(MAX_MAPPINGS))                   # its second output: a new allocation
    assert in_use not in driver.closed


def test_close_closes_every_mapping_once(driver, monkeypatch):
    reader = PeerReader()
    addresses = {reader._map(handle(i))[0] for i in range(5)}
    reader.close()
    assert set(driver.closed) == addresses and len(driver.closed) == 5 and reader.mapped == {}
    reader.close()
    assert len(driver.closed) == 5
    reader._map(handle(9))
    monkeypatch.setattr(cudadriver, "close_handle", None)   # unbound: the mapping is forgotten, nothing is called
    reader.close()
    assert reader.mapped == {} and len(driver.closed) == 5


# --- PeerReader.tensor: what the description may claim -------------------------------------------------------------

def _exported(dtype="torch.float32", shape=(8,), strides=(1,), address=0, h=None) -> dict:
    return {"dtype": dtype, "shape": list(shape), "strides": list(strides), "address": address,
            "handle": handle(7) if h is None else h}


@pytest.mark.parametrize("dtype", ["torch.float8_e4m3fn", "torch.quint8", "float32", "torch.complex32", "", "torch"])
def test_a_dtype_it_cannot_read_is_refused_before_mapping(driver, dtype):
    with pytest.raises(PeerError, match="cannot read dtype"):
        PeerReader().tensor(_exported(dtype=dtype))
    assert driver.opened == []


@pytest.mark.parametrize("shape, strides", [
    ((4, 4), (4,)),                     # one stride for two dimensions
    ((4,), (1, 1)),
    ((4, 4), (-4, 1)),                  # a negative stride (would reach before the offset)
    ((4,), (-1,)),
    ((-1, 4), (4, 1)),                  # a negative size
])
def test_a_layout_with_negative_or_missing_strides_is_refused_before_mapping(driver, shape, strides):
    with pytest.raises(PeerError, match="shape"):
        PeerReader().tensor(_exported(shape=shape, strides=strides, address=64))
    assert driver.opened == []


@pytest.mark.parametrize("dtype, shape, strides, address", [
    ("torch.float32", (1025,), (1,), 0),            # one element more than 4096 bytes hold
    ("torch.float32", (1024,), (1,), 4),            # the right size, one element late
    ("torch.float32", (1,), (1,), 4096),            # starts at the end
    ("torch.float32", (1,), (1,), -4),              # before the allocation
    ("torch.float32", (4,), (1,), 2),               # not aligned to the element
    ("torch.float64", (2,), (1,), 4),
    ("torch.float32", (513,), (2,), 0),             # strides reach past the end
    ("torch.float32", (32, 33), (32, 1), 0),        # the last row runs over
    ("torch.float32", (2, 2), (2**62, 1), 0),       # a stride no allocation has
    ("torch.complex128", (257,), (1,), 0),
    ("torch.int8", (2, 3), (4096, 1), 0),
])
def test_a_layout_outside_the_mapped_allocation_is_refused(driver, dtype, shape, strides, address):
    with pytest.raises(PeerError, match="outside its allocation"):
        PeerReader().tensor(_exported(dtype, shape, strides, address))
    assert len(driver.opened) == 1                                              # bounds from the driver's size


@pytest.fixture
def device_memory(driver, monkeypatch):
    """The mapped allocation's 4096 bytes as a CPU tensor, handed out by a stand-in for torch.as_tensor (the only
    CUDA step of PeerReader.tensor), which also records what the reader asked for."""
    memory = torch.arange(1024, dtype=torch.float32).mul_(0.5).sub_(100)
    real, asked = torch.as_tensor, []

    def as_tensor(obj, *args, **kwargs):
        interface = getattr(obj, "__cuda_array_interface__", None)
        if interface is None:
            return real(obj, *args, **kwargs)
        assert kwargs.get("device") == "cuda" and interface["typestr"] == "|u1" and interface["strides"] is None
        (address, _), (nbytes,) = interface["data"], interface["shape"]
        asked.append((address, nbytes))
        start = address - (BASE + (1 << 32))
        assert 0 <= start and start + nbytes <= 4096, "a read outside the mapped allocation"
        return memory.view(torch.uint8)[start:start + nbytes]

    monkeypatch.setattr(torch, "as_tensor", as_tensor)
    return memory, asked


@pytest.mark.parametrize("dtype, shape, strides, address", [
    ("torch.float32", (1024,), (1,), 0),            # the whole allocation
    ("torch.float32", (1,), (1,), 4092),            # its last element
    ("torch.float32", (4, 8), (1, 4), 64),          # transposed, at an offset
    ("torch.float32", (3, 1024), (0, 1), 0),        # stride 0: broadcast rows
    ("torch.float32", (5, 3), (200, 7), 8),
    ("torch.float64", (16, 32), (32, 1), 0),
    ("torch.int16", (10,), (3,), 2),
    ("torch.bfloat16", (2, 1024), (1024, 1), 0),
    ("torch.complex64", (4,), (2,), 8),
    ("torch.uint8", (4096,), (1,), 0),
])
def test_a_layout_inside_the_allocation_is_a_view_of_its_bytes(device_memory, dtype, shape, strides, address):
    memory, asked = device_memory
    t = PeerReader().tensor(_exported(dtype, shape, strides, address))
    torch_dtype = getattr(torch, dtype.removeprefix("torch."))
    size = points.SIZES[dtype]
    expected = torch.as_strided(memory.view(torch.uint8).view(torch_dtype), shape, strides, address // size)
    assert t.dtype == torch_dtype and t.shape == expected.shape and t.stride() == expected.stride()
    assert torch.equal(t, expected)
    assert asked == [(BASE + (1 << 32) + address, points.span(list(shape), list(strides)) * size)]


# --- values_at and slot_values: the positions a check reads ------------------------------------------------------

def _torch_reads(t: torch.Tensor, flat: list[int]) -> list[float]:
    picked = t.reshape(-1)[torch.tensor(flat, dtype=torch.long)]
    return (picked.real if picked.is_complex() else picked).to(torch.float64).tolist()


@pytest.mark.parametrize("make", [
    lambda: torch.randn(5, 7),
    lambda: torch.randn(6, 4).t(),
    lambda: torch.randn(10, 10)[2:, 3:],                        # a storage offset
    lambda: torch.randn(3, 1).expand(3, 5),                     # stride 0
    lambda: torch.randn(2, 3, 4).permute(2, 0, 1)[:, :, ::2],
    lambda: torch.randn(3, 4).to(torch.bfloat16),
    lambda: torch.randn(4, 3, dtype=torch.complex64),
    lambda: torch.randint(-9, 9, (4, 5)),
    lambda: torch.rand(6) > 0.5,
    lambda: torch.tensor(2.5),                                  # a scalar
], ids=["plain", "transposed", "offset", "expanded", "permuted", "bf16", "complex", "int", "bool", "scalar"])
def test_values_at_reads_what_torch_reads(make):
    t = make()
    flat = points.positions(99, t.numel(), 17)
    assert values_at(t, flat) == _torch_reads(t, flat)
    assert values_at(t, []) == []


def test_slot_values_read_each_tensor_at_its_own_positions_for_each_slot():
    outs = [torch.randn(40, 30), torch.empty(0, 4), torch.randn(7).expand(3, 7)]
    for slot in (0, 2):
        expected = [v for j, t in enumerate(outs) for v in
                    _torch_reads(t, points.output_positions(11, slot, j, t.numel()))]
        assert slot_values(outs, 11, slot) == expected
    assert len(slot_values(outs, 11, 0)) == points.CHECK_POINTS + 21
    assert slot_values(outs, 11, 0) != slot_values(outs, 11, 1)


# --- cudadriver without a GPU ----------------------------------------------------------------------------------------

def test_bind_without_libcuda_raises_and_binds_nothing(driver, monkeypatch):
    for name in DRIVER_GLOBALS:
        monkeypatch.setattr(cudadriver, name, None)
    for name in [n for n, v in vars(rawread).items() if n.startswith("_") and v is None]:
        monkeypatch.setattr(rawread, name, None)                  # rawread.bind's accessors, unbound again after

    def no_library(name, *args, **kwargs):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(cudadriver.ctypes, "CDLL", no_library)
    with pytest.raises(OSError, match="libcuda.so.1"):
        cudadriver.bind()
    with pytest.raises(OSError):
        rawread.bind(cuda=True)                 # a CUDA worker cannot start without the driver
    rawread.bind(cuda=False)                    # a CPU worker never asks for it
    assert all(getattr(cudadriver, name) is None for name in DRIVER_GLOBALS)
    with pytest.raises(PeerError, match="not bound"):
        PeerReader().tensor(_exported())


class FakeLibcuda:
    """The libcuda entry points cudadriver binds, as C callbacks (so ctypes marshals every call as it would into the
    real library): allocations at fixed device addresses, a handle that names its allocation, an imported mapping
    at another address. Host memory stands in for the device in cuMemcpyDtoH."""

    ALLOCATIONS = {0x1_0000_0000: 1 << 21, 0x2_0000_0000: 12 << 20}     # base -> size, as the driver knows them
    IMPORTED = 0x9_0000_0000

    def __init__(self):
        self.calls: list[tuple] = []
        self.host = ctypes.create_string_buffer(bytes(range(256)) * 4)
        self.ranges = dict(self.ALLOCATIONS)
        u64p, sizep, hp = POINTER(c_uint64), POINTER(c_size_t), POINTER(cudadriver._IpcHandle)
        self._keep = {
            "cuMemcpyDtoH_v2": CFUNCTYPE(c_int, c_void_p, c_uint64, c_size_t)(self.copy),
            "cuCtxSynchronize": CFUNCTYPE(c_int)(lambda: self.record("sync") or 0),
            "cuCtxResetPersistingL2Cache": CFUNCTYPE(c_int)(lambda: self.record("reset") or 0),
            "cuCtxSetLimit": CFUNCTYPE(c_int, c_int, c_size_t)(lambda k, v: self.record("limit", k, v) or 0),
            "cuMemGetAddressRange_v2": CFUNCTYPE(c_int, u64p, sizep, c_uint64)(self.get_range),
            "cuIpcGetMemHandle": CFUNCTYPE(c_int, hp, c_uint64)(self.get_handle),
            "cuIpcOpenMemHandle_v2": CFUNCTYPE(c_int, u64p, cudadriver._IpcHandle, c_uint)(self.open),
            "cuIpcCloseMemHandle": CFUNCTYPE(c_int, c_uint64)(self.close),
            "cuMemAlloc_v2": CFUNCTYPE(c_int, u64p, c_size_t)(self.alloc),
            "cuMemFree_v2": CFUNCTYPE(c_int, c_uint64)(lambda address: self.record("free", address) or 0),
        }

    def __getattr__(self, name):
        try:
            return self.__dict__["_keep"][name]
        except KeyError:
            raise AttributeError(f"undefined symbol: {name}") from None

    def record(self, *call):
        self.calls.append(call)

    def copy(self, dst, src, nbytes):
        self.record("copy", src, nbytes)
        ctypes.memmove(dst, ctypes.addressof(self.host) + src, nbytes)
        return 0

    def get_range(self, pbase, psize, address):
        for base, size in self.ranges.items():
            if base <= address < base + size:
                pbase[0], psize[0] = base, size
                return 0
        return 1                                                # CUDA_ERROR_INVALID_VALUE

    def get_handle(self, phandle, base):
        if base not in self.ALLOCATIONS:
            return 1
        ctypes.memmove(phandle, b"H" + base.to_bytes(8, "little") + b"\x07" * 55, 64)
        return 0

    def open(self, paddress, h, flags):
        raw = ctypes.string_at(ctypes.addressof(h), 64)
        self.record("open", raw, flags)
        base = int.from_bytes(raw[1:9], "little")
        if raw[:1] != b"H" or base not in self.ALLOCATIONS:
            return 400                                          # CUDA_ERROR_INVALID_HANDLE
        paddress[0] = self.IMPORTED + base
        self.ranges[self.IMPORTED + base] = self.ALLOCATIONS[base]
        return 0

    def alloc(self, paddress, nbytes):
        self.record("alloc", nbytes)
        paddress[0] = 0x3_0000_0000
        return 0

    def close(self, address):
        self.record("close", address)
        return 0 if self.ranges.pop(address, None) else 1


@pytest.fixture
def libcuda(driver, monkeypatch):
    lib = FakeLibcuda()
    monkeypatch.setattr(cudadriver.ctypes, "CDLL", lambda name, *a, **k: lib if name == "libcuda.so.1" else None)
    cudadriver.bind()
    return lib


def test_bound_driver_calls_marshal_as_the_c_signatures_say(libcuda):
    assert {"copy_dtoh", "synchronize", "export", "open_handle", "close_handle"} <= set(DRIVER_GLOBALS)
    assert all(getattr(cudadriver, name) is not None for name in DRIVER_GLOBALS)
    assert cudadriver.synchronize() == 0 and cudadriver.reset_persisting_l2() == 0
    assert cudadriver.set_persisting_l2_limit(3 << 20) == 0
    buffer = ctypes.create_string_buffer(5)
    assert cudadriver.copy_dtoh(buffer, 10, 5) == 0 and buffer.raw == bytes(range(10, 15))
    assert libcuda.calls == [("sync",), ("reset",), ("limit", cudadriver.CU_LIMIT_PERSISTING_L2_CACHE_SIZE, 3 << 20),
                             ("copy", 10, 5)]


def test_export_open_and_close_go_through_the_driver_with_the_handle_intact(libcuda):
    base = 0x2_0000_0000
    raw, found = cudadriver.export(base + 12345)                # inside the second allocation
    assert found == base and len(raw) == cudadriver.IPC_HANDLE_BYTES and raw[:9] == b"H" + base.to_bytes(8, "little")
    assert cudadriver.export(0x5_0000_0000) == (None, 1)        # no allocation there: the CUresult
    assert cudadriver.open_handle(raw) == (libcuda.IMPORTED + base, 12 << 20)
    assert libcuda.calls[-1] == ("open", raw, cudadriver.CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)   # passed by value
    assert cudadriver.open_handle(b"\0" * 64) == 400
    assert cudadriver.close_handle(libcuda.IMPORTED + base) == 0
    assert cudadriver.close_handle(libcuda.IMPORTED + base) == 1    # already closed


def test_a_handle_exported_as_rawread_sends_it_maps_its_whole_allocation(libcuda):
    """What rawread.export puts on the wire (base64 of the driver's handle, the offset in the allocation) is what
    PeerReader maps: the allocation's size bounds the read, not the candidate's claim."""
    raw, base = cudadriver.export(0x1_0000_0000 + 4096)
    wire = base64.b64encode(raw).decode("ascii")
    reader = PeerReader()
    assert reader._map(wire) == (libcuda.IMPORTED + base, 1 << 21)
    with pytest.raises(PeerError, match="outside its allocation"):
        reader.tensor(_exported("torch.float32", (1024,), (1,), (1 << 21) - 4092, wire))
    reader.close()
    assert libcuda.calls[-1] == ("close", libcuda.IMPORTED + base) and reader.mapped == {}


# --- on the GPU: two processes ----------------------------------------------------------------------------------------

gpu = pytest.mark.gpu
needs_gpu = pytest.mark.skipif(not cuda_available(), reason="needs a CUDA GPU")
STEP_SECONDS = 180.0             # one step of a child (import torch, start CUDA, one read): seconds on a quiet box
SEED = 12345

# The candidate's side: outputs in two allocations of torch's caching allocator (a small block of a 2 MiB segment,
# a strided view at an offset in it, a 12 MiB tensor of its own), and an empty one, exported as the candidate worker
# exports them; kept alive until its stdin closes.
EXPORTER = r"""
import json, os, sys
import torch
from harness.worker import rawread
rawread.bind(cuda=True)
outs = [torch.arange(1000, dtype=torch.float32, device="cuda") * 0.25 - 3,
        torch.arange(60, dtype=torch.float64, device="cuda").reshape(6, 10)[1:, 2:].t(),
        torch.arange(3 << 20, dtype=torch.int32, device="cuda"),
        torch.empty(0, 3, device="cuda")]
torch.cuda.synchronize()
print(json.dumps({"pid": os.getpid(), "outputs": rawread.export(outs)}), flush=True)
sys.stdin.read()
"""

# The reference's side: the driver bound first, a CUDA context of its own, then PeerReader for each request on
# stdin ({"op": "read", "outputs": [...]} or {"op": "close"}); one JSON line back for each. A PeerError or a CUDA
# error (RuntimeError) is an answer; anything else ends the process with a traceback.
READER = r"""
import json, sys
from harness.worker import cudadriver, rawread
rawread.bind(cuda=True)
import torch
from harness.shared import points
from harness.worker.peer import PeerError, PeerReader, values_at
torch.zeros(1, device="cuda")
closes, close = [], cudadriver.close_handle
cudadriver.close_handle = lambda address: closes.append(close(address))
reader = PeerReader()

def summary(j, t):
    return {"shape": list(t.shape), "sum": float(t.double().sum()),
            "at": values_at(t, points.tensor_positions(SEED, j, t.numel())),
            "all": t.double().flatten().tolist() if t.numel() <= 4096 else None}

def read(outputs):
    try:
        tensors = [reader.tensor(e) for e in outputs]
        got = [summary(j, t) for j, t in enumerate(tensors)]
        torch.cuda.synchronize()
        return {"tensors": got, "mapped": len(reader.mapped)}
    except PeerError as exc:
        return {"error": "PeerError", "detail": str(exc)}
    except RuntimeError as exc:
        return {"error": "RuntimeError", "detail": str(exc)[:500]}

for line in sys.stdin:
    request = json.loads(line)
    if request["op"] == "read":
        reply = read(request["outputs"])
    else:
        reader.close()
        reply = {"closed": closes, "mapped": len(reader.mapped)}
    print(json.dumps(reply), flush=True)
""".replace("SEED", str(SEED))


def _expected() -> list[dict]:
    outs = [torch.arange(1000, dtype=torch.float32) * 0.25 - 3,
            torch.arange(60, dtype=torch.float64).reshape(6, 10)[1:, 2:].t(),
            torch.arange(3 << 20, dtype=torch.int32),
            torch.empty(0, 3)]
    return [{"shape": list(t.shape), "sum": float(t.double().sum()),
             "at": _torch_reads(t, points.tensor_positions(SEED, j, t.numel())) if t.numel() else [],
             "all": t.double().flatten().tolist() if t.numel() <= 4096 else None} for j, t in enumerate(outs)]


class Child:
    """A python process of ours: requests on its stdin, one JSON line per answer on its stdout, read with a
    deadline (harness.shared.channel), stderr to a file for the assertion messages."""

    def __init__(self, code: str, log) -> None:
        env = {k: v for k, v in os.environ.items() if k != "PYTORCH_CUDA_ALLOC_CONF"}   # as workers get it: no
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))   # expandable segments
        self.log = log
        with open(log, "wb") as err:
            self.proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env=env, stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=err, bufsize=0)
        self.reader = LineReader(self.proc.stdout.fileno())

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def answer(self) -> dict:
        try:
            return self.reader.read(time.monotonic() + STEP_SECONDS)
        except Exception as exc:                                    # noqa: BLE001 - said with the child's stderr
            pytest.fail(f"no answer ({type(exc).__name__}, exit {self.proc.poll()}); stderr:\n{self.stderr()}")

    def ask(self, request: dict) -> dict:
        write_all(self.proc.stdin.fileno(), encode(request))
        return self.answer()

    def finish(self) -> int | None:
        """Close its stdin and wait for it to exit by itself."""
        self.proc.stdin.close()
        try:
            return self.proc.wait(STEP_SECONDS)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(STEP_SECONDS)


@contextmanager
def children(tmp_path):
    started: list[Child] = []

    def start(code: str, name: str) -> Child:
        started.append(Child(code, tmp_path / f"{name}.stderr"))
        return started[-1]

    try:
        yield start
    finally:
        for child in started:
            child.kill()
            for stream in (child.proc.stdin, child.proc.stdout):
                stream.close()


def _exported_by(child: Child) -> list[dict]:
    outputs = child.answer()["outputs"]
    assert [bool(e["handle"]) for e in outputs] == [True, True, True, False]        # the empty one: no handle
    assert all(len(base64.b64decode(e["handle"])) == cudadriver.IPC_HANDLE_BYTES for e in outputs[:3])
    return outputs


def _read_or_clean_error(reply: dict, what: str) -> None:
    """A read after the exporter died: the values written, or an error the reference reports as a failed read
    (PeerError, or torch's RuntimeError for a CUDA error). The driver calls memory freed under a mapping undefined;
    this is what the reference needs of it: no hang, no crash, and no other values read as if they were the
    candidate's."""
    if "error" in reply:
        assert reply["error"] in ("PeerError", "RuntimeError"), (what, reply)
    else:
        assert reply["tensors"] == _expected(), f"{what}: values other than those written were read"


@gpu
@needs_gpu
def test_a_gpu_output_is_opened_read_and_closed_in_another_process(tmp_path):
    with children(tmp_path) as start:
        exporter, reader = start(EXPORTER, "exporter"), start(READER, "reader")
        outputs = _exported_by(exporter)
        reply = reader.ask({"op": "read", "outputs": outputs})
        assert "error" not in reply, (reply, reader.stderr())
        assert reply["tensors"] == _expected()
        assert 1 <= reply["mapped"] <= 3                        # one mapping per allocation, kept for the pair
        again = reader.ask({"op": "read", "outputs": outputs})  # the mappings reused: the same values
        assert again == reply
        closed = reader.ask({"op": "close"})
        assert closed == {"closed": [0] * reply["mapped"], "mapped": 0}, reader.stderr()
        assert reader.finish() == 0, reader.stderr()
        assert exporter.finish() == 0, exporter.stderr()


@gpu
@needs_gpu
def test_a_peer_that_died_before_the_mapping_is_a_clean_error_or_its_values(tmp_path):
    with children(tmp_path) as start:
        exporter, reader = start(EXPORTER, "exporter"), start(READER, "reader")
        outputs = _exported_by(exporter)
        exporter.kill()
        assert exporter.proc.returncode == -signal.SIGKILL
        _read_or_clean_error(reader.ask({"op": "read", "outputs": outputs}), "opened after the exporter died")
        closed = reader.ask({"op": "close"})
        assert closed["mapped"] == 0
        assert reader.finish() == 0, reader.stderr()


@gpu
@needs_gpu
def test_a_peer_that_died_after_the_mapping_is_a_clean_error_or_its_values(tmp_path):
    with children(tmp_path) as start:
        exporter, reader = start(EXPORTER, "exporter"), start(READER, "reader")
        outputs = _exported_by(exporter)
        reply = reader.ask({"op": "read", "outputs": outputs})
        assert reply.get("tensors") == _expected(), (reply, reader.stderr())
        exporter.kill()
        assert exporter.proc.returncode == -signal.SIGKILL
        _read_or_clean_error(reader.ask({"op": "read", "outputs": outputs}), "read through a mapping of a dead peer")
        closed = reader.ask({"op": "close"})                    # closing what a dead peer exported: no hang
        assert closed["mapped"] == 0 and len(closed["closed"]) == reply["mapped"]
        assert reader.finish() == 0, reader.stderr()
