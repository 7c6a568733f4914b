"""The runtime source at one exact commit.

A source is either the embedded sample runtime (this repository's
`runtime/sample/` at HEAD), a local git checkout (`PATH` or `PATH@COMMIT`) or a
remote repository with a full commit (`URL@COMMIT`).  Branches, tags and short
hashes are refused: they can move or be ambiguous.  A dirty tree is refused.
When the lane pins a commit, any other commit is refused.  The tree is
exported with `git archive` (no line-ending conversion) into a canonical path,
because `-lineinfo` embeds absolute source paths in device code.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import EnvironmentProblem, InputError, RefusedError, UsageError
from pipeline.formats.lanes import REPO_ROOT, Lane
from pipeline.infra.git import GIT
from pipeline.infra.safetar import SafeTar
from pipeline.util.hashing import is_commit_hex
from pipeline.util.proc import run, run_text

EMBEDDED_SUBDIR = "runtime/sample"


@dataclass(frozen=True)
class SourceSpec:
    kind: str  # "embedded-sample", "local", "remote"
    location: str  # a path or URL
    commit: str | None  # requested commit (None: HEAD of a local checkout)
    subdir: str = ""

    @property
    def display(self) -> str:
        if self.kind == "embedded-sample":
            return f"embedded sample runtime ({EMBEDDED_SUBDIR} of this repository)"
        return f"{self.location}@{self.commit}" if self.commit else self.location


@dataclass(frozen=True)
class ResolvedSource:
    spec: SourceSpec
    repository: str  # where the git objects are (a local path)
    commit: str
    tree: str
    commit_time: int
    subdir: str

    def to_json(self) -> dict[str, object]:
        return {
            "kind": self.spec.kind,
            "location": self.spec.location if self.spec.kind == "remote" else None,
            "commit": self.commit,
            "tree": self.tree,
            "subdir": self.subdir,
            "commit_time": self.commit_time,
        }


def parse_source(value: str | None) -> SourceSpec:
    if not value:
        return SourceSpec("embedded-sample", str(REPO_ROOT), None, EMBEDDED_SUBDIR)
    location, _, commit = value.rpartition("@") if "@" in value else (value, "", "")
    if not location:
        location, commit = value, ""
    remote = re.match(r"^(https?|ssh|git|file)://", location) is not None or re.match(r"^[\w.-]+@[\w.-]+:", value) is not None
    if remote and not commit:
        raise UsageError(
            "a remote source needs a full commit",
            field="--source",
            found=value,
            expected="URL@<40-hex commit>",
            fix="append @<commit>, e.g. --source https://github.com/alphastorm/ninfer.git@7a25cd72f490183e4113f1e84e68e36d653ddd28",
        )
    if commit and not is_commit_hex(commit):
        raise UsageError(
            "the source must name a full 40-hex commit, not a branch, tag or short hash",
            field="--source",
            found=commit,
            expected="40 lowercase hex digits",
            why="a branch or tag can move and a short hash can become ambiguous, so the build would not be tied to exact bytes",
            fix="resolve it once with 'git rev-parse <ref>' and pass the full hash",
        )
    if remote:
        return SourceSpec("remote", location, commit)
    return SourceSpec("local", str(Path(location).resolve()), commit or None)


def _git(repo: str, *args: str, what: str, failure=InputError, check: bool = True):
    return run([*GIT, "-C", repo, *args], what=what, failure=failure, check=check)


def _git_text(repo: str, *args: str, what: str, failure=InputError) -> str:
    return _git(repo, *args, what=what, failure=failure).stdout.decode("utf-8", "replace").strip()


def _fetch_remote(spec: SourceSpec) -> str:
    cache_base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    mirror = Path(cache_base) / "omp-ninfer" / "sources" / hashlib.sha256(spec.location.encode()).hexdigest()[:16]
    if not (mirror / "HEAD").exists():
        mirror.mkdir(parents=True, exist_ok=True)
        run([*GIT, "init", "--bare", "-q", str(mirror)], what="create a source mirror", failure=EnvironmentProblem)
    have = _git(str(mirror), "cat-file", "-e", f"{spec.commit}^{{commit}}", what="look for the commit", check=False)
    if have.returncode != 0:
        from pipeline.errors import RemoteError

        _git(
            str(mirror), "fetch", "-q", "--depth", "1", spec.location, spec.commit,
            what=f"fetch commit {spec.commit} from {spec.location}",
            failure=RemoteError,
        )
    return str(mirror)


def resolve_source(spec: SourceSpec, lane: Lane) -> ResolvedSource:
    if spec.kind == "remote":
        repo = _fetch_remote(spec)
        commit = _git_text(repo, "rev-parse", "--verify", f"{spec.commit}^{{commit}}", what="resolve the fetched commit")
    else:
        repo = spec.location
        if not Path(repo).exists():
            raise InputError("source path does not exist", field="--source", found=repo)
        top = _git(repo, "rev-parse", "--show-toplevel", what="open the source checkout", check=False)
        if top.returncode != 0:
            raise InputError(
                "source path is not a git checkout",
                field="--source",
                found=repo,
                why="the build is tied to a commit; a plain folder has none",
                fix="pass a git checkout, or URL@COMMIT",
            )
        pathspec = [spec.subdir] if spec.subdir else []
        status = _git_text(repo, "status", "--porcelain", "--untracked-files=all", "--", *pathspec, what="check the source tree is clean")
        if status:
            first = status.splitlines()[0]
            raise RefusedError(
                f"the source tree has uncommitted changes ({len(status.splitlines())} paths, first: {first.strip()})",
                file=os.path.join(repo, spec.subdir) if spec.subdir else repo,
                why="a release build must come from an exact commit; uncommitted bytes would not be in its identity",
                fix="commit or stash the changes (git status shows them), then build again",
            )
        head = _git_text(repo, "rev-parse", "HEAD", what="read HEAD")
        if spec.commit and head != spec.commit:
            raise RefusedError(
                "the checkout is not at the requested commit",
                file=repo,
                field="HEAD",
                found=head,
                expected=spec.commit,
                fix=f"run 'git -C {repo} checkout {spec.commit}'",
            )
        commit = head
    if spec.kind != "embedded-sample" and lane.source_commit and commit != lane.source_commit:
        raise RefusedError(
            "the source commit is not the lane's pinned commit",
            file=lane.file,
            field="source.commit",
            found=commit,
            expected=lane.source_commit,
            why="the lane file pins the exact commit its component is cut from",
            fix="build the pinned commit, or change source.commit in the lane file through a reviewed change",
        )
    tree_spec = f"{commit}:{spec.subdir}" if spec.subdir else f"{commit}^{{tree}}"
    tree = _git_text(repo, "rev-parse", tree_spec, what="read the source tree id")
    commit_time = int(_git_text(repo, "show", "-s", "--format=%ct", commit, what="read the commit time"))
    return ResolvedSource(spec=spec, repository=repo, commit=commit, tree=tree, commit_time=commit_time, subdir=spec.subdir)


def archive_tar(source: ResolvedSource, prefix: str = "") -> bytes:
    """`git archive` of the exact commit (or its subtree) as tar bytes; no EOL conversion."""
    treeish = f"{source.commit}:{source.subdir}" if source.subdir else source.commit
    args = ["archive", "--format=tar"]
    if prefix:
        args.append(f"--prefix={prefix}")
    data = _git(source.repository, *args, treeish, what="export the source with git archive").stdout
    if source.subdir:
        # git stamps a *tree* export with the current time (git 2.39 has no --mtime);
        # give it the commit time, which is what a commit export carries.
        data = set_tar_mtimes(data, source.commit_time)
    return data


def set_tar_mtimes(data: bytes, mtime: int) -> bytes:
    """Rewrite the mtime field of every ustar header in place and fix its checksum."""
    out = bytearray(data)
    offset = 0
    field = f"{mtime:011o}\0".encode()
    while offset + 512 <= len(out):
        header = out[offset:offset + 512]
        if header == bytes(512):
            break
        size = int(header[124:136].rstrip(b"\0 ").decode() or "0", 8)
        out[offset + 136:offset + 148] = field
        out[offset + 148:offset + 156] = b" " * 8
        checksum = sum(out[offset:offset + 512])
        out[offset + 148:offset + 156] = f"{checksum:06o}\0 ".encode()
        offset += 512 + (size + 511) // 512 * 512
    return bytes(out)


def export_tree(tar_bytes: bytes, destination: Path) -> None:
    destination.mkdir(parents=True, exist_ok=True)
    # Bounded reader (names, headers, counts) plus tarfile's data filter (no links out, no devices).
    with SafeTar(tar_bytes, compression=None, label="the runtime source's git archive", error=InputError) as archive:
        archive.extract_all(destination)


def describe_commit(repo: str, commit: str) -> str:
    return run_text([*GIT, "-C", repo, "log", "-1", "--format=%h %s", commit], what="describe the commit")
