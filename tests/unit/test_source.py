from __future__ import annotations

import pytest
from repokit import git, make_repo

from pipeline.errors import RefusedError, UsageError
from pipeline.formats.lanes import find_lane
from pipeline.lanework.source import archive_tar, parse_source, resolve_source

COMMIT = "7a25cd72f490183e4113f1e84e68e36d653ddd28"


def test_default_is_the_embedded_sample():
    spec = parse_source(None)
    assert spec.kind == "embedded-sample" and spec.subdir == "runtime/sample"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("https://github.com/alphastorm/ninfer.git@main", "full 40-hex commit"),
        ("https://github.com/alphastorm/ninfer.git@v0.7.0-qwen38-4090-beta.2", "full 40-hex commit"),
        ("https://github.com/alphastorm/ninfer.git@7a25cd72", "full 40-hex commit"),
        ("https://github.com/alphastorm/ninfer.git", "remote source needs a full commit"),
        ("/some/checkout@HEAD", "full 40-hex commit"),
    ],
)
def test_moving_refs_and_short_hashes_are_refused(value, message):
    with pytest.raises(UsageError, match=message):
        parse_source(value)


def test_url_with_commit_is_accepted():
    spec = parse_source(f"https://github.com/alphastorm/ninfer.git@{COMMIT}")
    assert (spec.kind, spec.commit) == ("remote", COMMIT)


def _unpinned_lane():
    return find_lane("5090")


def test_dirty_tree_is_refused(tmp_path):
    repo = tmp_path / "src"
    repo.mkdir()
    (repo / "a.txt").write_text("one\n")
    make_repo(repo)
    (repo / "a.txt").write_text("two\n")
    with pytest.raises(RefusedError, match="uncommitted changes"):
        resolve_source(parse_source(str(repo)), _unpinned_lane())
    (repo / "a.txt").write_text("one\n")
    (repo / "new.txt").write_text("untracked\n")
    with pytest.raises(RefusedError, match="uncommitted changes"):
        resolve_source(parse_source(str(repo)), _unpinned_lane())


def test_local_checkout_must_be_at_the_requested_commit(tmp_path):
    repo = tmp_path / "src"
    repo.mkdir()
    (repo / "a.txt").write_text("one\n")
    first = make_repo(repo)
    (repo / "a.txt").write_text("two\n")
    git(repo, "commit", "-qam", "second")
    with pytest.raises(RefusedError, match="not at the requested commit") as info:
        resolve_source(parse_source(f"{repo}@{first}"), _unpinned_lane())
    assert info.value.expected == first
    resolved = resolve_source(parse_source(str(repo)), _unpinned_lane())
    assert resolved.commit == git(repo, "rev-parse", "HEAD")


def test_lane_pin_refuses_another_commit(sample_repo):
    repo, commit = sample_repo
    lane = find_lane("4090")  # pins 7a25cd72...
    with pytest.raises(RefusedError, match="not the lane's pinned commit") as info:
        resolve_source(parse_source(str(repo)), lane)
    assert info.value.field == "source.commit" and info.value.found == commit


def test_remote_url_at_commit_is_fetched_exactly(tmp_path):
    origin = tmp_path / "origin"
    origin.mkdir()
    (origin / "f.txt").write_bytes(b"line\r\nwith crlf kept\n")
    commit = make_repo(origin)
    spec = parse_source(f"{origin.as_uri()}@{commit}")  # file:///... on every platform
    resolved = resolve_source(spec, _unpinned_lane())
    assert resolved.commit == commit
    tar = archive_tar(resolved)
    assert b"line\r\nwith crlf kept\n" in tar  # git archive without EOL conversion
    missing = parse_source(f"{origin.as_uri()}@{'0' * 40}")
    from pipeline.errors import RemoteError

    with pytest.raises(RemoteError):
        resolve_source(missing, _unpinned_lane())


def test_subtree_export_carries_the_commit_time_not_the_clock(tmp_path):
    """git stamps a tree export with the current time; the export must carry the commit's."""
    import io
    import tarfile

    from pipeline.lanework.source import SourceSpec

    repo = tmp_path / "src"
    (repo / "runtime" / "sample").mkdir(parents=True)
    (repo / "runtime" / "sample" / "a.cu").write_text("// kernel\n")
    make_repo(repo)  # committed at 2026-11-01T12:00:00Z, long before "now"
    resolved = resolve_source(SourceSpec("local", str(repo), None, "runtime/sample"), _unpinned_lane())
    data = archive_tar(resolved)
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        members = archive.getmembers()
    assert resolved.commit_time == 1793534400
    assert {m.mtime for m in members} == {resolved.commit_time}
    assert [m.name for m in members if m.isfile()] == ["a.cu"]
