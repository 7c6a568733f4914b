"""Names from data that become paths: the one gate they all pass.

Manifests, lane files, source inventories, release trees and archives are
written by someone else; a name in them must never steer a write (or a read)
outside the folder it belongs to.  Every place where such a name becomes a
path goes through one of these, at the moment the document is loaded:

- `safe_component(value, ...)`: one bare file or folder name — no separator
  ('/' or '\\'), not '.' or '..', no NUL or other control character, no ':'
  (drive letter, NTFS stream), bounded length, and, because the native lanes
  run on Windows, none of Windows' forbidden characters, no trailing dot or
  space and no reserved device name (CON, NUL, COM1, ...);
- `safe_relpath(value, ...)`: a relative POSIX path made of such components
  (lexical check only, for paths that name something inside a tree that is
  not on this disk: a tar member, a URL path, a path in git history);
- `safe_relative(value, root, ...)`: the same, and its resolution on disk
  (symbolic links included) stays under `root`;
- `within(path, root)`: whether an existing path resolves under `root`.

Every refusal is an InputError naming the file and field, what was found and
what is expected.
"""

from __future__ import annotations

import os
import re
import unicodedata
from pathlib import Path

from pipeline.errors import InputError

MAX_COMPONENT = 255  # NTFS and ext4 both stop at 255
MAX_PATH = 1024
# Windows refuses these characters in names (besides '/', '\\' and ':', refused everywhere).
WINDOWS_FORBIDDEN = frozenset('<>"|?*')
# Device names Windows resolves in every folder, with any extension ("nul.txt" is NUL).
WINDOWS_RESERVED = frozenset(
    {"CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$", "CLOCK$"}
    | {f"{device}{digit}" for device in ("COM", "LPT") for digit in [*"0123456789", "\u00b9", "\u00b2", "\u00b3"]}
)
_UNPRINTABLE = ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp")
_DRIVE = re.compile(r"[A-Za-z]:")
_COMPONENT_EXPECTED = "a single file or folder name: no '/', '\\', ':', '..' or control characters"


def component_problem(value: object, *, max_len: int = MAX_COMPONENT, hidden: bool = False, portable: bool = True) -> str | None:
    """Why `value` is not a safe bare name, or None."""
    if not isinstance(value, str):
        return f"is not a string (a {type(value).__name__})"
    if not value:
        return "is empty"
    if len(value) > max_len:
        return f"is {len(value)} characters long, over the bound of {max_len}"
    if value in (".", ".."):
        return f"is {value!r}, which names a folder, not an entry in it"
    if "/" in value or "\\" in value:
        return "contains a path separator ('/' or '\\')"
    bad = next((c for c in value if unicodedata.category(c) in _UNPRINTABLE), None)
    if bad is not None:
        return f"contains the control or unprintable character U+{ord(bad):04X}" + (" (NUL)" if bad == "\0" else "")
    if ":" in value:
        return "contains ':' (a drive letter or an NTFS alternate stream)"
    if value.startswith(".") and not hidden:
        return "starts with '.' (a hidden name, never one the pipeline writes here)"
    if portable:
        forbidden = next((c for c in value if c in WINDOWS_FORBIDDEN), None)
        if forbidden is not None:
            return f"contains {forbidden!r}, which Windows refuses in a name"
        if value[-1] in ". ":
            return "ends with a dot or a space, which Windows silently strips"
        if value.split(".", 1)[0].rstrip(" ").upper() in WINDOWS_RESERVED:
            return f"is the Windows device name {value.split('.', 1)[0].rstrip(' ').upper()} (a write to it goes to the device, not a file)"
    return None


def relpath_problem(value: object, *, max_len: int = MAX_PATH, hidden: bool = False, portable: bool = True) -> str | None:
    """Why `value` is not a safe relative POSIX path of safe components, or None."""
    if not isinstance(value, str):
        return f"is not a string (a {type(value).__name__})"
    if not value:
        return "is empty"
    if len(value) > max_len:
        return f"is {len(value)} characters long, over the bound of {max_len}"
    if value.startswith("/") or value.startswith("\\"):
        return "is an absolute path"
    if _DRIVE.match(value):
        return "starts with a drive letter"
    if "\\" in value:
        return "contains '\\' (the separator is '/')"
    for segment in value.split("/"):
        if segment == "":
            return "has an empty segment ('//' or a trailing '/')"
        if segment == "..":
            return "has a '..' segment, which leaves its root"
        if segment == ".":
            return "has a '.' segment"
        problem = component_problem(segment, hidden=hidden, portable=portable)
        if problem is not None:
            return f"has the segment {segment!r}, which {problem}"
    return None


def _refuse(what: str, value: object, *, file: str | os.PathLike[str] | None, field: str | None, expected: str, why: str | None = None, fix: str | None = None) -> InputError:
    found = value if isinstance(value, str) and len(value) <= 300 else (value[:300] + "…" if isinstance(value, str) else value)
    return InputError(
        f"is not a safe name: it {what}",
        file=file,
        field=field,
        found=found,
        expected=expected,
        why=why or "a name from data must never steer a write outside the folder it belongs to",
        fix=fix,
    )


def safe_component(
    value: object,
    *,
    file: str | os.PathLike[str] | None,
    field: str | None,
    max_len: int = MAX_COMPONENT,
    hidden: bool = False,
    portable: bool = True,
    expected: str | None = None,
) -> str:
    """`value` if it is one safe bare name (see the module docstring), else an InputError."""
    problem = component_problem(value, max_len=max_len, hidden=hidden, portable=portable)
    if problem is not None:
        raise _refuse(problem, value, file=file, field=field, expected=expected or f"{_COMPONENT_EXPECTED}, at most {max_len} characters")
    assert isinstance(value, str)
    return value


def safe_relpath(
    value: object,
    *,
    file: str | os.PathLike[str] | None,
    field: str | None,
    max_len: int = MAX_PATH,
    hidden: bool = False,
    portable: bool = True,
    expected: str | None = None,
) -> str:
    """`value` if it is a relative POSIX path of safe names (lexical check only), else an InputError."""
    problem = relpath_problem(value, max_len=max_len, hidden=hidden, portable=portable)
    if problem is not None:
        raise _refuse(problem, value, file=file, field=field, expected=expected or "a relative path 'a/b/c' of plain names, without '..', '\\' or a leading '/'")
    assert isinstance(value, str)
    return value


def within(path: str | os.PathLike[str], root: str | os.PathLike[str]) -> bool:
    """Whether `path` resolves (symbolic links followed) to `root` or below it."""
    try:
        resolved = Path(path).resolve()
        base = Path(root).resolve()
    except (OSError, RuntimeError):  # a symlink loop
        return False
    return resolved == base or base in resolved.parents


def safe_relative(
    value: object,
    root: str | os.PathLike[str],
    *,
    file: str | os.PathLike[str] | None,
    field: str | None,
    max_len: int = MAX_PATH,
    hidden: bool = False,
    portable: bool = True,
    expected: str | None = None,
    what: str | None = None,
) -> Path:
    """`root / value` if `value` is a safe relative path that resolves under `root`, else an InputError.

    The returned path is the joined one (not the resolved one), so its name is
    the one the data gave.  `what` names the root in the message ("the
    repository", "the release tree").
    """
    relative = safe_relpath(value, file=file, field=field, max_len=max_len, hidden=hidden, portable=portable, expected=expected)
    joined = Path(root) / relative
    if not within(joined, root):
        raise _refuse(
            f"resolves outside {what or str(root)} through a symbolic link",
            value,
            file=file,
            field=field,
            expected=expected or f"a path that stays under {what or str(root)}",
            fix="replace the link with the file itself",
        )
    return joined
