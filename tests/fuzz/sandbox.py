"""The sandbox every fuzz input runs in: a scratch folder, and a tripwire for writes outside it.

Each input runs with its working directory, HOME, XDG_CACHE_HOME and TMPDIR
inside a fresh scratch folder.  An audit hook (`sys.addaudithook`, PEP 578)
sees every `open` for writing and every file-system change the interpreter
makes (mkdir, rename, remove, rmdir, link, symlink, chmod, utime, truncate,
shutil's copies and rmtree) and refuses any whose target resolves outside
the scratch folder: the call raises `OutsideWrite` (a BaseException, so that
no `except Exception` in the code under test can hide it) and the write is
recorded, so `check()` fails the input even if the exception was swallowed.

Writes through file descriptors opened earlier (an fd passed to os.write)
are not events; a target path opened for writing always is.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
import threading
from pathlib import Path

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
# event -> (indexes of the path arguments written, index of their dir_fd argument or None, follow links)
_EVENTS: dict[str, tuple[tuple[int, ...], int | None, bool]] = {
    "os.mkdir": ((0,), 2, False),
    "os.remove": ((0,), 1, False),
    "os.rmdir": ((0,), 1, False),
    "os.rename": ((0, 1), None, False),  # os.rename and os.replace; dir_fds at 2 and 3 (handled below)
    "os.link": ((1,), None, False),
    "os.symlink": ((1,), 2, False),
    "os.chmod": ((0,), 2, True),
    "os.chown": ((0,), 3, True),
    "os.utime": ((0,), 3, True),
    "os.truncate": ((0,), None, True),
    "os.chflags": ((0,), None, True),
    "os.setxattr": ((0,), None, True),
    "os.removexattr": ((0,), None, True),
    "os.mkfifo": ((0,), 2, False),
    "os.mknod": ((0,), 3, False),
    "shutil.copyfile": ((1,), None, True),
    "shutil.copymode": ((1,), None, True),
    "shutil.copystat": ((1,), None, True),
    "shutil.move": ((0, 1), None, False),
    "shutil.rmtree": ((0,), 1, False),
}


def memory_folder() -> str | None:
    """/dev/shm where there is one (Linux): a disk's mkdir/rmdir per input costs milliseconds."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


class OutsideWrite(BaseException):  # noqa: N818 - it is a refusal, raised into the code under test
    """A write outside the input's scratch folder (raised by the audit hook into the code under test)."""


class Sandbox:
    """One scratch root for a fuzz process; `enter()`/`leave()` around each input."""

    def __init__(self, root: Path | None = None) -> None:
        if root is None:
            root = Path(tempfile.mkdtemp(prefix="omp-ninfer-fuzz-", dir=memory_folder()))
            atexit.register(shutil.rmtree, root, True)
        self.root = Path(root).resolve()
        self.work = self.root / "work"
        self.active = False
        self.violations: list[str] = []
        self._guard = threading.local()
        self._saved_env: dict[str, str | None] = {}
        self._saved_cwd: str | None = None
        self._saved_tempdir: str | None = None
        sys.addaudithook(self._hook)

    # -- per input
    def enter(self) -> Path:
        """A fresh scratch folder, the working directory and the home of the input."""
        if self.work.exists():
            shutil.rmtree(self.work)
        for sub in ("cwd", "home", "cache", "tmp"):
            (self.work / sub).mkdir(parents=True)
        self._saved_cwd = os.getcwd()
        updates = {"HOME": self.work / "home", "XDG_CACHE_HOME": self.work / "cache", "TMPDIR": self.work / "tmp"}
        for name, value in updates.items():
            self._saved_env[name] = os.environ.get(name)
            os.environ[name] = str(value)
        self._saved_tempdir = tempfile.tempdir
        tempfile.tempdir = str(self.work / "tmp")
        os.chdir(self.work / "cwd")
        self.violations = []
        self.active = True
        return self.work

    def leave(self) -> list[str]:
        """Stop watching, restore the process, remove the scratch folder; the violations seen."""
        self.active = False
        if self._saved_cwd is not None:
            os.chdir(self._saved_cwd)
        for name, value in self._saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        tempfile.tempdir = self._saved_tempdir
        shutil.rmtree(self.work, ignore_errors=True)
        return list(self.violations)

    # -- the hook
    def _inside(self, target: str) -> bool:
        return target == os.devnull or target == str(self.root) or target.startswith(str(self.root) + os.sep)

    def _resolve(self, path: object, dir_fd: object, follow: bool) -> str | None:
        if isinstance(path, int) or path is None:
            return None  # an already open descriptor: its open was checked
        try:
            text = os.fsdecode(path)  # type: ignore[arg-type]
        except TypeError:
            return None
        if not os.path.isabs(text):
            if isinstance(dir_fd, int) and dir_fd >= 0:
                base = os.readlink(f"/proc/self/fd/{dir_fd}")
            else:
                base = os.getcwd()
            text = os.path.join(base, text)
        if follow:
            return os.path.realpath(text)
        # The entry itself is changed (removed, renamed, created): resolve its folder, not a link it may be.
        parent, name = os.path.split(os.path.normpath(text))
        return os.path.join(os.path.realpath(parent), name)

    def _hook(self, event: str, args: tuple) -> None:
        if not self.active or getattr(self._guard, "busy", False):
            return
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None, None))[:3]
            writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (isinstance(flags, int) and flags & _WRITE_FLAGS)
            if not writes:
                return
            targets = [(path, None, True)]
        elif event in _EVENTS:
            indexes, fd_index, follow = _EVENTS[event]
            targets = []
            for number, index in enumerate(indexes):
                if index >= len(args):
                    continue
                if event == "os.rename":
                    fd = args[2 + number] if len(args) > 2 + number else None
                elif event == "os.link":
                    fd = args[3] if len(args) > 3 else None
                else:
                    fd = args[fd_index] if fd_index is not None and fd_index < len(args) else None
                targets.append((args[index], fd, follow))
        else:
            return
        self._guard.busy = True
        try:
            for path, fd, follow in targets:
                resolved = self._resolve(path, fd, follow)
                if resolved is not None and not self._inside(resolved):
                    self.violations.append(f"{event} {resolved}")
                    raise OutsideWrite(f"{event} outside the scratch folder {self.root}: {resolved}")
        finally:
            self._guard.busy = False
