"""Deterministic tar.gz: identical bytes whatever the core count, readable by GNU tar and gzip."""

from __future__ import annotations

import gzip
import hashlib
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from pipeline.errors import InputError
from pipeline.infra import archive


def _payload(root: Path) -> Path:
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "ninfer-serve").write_bytes(os.urandom(3 * archive.BLOCK_SIZE + 1234) + b"ELF" * 50000)
    os.chmod(root / "bin" / "ninfer-serve", 0o700)
    (root / "README.md").write_text("# readme\n" * 100)
    (root / "licenses" / "third_party" / "x").mkdir(parents=True)
    (root / "licenses" / "third_party" / "x" / "LICENSE").write_text("MIT\n")
    (root / "empty.txt").write_bytes(b"")
    return root


@pytest.mark.parametrize("size", [0, 1, archive.BLOCK_SIZE - 1, archive.BLOCK_SIZE, archive.BLOCK_SIZE + 1, 3 * archive.BLOCK_SIZE + 7])
def test_gzip_bytes_do_not_depend_on_threads_and_decompress_with_gnu_gzip(size):
    data = (os.urandom(size // 2) + b"abcabcabd" * size)[:size]
    outputs = {jobs: archive.gzip_bytes(data, mtime=1700000000, jobs=jobs) for jobs in (1, 2, 5)}
    assert len(set(outputs.values())) == 1
    compressed = outputs[1]
    assert gzip.decompress(compressed) == data
    assert subprocess.run(["gzip", "-dc"], input=compressed, capture_output=True, check=True).stdout == data
    # Header: deflate, no FNAME flag, fixed mtime, XFL=2 (level 9), OS=255.
    assert compressed[:10] == b"\x1f\x8b\x08\x00" + (1700000000).to_bytes(4, "little") + b"\x02\xff"


def test_tar_gz_is_reproducible_sorted_and_anonymous(tmp_path):
    payload = _payload(tmp_path / "payload")
    first = archive.write_tar_gz(payload, tmp_path / "a.tar.gz", prefix="pkg-1", mtime=1700000000, jobs=1)
    # Touch, chmod and re-create files: nothing of it may reach the bytes.
    os.utime(payload / "README.md", (1, 1))
    os.chmod(payload / "README.md", 0o664)
    second = archive.write_tar_gz(payload, tmp_path / "b.tar.gz", prefix="pkg-1", mtime=1700000000, jobs=3)
    assert first == second
    assert (tmp_path / "a.tar.gz").read_bytes() == (tmp_path / "b.tar.gz").read_bytes()
    assert first.sha256 == hashlib.sha256((tmp_path / "a.tar.gz").read_bytes()).hexdigest()

    with tarfile.open(tmp_path / "a.tar.gz") as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names == sorted(names, key=lambda n: n.encode())
    assert names[0] == "pkg-1" and all(n == "pkg-1" or n.startswith("pkg-1/") for n in names)
    for member in members:
        assert (member.uid, member.gid, member.uname, member.gname, member.mtime) == (0, 0, "", "", 1700000000)
        assert member.mode == (0o755 if member.isdir() or member.name.endswith("ninfer-serve") else 0o644)
    listing = subprocess.run(["tar", "tvzf", str(tmp_path / "a.tar.gz")], capture_output=True, text=True, check=True).stdout
    assert "0/0" in listing and "pkg-1/bin/ninfer-serve" in listing
    out = tmp_path / "x"
    out.mkdir()
    subprocess.run(["tar", "xzf", str(tmp_path / "a.tar.gz"), "-C", str(out)], check=True)
    assert (out / "pkg-1" / "bin" / "ninfer-serve").read_bytes() == (payload / "bin" / "ninfer-serve").read_bytes()
    assert archive.tar_size(archive.collect_members(payload, "pkg-1")) == first.uncompressed_size


def test_gnu_tar_reads_the_same_members_as_our_reader(tmp_path):
    payload = _payload(tmp_path / "payload")
    archive.write_tar_gz(payload, tmp_path / "a.tar.gz", prefix="top", mtime=5)
    entries = {e.name: e for e in archive.read_tar_gz(tmp_path / "a.tar.gz")}
    gnu = subprocess.run(["tar", "tzf", str(tmp_path / "a.tar.gz")], capture_output=True, text=True, check=True).stdout.split()
    assert sorted(n.rstrip("/") for n in gnu) == sorted(entries)
    assert entries["top/empty.txt"].sha256 == hashlib.sha256(b"").hexdigest()
    assert archive.gzip_header_fields(tmp_path / "a.tar.gz") == (0, 5)


def test_links_in_a_payload_are_refused_naming_the_file(tmp_path):
    payload = _payload(tmp_path / "payload")
    (payload / "bin" / "link").symlink_to("ninfer-serve")
    with pytest.raises(InputError, match="symbolic link") as caught:
        archive.write_tar_gz(payload, tmp_path / "a.tar.gz", prefix="top", mtime=5)
    assert caught.value.file.endswith("bin/link")
    assert not (tmp_path / "a.tar.gz").exists()


def test_an_epoch_beyond_32_bits_is_refused(tmp_path):
    with pytest.raises(InputError, match="does not fit"):
        archive.write_tar_gz(_payload(tmp_path / "p"), tmp_path / "a.tar.gz", prefix="top", mtime=2**32)


def test_compression_threads_are_spread_one_per_allowed_cpu_and_the_caller_keeps_its_own():
    import threading

    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    pin = archive._spread_workers()
    if len(allowed) < 2:
        assert pin is None  # nothing to spread over
        return
    assert pin is not None
    seen: list[set[int]] = []

    def worker() -> None:
        pin()
        seen.append(os.sched_getaffinity(0))

    for _ in range(len(allowed) + 1):  # one more thread than CPUs: round robin
        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()
    assert seen == [{cpu} for cpu in allowed] + [{allowed[0]}]
    assert sorted(os.sched_getaffinity(0)) == allowed
