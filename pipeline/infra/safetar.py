"""The one tar reader for archives from outside: bounded while it streams.

Every tar the pipeline reads (the package behind `check-assets`, `qualify`
and `image`; image layers; the runtime source's `git archive`) is read here,
sequentially (tarfile's stream mode), with these bounds checked as the bytes
arrive, never after the fact:

- **inflated size** (`max_total_bytes`) and **inflate ratio** (`max_ratio`,
  checked once `ratio_floor` bytes are inflated): gzip is inflated in bounded
  pieces by `gzip.GzipFile` (xz, a `.deb`'s `data.tar.xz`, by `lzma.LZMAFile`; zstd, Ubuntu's
  `data.tar.zst`, by python-zstandard's stream reader, its window bounded by MAX_ZSTD_WINDOW so a
  frame cannot ask for GiB of memory), and every inflated byte is counted against the
  compressed bytes read so far, so a gzip bomb is refused after a few MiB,
  not after it has inflated to GiB;
- **extension headers**: a GNU long name/link or PAX header whose declared
  size exceeds `max_name_bytes`/`max_header_bytes` is refused *before*
  tarfile reads its data (tarfile would read the whole declared size into
  memory), and so is a chain of more than MAX_EXTENSION_CHAIN of them;
- **member count** (`max_members`) and **name length** (`max_name_bytes`, names
  and link targets);
- **names**: every member — file, folder or link — with an absolute name or a
  `..` component is refused, and so is a hard link whose target is; GNU
  sparse members are refused.

`extract_all` extracts with the pipeline's own rules (its docstring), the
same on every Python: tarfile's `data` filter is missing before 3.11.4 and
decides "inside" with a realpath that long names through links defeat.

Refusals and unreadable archives raise `error` (IntegrityError by default:
the archive is not what it claims to be), naming the archive and the member.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import lzma
import os
import stat
import tarfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

from pipeline.errors import IntegrityError, PipelineError

READ_CHUNK = 1 << 20
MAX_ZSTD_WINDOW = 1 << 27  # 128 MiB, zstd's limit without --long; dpkg-deb and Ubuntu's packages use far less
MAX_EXTENSION_CHAIN = 8  # GNU/PAX extension headers in a row before one member
_EXTENSION_TYPES = (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE)


@dataclass(frozen=True)
class TarLimits:
    max_members: int = 200_000  # a CUDA base image layer holds tens of thousands of files
    max_name_bytes: int = 4096  # PATH_MAX
    max_header_bytes: int = 64 * 1024  # one PAX header's records
    max_total_bytes: int = 64 * 1024**3  # the inflated tar stream
    max_ratio: int = 100  # inflated / compressed; real packages and layers are far below 20
    ratio_floor: int = 16 * 1024 * 1024  # small archives (mostly headers and padding) are exempt
    max_member_read: int = 64 * 1024 * 1024  # read_member() into memory


DEFAULT_LIMITS = TarLimits()


class _Counting(io.RawIOBase):
    """Counts the compressed bytes read from the file."""

    def __init__(self, raw: BinaryIO) -> None:
        self.raw = raw
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[override]
        data = self.raw.read(len(buffer))
        self.count += len(data)
        buffer[: len(data)] = data
        return len(data)


class _ZstdStream(io.RawIOBase):
    """zstd frames inflated by python-zstandard (imported here, only when a zstd archive is read), its window bounded;
    its errors become OSError, which the tar reader reports as an unreadable archive like gzip's and xz's."""

    def __init__(self, raw: BinaryIO) -> None:
        import zstandard

        self._error = zstandard.ZstdError
        self._reader = zstandard.ZstdDecompressor(max_window_size=MAX_ZSTD_WINDOW).stream_reader(
            raw, read_size=READ_CHUNK, read_across_frames=True, closefd=False)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[override]
        try:
            data = self._reader.read(len(buffer))
        except self._error as exc:
            raise OSError(f"zstd: {exc}") from None
        buffer[: len(data)] = data
        return len(data)


class _Inflated(io.RawIOBase):
    """The tar stream as tarfile sees it: counted, bounded, optionally shown to `on_bytes`."""

    def __init__(self, source, compressed: _Counting | None, limits: TarLimits, refuse: Callable[..., PipelineError], on_bytes) -> None:
        self.source = source
        self.compressed = compressed
        self.limits = limits
        self.refuse = refuse
        self.on_bytes = on_bytes
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[override]
        data = self.source.read(len(buffer))
        self.count += len(data)
        limits = self.limits
        if self.count > limits.max_total_bytes:
            raise self.refuse(f"inflates to more than {limits.max_total_bytes} bytes", why="a tar archive of this pipeline is bounded in size")
        if self.compressed is not None and self.count > limits.ratio_floor and self.count > limits.max_ratio * max(self.compressed.count, 1):
            raise self.refuse(
                f"inflates more than {limits.max_ratio} times ({self.count} bytes from {self.compressed.count} compressed so far)",
                why="a compression bomb: real packages and layers compress a few times, not hundreds",
            )
        if self.on_bytes is not None and data:
            self.on_bytes(data)
        buffer[: len(data)] = data
        return len(data)


def _tarinfo_class(limits: TarLimits, refuse: Callable[..., PipelineError]) -> type[tarfile.TarInfo]:
    class BoundedTarInfo(tarfile.TarInfo):
        # `_proc_member` dispatches extension headers to `_proc_gnulong`/`_proc_pax`, which read
        # the declared size into memory: check the size first.
        def _proc_member(self, archive):  # type: ignore[override]
            if self.type in _EXTENSION_TYPES:
                chain = getattr(archive, "_extension_chain", 0) + 1
                archive._extension_chain = chain
                if chain > MAX_EXTENSION_CHAIN:
                    raise refuse(f"has more than {MAX_EXTENSION_CHAIN} extension headers in a row", field=self.name)
                bound = limits.max_name_bytes + 1 if self.type in (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK) else limits.max_header_bytes
                if self.size > bound:
                    kind = "GNU long-name" if self.type in (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK) else "PAX"
                    raise refuse(f"has a {kind} header declaring {self.size} bytes (at most {bound})", field=self.name, why="an extension header of that size is read into memory; real ones are a few hundred bytes")
            else:
                archive._extension_chain = 0
            if self.type == tarfile.GNUTYPE_SPARSE:
                raise refuse("holds a GNU sparse member", field=self.name, expected="regular files, folders and links")
            return super()._proc_member(archive)

    return BoundedTarInfo


MAX_MTIME = 1 << 33  # year 2242: beyond it a member's time is an attack or a corruption, not a commit time


def _normalized(name: str) -> str:
    """A member name without '.' parts or trailing slashes (check_member_name already refused '..' and '/x')."""
    return "/".join(part for part in name.split("/") if part not in ("", "."))


def _mtime(member: tarfile.TarInfo, refuse: Callable[..., PipelineError]) -> int:
    mtime = member.mtime
    if isinstance(mtime, bool) or not isinstance(mtime, (int, float)) or not 0 <= mtime < MAX_MTIME:  # NaN fails both sides
        raise refuse("holds a member with an impossible time", field=member.name, found=repr(mtime), expected=f"seconds since 1970, below {MAX_MTIME}")
    return int(mtime)


def _make_folders(root: Path, parts: list[str]) -> None:
    """root/parts[0]/parts[1]/…, each a real folder (lstat: never one reached through a link)."""
    path = root
    for part in parts:
        path = path / part
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o755)
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            raise OSError(f"{path} exists and is not a folder")


def check_member_name(name: str, *, refuse: Callable[..., PipelineError], limits: TarLimits = DEFAULT_LIMITS, what: str = "member") -> None:
    """Refuse a member name (of any type) that is empty, absolute, too long or has a `..` component."""
    if len(name.encode("utf-8", "surrogateescape")) > limits.max_name_bytes:
        raise refuse(f"has a {what} name of more than {limits.max_name_bytes} bytes", field=name[:80] + "…")
    parts = PurePosixPath(name).parts
    if not name or name.startswith("/") or ".." in parts or ".." in name.split("\\") or "\0" in name:
        raise refuse(
            f"holds a {what} whose name leaves the archive's folder",
            field=name,
            expected="relative names without '..' (files, folders and links alike)",
            why="extracting it would write outside the target folder",
        )


class SafeTar:
    """Members of one tar stream, in order; use as a context manager and iterate once."""

    def __init__(
        self,
        source: Path | bytes | BinaryIO,
        *,
        compression: str | None = "gz",
        limits: TarLimits = DEFAULT_LIMITS,
        error: type[PipelineError] = IntegrityError,
        label: str | Path | None = None,
        on_bytes: Callable[[bytes], None] | None = None,
    ) -> None:
        if compression not in ("gz", "xz", "zst", None):
            raise ValueError(f"unknown compression {compression!r}")
        self.limits = limits
        self.compression = compression
        self.error = error
        self.label = str(label if label is not None else source if isinstance(source, Path) else "tar archive")
        self.members = 0
        self._close: list[Any] = []
        if isinstance(source, Path):
            raw: BinaryIO = open(source, "rb")  # noqa: SIM115 - closed by close()
            self._close.append(raw)
        elif isinstance(source, (bytes, bytearray, memoryview)):
            raw = io.BytesIO(bytes(source))
        else:
            raw = source
        counting = _Counting(raw) if compression is not None else None
        # GzipFile reads 128 KiB of compressed input at a time and inflates in bounded pieces, so the
        # compressed count runs at most that far ahead of what was inflated (no read-ahead buffer here);
        # LZMAFile (a .deb's data.tar.xz) reads and inflates the same way.
        stream: Any = raw
        if compression == "gz":
            stream = gzip.GzipFile(fileobj=counting, mode="rb")  # noqa: SIM115 - closed with the tar (close())
        elif compression == "xz":
            stream = lzma.LZMAFile(counting, mode="rb")  # noqa: SIM115 - closed with the tar (close())
        elif compression == "zst":  # Ubuntu's .deb members (data.tar.zst): python-zstandard, frames read in bounded pieces
            stream = _ZstdStream(counting)
        self.inflated = _Inflated(stream, counting, limits, self.refusal, on_bytes)
        self._buffered = io.BufferedReader(self.inflated, READ_CHUNK)
        self._tar: tarfile.TarFile | None = None
        try:
            self._tar = tarfile.open(  # noqa: SIM115 - closed by close()
                fileobj=self._buffered, mode="r|", tarinfo=_tarinfo_class(limits, self.refusal), encoding="utf-8", errors="surrogateescape"
            )
        except PipelineError:
            self.close()
            raise
        except (tarfile.TarError, OSError, EOFError, zlib.error, lzma.LZMAError, ValueError) as exc:  # ValueError: e.g. a PAX length of 4,300+ digits
            self.close()
            raise self._unreadable(exc) from None

    # -- errors
    def refusal(self, what: str, *, field: str | None = None, **kwargs: Any) -> PipelineError:
        kwargs.setdefault("fix", "do not use this archive; download or build it again from a trusted source")
        return self.error(f"the archive {what}", file=self.label, field=field, **kwargs)

    def _unreadable(self, exc: BaseException) -> PipelineError:
        return self.error(f"is not a readable tar{'.' + self.compression if self.compression else ''} archive ({exc})", file=self.label, fix="download or build the archive again")

    # -- reading
    def __enter__(self) -> SafeTar:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def close(self) -> None:
        if self._tar is not None:
            self._tar.close()
        for handle in reversed(self._close):
            handle.close()
        self._close.clear()

    def __iter__(self) -> Iterator[tarfile.TarInfo]:
        assert self._tar is not None
        while True:
            # tarfile keeps every TarInfo it read (for random access we never use): drop them, so
            # memory stays one member's worth however many members there are.
            self._tar.members.clear()
            try:
                member = self._tar.next()
                if member is None:
                    return
            except PipelineError:
                raise
            except RecursionError:
                raise self.refusal("nests extension headers too deeply") from None
            except (tarfile.TarError, OSError, EOFError, zlib.error, lzma.LZMAError, ValueError) as exc:  # ValueError covers UnicodeError and int() of a huge PAX length
                raise self._unreadable(exc) from None
            self.members += 1
            if self.members > self.limits.max_members:
                raise self.refusal(f"holds more than {self.limits.max_members} members")
            check_member_name(member.name, refuse=self.refusal, limits=self.limits)
            if member.islnk():
                check_member_name(member.linkname, refuse=self.refusal, limits=self.limits, what="hard-link target")
            elif member.issym() and len(member.linkname.encode("utf-8", "surrogateescape")) > self.limits.max_name_bytes:
                raise self.refusal(f"has a link target of more than {self.limits.max_name_bytes} bytes", field=member.name)
            yield member

    def chunks(self, member: tarfile.TarInfo, size: int = READ_CHUNK) -> Iterator[bytes]:
        """The data of the current file member, in pieces."""
        assert self._tar is not None
        try:
            handle = self._tar.extractfile(member)
            if handle is None:
                return
            while chunk := handle.read(size):
                yield chunk
        except PipelineError:
            raise
        except (tarfile.TarError, OSError, EOFError, zlib.error, lzma.LZMAError) as exc:
            raise self._unreadable(exc) from None

    def read_member(self, member: tarfile.TarInfo, limit: int | None = None) -> bytes:
        """The whole data of a (small) file member, refused above `limit` bytes."""
        limit = self.limits.max_member_read if limit is None else limit
        if member.size > limit:
            raise self.refusal(f"holds {member.name} of {member.size} bytes, more than the {limit} read into memory", field=member.name)
        return b"".join(self.chunks(member))

    def extract_all(self, destination: Path) -> None:
        """Extract every member under `destination`, which must not hold anything yet that a member names.

        The pipeline's own rules, on every Python, not tarfile's `data` filter: that filter is
        missing before 3.11.4 (Debian 12 ships 3.11.2), and it decides "inside" with a non-strict
        realpath, which a chain of long names through symbolic links defeats (CVE-2025-4517). Here
        "inside" is decided from the names alone (files never go through a link, every link is
        checked against the archive's other links), links are made last, and:
        - files, folders and symbolic links only: hard links (never in a `git archive`), devices
          and FIFOs are refused, and so are two members of one name;
        - a symbolic link's target is relative, goes through no other link and stays inside;
        - modes as the data filter sets them (no set-uid, no group/other write; the owner may read
          and write; nobody may execute what the owner may not), folders 0755, no owner taken;
        - times from the archive (the source commit's): files, then folders, deepest first.
        """
        assert self._tar is not None
        root = Path(destination)
        try:
            root.mkdir(parents=True, exist_ok=True)
            kinds: dict[str, str] = {}  # normalized name -> "file" | "dir" | "link"
            links: list[tuple[tarfile.TarInfo, str]] = []
            folder_times: dict[str, int] = {}  # folders the archive lists (others keep the time they were made)
            for member in self:
                name = _normalized(member.name)
                mtime = _mtime(member, self.refusal)
                if not (member.isreg() or member.isdir() or member.issym()):
                    kind = "hard link" if member.islnk() else "device, FIFO or other special file"
                    raise self.refusal(f"holds a {kind}", field=member.name, expected="files, folders and symbolic links only (what git archive writes)")
                if not name:
                    continue  # the archive's root folder ('.')
                self._claim(kinds, name, "dir" if member.isdir() else "link" if member.issym() else "file", member.name)
                parts = name.split("/")
                path = root.joinpath(*parts)
                if member.isdir():
                    _make_folders(root, parts)
                    os.chmod(path, 0o755)
                    folder_times[name] = mtime
                    continue
                _make_folders(root, parts[:-1])
                if member.issym():
                    links.append((member, name))
                else:
                    self._write(member, path)
                    os.utime(path, (mtime, mtime))
            for member, name in links:  # last: no member was ever written through a link
                self._check_link(member, name, kinds)
                os.symlink(member.linkname, root.joinpath(*name.split("/")))
            for name in sorted(folder_times, key=lambda n: (-n.count("/"), n)):
                os.utime(root.joinpath(*name.split("/")), (folder_times[name], folder_times[name]))
        except PipelineError:
            raise
        except (tarfile.TarError, OSError, EOFError, zlib.error, ValueError, OverflowError) as exc:
            raise self._unreadable(exc) from None

    def _claim(self, kinds: dict[str, str], name: str, kind: str, raw: str) -> None:
        parts = name.split("/")
        for depth in range(1, len(parts)):
            parent = "/".join(parts[:depth])
            if kinds.get(parent, "dir") != "dir":
                raise self.refusal(f"holds a member inside a {'symbolic link' if kinds[parent] == 'link' else 'file'} ({parent})", field=raw, why="writing through a link can write anywhere")
            kinds.setdefault(parent, "dir")
        if name in kinds and not (kind == "dir" and kinds[name] == "dir"):
            raise self.refusal("holds two members of one name", field=raw, why="the second would replace the first, or write through it")
        kinds[name] = kind

    def _check_link(self, member: tarfile.TarInfo, name: str, kinds: dict[str, str]) -> None:
        target = member.linkname
        where = name.split("/")[:-1]
        parts = target.split("/") if target else []
        if not target or target.startswith("/") or "\0" in target or "\\" in target or ":" in parts[0]:
            raise self.refusal("holds a symbolic link whose target is absolute or malformed", field=member.name, found=target, expected="a relative target inside the archive")
        for part in parts:
            if part in ("", "."):
                continue
            if kinds.get("/".join(where)) == "link":
                raise self.refusal("holds a symbolic link whose target goes through another link", field=member.name, found=target, why="where it ends depends on the other link; links out are made that way")
            if part == "..":
                if not where:
                    raise self.refusal("holds a symbolic link that leaves the archive's folder", field=member.name, found=target, why="a link out lets a later reader write or read anywhere")
                where.pop()
            else:
                where.append(part)

    def _write(self, member: tarfile.TarInfo, path: Path) -> None:
        mode = member.mode & 0o755
        if not mode & 0o100:
            mode &= ~0o111  # executable for others only if for the owner
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
        descriptor = os.open(path, flags, 0o600)
        with os.fdopen(descriptor, "wb") as handle:
            for chunk in self.chunks(member):
                handle.write(chunk)
        os.chmod(path, mode | 0o600)

    def drain(self) -> int:
        """Read the rest of the stream (padding after the end-of-archive blocks); the inflated byte count."""
        try:
            while self._buffered.read(READ_CHUNK):
                pass
        except PipelineError:
            raise
        except (OSError, EOFError, zlib.error) as exc:
            raise self._unreadable(exc) from None
        return self.inflated.count


def inflate_chunks(path: Path, *, limits: TarLimits = DEFAULT_LIMITS, error: type[PipelineError] = IntegrityError, size: int = READ_CHUNK) -> Iterator[bytes]:
    """The inflated bytes of a gzip file, bounded like a tar.gz (size and ratio), in pieces."""
    with open(path, "rb") as raw:
        counting = _Counting(raw)

        def refuse(what: str, **kwargs: Any) -> PipelineError:
            kwargs.setdefault("fix", "do not use this file; download or build it again")
            return error(f"the gzip file {what}", file=path, **kwargs)

        inflated = _Inflated(gzip.GzipFile(fileobj=counting, mode="rb"), counting, limits, refuse, None)
        try:
            while chunk := inflated.read(size):
                yield chunk
        except PipelineError:
            raise
        except (OSError, EOFError, zlib.error) as exc:
            raise error(f"is not a readable gzip file ({exc})", file=path) from None
