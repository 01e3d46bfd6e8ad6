"""`run_eval.py new LEVEL/PROBLEM NAME`: write a candidate skeleton `<solutions_dir>/<level>/<problem>/<NAME>.py`.

The skeleton is correct out of the box: `class ModelNew(nn.Module)` is the problem's `Model` class body copied
as text (so the constructor's signature and the parameter names are the reference's, and the harness copies the
reference's weights in), its `forward` renamed `reference_forward`; the new `forward` runs it and passes the
result through a `load_inline` extension stub (C++ on the CPU, or with `--cuda` a CUDA copy kernel) that the user
replaces with a kernel. The problem file is read with `ast` only, never imported; the skeleton does not read it
either (a candidate worker may not see the problems tree).
"""
from __future__ import annotations

import argparse
import ast
import difflib
import keyword
import re
import textwrap
from pathlib import Path

from harness.core.errors import InputError, UsageError, command_line
from harness.core.discover import SOURCE_LIMIT
from harness.core.untrusted import ReadError, read_source, show_path

SKIPPED_DEFS = ("Model", "get_inputs", "get_init_inputs")
SETTINGS = ("ATOL", "RTOL", "DTYPE", "ALLOW_TF32")
CANDIDATE_SUFFIXES = (".py", ".md", ".txt")

CPP_STUB = r'''#include <torch/extension.h>

// Your kernel goes here. This stub only copies its input (on the CPU with a plain loop, elsewhere through
// PyTorch), so the candidate is correct out of the box.
torch::Tensor kernel_stub(torch::Tensor x) {
    if (!x.device().is_cpu() || !x.is_floating_point()) return x.clone();
    auto in = x.contiguous();
    auto out = torch::empty_like(in);
    AT_DISPATCH_FLOATING_TYPES_AND2(at::ScalarType::Half, at::ScalarType::BFloat16, in.scalar_type(),
                                    "kernel_stub", [&] {
        const scalar_t* src = in.data_ptr<scalar_t>();
        scalar_t* dst = out.data_ptr<scalar_t>();
        for (int64_t i = 0; i < in.numel(); ++i) dst[i] = src[i];
    });
    return out;
}
'''

CUDA_STUB = r'''#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

// Your kernel goes here. This stub only copies its input with a CUDA kernel, so the candidate is correct out of
// the box.
template <typename scalar_t>
__global__ void copy_kernel(const scalar_t* __restrict__ in, scalar_t* __restrict__ out, int64_t n) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i];
}

torch::Tensor kernel_stub(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "kernel_stub: expected a CUDA tensor (run with --device cuda)");
    if (!x.is_floating_point()) return x.clone();
    auto in = x.contiguous();
    auto out = torch::empty_like(in);
    const int64_t n = in.numel();
    if (n == 0) return out;
    const int threads = 256;
    const unsigned int blocks = static_cast<unsigned int>((n + threads - 1) / threads);
    AT_DISPATCH_FLOATING_TYPES_AND2(at::ScalarType::Half, at::ScalarType::BFloat16, in.scalar_type(),
                                    "kernel_stub", [&] {
        copy_kernel<scalar_t><<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
            in.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), n);
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
'''

CUDA_DECL = "torch::Tensor kernel_stub(torch::Tensor x);\n"


# ---------------------------------------------------------------- finding the problem

def _levels(problems_dir: Path) -> list[str]:
    return sorted(p.name for p in problems_dir.iterdir() if p.is_dir() and any(p.glob("*.py")))


def find_problem(problems_dir: Path, target: str) -> tuple[str, Path]:
    """(level, problem file) of "LEVEL/PROBLEM"; a UsageError naming what exists nearby when there is none."""
    problems_dir = Path(problems_dir)
    if not problems_dir.is_dir():
        raise UsageError(f"--problems-dir {problems_dir}: no such directory")
    parts = target.strip("/").split("/")
    if len(parts) != 2 or not all(parts):
        raise UsageError(f"'{target}': expected LEVEL/PROBLEM, e.g. level1/019_gelu")
    level, stem = parts[0], parts[1].removesuffix(".py")
    levels = _levels(problems_dir)
    if level not in levels:
        close = difflib.get_close_matches(level, levels, n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise UsageError(f"no level '{level}' in {problems_dir}; {hint}levels here: {', '.join(levels) or 'none'}")
    path = problems_dir / level / f"{stem}.py"
    if path.is_file() and not stem.startswith("_"):
        return level, path
    stems = sorted(p.stem for p in (problems_dir / level).glob("*.py") if not p.name.startswith("_"))
    number = re.match(r"^(\d+)", stem)
    near = [s for s in stems if number and re.match(rf"^0*{int(number.group(1))}_", s)]
    near += [s for s in difflib.get_close_matches(stem, stems, n=3, cutoff=0.5) if s not in near]
    if near:
        hint = f"did you mean {', '.join(f'{level}/{s}' for s in near[:3])}?"
    else:
        hint = f"problems there: {', '.join(stems[:6])}{' ...' if len(stems) > 6 else ''}"
    raise UsageError(f"no problem '{level}/{stem}' in {problems_dir}; {hint}")


def check_name(name: str) -> None:
    if not name.isidentifier() or keyword.iskeyword(name):
        raise UsageError(f"candidate name '{name}' is not a Python identifier (letters, digits and _, not starting "
                         "with a digit, not a keyword)")


# ---------------------------------------------------------------- the skeleton

def _first_line(node: ast.stmt) -> int:
    decorators = getattr(node, "decorator_list", None) or []
    return min([node.lineno, *(d.lineno for d in decorators)])


def _segment(lines: list[str], first: int, last: int) -> str:
    return textwrap.dedent("".join(lines[first - 1:last])).rstrip() + "\n"


def _is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def _keep_module_stmt(node: ast.stmt) -> bool:
    """Module-level code the reference's class may need (imports, constants, helpers), without what the harness
    reads from a problem file and without code that only runs or prints."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return node.name not in SKIPPED_DEFS
    if isinstance(node, ast.Expr):
        return False
    if isinstance(node, ast.If) and "__name__" in ast.unparse(node.test):
        return False
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        names = {t.id for t in targets if isinstance(t, ast.Name)}
        return not (names and names <= set(SETTINGS))
    return True


def _call_args(args: ast.arguments) -> str:
    positional = [a.arg for a in [*args.posonlyargs, *args.args]][1:]        # without self
    parts = positional + ([f"*{args.vararg.arg}"] if args.vararg else [])
    parts += [f"{a.arg}={a.arg}" for a in args.kwonlyargs]
    parts += [f"**{args.kwarg.arg}"] if args.kwarg else []
    return ", ".join(parts)


def _extension_name(level: str, stem: str, name: str) -> str:
    return re.sub(r"\W", "_", f"{name}_{level}_{stem}")[:120]


def skeleton(problem_path: Path, level: str, name: str, cuda: bool = False) -> str:
    """The candidate file's text for the problem at problem_path."""
    try:
        text = read_source(problem_path, SOURCE_LIMIT)
        tree = ast.parse(text, filename=str(problem_path))
    except ReadError as exc:
        raise InputError(f"{show_path(problem_path)}: cannot read: {exc.why}") from None
    except SyntaxError as exc:
        raise InputError(f"{show_path(problem_path)}:{exc.lineno}: syntax error: {exc.msg}") from None
    except (RecursionError, MemoryError, ValueError):
        raise InputError(f"{show_path(problem_path)}: cannot be parsed (nested too deeply)") from None
    lines = text.splitlines(keepends=True)
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    if model is None:
        raise InputError(f"{problem_path}: no class Model")
    forward = next((n for n in model.body if isinstance(n, ast.FunctionDef) and n.name == "forward"), None)
    if forward is None:
        raise InputError(f"{problem_path}: class Model has no forward()")
    body = [n for n in model.body if not _is_docstring(n)]
    if body and _first_line(body[0]) > model.lineno:
        class_body = _segment(lines, _first_line(body[0]), model.end_lineno)
    else:                                               # `class Model(nn.Module): ...` on one line
        class_body = "\n".join(ast.unparse(n) for n in body) + "\n"
    class_body = re.sub(r"^def forward\(", "def reference_forward(", class_body, count=1, flags=re.M)
    class_body = re.sub(r"\bsuper\(\s*Model\s*,", "super(ModelNew,", class_body)
    header = {"import torch\n", "import torch.nn as nn\n", "from torch.utils.cpp_extension import load_inline\n"}
    module_code = [code for n in tree.body if _keep_module_stmt(n)
                   if (code := _segment(lines, _first_line(n), n.end_lineno)) not in header]
    ext_name = _extension_name(level, problem_path.stem, name)
    if cuda:
        stub = (f'_cpp_decl = "{CUDA_DECL.strip()}"\n\n_cuda_src = r"""\n{CUDA_STUB}"""\n\n'
                f'_ext = load_inline(name="{ext_name}", cpp_sources=_cpp_decl, cuda_sources=_cuda_src,\n'
                f'                   functions=["kernel_stub"], verbose=False)\n')
        what = "a CUDA kernel stub (copies its input; needs --device cuda)"
    else:
        stub = (f'_cpp_src = r"""\n{CPP_STUB}"""\n\n'
                f'_ext = load_inline(name="{ext_name}", cpp_sources=_cpp_src,\n'
                '                   functions=["kernel_stub"], verbose=False)\n')
        what = "a C++ extension stub (copies its input; runs on the CPU)"
    forward_sig = ast.unparse(forward.args)
    call = _call_args(forward.args)
    return f'''"""Candidate {name} for {level}/{problem_path.stem}, written by `run_eval.py new`.

Correct out of the box: ModelNew is the reference's Model (its class body, copied from {problem_path.name}), and
forward() passes the reference's output through {what}.
To write a kernel: put it in the extension source below, call it from forward() instead of reference_forward(),
and keep the reference's parameter names (self.linear = ...) so the harness copies the reference's weights in.
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# ---- from the problem file: its imports and module-level code (Model, get_inputs, get_init_inputs left out)
{"".join(module_code).rstrip()}

# ---- the extension
{stub}

def _through_stub(out):
    if isinstance(out, torch.Tensor):
        return _ext.kernel_stub(out)
    if isinstance(out, (tuple, list)):
        return type(out)(_through_stub(o) for o in out)
    return out


class ModelNew(nn.Module):
{textwrap.indent(class_body, "    ").rstrip()}

    def forward({forward_sig}):
        # TODO: replace the reference computation with your kernel, e.g. `return _ext.my_kernel(x, self.linear.weight)`
        return _through_stub(self.reference_forward({call}))
'''


# ---------------------------------------------------------------- the command

def _default_dirs(config: Path | None) -> tuple[str, str]:
    from harness.core.config import load_config
    if config is not None and not config.is_file():
        raise UsageError(f"{config}: no such config file")
    path = config or (Path("config.yaml") if Path("config.yaml").is_file() else None)
    cfg = load_config(path, {})
    return cfg.problems_dir, cfg.solutions_dir


def new_candidate(problems_dir: Path, solutions_dir: Path, target: str, name: str, cuda: bool = False) -> Path:
    """Write the skeleton; the path written. Never overwrites."""
    check_name(name)
    level, problem = find_problem(Path(problems_dir), target)
    folder = Path(solutions_dir) / level / problem.stem
    for suffix in CANDIDATE_SUFFIXES:
        if (folder / f"{name}{suffix}").exists():
            raise UsageError(f"{folder / (name + suffix)} exists; not overwritten (choose another NAME)")
    text = skeleton(problem, level, name, cuda)
    dest = folder / f"{name}.py"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with open(dest, "x") as f:
            f.write(text)
    except FileExistsError:
        raise UsageError(f"{dest} exists; not overwritten (choose another NAME)") from None
    except OSError as exc:
        raise InputError(f"{exc.filename or dest}: cannot write: {exc.strerror}") from None
    return dest


def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """`new`'s description and arguments, on run_eval.py's subparser."""
    p.description = ("Write a candidate skeleton <solutions-dir>/<level>/<problem>/<NAME>.py for a problem: "
                     "class ModelNew with Model's constructor and parameter names, correct out of the box (it runs "
                     "the reference's computation through a load_inline stub), ready for a kernel. The problem is "
                     "read, never imported; an existing file is never overwritten.")
    p.add_argument("problem", metavar="LEVEL/PROBLEM", help="e.g. level1/019_gelu")
    p.add_argument("name", metavar="NAME", help="the candidate's name, a Python identifier")
    p.add_argument("--cuda", action="store_true", help="a CUDA kernel stub (cuda_sources) instead of the C++ one "
                   "that runs on the CPU")
    p.add_argument("--problems-dir", type=Path, help="default: problems_dir in config.yaml, or problems")
    p.add_argument("--solutions-dir", type=Path, help="default: solutions_dir in config.yaml, or solutions")
    p.add_argument("--config", type=Path, help="config file (default: ./config.yaml when it exists)")
    return p


def main(args: argparse.Namespace) -> int:
    """`run_eval.py new LEVEL/PROBLEM NAME`, parsed."""
    check_name(args.name)
    given = {flag: value for flag, value in (("--config", args.config), ("--problems-dir", args.problems_dir),
                                             ("--solutions-dir", args.solutions_dir)) if value is not None}
    if args.problems_dir is None or args.solutions_dir is None:
        problems, solutions = _default_dirs(args.config)
        args.problems_dir = args.problems_dir or Path(problems)
        args.solutions_dir = args.solutions_dir or Path(solutions)
    dest = new_candidate(args.problems_dir, args.solutions_dir, args.problem, args.name, args.cuda)
    print(f"wrote {dest}; evaluate it with: {evaluate_command(dest, args.name, args.cuda, given)}")
    return 0


def evaluate_command(dest: Path, name: str, cuda: bool, trees: dict[str, Path]) -> str:
    """The run that evaluates just this candidate, from where `new` ran: its --config and trees as `new` was given
    them (without them a run reads the same config.yaml and defaults `new` did)."""
    level, stem = dest.parent.parent.name, dest.parent.name
    args = [arg for flag, value in trees.items() for arg in (flag, str(value))]
    args += ["--level", level, "--problem", re.sub(r"([*?[])", r"[\1]", stem), "--candidate", name]
    return command_line(args + (["--device", "cuda"] if cuda else []))
