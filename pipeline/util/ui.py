"""What the user sees while the pipeline works: steps, notes and progress.

Everything goes to stderr so stdout stays free for results (`--json`).  Long
steps show progress: a byte counter with rate for downloads and hashing, an
`[n/N]` counter for compile steps.  On a terminal the bar redraws in place; in
CI logs it prints a line every ten percent, so logs stay short.  Every line
passes through `redact`, so a registered secret (or a URL's password) can
never be printed, and through `printable`, so text from a document or a server
(a file name, a status, an answer) can never drive the terminal: control and
invisible characters are escaped.  A value from outside inside a message is
`quoted` (in quotes, escaped, bounded); results (`OK:`/`FAIL:` lines) go
through `result`.
"""

from __future__ import annotations

import sys
import time

from pipeline.errors import printable, quoted, redact
from pipeline.runcontext import current

__all__ = ["quoted", "printable", "result", "step", "info", "warn", "human_bytes", "ByteProgress", "set_quiet", "is_quiet"]


def set_quiet(quiet: bool) -> None:
    """Quiet (or not) for the rest of the current run (`pipeline.runcontext`)."""
    current().quiet = quiet


def is_quiet() -> bool:
    return current().quiet


def _emit(line: str) -> None:
    if not current().quiet:
        sys.stderr.write(printable(redact(line), lines=True) + "\n")
        sys.stderr.flush()


def result(line: str, stream=None) -> None:
    """One result line (`OK: …`, `FAIL: …`, a verdict) on stdout (or `stream`), printed even when quiet: one line
    whatever the data in it (line breaks escaped too), without secrets."""
    target = stream or sys.stdout
    target.write(printable(redact(line)) + "\n")
    target.flush()


def step(stage: str, message: str) -> None:
    _emit(f"==> [{stage}] {message}")


def info(message: str) -> None:
    _emit(f"    {message}")


def warn(message: str) -> None:
    _emit(f"warning: {message}")


def human_bytes(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if count < 1024 or unit == "TiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} TiB"


class ByteProgress:
    """Progress of a byte stream of known (or unknown) total size."""

    def __init__(self, label: str, total: int | None) -> None:
        self.label = label
        self.total = total
        self.done = 0
        self.start = time.monotonic()
        self._tty = sys.stderr.isatty() and not current().quiet
        self._last_decile = -1
        self._last_draw = 0.0

    def __call__(self, count: int) -> None:
        self.done += count
        now = time.monotonic()
        if self._tty:
            if now - self._last_draw >= 0.2:
                self._last_draw = now
                sys.stderr.write("\r" + printable(redact(self._line(now))) + "\x1b[K")
                sys.stderr.flush()
        elif self.total:
            decile = int(10 * self.done / self.total)
            if decile != self._last_decile and decile < 10:
                self._last_decile = decile
                _emit("    " + self._line(now))

    def _line(self, now: float) -> str:
        elapsed = max(now - self.start, 1e-6)
        rate = human_bytes(self.done / elapsed) + "/s"
        if self.total:
            pct = 100.0 * self.done / self.total
            return f"{self.label}: {human_bytes(self.done)} of {human_bytes(self.total)} ({pct:.0f}%) {rate}"
        return f"{self.label}: {human_bytes(self.done)} {rate}"

    def finish(self) -> float:
        now = time.monotonic()
        if self._tty:
            sys.stderr.write("\r\x1b[K")
        _emit("    " + self._line(now) + " done")
        return now - self.start
