"""JSON and TOML documents as the pipeline writes and reads them.

Written documents are UTF-8 without BOM, keys sorted, LF line endings and a
trailing newline, so that a hash over them is stable.  Reading is strict: a
BOM, a CR or invalid syntax is an InputError that names the file.

Every JSON document the pipeline reads from outside (files, network answers,
archive members) goes through `loads_document` (bytes) or `read_json` (a
path): one parser that refuses what Python's `json` would quietly accept — a
key given twice (`json` keeps the last, so `"status": "failed", "status":
"passed"` would read as passed), `NaN`/`Infinity` and numbers that overflow
to infinity, nesting deeper than MAX_DEPTH and documents over a size bound —
each as an InputError naming the source.  Wrong shapes are InputErrors too
(`loads_object`, `read_json_object`, `expect_object`, `expect_list`).
"""

from __future__ import annotations

import json
import math
import os
import re
import tomllib
from typing import Any

from pipeline.errors import InputError
from pipeline.util.fs import atomic_write_bytes


def non_finite_field(document: Any, where: str = "") -> str | None:
    """The dotted path of the first NaN or infinity in a document (None when every number is finite)."""
    if isinstance(document, float) and not math.isfinite(document):
        return where or "(the document)"
    if isinstance(document, dict):
        for key in sorted(document, key=str):
            found = non_finite_field(document[key], f"{where}.{key}" if where else str(key))
            if found is not None:
                return found
    elif isinstance(document, (list, tuple)):
        for index, item in enumerate(document):
            found = non_finite_field(item, f"{where}[{index}]")
            if found is not None:
                return found
    return None


def _refuse_non_finite(document: Any, file: str | os.PathLike[str] | None) -> None:
    where = non_finite_field(document)
    if where is not None:
        raise InputError(
            "refusing to write a non-finite number (NaN or Infinity): JSON has none, and Python would write a bare NaN literal",
            file=file,
            field=where,
            expected="a finite number",
            why="a NaN compares false with everything, so a record holding one (a threshold, a measurement) can read as passed whatever was measured",
            fix="find where the value came from (a lane file, a measurement) and make it finite",
        )


def canonical_bytes(document: Any, *, indent: int | None = 2, file: str | os.PathLike[str] | None = None) -> bytes:
    _refuse_non_finite(document, file)
    if indent is None:
        text = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    else:
        text = json.dumps(document, sort_keys=True, indent=indent, ensure_ascii=False, allow_nan=False)
    return (text + "\n").encode("utf-8")


def compact_identity_bytes(document: Any) -> bytes:
    """Canonical compact JSON without newline: the form hashed into identities."""
    _refuse_non_finite(document, None)
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")


def write_json(path: str | os.PathLike[str], document: Any, *, indent: int | None = 2) -> bytes:
    data = canonical_bytes(document, indent=indent, file=path)
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


MAX_DOCUMENT_BYTES = 32 * 1024 * 1024  # the largest JSON document read (SBOMs of big payloads included)
MAX_DEPTH = 64  # arrays and objects nested deeper than this are refused


class _Refused(ValueError):
    """Raised inside the parser's hooks; turned into an InputError naming the source (and the key)."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    document = dict(pairs)
    if len(document) != len(pairs):
        seen: set[str] = set()
        for key, _value in pairs:
            if key in seen:
                raise _Refused(f"holds the key {key!r} twice in one object (a duplicate key)", field=key)
            seen.add(key)
    return document


def _constant(name: str) -> Any:
    raise _Refused(f"holds the non-finite number {name}")


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(f"holds the number {text}, which overflows to infinity")
    return value


# A `\uD800`-`\uDFFF` escape: the only way a JSON text (valid UTF-8) can carry a UTF-16 surrogate.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _lone_surrogate(document: Any) -> str | None:
    """The dotted path of the first string (key or value) holding an unpaired surrogate, or None."""
    stack: list[tuple[Any, str]] = [(document, "")]
    while stack:
        node, where = stack.pop()
        if isinstance(node, str):
            try:
                node.encode("utf-8")
            except UnicodeEncodeError:
                return where or "(the document)"
        elif isinstance(node, dict):
            for key, value in node.items():
                path = f"{where}.{key}" if where else key
                try:
                    key.encode("utf-8")
                except UnicodeEncodeError:
                    return (f"{where}.{key!a}" if where else ascii(key))
                stack.append((value, path))
        elif isinstance(node, list):
            stack.extend((item, f"{where}[{index}]") for index, item in enumerate(node))
    return None


def _refuse_lone_surrogates(document: Any, text: str, source: str | os.PathLike[str]) -> None:
    if not _SURROGATE_ESCAPE.search(text):
        return  # the common case: no surrogate escape at all, nothing to walk
    where = _lone_surrogate(document)
    if where is not None:
        raise InputError(
            "holds an unpaired UTF-16 surrogate escape (\\uD800-\\uDFFF), which is no Unicode character",
            file=source,
            field=where,
            why="such a string cannot be written as UTF-8: the document could be read but never written back, printed or hashed as text",
            fix="repair the document (a surrogate escape must come in a high-low pair)",
        )


def _depth(document: Any, bound: int) -> int:
    """Nesting depth of arrays and objects (a scalar is 0), without recursion; stops past `bound`."""
    deepest = 0
    stack = [(document, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        deepest = max(deepest, depth)
        if depth > bound:
            return depth
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return deepest


def loads_document(
    data: bytes | bytearray | memoryview,
    *,
    source: str | os.PathLike[str],
    max_bytes: int = MAX_DOCUMENT_BYTES,
    max_depth: int = MAX_DEPTH,
    strict_bytes: bool = False,
) -> Any:
    """Parse JSON bytes from outside (a file, a network answer, an archive member) strictly."""
    if len(data) > max_bytes:
        raise InputError(
            f"is larger than the {max_bytes} bytes allowed for a JSON document",
            file=source,
            found=f"{len(data)} bytes",
            why="documents are read with a size bound so that a hostile input cannot fill memory",
            fix="check that this is the document it claims to be",
        )
    data = bytes(data)
    if strict_bytes:
        check_text_hygiene(source, data)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"is not valid UTF-8 ({exc.reason} at byte {exc.start})", file=source) from None
    try:
        document = json.loads(text, object_pairs_hook=_pairs, parse_constant=_constant, parse_float=_float)
    except _Refused as exc:
        raise InputError(
            str(exc),
            file=source,
            field=exc.field,
            why="a strict reader refuses what different JSON parsers would read differently",
            fix="repair the document (one value per key, finite numbers only)",
        ) from None
    except json.JSONDecodeError as exc:
        raise InputError(f"is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}", file=source) from None
    except RecursionError:
        raise InputError(f"nests arrays or objects deeper than {max_depth} levels", file=source, fix="a real document is shallow; check its origin") from None
    except ValueError as exc:  # an integer literal longer than Python converts (sys.get_int_max_str_digits)
        raise InputError(f"holds a number out of range ({exc})", file=source) from None
    if _depth(document, max_depth) > max_depth:
        raise InputError(f"nests arrays or objects deeper than {max_depth} levels", file=source, fix="a real document is shallow; check its origin")
    _refuse_lone_surrogates(document, text, source)
    return document


def expect_object(document: Any, *, source: str | os.PathLike[str], field: str | None = None, expected: str = "object", fix: str | None = None) -> dict[str, Any]:
    """`document` when it is a JSON object, else an InputError naming the source (and field)."""
    if not isinstance(document, dict):
        raise InputError("must hold a JSON object", file=source, field=field, found=_kind(document), expected=expected, fix=fix)
    return document


def expect_document_type(document: dict[str, Any], artifact_type: str, schema_version: int, *, source: str | os.PathLike[str], what: str, fix: str | None = None) -> dict[str, Any]:
    """`document` when its `artifact_type` and `schema_version` are these, else an InputError ("is not <what> of schema N")."""
    if document.get("artifact_type") != artifact_type or document.get("schema_version") != schema_version:
        raise InputError(f"is not {what} of schema {schema_version}", file=source, field="artifact_type", found=document.get("artifact_type"), expected=artifact_type, fix=fix)
    return document


def expect_list(document: Any, *, source: str | os.PathLike[str], field: str | None = None, expected: str = "array", fix: str | None = None) -> list[Any]:
    if not isinstance(document, list):
        raise InputError("must hold a JSON array", file=source, field=field, found=_kind(document), expected=expected, fix=fix)
    return document


def _kind(value: Any) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def loads_object(data: bytes | bytearray | memoryview, *, source: str | os.PathLike[str], **kwargs: Any) -> dict[str, Any]:
    return expect_object(loads_document(data, source=source, **kwargs), source=source)


def read_json(path: str | os.PathLike[str], *, strict_bytes: bool = True, max_bytes: int = MAX_DOCUMENT_BYTES) -> Any:
    from pipeline.util.fs import read_bytes_bounded

    data = read_bytes_bounded(path, max_bytes, what="JSON document")
    return loads_document(data, source=path, max_bytes=max_bytes, strict_bytes=strict_bytes)


def read_json_object(path: str | os.PathLike[str], **kwargs: Any) -> dict[str, Any]:
    return expect_object(read_json(path, **kwargs), source=path)


MAX_TOML_BYTES = 4 * 1024 * 1024  # lane files, release.toml and image definitions are a few KiB


def loads_toml(data: bytes, *, source: str | os.PathLike[str], max_bytes: int = MAX_TOML_BYTES) -> dict[str, Any]:
    """Parse TOML bytes strictly: bounded, UTF-8 without BOM or CR, and every defect an InputError naming the source."""
    if len(data) > max_bytes:
        raise InputError(f"is larger than the {max_bytes} bytes allowed for a TOML file", file=source, found=f"{len(data)} bytes",
                         fix="check that this is the file it claims to be")
    check_text_hygiene(source, data)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"is not valid UTF-8 ({exc.reason} at byte {exc.start})", file=source, fix="save the file as UTF-8") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"is not valid TOML: {exc}", file=source) from None
    except RecursionError:  # tomllib recurses into nested arrays and inline tables
        raise InputError("nests arrays or inline tables too deeply", file=source, fix="a real file is shallow; check its origin") from None


def read_toml(path: str | os.PathLike[str]) -> dict[str, Any]:
    from .fs import read_bytes_bounded

    return loads_toml(read_bytes_bounded(path, MAX_TOML_BYTES, what="TOML file"), source=path)


def dig(document: Any, dotted: str) -> Any:
    """The value at a dotted path of nested objects ("components.model.artifact_sha256"), or None."""
    node = document
    for part in dotted.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def parse_strict(data: bytes, *, file: str | os.PathLike[str], max_bytes: int = MAX_DOCUMENT_BYTES) -> Any:
    """A document of the pipeline's own formats (ledgers, plans, receipts): the one strict reader, plus text hygiene (no BOM, no CR)."""
    return loads_document(data, source=file, max_bytes=max_bytes, strict_bytes=True)
