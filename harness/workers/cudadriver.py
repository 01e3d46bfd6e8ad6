"""The CUDA driver functions the timing path calls itself (ctypes on libcuda.so.1), bound by `bind()` when a
GPU worker starts, before candidate code is imported, so that nothing the candidate replaces in torch or in
ctypes stands between them and the driver. Module globals, watched by harness.workers.integrity.

  copy_dtoh(host_buffer, device_address, nbytes)   cuMemcpyDtoH: an output's bytes, read without torch
  synchronize()                                     cuCtxSynchronize
  reset_persisting_l2()                             cuCtxResetPersistingL2Cache: lines a call marked persisting
                                                    (cudaAccessPolicyWindow) become normal, so the L2 flush
                                                    before the next sample evicts them
  set_persisting_l2_limit(nbytes)                   cuCtxSetLimit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE)

Each returns the driver's CUresult (0 = success). Runs only inside worker processes.
"""
from __future__ import annotations

import ctypes

CU_LIMIT_PERSISTING_L2_CACHE_SIZE = 0x06

copy_dtoh = synchronize = reset_persisting_l2 = set_persisting_l2_limit = None


def bind() -> None:
    global copy_dtoh, synchronize, reset_persisting_l2, set_persisting_l2_limit
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
