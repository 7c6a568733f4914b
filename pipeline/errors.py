"""Failure classes of the pipeline and how they are shown.

Every failure a user can meet is a PipelineError: one paragraph that says what
failed, where (file, field), what was found and what was expected, why it
probably happened and the exact fix.  Each class has its own exit code so that
scripts and the release workflow can tell a bad input from a missing tool or a
tampered byte.  Secrets registered with `register_secret` are scrubbed from
every rendered message.
"""

from __future__ import annotations

import os
import re
from enum import IntEnum
from pathlib import Path

from pipeline.runcontext import current


class ExitCode(IntEnum):
    OK = 0
    INPUT = 1  # invalid input or contract violation (also: verify/audit found errors)
    USAGE = 2  # command line misuse
    ENVIRONMENT = 3  # missing tool, wrong host platform, toolchain problem
    BUILD = 4  # the compiler, CMake or a packaged tool failed
    INTEGRITY = 5  # bytes differ from what was recorded; output not reproducible
    REMOTE = 6  # network, registry or download failure
    REFUSED = 7  # a publication rule forbids the action (existing tag, not in CI, not ready)


_MISSING = object()


def register_secret(value: str | None) -> None:
    """Remember a secret so that no rendered error or log line can contain it."""
    if value and len(value) >= 4:
        current().secrets.add(value)


def redact(text: str) -> str:
    """`text` without a registered secret, and without the user information (`user:password@`) of any URL in it."""
    for secret in sorted(current().secrets, key=len, reverse=True):
        text = text.replace(secret, "[REDACTED]")
    return redact_url_credentials(text)


# The authority's user information of every URL in a text: `scheme://` then anything up to the last '@'
# before the host ends (no '/', '?', '#' or white space in between).
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#\s@]*(?:@[^/?#\s@]*)*@")


def redact_url_credentials(text: str) -> str:
    """The one rule for a URL the pipeline records or prints: its user information (`user:password@`) is replaced by
    `[REDACTED]@`, in a URL alone or anywhere in a text (a password in a URL is a secret nobody registered)."""
    return _URL_USERINFO.sub(r"\1[REDACTED]@", text) if "@" in text else text


def redact_document(value: object) -> object:
    """A JSON document with `redact_url_credentials` applied to every string in it (keys included): what a record
    the pipeline writes (the register, the refusal log, an audit report) may hold of a URL."""
    if isinstance(value, str):
        return redact_url_credentials(value)
    if isinstance(value, dict):
        return {redact_url_credentials(key) if isinstance(key, str) else key: redact_document(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [redact_document(item) for item in value]
    return value


# -- text from documents and servers, as a person sees it

QUOTE_LIMIT = 200  # characters of one quoted value a line shows (the rest is counted, never printed)


def printable(text: str, *, lines: bool = False) -> str:
    """`text` with every character a terminal would act on or that a reader cannot see escaped as `\\xNN`, `\\uNNNN`:
    C0 and C1 controls (ESC, CR, NEL, and LF and TAB unless `lines`), DEL, bidi overrides and isolates, zero-width
    and other format characters, line and paragraph separators, and spaces other than U+0020.  Applied to every line
    the pipeline prints (`ui`, rendered errors, OK:/FAIL: lines): data can never move the cursor, erase a line or
    (in a one-line result) start one.  `lines` keeps LF and TAB, for a message that quotes a tool's output."""
    if text.isprintable():
        return text
    keep = "\n\t" if lines else ""
    return "".join(character if character.isprintable() or character in keep else _escape(character) for character in text)


def _escape(character: str) -> str:
    code = ord(character)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def quoted(value: object, limit: int = QUOTE_LIMIT) -> str:
    """Text from a document or a server inside a message: in quotes (Python's repr: control and invisible characters
    escaped, so it cannot pass for the pipeline's own words), at most `limit` characters, the rest counted."""
    text = value if isinstance(value, str) else repr(value)
    shown = repr(text[:limit]) if isinstance(value, str) else printable(text[:limit])
    return shown + (f" (and {len(text) - limit} more characters)" if len(text) > limit else "")


def _show(value: object) -> str:
    if isinstance(value, str):
        return quoted(value) if value else "an empty string"
    if value is None:
        return "nothing (null)"
    return quoted(value)


class PipelineError(Exception):
    exit_code: ExitCode = ExitCode.INPUT
    label = "input"

    def __init__(
        self,
        what: str,
        *,
        file: str | os.PathLike[str] | None = None,
        field: str | None = None,
        found: object = _MISSING,
        expected: object = _MISSING,
        why: str | None = None,
        fix: str | None = None,
    ) -> None:
        self.what = what
        self.file = redact_url_credentials(str(file)) if file is not None else None  # recorded in refusals and reports too
        self.field = field
        self.found = found
        self.expected = expected
        self.why = why
        self.fix = fix
        super().__init__(self.render())

    def location(self) -> str:
        parts = []
        if self.file:
            parts.append(_display_path(self.file))
        if self.field:
            parts.append(self.field)
        return ": ".join(parts)

    def render(self) -> str:
        head = self.location()
        text = f"{head}: {self.what}" if head else self.what
        details = []
        if self.found is not _MISSING:
            details.append(f"found {_show(self.found)}")
        if self.expected is not _MISSING:
            expected = self.expected if isinstance(self.expected, str) else _show(self.expected)
            details.append(f"expected {expected}")
        if details:
            text += f" ({'; '.join(details)})"
        if not text.endswith("."):
            text += "."
        if self.why:
            why = self.why.rstrip(".")
            text += f" {why[:1].upper()}{why[1:]}."
        if self.fix:
            text += f" Fix: {self.fix.rstrip('.')}."
        return printable(redact(text), lines=True)  # a tool's output (`why`) keeps its lines

    def as_dict(self) -> dict[str, object]:
        return {
            "class": self.label,
            "exit_code": int(self.exit_code),
            "file": self.file,
            "field": self.field,
            "message": self.render(),
        }


def _display_path(path: str) -> str:
    if "://" in path:
        return path  # a URL (a registry, a download): as a path it would resolve under the working folder as 'https:/host/…'
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError, RuntimeError):  # RuntimeError: a link loop (Python < 3.13)
        return path


class InputError(PipelineError):
    exit_code = ExitCode.INPUT
    label = "input"


class UsageError(PipelineError):
    exit_code = ExitCode.USAGE
    label = "usage"


class EnvironmentProblem(PipelineError):
    exit_code = ExitCode.ENVIRONMENT
    label = "environment"


class BuildFailure(PipelineError):
    exit_code = ExitCode.BUILD
    label = "build"


class IntegrityError(PipelineError):
    exit_code = ExitCode.INTEGRITY
    label = "integrity"


class RemoteError(PipelineError):
    exit_code = ExitCode.REMOTE
    label = "remote"


class RefusedError(PipelineError):
    exit_code = ExitCode.REFUSED
    label = "refused"


EXIT_CODE_TABLE = [
    (ExitCode.OK, "success (or nothing to do)"),
    (ExitCode.INPUT, "invalid input, contract violation, or verification found errors"),
    (ExitCode.USAGE, "command-line usage error"),
    (ExitCode.ENVIRONMENT, "missing tool, wrong host platform, or toolchain problem"),
    (ExitCode.BUILD, "the compiler, CMake or a packaged binary failed"),
    (ExitCode.INTEGRITY, "bytes differ from their record, or an output is not reproducible"),
    (ExitCode.REMOTE, "network, registry or download failure"),
    (ExitCode.REFUSED, "a publication rule forbids the action"),
]
