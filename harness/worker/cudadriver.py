"""The CUDA driver functions the timing path calls itself (ctypes on libcuda.so.1), bound by `bind()` when a
GPU worker starts, before candidate code is imported, so that nothing the candidate replaces in torch or in
ctypes stands between them and the driver. Module globals, watched by harness.worker.integrity.

  copy_dtoh(host_buffer, device_address, nbytes)   cuMemcpyDtoH: an output's bytes, read without torch
  synchronize()                                     cuCtxSynchronize
  reset_persisting_l2()                             cuCtxResetPersistingL2Cache: lines a call marked persisting
                                                    (cudaAccessPolicyWindow) become normal, so the L2 flush
                                                    before the next sample evicts them
  set_persisting_l2_limit(nbytes)                   cuCtxSetLimit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE)
  export(address) -> (handle bytes | None, base | CUresult)
                                                    cuMemGetAddressRange + cuIpcGetMemHandle: the allocation that
                                                    holds `address`, as an IPC handle another process can map
  open_handle(handle) -> (address, nbytes) | CUresult
                                                    cuIpcOpenMemHandle + cuMemGetAddressRange (the reference)
  close_handle(address)                             cuIpcCloseMemHandle
  mem_alloc(nbytes) -> address | None, CUresult    cuMemAlloc: device memory of its own, outside torch's
                                                    allocator (the staged samples' arena, harness.worker.arena:
                                                    an IPC handle to it maps nothing else of the process's)
  mem_free(address)                                 cuMemFree

Each returns the driver's CUresult (0 = success). Runs only inside worker processes.
"""
from __future__ import annotations

import ctypes

CU_LIMIT_PERSISTING_L2_CACHE_SIZE = 0x06
CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 0x1
IPC_HANDLE_BYTES = 64

copy_dtoh = synchronize = reset_persisting_l2 = set_persisting_l2_limit = None
export = open_handle = close_handle = None
mem_alloc = mem_free = None


class _IpcHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * IPC_HANDLE_BYTES)]


def bind() -> None:
    global copy_dtoh, synchronize, reset_persisting_l2, set_persisting_l2_limit, export, open_handle, close_handle
    global mem_alloc, mem_free
    lib = ctypes.CDLL("libcuda.so.1")
    copy = lib.cuMemcpyDtoH_v2
    copy.argtypes, copy.restype = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t], ctypes.c_int
    sync = lib.cuCtxSynchronize
    sync.argtypes, sync.restype = [], ctypes.c_int
    reset = lib.cuCtxResetPersistingL2Cache
    reset.argtypes, reset.restype = [], ctypes.c_int
    limit = lib.cuCtxSetLimit
    limit.argtypes, limit.restype = [ctypes.c_int, ctypes.c_size_t], ctypes.c_int
    copy_dtoh, synchronize, reset_persisting_l2 = copy, sync, reset
    set_persisting_l2_limit = lambda nbytes: limit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE, nbytes)   # noqa: E731
    export, open_handle, close_handle = _ipc(lib)
    mem_alloc, mem_free = _memory(lib)


def _memory(lib):
    u64 = ctypes.c_uint64
    alloc = lib.cuMemAlloc_v2
    alloc.argtypes, alloc.restype = [ctypes.POINTER(u64), ctypes.c_size_t], ctypes.c_int
    free = lib.cuMemFree_v2
    free.argtypes, free.restype = [u64], ctypes.c_int

    def mem_alloc_(nbytes: int):
        address = u64()
        result = alloc(ctypes.byref(address), nbytes)
        return (address.value, 0) if result == 0 else (None, result)

    return mem_alloc_, lambda address: free(address)


def _ipc(lib):
    u64 = ctypes.c_uint64
    get_range = lib.cuMemGetAddressRange_v2
    get_range.argtypes, get_range.restype = [ctypes.POINTER(u64), ctypes.POINTER(ctypes.c_size_t), u64], ctypes.c_int
    get_handle = lib.cuIpcGetMemHandle
    get_handle.argtypes, get_handle.restype = [ctypes.POINTER(_IpcHandle), u64], ctypes.c_int
    open_ = lib.cuIpcOpenMemHandle_v2
    open_.argtypes, open_.restype = [ctypes.POINTER(u64), _IpcHandle, ctypes.c_uint], ctypes.c_int
    close = lib.cuIpcCloseMemHandle
    close.argtypes, close.restype = [u64], ctypes.c_int

    def export_(address: int):
        base, size, handle = u64(), ctypes.c_size_t(), _IpcHandle()
        result = get_range(ctypes.byref(base), ctypes.byref(size), address)
        if result == 0:
            result = get_handle(ctypes.byref(handle), base.value)
        return (ctypes.string_at(ctypes.addressof(handle), IPC_HANDLE_BYTES), base.value) if result == 0 else (None, result)

    def open_handle_(raw: bytes):
        handle, address, base, size = _IpcHandle(), u64(), u64(), ctypes.c_size_t()
        ctypes.memmove(ctypes.byref(handle), raw, min(len(raw), IPC_HANDLE_BYTES))
        result = open_(ctypes.byref(address), handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)   # by value
        if result == 0:
            result = get_range(ctypes.byref(base), ctypes.byref(size), address.value)
        return (address.value, size.value) if result == 0 else result

    return export_, open_handle_, lambda address: close(address)
