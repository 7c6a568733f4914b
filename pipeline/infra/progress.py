"""Download progress on a terminal: one line per file in flight and one for all of them (`rich.progress`).

Each line shows bytes, rate and time left; a file fetched as parallel ranges
(`pipeline.infra.ranges`) is one line, advanced by all its connections (rich's
tasks are safe to update from many threads).  Shown on stderr only when both
stdout and stderr are terminals and the run is not quiet (`--quiet`), so logs,
pipes and `--json` output stay free of it; a finished file's line is removed.
"""

from __future__ import annotations

import sys
from typing import Any

from pipeline.util import ui


def wanted(enabled: bool = True) -> bool:
    return enabled and not ui.is_quiet() and sys.stdout.isatty() and sys.stderr.isatty()


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
        self.overall = self.progress.add_task(what, total=total)
        self.seen: set[str] = set()  # files whose bytes on disk the overall line counted (a retry opens a new line)
        self.progress.start()

    def file(self, label: str, total: int | None, done: int = 0) -> _FileLine:
        """The line of one file (`done` bytes were on disk already); call it with each count of bytes."""
        counted = 0 if label in self.seen else done
        self.seen.add(label)
        return _FileLine(self, self.progress.add_task(label, total=total, completed=done), counted)

    def close(self) -> None:
        self.progress.stop()

    def __enter__(self) -> TransferProgress:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class _FileLine:
    def __init__(self, owner: TransferProgress, task, done: int) -> None:
        self.owner, self.task = owner, task
        if done:
            owner.progress.advance(owner.overall, done)

    def __call__(self, count: int) -> None:
        self.owner.progress.advance(self.task, count)
        self.owner.progress.advance(self.owner.overall, count)

    def finish(self) -> None:
        self.owner.progress.remove_task(self.task)
