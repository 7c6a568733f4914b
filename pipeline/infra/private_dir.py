"""Private folders: a folder the pipeline builds in or runs from must be this user's (or root's), and neither it nor a
folder above it writable by anyone else (a sticky folder such as /var/tmp is fine above it): /var/tmp is shared, and
another user could have made the folder first.  The pinned toolchains (pipeline/lanework/toolchain.py), the canonical
build root and the compile cache apply this one rule."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from pipeline.errors import EnvironmentProblem, RefusedError

ON_WINDOWS = os.name == "nt"


def is_trusted_owner(uid: int) -> bool:
    return uid in (os.geteuid(), 0)


def _who(uid: int) -> str:
    try:
        import pwd

        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def owner_and_mode(st: os.stat_result) -> str:
    return f"owner {_who(st.st_uid)}, mode {stat.S_IMODE(st.st_mode):04o}"


def expected_owner() -> str:
    you = "root (you)" if os.geteuid() == 0 else f"{_who(os.geteuid())} (you) or root"
    return f"owned by {you}, not writable by group or others"


def _check_chain(path: Path, *, what: str, fix: str) -> None:
    current, below = path, None
    while True:
        try:
            st = os.lstat(current)
        except OSError as exc:
            raise EnvironmentProblem(f"cannot inspect {what} ({exc.strerror})", file=current, fix=fix) from None
        folder = "it" if below is None else "a folder above it"
        why = (f"{what} is {path}; anyone who owns or can write to {folder} could have planted or could change "
               "what the pipeline runs or builds from there (/var/tmp is shared by every user of the host)")
        if not is_trusted_owner(st.st_uid):
            raise RefusedError(f"{what} is not yours: {current} is owned by another user", file=current,
                               found=owner_and_mode(st), expected=expected_owner(), why=why, fix=fix)
        if not stat.S_ISLNK(st.st_mode):
            if below is None and not stat.S_ISDIR(st.st_mode):
                raise RefusedError(f"{what} is not a folder", file=current, found=owner_and_mode(st), expected="a folder", fix=fix)
            if st.st_mode & 0o022 and (below is None or not st.st_mode & stat.S_ISVTX):
                raise RefusedError(f"{what} is not private: {current} is writable by group or others", file=current,
                                   found=owner_and_mode(st), expected=expected_owner() + (" (a sticky folder such as /var/tmp is fine above it)" if below is not None else ""),
                                   why=why, fix=fix)
        if current.parent == current:
            return
        below, current = current, current.parent


def check_private_dir(path: str | os.PathLike[str], *, what: str, fix: str) -> None:
    """Refuse (RefusedError, exit 7) a folder that another user made or could change (see above).

    Both the path as given (its symlinks must be ours or root's) and the path it
    resolves to are checked.  Not on Windows, whose ACLs this does not model.
    """
    if ON_WINDOWS:
        return
    given = Path(os.path.abspath(path))
    _check_chain(given, what=what, fix=fix)
    real = Path(os.path.realpath(given))
    if real != given:
        _check_chain(real, what=what, fix=fix)


def ensure_private_dir(path: str | os.PathLike[str], *, what: str, fix: str) -> Path:
    """The folder `path`, made (0700, with any missing parents) when absent, then checked by check_private_dir."""
    target = Path(os.path.abspath(path))
    missing = []
    probe = target
    while not os.path.lexists(probe) and probe.parent != probe:
        missing.append(probe)
        probe = probe.parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            pass  # made meanwhile: its owner and mode are checked below
        except OSError as exc:
            raise EnvironmentProblem(f"cannot make {what} ({exc.strerror})", file=folder, fix=fix) from None
    check_private_dir(target, what=what, fix=fix)
    return target
