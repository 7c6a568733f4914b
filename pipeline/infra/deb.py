"""Reading a Debian binary package (`.deb`, deb(5)): the `ar` container, `control.tar`, `data.tar`.

Only ever called on a file whose SHA-256 already matched the lock (hash before parse).  The `ar`
container is read by its fixed 60-byte headers (a magic, then `debian-binary` = "2.0\\n",
`control.tar.{gz,xz,zst}`, `data.tar.{gz,xz,zst}` or an uncompressed `data.tar`, nothing else), every
size checked against the file; both tars go through the bounded tar reader (`infra/safetar.py`:
sizes, ratio, names, extension headers).  zstd (Ubuntu's choice since 21.10) is read with
python-zstandard, a pinned dependency: Python 3.11 has no zstd in its standard library.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from pipeline.errors import IntegrityError
from pipeline.infra.safetar import SafeTar, TarLimits

AR_MAGIC = b"!<arch>\n"
AR_HEADER = 60
MAX_CONTROL_FILE = 4 * 1024 * 1024  # one control-archive member (a large symbols file is ~1 MiB)
CONTROL_FILES = ("control", "md5sums", "conffiles", "preinst", "postinst", "prerm", "postrm", "triggers", "shlibs", "symbols", "templates", "config")
COMPRESSIONS = {"": None, ".gz": "gz", ".xz": "xz", ".zst": "zst"}


@dataclass(frozen=True)
class ArMember:
    name: str
    offset: int
    size: int


class _Slice(io.RawIOBase):
    """`size` bytes of an open file from `offset`: a member of the ar container as a stream."""

    def __init__(self, handle: BinaryIO, offset: int, size: int) -> None:
        self.handle, self.left = handle, size
        handle.seek(offset)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[override]
        if self.left <= 0:
            return 0
        data = self.handle.read(min(len(buffer), self.left))
        self.left -= len(data)
        buffer[: len(data)] = data
        return len(data)


def _refuse(label: str, what: str, **details) -> IntegrityError:
    details.setdefault("fix", "do not use this package; its bytes matched the lock, so the lock pins a malformed package: lock again from the archive")
    return IntegrityError(f"is not a Debian package: {what}", file=label, **details)


def ar_members(path: Path, *, label: str) -> list[ArMember]:
    size = path.stat().st_size
    members: list[ArMember] = []
    with open(path, "rb") as handle:
        if handle.read(len(AR_MAGIC)) != AR_MAGIC:
            raise _refuse(label, "it does not start with the ar magic", expected="'!<arch>\\n'")
        offset = len(AR_MAGIC)
        while offset < size:
            header = handle.read(AR_HEADER)
            if len(header) != AR_HEADER or header[58:60] != b"`\n":
                raise _refuse(label, f"a broken ar member header at byte {offset}")
            name = header[0:16].decode("ascii", "replace").rstrip(" ").removesuffix("/")
            length_text = header[48:58].decode("ascii", "replace").strip()
            if not length_text.isdigit() or offset + AR_HEADER + int(length_text) > size:
                raise _refuse(label, f"the ar member {name!r} declares a size the file does not hold", found=length_text)
            length = int(length_text)
            members.append(ArMember(name, offset + AR_HEADER, length))
            offset += AR_HEADER + length + (length & 1)
            handle.seek(offset)
            if len(members) > 3:
                break
    names = [m.name for m in members]
    if len(names) != 3 or names[0] != "debian-binary" or not names[1].startswith("control.tar") or not names[2].startswith("data.tar"):
        raise _refuse(label, "its members are not debian-binary, control.tar.*, data.tar.*", found=names[:5])
    for member in members[1:]:
        suffix = member.name.split(".tar", 1)[1]
        if suffix not in COMPRESSIONS:
            raise _refuse(label, f"{member.name} is compressed in a way this reader does not take", found=member.name,
                          expected="control.tar/data.tar uncompressed, .gz, .xz (Debian's defaults) or .zst (Ubuntu's)",
                          fix="this reader takes what dpkg-deb writes; a package compressed otherwise is not one from Debian's or Ubuntu's archive")
    with open(path, "rb") as handle:
        handle.seek(members[0].offset)
        if handle.read(members[0].size) != b"2.0\n":
            raise _refuse(label, "debian-binary is not '2.0'")
    return members


@contextmanager
def open_tar(path: Path, member: ArMember, *, label: str, limits: TarLimits) -> Iterator[SafeTar]:
    compression = COMPRESSIONS[member.name.split(".tar", 1)[1]]
    with open(path, "rb") as handle, SafeTar(_Slice(handle, member.offset, member.size), compression=compression, limits=limits,
                                            label=f"{label}!{member.name}") as tar:
        yield tar


def control_files(path: Path, *, label: str, limits: TarLimits) -> dict[str, bytes]:
    """The control archive's files by name (control, md5sums, the maintainer scripts…); others are refused."""
    members = ar_members(path, label=label)
    found: dict[str, bytes] = {}
    with open_tar(path, members[1], label=label, limits=limits) as tar:
        for member in tar:
            name = member.name.removeprefix("./")
            if member.isdir() and name in ("", "."):
                continue
            if not member.isreg() or name not in CONTROL_FILES or name in found:
                raise tar.refusal("holds a control member this reader does not know", field=member.name, expected=", ".join(CONTROL_FILES))
            found[name] = tar.read_member(member, MAX_CONTROL_FILE)
    if "control" not in found:
        raise _refuse(label, "its control archive has no control file")
    return found
