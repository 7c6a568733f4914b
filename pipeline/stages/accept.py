"""Stage `accept`: the documented routes, run exactly as written, bound to the candidate.

    python -m pipeline accept bundle --release vX.Y.Z --route ROUTE [--candidate REV] [--document-at REV]
    python -m pipeline accept run BUNDLE [--clone DIR] [--set NAME=VALUE] [--parameters FILE] [--grant CAP]
    python -m pipeline accept compose --release vX.Y.Z RECEIPT... [--document-change ROUTE:STEP=WHY]
    python -m pipeline accept pinned FIELD [--release vX.Y.Z] [--mirrored]
    python -m pipeline accept routes DOCUMENT

`bundle` takes one route of the release's route document (docs/QUICKSTART.md, named in
`release.toml [acceptance]`) as it is at the candidate commit, refuses a block that
names an image by tag, anything "latest", a URL or value the candidate manifest does
not bind, a manifest field that is null, a URL read without its hash, or (PowerShell)
anything Windows PowerShell 5.1 cannot parse or run, and writes the bundle.

`run` executes a bundle's steps in order in ONE shell session (bash for `sh`; Windows
PowerShell 5.1 for `powershell`, on Windows only) from a clean clone at the candidate
commit: standard input at end of file, a clean documented environment (never the
inherited one), stop at the first failing step.  Before anything runs it reads the route
document from the clone's git at the bundle's document commit (a regular file at a safe
relative path, at most 1 MiB, hashed before it is parsed), scans it with the reader
`bundle` used, and refuses (IntegrityError, exit 5) a bundle whose steps or parameters are
not byte for byte the document's: the bundle only says which route of which document runs.
The shell starts from an environment the runner builds (routes.RUNNER_ENVIRONMENT: fresh HOME
and TMPDIR in the work folder, PATH = the runner's Python's bin folder and the system folders,
C.UTF-8, UTC) plus the route's parameters: only the names its document declares (an allow list;
`--set` of any other name is refused), each value matching the grammar its declaration states
(routes.PARAMETER_KINDS).  Host-only steps (`requires=CAP`) run
only where the host has the capability (probed, or granted with --grant) and are
recorded as not run otherwise.  Each step's output is streamed to files in the work folder;
the runner hashes them in chunks and keeps at most the last 64 KiB in memory (shown when a
step fails).  The receipt records hashes and byte counts of every step's output, never the
output itself.  The receipt is written under --dist only.  `run` and `pinned` need only the standard
library: on an owner's host, `python3 -m pipeline.stages.accept run BUNDLE` from a clone.

`compose` checks the receipts against their bundles, the candidate and the document
(each bundle's steps and parameters against the document at its commit, each receipt's
parameters and variables against the route's declaration; changed blocks need
`--document-change` and a re-run), writes the acceptance record
`acceptance/external-installation.json` and binds it as `compose accept` does.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import re
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.errors import (
    EnvironmentProblem,
    InputError,
    IntegrityError,
    PipelineError,
    RefusedError,
    UsageError,
    redact,
)
from pipeline.formats import acceptance as fmt
from pipeline.formats.routes import (
    CAPABILITIES,
    GRANTABLE,
    MAX_DOCUMENT_BYTES,
    OWNED_FIX,
    PARAMETER_KINDS,
    PARAMETER_NAME_RE,
    RUNNER_ENVIRONMENT,
    WINDOWS_SYSTEM_VARIABLES,
    Document,
    parameter_name_problem,
    parameter_value_problem,
    scan,
)
from pipeline.infra.git import GIT
from pipeline.register import Artifact, Register
from pipeline.stage import Context, Stage, execute
from pipeline.util import ui
from pipeline.util.fs import atomic_write_bytes, read_bytes_bounded
from pipeline.util.hashing import is_commit_hex, sha256_bytes
from pipeline.util.safepath import within

DEFAULT_DOCUMENT = "docs/QUICKSTART.md"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DEFAULT_STEP_TIMEOUT = 1800.0
PROBE_TIMEOUT = 60.0
OUTPUT_DIR = "acceptance"
RUNNER = "pipeline.stages.accept"
# Every variable the runner itself may put in a route's environment besides the route's parameters
# (formats/routes.py: RUNNER_ENVIRONMENT says why each is there).
RUNNER_VARIABLES = frozenset(RUNNER_ENVIRONMENT)
MAX_PARAMETERS_FILE_BYTES = 64 * 1024
OUTPUT_TAIL_BYTES = fmt.OUTPUT_TAIL_BYTES
SHOWN_TAIL_BYTES = 4096  # of a failing step's stderr, printed with the failure


# -- small helpers ----------------------------------------------------------------------------------

def _git(root: Path, *args: str, check: bool = False) -> subprocess.CompletedProcess:
    try:
        result = subprocess.run([*GIT, "-C", str(root), *args], capture_output=True, check=False)
    except FileNotFoundError:
        raise EnvironmentProblem("git is not installed", why="acceptance binds the clone's commit", fix="install git") from None
    if check and result.returncode != 0:
        raise InputError(f"git {' '.join(args)} failed: {result.stderr.decode('utf-8', 'replace').strip()}", file=root)
    return result


def git_show(root: Path, rev: str, path: str) -> bytes | None:
    result = _git(root, "show", f"{rev}:./{path}")
    return result.stdout if result.returncode == 0 else None


def resolve_commit(root: Path, rev: str, flag: str) -> str:
    result = _git(root, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    commit = result.stdout.decode().strip()
    if result.returncode != 0 or not is_commit_hex(commit):
        raise UsageError(f"{flag} names no commit of this repository", field=flag, found=rev, expected="a commit (HEAD or 40 hex)")
    return commit


def is_ancestor(root: Path, older: str, newer: str) -> bool:
    return _git(root, "merge-base", "--is-ancestor", older, newer).returncode == 0


def utc_now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def host_os() -> str:
    return platform.system().lower()


def host_arch() -> str:
    machine = platform.machine().lower()
    return fmt.ARCH_ALIASES.get(machine, machine)


def read_document_at(root: Path, commit: str, path: str, *, file: str, field: str = "document.path") -> bytes:
    """The bytes of `path` at `commit` in the git repository `root`: a regular file (never a symbolic
    link) at a safe relative path, at most MAX_DOCUMENT_BYTES, read through git's object store (no
    working-tree path is followed).  Raises InputError naming `file` and `field`."""
    fmt.check_document_path(path, file=file, field=field)
    if _git(root, "cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
        raise InputError("the clone does not have the document's commit", file=file, field="document.commit", found=commit, fix=f"git -C {root} fetch (the commit must be in the product repository)")
    listed = _git(root, "ls-tree", "-z", "--full-tree", commit, "--", path)
    entries = [e for e in listed.stdout.split(b"\0") if e]
    if listed.returncode != 0 or len(entries) != 1:
        raise InputError("the document is not in the commit", file=file, field=field, found=path, expected=f"a file of commit {commit[:12]}", fix="make the bundle from a document committed to the product repository")
    meta, _tab, name = entries[0].partition(b"\t")
    mode, kind, oid = (meta.decode("ascii", "replace").split(" ") + ["", "", ""])[:3]
    if name.decode("utf-8", "replace") != path or kind != "blob" or mode not in ("100644", "100755"):
        what = "a symbolic link" if mode == "120000" else f"a {kind or 'thing'} of mode {mode}"
        raise InputError(f"the document at commit {commit[:12]} is {what}, not a regular file", file=file, field=field, found=path, expected="a regular file inside the clone", why="a link could make the runner read a file outside the clone")
    size = _git(root, "cat-file", "-s", oid)
    count = int(size.stdout.decode().strip() or "-1") if size.returncode == 0 and size.stdout.strip().isdigit() else -1
    if count < 0 or count > MAX_DOCUMENT_BYTES:
        raise InputError("the document is too large for a route document", file=file, field=field, found=f"{count} bytes", expected=f"at most {MAX_DOCUMENT_BYTES} bytes")
    data = _git(root, "cat-file", "blob", oid, check=True).stdout
    if len(data) != count:  # pragma: no cover - git answers what it said
        raise InputError("git returned another size than it listed", file=file, field=field, found=len(data), expected=count)
    return data


def check_document_in_clone(clone: Path, bundle: dict[str, Any], bundle_file: str) -> str | None:
    """Re-read the bundle's route document in the clone at the bundle's document commit, hash it before
    parsing, scan it with the reader 'accept bundle' used and refuse a bundle that is not its text
    (formats/acceptance.check_against_document).  Returns the SHA-256 of the document in the clone's
    working tree (None if it has none there)."""
    document = bundle["document"]
    commit = document["commit"]
    if bundle["kind"] == "release-route" and commit != bundle["candidate_commit"] and not is_ancestor(clone, bundle["candidate_commit"], commit):
        raise RefusedError("the bundle's document commit is neither the candidate nor a commit after it", file=bundle_file, field="document.commit", found=commit, expected=f"{bundle['candidate_commit']} or a descendant in the clone", fix="make the bundle with 'accept bundle' (--document-at a later commit of the product repository, fetched into the clone)")
    data = read_document_at(clone, commit, document["path"], file=bundle_file)
    found = sha256_bytes(data)
    if found != document["sha256"] or len(data) != document["bytes"]:  # hashed before it is parsed
        raise IntegrityError(
            f"the route document in the clone at {commit[:12]} is not the bundle's", file=document["path"], field="sha256", found=found, expected=document["sha256"],
            why="a route is accepted only for the text the document holds", fix="make the bundle again from the committed document ('accept bundle') and run it in a clone of that repository",
        )
    check = scan(data, document["path"])
    fmt.check_against_document(bundle, check, file=bundle_file, where=f"the clone at {commit[:12]}")
    working = clone / document["path"]
    if working.is_symlink() or not working.is_file() or not within(working, clone):
        return None
    return sha256_bytes(read_bytes_bounded(working, MAX_DOCUMENT_BYTES, what="route document")) if working.stat().st_size <= MAX_DOCUMENT_BYTES else None


def _read_json_file(path: Path, what: str) -> tuple[bytes, dict[str, Any]]:
    if not path.is_file():
        raise InputError(f"{what} does not exist", file=path)
    data = read_bytes_bounded(path, fmt.MAX_JSON_BYTES, what=what.removeprefix("the "))
    return data, fmt.loads_strict(data, file=str(path))


# -- pinned: a manifest value for a block ------------------------------------------------------------

def pinned_value(field_path: str, *, release: str | None, root: Path, mirrored: bool = False, environ: dict[str, str] | None = None) -> str:
    environ = os.environ if environ is None else environ
    release = release or environ.get("OMP_NINFER_RELEASE")
    if not release:
        raise UsageError("no release named", field="--release", expected="--release vX.Y.Z or OMP_NINFER_RELEASE set", fix="export OMP_NINFER_RELEASE=vX.Y.Z (the release you install)")
    from pipeline.formats.release.names import RELEASE_RE

    if not RELEASE_RE.fullmatch(release):
        raise UsageError("is not a product release name", field="release", found=release, expected="vX.Y.Z")
    path = root / "manifests" / release / "manifest.json"
    if not path.is_file():
        raise InputError("the release has no manifest here", file=path, fix="run from the top folder of a clone of the release (cd omp-ninfer)")
    _data, manifest = _read_json_file(path, "the manifest")
    value = fmt.resolve_field(manifest, field_path)
    if fmt.is_missing(value):
        raise InputError("the manifest has no such field", file=path, field=field_path, expected="a field path such as components.ninfer.oci_reference or components.ninfer_variants[<lane>].package_url")
    if value is None:
        raise RefusedError("the manifest does not bind this value yet (null)", file=path, field=field_path, fix="install a release whose manifest binds it")
    if isinstance(value, (dict, list)):
        raise InputError("is not a single value", file=path, field=field_path, found=type(value).__name__)
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value)
    if mirrored:
        if not isinstance(value, str) or not value.startswith("https://"):
            raise InputError("--mirrored applies to URL fields only", file=path, field=field_path, found=value)
        text = fmt.apply_mirrors(text, fmt.parse_mirrors(environ.get("OMP_NINFER_MIRROR")))
    return text


# -- the runner --------------------------------------------------------------------------------------

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


def _probe(command: list[str], env: dict[str, str], cwd: Path, timeout: float = PROBE_TIMEOUT) -> tuple[int | None, bytes]:
    try:
        result = subprocess.run(command, env=env, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout, check=False)
    except FileNotFoundError:
        return None, b""
    except subprocess.TimeoutExpired:
        return None, b""
    return result.returncode, result.stdout


def _which(name: str, env: dict[str, str]) -> str | None:
    return shutil.which(name, path=env.get("PATH") or env.get("Path"))


def probe_capabilities(needed: set[str], env: dict[str, str], cwd: Path, grants: list[str], denies: list[str] = ()) -> tuple[dict[str, Capability], list[dict[str, str]]]:
    """Each needed capability, probed in the run's own environment; and the GPUs seen (host facts).
    A capability the operator denies (--deny CAP) is absent without a probe, and the receipt says so."""
    caps: dict[str, Capability] = {}
    gpus: list[dict[str, str]] = []
    smi = _which("nvidia-smi", env)
    query = [smi or "nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"]
    status, out = _probe(query, env, cwd) if smi else (None, b"")
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
            engine = next((name for name in ("podman", "docker") if _which(name, env)), None)
            if engine is None:
                caps[cap] = Capability(False, "probe", "podman info / docker info", None, "neither podman nor docker is on PATH")
            else:
                code, _ = _probe([_which(engine, env) or engine, "info"], env, cwd)
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


def _stream(path: Path, tails: dict[Path, bytes] | None = None) -> dict[str, Any]:
    """SHA-256 and size of one step's output file, read in chunks; its last OUTPUT_TAIL_BYTES go to `tails`
    (the only part of a step's output ever held in memory)."""
    import hashlib

    digest = hashlib.sha256()
    count = 0
    tail = b""
    if path.is_file():
        with path.open("rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
                count += len(chunk)
                tail = (tail + chunk)[-OUTPUT_TAIL_BYTES:]
    if tails is not None:
        tails[path] = tail
    return {"sha256": digest.hexdigest(), "bytes": count}


def _show_tail(tail: bytes, what: str) -> None:
    if not tail:
        return
    text = tail[-SHOWN_TAIL_BYTES:].decode("utf-8", "replace").rstrip("\n")
    ui.info(f"  the end of {what}:")
    for line in text.split("\n")[-20:]:
        ui.info("  | " + redact(line))


def _kill_group(proc: subprocess.Popen) -> None:
    if proc.poll() is not None and host_os() == "windows":
        return
    try:
        if host_os() == "windows":
            subprocess.run(["taskkill", "/T", "/F", "/PID", str(proc.pid)], capture_output=True, check=False)
        else:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(10)


class _BashSession:
    """One `bash` process fed step by step: each step is sourced from its file with stdin at EOF,
    stdout and stderr to files, and its status reported on a private pipe."""

    def __init__(self, env: dict[str, str], cwd: Path, work: Path) -> None:
        bash = _which("bash", env)
        if bash is None:
            raise EnvironmentProblem("bash is not on the run's PATH", found=env["PATH"], fix="install bash")
        self.read_fd, self.write_fd = os.pipe()
        self.log = open(work / "session.log", "wb")  # noqa: SIM115 - closed in close(); the session's own output, never in the receipt
        self.proc = subprocess.Popen(
            [bash, "--noprofile", "--norc"],
            stdin=subprocess.PIPE,
            stdout=self.log,
            stderr=self.log,
            cwd=cwd,
            env=env,
            pass_fds=(self.write_fd,),
            start_new_session=True,
        )
        os.close(self.write_fd)
        self.version = ""
        self._send("set -euo pipefail\n")
        self.buffer = b""

    def _send(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text.encode("utf-8"))
        self.proc.stdin.flush()

    def run(self, file: Path, out: Path, err: Path, timeout: float) -> tuple[str, int | None, str | None]:
        """(status, exit status, reason) of one step."""
        quote = lambda p: "'" + str(p).replace("'", "'\\''") + "'"  # noqa: E731 - local shell quoting
        try:
            self._send(f". {quote(file)} </dev/null >{quote(out)} 2>{quote(err)}\nprintf '%s\\n' \"$?\" >&{self.write_fd}\n")
        except BrokenPipeError:
            code = self.proc.wait()
            return "failed", code, "the shell session had already ended"
        deadline = time.monotonic() + timeout
        # poll/epoll (selectors), never select(): select() refuses a descriptor above 1023, and a runner inside a
        # long-lived process (a test worker, a service) may well get its pipe at such a number.
        with selectors.DefaultSelector() as selector:
            selector.register(self.read_fd, selectors.EVENT_READ)
            return self._await_status(selector, deadline, timeout)

    def _await_status(self, selector: selectors.BaseSelector, deadline: float, timeout: float) -> tuple[str, int | None, str | None]:
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                _kill_group(self.proc)
                return "failed", None, f"timed out after {timeout:g} s (the session was stopped)"
            if not selector.select(min(left, 1.0)):
                continue
            chunk = os.read(self.read_fd, 64)
            if not chunk:  # the shell exited: errexit, `exit`, or a crash
                code = self.proc.wait()
                if code == 0:
                    return "failed", 0, "the step ended the shell session (exit); a route runs in one session"
                return "failed", code, f"exit status {code}"
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        code = int(line.decode().strip() or "1")
        return ("passed" if code == 0 else "failed"), code, (None if code == 0 else f"exit status {code}")

    def close(self) -> None:
        try:
            if self.proc.stdin:
                self.proc.stdin.close()
        except BrokenPipeError:
            pass
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
        _kill_group(self.proc)  # background processes a step left behind
        os.close(self.read_fd)
        self.log.close()


_PS_DRIVER = r"""$ErrorActionPreference = 'Stop'
$steps = Get-Content -LiteralPath '{plan}' -Encoding UTF8
foreach ($entry in $steps) {{
    $parts = $entry -split "`t"
    $n = $parts[0]; $file = $parts[1]; $out = $parts[2]; $err = $parts[3]; $status = $parts[4]
    $hash = (Get-FileHash -Algorithm SHA256 -LiteralPath $file).Hash.ToLowerInvariant()
    [IO.File]::WriteAllText($status + '.start', $hash)
    $global:LASTEXITCODE = 0
    $code = 0
    try {{
        . $file 1> $out 2> $err
        if (-not $?) {{ $code = 1 }}
        if ($global:LASTEXITCODE -ne 0) {{ $code = $global:LASTEXITCODE }}
    }} catch {{
        [IO.File]::AppendAllText($err, ($_ | Out-String))
        $code = 1
        if ($global:LASTEXITCODE -ne 0) {{ $code = $global:LASTEXITCODE }}
    }}
    [IO.File]::WriteAllText($status, [string]$code)
    if ($code -ne 0) {{ exit $code }}
}}
exit 0
"""


def _run_powershell(steps: list[dict[str, Any]], plan_rows: list[tuple[dict, Path, Path, Path]], env: dict[str, str], cwd: Path, work: Path, timeout: float) -> dict[int, tuple[str, int | None, str | None, str | None, float]]:
    """Windows PowerShell 5.1: one powershell.exe runs the planned steps in order (dot-sourced), writing a
    status file per step; the runner watches the files and enforces the step timeout."""
    exe = _which("powershell.exe", env) or _which("powershell", env)
    if exe is None:
        raise EnvironmentProblem("Windows PowerShell (powershell.exe) is not on the run's PATH", fix="run PowerShell routes on Windows 10/11")
    plan = work / "plan.txt"
    lines = []
    for step, file, out, err in plan_rows:
        lines.append("\t".join([str(step["index"]), str(file), str(out), str(err), str(work / f"status-{step['index']:03d}")]))
    plan.write_text("\n".join(lines) + "\n", encoding="utf-8")
    driver = work / "driver.ps1"
    driver.write_bytes(b"\xef\xbb\xbf" + _PS_DRIVER.format(plan=str(plan).replace("'", "''")).encode("utf-8"))
    log = open(work / "session.log", "wb")  # noqa: SIM115 - closed in the finally below
    proc = subprocess.Popen([exe, "-NoLogo", "-NoProfile", "-NonInteractive", "-ExecutionPolicy", "Bypass", "-File", str(driver)], stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=cwd, env=env)
    results: dict[int, tuple[str, int | None, str | None, str | None, float]] = {}
    try:
        for step, _file, _out, _err in plan_rows:
            status_file = work / f"status-{step['index']:03d}"
            start = time.monotonic()
            while not status_file.exists():
                if proc.poll() is not None and not status_file.exists():
                    code = proc.returncode
                    results[step["index"]] = ("failed", code, f"PowerShell ended before the step finished (exit {code})", _start_hash(status_file), time.monotonic() - start)
                    return results
                if time.monotonic() - start > timeout:
                    _kill_group(proc)
                    results[step["index"]] = ("failed", None, f"timed out after {timeout:g} s (the session was stopped)", _start_hash(status_file), time.monotonic() - start)
                    return results
                time.sleep(0.2)
            code = int(status_file.read_text().strip() or "1")
            results[step["index"]] = ("passed" if code == 0 else "failed", code, None if code == 0 else f"exit status {code}", _start_hash(status_file), time.monotonic() - start)
            if code != 0:
                return results
    finally:
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
        log.close()
    return results


def _start_hash(status_file: Path) -> str | None:
    start = status_file.with_name(status_file.name + ".start")
    return start.read_text().strip() if start.exists() else None


def _check_host_and_options(route: dict[str, Any], options: RunOptions, bundle_file: str) -> None:
    """The host is of the route's kind and the --grant/--deny options name capabilities that exist."""
    kind = fmt.HOST_KINDS[route["host_kind"]]
    if (host_os(), host_arch()) != (kind.os, kind.arch):
        raise EnvironmentProblem(
            f"route {route['id']} runs on host kind {kind.id} ({kind.description})",
            file=bundle_file, field="route.host_kind", found=f"{host_os()}-{host_arch()}", expected=f"{kind.os}-{kind.arch}",
            fix="run the bundle on a host of that kind",
        )
    for option in options.grants:
        if option not in GRANTABLE:
            raise UsageError("--grant names a capability that is probed, not granted", field="--grant", found=option, expected=" or ".join(GRANTABLE))
    for option in options.denies:
        if option not in CAPABILITIES:
            raise UsageError("--deny names an unknown capability", field="--deny", found=option, expected=" or ".join(sorted(CAPABILITIES)))
        if option in options.grants:
            raise UsageError("a capability cannot be granted and denied", field="--deny", found=option)


def _clean_clone(options: RunOptions, bundle: dict[str, Any]) -> tuple[Path, str]:
    """The clone's top folder and HEAD: clean, and at the candidate commit for a release route."""
    top = _git(options.clone, "rev-parse", "--show-toplevel")
    if top.returncode != 0:
        raise InputError("is not inside a git clone", file=options.clone, fix="run from a clone of the product repository at the candidate commit")
    clone = Path(top.stdout.decode().strip())
    commit = _git(clone, "rev-parse", "HEAD", check=True).stdout.decode().strip()
    dirty = _git(clone, "status", "--porcelain", "--untracked-files=normal", check=True).stdout.decode().strip()
    if dirty:
        raise RefusedError("the clone has local changes", file=clone, found=dirty.splitlines()[0], why="a route is accepted on the exact candidate bytes", fix="use a fresh clone (git clone, git checkout CANDIDATE) or git stash")
    if bundle["kind"] == "release-route" and commit != bundle["candidate_commit"]:
        raise RefusedError("the clone is not at the bundle's candidate commit", file=clone, field="HEAD", found=commit, expected=bundle["candidate_commit"], fix=f"git checkout {bundle['candidate_commit']}")
    return clone, commit


@dataclass
class _StepRun:
    """What running a route's steps gave: one record per step, the first failure, the shell's version."""

    records: list[dict[str, Any]]
    failed_step: int | None
    failure: str | None
    shell_version: str


def _host_only_reason(step: dict[str, Any], caps: dict[str, Any]) -> str | None:
    missing = [cap for cap in step["requires"] if not caps[cap].available]
    return "host-only: " + "; ".join(f"requires {cap}, {caps[cap].why}" for cap in missing) if missing else None


def _run_bash_step(session: _BashSession, step: dict[str, Any], work: Path, step_timeout: float) -> tuple[dict[str, Any], dict[Path, bytes]]:
    """Write one step's exact bytes, run them in the session, and record what happened (bytes re-hashed after)."""
    record = _base_record(step)
    file = work / f"step-{step['index']:03d}.sh"
    out, err = work / f"step-{step['index']:03d}.stdout", work / f"step-{step['index']:03d}.stderr"
    file.write_bytes(step["text"].encode("utf-8"))
    executed = sha256_bytes(file.read_bytes())
    record["executed_sha256"] = executed
    if executed != step["sha256"]:
        status, code, reason = "failed", None, "the bytes written for execution differ from the block"
        elapsed = 0.0
    else:
        begin = time.monotonic()
        status, code, reason = session.run(file, out, err, step_timeout)
        elapsed = time.monotonic() - begin
        if sha256_bytes(file.read_bytes()) != executed:
            status, reason = "failed", "the step file changed while it ran"
    tails: dict[Path, bytes] = {}
    record.update(status=status, exit_status=code, elapsed_s=round(elapsed, 3), stdout=_stream(out, tails), stderr=_stream(err, tails), reason=reason)
    return record, tails


def _run_bash_route(steps: list[dict[str, Any]], caps: dict[str, Any], env: dict[str, str], clone: Path, work: Path, step_timeout: float) -> _StepRun:
    """An sh route: every step in one bash session, in order, stopping at the first failure."""
    session = _BashSession(env, clone, work)
    version = _probe([_which("bash", env) or "bash", "--version"], env, clone)[1]
    run = _StepRun([], None, None, version.decode("utf-8", "replace").splitlines()[0] if version else "")
    try:
        for step in steps:
            if run.failed_step is not None:
                run.records.append({**_base_record(step), "reason": f"not run: step {run.failed_step} failed"})
                continue
            host_only = _host_only_reason(step, caps)
            if host_only:
                ui.info(f"SKIP: step {step['index']} (lines {step['line_start']}-{step['line_end']}): {host_only}")
                run.records.append({**_base_record(step), "reason": host_only})
                continue
            record, tails = _run_bash_step(session, step, work, step_timeout)
            run.records.append(record)
            line = f"step {step['index']} (lines {step['line_start']}-{step['line_end']})"
            if record["status"] == "passed":
                ui.info(f"OK: {line} in {record['elapsed_s']:.1f} s")
            else:
                run.failed_step, run.failure = step["index"], record["reason"]
                ui.info(f"FAIL: {line}: {record['reason']}; its output is kept in {work}")
                err = work / f"step-{step['index']:03d}.stderr"
                _show_tail(tails.get(err, b""), f"{err.name}")
    finally:
        session.close()
    return run


def _run_powershell_route(steps: list[dict[str, Any]], caps: dict[str, Any], env: dict[str, str], clone: Path, work: Path, step_timeout: float, bundle_file: str) -> _StepRun:
    """A powershell route: the runnable steps in one Windows PowerShell 5.1 session, then one record per step."""
    if host_os() != "windows":
        raise EnvironmentProblem("PowerShell routes run on Windows only (Windows PowerShell 5.1)", file=bundle_file, field="route.shell", found=host_os())
    plan_rows = []
    for step in steps:
        if _host_only_reason(step, caps):
            continue
        file = work / f"step-{step['index']:03d}.ps1"
        file.write_bytes(b"\xef\xbb\xbf" + step["text"].encode("utf-8"))  # BOM: 5.1 reads BOM-less files in the ANSI code page
        plan_rows.append((step, file, work / f"step-{step['index']:03d}.stdout", work / f"step-{step['index']:03d}.stderr"))
    results = _run_powershell(steps, plan_rows, env, clone, work, step_timeout)
    run = _StepRun([], None, None, "Windows PowerShell 5.1")
    for step in steps:
        record = _base_record(step)
        host_only = _host_only_reason(step, caps)
        if run.failed_step is not None:
            record["reason"] = f"not run: step {run.failed_step} failed"
        elif host_only:
            record["reason"] = host_only
        elif step["index"] in results:
            status, code, reason, executed, elapsed = results[step["index"]]
            out, err = work / f"step-{step['index']:03d}.stdout", work / f"step-{step['index']:03d}.stderr"
            # The driver hashes the file it dot-sources; the file carries a BOM the block does not.
            executed_text = None
            if executed is not None:
                body = (work / f"step-{step['index']:03d}.ps1").read_bytes()
                executed_text = sha256_bytes(body[3:]) if sha256_bytes(body) == executed else executed
            if executed_text != step["sha256"]:
                status, reason = "failed", reason or "the executed bytes differ from the block"
            record.update(status=status, exit_status=code, elapsed_s=round(elapsed, 3), stdout=_stream(out), stderr=_stream(err), reason=reason, executed_sha256=executed_text)
            if status != "passed":
                run.failed_step, run.failure = step["index"], reason
        else:
            record["reason"] = "not run: the session ended"
            run.failed_step, run.failure = run.failed_step or step["index"], run.failure or "the session ended before this step"
        run.records.append(record)
    return run


def run_bundle(bundle_bytes: bytes, bundle_file: str, options: RunOptions) -> dict[str, Any]:
    """Run one bundle; returns the run receipt (passed or failed).  Refuses before the first step
    when the host, the clone or the parameters do not fit the bundle."""
    bundle = fmt.validate_bundle(fmt.loads_strict(bundle_bytes, file=bundle_file), file=bundle_file)
    route = bundle["route"]
    _check_host_and_options(route, options, bundle_file)
    clone, commit = _clean_clone(options, bundle)
    doc_in_clone = check_document_in_clone(clone, bundle, bundle_file)
    route_parameters(bundle, options)  # refused before the work folder is made

    work = options.work or Path(tempfile.mkdtemp(prefix="omp-ninfer-accept-"))
    env, sources = run_environment(bundle, options, work)
    steps = bundle["steps"]
    needed = {cap for step in steps for cap in step["requires"]}
    caps, gpus = probe_capabilities(needed, env, clone, options.grants, options.denies)
    for cap, capability in sorted(caps.items()):
        (ui.info if capability.available else ui.warn)(f"capability {cap}: {'available' if capability.available else 'absent'}" + (f" ({capability.why})" if capability.why else ""))

    started = utc_now()
    ui.step("accept", f"route {route['id']}: {len(steps)} steps in one {route['shell']} session, clone {commit[:12]}")
    if route["shell"] == "sh":
        run = _run_bash_route(steps, caps, env, clone, work, options.step_timeout)
    else:
        run = _run_powershell_route(steps, caps, env, clone, work, options.step_timeout, bundle_file)
    finished = utc_now()
    if not options.keep_work and run.failed_step is None and options.work is None:
        shutil.rmtree(work, ignore_errors=True)
    receipt = {
        "artifact_type": fmt.RECEIPT_TYPE,
        "schema_version": fmt.SCHEMA_VERSION,
        "bundle_sha256": sha256_bytes(bundle_bytes),
        "kind": bundle["kind"],
        "release": bundle["release"],
        "route": route["id"],
        "candidate_commit": bundle["candidate_commit"],
        "document": {"path": bundle["document"]["path"], "sha256": bundle["document"]["sha256"], "sha256_in_clone": doc_in_clone},
        "clone": {"commit": commit, "clean": True},
        "status": "passed" if run.failed_step is None else "failed",
        "failed_step": run.failed_step,
        "failure": run.failure,
        "steps": run.records,
        "environment": {
            "variables": sorted(env),
            "path": env.get("PATH", ""),
            # Parameters are declared public inputs of the route (the document says so): recorded by value.
            "parameters": {name: {"source": source, "value": env.get(name) if source != "unset" else None} for name, source in sorted(sources.items())},
            "shell": route["shell"],
        },
        "capabilities": {cap: capability.to_json() for cap, capability in sorted(caps.items())},
        "host": {
            "os": host_os(),
            "os_release": platform.release(),
            "arch": host_arch(),
            "python": platform.python_version(),
            "shell_version": run.shell_version,
            "gpus": gpus,
        },
        "started_at": started,
        "finished_at": finished,
        "runner": {"module": RUNNER, "stdin": "end-of-file", "errexit": route["shell"] == "sh"},
        "secret_values_recorded": 0,
    }
    fmt.validate_receipt(receipt, file="(receipt being written)")
    return receipt


def _base_record(step: dict[str, Any]) -> dict[str, Any]:
    return {
        "index": step["index"],
        "block_sha256": step["sha256"],
        "executed_sha256": None,
        "requires": list(step["requires"]),
        "status": "not-run",
        "exit_status": None,
        "elapsed_s": None,
        "stdout": None,
        "stderr": None,
        "reason": None,
    }


def receipt_path(dist: Path, bundle: dict[str, Any], bundle_sha256: str, *, file: str) -> Path:
    """Where a run's receipt goes: `<dist>/acceptance/<release>/receipts/` (runbooks: `runbook/`), never elsewhere."""
    release = bundle["release"]
    if release is not None:
        fmt.check_release_name(release, file=file)  # validate_bundle did; the name becomes a path part here
    where = release or "runbook"
    route = bundle["route"]["id"]
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,62}", route):  # pragma: no cover - validate_bundle refused it
        raise InputError("is not a route id", file=file, field="route.id", found=route)
    path = dist / OUTPUT_DIR / where / "receipts" / f"{route}-{bundle_sha256[:12]}.receipt.json"
    base = dist / OUTPUT_DIR
    base.mkdir(parents=True, exist_ok=True)
    if not within(base, dist) or (path.parent.exists() and not within(path.parent, base)):
        raise InputError("the receipt folder leaves --dist through a symbolic link", file=path.parent, expected=f"a folder under {dist}", fix=f"remove the link {path.parent}")
    return path


class RunStage(Stage):
    """`accept run`: always runs (a run is an observation), records its receipt in the register."""

    name = "accept"

    def __init__(self, ctx: Context, bundle: Path, options: RunOptions, out: Path | None = None) -> None:
        super().__init__(ctx)
        self.bundle_path = bundle
        self.options = options
        self.out = out
        self.bundle_bytes, doc = _read_json_file(bundle, "the bundle")
        self.bundle = fmt.validate_bundle(doc, file=str(bundle))
        self.receipt: dict[str, Any] | None = None
        self.receipt_path: Path | None = None

    @property
    def key(self) -> str:
        return f"accept-run:{self.bundle['route']['id']}:{sha256_bytes(self.bundle_bytes)[:16]}"

    def describe(self) -> str:
        return f"run route {self.bundle['route']['id']}"

    def inputs(self) -> dict[str, Any]:
        return {"bundle_sha256": sha256_bytes(self.bundle_bytes), "clone": str(self.options.clone.resolve())}

    def run(self) -> list[Artifact]:
        receipt = run_bundle(self.bundle_bytes, str(self.bundle_path), self.options)
        self.receipt = receipt
        data = fmt.canonical(receipt)
        path = receipt_path(self.ctx.dist, self.bundle, receipt["bundle_sha256"], file=str(self.bundle_path))
        atomic_write_bytes(path, data)
        self.receipt_path = path
        if self.out is not None:
            atomic_write_bytes(self.out, data)
        return [self.ctx.register.make("acceptance-receipt", path, stage="accept", lane=self.bundle["route"]["lane"], route=receipt["route"], bundle_sha256=receipt["bundle_sha256"], status=receipt["status"])]


# -- bundle ------------------------------------------------------------------------------------------

@dataclass
class RouteConfig:
    document: str
    routes: dict[str, dict[str, Any]]  # route id -> {"host": kind, "lane": lane or None}


def acceptance_config(rt: Any) -> RouteConfig | None:
    table = getattr(rt, "acceptance", None)
    if not table:
        return None
    return RouteConfig(document=table["document"], routes=table["routes"])


def _refuse_findings(document: str, findings: list[tuple[int, str, str, str]], lead: str) -> None:
    if not findings:
        return
    for line, what, found, expected in findings[1:]:
        sys.stderr.write(redact(f"error: {document}: line {line}: {what} (found {found!r}; expected {expected})\n"))
    line, what, found, expected = findings[0]
    more = f" (and {len(findings) - 1} more listed above)" if len(findings) > 1 else ""
    raise InputError(f"{lead}: {what}{more}", file=document, field=f"line {line}", found=found, expected=expected, fix="edit the block so it reads the value from the manifest (pinned FIELD), by digest, never by tag")


def powershell_findings(step: Any) -> list[tuple[int, str, str, str]]:
    from pipeline.infra.powershell import check_powershell51_source

    out = []
    for problem in check_powershell51_source(step.text.encode("utf-8"), name="step"):
        match = re.match(r"step:(\d+):(\d+): (.*)", problem)
        if match:
            out.append((step.line_start + int(match.group(1)) - 1, "is not Windows PowerShell 5.1: " + match.group(3), f"column {match.group(2)}", "syntax Windows PowerShell 5.1 parses and runs"))
        else:
            out.append((step.line_start, "is not Windows PowerShell 5.1: " + problem, step.info, "syntax Windows PowerShell 5.1 parses and runs"))
    return out


def static_findings(document: Document, route_id: str, *, manifest: dict[str, Any] | None, release: str | None) -> tuple[list[tuple[int, str, str, str]], list[str]]:
    route = document.route(route_id)
    findings: list[tuple[int, str, str, str]] = []
    fields: list[str] = []
    for step in route.steps:
        block, used = fmt.check_block(step.text, step.line_start, manifest=manifest, release=release)
        findings += [(f.line, f.what, f.found, f.expected) for f in block]
        fields += used
        if step.shell == "powershell":
            findings += powershell_findings(step)
    for url_field, sha_field in fmt.unpaired_urls(fields, manifest):
        line = next(s.line_start + offset for s in route.steps for offset, text in enumerate(s.text.split("\n")) if url_field in text)
        findings.append((line, "reads an asset URL without its SHA-256 (an unpinned asset)", url_field, f"the route also reads {sha_field} and checks the download against it"))
    return sorted(findings), sorted(set(fields))


def make_bundle(
    root: Path,
    *,
    release: str | None,
    route_id: str,
    document: str | None = None,
    candidate: str = "HEAD",
    document_at: str | None = None,
    lanes_dir: Path | None = None,
) -> dict[str, Any]:
    """The bundle of one route (see the module docstring).  Raises on every refusal."""
    if release is None:
        if document is None:
            raise UsageError("a runbook bundle names its document", field="--document", expected="e.g. --document docs/RELEASING.md")
        at = resolve_commit(root, document_at or "HEAD", "--document-at")
        data = git_show(root, at, document)
        if data is None:
            raise InputError("the document is not in that commit", file=document, field="--document-at", found=at, fix="commit it first")
        doc = scan(data, document)
        route = doc.route(route_id)
        findings, fields = static_findings(doc, route_id, manifest=None, release=None)
        _refuse_findings(document, findings, f"route {route_id} cannot be bundled")
        return _bundle_document("runbook", None, None, None, document, data, at, doc, route_id, fmt.DEFAULT_HOST_KIND[route.shell], None, False, fields)

    from pipeline.formats.lanes import load_lanes
    from pipeline.formats.release.names import MANIFEST, repo_path
    from pipeline.formats.release.rules import acceptance_subject
    from pipeline.formats.release.spec import load_release_toml

    lanes = load_lanes(lanes_dir)
    rt = load_release_toml(root, release, lanes)
    config = acceptance_config(rt)
    document = document or (config.document if config else DEFAULT_DOCUMENT)
    commit = resolve_commit(root, candidate, "--candidate")
    manifest_rel = repo_path(release, MANIFEST)
    held = git_show(root, commit, manifest_rel)
    if held is None:
        raise RefusedError("the candidate commit does not hold the release's manifest", file=manifest_rel, field="--candidate", found=commit)
    manifest = fmt.loads_strict(held, file=f"{commit[:12]}:{manifest_rel}")
    if manifest.get("status") != "candidate":
        raise RefusedError("routes are bundled on a candidate commit", file=manifest_rel, field="status", found=manifest.get("status"), expected="candidate", why="acceptance is evidence for the exact candidate bytes", fix=f"python -m pipeline compose promote --release {release} --to candidate, commit, and bundle on that commit")
    current_path = root / manifest_rel
    if current_path.is_file():
        current = fmt.loads_strict(current_path.read_bytes(), file=manifest_rel)
        if acceptance_subject(current) != acceptance_subject(manifest):
            raise RefusedError("the working tree's manifest binds other identities than the candidate", file=manifest_rel, field="components", fix="stage a new release for new bytes")
    at = commit if document_at is None else resolve_commit(root, document_at, "--document-at")
    if at != commit and not is_ancestor(root, commit, at):
        raise RefusedError("--document-at must be the candidate or a commit after it", field="--document-at", found=at, expected=f"a descendant of {commit}")
    data = git_show(root, at, document)
    if data is None:
        raise InputError("the document is not in the commit", file=document, field="--document-at" if document_at else "--candidate", found=at, fix="commit the document (docs/QUICKSTART.md) before the candidate")
    working = root / document
    if working.is_file() and working.read_bytes() != data:
        ui.warn(f"{document} in the working tree differs from {at[:12]}; the bundle takes the committed bytes")
    doc = scan(data, document)
    route = doc.route(route_id)
    declared = (config.routes.get(route_id) if config else None) or {}
    host = declared.get("host") or fmt.DEFAULT_HOST_KIND[route.shell]
    lane = declared.get("lane")
    if fmt.HOST_KINDS[host].os == "windows" and route.shell != "powershell" or fmt.HOST_KINDS[host].os != "windows" and route.shell != "sh":
        raise InputError("the route's shell does not run on its host kind", file=rt.path, field=f"acceptance.routes.{route_id}.host", found=host, expected="a windows-* host for powershell routes, linux-* for sh routes")
    findings, fields = static_findings(doc, route_id, manifest=manifest, release=release)
    _refuse_findings(document, findings, f"route {route_id} cannot be bundled")
    bundle = _bundle_document("release-route", release, commit, {"path": manifest_rel, "sha256": sha256_bytes(held), "status": "candidate"}, document, data, at, doc, route_id, host, lane, bool(declared), fields)
    return bundle


def _bundle_document(kind, release, candidate, manifest, document, data, at, doc: Document, route_id, host, lane, required, fields) -> dict[str, Any]:
    route = doc.route(route_id)
    return {
        "artifact_type": fmt.BUNDLE_TYPE,
        "schema_version": fmt.SCHEMA_VERSION,
        "kind": kind,
        "release": release,
        "candidate_commit": candidate,
        "manifest": manifest,
        "document": {"path": document, "sha256": sha256_bytes(data), "bytes": len(data), "commit": at},
        "route": {"id": route.id, "title": route.title, "heading_line": route.heading_line, "shell": route.shell, "host_kind": host, "lane": lane, "required": required},
        "parameters": [{"name": p.name, "kind": p.kind, "default": p.default, "required": p.required} for p in doc.parameters_of(route_id)],
        "steps": [
            {"index": s.index, "shell": s.shell, "requires": list(s.requires), "line_start": s.line_start, "line_end": s.line_end, "sha256": s.sha256, "bytes": s.bytes, "text": s.text}
            for s in route.steps
        ],
        "checks": {
            "pinned_fields": fields,
            "powershell51": "passed" if route.shell == "powershell" else "not-applicable",
            "literals": "checked against the candidate manifest" if manifest else "no hash or commit typed by hand",
        },
    }


class BundleStage(Stage):
    name = "accept"

    def __init__(self, ctx: Context, root: Path, *, release: str | None, route: str, document: str | None, candidate: str, document_at: str | None, lanes_dir: Path | None) -> None:
        super().__init__(ctx)
        self.root = root
        self.release = release
        self.route = route
        self.args = {"document": document, "candidate": candidate, "document_at": document_at, "lanes_dir": lanes_dir}
        self.bundle: dict[str, Any] | None = None
        self.path: Path | None = None

    @property
    def key(self) -> str:
        return f"accept-bundle:{self.release or 'runbook'}:{self.route}"

    def describe(self) -> str:
        return f"bundle route {self.route}"

    def preflight(self) -> None:
        self.bundle = make_bundle(self.root, release=self.release, route_id=self.route, **self.args)
        where = self.release or "runbook"
        self.path = self.ctx.dist / OUTPUT_DIR / where / "bundles" / f"{self.route}.bundle.json"

    def inputs(self) -> dict[str, Any]:
        assert self.bundle is not None
        return {"bundle_sha256": sha256_bytes(fmt.canonical(self.bundle))}

    def run(self) -> list[Artifact]:
        assert self.bundle is not None and self.path is not None
        atomic_write_bytes(self.path, fmt.canonical(self.bundle))
        return [self.ctx.register.make("acceptance-bundle", self.path, stage="accept", lane=self.bundle["route"]["lane"], route=self.route, bundle_kind=self.bundle["kind"], release=self.release)]


# -- compose ----------------------------------------------------------------------------------------

@dataclass
class Loaded:
    path: Path
    data: bytes
    receipt: dict[str, Any]
    bundle_bytes: bytes
    bundle: dict[str, Any]
    bundle_file: str = ""

    @property
    def route(self) -> str:
        return self.receipt["route"]


def _change_key(text: str) -> tuple[str, str, str]:
    match = re.fullmatch(r"(?P<route>[a-z0-9][a-z0-9-]*):(?P<step>[1-9][0-9]*|removed-[1-9][0-9]*)=(?P<why>.*)", text, flags=re.S)
    if not match or not match.group("why").strip():
        raise UsageError("--document-change reads ROUTE:STEP=WHY", field="--document-change", found=text, expected="e.g. rtx5090-linux:3=the image is now read from the manifest (STEP: the step number in the current document, or removed-N for a block removed from the candidate's)")
    return match.group("route"), match.group("step"), match.group("why").strip()


def changed_blocks(old: list[str], new: list[str]) -> list[tuple[str, str, int | None, int | None]]:
    """(key, change, old index, new index) for every block that differs, keys as --document-change names them."""
    import difflib

    out: list[tuple[str, str, int | None, int | None]] = []
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        pairs = max(i2 - i1, j2 - j1)
        for k in range(pairs):
            oi = i1 + k if i1 + k < i2 else None
            nj = j1 + k if j1 + k < j2 else None
            if nj is not None:
                out.append((str(nj + 1), "edited" if oi is not None else "added", None if oi is None else oi + 1, nj + 1))
            else:
                out.append((f"removed-{oi + 1}", "removed", oi + 1, None))
    return out


class ComposeStage(Stage):
    name = "accept"
    runs_pipes = ("compose",)  # binds the record through compose's AcceptStage (found through the road: stages are leaves)

    def __init__(self, ctx: Context, root: Path, release: str, receipts: list[Path], *, changes: list[str], bundles: list[Path], lanes_dir: Path | None) -> None:
        super().__init__(ctx)
        self.root = root
        self.release = release
        self.receipt_paths = receipts
        self.change_args = changes
        self.bundle_paths = bundles
        self.lanes_dir = lanes_dir
        self.record: dict[str, Any] | None = None
        self.record_path: Path | None = None
        self.outcome = None

    @property
    def key(self) -> str:
        return f"accept-compose:{self.release}"

    def describe(self) -> str:
        return f"compose the acceptance of {self.release}"

    def inputs(self) -> dict[str, Any]:
        assert self.record is not None
        return {"record_sha256": sha256_bytes(fmt.canonical(self.record)), "root": str(self.root.resolve())}

    def preflight(self) -> None:
        self.record = compose_record(self.root, self.release, self.receipt_paths, register=self.ctx.register, changes=self.change_args, bundles=self.bundle_paths, lanes_dir=self.lanes_dir)

    def run(self) -> list[Artifact]:
        AcceptStage = self.inner_stage_class("compose", "AcceptStage")
        assert self.record is not None
        path = self.ctx.dist / OUTPUT_DIR / self.release / "external-installation.json"
        atomic_write_bytes(path, fmt.canonical(self.record))
        self.record_path = path
        # Bound by compose's own action, so the register's release-tree entries describe the tree it leaves.
        binding = AcceptStage(Context.open(self.ctx.dist, self.lanes_dir, root=self.root), self.release, path, lanes_dir=self.lanes_dir)
        execute(binding)
        self.outcome = binding.outcome
        return [self.ctx.register.make("acceptance-record", path, stage="accept", lane=None, release=self.release, status=self.record["status"])]


def _refused(what: str, **kwargs: Any) -> RefusedError:
    return RefusedError(what, why=kwargs.pop("why", "the acceptance record is composed only from passing runs of the candidate's documented blocks"), **kwargs)


def _load_receipts(paths: list[Path], register: Register, bundles: list[Path]) -> list[Loaded]:
    by_sha: dict[str, tuple[bytes, str]] = {}
    for entry in register.query("acceptance-bundle"):
        path = register.verified_path(entry)
        by_sha[entry.sha256] = (read_bytes_bounded(path, fmt.MAX_JSON_BYTES, what="bundle"), str(path))
    for path in bundles:
        data = read_bytes_bounded(path, fmt.MAX_JSON_BYTES, what="bundle")
        by_sha[sha256_bytes(data)] = (data, str(path))
    loaded = []
    for path in paths:
        data, doc = _read_json_file(path, "the receipt")
        receipt = fmt.validate_receipt(doc, file=str(path))
        found = by_sha.get(receipt["bundle_sha256"])
        if found is None:
            raise InputError("the bundle this receipt ran is not in the register", file=path, field="bundle_sha256", found=receipt["bundle_sha256"], fix="make the bundle with 'accept bundle' into the same --dist, or pass it with --bundle FILE")
        bundle = fmt.validate_bundle(fmt.loads_strict(found[0], file=found[1]), file=found[1])
        loaded.append(Loaded(path, data, receipt, found[0], bundle, found[1]))
    return loaded


def check_receipt(item: Loaded, host_kind: str) -> None:
    """A receipt ran exactly its bundle's steps, in order, with the document's bytes, and passed."""
    r, b, f = item.receipt, item.bundle, str(item.path)
    if r["route"] != b["route"]["id"] or r["release"] != b["release"] or r["candidate_commit"] != b["candidate_commit"] or r["kind"] != b["kind"]:
        raise _refused("the receipt does not describe its bundle", file=f, field="route", found=f"{r['route']} {r['release']} {r['candidate_commit']}", expected=f"{b['route']['id']} {b['release']} {b['candidate_commit']}")
    if (r["document"]["path"], r["document"]["sha256"]) != (b["document"]["path"], b["document"]["sha256"]):
        raise _refused("the receipt names another document than its bundle", file=f, field="document.sha256", found=f"{r['document']['path']} {r['document']['sha256']}", expected=f"{b['document']['path']} {b['document']['sha256']}")
    if r["environment"]["shell"] != b["route"]["shell"]:
        raise _refused("the receipt ran another shell than its route's", file=f, field="environment.shell", found=r["environment"]["shell"], expected=b["route"]["shell"])
    if r["status"] != "passed":
        step = r["failed_step"]
        code = next((s["exit_status"] for s in r["steps"] if s["index"] == step), None)
        raise _refused(f"route {r['route']} failed at step {step} ({r['failure']})", file=f, field=f"steps[{(step or 1) - 1}].exit_status", found=code, expected=0, fix="fix the document or the host, bundle again if the document changed, and run the route again")
    steps = b["steps"]
    if [s["index"] for s in r["steps"]] != [s["index"] for s in steps]:
        raise _refused("the receipt did not run its bundle's steps in order (a step is missing, extra or reordered)", file=f, field="steps", found=[s["index"] for s in r["steps"]], expected=[s["index"] for s in steps])
    kind = fmt.HOST_KINDS[host_kind]
    for position, (ran, step) in enumerate(zip(r["steps"], steps, strict=True)):
        where = f"steps[{position}]"
        if ran["block_sha256"] != step["sha256"]:
            raise _refused("the receipt ran another block than the bundle holds", file=f, field=f"{where}.block_sha256", found=ran["block_sha256"], expected=step["sha256"])
        if ran["requires"] != step["requires"]:
            raise _refused("the receipt's host requirement differs from the document's", file=f, field=f"{where}.requires", found=ran["requires"], expected=step["requires"])
        if ran["status"] == "passed":
            if ran["executed_sha256"] != step["sha256"]:
                raise _refused("the executed bytes differ from the document's block", file=f, field=f"{where}.executed_sha256", found=ran["executed_sha256"], expected=step["sha256"])
            if ran["exit_status"] != 0 or ran["stdout"] is None or ran["stderr"] is None:
                raise _refused("a passed step has no exit status 0 and output hashes", file=f, field=where)
            continue
        if ran["status"] == "failed":
            raise _refused(f"step {step['index']} failed", file=f, field=f"{where}.status", found="failed", expected="passed")
        # not run: allowed only for a host-only step whose capability this host lacked and the host kind does not promise
        if not step["requires"]:
            raise _refused(f"step {step['index']} was skipped, but it is not a host-only step", file=f, field=f"{where}.status", found="not-run", expected="passed")
        lacked = [cap for cap in step["requires"] if not (r["capabilities"].get(cap) or {}).get("available", False)]
        if not lacked:
            raise _refused(f"step {step['index']} was not run although the host had every capability it requires", file=f, field=f"{where}.status", found="not-run", expected="passed")
        promised = [cap for cap in lacked if cap in kind.promises]
        if promised:
            raise _refused(
                f"step {step['index']} requires {', '.join(promised)}, which host kind {kind.id} promises, but it was not run",
                file=f, field=f"{where}.status", found="not-run", expected="passed",
                why="a host-only step may stay unrun only on a host kind that does not promise its capability",
                fix="run the route on a host of that kind (release.toml [acceptance.routes] names it)",
            )
    if not r["clone"]["clean"]:
        raise _refused("the route ran in a clone with local changes", file=f, field="clone.clean", found=False, expected=True)
    if (r["host"].get("os"), r["host"].get("arch")) != (kind.os, kind.arch):
        raise _refused("the route ran on another kind of host than release.toml declares", file=f, field="host.os", found=f"{r['host'].get('os')}-{r['host'].get('arch')}", expected=f"{kind.os}-{kind.arch} ({kind.id})")
    if r["secret_values_recorded"] != 0:  # pragma: no cover - the schema already refuses it
        raise _refused("records secret values", file=f, field="secret_values_recorded")


def check_receipt_parameters(item: Loaded, document: Document) -> None:
    """The receipt's parameters are exactly the route's declared ones (a default with the document's
    value, every value of its declared kind), and its environment holds nothing but the runner's own
    variables and those parameters."""
    r, f, route_id = item.receipt, str(item.path), item.route
    declared = {p.name: p for p in document.parameters_of(route_id)}
    params = r["environment"]["parameters"]
    why = "a record can only be composed from a run of the documented text, with the route's own parameters"
    if sorted(params) != sorted(declared):
        raise _refused(f"the receipt's parameters are not those route {route_id} declares", file=f, field="environment.parameters", found=sorted(params), expected=sorted(declared), why=why, fix=f"run the route again from a bundle of {document.path}")
    for name, value in sorted(params.items()):
        held = declared[name]
        if value["source"] == "default" and (held.default is None or value["value"] != held.default):
            raise _refused(f"parameter {name} ran with a default the document does not declare", file=f, field=f"environment.parameters.{name}.value", found=value["value"], expected=held.default, why=why)
        if value["source"] == "unset" and held.required:
            raise _refused(f"the required parameter {name} was not set", file=f, field=f"environment.parameters.{name}.source", found="unset", expected="set", why=why)
        if value["source"] != "unset" and (problem := parameter_value_problem(held.kind, value["value"])) is not None:
            raise _refused(f"parameter {name} ran with a value outside the grammar its declaration states ({held.kind})", file=f, field=f"environment.parameters.{name}.value", found=value["value"], expected=problem, why=why)
    path = r["environment"]["path"]
    if r["environment"]["shell"] == "sh" and not re.fullmatch(r"(?:/[^:\0]+:)?" + re.escape(DEFAULT_PATH), path):
        raise _refused(
            "the run's PATH is not the runner's own", file=f, field="environment.path", found=path,
            expected=f"{DEFAULT_PATH}, after at most the bin folder of the runner's Python", why="a folder first on PATH decides what every command of the steps runs",
            fix="run the route again with this runner (python3 -m pipeline.stages.accept run, from the virtual environment the steps should use)",
        )
    allowed = RUNNER_VARIABLES | {name for name, value in params.items() if value["source"] != "unset"}
    extra = sorted(set(r["environment"]["variables"]) - allowed)
    if extra:
        raise _refused("the run's environment held variables that are neither the runner's nor the route's parameters", file=f, field="environment.variables", found=extra, expected="only " + ", ".join(sorted(allowed)), why=why)


@dataclass
class _RouteContext:
    """What every route's check in compose_record shares: the candidate, both documents, the changes given."""

    release: str
    candidate: str
    document: str
    old_doc: Any
    new_doc: Any
    given: dict[tuple[str, str], str]
    used_changes: set[tuple[str, str]] = field(default_factory=set)
    change_out: list[dict[str, Any]] = field(default_factory=list)


def _candidate_of(root: Path, manifest_rel: str, current: dict[str, Any], loaded: list[Loaded], config: Any) -> tuple[str, bytes, dict[str, Any]]:
    """The one candidate commit every receipt ran on, its manifest bytes and document: checked against the current tree."""
    from pipeline.formats.release.rules import acceptance_subject

    candidates = sorted({item.bundle["candidate_commit"] for item in loaded})
    if len(candidates) != 1:
        raise _refused("the receipts ran on different candidates", field="candidate_commit", found=candidates, expected="one candidate commit")
    candidate = candidates[0]
    held = git_show(root, candidate, manifest_rel)
    if held is None:
        raise _refused("the candidate commit is not in this repository or does not hold the release", field="candidate_commit", found=candidate, fix="fetch it (git fetch) or run the routes on a candidate of this repository")
    cand_manifest = fmt.loads_strict(held, file=f"{candidate[:12]}:{manifest_rel}")
    if cand_manifest.get("status") != "candidate":
        raise _refused("the receipts' commit is not a candidate of this release", field="candidate_commit", found=candidate, expected=f"a commit whose {manifest_rel} has status candidate")
    if acceptance_subject(cand_manifest) != acceptance_subject(current):
        raise _refused("the candidate bound other identities than the current manifest", file=manifest_rel, field="components", found=candidate)
    for item in loaded:
        if item.receipt["clone"]["commit"] != candidate:
            raise _refused("the route ran in a clone of another commit than the candidate", file=str(item.path), field="clone.commit", found=item.receipt["clone"]["commit"], expected=candidate)
        if item.bundle["manifest"]["sha256"] != sha256_bytes(held):
            raise _refused("the bundle was made from another manifest than the candidate's", file=str(item.path), field="manifest.sha256", found=item.bundle["manifest"]["sha256"], expected=sha256_bytes(held))
        if item.bundle["document"]["path"] != config.document:
            raise _refused("the bundle is of another document than release.toml names", file=str(item.path), field="document.path", found=item.bundle["document"]["path"], expected=config.document)

    return candidate, held, cand_manifest


def _route_row(root: Path, item: Loaded, route_id: str, declared: dict[str, Any], context: _RouteContext) -> dict[str, Any]:
    """One required route's row of the record, after checking its receipt against the documents; records its
    changed blocks in the context."""
    candidate, old_doc, new_doc, document, given, release = context.candidate, context.old_doc, context.new_doc, context.document, context.given, context.release
    used_changes, change_out = context.used_changes, context.change_out
    check_receipt(item, declared["host"])
    if item.bundle["route"]["host_kind"] != declared["host"]:
        raise _refused("the bundle's host kind differs from release.toml's", file=str(item.path), field="route.host_kind", found=item.bundle["route"]["host_kind"], expected=declared["host"])
    if route_id not in new_doc.routes or route_id not in old_doc.routes:
        raise _refused("a required route is missing from the document", file=document, field=route_id)
    old_steps = [s.sha256 for s in old_doc.routes[route_id].steps]
    new_steps = [s.sha256 for s in new_doc.routes[route_id].steps]
    ran_steps = [s["sha256"] for s in item.bundle["steps"]]
    doc_commit = item.bundle["document"]["commit"]
    shown = git_show(root, doc_commit, document)
    if shown is None or sha256_bytes(shown) != item.bundle["document"]["sha256"]:
        raise _refused("the document at the bundle's commit does not have the bundle's hash", file=str(item.path), field="document.sha256", found=None if shown is None else sha256_bytes(shown), expected=item.bundle["document"]["sha256"])
    at_commit = scan(shown, document)  # hashed above, before it is parsed
    fmt.check_against_document(item.bundle, at_commit, file=item.bundle_file or str(item.path), where=f"commit {doc_commit[:12]}")
    check_receipt_parameters(item, at_commit)
    if doc_commit == candidate:
        if item.receipt["document"]["sha256_in_clone"] != item.bundle["document"]["sha256"]:
            raise _refused("the clone's document differs from the bundle's", file=str(item.path), field="document.sha256_in_clone", found=item.receipt["document"]["sha256_in_clone"], expected=item.bundle["document"]["sha256"])
    elif not is_ancestor(root, candidate, doc_commit):
        raise _refused("the bundle's document commit does not follow the candidate", file=str(item.path), field="document.commit", found=doc_commit, expected=f"{candidate} or a later commit")
    changed = changed_blocks(old_steps, new_steps)
    for key, change, old_index, new_index in changed:
        why = given.get((route_id, key))
        if why is None:
            raise _refused(
                f"block {key} of route {route_id} changed since the candidate ({change}) without a document_change",
                file=document, field=f"line {new_doc.routes[route_id].steps[new_index - 1].line_start}" if new_index else route_id,
                fix=f"say which and why: --document-change {route_id}:{key}=WHY, and run the route again from the current document (accept bundle --document-at HEAD)",
            )
        used_changes.add((route_id, key))
        old_step = old_doc.routes[route_id].steps[old_index - 1] if old_index else None
        new_step = new_doc.routes[route_id].steps[new_index - 1] if new_index else None
        change_out.append({
            "route": route_id,
            "step": key,
            "change": change,
            "old_sha256": old_step.sha256 if old_step else None,
            "old_lines": [old_step.line_start, old_step.line_end] if old_step else None,
            "new_sha256": new_step.sha256 if new_step else None,
            "new_lines": [new_step.line_start, new_step.line_end] if new_step else None,
            "why": given[(route_id, key)],
            "rerun_receipt_sha256": sha256_bytes(item.data),
        })
    if ran_steps != new_steps:
        if changed:
            raise _refused(f"route {route_id} changed since the candidate: its changed blocks need a re-run from the current document", file=str(item.path), field="bundle_sha256", fix=f"python -m pipeline accept bundle --release {release} --route {route_id} --document-at HEAD, then accept run in a clone of the candidate")
        raise _refused(f"the receipt ran other blocks than route {route_id} of the document", file=str(item.path), field="steps")
    ran = sum(1 for s in item.receipt["steps"] if s["status"] == "passed")
    not_run = [
        {"index": s["index"], "requires": s["requires"], "lines": [b["line_start"], b["line_end"]], "reason": s["reason"]}
        for s, b in zip(item.receipt["steps"], item.bundle["steps"], strict=True) if s["status"] == "not-run"
    ]
    return {
        "status": "passed",
        "title": item.bundle["route"]["title"],
        "host_kind": declared["host"],
        "lane": declared.get("lane"),
        "bundle_sha256": item.receipt["bundle_sha256"],
        "receipt_sha256": sha256_bytes(item.data),
        "document_sha256": item.bundle["document"]["sha256"],
        "steps": len(item.bundle["steps"]),
        "steps_run": ran,
        "host_only_not_run": not_run,
        "parameters": {name: p.get("value") for name, p in sorted(item.receipt["environment"]["parameters"].items()) if p.get("source") == "set"},
        "host": {"os": item.receipt["host"]["os"], "arch": item.receipt["host"]["arch"], "gpus": item.receipt["host"]["gpus"]},
        "finished_at": item.receipt["finished_at"],
    }


def compose_record(root: Path, release: str, receipt_paths: list[Path], *, register: Register, changes: list[str], bundles: list[Path], lanes_dir: Path | None) -> dict[str, Any]:
    """The acceptance record, after every check (docs/release-tree.md, Acceptance record)."""
    from pipeline.formats.lanes import load_lanes
    from pipeline.formats.release.names import MANIFEST, repo_path
    from pipeline.formats.release.rules import acceptance_subject
    from pipeline.formats.release.spec import load_release_toml

    lanes = load_lanes(lanes_dir)
    rt = load_release_toml(root, release, lanes)
    config = acceptance_config(rt)
    if config is None or not config.routes:
        raise InputError("release.toml declares no acceptance routes", file=rt.path, field="acceptance.routes", expected="[acceptance.routes.<route>] tables with host = '<host kind>'", fix="declare the routes the release requires (docs/release-tree.md)")
    manifest_rel = repo_path(release, MANIFEST)
    current_path = root / manifest_rel
    if not current_path.is_file():
        raise InputError("the release has no manifest", file=manifest_rel)
    current = fmt.loads_strict(current_path.read_bytes(), file=manifest_rel)
    if current.get("status") != "candidate":
        raise _refused("acceptance is composed for a candidate", file=manifest_rel, field="status", found=current.get("status"), expected="candidate")
    if not receipt_paths:
        raise UsageError("no receipts given", field="RECEIPT", expected="one receipt per required route: " + ", ".join(config.routes))
    loaded = _load_receipts(receipt_paths, register, bundles)
    for item in loaded:
        if item.bundle["kind"] != "release-route" or item.bundle["release"] != release:
            raise _refused("the receipt is not a run of a route of this release", file=str(item.path), field="release", found=item.bundle["release"], expected=release)
    candidate, held, cand_manifest = _candidate_of(root, manifest_rel, current, loaded, config)
    document = config.document
    at_candidate = git_show(root, candidate, document)
    if at_candidate is None:
        raise _refused("the document is not in the candidate commit", file=document, field="candidate_commit", found=candidate)
    working = root / document
    now = working.read_bytes() if working.is_file() else None
    if now is None:
        raise InputError("the route document is missing from the working tree", file=document)
    old_doc = scan(at_candidate, document)
    new_doc = scan(now, document)
    given: dict[tuple[str, str], str] = {}
    for text in changes:
        route, step, why = _change_key(text)
        if (route, step) in given:
            raise UsageError("names one block twice", field="--document-change", found=f"{route}:{step}")
        given[(route, step)] = why

    by_route: dict[str, list[Loaded]] = {}
    for item in loaded:
        by_route.setdefault(item.route, []).append(item)
    extra = sorted(set(by_route) - set(config.routes))
    if extra:
        raise _refused("receipts of routes release.toml does not require", field="acceptance.routes", found=extra, expected=sorted(config.routes), fix="declare them in release.toml [acceptance.routes] or leave them out")
    missing = sorted(set(config.routes) - set(by_route))
    if missing:
        raise _refused("required routes have no receipt", file=rt.path, field="acceptance.routes", found=sorted(by_route), expected=sorted(config.routes), fix="run " + ", ".join(missing) + " (accept bundle, accept run) and pass the receipts")
    routes_out: dict[str, Any] = {}
    context = _RouteContext(release, candidate, document, old_doc, new_doc, given)
    blocks_total = blocks_run = 0
    for route_id, declared in sorted(config.routes.items()):
        items = by_route[route_id]
        if len(items) != 1:
            raise _refused("a route has more than one receipt", field=route_id, found=[str(i.path) for i in items], expected="one receipt per route (the run that is accepted)")
        row = _route_row(root, items[0], route_id, declared, context)
        blocks_total += row["steps"]
        blocks_run += row["steps_run"]
        routes_out[route_id] = row
    unused = sorted(set(given) - context.used_changes)
    if unused:
        raise UsageError("--document-change names a block that did not change", field="--document-change", found=[f"{r}:{s}" for r, s in unused], expected="only changed blocks of required routes")
    limitations = []
    for route_id, row in sorted(routes_out.items()):
        if row["host_only_not_run"]:
            caps = sorted({c for s in row["host_only_not_run"] for c in s["requires"]})
            limitations.append(f"route {route_id}: {len(row['host_only_not_run'])} of {row['steps']} blocks are host-only ({', '.join(caps)}) and were not run on host kind {row['host_kind']}")
    as_of = max(row["finished_at"] for row in routes_out.values())[:10]
    return {
        "artifact_type": fmt.RECORD_TYPE,
        "schema_version": 1,
        "release": release,
        "status": "passed",
        "as_of": as_of,
        "candidate_commit": candidate,
        "subject": acceptance_subject(cand_manifest),
        "routes": {route_id: row["status"] for route_id, row in sorted(routes_out.items())},
        "documented_routes": {
            "document": {"path": document, "sha256_at_candidate": sha256_bytes(at_candidate), "sha256_current": sha256_bytes(now)},
            "blocks_total": blocks_total,
            "blocks_run": blocks_run,
            "routes": routes_out,
            "document_change": context.change_out,
        },
        "limitations": limitations,
        "secret_values_recorded": 0,
    }


# -- CLI ---------------------------------------------------------------------------------------------

def _parameters(values: list[tuple[str, str]], *, file: Path | None = None) -> dict[str, str]:
    """NAME=VALUE pairs of --set (`file` None) or of a --parameters file ((field, text) per line): names by their
    syntax only (whether the route declares them is checked against its bundle), values without NUL."""
    flag = "--set" if file is None else "--parameters"
    out: dict[str, str] = {}
    for where, value in values:
        name, sep, content = value.partition("=")
        if not sep or not PARAMETER_NAME_RE.fullmatch(name):
            raise UsageError(f"{flag} takes NAME=VALUE", file=file, field=where, found=name or value, expected="e.g. --set OMP_NINFER_MIRROR=https://github.com/=http://127.0.0.1:8000/github.com/ (NAME: capitals, digits and '_')")
        if "\0" in content:
            raise UsageError(
                f"the value of {name} holds a NUL character", file=file, field=where, found=content.replace("\0", "\\0"), expected="a value without NUL (no environment variable can hold one)",
                fix=f"remove the NUL from the value of {name}",
            )
        if name in out:
            raise UsageError(f"{flag} names one variable twice", file=file, field=where, found=name)
        out[name] = content
    return out


def _parameters_file(path: Path) -> dict[str, str]:
    """The NAME=VALUE lines of a --parameters file (values may hold spaces; '#' starts a comment line): read bounded,
    UTF-8, LF-separated (a value may not be cut at a character str.splitlines would take for a line end)."""
    if not path.is_file():
        raise InputError("the parameters file does not exist", file=path)
    data = read_bytes_bounded(path, MAX_PARAMETERS_FILE_BYTES, what="parameters file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise InputError(f"is not UTF-8 ({exc.reason})", file=path, field=f"line {line}", fix="save the parameters file as UTF-8") from None
    lines = []
    for number, line in enumerate(text.split("\n"), start=1):
        if line.strip() and not line.lstrip().startswith("#"):
            lines.append((f"line {number}", line))
    return _parameters(lines, file=path)


def run_accept_run(args: argparse.Namespace) -> int:
    for cap in args.grant:
        if cap not in CAPABILITIES:
            raise UsageError("--grant names an unknown capability", field="--grant", found=cap, expected=" or ".join(GRANTABLE))
    offered = _parameters_file(args.parameters) if args.parameters is not None else {}
    options = RunOptions(clone=Path(args.clone or "."), parameters=_parameters([("--set", value) for value in args.set]), offered=offered, grants=list(args.grant), denies=list(args.deny), step_timeout=args.step_timeout, work=args.work, keep_work=args.keep_work)
    ctx = Context.open(args.dist)
    stage = RunStage(ctx, Path(args.bundle), options, out=args.out)
    execute(stage, force=True)
    receipt = stage.receipt
    assert receipt is not None and stage.receipt_path is not None
    sys.stdout.write(json.dumps({"receipt": str(stage.receipt_path), "route": receipt["route"], "status": receipt["status"], "failed_step": receipt["failed_step"]}, sort_keys=True) + "\n")
    if receipt["status"] != "passed":
        ui.result(f"FAIL: route {receipt['route']}: step {receipt['failed_step']}: {receipt['failure']}", sys.stderr)
        return 1
    ui.result(f"OK: route {receipt['route']}: {sum(1 for s in receipt['steps'] if s['status'] == 'passed')} of {len(receipt['steps'])} steps passed, receipt {stage.receipt_path}", sys.stderr)
    return 0


def run_accept_pinned(args: argparse.Namespace) -> int:
    sys.stdout.write(pinned_value(args.field, release=args.release, root=Path(args.root or "."), mirrored=args.mirrored) + "\n")
    return 0


def run_accept_routes(args: argparse.Namespace) -> int:
    path = Path(args.document)
    if not path.is_file():
        raise InputError("does not exist", file=path)
    doc = scan(path.read_bytes(), args.document)
    for route in doc.routes.values():
        sys.stdout.write(f"{route.id}\t{route.shell}\t{len(route.steps)} steps\t{route.title}\n")
        for step in route.steps:
            marker = f"\trequires {','.join(step.requires)}" if step.requires else ""
            sys.stdout.write(f"  {step.index}\tlines {step.line_start}-{step.line_end}\t{step.sha256[:12]}{marker}\n")
    return 0


def _root(args: argparse.Namespace) -> Path:
    if args.root is not None:
        return Path(args.root)
    from pipeline.formats.lanes import REPO_ROOT

    return REPO_ROOT


def run_accept_bundle(args: argparse.Namespace) -> int:
    if args.release is None and args.document is None:
        raise UsageError("name the release (--release vX.Y.Z) or, for a runbook, the document (--document docs/RELEASING.md)", field="--release")
    routes = [args.route]
    if args.required:
        if args.release is None:
            raise UsageError("--required needs --release", field="--required")
        from pipeline.formats.lanes import load_lanes
        from pipeline.formats.release.spec import load_release_toml

        config = acceptance_config(load_release_toml(_root(args), args.release, load_lanes(args.lanes_dir)))
        if config is None:
            raise InputError("release.toml declares no acceptance routes", field="acceptance.routes", fix="add [acceptance.routes.<route>] tables (docs/release-tree.md)")
        routes = sorted(config.routes)
    ctx = Context.open(args.dist)
    made = []
    for route in routes:
        stage = BundleStage(ctx, _root(args), release=args.release, route=route, document=args.document, candidate=args.candidate, document_at=args.document_at, lanes_dir=args.lanes_dir)
        execute(stage)
        assert stage.bundle is not None and stage.path is not None
        made.append({"bundle": str(stage.path.resolve()), "route": route, "steps": len(stage.bundle["steps"]), "candidate_commit": stage.bundle["candidate_commit"]})
    sys.stdout.write(json.dumps(made if args.required else made[0], sort_keys=True) + "\n")
    return 0


def run_accept_compose(args: argparse.Namespace) -> int:
    ctx = Context.open(args.dist)
    stage = ComposeStage(ctx, _root(args), args.release, [Path(p) for p in args.receipts], changes=list(args.document_change), bundles=[Path(p) for p in args.bundle], lanes_dir=args.lanes_dir)
    result = execute(stage, force=True)
    assert stage.record is not None
    record = stage.record
    ui.step("accept", f"{args.release}: {len(record['routes'])} routes passed, {record['documented_routes']['blocks_run']} of {record['documented_routes']['blocks_total']} blocks run on candidate {record['candidate_commit'][:12]}")
    sys.stdout.write(json.dumps({"record": str(stage.record_path), "release": args.release, "routes": record["routes"], "skipped": result.skipped}, sort_keys=True) + "\n")
    return 0


def register_cli(sub) -> None:
    from pipeline.cli import add_common

    parser = sub.add_parser(
        "accept",
        help="documented-route acceptance: bundle a route, run it, compose the acceptance record",
        description="Run the documented routes (docs/QUICKSTART.md) exactly as written on the candidate and bind the result.",
    )
    actions = parser.add_subparsers(dest="accept_action", metavar="{bundle,run,compose,pinned,routes}", parser_class=type(parser))

    bundle = actions.add_parser("bundle", help="one route of the release's route document, checked, with its exact blocks")
    bundle.add_argument("--release", help="product release, e.g. v0.13.1 (omit for a runbook with --document)")
    which = bundle.add_mutually_exclusive_group(required=True)
    which.add_argument("--route", help="route id (python -m pipeline accept routes DOCUMENT lists them)")
    which.add_argument("--required", action="store_true", help="every route release.toml [acceptance.routes] requires")
    bundle.add_argument("--document", help="route document (default: release.toml [acceptance] document, else docs/QUICKSTART.md)")
    bundle.add_argument("--candidate", default="HEAD", help="the candidate commit (default HEAD; its manifest must have status candidate)")
    bundle.add_argument("--document-at", default=None, help="read the document at this commit (default: the candidate); a later commit re-runs changed blocks")
    bundle.add_argument("--root", type=Path, default=None, help="repository root (default: this checkout)")
    add_common(bundle)
    bundle.set_defaults(func=run_accept_bundle)

    run = actions.add_parser("run", help="run a bundle in one shell session from a clean clone and write its receipt")
    run.add_argument("bundle", help="the bundle file (accept bundle wrote it)")
    run.add_argument("--clone", default=None, help="the clone to run in (default: the current folder's repository)")
    run.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="a parameter the route declares, with a value of its declared kind (repeatable); any other name is refused")
    run.add_argument("--grant", action="append", default=[], metavar="CAP", help="grant a capability the runner cannot probe: network, github (repeatable)")
    run.add_argument("--deny", action="append", default=[], metavar="CAP", help="treat a capability as absent without probing it (recorded as denied; repeatable)")
    run.add_argument("--parameters", type=Path, default=None, metavar="FILE", help="NAME=VALUE lines (values may hold spaces); the route takes the names it declares, --set wins")
    run.add_argument("--step-timeout", type=float, default=DEFAULT_STEP_TIMEOUT, help=f"seconds one step may run (default {DEFAULT_STEP_TIMEOUT:g})")
    run.add_argument("--out", type=Path, default=None, help="also write the receipt here")
    run.add_argument("--work", type=Path, default=None, help="work folder (default: a fresh temporary folder; kept when a step fails)")
    run.add_argument("--keep-work", action="store_true", help="keep the work folder (step outputs) after a passing run")
    add_common(run)
    run.set_defaults(func=run_accept_run)

    compose = actions.add_parser("compose", help="check the receipts and bind the acceptance record (as compose accept does)")
    compose.add_argument("--release", required=True, help="product release, e.g. v0.13.1")
    compose.add_argument("receipts", nargs="*", help="run receipts, one per required route")
    compose.add_argument("--document-change", action="append", default=[], metavar="ROUTE:STEP=WHY", help="a block changed since the candidate: which and why (repeatable)")
    compose.add_argument("--bundle", action="append", default=[], metavar="FILE", help="a bundle not in the register (repeatable)")
    compose.add_argument("--root", type=Path, default=None, help="repository root (default: this checkout)")
    add_common(compose)
    compose.set_defaults(func=run_accept_compose)

    pinned = actions.add_parser("pinned", help="print one value of the release manifest (for route blocks)")
    pinned.add_argument("field", help="field path, e.g. components.ninfer.oci_reference or 'components.ninfer_variants[rtx4090-windows-native].package_url'")
    pinned.add_argument("--release", default=None, help="product release (default: $OMP_NINFER_RELEASE)")
    pinned.add_argument("--mirrored", action="store_true", help="rewrite a URL through $OMP_NINFER_MIRROR (PREFIX=MIRROR ...)")
    pinned.add_argument("--root", default=None, help="the clone's top folder (default: the current folder)")
    add_common(pinned, dist=False)
    pinned.set_defaults(func=run_accept_pinned)

    routes = actions.add_parser("routes", help="list the routes and steps of a route document")
    routes.add_argument("document", help="e.g. docs/QUICKSTART.md")
    add_common(routes, dist=False)
    routes.set_defaults(func=run_accept_routes)

    def no_action(args: argparse.Namespace) -> int:
        parser.print_help()
        return int(UsageError.exit_code)

    parser.set_defaults(func=no_action)


def main(argv: list[str] | None = None) -> int:
    """`python3 -m pipeline.stages.accept ...`: the same commands with the standard library only (run, pinned, routes)."""

    class _Parser(argparse.ArgumentParser):
        def error(self, message: str) -> None:
            raise UsageError(message, fix=f"run '{self.prog} --help'")

    top = _Parser(prog="python3 -m pipeline.stages.accept")
    sub = top.add_subparsers(dest="command", parser_class=_Parser)
    register_cli(sub)
    try:
        args = top.parse_args(["accept", *(sys.argv[1:] if argv is None else argv)])
        if getattr(args, "quiet", False):
            ui.set_quiet(True)
        return int(args.func(args) or 0)
    except PipelineError as error:
        sys.stderr.write(f"error[{error.label}]: {error.render()}\n")
        return int(error.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted\n")
        return 130


if __name__ == "__main__":
    sys.exit(main())


STAGE = RunStage


def release_plan(ctx, lanes, options) -> list:
    from pipeline.stage import Skip

    raise Skip("documented routes run on their hosts: 'python -m pipeline accept bundle|run|compose' (docs/RELEASING.md)")
