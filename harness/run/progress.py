"""The progress bars on stderr (a run's build and evaluate, lint's): done / total, time so far, the time left and,
for a run, the pairs being measured. Imported only once there is work to show (rich is imported here)."""
from __future__ import annotations

import threading

from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, Task, TextColumn, TimeElapsedColumn
from rich.table import Column
from rich.text import Text


def clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


def time_left(task: Task) -> float | None:
    """The time so far over the items done, times the items left: pairs take minutes each, far longer than the
    window rich's own estimate (TimeRemainingColumn) averages over, so that one would show nothing. None before
    the first item is done."""
    if not task.total or not task.completed or task.elapsed is None:
        return None
    return task.elapsed / task.completed * max(task.total - task.completed, 0)


class EtaColumn(ProgressColumn):
    """'ETA 0:03:20' while a task runs ('ETA -:--:--' before its first item), nothing once it is done."""

    def render(self, task: Task) -> Text:
        if task.finished:
            return Text("")
        left = time_left(task)
        return Text(f"ETA {clock(left) if left is not None else '-:--:--'}", style="progress.remaining")


class CurrentColumn(ProgressColumn):
    """What the task is working on now (its `current` field: the pairs being measured), cut to fit."""

    def __init__(self) -> None:
        super().__init__(table_column=Column(no_wrap=True, overflow="ellipsis", ratio=1))

    def render(self, task: Task) -> Text:
        return Text("" if task.finished else str(task.fields.get("current") or ""), overflow="ellipsis",
                    no_wrap=True)


def columns() -> list[ProgressColumn]:
    return [TextColumn("{task.description:>8}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            EtaColumn(), CurrentColumn()]


def bar(console) -> Progress:
    return Progress(*columns(), console=console, transient=False)


class Current:
    """The pairs being measured now, one per slot, as the evaluate task's `current` field: a slot's entry is
    replaced when it starts the next pair and dropped when its pair's record arrives."""

    def __init__(self, progress: Progress, task, processes: int = 1) -> None:
        self.progress, self.task, self.processes = progress, task, processes
        self._now: dict[str, tuple[str, str]] = {}          # slot -> (solution id, what to show)
        self._lock = threading.Lock()

    def started(self, slot: str, solution: str, process: int = 0) -> None:
        label = solution if self.processes == 1 else f"{solution} (process {process + 1}/{self.processes})"
        with self._lock:
            self._now[slot] = (solution, label)
            self._show()

    def finished(self, solution: str) -> None:
        with self._lock:
            self._now = {slot: now for slot, now in self._now.items() if now[0] != solution}
            self._show()

    def _show(self) -> None:
        self.progress.update(self.task, current=", ".join(label for _, label in self._now.values()))
