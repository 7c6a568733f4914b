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
import time
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
def atomic_output_dir(path: str | os.PathLike[str], *, mode: int = 0o755) -> Iterator[Path]:
    """Yield an empty staging folder; it replaces `path` only when the block succeeds.

    The staging folder is private while it fills (mkdtemp makes it 0700); the
    published folder gets `mode`, so others (a web server, another user) can
    read what was published.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".staging", dir=target.parent))
    try:
        yield staging
        os.chmod(staging, mode)
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
    from pipeline.errors import InputError

    try:
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except FileNotFoundError:
        raise InputError("file does not exist", file=path) from None
    except IsADirectoryError:
        raise InputError("is a folder, not a file", file=path) from None
    except OSError as error:  # no permission, a file where a folder should be, a link loop: bad input, not a bug
        raise InputError(f"could not be read ({error.strerror or type(error).__name__})", file=path) from None
    if len(data) > limit:
        raise InputError(
            f"is larger than the {limit} bytes allowed for a {what}",
            file=path,
            why="inputs are read with a size bound so that a hostile file cannot fill memory",
            fix=f"check that this is really a {what}",
        )
    return data


@contextlib.contextmanager
def exclusive_lock(path: str | os.PathLike[str], *, waiting: str | None = None, on_wait=None, give_up=None) -> Iterator[None]:
    """Hold an exclusive advisory lock on the file `path` (made if absent) for the block.

    fcntl.flock on POSIX, msvcrt.locking on Windows.  The operating system
    drops the lock when its holder dies (kill -9 included), so a held lock
    always means a live holder.  `on_wait(waiting)` is called once if another
    process holds it.  With `give_up` the wait polls and calls `give_up()`
    between tries: it raises to stop waiting (a deadline), else the wait blocks.
    The lock file is never opened through a symbolic link (on POSIX), and
    never written.
    """
    lock_path = Path(path)
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with _open_lock_file(lock_path) as handle:
        if os.name == "nt":
            import msvcrt

            told = False
            while True:
                handle.seek(0)
                try:
                    msvcrt.locking(handle.fileno(), msvcrt.LK_NBLCK, 1)
                    break
                except OSError:
                    if not told and on_wait and waiting:
                        on_wait(waiting)
                        told = True
                    if give_up is not None:
                        give_up()
                    time.sleep(0.05)
            try:
                yield
            finally:
                handle.seek(0)
                msvcrt.locking(handle.fileno(), msvcrt.LK_UNLCK, 1)
            return
        import fcntl

        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait and waiting:
                on_wait(waiting)
            _wait_for_flock(handle, give_up)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _open_lock_file(lock_path: Path):
    """The lock file, opened without following a link planted in its place (O_NOFOLLOW on POSIX)."""
    if os.name == "nt":
        return open(lock_path, "a+b")
    from pipeline.errors import EnvironmentProblem

    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as error:
        raise EnvironmentProblem(f"cannot open the lock file {lock_path.name}: {error.strerror or type(error).__name__}", file=lock_path,
                                 why="a lock file is never opened through a symbolic link or as a folder",
                                 fix=f"remove {lock_path} and run the command again") from None
    return os.fdopen(fd, "a+b")


def _wait_for_flock(handle, give_up) -> None:
    import fcntl

    if give_up is None:
        fcntl.flock(handle, fcntl.LOCK_EX)
        return
    while True:
        give_up()
        time.sleep(0.1)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            continue


def remove_leftovers(folder: Path, patterns: tuple[str, ...] | list[str]) -> list[Path]:
    """Remove what matches `patterns` directly in `folder` (files or folders); returns what was removed.

    Only for names the caller itself stages under, and only while it holds
    the lock that proves no live run of it is using them.
    """
    removed: list[Path] = []
    if not folder.is_dir():
        return removed
    for pattern in patterns:
        for path in sorted(folder.glob(pattern)):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
            removed.append(path)
    return removed
