"""Compile-check load_inline candidates without building or loading them (no GPU, CPU torch is enough).

    python scripts/nvcc_check_b.py solutions/level2/001_gemm_relu_scale/cuda_x.py [...]
    python scripts/nvcc_check_b.py --all-new          # every solutions/*/*/cuda_*.py not yet committed on main

Each candidate is imported with torch.utils.cpp_extension.load_inline replaced by a recorder: the sources it
would build are written to a temporary folder laid out as load_inline lays them out (main.cpp with
<torch/extension.h> and the pybind11 module for `functions`, cuda.cu with torch/types.h, cuda.h,
cuda_runtime.h in front), then

  * cuda.cu:  nvcc -c -std=c++17 -arch=sm_90 -O3 --expt-relaxed-constexpr <torch includes> <python include>
              -DTORCH_EXTENSION_NAME=x + torch's own -D flags + the candidate's extra_cuda_cflags
              (-r: registers / spills per kernel)
  * main.cpp: g++ -fsyntax-only -std=c++17 <same includes and -D flags> + the candidate's extra_cflags, with a
              precompiled torch/extension.h built once per run
  * the bound functions' declarations in cpp_sources must match their definitions' parameter types (a mismatch
    compiles on both sides as an overload, then fails at import with an undefined symbol)

A CPU build of torch lacks the generated c10/cuda/impl/cuda_cmake_macros.h; a one-line stand-in is supplied.
Compiles run -j at a time (default 2). The recorder hands back a stand-in module whose attributes raise if
called, so importing a candidate that only calls its extension in forward() works. Exit status: 0 when every
source of every candidate compiled.
"""
from __future__ import annotations

import argparse
import atexit
import shutil
import re
import threading
from concurrent.futures import ThreadPoolExecutor
import importlib.util
import os
import shlex
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import torch.utils.cpp_extension as cpp_ext

TORCH_FLAGS = ["-DTORCH_API_INCLUDE_EXTENSION_H", "-D_GLIBCXX_USE_CXX11_ABI=1",
               "-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__",
               "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__"]


class _Stub:
    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr):
        def _fail(*a, **k):
            raise RuntimeError(f"{self._name}.{attr}: extension not built (nvcc_check_b records sources only)")
        return _fail


def _as_list(x) -> list[str]:
    if x is None:
        return []
    return [x] if isinstance(x, str) else list(x)


def capture(path: Path) -> list[dict]:
    """Import `path` with load_inline recorded; returns one dict per load_inline call."""
    calls: list[dict] = []

    def fake_load_inline(name, cpp_sources, cuda_sources=None, sycl_sources=None, functions=None,
                         extra_cflags=None, extra_cuda_cflags=None, extra_sycl_cflags=None,
                         extra_ldflags=None, extra_include_paths=None, build_directory=None, verbose=False,
                         with_cuda=None, is_python_module=True, with_pytorch_error_handling=True,
                         keep_intermediates=True, use_pch=False, no_implicit_headers=False, **kw):
        cpp = _as_list(cpp_sources)
        cuda = _as_list(cuda_sources)
        if not no_implicit_headers:
            cpp.insert(0, "#include <torch/extension.h>")
        if functions is not None:
            if isinstance(functions, str):
                functions = [functions]
            if isinstance(functions, list):
                functions = {f: f for f in functions}
            mod = ["PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {"]
            for fn, doc in functions.items():
                if with_pytorch_error_handling:
                    mod.append(f'm.def("{fn}", torch::wrap_pybind_function({fn}), "{doc}");')
                else:
                    mod.append(f'm.def("{fn}", {fn}, "{doc}");')
            mod.append("}")
            cpp += mod
        if cuda and not no_implicit_headers:
            cuda = ["#include <torch/types.h>", "#include <cuda.h>", "#include <cuda_runtime.h>"] + cuda
        calls.append(dict(name=name, functions=list(functions or []), cpp="\n".join(cpp), cuda="\n".join(cuda) if cuda else None,
                          extra_cflags=_as_list(extra_cflags), extra_cuda_cflags=_as_list(extra_cuda_cflags),
                          extra_include_paths=_as_list(extra_include_paths)))
        return _Stub(name)

    saved = cpp_ext.load_inline
    cpp_ext.load_inline = fake_load_inline
    try:
        spec = importlib.util.spec_from_file_location(f"_cand_{abs(hash(str(path)))}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        cpp_ext.load_inline = saved
    return calls


_SHIM = tempfile.mkdtemp(prefix="nvcc_check_b_shim_")
atexit.register(shutil.rmtree, _SHIM, True)


def _shim_dir() -> list[str]:
    """A CPU build of torch ships c10/cuda's headers but not the generated c10/cuda/impl/cuda_cmake_macros.h
    (CUDA builds generate it with one line, C10_CUDA_BUILD_SHARED_LIBS): supply that line where it is missing."""
    if any(Path(p, "c10/cuda/impl/cuda_cmake_macros.h").exists() for p in cpp_ext.include_paths()):
        return []
    h = Path(_SHIM, "c10/cuda/impl/cuda_cmake_macros.h")
    if not h.exists():
        h.parent.mkdir(parents=True, exist_ok=True)
        h.write_text("#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n")
    return [_SHIM]


def includes(extra: list[str]) -> list[str]:
    inc = cpp_ext.include_paths() + [sysconfig.get_paths()["include"]] + _shim_dir() + extra
    return [f"-I{p}" for p in inc]


def run(cmd: list[str]) -> tuple[int, str]:
    p = subprocess.run(cmd, capture_output=True, text=True)
    return p.returncode, (p.stdout + p.stderr)


# Every compile uses the same extension name, so that one precompiled torch/extension.h serves all main.cpp checks
# (the name only matters to PYBIND11_MODULE's symbol).
DEFS = ["-DTORCH_EXTENSION_NAME=x"] + TORCH_FLAGS
_LOCK = threading.Lock()
GXX = ["g++", "-std=c++17", "-fPIC"]


def pch_dir() -> list[str]:
    """Build (once per run) a precompiled torch/extension.h for the g++ checks: g++ looks for
    torch/extension.h.gch in each include folder before torch/extension.h itself, so this folder goes first. A
    candidate whose extra_cflags make the PCH unusable silently falls back to parsing the header."""
    d = Path(_SHIM, "pch")
    gch = d / "torch" / "extension.h.gch"
    if not gch.exists():
        gch.parent.mkdir(parents=True, exist_ok=True)
        header = next(Path(p, "torch/extension.h") for p in cpp_ext.include_paths()
                      if Path(p, "torch/extension.h").exists())
        rc, out = run([*GXX, "-x", "c++-header", *includes([]), *DEFS, str(header), "-o", str(gch)])
        if rc != 0:
            print("(no precompiled header: " + out[-500:] + ")")
            return []
    return [f"-I{d}"]


def _param_types(params: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in params:
        depth += ch in "<(" ; depth -= ch in ">)"
        if ch == "," and depth == 0:
            out.append(cur); cur = ""
        else:
            cur += ch
    out.append(cur)
    types = []
    for p in (x.strip() for x in out):
        p = p.split("=")[0].strip()
        if not p or p == "void":
            continue
        toks = re.findall(r"[\w:]+|[&*<>,]", p)
        if len(toks) > 1 and re.fullmatch(r"\w+", toks[-1]):
            toks = toks[:-1]  # drop the parameter's name
        types.append(" ".join(toks))
    return types


def signature_problems(c: dict) -> list[str]:
    """The bound functions' declarations in cpp_sources against their definitions in cuda_sources: a mismatch
    compiles on both sides (it is an overload) but fails at import with an undefined symbol."""
    probs = []
    for fn in c["functions"]:
        pat = re.compile(r"([\w:<>]+)\s+" + re.escape(fn) + r"\s*\(([^)]*)\)\s*(;|\{)")
        decl = [(m.group(1), _param_types(m.group(2))) for m in pat.finditer(c["cpp"]) if m.group(3) == ";"]
        defs = [(m.group(1), _param_types(m.group(2))) for m in pat.finditer(c["cuda"] or "") if m.group(3) == "{"]
        defs += [(m.group(1), _param_types(m.group(2))) for m in pat.finditer(c["cpp"]) if m.group(3) == "{"]
        if not decl and not defs:
            probs.append(f"{fn}: neither declared nor defined")
        elif decl and defs and not any(d == f for d in decl for f in defs):
            probs.append(f"{fn}: declared {decl} but defined {defs}")
        elif not defs:
            probs.append(f"{fn}: declared but no definition found")
    return probs


def check(path: Path, verbose: bool, resource: bool, pool: ThreadPoolExecutor) -> tuple[bool, list[str]]:
    """Compile one candidate's sources (the compiles run in `pool`); returns (ok, report lines)."""
    lines: list[str] = []
    try:
        with _LOCK:  # load_inline is swapped module-wide while a candidate imports
            calls = capture(path)
    except Exception as e:  # noqa: BLE001
        return False, [f"FAIL  {path}: import failed: {type(e).__name__}: {e}"]
    if not calls:
        return True, [f"SKIP  {path}: no load_inline call at import"]
    ok = True
    with _LOCK:
        pch = pch_dir()
    for c in calls:
        probs = signature_problems(c)
        ok &= not probs
        lines.append(f"{'FAIL' if probs else 'ok':5} {path} [{c['name']}] bound functions' declarations match "
                     f"their definitions ({', '.join(c['functions'])})")
        lines += [f"      {p}" for p in probs]
        td = tempfile.mkdtemp(prefix="nvcc_check_b_")
        inc = includes(c["extra_include_paths"])
        main_cpp = Path(td, "main.cpp")
        main_cpp.write_text(c["cpp"])
        gxx = [*GXX, "-fsyntax-only", "-Winvalid-pch", *pch, *inc, *DEFS, *c["extra_cflags"], str(main_cpp)]
        jobs = [("main.cpp (g++ -fsyntax-only)", pool.submit(run, gxx))]
        if c["cuda"] is not None:
            cu = Path(td, "cuda.cu")
            cu.write_text(c["cuda"])
            cmd = ["nvcc", "-c", "-std=c++17", "-arch=sm_90", "-O3", "--expt-relaxed-constexpr",
                   "-Xcompiler", "-fPIC", *inc, *DEFS, *c["extra_cuda_cflags"], str(cu), "-o",
                   str(Path(td, "cuda.o"))]
            if resource:
                cmd.insert(1, "--resource-usage")
            jobs.append((f"cuda.cu (nvcc sm_90; extra {shlex.join(c['extra_cuda_cflags'])})", pool.submit(run, cmd)))
        for what, fut in jobs:
            rc, out = fut.result()
            ok &= rc == 0
            lines.append(f"{'ok' if rc == 0 else 'FAIL':5} {path} [{c['name']}] {what}")
            src = "main.cpp" if what.startswith("main.cpp") else "cuda.cu"
            if rc != 0 or verbose:
                lines.append(out[-6000:])
            else:  # the candidate's own warnings (not torch's headers') and, for nvcc, registers / spills
                keep = [l for l in out.splitlines() if (f"{src}(" in l or f"{src}:" in l) and "warning" in l]
                if resource and src == "cuda.cu":
                    keep += [l for l in out.splitlines() if "Used" in l or "spill" in l or "Compiling entry" in l]
                lines += keep
        shutil.rmtree(td, ignore_errors=True)
    return ok, lines


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("paths", nargs="*")
    ap.add_argument("--all-new", action="store_true", help="cuda_*.py candidates not on main")
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("-r", "--resource-usage", action="store_true", help="print registers/spills per kernel")
    ap.add_argument("-j", "--jobs", type=int, default=2, help="compiles run at once (default 2)")
    a = ap.parse_args()
    paths = [Path(p) for p in a.paths]
    if a.all_new:
        root = Path(__file__).resolve().parent.parent
        out = subprocess.run(["git", "-C", str(root), "ls-tree", "-r", "--name-only", "main", "solutions"],
                             capture_output=True, text=True).stdout.split()
        on_main = set(out)
        paths += [p.relative_to(root) for p in sorted(root.glob("solutions/*/*/cuda_*.py"))
                  if str(p.relative_to(root)) not in on_main]
    if not paths:
        ap.error("no candidates given")
    ok = True
    with ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        # submit every candidate's compiles first, then report in order as they finish
        with ThreadPoolExecutor(max_workers=len(paths)) as outer:
            results = [outer.submit(check, p, a.verbose, a.resource_usage, pool) for p in paths]
            for r in results:
                good, lines = r.result()
                ok &= good
                print("\n".join(lines), flush=True)
    print("ALL OK" if ok else "SOME FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
