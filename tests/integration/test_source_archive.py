"""A `git archive` tarball as a build source: its identity is checked against its claim (the provenance)."""

from __future__ import annotations

import gzip
import io
import os
import subprocess
import tarfile
from pathlib import Path

import pytest
from repokit import git, make_repo

from pipeline.errors import IntegrityError, RefusedError
from pipeline.formats.lanes import find_lane
from pipeline.lanework.source import ArchiveClaim, SourceSpec, archive_tree, resolve_archive
from pipeline.util.hashing import sha256_bytes


@pytest.fixture
def repo(tmp_path) -> tuple[Path, str]:
    source = tmp_path / "files"
    (source / "src").mkdir(parents=True)
    (source / "src" / "main.cpp").write_text('int main() { return 0; } // "error: "\n')
    (source / "run.sh").write_text("#!/bin/sh\n")
    (source / "run.sh").chmod(0o755)
    (source / ".gitignore").write_text("*.log\n")
    (source / "kept.log").write_text("committed although ignored\n")
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["cp", "-a", f"{source}/.", str(repo)], check=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A", "-f")
    git(repo, "commit", "-qm", "c")
    return repo, git(repo, "rev-parse", "HEAD")


def _archive(repo: Path, treeish: str) -> bytes:
    return subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", treeish], capture_output=True, check=True).stdout


def _claim(repo: Path, commit: str, data: bytes, *, strict: bool = True, kind: str = "local") -> ArchiveClaim:
    tree = git(repo, "rev-parse", f"{commit}^{{tree}}")
    time = int(git(repo, "show", "-s", "--format=%ct", commit))
    recorded = {"kind": kind, "location": None, "subdir": "", "commit_time": time}
    return ArchiveClaim(sha256_bytes(data), commit, tree, tuple(sorted(recorded.items())), strict)


def test_the_files_of_a_git_archive_hash_to_the_commits_tree(repo, tmp_path):
    repo_path, commit = repo
    data = _archive(repo_path, commit)
    assert archive_tree(data, origin="a.tar") == git(repo_path, "rev-parse", f"{commit}^{{tree}}")
    path = tmp_path / "source.tar.gz"
    path.write_bytes(gzip.compress(data, mtime=0))
    spec = SourceSpec("archive", str(path), commit, claim=_claim(repo_path, commit, data))
    resolved = resolve_archive(spec, find_lane("5090"))
    assert resolved.archive == data and resolved.problems == ()
    assert resolved.to_json() == {"kind": "local", "location": None, "commit": commit, "tree": resolved.tree, "subdir": "", "commit_time": resolved.commit_time}


def test_a_changed_byte_is_refused_or_recorded(repo, tmp_path):
    repo_path, commit = repo
    data = bytearray(_archive(repo_path, commit))
    claim_data = bytes(data)
    with tarfile.open(fileobj=io.BytesIO(claim_data)) as archive:
        info = archive.getmember("src/main.cpp")
    data[info.offset_data + claim_data[info.offset_data:].index(b"error") ] ^= 0x20
    path = tmp_path / "source.tar"
    path.write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match="not the tar the provenance names") as info_:
        resolve_archive(SourceSpec("archive", str(path), commit, claim=_claim(repo_path, commit, claim_data)), find_lane("5090"))
    assert info_.value.field == "source-tar sha256"
    loose = resolve_archive(SourceSpec("archive", str(path), commit, claim=_claim(repo_path, commit, claim_data, strict=False)), find_lane("5090"))
    assert len(loose.problems) == 2 and "do not hash to the commit's tree" in loose.problems[1]


def test_a_header_naming_another_commit_is_refused(repo, tmp_path):
    repo_path, commit = repo
    (repo_path / "later.txt").write_text("later\n")
    git(repo_path, "add", "later.txt")
    git(repo_path, "commit", "-qm", "later")
    later = git(repo_path, "rev-parse", "HEAD")
    data = _archive(repo_path, later)
    claim = _claim(repo_path, later, data)
    forged = ArchiveClaim(claim.tar_sha256, commit, claim.tree, claim.recorded)  # claims the first commit
    path = tmp_path / "s.tar"
    path.write_bytes(data)
    with pytest.raises(IntegrityError, match="header names another commit"):
        resolve_archive(SourceSpec("archive", str(path), commit, claim=forged), find_lane("5090"))


def test_the_lane_pin_applies_to_an_archive_too(repo, tmp_path):
    repo_path, commit = repo
    data = _archive(repo_path, commit)
    path = tmp_path / "s.tar"
    path.write_bytes(data)
    pinned = find_lane("4090")  # pins 7a25cd72…
    with pytest.raises(RefusedError, match="not the lane's pinned commit"):
        resolve_archive(SourceSpec("archive", str(path), commit, claim=_claim(repo_path, commit, data)), pinned)


def test_a_sample_subtree_export_has_no_header_commit_and_still_binds_its_tree(tmp_path):
    from repokit import SAMPLE

    from pipeline.lanework.source import archive_facts

    repo = tmp_path / "sample"
    commit = make_repo(repo, SAMPLE)
    data = _archive(repo, f"{commit}:")
    header, _mtime = archive_facts(data, origin="x")
    assert header is None
    assert archive_tree(data, origin="x") == git(repo, "rev-parse", f"{commit}^{{tree}}")


# -- hostile archives from outsiders, in bounded memory (issue 18) ----------------------------------
#
# Peak memory is measured with the resource module on a grandchild: a small wrapper interpreter runs the
# command and reports `ru_maxrss` of RUSAGE_CHILDREN. (A child forked straight from pytest would report the
# pytest process's RSS too: Linux carries the pre-exec high-water mark into `ru_maxrss`.)

MIB = 1 << 20
RSS_BOUND_MIB = 256  # issue 18's bound; the plain tarfile reader took 1.8 GiB (long name) and 1.46 GiB (1.5M members)
_WRAPPER = """
import json, resource, subprocess, sys
result = subprocess.run(sys.argv[1:], capture_output=True, text=True, check=False)
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB on Linux
print(json.dumps({"code": result.returncode, "stdout": result.stdout, "stderr": result.stderr, "peak_mib": peak / 1024}))
"""


def run_measured(*argv: str, timeout: float = 120) -> dict:
    """Run `argv` (in the checkout); its exit code, output and peak RSS in MiB."""
    import json
    import sys

    from repokit import ROOT

    wrapper = subprocess.run([sys.executable, "-c", _WRAPPER, *argv], capture_output=True, text=True, cwd=ROOT, timeout=timeout, check=True)
    return json.loads(wrapper.stdout)


def assert_refused_in_bounded_memory(result: dict, code: int, message: str) -> None:
    assert result["code"] == code, result
    assert message in result["stderr"], result["stderr"]
    assert "Traceback" not in result["stderr"] and "internal error" not in result["stderr"], result["stderr"]
    assert result["peak_mib"] < RSS_BOUND_MIB, result


def _header(name: str, *, size: int = 0, kind: bytes = tarfile.REGTYPE, mtime: int = 1_700_000_000) -> bytes:
    info = tarfile.TarInfo(name)
    info.type, info.size, info.mtime, info.mode = kind, size, mtime, 0o644
    return info.tobuf(tarfile.GNU_FORMAT, "utf-8", "surrogateescape")


def _long_name_gz(path: Path, declared: int = 900 * MIB, kind: bytes = tarfile.GNUTYPE_LONGNAME) -> Path:
    """~1 MiB on disk: an extension header declaring `declared` bytes, then that many zeros (one gzip member repeated)."""
    header = tarfile.TarInfo("././@LongLink" if kind == tarfile.GNUTYPE_LONGNAME else "pax")
    header.type, header.size = kind, declared
    path.write_bytes(gzip.compress(header.tobuf(tarfile.GNU_FORMAT), mtime=0) + gzip.compress(bytes(MIB), mtime=0) * (declared // MIB + 1))
    return path


def _many_members_gz(path: Path, members: int = 1_500_000) -> Path:
    """1.5 million empty files in a small .tar.gz: one gzip member of 1,000 headers, repeated."""
    block = _header("f") * 1000
    path.write_bytes(gzip.compress(block, mtime=0) * (members // 1000) + gzip.compress(bytes(1024), mtime=0))
    return path


def _many_members_tar(path: Path, members: int) -> Path:
    """A plain tar (no compression ratio to trip) of `members` empty files."""
    with open(path, "wb") as out:
        for index in range(members):
            out.write(_header(f"f{index}"))
        out.write(bytes(1024))
    return path


def _big_pax_tar(path: Path, size: int = 200 * 1024) -> Path:
    """A plain tar whose first member carries a PAX header of `size` bytes (the bound is 64 KiB)."""
    record = b"comment=" + b"a" * size + b"\n"
    length = len(record) + 1
    while len(str(length)) + 1 + len(record) != length:
        length = len(str(length)) + 1 + len(record)
    line = f"{length} ".encode() + record
    body = line + bytes(-len(line) % 512)
    info = tarfile.TarInfo("pax")
    info.type, info.size = tarfile.XHDTYPE, len(line)
    path.write_bytes(info.tobuf(tarfile.GNU_FORMAT) + body + _header("f") + bytes(1024))
    return path


HOSTILE = {
    "gnu-long-name-900MiB.tar.gz": (lambda p: _long_name_gz(p), "inflates more than"),
    "pax-900MiB.tar.gz": (lambda p: _long_name_gz(p, kind=tarfile.XHDTYPE), "inflates more than"),
    "1.5M-members.tar.gz": (_many_members_gz, "inflates more than"),
}


def _statement(tmp_path: Path, *, tar_sha256: str = "e" * 64) -> Path:
    """A set statement whose source is commit c…c: the hostile archives are never its tar."""
    from pipeline.formats import provenance as slsa

    document = slsa.statement(
        subjects={"SHA256SUMS": "b" * 64},
        build_type=slsa.BUILD_TYPE_SET,
        external={"lane": "rtx5090-container", "component_tag": "v0.7.0-qwen38-5090-beta.2", "source_repository": "https://x/y.git", "source_commit": "c" * 40},
        internal={},
        dependencies=[
            slsa.descriptor("source-commit", digest={"gitCommit": "c" * 40}, annotations={"kind": "local"}),
            slsa.descriptor("source-tree", digest={"gitTree": "d" * 40}),
            slsa.descriptor("source-tar", sha256=tar_sha256, annotations={"commit_time": 1_700_000_000}),
        ],
        byproducts=[],
        run_details=slsa.builder({}),
    )
    path = tmp_path / "set.provenance.intoto.json"
    path.write_bytes(slsa.statement_bytes(document))
    return path


_REBUILD_CHILD = """
import sys
from pathlib import Path
from pipeline.errors import PipelineError
from pipeline.formats import provenance as slsa
from pipeline.formats.lanes import find_lane
from pipeline.lanework.source import SourceSpec, resolve_archive
statement = slsa.read_statement(Path(sys.argv[2]).read_bytes(), origin=sys.argv[2])
claim = slsa.archive_claim(statement, origin=sys.argv[2], strict=False)  # rebuild --verify: a mismatch is recorded, the archive read on
try:
    resolved = resolve_archive(SourceSpec("archive", sys.argv[1], claim.commit, claim=claim), find_lane("5090"))
except PipelineError as error:
    print(error.render(), file=sys.stderr)
    sys.exit(int(error.exit_code))
print("accepted:", resolved.problems)
"""


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_build_from_a_hostile_source_archive_hashes_it_first_and_refuses_in_bounded_memory(name, tmp_path):
    import sys

    make, message = HOSTILE[name]
    archive = make(tmp_path / name)
    assert archive.stat().st_size < 4 * MIB
    statement = _statement(tmp_path)
    build = run_measured(sys.executable, "-m", "pipeline", "build", "--lane", "5090", "--source-archive", str(archive), "--provenance", str(statement), "--rehearsal", "--dist", str(tmp_path / "dist"))
    assert_refused_in_bounded_memory(build, 1, message)
    assert not (tmp_path / "dist" / "rtx5090-container" / "build").exists()
    rebuild = run_measured(sys.executable, "-c", _REBUILD_CHILD, str(archive), str(statement))
    assert_refused_in_bounded_memory(rebuild, 1, message)


def test_a_plain_tar_that_is_not_the_provenances_is_refused_before_a_header_is_read(tmp_path):
    """Strict (build): the SHA-256 differs, so the oversized PAX header is never parsed; rebuild reads on, bounded."""
    import sys

    archive = _big_pax_tar(tmp_path / "pax.tar")
    statement = _statement(tmp_path)
    build = run_measured(sys.executable, "-m", "pipeline", "build", "--lane", "5090", "--source-archive", str(archive), "--provenance", str(statement), "--rehearsal", "--dist", str(tmp_path / "dist"))
    assert_refused_in_bounded_memory(build, 5, "the source archive is not the tar the provenance names")
    assert "PAX" not in build["stderr"]
    rebuild = run_measured(sys.executable, "-c", _REBUILD_CHILD, str(archive), str(statement))
    assert_refused_in_bounded_memory(rebuild, 1, "has a PAX header declaring")


def test_a_header_declaring_more_than_its_limit_is_refused_before_it_is_read(tmp_path):
    """A .tar.gz that trips no ratio (random bytes follow): the GNU long-name header is refused by its declared size."""
    import sys

    archive = tmp_path / "long-name.tar.gz"
    header = tarfile.TarInfo("././@LongLink")
    header.type, header.size = tarfile.GNUTYPE_LONGNAME, 900 * MIB
    archive.write_bytes(gzip.compress(header.tobuf(tarfile.GNU_FORMAT) + os.urandom(MIB), mtime=0))
    statement = _statement(tmp_path)
    build = run_measured(sys.executable, "-m", "pipeline", "build", "--lane", "5090", "--source-archive", str(archive), "--provenance", str(statement), "--rehearsal", "--dist", str(tmp_path / "dist"))
    assert_refused_in_bounded_memory(build, 5, "the source archive is not the tar the provenance names")
    rebuild = run_measured(sys.executable, "-c", _REBUILD_CHILD, str(archive), str(statement))
    assert_refused_in_bounded_memory(rebuild, 1, f"has a GNU long-name header declaring {900 * MIB} bytes (at most 4097)")


def test_an_archive_of_more_members_than_the_limit_is_refused_as_it_streams(tmp_path):
    import sys

    from pipeline.lanework.source import MAX_ARCHIVE_MEMBERS

    archive = _many_members_tar(tmp_path / "many.tar", MAX_ARCHIVE_MEMBERS + 1)
    rebuild = run_measured(sys.executable, "-c", _REBUILD_CHILD, str(archive), str(_statement(tmp_path)))
    assert_refused_in_bounded_memory(rebuild, 1, f"holds more than {MAX_ARCHIVE_MEMBERS} members")


def test_a_sparse_archive_larger_than_a_source_is_refused_unread(tmp_path):
    import sys

    from pipeline.lanework.source import MAX_ARCHIVE_BYTES

    archive = tmp_path / "sparse.tar"
    with open(archive, "wb") as out:
        out.write(_header("f", size=MAX_ARCHIVE_BYTES * 8))
        out.truncate(MAX_ARCHIVE_BYTES * 8)
    rebuild = run_measured(sys.executable, "-c", _REBUILD_CHILD, str(archive), str(_statement(tmp_path)))
    assert_refused_in_bounded_memory(rebuild, 1, "larger than a source can be")


def test_a_matching_archive_is_hashed_before_it_is_parsed(repo, tmp_path, monkeypatch):
    """The order: the SHA-256 comparison refuses a strict mismatch before the bounded reader opens the archive."""
    from pipeline.lanework import source as source_module

    repo_path, commit = repo
    data = _archive(repo_path, commit)
    path = tmp_path / "s.tar.gz"
    path.write_bytes(gzip.compress(data, mtime=0))
    opened: list[str] = []
    real_open = source_module._open
    monkeypatch.setattr(source_module, "_open", lambda *a, **k: opened.append("open") or real_open(*a, **k))
    wrong = _claim(repo_path, commit, data + bytes(512))
    with pytest.raises(IntegrityError, match="not the tar the provenance names"):
        resolve_archive(SourceSpec("archive", str(path), commit, claim=wrong), find_lane("5090"))
    assert opened == []
    resolved = resolve_archive(SourceSpec("archive", str(path), commit, claim=_claim(repo_path, commit, data)), find_lane("5090"))
    assert resolved.archive == data and opened
