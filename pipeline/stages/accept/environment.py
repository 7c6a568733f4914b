"""What a route runs with: the host's capabilities (probed or granted), the route's parameters (only the names
its document declares, each value to its declared grammar) and the clean environment the runner builds."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.errors import InputError, UsageError
from pipeline.formats.routes import (
    GRANTABLE,
    OWNED_FIX,
    PARAMETER_KINDS,
    WINDOWS_SYSTEM_VARIABLES,
    parameter_name_problem,
    parameter_value_problem,
)
from pipeline.stages.accept.document import DEFAULT_PATH, DEFAULT_STEP_TIMEOUT, PROBE_TIMEOUT, host_os


@dataclass
class Capability:
    available: bool
    how: str
    command: str | None = None
    exit_status: int | None = None
    why: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"available": self.available, "how": self.how, "command": self.command, "exit_status": self.exit_status}


@dataclass
class RunOptions:
    clone: Path
    parameters: dict[str, str] = field(default_factory=dict)  # --set: every name must be declared by the route
    offered: dict[str, str] = field(default_factory=dict)  # --parameters FILE: the route takes the names it declares
    grants: list[str] = field(default_factory=list)
    denies: list[str] = field(default_factory=list)
    step_timeout: float = DEFAULT_STEP_TIMEOUT
    work: Path | None = None
    keep_work: bool = False


def probe(command: list[str], env: dict[str, str], cwd: Path, timeout: float = PROBE_TIMEOUT) -> tuple[int | None, bytes]:
    try:
        result = subprocess.run(command, env=env, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout, check=False)
    except FileNotFoundError:
        return None, b""
    except subprocess.TimeoutExpired:
        return None, b""
    return result.returncode, result.stdout


def find_program(name: str, env: dict[str, str]) -> str | None:
    return shutil.which(name, path=env.get("PATH") or env.get("Path"))


def probe_capabilities(needed: set[str], env: dict[str, str], cwd: Path, grants: list[str], denies: list[str] = ()) -> tuple[dict[str, Capability], list[dict[str, str]]]:
    """Each needed capability, probed in the run's own environment; and the GPUs seen (host facts).
    A capability the operator denies (--deny CAP) is absent without a probe, and the receipt says so."""
    caps: dict[str, Capability] = {}
    gpus: list[dict[str, str]] = []
    smi = find_program("nvidia-smi", env)
    query = [smi or "nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"]
    status, out = probe(query, env, cwd) if smi else (None, b"")
    if status == 0:
        for line in out.decode("utf-8", "replace").splitlines():
            name, _sep, driver = line.partition(",")
            if name.strip():
                gpus.append({"name": name.strip(), "driver": driver.strip()})
    for cap in sorted(needed):
        if cap in denies:
            caps[cap] = Capability(False, "denied", None, None, "denied by the operator (--deny)")
        elif cap == "gpu":
            caps[cap] = Capability(bool(gpus), "probe", "nvidia-smi --query-gpu=name,driver_version --format=csv,noheader", status, "" if gpus else ("nvidia-smi is not on PATH" if not smi else f"nvidia-smi lists no GPU (exit {status})"))
        elif cap == "oci-engine":
            engine = next((name for name in ("podman", "docker") if find_program(name, env)), None)
            if engine is None:
                caps[cap] = Capability(False, "probe", "podman info / docker info", None, "neither podman nor docker is on PATH")
            else:
                code, _ = probe([find_program(engine, env) or engine, "info"], env, cwd)
                caps[cap] = Capability(code == 0, "probe", f"{engine} info", code, "" if code == 0 else f"'{engine} info' exited {code}")
        elif cap in GRANTABLE:
            granted = cap in grants
            caps[cap] = Capability(granted, "granted" if granted else "not-granted", None, None, "" if granted else f"not granted (run with --grant {cap} where the host may use it)")
        else:  # pragma: no cover - routes.CAPABILITIES and this list are kept together
            caps[cap] = Capability(False, "probe", None, None, "unknown capability")
    return caps, gpus


def route_path() -> str:
    """PATH of an sh route: the bin folder of the Python that runs the runner (a virtual environment's, where it
    runs in one: `python3` and the pipeline's console scripts are that environment's), then the system folders.
    Never the caller's PATH: a folder there could hold a `sha256sum` or `git` of its own."""
    runner_bin = os.path.dirname(os.path.abspath(sys.executable)) if sys.executable else ""
    system = DEFAULT_PATH.split(os.pathsep)
    return os.pathsep.join(([runner_bin] if runner_bin and runner_bin not in system else []) + system)


def route_parameters(bundle: dict[str, Any], options: RunOptions) -> tuple[dict[str, str], dict[str, str]]:
    """The values and sources ('set', 'default', 'unset') of the route's declared parameters, before anything is made.

    An allow list: a --set of a name the route does not declare is refused, whatever the name (TAR_OPTIONS,
    XDG_CONFIG_HOME, HTTPS_PROXY ... would make a program run code the document does not hold); the
    --parameters file offers names, of which the route takes only its own; every value must match the
    grammar its declaration states (routes.PARAMETER_KINDS)."""
    declared = {p["name"]: p for p in bundle["parameters"]}
    for name in declared:
        problem = parameter_name_problem(name)
        if problem is not None:  # validate_bundle refused it already; never set one, whatever the caller checked
            raise InputError(f"the route declares a parameter the runner refuses: {name} {problem}", field="parameters", found=name, fix=OWNED_FIX)
    for name in options.parameters:
        if name not in declared:
            raise UsageError(
                "--set names a variable the route does not declare", field="--set", found=name, expected="one of " + (", ".join(sorted(declared)) or "(the route declares no parameters)"),
                why="a run takes only the parameters its route document declares (an allow list); any other variable could make a program run something the document does not hold",
                fix="declare it in the document's parameters block, or drop it",
            )
    given = {**{k: ("--parameters", v) for k, v in options.offered.items() if k in declared}, **{k: (f"--set {k}", v) for k, v in options.parameters.items()}}
    values: dict[str, str] = {}
    sources: dict[str, str] = {}
    for name, parameter in declared.items():
        if name in given:
            flag, value = given[name]
            problem = parameter_value_problem(parameter["kind"], value)
            if problem is not None:
                raise UsageError(
                    f"the value of parameter {name} is not a {parameter['kind']}", field=flag, found=value, expected=problem,
                    why="every parameter's value must match the grammar its route document declares", fix=f"give {name} a value of that form",
                )
            values[name], sources[name] = value, "set"
        elif parameter["default"] is not None:
            values[name], sources[name] = parameter["default"], "default"
        elif parameter["required"]:
            raise UsageError(f"the route needs the parameter {name}", field="--set", expected=f"--set {name}=VALUE ({PARAMETER_KINDS[parameter['kind']].grammar})", fix="see the route's parameters block in the document")
        else:
            sources[name] = "unset"
    return values, sources


def run_environment(bundle: dict[str, Any], options: RunOptions, work: Path) -> tuple[dict[str, str], dict[str, str]]:
    """The environment a route starts from, built by the runner (routes.RUNNER_ENVIRONMENT) and never inherited:
    fresh HOME and TMPDIR inside the work folder, the fixed PATH (route_path), C.UTF-8, UTC, the release
    and the route's declared parameters (route_parameters)."""
    values, sources = route_parameters(bundle, options)
    work.mkdir(parents=True, exist_ok=True)
    # Fresh each run, even in a --work folder used before: a planted .gitconfig (core.fsmonitor) never runs.
    home = Path(tempfile.mkdtemp(prefix="home-", dir=work))
    tmp = Path(tempfile.mkdtemp(prefix="tmp-", dir=work))
    windows = host_os() == "windows"
    # Windows: PowerShell, .NET and the tools a Windows route names live in folders only the host's PATH lists.
    path = os.environ.get("PATH", "") if windows else route_path()
    env = {"HOME": str(home), "TMPDIR": str(tmp), "PATH": path, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TZ": "UTC", "TERM": "dumb"}
    if windows:
        env.update({"USERPROFILE": str(home), "TEMP": str(tmp), "TMP": str(tmp), "APPDATA": str(home / "AppData" / "Roaming"), "LOCALAPPDATA": str(home / "AppData" / "Local")})
        for name in WINDOWS_SYSTEM_VARIABLES:
            if name in os.environ:
                env[name] = os.environ[name]
        env.pop("LANG")
        env.pop("LC_ALL")
    if bundle.get("release"):
        env["OMP_NINFER_RELEASE"] = bundle["release"]
    env.update(values)
    return env, sources
