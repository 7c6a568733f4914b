"""The run context: state that belongs to one pipeline run, not to the process.

Which secrets must never be printed, whether the run is quiet, and the parsed
Sigstore trust roots live here instead of in module globals, so that two runs
in one process (the test suite, or `release` running stage after stage) never
inherit each other's switches.  `python -m pipeline` opens one context per
command (`cli.main`); code below reads it with `current()`.  Standard library
only: `--help` and the errors module import it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any


@dataclass
class RunContext:
    quiet: bool = False
    secrets: set[str] = field(default_factory=set)
    trust_roots: dict[tuple[str, str], Any] = field(default_factory=dict)


# Outside any `run_context()` block (a library call, a test) one default context serves.
_DEFAULT = RunContext(quiet=os.environ.get("OMP_NINFER_QUIET") == "1")
_CURRENT: ContextVar[RunContext | None] = ContextVar("omp_ninfer_run_context", default=None)


def current() -> RunContext:
    return _CURRENT.get() or _DEFAULT


@contextlib.contextmanager
def run_context(*, quiet: bool | None = None) -> Iterator[RunContext]:
    """A fresh context for one run; secrets known to the enclosing one stay known (never fewer redactions)."""
    outer = current()
    context = RunContext(quiet=outer.quiet if quiet is None else quiet, secrets=set(outer.secrets))
    token = _CURRENT.set(context)
    try:
        yield context
    finally:
        _CURRENT.reset(token)
