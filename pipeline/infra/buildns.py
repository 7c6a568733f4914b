"""One canonical build path per build: a private mount namespace for the compile.

The compiler must see the source at `/var/tmp/omp-ninfer/build/<lane>/src`
(-lineinfo embeds absolute .cu paths in device code), but two builds must not
share that folder.  Each build gets a private folder of its own
(`/var/tmp/omp-ninfer/work/<lane>.XXXXXXXX`, 0700, under a parent checked
private like the toolchain root), and every command that sees the canonical
path (CMake's configure, Ninja, hence every compiler) runs in a mount
namespace of its own in which that folder is bind-mounted at
`/var/tmp/omp-ninfer/build/<lane>`:

    unshare --mount --propagation private [--user --map-root-user] \
        /bin/sh -c '"$0" --bind "$1" "$2" && shift 2 && exec "$@"' /bin/mount PRIVATE CANONICAL COMMAND…

As root the mount namespace alone is enough; otherwise an unprivileged user
namespace maps you to root inside it (where the kernel allows them: Debian
and most distributions do; Ubuntu 24.04's AppArmor default does not).  The
pipeline itself never enters the namespace: it writes the source into, and
reads the outputs back from, the private folder.  Where no namespace can be
made (no unshare, a container without CAP_SYS_ADMIN, user namespaces off),
`Isolation.available` is false and the build takes the lane's lock instead.

A build holds an flock on its private folder while it runs (`held`).  The
folder of a build that failed is kept for its error to name; the next build
of that lane removes the ones whose lock is free (`prune_finished`), so
failed builds' trees (a full build each) do not pile up under the parent.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

# `mount` and `sh` from the system's folders by absolute path: inside the namespace they run as (mapped)
# root, before the compile, so neither comes from the caller's PATH nor from a toolchain folder put first on it.
SYSTEM_DIRS = ("/usr/bin", "/bin", "/usr/sbin", "/sbin")
BIND_SCRIPT = '"$0" --bind "$1" "$2" && shift 2 && exec "$@"'  # $0: the mount program
PROBE_TIMEOUT_S = 20
# A folder younger than this may be one a build has just made and not yet locked: never pruned.
PRUNE_AFTER_S = 60


@dataclass(frozen=True)
class Isolation:
    """How (and whether) commands can run with a private folder at the canonical path."""

    prefix: tuple[str, ...]  # the unshare command line, then the shell and mount programs (absolute)
    reason: str  # why there is no namespace, when there is none

    @property
    def available(self) -> bool:
        return bool(self.prefix)

    def wrap(self, private: Path, canonical: Path, command: list[str]) -> list[str]:
        """`command` run with `private` bind-mounted at `canonical`, in a mount namespace of its own."""
        *unshare, shell, mount = self.prefix
        return [*unshare, shell, "-c", BIND_SCRIPT, mount, str(private), str(canonical), *command]


def _candidates() -> list[tuple[str, ...]]:
    unshare, shell, mount = (shutil.which(name, path=os.pathsep.join(SYSTEM_DIRS)) for name in ("unshare", "sh", "mount"))
    if unshare is None or shell is None or mount is None:
        return []
    mount_only = (unshare, "--mount", "--propagation", "private", shell, mount)
    with_user = (unshare, "--user", "--map-root-user", "--mount", "--propagation", "private", shell, mount)
    return [mount_only, with_user] if os.geteuid() == 0 else [with_user]


def detect(probe_dir: Path) -> Isolation:
    """The first namespace route that really bind-mounts here (a probe under `probe_dir`, removed after)."""
    if os.name != "posix" or not Path("/proc/self/ns/mnt").exists():
        return Isolation((), "this host has no Linux mount namespaces")
    candidates = _candidates()
    if not candidates:
        return Isolation((), f"unshare, sh or mount (util-linux) is not in {os.pathsep.join(SYSTEM_DIRS)}")
    probe = Path(tempfile.mkdtemp(prefix=".ns-probe.", dir=probe_dir))
    try:
        (probe / "source").mkdir()
        (probe / "target").mkdir()
        (probe / "source" / "seen").write_bytes(b"")
        last = ""
        for prefix in candidates:
            command = Isolation(prefix, "").wrap(probe / "source", probe / "target", ["test", "-e", str(probe / "target" / "seen")])
            try:
                result = subprocess.run(command, capture_output=True, timeout=PROBE_TIMEOUT_S, check=False)
            except (OSError, subprocess.TimeoutExpired) as exc:
                last = str(exc)
                continue
            if result.returncode == 0:
                return Isolation(prefix, "")
            last = result.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [f"exit status {result.returncode}"]
            last = last[0]
        return Isolation((), f"no private mount namespace can be made here ({last})")
    finally:
        shutil.rmtree(probe, ignore_errors=True)


@contextlib.contextmanager
def held(folder: Path) -> Iterator[None]:
    """Hold `folder`'s lock while its build runs (released when the process ends, however it ends)."""
    import fcntl

    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def prune_finished(parent: Path, prefix: str) -> list[Path]:
    """Remove the folders `parent/<prefix>*` of yours that no running build holds (failed builds' leftovers)."""
    import fcntl

    removed = []
    for name in sorted(glob.glob(glob.escape(prefix) + "*", root_dir=parent)):
        folder = parent / name
        try:
            info = folder.lstat()
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or time.time() - info.st_mtime < PRUNE_AFTER_S:
                continue
            fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            continue  # gone meanwhile, or not ours to open
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue  # a build running now
        try:
            shutil.rmtree(folder)
            removed.append(folder)
        except OSError:
            pass  # left for a later build; never the reason this one fails
        finally:
            os.close(fd)
    return removed
