"""Reading a git repository: commits and the bytes a commit holds at a path.

Compose pins raw URLs only at commits that already hold a record's bytes, and
verify re-hashes those bytes from local history; both read through here.
Every call runs git with the options that make its answer independent of the
user's configuration: no line-ending conversion (the hash chain is over the
exact LF bytes) and any repository owner accepted (a clone made by another
user, as in CI).  A missing git, or a folder that is not a repository where a
batch reader needs one, is `GitUnavailable`, an `EnvironmentProblem` (exit 3).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from pipeline.errors import EnvironmentProblem
from pipeline.util.hashing import is_commit_hex

GIT = ("git", "-c", "core.autocrlf=false", "-c", "core.eol=lf", "-c", "safe.directory=*")


class GitUnavailable(EnvironmentProblem):
    """git cannot answer here: not installed, or the folder is not a repository."""


def _not_installed(exc: OSError, why: str | None = None) -> GitUnavailable:
    return GitUnavailable("git is not installed", why=why or f"running git failed: {exc.strerror or exc}", fix="install git")


class GitObjects:
    """Reads objects of one repository through a single `git cat-file --batch` process."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._proc: subprocess.Popen | None = None
        self._prefix: str | None = None

    def __enter__(self) -> GitObjects:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _start(self) -> subprocess.Popen:
        if self._proc is None:
            try:
                prefix = subprocess.run([*GIT, "-C", str(self.root), "rev-parse", "--show-prefix"], capture_output=True, text=True, check=False)
                self._prefix = prefix.stdout.strip() if prefix.returncode == 0 else ""
                self._proc = subprocess.Popen([*GIT, "-C", str(self.root), "cat-file", "--batch"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            except OSError as exc:
                raise _not_installed(exc) from exc
        return self._proc

    def _read(self, spec: str) -> tuple[str, bytes] | None:
        proc = self._start()
        assert proc.stdin is not None and proc.stdout is not None
        if "\n" in spec:
            return None
        proc.stdin.write(spec.encode("utf-8") + b"\n")
        proc.stdin.flush()
        header = proc.stdout.readline()
        if not header:
            raise GitUnavailable("git cat-file stopped", file=self.root, why="the folder is probably not a git repository", fix="run from a clone of the repository")
        parts = header.decode("utf-8", "replace").split()
        if len(parts) != 3:  # "<spec> missing" / "ambiguous"
            return None
        size = int(parts[2])
        data = proc.stdout.read(size)
        proc.stdout.read(1)
        return parts[1], data

    def has_commit(self, commit: str) -> bool:
        found = self._read(f"{commit}^{{commit}}")
        return found is not None and found[0] == "commit"

    def show(self, commit: str, path: str) -> bytes | None:
        """The bytes of `path` (relative to the repository folder given) at `commit`, or None."""
        self._start()
        found = self._read(f"{commit}:{self._prefix or ''}{path}")
        return found[1] if found is not None and found[0] == "blob" else None

    def close(self) -> None:
        if self._proc is not None:
            if self._proc.stdin:
                self._proc.stdin.close()
            self._proc.wait(timeout=30)
            if self._proc.stdout:
                self._proc.stdout.close()
            self._proc = None


def git_has_commit(root: Path, commit: str) -> bool:
    try:
        result = subprocess.run([*GIT, "-C", str(root), "cat-file", "-e", f"{commit}^{{commit}}"], capture_output=True, check=False)
    except OSError as exc:
        raise _not_installed(exc) from exc
    return result.returncode == 0


def git_show(root: Path, commit: str, path: str) -> bytes | None:
    """The bytes of `path` (relative to `root`) at `commit`, or None when the commit lacks it."""
    try:
        result = subprocess.run([*GIT, "-C", str(root), "show", f"{commit}:./{path}"], capture_output=True, check=False)
    except OSError as exc:
        raise _not_installed(exc) from exc
    return result.stdout if result.returncode == 0 else None


def rev_parse_commit(root: Path, rev: str, *, why: str | None = None) -> str | None:
    """The full commit `rev` names in the repository at `root`, or None when it names none."""
    try:
        result = subprocess.run([*GIT, "-C", str(root), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], capture_output=True, text=True, check=False)
    except OSError as exc:
        raise _not_installed(exc, why) from exc
    commit = result.stdout.strip()
    return commit if result.returncode == 0 and is_commit_hex(commit) else None
