"""Which import of the compile stack starts a thread, and what each costs (fifteenth session; docs/measurements.md).

    python scripts/probe_compile_imports.py [MODULE ...]

Imports torch, then each module in turn (default: the three harness.worker.compilewarm imports), printing the
seconds each took, the process's threads by name after it (from /proc), and whether torch initialized CUDA. A
thread other than the main one is what keeps a zygote that imported those modules from forking its workers."""
import importlib
import os
import sys
import time

os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")     # as the zygote imports them


def threads() -> list[str]:
    names = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as comm:
                names.append(comm.read().strip())
        except OSError:
            pass
    return sorted(names)


started = time.monotonic()
import torch  # noqa: E402

print(f"torch {time.monotonic() - started:.2f} s, threads {threads()}", flush=True)
for name in sys.argv[1:] or ["torch._dynamo", "torch._functorch.aot_autograd", "torch._inductor.compile_fx"]:
    started = time.monotonic()
    importlib.import_module(name)
    print(f"{name} {time.monotonic() - started:.2f} s, threads {threads()}, CUDA initialized "
          f"{torch.cuda.is_initialized()}", flush=True)
