"""Structure-aware mutation for the document targets (JSON and TOML).

Byte mutations rarely turn `"components": {...}` into `"components": 5`,
yet a wrong type where a reader expects an object is the commonest way a
hostile document breaks a reader.  `mutate_document` parses the input (each
SEP-separated part on its own), changes one node (another type, a hostile
value, a node from elsewhere in the document, a removed or added key, a
wrapped or duplicated element) and writes it back; otherwise, and whenever
the input does not parse, it hands the bytes to the byte mutator (libFuzzer's
own through atheris, or the mutation loop's).  Deterministic for a seed.
"""

from __future__ import annotations

import json
import math
import random
import tomllib
from collections.abc import Callable
from typing import Any

HOSTILE: list[Any] = [
    None, True, False, 0, -1, 1, 2**63, -(2**63), 1.5, -0.0, 1e308, math.nan, math.inf, "", " ", "x", "x" * 300, "../../x", "/etc/passwd",
    "C:\\x", "NUL", "a/b", ".", "..", "\0", "\ud800", "é", "http://[", "https://u:p@example.invalid/", "http://127.attacker.com/x",
    "http://127.0.0.1:1/x", "https://github.com/a/b/releases/download/v1/x", "sha256:" + "0" * 64, "0" * 64, "0" * 40, [], {}, [None], {"": None},
]
KEYS = ["", "id", "release", "name", "url", "status", "sha256", "digest", "size", "mediaType", "token", "components", "lanes", "beta", "\ud800"]
_MISSING = object()


def _nodes(document: Any, limit: int = 4000) -> list[tuple[Any, Any]]:
    """(container, key) pairs of every node under the root (the root itself as (None, None))."""
    found: list[tuple[Any, Any]] = [(None, None)]
    stack = [document]
    while stack and len(found) < limit:
        node = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                found.append((node, key))
                stack.append(value)
        elif isinstance(node, list):
            for index, value in enumerate(node):
                found.append((node, index))
                stack.append(value)
    return found


def _values(document: Any) -> list[Any]:
    return [container[key] for container, key in _nodes(document, 500)[1:]]


def _hostile(rng: random.Random) -> Any:
    """A hostile value; a container is a fresh copy (a shared one, mutated later, ends in a circular document)."""
    new = rng.choice(HOSTILE)
    return json.loads(json.dumps(new)) if isinstance(new, (list, dict)) else new


def mutate_tree(document: Any, rng: random.Random) -> Any:
    """`document` with one node changed (in place where possible; returns the new root)."""
    nodes = _nodes(document)
    container, key = rng.choice(nodes)
    current = document if container is None else container[key]
    donors = _values(document)
    choice = rng.randrange(9)
    if choice <= 2:
        new = _hostile(rng)
    elif choice == 3 and donors:
        new = json.loads(json.dumps(rng.choice(donors), allow_nan=True))
    elif choice == 4:
        new = [current] if rng.random() < 0.5 else {rng.choice(KEYS): current}
    elif choice == 5 and isinstance(current, (dict, list)) and current:
        if isinstance(current, dict):
            current.pop(rng.choice(list(current)))
        else:
            current.pop(rng.randrange(len(current)))
        return document
    elif choice == 6 and isinstance(current, dict):
        current[rng.choice(KEYS + [k for k in current])] = rng.choice(HOSTILE[:30])
        return document
    elif choice == 7 and isinstance(current, list) and current:
        current.extend(current[: rng.randint(1, len(current))] * rng.randint(1, 3))
        return document
    elif isinstance(current, str) and current:
        cut = rng.randint(0, len(current))
        new = current[:cut] + rng.choice(["/", "..", "\\", "\0", "\n", "%2e", "{n}", "{version}", "{0}", "\ud800", "é", ""]) + current[cut:]
    elif isinstance(current, int) and not isinstance(current, bool):
        new = rng.choice([current + 1, current - 1, -current, current * 1000, 0, 2**64])
    else:
        new = _hostile(rng)
    if container is None:
        return new
    container[key] = new
    return document


def dumps_json(document: Any, rng: random.Random) -> bytes:
    text = json.dumps(document, ensure_ascii=True, allow_nan=True, sort_keys=rng.random() < 0.3, indent=rng.choice([None, 2]))
    return text.encode("ascii")


# -- TOML --------------------------------------------------------------------------------


def _toml_key(key: str) -> str:
    return key if key and all(c.isascii() and (c.isalnum() or c in "_-") for c in key) else json.dumps(key)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"
    if value is None:
        return '""'  # TOML has no null
    return json.dumps(str(value))


def dumps_toml(document: dict[str, Any]) -> bytes:
    lines: list[str] = []

    def table(node: dict[str, Any], path: list[str]) -> None:
        nested = {k: v for k, v in node.items() if isinstance(v, dict) or (isinstance(v, list) and v and all(isinstance(i, dict) for i in v))}
        for key, value in node.items():
            if key not in nested:
                lines.append(f"{_toml_key(key)} = {_toml_value(value)}")
        for key, value in nested.items():
            name = ".".join(_toml_key(p) for p in [*path, key])
            if isinstance(value, dict):
                lines.append(f"\n[{name}]")
                table(value, [*path, key])
            else:
                for item in value:
                    lines.append(f"\n[[{name}]]")
                    table(item, [*path, key])

    table(document, [])
    return ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass")


# -- the mutator ---------------------------------------------------------------------------


def mutate_document(data: bytes, rng: random.Random, byte_mutate: Callable[[bytes], bytes], *, kind: str, sep: bytes) -> bytes:
    """One structural mutation of `data` (a JSON or TOML document, or several joined by `sep`)."""
    parts = data.split(sep)
    index = rng.randrange(len(parts))
    part = parts[index]
    document: Any = _MISSING
    if rng.random() < 0.75:
        try:
            document = tomllib.loads(part.decode("utf-8")) if kind == "toml" else json.loads(part)
        except (ValueError, RecursionError, UnicodeDecodeError):
            document = _MISSING
    if document is _MISSING:
        parts[index] = byte_mutate(part)
    else:
        for _ in range(rng.choice([1, 1, 1, 2, 3])):
            document = mutate_tree(document, rng)
        if kind == "toml":
            parts[index] = dumps_toml(document) if isinstance(document, dict) else byte_mutate(part)
        else:
            parts[index] = dumps_json(document, rng)
    return sep.join(parts)
