"""The runtime's build identity: the `--version` line and `build-identity.json`.

Every NInfer binary prints exactly one line `<binary> key=value ...` with the
nine keys below, in this order (the runtime's existing contract); the same
text is embedded in the file after the marker `NINFER-BUILD-IDENTITY:v1 ` so
that a binary for another platform (a Windows .exe on Linux) can be checked
without running it.  All binaries of one build must carry identical
identities.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import BuildFailure, InputError, IntegrityError
from pipeline.util.hashing import is_commit_hex

IDENTITY_KEYS = (
    "upstream_base_sha",
    "patch_stack_sha",
    "build_profile",
    "build_type",
    "cxx_compiler",
    "cuda_compiler",
    "cuda_toolkit",
    "cuda_architecture",
    "source_dirty",
)
IDENTITY_TYPE = "ninfer_release_build_identity"  # `artifact_type` of build-identity.json (the build writes it)
MARKER = b"NINFER-BUILD-IDENTITY:v1 "
_VALUE = re.compile(r"[A-Za-z0-9._+-]+")


@dataclass(frozen=True)
class BuildIdentity:
    values: dict[str, str]

    def text(self) -> str:
        return " ".join(f"{key}={self.values[key]}" for key in IDENTITY_KEYS)


def parse_identity_text(text: str, *, origin: str) -> BuildIdentity:
    pairs = text.strip().split(" ")
    keys = []
    values: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key or not _VALUE.fullmatch(value):
            raise InputError("identity is not a list of key=value words", file=origin, found=pair, expected="key=value with [A-Za-z0-9._+-] values")
        if key in values:
            raise InputError("identity repeats a key", file=origin, field=key)
        keys.append(key)
        values[key] = value
    if tuple(keys) != IDENTITY_KEYS:
        raise InputError(
            "identity keys differ from the runtime's contract",
            file=origin,
            found=" ".join(keys),
            expected=" ".join(IDENTITY_KEYS),
        )
    for key in ("upstream_base_sha", "patch_stack_sha"):
        if not is_commit_hex(values[key]):
            raise InputError("identity value is not a 40-hex commit", file=origin, field=key, found=values[key])
    if values["source_dirty"] not in ("true", "false"):
        raise InputError("identity value must be true or false", file=origin, field="source_dirty", found=values["source_dirty"])
    return BuildIdentity(values)


def parse_version_line(line: str, *, binary: str, origin: str) -> BuildIdentity:
    stripped = line.rstrip("\n")
    if "\n" in stripped or not stripped:
        raise InputError("--version must print exactly one line", file=origin, found=line[:200])
    name, _, rest = stripped.partition(" ")
    if name != binary:
        raise InputError("--version line starts with another binary name", file=origin, found=name, expected=binary)
    return parse_identity_text(rest, origin=origin)


def embedded_identity(path: Path) -> BuildIdentity | None:
    data = path.read_bytes()
    start = data.find(MARKER)
    if start < 0:
        return None
    if data.find(MARKER, start + 1) >= 0:
        raise IntegrityError("binary carries more than one embedded build identity", file=path)
    end = data.find(b"\0", start)
    if end < 0:
        raise IntegrityError("embedded build identity is not terminated", file=path)
    text = data[start + len(MARKER):end].decode("ascii", "replace")
    return parse_identity_text(text, origin=str(path))


def require_identical(identities: dict[str, BuildIdentity]) -> BuildIdentity:
    items = list(identities.items())
    first_name, first = items[0]
    for name, other in items[1:]:
        if other.values != first.values:
            differing = [k for k in IDENTITY_KEYS if other.values[k] != first.values[k]]
            key = differing[0]
            raise BuildFailure(
                f"binaries disagree about their build identity ({', '.join(differing)})",
                field=key,
                found=f"{name}: {other.values[key]}",
                expected=f"{first_name}: {first.values[key]}",
                why="all binaries of one build must come from one configure step",
                fix="rebuild all binaries from a clean build directory",
            )
    return first


def check_expected(identity: BuildIdentity, expected: dict[str, str], *, origin: str) -> None:
    for key, value in expected.items():
        if identity.values.get(key) != value:
            raise IntegrityError(
                "build identity does not match what was built",
                file=origin,
                field=key,
                found=identity.values.get(key),
                expected=value,
                why="the binary was not built from this source, lane or toolchain",
            )
