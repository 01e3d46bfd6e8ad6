"""The one function a dask task calls, sent *by value* so that the dask scheduler never needs the harness.

Recent dask.distributed unpickles every task graph in the scheduler. A task submitted as
`run_group(GroupTask(...))` names harness functions and classes, so a scheduler host without the harness fails it
("Error during deserialization of the task graph", ModuleNotFoundError: No module named 'harness' in its log).
So the parent submits `pickle.loads(payload)` instead (`task_payload`): `pickle.loads` is the standard library's,
and `payload` is bytes that the scheduler passes along unread. On the worker, loading the payload calls `enter`
(pickled by value by cloudpickle, which dask already depends on: no harness import to load it) with the task's
own pickle; `enter` imports the harness there, and a worker that cannot gets a plain answer naming what is missing
(`{"unavailable": ...}`) instead of a traceback.

Keep `enter` self-contained: it is shipped as code, so it may use only what it imports inside its body.
"""
from __future__ import annotations

import pickle
import sys
from typing import Any


def enter(task_bytes: bytes) -> dict[str, Any]:
    """On the dask worker: the harness's answer for this task, or {"unavailable": ...} where it cannot be imported."""
    import socket
    import sys as _sys
    try:
        from harness.run.executors.dask_host import run_task_bytes
    except ImportError as exc:
        return {"unavailable": {"host": socket.gethostname(), "python": _sys.executable,
                                "missing": exc.name or "", "error": f"{type(exc).__name__}: {exc}"}}
    return run_task_bytes(task_bytes)


class _Call:
    """Pickles as `fn(*args)`: loading it runs the call."""

    def __init__(self, fn: Any, *args: Any) -> None:
        self.fn, self.args = fn, args

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return self.fn, self.args


def task_payload(task: Any) -> bytes:
    """Bytes whose `pickle.loads` on a dask worker runs `enter(pickle.dumps(task))` there."""
    import cloudpickle
    task_bytes = pickle.dumps(task, protocol=pickle.HIGHEST_PROTOCOL)
    module = sys.modules[__name__]
    cloudpickle.register_pickle_by_value(module)
    try:
        return cloudpickle.dumps(_Call(enter, task_bytes), protocol=pickle.HIGHEST_PROTOCOL)
    finally:
        cloudpickle.unregister_pickle_by_value(module)
