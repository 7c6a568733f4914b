"""Running external tools with failures that say which tool and why."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..errors import BuildFailure, EnvironmentProblem, PipelineError


def require_tool(name: str, *, purpose: str, debian_package: str | None = None) -> str:
    found = shutil.which(name)
    if found:
        return found
    fix = f"install it (Debian: apt-get install {debian_package})" if debian_package else f"install {name}"
    raise EnvironmentProblem(f"the tool '{name}' is not on PATH", why=f"it is needed to {purpose}", fix=fix)


def tail(text: str, lines: int = 25) -> str:
    parts = text.strip().splitlines()
    return "\n".join(parts[-lines:])


def run(
    command: Sequence[str | os.PathLike[str]],
    *,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    what: str,
    failure: type[PipelineError] = BuildFailure,
    fix: str | None = None,
    check: bool = True,
    input_bytes: bytes | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[bytes]:
    argv = [os.fspath(part) for part in command]
    try:
        result = subprocess.run(
            argv,
            cwd=cwd,
            env=dict(env) if env is not None else None,
            input=input_bytes,
            capture_output=True,
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError:
        raise EnvironmentProblem(
            f"cannot start '{argv[0]}'",
            why=f"it is needed to {what}",
            fix=fix or f"install {Path(argv[0]).name} or put it on PATH",
        ) from None
    except subprocess.TimeoutExpired:
        raise failure(f"{what}: '{Path(argv[0]).name}' did not finish within {timeout} s", fix=fix) from None
    if check and result.returncode != 0:
        output = tail(result.stderr.decode("utf-8", "replace") or result.stdout.decode("utf-8", "replace"))
        raise failure(
            f"{what} failed: '{Path(argv[0]).name}' exited with status {result.returncode}",
            why=f"its last output was:\n{output}\n" if output else None,
            fix=fix,
        )
    return result


def run_text(command: Sequence[str | os.PathLike[str]], **kwargs) -> str:
    return run(command, **kwargs).stdout.decode("utf-8", "replace")
