"""A `git archive` tarball as a build source: its identity is checked against its claim (the provenance)."""

from __future__ import annotations

import gzip
import io
import subprocess
import tarfile
from pathlib import Path

import pytest
from repokit import git, make_repo

from pipeline.errors import IntegrityError, RefusedError
from pipeline.formats.lanes import find_lane
from pipeline.infra.source import ArchiveClaim, SourceSpec, archive_tree, resolve_archive
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

    from pipeline.infra.source import archive_facts

    repo = tmp_path / "sample"
    commit = make_repo(repo, SAMPLE)
    data = _archive(repo, f"{commit}:")
    header, _mtime = archive_facts(data, origin="x")
    assert header is None
    assert archive_tree(data, origin="x") == git(repo, "rev-parse", f"{commit}^{{tree}}")
