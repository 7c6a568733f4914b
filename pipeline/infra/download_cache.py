"""A download cache that several runs may share (audit's `--cache`): one writer per file, nothing trusted unread.

- a file and its `.part` are claimed under an exclusive lock (a hidden `.<name>.lock` beside it, never
  removed), so a second run sharing the folder waits, then re-uses (re-hashes) what the first made;
  while it waits, the bytes the other run writes into the `.part` earn this run's deadline time;
- a complete file from an earlier run is re-used only when its SHA-256 is pinned and its bytes, read now
  and never through a link, hash to it; anything else there is removed and fetched anew;
- a `.part` is resumed (HTTP Range, `infra/transfer.py`) only for pinned bytes: unpinned bytes of an
  earlier run may be another version.

Errors are `PipelineError`s (the caller decides whether one fails an item or the run).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.errors import EnvironmentProblem, PipelineError
from pipeline.infra import net, ranges
from pipeline.util import ui
from pipeline.util.fs import exclusive_lock
from pipeline.util.hashing import is_sha256_hex


@dataclass(frozen=True)
class CachedFile:
    """A file in the cache whose bytes were hashed as they arrived (or re-hashed now, when re-used)."""

    path: Path
    sha256: str
    size: int
    resumed_at: tuple[int, ...] = ()  # the byte offsets an HTTP Range request resumed at


class DownloadCache:
    """Downloads into cache files under one run's request policy: its session, connections and deadline.

    `unsized_cap` bounds a pinned file whose size is not recorded (with a deadline for that many
    bytes); a document fetched with a `cap` of its own is bounded by it instead.
    """

    def __init__(self, *, session: Callable[[], Any], timeout: float, retries: int | None, connections: int,
                 range_threshold: int, unsized_cap: int) -> None:
        self.session = session  # the requests session of the calling thread
        self.timeout = timeout
        self.retries = retries
        self.connections = max(1, connections)
        self.range_threshold = range_threshold
        # One budget of connections for every download at once: a file above range_threshold
        # fetches parallel ranges over the connections the other downloads leave free.
        self.budget = threading.BoundedSemaphore(self.connections)
        self.unsized_cap = unsized_cap
        self.deadline: net.Deadline | None = None  # the run's overall deadline, once it started
        self.progress: Any = False  # the live progress display while a batch downloads

    def fetch(self, url: str, target: Path, *, sha256: str | None, size: int | None, label: str, on_bytes=None,
              cap: int | None = None, redirects: str = "same-origin") -> CachedFile:
        """`target` holding the bytes at `url` (size and hash checked as they arrive), claimed under its lock."""
        # The lock is a hidden name (no cached file's name starts with '.') that is never removed.
        with exclusive_lock(target.with_name(f".{target.name}.lock"), waiting=f"{label}: another audit is fetching it into this cache; waiting for it",
                            on_wait=ui.info, give_up=self.still_waiting(url, target, sha256, size)):
            return self._fetch_claimed(url, target, sha256=sha256, size=size, label=label, on_bytes=on_bytes, cap=cap, redirects=redirects)

    def still_waiting(self, url: str, target: Path, sha256: Any, size: Any) -> Callable[[], None]:
        """While another run holds a cache file: the bytes it writes into the file's .part earn this run's
        deadline time, as bytes this run received would (at 256 KiB/s); raise its error once it has passed."""
        part = target.with_name(target.name + ".part")
        seen = [-1]

        def check() -> None:
            if self.deadline is None:
                return
            held = held_bytes(part, sha256, size)
            if seen[0] >= 0 and held > seen[0]:
                self.deadline.earn(held - seen[0])
            seen[0] = max(seen[0], held)
            if self.deadline.passed():
                raise self.deadline.error(net.BEFORE, url)
        return check

    def _fetch_claimed(self, url: str, target: Path, *, sha256: str | None, size: int | None, label: str, on_bytes,
                       cap: int | None, redirects: str) -> CachedFile:
        """`fetch` while this run holds the cache file's lock."""
        from pipeline.infra import transfer

        if os.path.lexists(target):
            # A complete file from an earlier run is re-used only when its hash is pinned and its
            # bytes hash to it now (never through a link); anything unpinned (signed files,
            # bundles) is fetched anew.
            cached = hash_cached(target, size) if sha256 is not None else None
            if cached is not None and cached[0] == sha256:
                return CachedFile(target, sha256, cached[1])
            remove_cached(target)
        kwargs: dict[str, Any] = {}
        if self.retries is not None:
            kwargs["retries"] = self.retries
        if size is None:
            kwargs["max_size"] = cap if cap is not None else self.unsized_cap
            if cap is None:
                kwargs["deadline"] = net.deadline_for(self.timeout, self.unsized_cap)
        result = transfer.download(
            url,
            target,
            label=label,
            session=self.session(),
            expected_size=size,
            expected_sha256=sha256,
            timeout=self.timeout,
            progress=self.progress,
            on_bytes=on_bytes,
            connections=self.connections,
            range_threshold=self.range_threshold,
            budget=self.budget,
            redirects=redirects,
            resume=sha256 is not None,  # unpinned bytes of an earlier run may be another version
            overall=self.deadline,
            **kwargs,
        )
        return CachedFile(result.path, result.sha256, result.size, tuple(getattr(result, "resumed_at", ())))


def hash_cached(path: Path, size: int | None) -> tuple[str, int] | None:
    """The SHA-256 and size of a cache file read now, never through a link; None when it is no regular file of `size` bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | ranges.NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or (size is not None and info.st_size != size):
            return None
        return hashlib.file_digest(handle, "sha256").hexdigest(), info.st_size


def held_bytes(part: Path, sha256: Any, size: Any) -> int:
    """How many bytes of a pinned file another run's .part holds now: its range state's intervals (read as
    hostile input, bound to the pin), else its length (a single stream's prefix); 0 when unknown."""
    from pipeline.infra.range_state import read_state, state_path

    try:
        if isinstance(size, int) and os.path.lexists(state_path(part)):
            state = read_state(state_path(part), size=size, sha256=sha256 if is_sha256_hex(sha256) else None)
            return sum(end - start for start, end in state.received) if state is not None else 0
        info = os.lstat(part)
    except (OSError, PipelineError):
        return 0
    return info.st_size if stat.S_ISREG(info.st_mode) else 0


def remove_cached(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except (IsADirectoryError, PermissionError):
        raise EnvironmentProblem(f"{path.name} is a folder, where the audit keeps a downloaded file", file=path,
                                 fix="remove that folder and run the audit again") from None


def link_or_copy(source: Path, target: Path) -> None:
    """A cache file placed in a working folder: a hard link where the file system allows one, else a copy."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)
