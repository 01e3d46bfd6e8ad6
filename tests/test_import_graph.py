"""The package's shape (issue 30): an AST walk over harness/, imports inside functions included. No module imports
itself back through others (no circle); every import goes to its own folder or to one below it (no arrow back up);
the code that runs in the worker processes is one folder, harness/worker/, and imports nothing of the parent's; the
parent's modules import no torch when they are imported (they may inside a function)."""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ROOT = REPO / "harness"

# Lowest first. A module may import its own folder and the folders of lower layers.
LAYERS = {
    "harness": 0,           # the package itself: SCHEMA_VERSION
    "shared": 0,            # what both sides import: the wire (messages, channel, points, tensorfile), stats, containment
    "core": 1,              # the parent's foundation: config, discovery, errors, flags, seeds, untrusted reads
    "worker": 1,            # everything that runs in a worker process (timing, verify, sandbox included)
    "results": 2,           # records, the store, signing, the reports and pages
    "run": 3,               # a run's parent side: pipeline, schedule, evaluate, interleave, build, executors
    "commands": 4,          # the subcommands
    "cli": 5,               # harness/cli.py: imports everything, imported by nothing
    "api": 5,               # harness/api.py: the Python API for agent loops, over the run layer; imported by nothing
}


def _module(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module(p): p for p in ROOT.rglob("*.py")}


def _folder(module: str) -> str:
    parts = module.split(".")
    if module in ("harness.cli", "harness.api"):
        return module.split(".")[1]
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and MODULES[module].name == "__init__.py") else "harness"


def _imports(module: str, top_level_only: bool = False) -> set[str]:
    """Every harness module (or the named outside module, e.g. torch) that `module` imports."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text(), str(path))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                full = f"{target}.{alias.name}"
                found.add(full if full in MODULES else target)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found - {module}


GRAPH = {m: {t for t in _imports(m) if t in MODULES} for m in MODULES}


def test_no_circle():
    state: dict[str, int] = {}          # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        path.append(m)
        for t in sorted(GRAPH[m]):
            if state.get(t) == 1:
                raise AssertionError("import circle: " + " -> ".join(path[path.index(t):] + [t]))
            if t not in state:
                visit(t)
        path.pop()
        state[m] = 2

    for m in sorted(MODULES):
        if m not in state:
            visit(m)


def test_every_import_goes_down_or_stays_in_its_folder():
    up = [f"{m} -> {t}" for m in sorted(GRAPH) for t in sorted(GRAPH[m])
          if _folder(m) != _folder(t) and LAYERS[_folder(t)] >= LAYERS[_folder(m)]]
    assert not up, "arrows back up (or sideways between folders of one layer):\n" + "\n".join(up)


def test_every_module_is_in_a_known_folder():
    assert {_folder(m) for m in MODULES} <= set(LAYERS), {_folder(m) for m in MODULES} - set(LAYERS)


def test_the_worker_side_is_one_folder_that_imports_only_the_shared_wire():
    outside = [f"{m} -> {t}" for m in sorted(GRAPH) if _folder(m) == "worker"
               for t in sorted(GRAPH[m]) if _folder(t) not in ("worker", "shared", "harness")]
    assert not outside, outside
    # and it is where `python -m harness.worker` starts
    assert (ROOT / "worker" / "__main__.py").exists()


def test_nothing_imports_the_cli():
    assert not [m for m in GRAPH if "harness.cli" in GRAPH[m]]


def test_nothing_imports_the_api():
    """harness.api sits over the run layer (a run through the same pipeline as the CLI's); no harness module,
    the run layer least of all, depends on it."""
    assert "harness.run.pipeline" in GRAPH["harness.api"]
    assert not [m for m in GRAPH if "harness.api" in GRAPH[m]]


def test_the_parent_imports_no_torch_at_module_import_time():
    heavy = {"torch", "numpy", "triton"}
    found = [f"{m} imports {sorted(t for t in _imports(m, top_level_only=True) if t.split('.')[0] in heavy)}"
             for m in sorted(MODULES) if _folder(m) != "worker"
             and any(t.split(".")[0] in heavy for t in _imports(m, top_level_only=True))]
    assert not found, found


# Issue 46 item 4: the parent imports nothing of the worker's folder (run.json's sandbox description comes from
# harness.shared.sandboxprobe). An edge that must stay for a while is listed here, named.
PARENT_TO_WORKER_LEFT: set[str] = set()
# The modules that decide verdicts (the defenses' flags, the between-process terms): they return them, and the run
# writes them into the record (harness.run.verdicts), so none of them imports anything of the results layer.
VERDICT_MODULES = ("harness.run.between", "harness.run.defenses")


def test_the_parent_imports_no_worker_module():
    found = {f"{m} -> {t}" for m in GRAPH if _folder(m) != "worker" for t in GRAPH[m] if _folder(t) == "worker"}
    assert found == PARENT_TO_WORKER_LEFT, sorted(found ^ PARENT_TO_WORKER_LEFT)


def test_the_verdict_modules_import_nothing_of_the_results_layer():
    """The verdicts are returned, never written by the modules that decide them: none of them imports harness.results
    nor harness.run.verdicts, which writes them into the record for the run."""
    writing = sorted(f"{m} -> {t}" for m in VERDICT_MODULES for t in GRAPH[m]
                     if _folder(t) == "results" or t == "harness.run.verdicts")
    assert not writing, writing


def test_the_worker_processes_owner_knows_no_record():
    """harness.run.workerproc starts, talks to and ends worker processes; what a worker's end means for a record
    (harness.results.records.exit_status) is decided by those who write records: it imports nothing of the results
    layer (issue 46)."""
    found = sorted(t for t in GRAPH["harness.run.workerproc"] if _folder(t) == "results")
    assert not found, found
