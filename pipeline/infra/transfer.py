"""Moving blobs over HTTP(S): streamed, hashed while they arrive, resumable.

Used for the pinned toolchain wheels and by `audit` for every published
asset (model artefacts are tens of GiB).  The SHA-256 is computed on the bytes
as they are written, so a complete file is never read a second time; an
interrupted download resumes with an HTTP Range request from its `.part`
file: within one call the running digest simply continues after a broken
connection; only a `.part` left by an earlier run is read back, once.  Connection errors
and 5xx answers are retried with exponential backoff; a 404 is final.  The
file appears under its name only after size and hash match.  The `.part` is
never opened through a link and one with a second name is refused
(`ranges.open_part`); who may write it at all is the caller's lock (audit's
cache: one writer per file, `pipeline.util.fs.exclusive_lock`).  A pinned file
larger than `ranges.THRESHOLD` is fetched as parallel Range requests
(`pipeline.infra.ranges`) when the caller allows more than one connection.

Bounded by construction (`pipeline.infra.net`): the running byte count stops a
download the moment it passes the pinned size (or, unpinned, a named cap),
and those bytes are deleted; `timeout` is both the idle timeout and an
overall deadline for the item, enforced inside every socket read (connect,
status line and headers, body: `net.deadlines`), and a caller's `overall`
deadline (audit's, for the whole run) bounds every item the same way;
redirects are followed by hand, by policy.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import EnvironmentProblem, IntegrityError, PipelineError, RemoteError
from pipeline.infra import net, ranges
from pipeline.infra.range_state import state_path
from pipeline.util import ui

CHUNK = 1024 * 1024
RETRIES = 4


@dataclass
class Download:
    url: str
    path: Path
    sha256: str
    size: int
    resumed_from: int
    seconds: float
    resumed_at: tuple[int, ...] = ()  # byte offsets of every HTTP Range resume (first try included)
    connections: int = 1  # the most connections its ranges held at once (1: one stream)
    reread: int = 0  # bytes hashed by reading them back from the .part (resumed, or past the hashing buffer)


def _session(session=None):
    if session is not None:
        return session
    return net.deadline_session()  # the item's deadline bounds the header phase too


def _hash_existing(path: Path, digest) -> int:
    size = 0
    with os.fdopen(ranges.open_part(path, os.O_RDONLY), "rb") as handle:
        while chunk := handle.read(CHUNK * 4):
            digest.update(chunk)
            size += len(chunk)
    return size


class _Stream:
    """The file as one HTTP stream into `part`, resumed with `Range: bytes=N-` from what it holds."""

    def __init__(self, item: net.DownloadItem, part: Path, *, expected_size: int | None, limit: int, resume: bool, progress, on_bytes) -> None:
        self.item, self.part = item, part
        self.expected_size, self.limit, self.resume = expected_size, limit, resume
        self.progress, self.on_bytes = progress, on_bytes
        self.digest = hashlib.sha256()
        self.have = -1  # bytes of `part` already in `digest`; -1: not read yet
        self.attempt = 0
        self.resumed_from = 0
        self.resumed_at: list[int] = []

    def give_up(self, error: Exception, *, keep: bool) -> Exception:
        if not (keep and self.resume):
            self.part.unlink(missing_ok=True)
        return error

    def failed(self, error: Exception) -> None:
        """Count a failed attempt: back off, or raise `error` when none is left (partial bytes kept)."""
        self.attempt += 1
        if not self.item.may_retry(self.attempt):
            raise self.give_up(error, keep=True) from None

    def restart(self) -> None:
        self.part.unlink(missing_ok=True)
        self.digest, self.have = hashlib.sha256(), 0

    def sync(self) -> None:
        """The digest continues across retries: only a .part left by an earlier run (or one whose
        size no longer matches what was hashed) is read back."""
        if os.path.islink(self.part) or (os.path.lexists(self.part) and not self.part.is_file()):
            ranges.discard(self.part)  # never read or written through (a folder there is named: EnvironmentProblem)
            self.have = -1
        elif os.path.lexists(state_path(self.part)) and (not self.part.exists() or self.part.stat().st_nlink == 1):
            # A ranged download's .part (whole-size, its gaps holes): never a stream's prefix.  (A .part with a
            # second name is left for the reader below to refuse, naming it.)
            ranges.discard(self.part)
            self.have = -1
        if not self.resume:
            self.restart()
        elif self.have < 0 or not self.part.exists() or self.part.stat().st_size != self.have:
            self.digest = hashlib.sha256()
            self.have = _hash_existing(self.part, self.digest) if self.part.exists() else 0
        if self.have > self.limit:
            self.restart()
        self.item.held = self.have

    def run(self) -> None:
        import requests

        item = self.item
        while True:
            error = item.late(net.BEFORE)
            if error is not None:
                raise self.give_up(error, keep=True)
            self.sync()
            if self.attempt == 0:
                self.resumed_from = self.have
            headers = net.range_headers(self.have) if self.have else {}
            if self.have:
                self.resumed_at.append(self.have)
            try:
                response = item.open(headers)
            except requests.RequestException as exc:
                error = item.late(net.HEADERS)  # a session without the deadline adapter: known only now
                if error is not None:
                    raise self.give_up(error, keep=True) from None
                self.failed(item.unreachable(exc, self.attempt + 1))
                continue
            except PipelineError as error:
                raise self.give_up(error, keep=True) from None
            with response:
                if self.answer(response):
                    return

    def answer(self, response) -> bool:
        """Take one answer: True when the file is complete, False to ask again (after any backoff)."""
        status = response.status_code
        if status == 416 and self.expected_size is not None and self.have == self.expected_size:
            return True  # the part file is already complete
        refused = self.item.refused(status)
        if refused is not None or status == 416:
            raise self.give_up(refused or RemoteError(f"unexpected HTTP 416 for {self.item.label}", file=self.item.url), keep=True)
        if status >= 500 or status == 429:
            self.failed(RemoteError(f"the server kept answering HTTP {status} for {self.item.label}", file=self.item.url, fix="try again later"))
            return False
        if status == 200 and self.have:
            self.restart()  # the server ignored the Range request: start over
        elif status == 206 and self.have and not self._resumes_here(response):
            self.restart()  # an answer for other bytes than asked: ask for the whole file
            return False
        if not self.receive(response):
            return False  # it broke off (the attempt is counted): ask again from what arrived
        if self.expected_size is not None and self.have < self.expected_size:
            self.failed(RemoteError(f"download of {self.item.label} stopped at {self.have} of {self.expected_size} bytes", file=self.item.url, fix="run the command again"))
            return False
        return True

    def _resumes_here(self, response) -> bool:
        """A 206 answer must continue at the bytes held; a pinned file's total must be the pin (else fail closed)."""
        if net.is_encoded(response):
            return False  # ranges of an encoded representation: its total is not the file's size
        span = net.content_range(response)
        if span is not None and self.expected_size is not None and span[2] != self.expected_size:
            raise self.give_up(ranges.size_mismatch(self.item, span[2], self.expected_size), keep=False)
        return span is not None and span[0] == self.have

    def receive(self, response) -> bool:
        """Write the body on: True when it ended, False when the connection broke (and may be retried)."""
        import requests

        item = self.item
        length = response.headers.get("Content-Length")
        total = self.expected_size or (int(length) + self.have if length and length.isdigit() else None)
        bar = _bar(self.progress, item.label, total, self.have)
        try:
            with _open_sink(self.part, append=bool(self.have)) as sink:
                for chunk in net.iter_body(response, limit=self.limit - self.have, deadline=lambda _count: item.soonest(),
                                           label=item.label, url=item.url, what="a document of this kind", pinned=self.expected_size is not None):
                    _write(sink, chunk, self.part)
                    self.digest.update(chunk)
                    self.have += len(chunk)
                    item.held = self.have
                    item.earn(len(chunk))
                    if bar:
                        bar(len(chunk))
                    if self.on_bytes:
                        self.on_bytes(len(chunk))
        except (requests.RequestException, OSError) as exc:
            error = item.late(net.BODY)
            if error is not None:
                raise self.give_up(error, keep=True) from None
            self.failed(RemoteError(f"download of {item.label} broke off after {self.have} bytes: {type(exc).__name__}", file=item.url, fix="run the command again; the partial file is resumed"))
            return False
        except net.DeadlinePassed as error:
            # A valid prefix of a pinned file is resumed next time; the overall deadline is named first.
            raise self.give_up(item.late(net.BODY) or error, keep=True) from None
        except EnvironmentProblem as error:
            raise self.give_up(error, keep=True) from None  # the disk, not the bytes: resumed once there is room
        except PipelineError as error:
            raise self.give_up(error, keep=False) from None  # over the pin or the cap: these bytes are not the file
        finally:
            if bar:
                bar.finish()
        return True


def _open_sink(part: Path, *, append: bool):
    """The .part for writing (`ranges.open_part`: no link followed, one name only), emptied unless `append`:
    checked before it is truncated, so a planted link's target is never changed."""
    fd = ranges.open_part(part, os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else 0))
    if not append:
        os.ftruncate(fd, 0)
    return os.fdopen(fd, "ab" if append else "wb")


def _write(sink, chunk: bytes, part: Path) -> None:
    try:
        sink.write(chunk)
    except OSError as exc:
        raise ranges.write_failed(part, exc) from None


def _bar(progress, label: str, total: int | None, done: int):
    """A progress bar for one file: `progress` is False, True (a `ui.ByteProgress` line) or an object
    with `file(label, total, done)` (audit's `infra.progress.TransferProgress`)."""
    if not progress:
        return None
    if progress is True:
        bar = ui.ByteProgress(label, total)
        bar.done = done
        return bar
    return progress.file(label, total, done)


@contextlib.contextmanager
def _connection(budget: threading.Semaphore | None, item: net.DownloadItem) -> Iterator[None]:
    """Hold one connection of a shared budget (audit's --connections) for the item's own stream."""
    if budget is None:
        yield
        return
    while not budget.acquire(timeout=0.2):
        error = item.late(net.BEFORE)
        if error is not None:
            raise error
    try:
        yield
    finally:
        budget.release()


def download(
    url: str,
    target: Path,
    *,
    label: str | None = None,
    session=None,
    expected_size: int | None = None,
    expected_sha256: str | None = None,
    max_size: int | None = None,
    timeout: float = 60.0,
    deadline: float | None = None,
    retries: int = RETRIES,
    progress=True,
    on_bytes=None,
    redirects: str = "same-origin",
    resume: bool = True,
    overall: net.Deadline | None = None,
    connections: int = 1,
    range_threshold: int = ranges.THRESHOLD,
    budget: threading.Semaphore | None = None,
) -> Download:
    """Fetch `url` into `target` (resuming `target.part`), returning its SHA-256 and size.

    Bounded: at most `expected_size` bytes (the pin) or, unpinned, `max_size`
    (a named cap; one of the two is required); `timeout` seconds of silence
    fail a request; the whole item, retries included, may take `timeout`
    seconds plus what arrived at `net.DEADLINE_FLOOR_RATE`, and never more
    than `deadline` seconds (default `net.deadline_for(timeout, expected_size)`:
    an unpinned document gets `timeout`).  Bytes over the
    limit are deleted, never kept as `.part`; redirects follow `redirects`
    (`net.redirect_problem`).  `resume=False` starts from byte 0 every time
    (for unpinned documents, whose earlier bytes may belong to another version).

    A pinned, resumable file larger than `range_threshold` is fetched as up to
    `connections` parallel Range requests (`pipeline.infra.ranges`; its state
    is bound to `expected_sha256`); a server that does not serve ranges
    faithfully gets one stream instead.  `budget` is a connection budget
    shared with other downloads (audit's --connections): this item holds one
    of its connections, its ranges take more while some are free.

    `overall` is a deadline shared by many downloads (audit's whole run): the
    item fails with its error the moment it passes, in any phase, and
    starts no request once it has passed; the bytes received earn it time
    when it is paced.  On a session with `net.deadline_adapter` mounted (the
    default session has it) both deadlines bound every socket read, so a
    server that trickles header or body bytes is cut off when one passes.
    """
    if expected_size is None and max_size is None:
        raise ValueError("an unpinned download needs max_size")
    limit = expected_size if expected_size is not None else max_size
    assert limit is not None
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(target.name + ".part")
    label = label or target.name
    seconds = deadline if deadline is not None else net.deadline_for(timeout, expected_size)
    item = net.DownloadItem(url, label, _session(session), timeout=timeout, seconds=seconds, retries=retries, redirects=redirects, overall=overall)
    if not resume:
        part.unlink(missing_ok=True)
    with item.scope(), _connection(budget, item):
        if resume and expected_size is not None and connections > 1 and expected_size > range_threshold:
            try:
                fetched = ranges.fetch(item, part, size=expected_size, sha256=expected_sha256, connections=connections,
                                       budget=budget, bar=lambda done: _bar(progress, label, expected_size, done), on_bytes=on_bytes)
            except ranges.RangesRefused as refused:
                ui.info(f"{label}: {refused}; fetching it as one stream")
                ranges.discard(part)
            else:
                os.replace(part, target)
                return Download(url, target, fetched.sha256, expected_size, fetched.resumed_from, time.monotonic() - item.started,
                                connections=fetched.connections, reread=fetched.reread)
        stream = _Stream(item, part, expected_size=expected_size, limit=limit, resume=resume, progress=progress, on_bytes=on_bytes)
        stream.run()
    os.replace(part, target)
    return Download(url, target, stream.digest.hexdigest(), stream.have, stream.resumed_from, time.monotonic() - item.started, tuple(stream.resumed_at))


def download_verified(
    url: str,
    target: Path,
    *,
    expected_sha256: str,
    expected_size: int | None = None,
    max_size: int | None = None,
    label: str | None = None,
    session=None,
) -> Download:
    """A download pinned by SHA-256; without a pinned size, `max_size` bounds it (and its deadline)."""
    bounds: dict = {}
    if expected_size is None:
        if max_size is None:
            raise ValueError("a download pinned by hash only needs max_size")
        bounds = {"max_size": max_size, "deadline": net.deadline_for(60.0, max_size)}
    result = download(url, target, label=label, session=session, expected_size=expected_size, **bounds)
    if (expected_size is not None and result.size != expected_size) or result.sha256 != expected_sha256:
        target.unlink(missing_ok=True)
        raise IntegrityError(
            f"downloaded bytes of {label or target.name} do not match the pin",
            file=url,
            found=f"sha256 {result.sha256}, {result.size} bytes",
            expected=f"sha256 {expected_sha256}" + (f", {expected_size} bytes" if expected_size is not None else ""),
            why="the file at this URL is not the one that was pinned (tampered, replaced, or a wrong pin)",
            fix="do not use these bytes; check the pin's provenance",
        )
    return result
