"""Problems: what compose and verify collect instead of stopping at the first defect.

A Problem names the check group, the file (repository-relative), the field,
what was found, what was expected, why and the fix; `derive()` and the
contract checks record them and carry on, so that verify reports every error
in one run and compose refuses with all of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pipeline.errors import _MISSING as _MISSING_ERR
from pipeline.errors import InputError, PipelineError

_MISSING = object()  # found/expected not stated (None is a value)


@dataclass
class Problem:
    check: str
    what: str
    file: str | None = None  # repository-relative
    field: str | None = None
    found: Any = _MISSING
    expected: Any = _MISSING
    fix: str | None = None
    why: str | None = None

    @classmethod
    def of(cls, check: str, error: PipelineError, *, file: str | None = None) -> Problem:
        """The problem an error describes (its file, field, found, expected, why and fix)."""
        return cls(
            check,
            error.what,
            file=file or error.file,
            field=error.field,
            found=error.found if error.found is not _MISSING_ERR else _MISSING,
            expected=error.expected if error.expected is not _MISSING_ERR else _MISSING,
            fix=error.fix,
            why=error.why,
        )

    def details(self) -> dict[str, Any]:
        """The keyword arguments of a PipelineError naming this problem (found/expected only when known)."""
        kwargs: dict[str, Any] = {"file": self.file, "field": self.field, "fix": self.fix, "why": self.why}
        if self.found is not _MISSING:
            kwargs["found"] = self.found
        if self.expected is not _MISSING:
            kwargs["expected"] = self.expected
        return kwargs

    def error(self) -> InputError:
        return InputError(self.what, **self.details())

    def message(self) -> str:
        return self.error().render()

    def to_json(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "file": self.file,
            "field": self.field,
            "found": None if self.found is _MISSING else self.found,
            "expected": None if self.expected is _MISSING else self.expected,
            "message": self.message(),
        }


@dataclass
class Problems:
    items: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)

    def add(self, check: str, what: str, **kwargs: Any) -> None:
        self.items.append(Problem(check, what, **kwargs))

    def warn(self, check: str, what: str, **kwargs: Any) -> None:
        self.warnings.append(Problem(check, what, **kwargs))

    def add_error(self, check: str, error: PipelineError, *, file: str | None = None) -> None:
        self.items.append(Problem.of(check, error, file=file))

    def keys(self) -> set[tuple[str | None, str | None]]:
        return {(p.file, p.field) for p in self.items}
