"""The shell sessions that run a route's steps in order: one bash session (a step's status waited for with
poll/epoll) or one Windows PowerShell 5.1 session, each step's output streamed to files and hashed in chunks."""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.errors import EnvironmentProblem, InputError, RefusedError, UsageError, redact
from pipeline.formats import acceptance as fmt
from pipeline.formats.routes import CAPABILITIES, GRANTABLE
from pipeline.stages.accept.document import OUTPUT_TAIL_BYTES, SHOWN_TAIL_BYTES, host_arch, host_os, run_git
from pipeline.stages.accept.environment import RunOptions, find_program, probe
from pipeline.util import ui
from pipeline.util.hashing import sha256_bytes


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
        bash = find_program("bash", env)
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
    exe = find_program("powershell.exe", env) or find_program("powershell", env)
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


def check_host_and_options(route: dict[str, Any], options: RunOptions, bundle_file: str) -> None:
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


def clean_clone(options: RunOptions, bundle: dict[str, Any]) -> tuple[Path, str]:
    """The clone's top folder and HEAD: clean, and at the candidate commit for a release route."""
    top = run_git(options.clone, "rev-parse", "--show-toplevel")
    if top.returncode != 0:
        raise InputError("is not inside a git clone", file=options.clone, fix="run from a clone of the product repository at the candidate commit")
    clone = Path(top.stdout.decode().strip())
    commit = run_git(clone, "rev-parse", "HEAD", check=True).stdout.decode().strip()
    dirty = run_git(clone, "status", "--porcelain", "--untracked-files=normal", check=True).stdout.decode().strip()
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
    record = step_record(step)
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


def run_bash_route(steps: list[dict[str, Any]], caps: dict[str, Any], env: dict[str, str], clone: Path, work: Path, step_timeout: float) -> _StepRun:
    """An sh route: every step in one bash session, in order, stopping at the first failure."""
    session = _BashSession(env, clone, work)
    version = probe([find_program("bash", env) or "bash", "--version"], env, clone)[1]
    run = _StepRun([], None, None, version.decode("utf-8", "replace").splitlines()[0] if version else "")
    try:
        for step in steps:
            if run.failed_step is not None:
                run.records.append({**step_record(step), "reason": f"not run: step {run.failed_step} failed"})
                continue
            host_only = _host_only_reason(step, caps)
            if host_only:
                ui.info(f"SKIP: step {step['index']} (lines {step['line_start']}-{step['line_end']}): {host_only}")
                run.records.append({**step_record(step), "reason": host_only})
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


def run_powershell_route(steps: list[dict[str, Any]], caps: dict[str, Any], env: dict[str, str], clone: Path, work: Path, step_timeout: float, bundle_file: str) -> _StepRun:
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
        record = step_record(step)
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


def step_record(step: dict[str, Any]) -> dict[str, Any]:
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
