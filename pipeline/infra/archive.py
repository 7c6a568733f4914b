"""Deterministic tar and gzip: the same payload always gives the same bytes.

Tar (GNU format): members sorted by path, directories included, uid/gid 0,
empty user and group names, mode 0755 for directories and executables and
0644 for everything else, mtime = the source epoch, regular files and
directories only (a link or device in a payload is refused), padded to whole
10 KiB records like GNU tar.

Gzip: one member whose header has a fixed mtime (the epoch), no file name and
OS "unknown"; the deflate stream is cut at fixed 1 MiB boundaries of the
uncompressed input.  Each block is compressed on its own with the previous
32 KiB as preset dictionary and ends in a byte-aligned sync flush, the last in
a final block — pigz's scheme.  Because the cut points depend only on byte
offsets, never on the number of threads, the output is identical on one core
or many, while Python's zlib (which releases the GIL) compresses blocks on
every core.  Deflate output still depends on the zlib build
(`zlib.ZLIB_RUNTIME_VERSION`), which callers record with the archive.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import stat
import struct
import tarfile
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from pipeline.errors import InputError, IntegrityError
from pipeline.infra.safetar import DEFAULT_LIMITS, SafeTar, TarLimits
from pipeline.util.fs import atomic_output_file

# Part of the output format: changing either changes every archive's bytes.
BLOCK_SIZE = 1 << 20
WINDOW = 32 * 1024
MEMORY_LEVEL = 8  # gzip's and zlib's default
TAR_BLOCK = 512
TAR_RECORD = 20 * TAR_BLOCK
READ_CHUNK = 4 << 20
MAX_EPOCH = 2**32 - 1  # the gzip header holds 32 bits
DEFAULT_LEVEL = 9


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def _spread_workers() -> Callable[[], None] | None:
    """A thread-pool initializer that pins each compression thread to its own allowed CPU (Linux).

    On a loaded machine the scheduler was seen stacking both compression threads on one of two
    CPUs for much of a run (the bench: 0.85x of `pigz -p 2` unpinned, 1.07x pinned, median of
    10 runs at load 5); pigz's C threads stayed spread.  Only the pool's threads are pinned (on
    Linux the call binds the calling thread) and they end with the archive; the bytes do not
    depend on it.  Where affinity cannot be set, the threads simply stay unpinned.
    """
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return None
    if len(cpus) < 2:
        return None
    slots = itertools.count()

    def pin() -> None:
        with contextlib.suppress(OSError):  # the allowed set changed under us: stay unpinned
            os.sched_setaffinity(0, {cpus[next(slots) % len(cpus)]})

    return pin


@dataclass(frozen=True)
class Member:
    """One archive entry: `name` inside the archive, `source` on disk (None for a directory)."""

    name: str
    source: Path | None
    mode: int
    size: int

    @property
    def is_dir(self) -> bool:
        return self.source is None


@dataclass(frozen=True)
class ArchiveResult:
    sha256: str
    size: int
    uncompressed_size: int
    members: int


def _mode_for(st_mode: int) -> int:
    if stat.S_ISDIR(st_mode) or st_mode & 0o111:
        return 0o755
    return 0o644


def collect_members(root: Path, prefix: str = "") -> list[Member]:
    """Every directory and file under `root`, sorted by archive path; links and specials are refused."""
    prefix = prefix.strip("/")
    members: list[Member] = []
    if prefix:
        members.append(Member(prefix + "/", None, 0o755, 0))
    for directory, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(directory)
        for name in list(dirnames) + filenames:
            path = here / name
            info = path.lstat()
            relative = path.relative_to(root).as_posix()
            archive_name = f"{prefix}/{relative}" if prefix else relative
            if stat.S_ISLNK(info.st_mode):
                raise InputError(
                    "payload holds a symbolic link",
                    file=path,
                    found=os.readlink(path),
                    expected="regular files and folders only",
                    why="links resolve differently on the target (and Windows installers refuse them)",
                    fix="copy the file the link points to into the payload instead",
                )
            if stat.S_ISDIR(info.st_mode):
                members.append(Member(archive_name + "/", None, 0o755, 0))
            elif stat.S_ISREG(info.st_mode):
                members.append(Member(archive_name, path, _mode_for(info.st_mode), info.st_size))
            else:
                raise InputError("payload holds a special file (device, socket or FIFO)", file=path, expected="regular files and folders only")
    # Byte order of the UTF-8 names: the order GNU tar's --sort=name gives.
    members.sort(key=lambda m: m.name.rstrip("/").encode("utf-8"))
    return members


def _header(member: Member, mtime: int) -> bytes:
    info = tarfile.TarInfo(member.name.rstrip("/"))
    info.type = tarfile.DIRTYPE if member.is_dir else tarfile.REGTYPE
    info.mode = member.mode
    info.size = 0 if member.is_dir else member.size
    info.mtime = mtime
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info.tobuf(tarfile.GNU_FORMAT, "utf-8", "strict")


def tar_chunks(members: Iterable[Member], mtime: int) -> Iterator[bytes]:
    """The tar stream of `members` in pieces (headers, file data, padding)."""
    written = 0
    for member in members:
        header = _header(member, mtime)
        written += len(header)
        yield header
        if member.is_dir:
            continue
        assert member.source is not None
        remaining = member.size
        with open(member.source, "rb", buffering=0) as handle:
            while remaining:
                chunk = handle.read(min(READ_CHUNK, remaining))
                if not chunk:
                    break
                remaining -= len(chunk)
                yield chunk
            if remaining or handle.read(1):
                raise IntegrityError(
                    "file changed size while it was being archived",
                    file=member.source,
                    expected=f"{member.size} bytes",
                    fix="do not modify the payload while the package is built, then run the stage again",
                )
        written += member.size
        padding = -member.size % TAR_BLOCK
        if padding:
            written += padding
            yield bytes(padding)
    trailer = 2 * TAR_BLOCK
    trailer += -(written + trailer) % TAR_RECORD
    yield bytes(trailer)


def tar_size(members: Iterable[Member]) -> int:
    """Bytes of the tar stream `tar_chunks` makes (for progress reporting)."""
    total = 0
    for member in members:
        total += len(_header(member, 0))
        if not member.is_dir:
            total += member.size + (-member.size % TAR_BLOCK)
    total += 2 * TAR_BLOCK
    return total + (-total % TAR_RECORD)


def _compress_block(level: int, block: bytes, dictionary: bytes, last: bool) -> bytes:
    if dictionary:
        compressor = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS, MEMORY_LEVEL, zlib.Z_DEFAULT_STRATEGY, dictionary)
    else:
        compressor = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS, MEMORY_LEVEL, zlib.Z_DEFAULT_STRATEGY)
    return compressor.compress(block) + compressor.flush(zlib.Z_FINISH if last else zlib.Z_SYNC_FLUSH)


class DeterministicGzip:
    """A write-only gzip stream whose bytes do not depend on `jobs` (see the module docstring)."""

    def __init__(self, sink: BinaryIO, *, level: int = DEFAULT_LEVEL, mtime: int = 0, jobs: int | None = None) -> None:
        if not 1 <= level <= 9:
            raise ValueError(f"gzip level must be 1..9, not {level}")
        if not 0 <= mtime <= MAX_EPOCH:
            raise InputError("the archive time does not fit the gzip header", found=mtime, expected=f"0..{MAX_EPOCH} (seconds since 1970)")
        self.sink = sink
        self.level = level
        self.jobs = jobs or default_jobs()
        self.digest = hashlib.sha256()
        self.compressed = 0
        self.uncompressed = 0
        self._crc = 0
        self._pending = bytearray()
        self._previous_tail = b""
        self._inflight: deque[Future[bytes]] = deque()
        self._pool = ThreadPoolExecutor(max_workers=self.jobs, initializer=_spread_workers()) if self.jobs > 1 else None
        extra_flags = 2 if level == 9 else 4 if level == 1 else 0
        self._emit(b"\x1f\x8b\x08\x00" + struct.pack("<I", mtime) + bytes([extra_flags, 255]))

    def _emit(self, data: bytes) -> None:
        self.sink.write(data)
        self.digest.update(data)
        self.compressed += len(data)

    def _submit(self, block: bytes, last: bool) -> None:
        self._crc = zlib.crc32(block, self._crc)
        self.uncompressed += len(block)
        dictionary = self._previous_tail
        self._previous_tail = block[-WINDOW:] if len(block) >= WINDOW else (dictionary + block)[-WINDOW:]
        if self._pool is None:
            self._emit(_compress_block(self.level, block, dictionary, last))
            return
        self._inflight.append(self._pool.submit(_compress_block, self.level, block, dictionary, last))
        while len(self._inflight) > 2 * self.jobs:
            self._emit(self._inflight.popleft().result())

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._pending += data
        # Keep at least one byte back: the last block must be compressed as the final one.
        while len(self._pending) > BLOCK_SIZE:
            block = bytes(self._pending[:BLOCK_SIZE])
            del self._pending[:BLOCK_SIZE]
            self._submit(block, last=False)

    def close(self) -> None:
        try:
            self._submit(bytes(self._pending), last=True)
            self._pending.clear()
            while self._inflight:
                self._emit(self._inflight.popleft().result())
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True, cancel_futures=True)
        self._emit(struct.pack("<II", self._crc & 0xFFFFFFFF, self.uncompressed & 0xFFFFFFFF))


def gzip_bytes(data: bytes, *, level: int = DEFAULT_LEVEL, mtime: int = 0, jobs: int | None = None) -> bytes:
    import io

    buffer = io.BytesIO()
    stream = DeterministicGzip(buffer, level=level, mtime=mtime, jobs=jobs)
    stream.write(data)
    stream.close()
    return buffer.getvalue()


def write_gzip(
    chunks: Iterable[bytes],
    destination: Path,
    *,
    level: int = DEFAULT_LEVEL,
    mtime: int = 0,
    jobs: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> ArchiveResult:
    """Gzip a byte stream into `destination` atomically; returns the compressed file's hash and size."""
    with atomic_output_file(destination) as temporary, open(temporary, "wb") as sink:
        stream = DeterministicGzip(sink, level=level, mtime=mtime, jobs=jobs)
        for chunk in chunks:
            stream.write(chunk)
            if progress is not None:
                progress(len(chunk))
        stream.close()
    return ArchiveResult(stream.digest.hexdigest(), stream.compressed, stream.uncompressed, 0)


def write_tar_gz(
    root: Path,
    destination: Path,
    *,
    prefix: str,
    mtime: int,
    level: int = DEFAULT_LEVEL,
    jobs: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> ArchiveResult:
    """Archive the folder `root` under the top folder `prefix`/ as a deterministic .tar.gz."""
    if not 0 <= mtime <= MAX_EPOCH:
        raise InputError("the source epoch does not fit a tar or gzip header", found=mtime, expected=f"0..{MAX_EPOCH}")
    members = collect_members(root, prefix)
    result = write_gzip(tar_chunks(members, mtime), destination, level=level, mtime=mtime, jobs=jobs, progress=progress)
    return ArchiveResult(result.sha256, result.size, result.uncompressed_size, len(members))


@dataclass(frozen=True)
class TarEntry:
    name: str
    kind: str  # "file" or "dir"
    mode: int
    size: int
    sha256: str | None
    sha1: str | None
    uid: int
    gid: int
    uname: str
    gname: str
    mtime: int


def read_tar_gz(path: Path, *, limits: TarLimits = DEFAULT_LIMITS) -> list[TarEntry]:
    """Stream a .tar.gz and describe every member (hashes for files); links and specials are reported as such.

    Read through the bounded reader (`infra.safetar`): bombs, oversized
    headers and names that leave the archive (of any member type) are refused
    as IntegrityError while the archive streams.
    """
    entries: list[TarEntry] = []
    with SafeTar(path, limits=limits) as archive:
        for info in archive:
            if info.isdir():
                kind = "dir"
            elif info.isreg():
                kind = "file"
            else:
                kind = "link" if (info.issym() or info.islnk()) else "special"
            sha256 = sha1 = None
            if kind == "file":
                digest256 = hashlib.sha256()
                digest1 = hashlib.sha1(usedforsecurity=False)
                for chunk in archive.chunks(info, READ_CHUNK):
                    digest256.update(chunk)
                    digest1.update(chunk)
                sha256, sha1 = digest256.hexdigest(), digest1.hexdigest()
            entries.append(
                TarEntry(info.name.rstrip("/"), kind, info.mode, info.size, sha256, sha1, info.uid, info.gid, info.uname, info.gname, int(info.mtime))
            )
    return entries


def gzip_header_fields(path: Path) -> tuple[int, int]:
    """(flags, mtime) of a gzip file's header, for checks that it carries no name and a fixed time."""
    with open(path, "rb") as handle:
        header = handle.read(10)
    if len(header) < 10 or header[:3] != b"\x1f\x8b\x08":
        raise IntegrityError("is not a gzip file", file=path, found=header[:3].hex(), expected="1f8b08")
    return header[3], struct.unpack("<I", header[4:8])[0]
