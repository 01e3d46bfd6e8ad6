#!/usr/bin/env python3
"""Compile-check load_inline candidates without a GPU and without building the extension.

    python scripts/nvcc_check.py solutions/level1/033_rmsnorm/cuda_fused_rowreg.py [more candidate files or dirs ...]
    python scripts/nvcc_check.py --arch sm_90 --ptxas-v solutions/level1

Each candidate file is imported with `torch.utils.cpp_extension.load_inline` replaced by a recorder that keeps
its arguments (name, cpp_sources, cuda_sources, functions, extra_*flags, extra_include_paths) and returns a stub
module. If the import recorded nothing (the candidate builds in `__init__`), `ModelNew` is constructed with the
problem's `get_init_inputs()` (problem found from the candidate's path) to trigger the call.

For every recorded call the sources are written out exactly the way load_inline writes them (main.cpp: the
implicit `#include <torch/extension.h>`, the cpp sources and the generated PYBIND11_MODULE; cuda.cu: the
implicit torch/types.h + cuda.h + cuda_runtime.h headers and the cuda sources), then

  * main.cpp is compiled with g++ -c (C++17, the torch + python include paths, torch's extension defines),
  * cuda.cu is compiled with nvcc -c for the requested arch with torch's default nvcc flags
    (--expt-relaxed-constexpr, the __CUDA_NO_HALF*__ defines, -std=c++17) plus the candidate's extra_cuda_cflags,
  * every bound function that main.o references is checked to be defined in cuda.o (or main.o) with the same
    signature (catches a declaration in cpp_sources that does not match the CUDA definition: a link error at
    load time on the GPU machine).

With --ptxas-v the ptxas register / spill report is printed per kernel (spills are flagged either way).
Needs only torch (a CPU build is fine: it ships the CUDA headers), nvcc and g++ on PATH. Exit status is
non-zero if any candidate fails.
"""
import argparse
import concurrent.futures as cf
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import types
from pathlib import Path

import torch
import torch.utils.cpp_extension as cpp_ext

REPO = Path(__file__).resolve().parent.parent


class _Stub(types.ModuleType):
    def __getattr__(self, item):  # any bound function: calling it is an error (nothing was built)
        def _f(*a, **k):
            raise RuntimeError(f"nvcc_check stub: {item} was not built")
        return _f


def _record_calls(path: Path):
    calls = []

    def fake_load_inline(name, cpp_sources, cuda_sources=None, sycl_sources=None, functions=None, extra_cflags=None,
                         extra_cuda_cflags=None, extra_sycl_cflags=None, extra_ldflags=None, extra_include_paths=None,
                         build_directory=None, verbose=False, with_cuda=None, with_sycl=None, is_python_module=True,
                         with_pytorch_error_handling=True, keep_intermediates=True, use_pch=False,
                         no_implicit_headers=False, **kw):
        calls.append(dict(name=name, cpp_sources=cpp_sources, cuda_sources=cuda_sources, functions=functions,
                          extra_cflags=extra_cflags or [], extra_cuda_cflags=extra_cuda_cflags or [],
                          extra_include_paths=extra_include_paths or [],
                          with_pytorch_error_handling=with_pytorch_error_handling,
                          no_implicit_headers=no_implicit_headers))
        return _Stub(name)

    orig = cpp_ext.load_inline
    cpp_ext.load_inline = fake_load_inline
    try:
        modname = "nvcc_check_" + re.sub(r"\W", "_", str(path))
        spec = importlib.util.spec_from_file_location(modname, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        if not calls and hasattr(mod, "ModelNew"):
            prob = _problem_for(path)
            init = []
            if prob is not None:
                pspec = importlib.util.spec_from_file_location("nvcc_check_problem", prob)
                pmod = importlib.util.module_from_spec(pspec)
                pspec.loader.exec_module(pmod)
                init = pmod.get_init_inputs()
            mod.ModelNew(*init)
    finally:
        cpp_ext.load_inline = orig
    return calls


def _problem_for(path: Path):
    # solutions/<level>/<stem>/<candidate>.py -> problems/<level>/<stem>.py
    parts = path.resolve().parts
    if "solutions" in parts:
        i = parts.index("solutions")
        if len(parts) >= i + 4:
            p = REPO / "problems" / parts[i + 1] / (parts[i + 2] + ".py")
            if p.exists():
                return p
    return None


def _write_sources(call, d: Path):
    cpp = call["cpp_sources"]
    cpp = [cpp] if isinstance(cpp, str) else list(cpp)
    cu = call["cuda_sources"] or []
    cu = [cu] if isinstance(cu, str) else list(cu)
    if not call["no_implicit_headers"]:
        cpp.insert(0, "#include <torch/extension.h>")
    funcs = call["functions"]
    if funcs is not None:
        if isinstance(funcs, str):
            funcs = [funcs]
        if isinstance(funcs, list):
            funcs = {f: f for f in funcs}
        cpp.append("PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {")
        for f, doc in funcs.items():
            if call["with_pytorch_error_handling"]:
                cpp.append(f'm.def("{f}", torch::wrap_pybind_function({f}), "{doc}");')
            else:
                cpp.append(f'm.def("{f}", {f}, "{doc}");')
        cpp.append("}")
    (d / "main.cpp").write_text("\n".join(cpp))
    if cu:
        if not call["no_implicit_headers"]:
            cu = ["#include <torch/types.h>", "#include <cuda.h>", "#include <cuda_runtime.h>"] + cu
        (d / "cuda.cu").write_text("\n".join(cu))
    return list(funcs or {})


# A CPU build of torch ships c10/cuda/*.h but not the generated c10/cuda/impl/cuda_cmake_macros.h that
# CUDAMacros.h includes; a CUDA build's copy only defines C10_CUDA_BUILD_SHARED_LIBS. Provide that one line in
# a shim include directory (searched after torch's own, so a real copy wins).
_SHIM_TEXT = "#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n"


def _shim_dir():
    d = Path(tempfile.gettempdir()) / "nvcc_check_shim"
    f = d / "c10" / "cuda" / "impl" / "cuda_cmake_macros.h"
    if not f.exists():
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(_SHIM_TEXT)
    return str(d)


def _common_flags(call):
    inc = cpp_ext.include_paths() + [sysconfig.get_paths()["include"]] + list(call["extra_include_paths"])
    inc.append(_shim_dir())
    cuda_home = cpp_ext.CUDA_HOME or "/usr/local/cuda"
    inc.append(os.path.join(cuda_home, "include"))
    defs = [f"-DTORCH_EXTENSION_NAME={call['name']}", "-DTORCH_API_INCLUDE_EXTENSION_H", "-D_GLIBCXX_USE_CXX11_ABI=1"]
    return [f"-I{p}" for p in inc] + defs


def _run(cmd, cwd):
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def _defined_symbols(obj, cwd):
    rc, out = _run(["nm", "-C", "--defined-only", obj], cwd)
    return set(line.split(" ", 2)[2] for line in out.splitlines() if line.count(" ") >= 2)


def _undefined_symbols(obj, cwd):
    rc, out = _run(["nm", "-C", "--undefined-only", obj], cwd)
    return set(line.split()[-1] if "(" not in line else line.strip().split(" ", 1)[1].strip()
               for line in out.splitlines() if line.strip())


def check_call(call, arch, ptxas_v, keep):
    d = Path(tempfile.mkdtemp(prefix=f"nvcc_check_{call['name']}_"))
    funcs = _write_sources(call, d)
    log = [f"  sources in {d}" if keep else ""]
    ok = True
    flags = _common_flags(call)
    procs = []
    gxx = ["g++", "-c", "main.cpp", "-o", "main.o", "-std=c++17", "-fPIC", "-O0", "-w"] + flags + list(call["extra_cflags"])
    nv = None
    if (d / "cuda.cu").exists():
        nv = (["nvcc", "-c", "cuda.cu", "-o", "cuda.o", "-std=c++17", f"-arch={arch}", "--expt-relaxed-constexpr",
               "-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__", "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
               "-D__CUDA_NO_HALF2_OPERATORS__", "--compiler-options", "-fPIC", "-Xptxas", "-v"] + flags
              + list(call["extra_cuda_cflags"]))
    with cf.ThreadPoolExecutor(2) as ex:
        fg = ex.submit(_run, gxx, d)
        fn = ex.submit(_run, nv, d) if nv else None
        rc, out = fg.result()
        if rc != 0:
            ok = False
            log.append("  g++ main.cpp FAILED:\n" + out[-6000:])
        if fn is not None:
            rc2, out2 = fn.result()
            if rc2 != 0:
                ok = False
                log.append("  nvcc cuda.cu FAILED:\n" + out2[-6000:])
            else:
                # warnings from the candidate's own source only (torch's headers warn under -std=c++17)
                warn = [l for l in out2.splitlines() if "warning" in l.lower() and l.startswith("cuda.cu")]
                if warn:
                    log.append("  nvcc warnings:\n    " + "\n    ".join(warn[:20]))
                # ptxas report: "Compiling entry function 'X'" ... "N bytes spill stores, M bytes spill loads"
                cur = None
                for l in out2.splitlines():
                    m = re.search(r"Compiling entry function '([^']+)'", l)
                    if m:
                        cur = m.group(1)
                    m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", l)
                    if m and (int(m.group(1)) or int(m.group(2))):
                        log.append(f"  SPILLS in {cur}: {l.strip()}")
                    if ptxas_v and ("Used" in l and "registers" in l):
                        log.append(f"  {cur}: {l.split('info    :')[-1].strip()}")
    if ok and funcs:
        und = _undefined_symbols("main.o", d)
        defined = _defined_symbols("main.o", d) | (_defined_symbols("cuda.o", d) if nv else set())
        for f in funcs:
            refs = [s for s in und if s.startswith(f + "(")]
            if not refs and not any(s.startswith(f + "(") for s in defined):
                ok = False
                log.append(f"  bound function {f} is neither referenced nor defined?")
            for s in refs:
                if s not in defined:
                    ok = False
                    log.append(f"  LINK: {s} is declared in cpp_sources but not defined in the CUDA source")
    if not keep:
        shutil.rmtree(d, ignore_errors=True)
    return ok, "\n".join(l for l in log if l)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="+", help="candidate .py files or directories (searched recursively)")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--ptxas-v", action="store_true", help="print registers used per kernel")
    ap.add_argument("--keep", action="store_true", help="keep the generated sources and objects (and say where)")
    ap.add_argument("-j", "--jobs", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    args = ap.parse_args()

    files = []
    for p in map(Path, args.paths):
        files += sorted(p.rglob("*.py")) if p.is_dir() else [p]
    sys.path.insert(0, str(REPO))

    jobs = []
    bad = 0
    for f in files:
        try:
            calls = _record_calls(f)
        except Exception as e:  # import error: a real failure of the candidate
            print(f"FAIL {f}: import raised {type(e).__name__}: {e}")
            bad += 1
            continue
        if not calls:
            print(f"SKIP {f}: no load_inline call recorded")
            continue
        names = [c["name"] for c in calls]
        for c in calls:
            jobs.append((f, c))
        if len(set(names)) != len(names):
            print(f"FAIL {f}: duplicate extension names {names}")
            bad += 1

    seen = {}
    for f, c in jobs:
        if c["name"] in seen and seen[c["name"]] != f:
            print(f"WARN extension name {c['name']} used by both {seen[c['name']]} and {f}")
        seen[c["name"]] = f

    with cf.ThreadPoolExecutor(args.jobs) as ex:
        futs = [(f, c, ex.submit(check_call, c, args.arch, args.ptxas_v, args.keep)) for f, c in jobs]
        for f, c, fut in futs:
            ok, log = fut.result()
            print(f"{'OK  ' if ok else 'FAIL'} {f} [{c['name']}]")
            if log:
                print(log)
            bad += 0 if ok else 1
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
