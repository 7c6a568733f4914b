"""The route document at a commit (read from a clone's git, bounded and hashed, checked against a bundle), the
host the runner is on, and the constants every job of `accept` shares.  Standard library only (the runner's rule)."""

from __future__ import annotations

import datetime
import platform
import subprocess
from pathlib import Path
from typing import Any

from pipeline.errors import EnvironmentProblem, InputError, IntegrityError, RefusedError, UsageError
from pipeline.formats import acceptance as fmt
from pipeline.formats.routes import MAX_DOCUMENT_BYTES, RUNNER_ENVIRONMENT, scan
from pipeline.infra.git import GIT
from pipeline.util.fs import read_bytes_bounded
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

def run_git(root: Path, *args: str, check: bool = False) -> subprocess.CompletedProcess:
    try:
        result = subprocess.run([*GIT, "-C", str(root), *args], capture_output=True, check=False)
    except FileNotFoundError:
        raise EnvironmentProblem("git is not installed", why="acceptance binds the clone's commit", fix="install git") from None
    if check and result.returncode != 0:
        raise InputError(f"git {' '.join(args)} failed: {result.stderr.decode('utf-8', 'replace').strip()}", file=root)
    return result


def git_show(root: Path, rev: str, path: str) -> bytes | None:
    result = run_git(root, "show", f"{rev}:./{path}")
    return result.stdout if result.returncode == 0 else None


def resolve_commit(root: Path, rev: str, flag: str) -> str:
    result = run_git(root, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    commit = result.stdout.decode().strip()
    if result.returncode != 0 or not is_commit_hex(commit):
        raise UsageError(f"{flag} names no commit of this repository", field=flag, found=rev, expected="a commit (HEAD or 40 hex)")
    return commit


def is_ancestor(root: Path, older: str, newer: str) -> bool:
    return run_git(root, "merge-base", "--is-ancestor", older, newer).returncode == 0


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
    if run_git(root, "cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
        raise InputError("the clone does not have the document's commit", file=file, field="document.commit", found=commit, fix=f"git -C {root} fetch (the commit must be in the product repository)")
    listed = run_git(root, "ls-tree", "-z", "--full-tree", commit, "--", path)
    entries = [e for e in listed.stdout.split(b"\0") if e]
    if listed.returncode != 0 or len(entries) != 1:
        raise InputError("the document is not in the commit", file=file, field=field, found=path, expected=f"a file of commit {commit[:12]}", fix="make the bundle from a document committed to the product repository")
    meta, _tab, name = entries[0].partition(b"\t")
    mode, kind, oid = (meta.decode("ascii", "replace").split(" ") + ["", "", ""])[:3]
    if name.decode("utf-8", "replace") != path or kind != "blob" or mode not in ("100644", "100755"):
        what = "a symbolic link" if mode == "120000" else f"a {kind or 'thing'} of mode {mode}"
        raise InputError(f"the document at commit {commit[:12]} is {what}, not a regular file", file=file, field=field, found=path, expected="a regular file inside the clone", why="a link could make the runner read a file outside the clone")
    size = run_git(root, "cat-file", "-s", oid)
    count = int(size.stdout.decode().strip() or "-1") if size.returncode == 0 and size.stdout.strip().isdigit() else -1
    if count < 0 or count > MAX_DOCUMENT_BYTES:
        raise InputError("the document is too large for a route document", file=file, field=field, found=f"{count} bytes", expected=f"at most {MAX_DOCUMENT_BYTES} bytes")
    data = run_git(root, "cat-file", "blob", oid, check=True).stdout
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


def read_json_file(path: Path, what: str) -> tuple[bytes, dict[str, Any]]:
    if not path.is_file():
        raise InputError(f"{what} does not exist", file=path)
    data = read_bytes_bounded(path, fmt.MAX_JSON_BYTES, what=what.removeprefix("the "))
    return data, fmt.loads_strict(data, file=str(path))
