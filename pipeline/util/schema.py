"""A small strict reader for the pipeline's data files (lanes, images, locks).

Each table is described by a dict of field name -> Field.  Unknown keys are
rejected, missing required keys are reported, and every error names the file,
the dotted key, what was found and what was expected.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pipeline.errors import InputError

_MISSING = object()


@dataclass(frozen=True)
class Field:
    kind: type | tuple[type, ...]
    required: bool = True
    default: Any = None
    expected: str | None = None  # human wording of what is allowed
    check: Callable[[Any], bool] | None = None
    items: type | None = None  # element type for lists


def _type_name(kind: type | tuple[type, ...]) -> str:
    names = {str: "a string", int: "an integer", bool: "true or false", list: "a list", dict: "a table", float: "a number"}
    if isinstance(kind, tuple):
        return " or ".join(names.get(k, k.__name__) for k in kind)
    return names.get(kind, kind.__name__)


def read_table(
    table: Any, fields: dict[str, Field], *, file: str, prefix: str = "", fix: str | None = None
) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise InputError("must be a table", file=file, field=prefix or None, found=type(table).__name__, expected="a table")
    unknown = sorted(set(table) - set(fields))
    if unknown:
        key = f"{prefix}.{unknown[0]}" if prefix else unknown[0]
        raise InputError(
            "unknown key",
            file=file,
            field=key,
            found=unknown[0],
            expected="one of " + ", ".join(sorted(fields)),
            fix=fix or "remove the key or correct its spelling",
        )
    result: dict[str, Any] = {}
    for name, spec in fields.items():
        key = f"{prefix}.{name}" if prefix else name
        value = table.get(name, _MISSING)
        if value is _MISSING:
            if spec.required:
                raise InputError(
                    "required key is missing",
                    file=file,
                    field=key,
                    expected=spec.expected or _type_name(spec.kind),
                    fix=fix or f"add '{name} = ...' to the file",
                )
            result[name] = spec.default
            continue
        # bool is an int subclass in Python: keep them apart.
        wrong_type = not isinstance(value, spec.kind) or (
            spec.kind is int and isinstance(value, bool)
        )
        if wrong_type:
            raise InputError(
                "has the wrong type",
                file=file,
                field=key,
                found=value,
                expected=spec.expected or _type_name(spec.kind),
            )
        if spec.items is not None and isinstance(value, list):
            for index, item in enumerate(value):
                if not isinstance(item, spec.items):
                    raise InputError(
                        "list item has the wrong type",
                        file=file,
                        field=f"{key}[{index}]",
                        found=item,
                        expected=_type_name(spec.items),
                    )
        if spec.check is not None and not spec.check(value):
            raise InputError("has an invalid value", file=file, field=key, found=value, expected=spec.expected or "a valid value")
        result[name] = value
    return result


def matches(pattern: str) -> Callable[[Any], bool]:
    compiled = re.compile(pattern)
    return lambda value: isinstance(value, str) and compiled.fullmatch(value) is not None


def one_of(*choices: str) -> Callable[[Any], bool]:
    return lambda value: value in choices
