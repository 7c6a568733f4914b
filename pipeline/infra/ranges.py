"""Large pinned files as parallel HTTP Range requests, hashed in order while they arrive.

A CDN caps each stream's throughput (Hugging Face, GitHub release downloads);
several ranges at once are what `aria2c -x16` or `hf_transfer` open.  Used by
`transfer.download` for a pinned, resumable file above `THRESHOLD`:

- the file is cut into pieces (`piece_size`: at most `PIECE`, the first
  round staggered so the connections do not finish in step) that up to
  `connections` threads fetch lowest offset first, one `Range: bytes=A-B`
  request per piece; once none is left, a free connection takes the second
  half of the piece with the most bytes to go (as aria2c splits), so the
  connections finish together, every request (`Accept-Encoding: identity`:
  a range of a compressed representation counts its compressed bytes) through `net.DownloadItem.open` (the one redirect,
  scheme and host rule, `net.open_stream`) and its body through
  `net.iter_body` (bounded by the piece's length), inside the item's and the
  caller's deadlines;
- bytes are written into place in a preallocated `<file>.part` and handed to
  one hashing thread, which feeds SHA-256 in file order as the contiguous
  prefix completes: bytes ahead of the prefix wait in memory, at most
  `HASH_BUFFER` of them (the farthest are dropped first); only what did
  not fit, and what an earlier run left, is read back from the `.part`
  (`Fetched.reread`), so memory stays bounded whatever the file's size;
- the intervals on disk are recorded in `<file>.part.ranges`
  (`pipeline.infra.range_state`, read as hostile input) once pieces have
  landed, at most every `SAVE_SECONDS`, by a thread of its own, each time
  after the `.part`'s data is flushed to the disk (one flush per state
  write, none per chunk, none on a receiving thread), so an interrupted
  download resumes range by range; a `.part` without it is
  the prefix the single stream left (one of the full size, whose holes
  cannot be told from bytes, starts over);
- a server that answers a ranged request with 200, a wrong or missing
  `Content-Range`, a `Content-Length` other than the range's, a body longer
  than the range, or an encoded body does not serve ranges faithfully: `RangesRefused`, and the caller
  fetches the file as one stream; a `Content-Range` total other than the
  pinned size fails closed (`size_mismatch`) and the bytes are deleted.
"""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import os
import shutil
import stat
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.errors import EnvironmentProblem, InputError, IntegrityError, RemoteError
from pipeline.infra import net
from pipeline.infra.range_state import RangeState, read_state, state_path, write_state
from pipeline.util import ui

# The downloads of this process writing into each file system (by st_dev), for the room check.
_ROOM_LOCK = threading.Lock()
_WRITING: dict[int, set[Any]] = {}

THRESHOLD = 64 << 20  # larger pinned files are fetched as parallel ranges
DEFAULT_CONNECTIONS = 8
MAX_CONNECTIONS = 64  # a thread and a connection each; aria2c stops at 16 per server, CDNs throttle clients that open hundreds
PIECE = 64 << 20  # one request per piece: 50 ms to the first byte costs 2% at 25 MiB/s (16 MiB cost 7%, 1.7 s of a 4 GiB file over 8)
MIN_PIECE = 64 << 10
HASH_BUFFER = 128 << 20  # bytes ahead of the hashed prefix held in memory, per file (up to connections x PIECE)
READ_BACK = 4 << 20  # what the hasher reads back from the .part at a time
SAVE_SECONDS = 1.0  # the state file is rewritten at most this often
STEAL = 2 << 20  # the least a connection takes over from another (a new request costs a first byte)


# The flags of every open of a cache file: no symbolic link followed, not inherited by children, binary on Windows.
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
_flush = getattr(os, "fdatasync", os.fsync)  # the data of a file, before a record that vouches for it


class RangesRefused(Exception):
    """The server does not serve ranges faithfully: the file is fetched as one stream instead."""


@dataclass
class Fetched:
    sha256: str
    resumed_from: int  # bytes an earlier run left on disk
    reread: int  # bytes hashed by reading them back from the .part
    connections: int  # the most connections held at once


def size_mismatch(item: net.DownloadItem, found: int, pinned: int) -> IntegrityError:
    return IntegrityError(
        f"the server says {item.label} is {found} bytes, {pinned} are pinned",
        file=item.url,
        field="Content-Range",
        found=f"{found} bytes",
        expected=f"{pinned} bytes",
        why="the file at this URL is not the pinned one (replaced, or another version); its bytes were deleted",
        fix="do not use this file; check the pin and the URL",
    )


def write_failed(part: Path, exc: OSError) -> EnvironmentProblem:
    """A failing write into a download's .part (ENOSPC, EIO): this machine's problem, never a broken connection to retry."""
    return EnvironmentProblem(f"cannot write {part.name}: {exc.strerror}", file=part,
                              fix="free disk space or pass --cache DIR on another disk; the bytes received so far are resumed")


def discard(part: Path) -> None:
    for path in (part, state_path(part)):
        try:
            path.unlink(missing_ok=True)
        except (IsADirectoryError, PermissionError):
            if not path.is_dir() or path.is_symlink():
                raise
            raise EnvironmentProblem(f"{path.name} is a folder, where the download keeps its partial bytes", file=path,
                                     fix="remove that folder (the download then starts the file over)") from None


def open_part(path: Path, flags: int) -> int:
    """A descriptor of a download's `.part`, never through a link: O_NOFOLLOW refuses a symbolic link, and
    a file with more than one name (a hard link planted in the cache to a file elsewhere) is refused
    before a byte is read or written, so no download ever changes a file outside its folder."""
    try:
        fd = os.open(path, flags | NOFOLLOW, 0o644)
    except OSError as exc:
        raise EnvironmentProblem(f"cannot open {path.name}: {exc.strerror or type(exc).__name__}", file=path,
                                 why="a download's partial file is never opened through a symbolic link or as a folder",
                                 fix=f"remove {path} (the download then starts the file over)") from None
    info = os.fstat(fd)
    if stat.S_ISREG(info.st_mode) and info.st_nlink == 1:
        return fd
    os.close(fd)
    raise EnvironmentProblem(f"{path.name} is not a download's own partial file", file=path, field="st_nlink",
                             found=f"{info.st_nlink} names" if stat.S_ISREG(info.st_mode) else "not a regular file", expected="a regular file with 1 name",
                             why="a hard link planted in the cache would make the download write into a file outside it",
                             fix=f"remove {path} (the download then starts the file over) and check who can write to the cache folder")


def piece_size(size: int, connections: int) -> int:
    """At least four pieces per connection, none over PIECE or under MIN_PIECE."""
    return max(MIN_PIECE, min(PIECE, size // (connections * 4)))


class Intervals:
    """Sorted, disjoint, merged `[start, end)` byte intervals."""

    def __init__(self, spans: tuple[tuple[int, int], ...] = ()) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []
        for start, end in spans:
            self.add(start, end)

    def add(self, start: int, end: int) -> None:
        low = bisect.bisect_left(self.ends, start)  # the first interval that ends at or after start
        high = bisect.bisect_right(self.starts, end)  # past the last one that starts at or before end
        if low < high:
            start, end = min(start, self.starts[low]), max(end, self.ends[high - 1])
        self.starts[low:high] = [start]
        self.ends[low:high] = [end]

    def end_at(self, offset: int) -> int | None:
        """The end of the interval holding `offset`, else None."""
        index = bisect.bisect_right(self.starts, offset) - 1
        return self.ends[index] if index >= 0 and offset < self.ends[index] else None

    def total(self) -> int:
        return sum(end - start for start, end in self.spans())

    def spans(self) -> tuple[tuple[int, int], ...]:
        return tuple(zip(self.starts, self.ends, strict=True))

    def missing(self, size: int) -> list[tuple[int, int]]:
        gaps, position = [], 0
        for start, end in self.spans():
            if start > position:
                gaps.append((position, start))
            position = end
        return gaps + ([(position, size)] if position < size else [])


def _prepare(part: Path, size: int, sha256: str | None) -> tuple[Intervals, int]:
    """What an earlier run left (checked), and the .part's descriptor (`open_part`: no link followed, one name
    only).  A state file exists only beside a full-size .part (`_Ranges.reserve` writes the first one when the
    server's first answer confirmed the size); a shorter .part without one is a single stream's prefix."""
    state_file = state_path(part)
    try:
        state = read_state(state_file, size=size, sha256=sha256)
    except InputError as error:
        ui.warn(f"{error.what} ({state_file.name}): starting {part.name} over")
        discard(part)
        state = None
    if state is not None and part.is_file() and not part.is_symlink() and part.stat().st_size == size:
        received = Intervals(state.received)
    elif state is not None and part.is_file() and not part.is_symlink() and all(end <= part.stat().st_size for _start, end in state.received):
        # Stopped after its first state, before the .part was made whole: every span it vouches for is there.
        received = Intervals(state.received)
    elif state is None and part.is_file() and not part.is_symlink() and 0 < part.stat().st_size < size:
        # The prefix of a single stream.  A full-size .part without its state may be a preallocated
        # one whose state was lost: its holes would pass for bytes, so it starts over.
        received = Intervals(((0, part.stat().st_size),))
    else:
        discard(part)
        received = Intervals()
    return received, open_part(part, os.O_RDWR | os.O_CREAT)  # checked before a state vouches for anything in it


def fetch(item: net.DownloadItem, part: Path, *, size: int, sha256: str | None, connections: int, budget: threading.Semaphore | None,
          bar: Callable[[int], Any] | None = None, on_bytes: Callable[[int], None] | None = None,
          piece: int | None = None, memory: int = HASH_BUFFER) -> Fetched:
    """Fetch `item` into `part` as parallel ranges; its SHA-256 as the bytes arrive (see the module)."""
    received, fd = _prepare(part, size, sha256)
    try:
        job = _Ranges(item, fd, part, size=size, sha256=sha256, received=received, connections=connections, budget=budget,
                      piece=piece or piece_size(size, connections), memory=memory, on_bytes=on_bytes, whole=os.fstat(fd).st_size == size)
        job.bar = bar(received.total()) if bar else None
        try:
            return job.run()
        finally:
            if job.bar:
                job.bar.finish()
    finally:
        os.close(fd)


class _Ranges:
    """One file's pieces, workers and in-order hasher; `cond` guards the shared fields."""

    def __init__(self, item: net.DownloadItem, fd: int, part: Path, *, size: int, sha256: str | None, received: Intervals, connections: int,
                 budget: threading.Semaphore | None, piece: int, memory: int, on_bytes, whole: bool = False) -> None:
        self.item, self.fd, self.part, self.size, self.sha256 = item, fd, part, size, sha256
        self.received, self.budget, self.memory, self.on_bytes = received, budget, memory, on_bytes
        self.resumed_from = received.total()
        self.pending = deque(self._pieces(received.missing(size), piece, connections))
        self.flying: list[list[int]] = []  # [next byte, end] of each piece in flight; a thief shortens `end`
        self.steal = max(MIN_PIECE, min(STEAL, piece // 4))
        # Bytes ahead of the hashed prefix beyond which the lowest piece is helped: a round of pieces in flight
        # is that far ahead anyway (the bytes past HASH_BUFFER are read back from the .part, in the page cache).
        self.lag_limit = max(memory * 3 // 4, connections * piece)
        # As many connections as there are pieces, or halves of pieces worth taking over.
        missing = size - self.resumed_from
        self.connections = min(connections, max(len(self.pending), missing // self.steal)) if self.pending else 0
        self.cond = threading.Condition()
        self.buffer: dict[int, bytes] = {}
        self.keys: list[int] = []  # offsets in `buffer`, sorted
        self.buffered = 0
        self.frontier = 0  # bytes hashed
        self.reread = 0
        self.error: BaseException | None = None
        self.active = 0  # workers running
        self.holding = self.peak = 0  # connections held now, and the most at once
        self.probed = threading.Event()  # the first answer showed the server serves ranges
        self.reserve_lock = threading.Lock()
        self.whole = whole  # `size` bytes long (sparse where nothing arrived), its state beside it: resumed, or made whole by `reserve`
        self.checked = False  # the room for the rest was checked (at the first answer)
        self.device: int | None = None
        self.save_lock = threading.Lock()
        self.save_wanted = threading.Event()  # a piece landed since the last save
        self.stopping = threading.Event()  # the saver's end
        self.bar = None

    @staticmethod
    def _pieces(gaps: list[tuple[int, int]], piece: int, connections: int) -> list[tuple[int, int]]:
        pieces = []
        for start, end in gaps:
            pieces += [(offset, min(end, offset + piece)) for offset in range(start, end, piece)]
        # The first round staggered (1/N, 2/N, ... of a piece): connections of equal speed then
        # finish one after another, and the bytes waiting ahead of the hashed prefix stay few.
        staggered = []
        for index, (start, end) in enumerate(pieces[:connections]):
            cut = min(end, start + max(MIN_PIECE, piece * (index + 1) // connections))
            staggered += [(start, cut)] + ([(cut, end)] if cut < end else [])
        return sorted(staggered + pieces[connections:])

    # -- shared state
    def take(self) -> list[int] | None:
        """The next piece as [next byte, end]: the lowest pending, else the second half of the piece in
        flight with the most bytes to go (or of the lowest, while the prefix lags); None when there is
        no work left worth a request."""
        with self.cond:
            if self.error is not None:
                return None
            # While more bytes wait for the hashed prefix than a round of pieces holds, a slow piece holds
            # the prefix back: help it rather than run further ahead.
            victim = self._victim(lowest=True) if self.received.total() - self.frontier > self.lag_limit else None
            if victim is None and self.pending:
                slot = list(self.pending.popleft())
            else:
                victim = victim or self._victim(lowest=False)
                if victim is None:
                    return None
                middle = victim[0] + (victim[1] - victim[0]) // 2
                slot, victim[1] = [middle, victim[1]], middle
            self.flying.append(slot)
            return slot

    def _victim(self, *, lowest: bool) -> list[int] | None:
        """The piece in flight to split (caller holds `cond`): the lowest, or the one with the most to go."""
        worth = [flying for flying in self.flying if flying[1] - flying[0] >= 2 * self.steal]
        if not worth:
            return None
        return min(worth) if lowest else max(worth, key=lambda flying: flying[1] - flying[0])

    def landed(self, slot: list[int]) -> None:
        with self.cond:
            self.flying.remove(slot)

    def work_left(self) -> bool:
        with self.cond:
            return self.error is None and (bool(self.pending) or any(end - start >= 2 * self.steal for start, end in self.flying))

    def fail(self, error: BaseException) -> None:
        with self.cond:
            if self.error is None:
                self.error = error
            self.cond.notify_all()
        self.probed.set()  # wake the workers waiting for the first answer

    def deposit(self, offset: int, data: bytes) -> None:
        """Bytes written at `offset`: on disk now; in memory too while HASH_BUFFER has room (nearest first)."""
        with self.cond:
            self.received.add(offset, offset + len(data))
            while self.buffered + len(data) > self.memory and self.keys and self.keys[-1] > offset:
                self.buffered -= len(self.buffer.pop(self.keys.pop()))  # farther ahead, and on disk: read back later
            if offset == self.frontier or self.buffered + len(data) <= self.memory:
                self.buffer[offset] = data
                bisect.insort(self.keys, offset)
                self.buffered += len(data)
            self.cond.notify_all()

    def reserve(self) -> None:
        """Once the server's first answer confirmed a file of the pinned size (never for a size only a manifest
        claims): check there is room for the rest now, not at 90% (counting what the other downloads of this
        process into the same file system still have to write), then record the state and make the .part whole
        (sparse: no byte written, so no file system is slow here while the answer waits)."""
        with self.reserve_lock:
            if self.checked:
                return
            try:
                device = os.fstat(self.fd).st_dev
                with _ROOM_LOCK:
                    others = sum(job.remaining() for job in _WRITING.get(device, set()))
                    free = shutil.disk_usage(self.part.parent).free
                    if free < others + self.remaining():
                        raise EnvironmentProblem(f"no room for {self.size} bytes of {self.part.name}", file=self.part,
                                                 found=f"{free} bytes free, of which other downloads here still have {others} to write",
                                                 fix="free disk space or pass --cache DIR on a larger disk")
                    _WRITING.setdefault(device, set()).add(self)
                    self.device = device
                if not self.whole:
                    with self.cond:
                        spans = self.received.spans()
                    if spans:
                        _flush(self.fd)  # an earlier stream's prefix, before the first state vouches for it
                    write_state(state_path(self.part), RangeState(self.size, self.sha256, spans))
                    os.ftruncate(self.fd, self.size)
                    self.whole = True
            except OSError as error:
                raise write_failed(self.part, error) from None
            self.checked = True

    def remaining(self) -> int:
        """Bytes this download still has to write."""
        with self.cond:
            return self.size - self.received.total()

    def _done_writing(self) -> None:
        if self.device is not None:
            with _ROOM_LOCK:
                _WRITING[self.device].discard(self)

    def save(self) -> None:
        """Record the intervals on disk: the .part's data is flushed first, then the state that vouches for it is
        replaced, so after a crash the state never names intervals whose data was still in the page cache."""
        with self.save_lock:
            with self.cond:
                spans = self.received.spans()
            _flush(self.fd)
            write_state(state_path(self.part), RangeState(self.size, self.sha256, spans))

    def _saver(self) -> None:
        """Saves off the receiving threads (a flush waits for the disk; a connection must not), at most every
        SAVE_SECONDS and only after a piece landed: one flush per state write, none per chunk."""
        while not self.stopping.wait(SAVE_SECONDS):
            if self.save_wanted.is_set():
                self.save_wanted.clear()
                try:
                    self.save()
                except BaseException as error:  # noqa: BLE001 - a failing disk stops the download, named
                    self.fail(write_failed(self.part, error) if isinstance(error, OSError) else error)
                    return

    # -- the run
    def run(self) -> Fetched:
        threads = [threading.Thread(target=self._work, args=(index,), name=f"range-{index}", daemon=True) for index in range(self.connections)]
        saver = threading.Thread(target=self._saver, name="range-state", daemon=True)
        self.active = len(threads)
        for thread in [*threads, saver]:
            thread.start()
        try:
            digest = self._hash()
        except BaseException as error:
            self.fail(error)
            raise
        finally:
            for thread in threads:
                thread.join()
            self.stopping.set()
            saver.join()
            self._done_writing()
        if digest is None or self.error is not None:
            error = self.error or RemoteError(f"download of {self.item.label} ended incomplete", file=self.item.url)
            if isinstance(error, IntegrityError | RangesRefused):
                discard(self.part)  # not the pinned file's bytes, or to be fetched as one stream
            elif self.whole:
                with contextlib.suppress(OSError):  # best effort: the error that stopped the download is the one to tell
                    self.save()  # resumed range by range next time (a .part never made whole stays a plain prefix)
            raise error
        state_path(self.part).unlink(missing_ok=True)
        return Fetched(digest.hexdigest(), self.resumed_from, self.reread, self.peak)

    def _hash(self):
        """Feed SHA-256 in file order as the contiguous prefix completes; None when a worker failed.

        The bytes ready at the prefix are taken in one batch (up to READ_BACK) and hashed in one
        call: each call gives the GIL away and may wait a switch interval (5 ms) to get it back
        from the receiving threads, so one call per chunk would hold the hash to a few MiB/s."""
        digest = hashlib.sha256()
        while True:
            with self.cond:
                while True:
                    if self.error is not None:
                        return None
                    if self.frontier >= self.size:
                        return digest
                    batch, end = self._ready()
                    if batch or end is not None:
                        break
                    if self.active == 0:
                        self.error = RemoteError(f"download of {self.item.label} ended with bytes {self.frontier}- missing", file=self.item.url)
                        return None
                    self.cond.wait(0.5)
            if batch:
                data = b"".join(batch)
            else:
                assert end is not None
                data = os.pread(self.fd, end - self.frontier, self.frontier)
                if not data:
                    raise RemoteError(f"the .part of {self.item.label} is shorter than recorded", file=self.part)
                self.reread += len(data)
            digest.update(data)
            with self.cond:
                self.frontier += len(data)
                self.item.held = self.frontier

    def _ready(self) -> tuple[list[bytes], int | None]:
        """What can be hashed at the prefix now (caller holds `cond`): chunks from memory, else the end of
        a span to read back from the .part (on disk but not in memory), else neither."""
        batch, position = [], self.frontier
        while position - self.frontier < READ_BACK and (data := self.buffer.pop(position, None)) is not None:
            del self.keys[bisect.bisect_left(self.keys, position)]
            self.buffered -= len(data)
            batch.append(data)
            position += len(data)
        if batch:
            return batch, None
        end = self.received.end_at(self.frontier)
        if end is None:
            return [], None
        after = bisect.bisect_right(self.keys, self.frontier)
        return [], min(end, self.keys[after] if after < len(self.keys) else end, self.frontier + READ_BACK)

    def _work(self, index: int) -> None:
        """One connection: pieces lowest offset first until none is left (or another worker failed)."""
        try:
            with self.item.scope():
                if index > 0 and not self._second_connection():
                    return
                with self.cond:
                    self.holding += 1
                    self.peak = max(self.peak, self.holding)
                try:
                    while (slot := self.take()) is not None:
                        self._fetch_piece(slot)
                        self.landed(slot)
                        self.save_wanted.set()
                finally:
                    with self.cond:
                        self.holding -= 1
                    if index > 0 and self.budget is not None:
                        self.budget.release()
        except BaseException as error:  # noqa: BLE001 - handed to the hashing thread, which raises it
            self.fail(error)
        finally:
            with self.cond:
                self.active -= 1
                self.cond.notify_all()

    def _second_connection(self) -> bool:
        """Connections past the first wait for the first answer (does the server serve ranges?) and
        for a free connection of the shared budget; False when there is no more work for them."""
        while not self.probed.wait(0.2):
            if self.item.late(net.BEFORE) is not None:
                return False
        while self.work_left():
            if self.budget is None or self.budget.acquire(timeout=0.2):
                return True
        return False

    def _fetch_piece(self, slot: list[int]) -> None:
        """Fetch bytes slot[0]..slot[1] (a thief may lower slot[1] meanwhile), retrying from where a broken answer stopped."""
        import requests

        item = self.item
        start, attempt = slot[0], 0
        while self.error is None:
            with self.cond:
                position, end = slot
            if position >= end:
                return
            error = item.late(net.BEFORE)
            if error is not None:
                raise error
            try:
                response = item.open(net.range_headers(position, end))
            except requests.RequestException as exc:
                error = item.late(net.HEADERS)
                if error is not None:
                    raise error from None
                attempt += 1
                if not item.may_retry(attempt):
                    raise item.unreachable(exc, attempt) from None
                continue
            with response:
                status = response.status_code
                refused = item.refused(status)
                if refused is not None:
                    raise refused
                if status >= 500 or status == 429:
                    attempt += 1
                    if not item.may_retry(attempt):
                        raise RemoteError(f"the server kept answering HTTP {status} for {item.label}", file=item.url, fix="try again later")
                    continue
                self._check_answer(response, position, end)
                self.reserve()
                self.probed.set()
                self._receive(response, slot, end)
            with self.cond:
                position, end = slot
            if position < end and self.error is None:
                attempt += 1
                if not item.may_retry(attempt):
                    raise RemoteError(f"the range {start}-{end - 1} of {item.label} broke off at byte {position}", file=item.url,
                                      fix="run the command again; the bytes received are resumed range by range")

    def _check_answer(self, response, start: int, end: int) -> None:
        """A ranged answer must be exactly the bytes asked for, of a file of the pinned size."""
        status, headers = response.status_code, response.headers
        if status != 206:
            raise RangesRefused(f"the server answered HTTP {status} to a ranged request")
        if net.is_encoded(response):
            # Before the total: the total of an encoded representation is not the file's size.
            raise RangesRefused("the server encodes its ranged answers")
        span = net.content_range(response)
        if span is None:
            raise RangesRefused(f"the server's 206 answer has no valid Content-Range (found {headers.get('Content-Range', '')[:80]!r})")
        if span[2] != self.size:
            raise size_mismatch(self.item, span[2], self.size)
        if span[:2] != (start, end):
            raise RangesRefused(f"asked for bytes {start}-{end - 1}, the server answered bytes {span[0]}-{span[1] - 1}")
        length = headers.get("Content-Length")
        if length is not None and length != str(end - start):
            raise RangesRefused(f"the server's answer for {end - start} bytes declares Content-Length {length[:40]!r}")

    def _write(self, data: bytes, position: int) -> None:
        """Into place in the .part; a failing disk is this machine's problem, never a broken connection to retry."""
        written = 0
        try:
            while written < len(data):
                written += os.pwrite(self.fd, memoryview(data)[written:], position + written)
        except OSError as exc:
            raise write_failed(self.part, exc) from None

    def _receive(self, response, slot: list[int], asked_end: int) -> None:
        """Write the body into place and hand it to the hasher, advancing slot[0]; it stops short on a
        broken connection, or where a thief took the rest of the piece over (the answer is dropped)."""
        import requests

        item = self.item
        start = slot[0]
        try:
            for chunk in net.iter_body(response, limit=asked_end - start, deadline=lambda _count: item.soonest(), label=item.label,
                                       url=item.url, what="a range", pinned=True):
                with self.cond:  # claim the bytes before writing them: a thief splits after slot[0]
                    position = slot[0]
                    data = chunk[: max(0, slot[1] - position)]
                    slot[0] = position + len(data)
                if not data:
                    break
                self._write(data, position)
                self.deposit(position, data)
                item.earn(len(data))
                if self.bar:
                    self.bar(len(data))
                if self.on_bytes:
                    self.on_bytes(len(data))
                if self.error is not None or len(data) < len(chunk):
                    break
        except (requests.RequestException, OSError):
            error = item.late(net.BODY)
            if error is not None:
                raise error from None
        except net.DeadlinePassed as error:
            raise item.late(net.BODY) or error from None
        except IntegrityError:
            # iter_body's bound is the range, not the pin: a body longer than its Content-Range is a server
            # that does not serve ranges faithfully (the one stream is bounded by the pin itself).
            raise RangesRefused(f"the server sent more than the {asked_end - start} bytes of the range {start}-{asked_end - 1} it declared") from None
