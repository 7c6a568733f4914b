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

import contextlib
import hashlib
import math
import os
import re
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import EnvironmentProblem, InputError, IntegrityError, RefusedError, UsageError
from pipeline.formats.lanes import REPO_ROOT, Lane
from pipeline.formats.provenance import MAX_BYTES, ArchiveClaim, archive_claim, read_statement
from pipeline.infra.git import GIT
from pipeline.infra.safetar import SafeTar, TarLimits, inflate_chunks
from pipeline.util.fs import read_bytes_bounded
from pipeline.util.hashing import is_commit_hex, sha256_bytes
from pipeline.util.proc import run, run_text

EMBEDDED_SUBDIR = "runtime/sample"


@dataclass(frozen=True)
class SourceSpec:
    kind: str  # "embedded-sample", "local", "remote", "archive"
    location: str  # a path or URL (for "archive": the .tar or .tar.gz file)
    commit: str | None  # requested commit (None: HEAD of a local checkout)
    subdir: str = ""
    claim: ArchiveClaim | None = None  # "archive" only

    @property
    def display(self) -> str:
        if self.kind == "embedded-sample":
            return f"embedded sample runtime ({EMBEDDED_SUBDIR} of this repository)"
        if self.kind == "archive":
            return f"source archive {self.location} (commit {self.commit})"
        return f"{self.location}@{self.commit}" if self.commit else self.location


@dataclass(frozen=True)
class ResolvedSource:
    spec: SourceSpec
    repository: str  # where the git objects are (a local path; "" for a source archive)
    commit: str
    tree: str
    commit_time: int
    subdir: str
    archive: bytes | None = None  # the exact tar of a source archive (no git history)
    problems: tuple[str, ...] = ()  # identity mismatches of a non-strict archive (rebuild --verify)

    @property
    def kind(self) -> str:
        """The kind the build identity records: a source archive keeps its original build's."""
        if self.spec.claim is not None:
            return str(self.spec.claim.recorded_dict.get("kind") or "archive")
        return self.spec.kind

    def to_json(self) -> dict[str, object]:
        if self.spec.claim is not None:
            # Labels (kind, location, subdir) are the original's; commit, tree and time are what the archive holds.
            recorded = self.spec.claim.recorded_dict
            return {
                "kind": recorded.get("kind"),
                "location": recorded.get("location"),
                "commit": self.commit,
                "tree": self.tree,
                "subdir": recorded.get("subdir", ""),
                "commit_time": self.commit_time,
            }
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
    if spec.kind == "archive":
        return resolve_archive(spec, lane)
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


def source_file(source: ResolvedSource, relative: str) -> bytes | None:
    """The bytes of one file at the source's root (in its exact commit), or None when it has none."""
    if source.archive is not None:
        with SafeTar(source.archive, compression=None, limits=SOURCE_LIMITS, label=source.spec.location, error=InputError) as archive:
            for info in archive:
                if info.name.removeprefix("./") == relative:
                    if not info.isreg():
                        raise InputError(f"{relative} in the source archive is not a regular file", file=source.spec.location)
                    return archive.read_member(info)
        return None
    path = f"{source.subdir}/{relative}" if source.subdir else relative
    spec = f"{source.commit}:{path}"
    if _git(source.repository, "cat-file", "-e", spec, what=f"look for {relative} in the source", check=False).returncode != 0:
        return None
    kind = _git_text(source.repository, "cat-file", "-t", spec, what=f"read the type of {relative}")
    if kind != "blob":
        raise InputError(f"{relative} in the source is a {kind}, not a file", file=f"{source.commit}:{path}")
    return _git(source.repository, "cat-file", "blob", spec, what=f"read {relative} from the source").stdout


def archive_tar(source: ResolvedSource, prefix: str = "") -> bytes:
    """`git archive` of the exact commit (or its subtree) as tar bytes; no EOL conversion."""
    if source.archive is not None:
        return source.archive
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


# The one time every exported source file and folder carries, whatever the commit's time: nvcc's -lineinfo line
# tables record each source and header file's mtime in the device code, and a compile-cache hit (keyed on content)
# returns the object another commit's export stamped, so a time from the commit would make a cached re-cut differ
# from a clean build of the same commit. 2000-01-01T00:00:00Z: fixed, and older than anything a build writes.
EXPORT_MTIME = 946684800


def export_tree(tar_bytes: bytes, destination: Path) -> None:
    """Write the source's files under `destination`, every file and folder (not links) at EXPORT_MTIME."""
    destination.mkdir(parents=True, exist_ok=True)
    # Bounded reader (names, headers, counts) plus the data filter's rules (no links out, no devices), on every Python.
    with SafeTar(tar_bytes, compression=None, label="the runtime source's git archive", error=InputError) as archive:
        archive.extract_all(destination)
    folders = [destination]
    for folder, subfolders, files in os.walk(destination):
        for name in files:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                os.utime(path, (EXPORT_MTIME, EXPORT_MTIME))
        folders += [Path(folder, name) for name in subfolders if not os.path.islink(os.path.join(folder, name))]
    for folder in sorted(folders, key=lambda f: -len(f.parts)):  # deepest first: a folder's time outlives its children's
        os.utime(folder, (EXPORT_MTIME, EXPORT_MTIME))


def describe_commit(repo: str, commit: str) -> str:
    return run_text([*GIT, "-C", repo, "log", "-1", "--format=%h %s", commit], what="describe the commit")


# -- a source archive instead of a checkout (build --source-archive, rebuild --verify) ----
#
# A source archive comes from outside (a download of a published set), so it is read in bounded
# memory and in this order, never with plain `tarfile`:
#   1. its SHA-256 first: the tar stream (a .tar.gz inflated in bounded pieces, at most
#      MAX_ARCHIVE_BYTES and SOURCE_LIMITS.max_ratio times its compressed size) is hashed and
#      compared with the provenance's `source-tar` digest before a single header is parsed; a
#      strict claim (`build --source-archive`) refuses a mismatch there (IntegrityError, exit 5),
#      `rebuild --verify` records it and reads on, still only through the bounded reader;
#   2. its headers and files only through `infra/safetar.SafeTar` with SOURCE_LIMITS: a GNU
#      long-name/long-link header of at most 4096 bytes, a PAX header of at most 64 KiB, at most
#      MAX_ARCHIVE_MEMBERS members, MAX_ARCHIVE_BYTES inflated in all; each refused as it streams
#      (InputError, exit 1), before the declared bytes are read;
#   3. its bytes are held in memory (the build compiles them) only once all of that passed.

MAX_ARCHIVE_BYTES = 128 << 20  # the inflated tar: a source, not a model (the engine's is a few MiB)
MAX_ARCHIVE_MEMBERS = 20_000  # files, folders and links: the engine has hundreds (git archive leaves submodules out)
MAX_SOURCE_FILE_READ = 1 << 20  # one file read from the archive into memory (host-dependencies.toml)
SOURCE_LIMITS = TarLimits(
    max_members=MAX_ARCHIVE_MEMBERS,
    max_name_bytes=4096,  # PATH_MAX; a GNU long name/link header declaring more is refused unread
    max_header_bytes=64 * 1024,  # one PAX header's records
    max_total_bytes=MAX_ARCHIVE_BYTES,
    max_ratio=100,
    ratio_floor=16 * 1024 * 1024,
    max_member_read=MAX_SOURCE_FILE_READ,
)


def _is_gzip(path: Path) -> bool:
    with open(path, "rb") as handle:
        return handle.read(2) == b"\x1f\x8b"


def _tar_chunks(path: Path) -> Iterator[bytes]:
    """The tar stream of a .tar or .tar.gz file, in bounded pieces, refused past the limits as it streams."""
    try:
        if _is_gzip(path):
            yield from inflate_chunks(path, limits=SOURCE_LIMITS, error=InputError)
            return
        if path.stat().st_size > MAX_ARCHIVE_BYTES:
            raise InputError("the source archive is larger than a source can be", file=path, found=f"{path.stat().st_size} bytes", expected=f"at most {MAX_ARCHIVE_BYTES} bytes")
        with open(path, "rb") as handle:
            while chunk := handle.read(1 << 20):
                yield chunk
    except OSError as exc:
        raise InputError(f"cannot read the source archive ({exc.strerror or exc})", file=path) from None


def hash_archive(path: Path) -> tuple[str, int]:
    """(SHA-256 of the tar stream, its size), without parsing a single header."""
    digest = hashlib.sha256()
    size = 0
    for chunk in _tar_chunks(path):
        digest.update(chunk)
        size += len(chunk)
    return digest.hexdigest(), size


_HEAD_BYTES = 512 + 64 * 1024 + 512  # the first header and the largest PAX global header SOURCE_LIMITS allow


def _header_commit(head: bytes) -> str | None:
    """The commit `git archive` writes as the first member: a pax global header with `comment=<commit>`."""
    if len(head) < 512 or head[156:157] != tarfile.XGLTYPE:
        return None
    try:
        size = int(head[124:136].rstrip(b"\0 ").decode("ascii") or "0", 8)
    except ValueError:
        return None
    if size > len(head) - 512:
        return None
    records, comment = head[512:512 + size], None
    while records:
        length_text, _, rest = records.partition(b" ")
        if not length_text.isdigit() or int(length_text) <= len(length_text) + 1:
            return None
        length = int(length_text)
        record, records = rest[: length - len(length_text) - 1], records[length:]
        key, _, value = record.rstrip(b"\n").partition(b"=")
        if key == b"comment":
            comment = value.decode("ascii", "replace")
    return comment if is_commit_hex(comment) else None


def read_archive(path: Path) -> bytes:
    """The tar bytes of a `.tar` or `.tar.gz` source archive (bounded: MAX_ARCHIVE_BYTES, the inflate ratio)."""
    return b"".join(_tar_chunks(path))


def _open(data: bytes | Path, origin: str) -> SafeTar:
    if isinstance(data, Path):
        return SafeTar(data, compression="gz" if _is_gzip(data) else None, limits=SOURCE_LIMITS, label=origin, error=InputError)
    return SafeTar(data, compression=None, limits=SOURCE_LIMITS, label=origin, error=InputError)


def archive_facts(data: bytes | Path, *, origin: str) -> tuple[str | None, int]:
    """(the commit git archive wrote into the pax global header, or None; the members' one mtime), read through SafeTar."""
    times: set[int] = set()
    with _open(data, origin) as archive:
        members = 0
        for member in archive:
            members += 1
            if isinstance(member.mtime, float) and not math.isfinite(member.mtime):  # a PAX mtime=nan or inf
                raise InputError("the source archive holds a member with an impossible time", file=origin, field=member.name, found=repr(member.mtime), expected="seconds since 1970")
            if len(times) <= 5:
                times.add(int(member.mtime) if isinstance(member.mtime, (int, float)) and not isinstance(member.mtime, bool) else -1)
        archive.drain()
    if not members:
        raise InputError("the source archive is empty", file=origin)
    if len(times) != 1:
        raise InputError("the source archive's members carry different times", file=origin, found=sorted(times)[:5], expected="one time: the commit's (as git archive writes it)")
    return _header_commit(_head_of(data)), times.pop()


def _head_of(data: bytes | Path) -> bytes:
    if isinstance(data, Path):
        head = bytearray()
        with contextlib.closing(_tar_chunks(data)) as chunks:
            for chunk in chunks:
                head += chunk[: _HEAD_BYTES - len(head)]
                if len(head) >= _HEAD_BYTES:
                    break
        return bytes(head)
    return bytes(data[:_HEAD_BYTES])


def archive_tree(data: bytes | Path, *, origin: str) -> str:
    """The git tree id of the archive's files (what `git write-tree` gives for them), extracted through SafeTar."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="omp-ninfer-tree.") as scratch:
        files = Path(scratch) / "files"
        files.mkdir()
        with _open(data, origin) as archive:
            archive.extract_all(files)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": scratch, "GIT_CONFIG_NOSYSTEM": "1", "GIT_DIR": str(Path(scratch) / "git"), "GIT_WORK_TREE": str(files)}
        run([*GIT, "init", "-q"], env=env, what="make a scratch index for the source archive", failure=EnvironmentProblem)
        # -f: a committed file can match an ignore rule and still be in the tree.
        run([*GIT, "-c", "core.fileMode=true", "add", "-A", "-f", "."], cwd=files, env=env, what=f"hash the files of {origin}", failure=InputError)
        return run_text([*GIT, "write-tree"], cwd=files, env=env, what=f"compute the tree id of {origin}", failure=InputError).strip()


def resolve_archive(spec: SourceSpec, lane: Lane) -> ResolvedSource:
    """A source archive checked against its claim: first the tar's SHA-256 (before any header is read), then,
    through the bounded reader, the commit in its header and the tree of its files."""
    claim = spec.claim
    assert claim is not None and spec.commit == claim.commit
    path = Path(spec.location)
    if not path.is_file():
        raise InputError("source archive does not exist", file=path, field="--source-archive")
    digest, _size = hash_archive(path)
    problems = []
    if digest != claim.tar_sha256:
        problems.append(("the source archive is not the tar the provenance names", "source-tar sha256", digest, claim.tar_sha256))
        if claim.strict:
            _refuse_mismatch(path, *problems[0])
    if spec.kind != "embedded-sample" and claim.recorded_dict.get("kind") != "embedded-sample" and lane.source_commit and claim.commit != lane.source_commit:
        raise RefusedError("the source commit is not the lane's pinned commit", file=lane.file, field="source.commit", found=claim.commit, expected=lane.source_commit)
    header_commit, mtime = archive_facts(path, origin=str(path))
    tree = archive_tree(path, origin=str(path))
    if header_commit is not None and header_commit != claim.commit:
        problems.append(("the source archive's header names another commit", "pax comment", header_commit, claim.commit))
    if tree != claim.tree:
        problems.append(("the source archive's files do not hash to the commit's tree", "git tree", tree, claim.tree))
    recorded_time = claim.recorded_dict.get("commit_time")
    if isinstance(recorded_time, int) and recorded_time != mtime:
        problems.append(("the source archive's time is not the commit time the build recorded", "member mtime", mtime, recorded_time))
    if problems and claim.strict:
        _refuse_mismatch(path, *problems[0])
    data = read_archive(path)  # every check above passed (or, for rebuild --verify, was recorded): now the build's bytes
    if sha256_bytes(data) != digest:
        raise IntegrityError("the source archive changed while it was read", file=path, fix="do not change the archive during the build; run it again")
    return ResolvedSource(
        spec=spec,
        repository="",
        commit=claim.commit,
        tree=tree,
        commit_time=mtime,
        subdir=str(claim.recorded_dict.get("subdir") or ""),
        archive=data,
        problems=tuple(f"{what} ({field_name}: found {found}, expected {expected})" for what, field_name, found, expected in problems),
    )


def _refuse_mismatch(path: Path, what: str, field_name: str, found: object, expected: object) -> None:
    raise IntegrityError(
        what,
        file=path,
        field=field_name,
        found=found,
        expected=expected,
        why="a build from an archive is tied to its provenance: these bytes are not the source it names"
        + (" (a .gitattributes export-ignore/export-subst rule also changes an archive's tree)" if field_name == "git tree" else ""),
        fix="download the source archive of the set again; never build a release from bytes that do not match",
    )


def archive_source(archive: Path, statement_path: Path, *, strict: bool = True) -> SourceSpec:
    """A source archive (`git archive` tar or tar.gz, no history) as a build source, bound to a provenance statement
    (read by its owner, pipeline/formats/provenance.py: the claim it makes on the archive)."""
    if not statement_path.is_file():
        raise InputError("provenance statement does not exist", file=statement_path, field="--provenance")
    data = read_bytes_bounded(statement_path, MAX_BYTES, what="provenance statement")  # the cap applies while reading
    statement = read_statement(data, origin=str(statement_path))
    claim = archive_claim(statement, origin=str(statement_path), strict=strict)
    if not archive.is_file():
        raise InputError("source archive does not exist", file=archive, field="--source-archive")
    return SourceSpec("archive", str(archive.resolve()), claim.commit, claim=claim)
