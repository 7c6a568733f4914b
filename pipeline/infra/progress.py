"""Download progress on a terminal: one line per file in flight and one for all of them (`rich.progress`).

Each line shows bytes, rate and time left; a file fetched as parallel ranges
(`pipeline.infra.ranges`) is one line, advanced by all its connections (rich's
tasks are safe to update from many threads).  Shown on stderr only when both
stdout and stderr are terminals and the run is not quiet (`--quiet`), so logs,
pipes and `--json` output stay free of it; a finished file's line is removed.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from pipeline.util import ui


def wanted(enabled: bool = True) -> bool:
    return enabled and not ui.is_quiet() and sys.stdout.isatty() and sys.stderr.isatty()


def _shown(label: str) -> str:
    """A file's label (a name from the manifest) as text, never as rich markup or terminal codes."""
    from rich.markup import escape

    return escape(ui.printable(label))


class TransferProgress:
    """A live display with an overall line (`total` bytes, None: unknown) and a line per file."""

    def __init__(self, what: str, total: int | None) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )

        self.progress = Progress(
            TextColumn("{task.description}", style="bold"),
            BarColumn(),
            DownloadColumn(binary_units=True),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            refresh_per_second=4,
        )
        self.overall = self.progress.add_task(_shown(what), total=total)
        # Each file's bytes on disk, as the overall line counts them: a retry's new line starts from what is on disk
        # now (the same after a broken connection, nothing after ranges were discarded for one stream).
        self.counted: dict[str, int] = {}
        self.lock = threading.Lock()
        self.progress.start()

    def file(self, label: str, total: int | None, done: int = 0) -> _FileLine:
        """The line of one file (`done` bytes were on disk already); call it with each count of bytes."""
        with self.lock:
            change = done - self.counted.get(label, 0)
            self.counted[label] = done
        if change:
            self.progress.advance(self.overall, change)
        return _FileLine(self, self.progress.add_task(_shown(label), total=total, completed=done), label)

    def count(self, label: str, task, amount: int) -> None:
        with self.lock:
            self.counted[label] = self.counted.get(label, 0) + amount
        self.progress.advance(task, amount)
        self.progress.advance(self.overall, amount)

    def close(self) -> None:
        self.progress.stop()

    def __enter__(self) -> TransferProgress:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class _FileLine:
    def __init__(self, owner: TransferProgress, task, label: str) -> None:
        self.owner, self.task, self.label = owner, task, label

    def __call__(self, count: int) -> None:
        self.owner.count(self.label, self.task, count)

    def finish(self) -> None:
        self.owner.progress.remove_task(self.task)
