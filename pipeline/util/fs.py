"""File-system writes that are never half-done.

Every output is written under a temporary name in its destination folder and
renamed into place, so a crash or a failed check leaves either the old file or
nothing, never a truncated one.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, *, mode: int = 0o644) -> None:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp_name, mode)
        os.replace(tmp_name, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise


@contextlib.contextmanager
def atomic_output_file(path: str | os.PathLike[str], *, mode: int = 0o644) -> Iterator[Path]:
    """Yield a temporary path beside `path`; rename it into place on success."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


@contextlib.contextmanager
def atomic_output_dir(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield an empty staging folder; it replaces `path` only when the block succeeds."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".staging", dir=target.parent))
    try:
        yield staging
        if target.exists():
            retired = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old", dir=target.parent))
            os.replace(target, retired / "old")
            os.replace(staging, target)
            shutil.rmtree(retired, ignore_errors=True)
        else:
            os.replace(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def copy_file(source: Path, destination: Path, *, mode: int | None = None) -> None:
    destination.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, destination)
    if mode is not None:
        os.chmod(destination, mode)


def relative_posix(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix()


def read_bytes_bounded(path: str | os.PathLike[str], limit: int, *, what: str = "file") -> bytes:
    """The bytes of `path`, refusing a file over `limit` bytes without reading more than limit + 1."""
    from ..errors import InputError

    try:
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except FileNotFoundError:
        raise InputError("file does not exist", file=path) from None
    except IsADirectoryError:
        raise InputError("is a folder, not a file", file=path) from None
    if len(data) > limit:
        raise InputError(
            f"is larger than the {limit} bytes allowed for a {what}",
            file=path,
            why="inputs are read with a size bound so that a hostile file cannot fill memory",
            fix=f"check that this is really a {what}",
        )
    return data
