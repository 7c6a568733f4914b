"""The four JavaScript actions release.yml and ci.yml pin, as composite stand-ins for an act rehearsal.

GitHub's runner downloads actions/checkout, actions/setup-python, actions/upload-artifact and
actions/download-artifact at the commits the workflows pin; none can be fetched here, so the rehearsal
(pipeline/dev/rehearse.py) hands act each of these folders through `--local-repository OWNER/NAME@SHA=DIR`
with this script copied beside its action.yml.  Each keeps the contract the workflows rely on, and fails
where the real action fails:

- checkout: the workspace holds exactly the event's commit (GITHUB_SHA, fetched by GITHUB_REF from the
  rehearsal's origin, the clone `standin.json` names), shallow unless `fetch-depth: 0`; the workspace is
  emptied first (a fresh runner has nothing there); no credential is written anywhere, and a workflow that
  asks to persist credentials is refused (the stand-in has none, so it could not keep that promise);
- setup-python: the requested X.Y interpreter from this host, in a fresh virtual environment first on
  PATH (`python`, `pip`), or the real action's "was not found" failure;
- upload-artifact: the files the `path` lines match (glob `*`, `**`, `?`, `!` exclusions; hidden files
  left out unless `include-hidden-files: true`), zipped relative to the search paths' least common
  ancestor, through the Actions results service act serves (Twirp JSON at ACTIONS_RESULTS_URL, the run
  and job from the runtime token's `Actions.Results:RUN:JOB` scope); `if-no-files-found` error / warn /
  ignore as the real action; a second upload of one name on the run is the service's 409 Conflict unless
  `overwrite: true`;
- download-artifact: one artifact by name into `path` (every member kept inside it), or the real
  action's "Artifact not found for name" failure; the cross-run inputs (github-token, run-id, repository)
  and `pattern` / `merge-multiple` are refused rather than half-emulated.

Standard library only: it runs on whatever python3 the job has, before and after setup-python.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
import zipfile
from pathlib import Path, PurePosixPath

SERVICE = "twirp/github.actions.results.api.v1.ArtifactService"
# upload-artifact refuses these in a name (@actions/artifact: path-and-artifact-name-validation.ts).
INVALID_NAME_CHARACTERS = ('"', ":", "<", ">", "|", "*", "?", "\r", "\n", "\\", "/")
MAX_ARTIFACT_BYTES = 4 * 1024**3  # far above what a release moves; a bound, not a quota
MAX_UNPACKED_BYTES = 16 * 1024**3
TIMEOUT_SECONDS = 300


class ActionFailed(Exception):
    """The action fails the step, with the message the real action would print."""


def _input(name: str, default: str = "") -> str:
    # The composite action hands each input over as INPUT_<NAME> (its `env:`), as a JavaScript action reads them.
    return os.environ.get("INPUT_" + name.upper().replace("-", "_"), default).strip()


def _boolean(name: str, default: str) -> bool:
    value = _input(name, default) or default
    if value not in ("true", "false"):
        raise ActionFailed(f"Input does not meet YAML 1.2 \"Core Schema\" specification: {name}\n"
                           "Support boolean input list: `true | True | TRUE | false | False | FALSE`")
    return value == "true"


def _workspace() -> Path:
    return Path(os.environ["GITHUB_WORKSPACE"])


def _append(variable: str, line: str) -> None:
    with open(os.environ[variable], "a", encoding="utf-8") as handle:
        handle.write(line + "\n")


def _git(*args: str, cwd: Path) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT_SECONDS)
    if done.returncode != 0:
        raise ActionFailed(f"git {' '.join(args)} failed (exit {done.returncode}): {done.stderr.strip()}")
    return done.stdout.strip()


# --- checkout ---------------------------------------------------------------------------------------------

def _origin() -> str:
    config = Path(os.environ["GITHUB_ACTION_PATH"]) / "standin.json"
    origin = json.loads(config.read_text(encoding="utf-8"))["origin"]
    if not Path(origin).is_dir():
        raise ActionFailed(f"the rehearsal's origin {origin} is not a repository folder ({config})")
    return Path(origin).resolve().as_uri()


def _fetch_refspec(ref: str) -> tuple[str, str]:
    """GITHUB_REF -> (refspec, the local ref checked out), as actions/checkout's ref-helper.ts maps them."""
    if ref.startswith("refs/tags/"):
        return f"+{ref}:{ref}", ref
    if ref.startswith("refs/heads/"):
        local = "refs/remotes/origin/" + ref[len("refs/heads/"):]
        return f"+{ref}:{local}", local
    if ref.startswith("refs/pull/"):
        local = "refs/remotes/pull/" + ref[len("refs/pull/"):]
        return f"+{ref}:{local}", local
    raise ActionFailed(f"the event's ref {ref!r} is not a tag, branch or pull request ref")


def checkout() -> None:
    if _boolean("persist-credentials", "true"):
        raise ActionFailed("persist-credentials is true: the rehearsal's checkout holds no credential to persist, "
                           "and release.yml promises `persist-credentials: false` on every checkout; set it there")
    depth = _input("fetch-depth", "1") or "1"
    if not depth.isdigit():
        raise ActionFailed(f"fetch-depth must be a whole number, not {depth!r}")
    sha, ref = os.environ["GITHUB_SHA"], os.environ["GITHUB_REF"]
    workspace = _workspace()
    workspace.mkdir(parents=True, exist_ok=True)
    for entry in workspace.iterdir():  # a fresh runner's workspace is empty; act reuses its folders
        shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    _git("init", "--quiet", cwd=workspace)
    _git("remote", "add", "origin", _origin(), cwd=workspace)
    refspec, local = _fetch_refspec(ref)
    if depth == "0":
        _git("fetch", "--quiet", "--prune", "--tags", "origin", "+refs/heads/*:refs/remotes/origin/*", refspec, cwd=workspace)
    else:
        _git("fetch", "--quiet", "--no-tags", "--prune", f"--depth={depth}", "origin", refspec, cwd=workspace)
    _git("checkout", "--quiet", "--force", "--detach", local, cwd=workspace)
    head = _git("rev-parse", "HEAD", cwd=workspace)
    if head != sha:
        raise ActionFailed(f"{ref} is at {head} in the origin, not at the event's commit {sha}: the ref moved after the event")
    config = (workspace / ".git" / "config").read_text(encoding="utf-8")
    if re.search(r"extraheader|credential|://[^/\s]*@", config, re.IGNORECASE):
        raise ActionFailed("the checkout's git config holds a credential")
    print(f"checked out {ref} at {head} (depth {depth}), no credentials persisted")


# --- setup-python -----------------------------------------------------------------------------------------

def setup_python() -> None:
    wanted = _input("python-version")
    if not re.fullmatch(r"3\.\d+", wanted):
        raise ActionFailed(f"the stand-in takes a python-version of the form 3.X, not {wanted!r}")
    interpreter = shutil.which(f"python{wanted}")
    if interpreter is None:
        raise ActionFailed(f"The version '{wanted}' with architecture 'x64' was not found for this operating system.")
    home = Path(os.environ["RUNNER_TEMP"]) / "setup-python" / wanted
    if home.exists():
        shutil.rmtree(home)
    subprocess.run([interpreter, "-m", "venv", str(home)], check=True, timeout=TIMEOUT_SECONDS)
    version = subprocess.run([str(home / "bin" / "python"), "-c", "import platform; print(platform.python_version())"],
                             check=True, capture_output=True, text=True, timeout=60).stdout.strip()
    if not version.startswith(wanted + "."):
        raise ActionFailed(f"python{wanted} on this host is {version}")
    _append("GITHUB_PATH", str(home / "bin"))
    _append("GITHUB_ENV", f"pythonLocation={home}")
    _append("GITHUB_OUTPUT", f"python-version={version}")
    _append("GITHUB_OUTPUT", f"python-path={home / 'bin' / 'python'}")
    print(f"Successfully set up CPython ({version})")


# --- the results service ----------------------------------------------------------------------------------

def _backend_ids() -> tuple[str, str]:
    token = os.environ["ACTIONS_RUNTIME_TOKEN"]
    payload = token.split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    for scope in str(claims.get("scp", "")).split():
        parts = scope.split(":")
        if len(parts) == 3 and parts[0] == "Actions.Results":
            return parts[1], parts[2]
    raise ActionFailed("Failed to get backend IDs: the runtime token has no Actions.Results scope")


def _twirp(method: str, body: dict) -> dict:
    url = os.environ["ACTIONS_RESULTS_URL"].rstrip("/") + f"/{SERVICE}/{method}"
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers={
        "Content-Type": "application/json", "Authorization": "Bearer " + os.environ["ACTIONS_RUNTIME_TOKEN"]})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as answer:
            return json.loads(answer.read(1024 * 1024) or b"{}")
    except urllib.error.HTTPError as problem:
        raise ActionFailed(f"Failed to {method}: Received non-retryable error: Failed request: ({problem.code}) {problem.reason}") from None


def _listed(name: str) -> list[dict]:
    run, job = _backend_ids()
    answer = _twirp("ListArtifacts", {"workflowRunBackendId": run, "workflowJobRunBackendId": job, "nameFilter": name})
    return [artifact for artifact in answer.get("artifacts", []) if artifact.get("name") == name]


# --- upload-artifact --------------------------------------------------------------------------------------

def _search_root(pattern: str) -> Path:
    """The part of a pattern before its first glob segment (@actions/glob's search path)."""
    kept: list[str] = []
    for part in PurePosixPath(pattern).parts:
        if any(character in part for character in "*?["):
            break
        kept.append(part)
    return _workspace().joinpath(*kept) if kept else _workspace()


def _glob_regex(pattern: str) -> str:
    """@actions/glob's segments: `**` any depth (zero included), `*` and `?` within one segment."""
    out, index = [], 0
    while index < len(pattern):
        if pattern.startswith("**/", index):
            out.append("(?:.*/)?")
            index += 3
        elif pattern.startswith("**", index):
            out.append(".*")
            index += 2
        elif pattern[index] == "*":
            out.append("[^/]*")
            index += 1
        elif pattern[index] == "?":
            out.append("[^/]")
            index += 1
        else:
            out.append(re.escape(pattern[index]))
            index += 1
    return "".join(out)


def _matches(pattern: str) -> list[Path]:
    root = _search_root(pattern)
    if root == _workspace() / pattern.rstrip("/"):  # no glob: a file, or every file under a folder
        if root.is_file():
            return [root]
        return sorted(path for path in root.rglob("*") if path.is_file()) if root.is_dir() else []
    regex = re.compile(re.escape(str(_workspace()) + "/") + _glob_regex(pattern.lstrip("./")) + r"\Z")
    return sorted(path for path in root.rglob("*") if path.is_file() and regex.match(str(path)))


def _is_hidden(path: Path, root: Path) -> bool:
    return any(part.startswith(".") for part in path.relative_to(root).parts)


def _upload_files(lines: list[str], include_hidden: bool) -> tuple[Path, list[Path]]:
    includes = [line for line in lines if not line.startswith("!")]
    excludes = [line[1:] for line in lines if line.startswith("!")]
    found: set[Path] = set()
    for pattern in includes:
        found.update(_matches(pattern))
    for pattern in excludes:
        found.difference_update(_matches(pattern))
    roots = [_search_root(pattern) for pattern in includes]
    if len(roots) == 1 and roots[0].is_file():
        root = roots[0].parent
    else:
        root = Path(os.path.commonpath([str(path) for path in roots]))
    files = sorted(path for path in found if include_hidden or not _is_hidden(path, root))
    return root, files


def _valid_name(name: str) -> None:
    bad = [character for character in INVALID_NAME_CHARACTERS if character in name]
    if not name or bad:
        raise ActionFailed(f"The artifact name is not valid: {name!r}. Contains the following character: {bad}")


def upload_artifact() -> None:
    name = _input("name", "artifact") or "artifact"
    _valid_name(name)
    lines = [line.strip() for line in _input("path").splitlines() if line.strip()]
    if not lines:
        raise ActionFailed("Input required and not supplied: path")
    when_none = _input("if-no-files-found", "warn") or "warn"
    if when_none not in ("error", "warn", "ignore"):
        raise ActionFailed(f"Unrecognized if-no-files-found input. Provided: {when_none}. Available options: warn,error,ignore")
    root, files = _upload_files(lines, _boolean("include-hidden-files", "false"))
    if not files:
        message = f"No files were found with the provided path: {chr(10).join(lines)}. No artifacts will be uploaded."
        if when_none == "error":
            raise ActionFailed(message)
        print(("::warning::" if when_none == "warn" else "") + message)
        return
    run, job = _backend_ids()
    if _listed(name):
        if not _boolean("overwrite", "false"):
            raise ActionFailed("Failed to CreateArtifact: Received non-retryable error: Failed request: (409) Conflict: "
                               "an artifact with this name already exists on the workflow run")
        _twirp("DeleteArtifact", {"workflowRunBackendId": run, "workflowJobRunBackendId": job, "name": name})
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in files:
            archive.write(path, path.relative_to(root).as_posix())
    data = buffer.getvalue()
    if len(data) > MAX_ARTIFACT_BYTES:
        raise ActionFailed(f"artifact {name} is {len(data)} bytes, over the stand-in's bound of {MAX_ARTIFACT_BYTES}")
    created = _twirp("CreateArtifact", {"workflowRunBackendId": run, "workflowJobRunBackendId": job, "name": name, "version": 4})
    signed = created["signedUploadUrl"]
    for suffix, body in (("&comp=block", data), ("&comp=blocklist", b"")):
        request = urllib.request.Request(signed + suffix, data=body, method="PUT")
        urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS).close()
    digest = hashlib.sha256(data).hexdigest()
    final = _twirp("FinalizeArtifact", {"workflowRunBackendId": run, "workflowJobRunBackendId": job, "name": name,
                                        "size": str(len(data)), "hash": "sha256:" + digest})
    _append("GITHUB_OUTPUT", f"artifact-id={final.get('artifactId', '')}")
    _append("GITHUB_OUTPUT", f"artifact-digest={digest}")
    print(f"Artifact {name} has been successfully uploaded! Final size is {len(data)} bytes ({len(files)} files). Artifact digest: sha256:{digest}")


# --- download-artifact ------------------------------------------------------------------------------------

def download_artifact() -> None:
    for unsupported in ("pattern", "merge-multiple", "github-token", "repository", "run-id", "artifact-ids"):
        if _input(unsupported):
            raise ActionFailed(f"the stand-in does not emulate the input {unsupported!r}; name one artifact of this run")
    name = _input("name")
    if not name:
        raise ActionFailed("the stand-in downloads one artifact by name; set `name:`")
    target = _workspace() / (_input("path") or ".")
    if not _listed(name):
        raise ActionFailed(f"Unable to download artifact(s): Artifact not found for name: {name}\n"
                           "        Please ensure that your artifact is not expired and the artifact was uploaded using a "
                           "compatible version of toolkit/upload-artifact.")
    run, job = _backend_ids()
    signed = _twirp("GetSignedArtifactURL", {"workflowRunBackendId": run, "workflowJobRunBackendId": job, "name": name})
    with urllib.request.urlopen(signed["signedUrl"], timeout=TIMEOUT_SECONDS) as answer:
        data = answer.read(MAX_ARTIFACT_BYTES + 1)
    if len(data) > MAX_ARTIFACT_BYTES:
        raise ActionFailed(f"artifact {name} is over the stand-in's bound of {MAX_ARTIFACT_BYTES} bytes")
    target.mkdir(parents=True, exist_ok=True)
    root = target.resolve()
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        unpacked = sum(member.file_size for member in archive.infolist())
        if unpacked > MAX_UNPACKED_BYTES:
            raise ActionFailed(f"artifact {name} unpacks to {unpacked} bytes, over the stand-in's bound of {MAX_UNPACKED_BYTES}")
        for member in archive.infolist():
            destination = (root / member.filename).resolve()
            if destination != root and root not in destination.parents:
                raise ActionFailed(f"artifact {name}: the member {member.filename!r} would land outside {target}")
            if member.is_dir():
                destination.mkdir(parents=True, exist_ok=True)
                continue
            destination.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(member) as source, open(destination, "wb") as sink:
                shutil.copyfileobj(source, sink)
    _append("GITHUB_OUTPUT", f"download-path={target}")
    print(f"Artifact {name} was downloaded to {target} ({len(data)} bytes)")


ACTIONS = {"checkout": checkout, "setup-python": setup_python, "upload-artifact": upload_artifact,
           "download-artifact": download_artifact}


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in ACTIONS:
        print(f"usage: standin_actions.py {{{','.join(ACTIONS)}}}", file=sys.stderr)
        return 2
    try:
        ACTIONS[argv[0]]()
    except ActionFailed as failure:
        print(f"::error::{failure}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
