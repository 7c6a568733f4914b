"""JSON and TOML documents as the pipeline writes and reads them.

Written documents are UTF-8 without BOM, keys sorted, LF line endings and a
trailing newline, so that a hash over them is stable.  Reading is strict: a
BOM, a CR or invalid syntax is an InputError that names the file.
"""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from typing import Any

from ..errors import InputError
from .fs import atomic_write_bytes


def canonical_bytes(document: Any, *, indent: int | None = 2) -> bytes:
    if indent is None:
        text = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    else:
        text = json.dumps(document, sort_keys=True, indent=indent, ensure_ascii=False)
    return (text + "\n").encode("utf-8")


def compact_identity_bytes(document: Any) -> bytes:
    """Canonical compact JSON without newline: the form hashed into identities."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def write_json(path: str | os.PathLike[str], document: Any, *, indent: int | None = 2) -> bytes:
    data = canonical_bytes(document, indent=indent)
    atomic_write_bytes(path, data)
    return data


def check_text_hygiene(path: str | os.PathLike[str], data: bytes) -> None:
    if data.startswith(b"\xef\xbb\xbf"):
        raise InputError(
            "starts with a UTF-8 byte-order mark",
            file=path,
            why="hashes are taken over exact bytes and the pipeline writes UTF-8 without BOM",
            fix="save the file as UTF-8 without BOM",
        )
    if b"\r" in data:
        line = data[: data.index(b"\r")].count(b"\n") + 1
        raise InputError(
            f"contains a carriage return (CR) at line {line}",
            file=path,
            why="a Windows checkout with core.autocrlf=true rewrites LF to CRLF and changes every hash",
            fix="run 'git config core.autocrlf false' and check the file out again (git checkout -- <file>)",
        )


def read_json(path: str | os.PathLike[str], *, strict_bytes: bool = True) -> Any:
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise InputError("file does not exist", file=path) from None
    if strict_bytes:
        check_text_hygiene(path, data)
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise InputError(f"is not valid UTF-8 ({exc.reason} at byte {exc.start})", file=path) from None
    except json.JSONDecodeError as exc:
        raise InputError(
            f"is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}", file=path
        ) from None


def read_json_object(path: str | os.PathLike[str], **kwargs: Any) -> dict[str, Any]:
    document = read_json(path, **kwargs)
    if not isinstance(document, dict):
        raise InputError("must hold a JSON object", file=path, found=type(document).__name__, expected="object")
    return document


def read_toml(path: str | os.PathLike[str]) -> dict[str, Any]:
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise InputError("file does not exist", file=path) from None
    check_text_hygiene(path, data)
    try:
        return tomllib.loads(data.decode("utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"is not valid TOML: {exc}", file=path) from None


def dig(document: Any, dotted: str) -> Any:
    """The value at a dotted path of nested objects ("components.model.artifact_sha256"), or None."""
    node = document
    for part in dotted.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


MAX_DEPTH = 64


def strict_loads(data: bytes, *, origin: str | os.PathLike[str], max_bytes: int = 16 << 20) -> Any:
    """JSON from untrusted bytes: bounded size and nesting, UTF-8 without BOM, no duplicate keys, no NaN/Infinity."""
    if len(data) > max_bytes:
        raise InputError("is too large to be read as JSON", file=origin, found=f"{len(data)} bytes", expected=f"at most {max_bytes} bytes")
    check_text_hygiene(origin, data)

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in items:
            if key in out:
                raise InputError("repeats a key in one JSON object", file=origin, field=key, why="a reader could take either value")
            out[key] = value
        return out

    def constant(name: str) -> Any:
        raise InputError(f"holds the non-finite number {name}", file=origin, expected="finite JSON numbers only")

    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"is not valid UTF-8 ({exc.reason} at byte {exc.start})", file=origin) from None
    depth = level = 0
    in_string = escaped = False
    for char in text:  # nesting is bounded before the recursive parser sees it
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            level += 1
            depth = max(depth, level)
            if depth > MAX_DEPTH:
                raise InputError("nests deeper than allowed", file=origin, expected=f"at most {MAX_DEPTH} levels")
        elif char in "]}":
            level -= 1
    try:
        return json.loads(text, object_pairs_hook=pairs, parse_constant=constant)
    except json.JSONDecodeError as exc:
        raise InputError(f"is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}", file=origin) from None
