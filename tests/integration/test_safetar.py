"""The bounded tar reader (pipeline/infra/safetar.py) behind every tar the pipeline reads.

Hostile archives are generated here, small on disk: a gzip bomb is one tar
header followed by the same 1 MiB-of-zeros gzip member repeated (a valid
multi-member gzip of ~2 MiB that inflates to 2 GiB); a GNU long-name header
declares 1 GiB and is followed by enough cheap bytes to satisfy it.  Memory
bounds are measured on a child process: its own high-water RSS (`VmHWM` of
/proc/self/status, written by the child as it exits).  Not `ru_maxrss`: Linux
carries the pre-exec high-water mark into it, so a child started from a large
pytest process (the whole suite) reports the parent's peak, not its own.
"""

from __future__ import annotations

import gzip
import io
import os
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import pytest
from repokit import ROOT

from pipeline.errors import InputError, IntegrityError, PipelineError
from pipeline.infra import archive, oci
from pipeline.infra.safetar import MAX_EXTENSION_CHAIN, SafeTar, TarLimits, inflate_chunks
from pipeline.lanework import source
from pipeline.stages import package, qualify

MIB = 1024 * 1024
RSS_BOUND_MIB = 120  # the reader's own peak RSS, interpreter included; the unbounded reader needed > 1 GiB


def _header(name: str, *, size: int = 0, kind: bytes = tarfile.REGTYPE, linkname: str = "") -> bytes:
    info = tarfile.TarInfo(name)
    info.type, info.size, info.linkname, info.mode = kind, size, linkname, 0o755 if kind == tarfile.DIRTYPE else 0o644
    return info.tobuf(tarfile.GNU_FORMAT, "utf-8", "surrogateescape")


def _repeated_gzip(first: bytes, filler: bytes, count: int) -> bytes:
    """A multi-member gzip: `first`, then `filler` `count` times, compressed once and repeated."""
    return gzip.compress(first, mtime=0) + gzip.compress(filler, mtime=0) * count


def write_bomb(path: Path, inflated: int = 2 * 1024 * MIB) -> Path:
    path.write_bytes(_repeated_gzip(_header("pkg/zeros", size=inflated), bytes(MIB), inflated // MIB))
    return path


def write_long_name(path: Path, declared: int = 1024 * MIB, kind: bytes = tarfile.GNUTYPE_LONGNAME) -> Path:
    header = tarfile.TarInfo("././@LongLink")
    header.type, header.size = kind, declared
    path.write_bytes(_repeated_gzip(header.tobuf(tarfile.GNU_FORMAT), b"a" * MIB, declared // MIB + 1))
    return path


def tar_bytes(*members: tuple[str, bytes, bytes, str]) -> bytes:
    """A plain tar of (name, type, data, linkname) members, written with tarfile (no name checks)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, kind, data, linkname in members:
            info = tarfile.TarInfo(name)
            info.type, info.size, info.linkname = kind, len(data), linkname
            tar.addfile(info, io.BytesIO(data) if data else None)
    return buffer.getvalue()


def tar_gz(path: Path, *members: tuple[str, bytes, bytes, str]) -> Path:
    path.write_bytes(gzip.compress(tar_bytes(*members), mtime=0))
    return path


PEAK_PRELUDE = """
import atexit, os
def _write_peak():
    with open("/proc/self/status") as status:
        peak = next(line.split()[1] for line in status if line.startswith("VmHWM:"))
    with open(os.environ["OMP_NINFER_TEST_PEAK_FILE"], "w") as out:
        out.write(peak)
atexit.register(_write_peak)
"""


def run_child(code: str, archive_path: str, timeout: float = 120) -> tuple[int, float, str]:
    """Run `code` on `archive_path` in a fresh interpreter; (exit status, its own peak RSS in MiB, its stderr)."""
    err_path, peak_path = Path(archive_path).with_suffix(".stderr"), Path(archive_path).with_suffix(".peak")
    env = dict(os.environ, OMP_NINFER_TEST_PEAK_FILE=str(peak_path))
    with open(err_path, "wb") as err:
        process = subprocess.Popen([sys.executable, "-c", PEAK_PRELUDE + code, archive_path], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err)
        watchdog = threading.Timer(timeout, process.kill)
        watchdog.start()
        try:
            _pid, status, _usage = os.wait4(process.pid, 0)
        finally:
            watchdog.cancel()
    process.returncode = os.waitstatus_to_exitcode(status)
    assert peak_path.is_file(), f"the child (exit {process.returncode}) did not report its peak RSS: {err_path.read_text()[-2000:]}"
    return process.returncode, int(peak_path.read_text()) / 1024, err_path.read_text()


CHILD = """
import sys
from pathlib import Path
from pipeline.infra.archive import read_tar_gz
from pipeline.errors import PipelineError
try:
    read_tar_gz(Path(sys.argv[1]))
except PipelineError as error:
    sys.stderr.write(error.render())
    sys.exit(9)
"""


# -- bombs and oversized headers, with memory measured ----------------------------------------------


def test_a_gzip_bomb_is_refused_early_with_little_memory(tmp_path):
    bomb = write_bomb(tmp_path / "bomb.tar.gz")
    assert bomb.stat().st_size < 4 * MIB
    started = time.monotonic()
    status, rss, err = run_child(CHILD, str(bomb))
    seconds = time.monotonic() - started
    assert status == 9, err
    assert "the archive inflates more than 100 times" in err and "compression bomb" in err
    assert rss < RSS_BOUND_MIB, f"peak RSS {rss:.0f} MiB"
    assert seconds < 15, f"took {seconds:.1f} s: the bomb was inflated far before the refusal"


@pytest.mark.parametrize(("kind", "label"), [(tarfile.GNUTYPE_LONGNAME, "GNU long-name"), (tarfile.GNUTYPE_LONGLINK, "GNU long-name"), (tarfile.XHDTYPE, "PAX"), (tarfile.XGLTYPE, "PAX")])
def test_an_extension_header_declaring_1_gib_is_refused_before_it_is_read(tmp_path, kind, label):
    archive_path = write_long_name(tmp_path / "long.tar.gz", kind=kind)
    status, rss, err = run_child(CHILD, str(archive_path))
    assert status == 9, err
    assert f"has a {label} header declaring {1024 * MIB} bytes" in err
    assert rss < RSS_BOUND_MIB, f"peak RSS {rss:.0f} MiB: the header's data was read into memory"


def test_the_unbounded_reader_really_reads_a_declared_long_name_into_memory(tmp_path):
    # The control: plain tarfile (what check-assets used) on a smaller declaration grows by that much.
    # (tarfile's own 'r|gz' reads one gzip member only; the cheap archive here has many.)
    archive_path = write_long_name(tmp_path / "long.tar.gz", declared=256 * MIB)
    code = "import gzip, sys, tarfile\nwith tarfile.open(fileobj=gzip.open(sys.argv[1]), mode='r|') as t:\n    list(t)\n"
    _status, rss, _err = run_child(code, str(archive_path))
    assert rss > 256, f"plain tarfile peaked at {rss:.0f} MiB"


def test_a_plain_tar_bomb_is_bounded_by_total_size(tmp_path):
    limits = TarLimits(max_total_bytes=8 * MIB)
    data = tar_bytes(("pkg/big", tarfile.REGTYPE, bytes(16 * MIB), ""))
    with pytest.raises(IntegrityError, match=f"inflates to more than {8 * MIB} bytes"), SafeTar(data, compression=None, limits=limits) as tar:
        for member in tar:
            for _chunk in tar.chunks(member):
                pass


def test_a_gzip_bomb_outside_a_tar_is_refused_too(tmp_path):
    path = tmp_path / "source.tar.gz"
    path.write_bytes(_repeated_gzip(b"", bytes(MIB), 2048))
    with pytest.raises(IntegrityError, match="inflates more than 100 times"):
        for _chunk in inflate_chunks(path):
            pass


def test_a_chain_of_extension_headers_is_refused(tmp_path):
    chain = b""
    for index in range(MAX_EXTENSION_CHAIN + 2):
        chain += _header("././@LongLink", size=8, kind=tarfile.GNUTYPE_LONGNAME) + f"name{index:03d}".encode().ljust(512, b"\0")
    path = tmp_path / "chain.tar.gz"
    path.write_bytes(gzip.compress(chain + _header("pkg/x") + bytes(1024), mtime=0))
    with pytest.raises(IntegrityError, match=f"more than {MAX_EXTENSION_CHAIN} extension headers in a row"):
        archive.read_tar_gz(path)


def test_member_count_and_name_length_are_bounded(tmp_path):
    many = tar_gz(tmp_path / "many.tar.gz", *[(f"pkg/f{i}", tarfile.REGTYPE, b"", "") for i in range(11)])
    with pytest.raises(IntegrityError, match="holds more than 10 members"):
        archive.read_tar_gz(many, limits=TarLimits(max_members=10))
    assert len(archive.read_tar_gz(many, limits=TarLimits(max_members=11))) == 11
    long = tar_gz(tmp_path / "long.tar.gz", ("pkg/" + "n" * 5000, tarfile.REGTYPE, b"", ""))  # tarfile writes a GNU long name
    with pytest.raises(IntegrityError, match="declaring 5005 bytes|name of more than 4096 bytes"):
        archive.read_tar_gz(long)


# -- names that leave the archive, for every member type and every reader ------------------------------


HOSTILE_MEMBERS = [
    ("a folder with ..", ("pkg/../../etc", tarfile.DIRTYPE, b"", "")),
    ("an absolute folder", ("/etc/cron.d", tarfile.DIRTYPE, b"", "")),
    ("a file with ..", ("pkg/../evil.txt", tarfile.REGTYPE, b"x", "")),
    ("an absolute file", ("/tmp/evil.txt", tarfile.REGTYPE, b"x", "")),
    ("a symlink named with ..", ("pkg/../link", tarfile.SYMTYPE, b"", "target")),
    ("a hard link to ..", ("pkg/hard", tarfile.LNKTYPE, b"", "../../etc/passwd")),
]


def _readers(tmp_path):
    return {
        "check-assets (archive.read_tar_gz)": lambda path, raw: archive.read_tar_gz(path),
        "qualify (the package's members)": lambda path, raw: qualify._read_package(path),
        "qualify (bin/ for the smoke run)": lambda path, raw: qualify._extract_bin(path, tmp_path / "smoke", "ninfer-serve"),
        "image (a base layer's members)": lambda path, raw: oci.uncompressed_digest(path, oci.LAYER_GZIP, on_member=lambda member, tar: None),
        "image (a layer's diff_id)": lambda path, raw: oci.uncompressed_digest(path, oci.LAYER_GZIP),
        "package (the runtime source)": lambda path, raw: package._tar_members(raw),
        "build (exporting the runtime source)": lambda path, raw: source.export_tree(raw, tmp_path / "export" / "src"),
    }


@pytest.mark.parametrize(("label", "member"), HOSTILE_MEMBERS, ids=[m[0] for m in HOSTILE_MEMBERS])
def test_every_reader_refuses_a_member_leaving_the_archive(tmp_path, label, member):
    raw = tar_bytes(("pkg", tarfile.DIRTYPE, b"", ""), ("pkg/ok.txt", tarfile.REGTYPE, b"ok", ""), member)
    path = tmp_path / "hostile.tar.gz"
    path.write_bytes(gzip.compress(raw, mtime=0))
    sentinel = tmp_path / "outside"
    sentinel.mkdir()
    (sentinel / "keep").write_text("unchanged")
    before = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*"))
    for name, read in _readers(tmp_path).items():
        with pytest.raises((IntegrityError, InputError)) as caught:
            read(path, raw)
        assert "leaves the archive's folder" in caught.value.what, (name, caught.value.render())
        assert caught.value.field == member[0] or caught.value.field == member[3], (name, caught.value.field)
    after = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if not p.relative_to(tmp_path).as_posix().startswith(("export", "smoke")))
    assert after == before and (sentinel / "keep").read_text() == "unchanged"
    assert not (tmp_path / "evil.txt").exists() and not Path("/tmp/evil.txt").exists()


def test_every_reader_refuses_a_bomb(tmp_path):
    path = write_bomb(tmp_path / "bomb.tar.gz", inflated=256 * MIB)
    for name, read in _readers(tmp_path).items():
        if name.startswith(("package", "build")):
            continue  # those read an uncompressed git archive held in memory
        started = time.monotonic()
        with pytest.raises(PipelineError) as caught:
            read(path, b"")
        assert "inflates more than 100 times" in caught.value.what, (name, caught.value.render())
        assert time.monotonic() - started < 10, name


def test_a_well_formed_package_still_reads(tmp_path):
    payload = tmp_path / "payload"
    (payload / "bin").mkdir(parents=True)
    (payload / "bin" / "ninfer-serve").write_bytes(os.urandom(3 * MIB))
    (payload / "build-identity.json").write_text('{"artifact_type": "x"}\n')
    result = archive.write_tar_gz(payload, tmp_path / "pkg.tar.gz", prefix="pkg", mtime=1700000000, level=6, jobs=1)
    entries = archive.read_tar_gz(tmp_path / "pkg.tar.gz")
    assert [(e.name, e.kind) for e in entries] == [("pkg", "dir"), ("pkg/bin", "dir"), ("pkg/bin/ninfer-serve", "file"), ("pkg/build-identity.json", "file")]
    assert len(entries) == result.members
    top, members, hashes = qualify._read_package(tmp_path / "pkg.tar.gz")
    assert top == "pkg" and members == {"build-identity.json": b'{"artifact_type": "x"}\n'} and list(hashes) == ["bin/ninfer-serve"]


def test_a_zero_filled_package_below_the_ratio_floor_is_not_a_bomb(tmp_path):
    # Small archives are mostly headers and padding: the ratio bound starts at ratio_floor.
    path = tar_gz(tmp_path / "zeros.tar.gz", ("pkg", tarfile.DIRTYPE, b"", ""), ("pkg/zeros", tarfile.REGTYPE, bytes(8 * MIB), ""))
    assert [e.size for e in archive.read_tar_gz(path) if e.kind == "file"] == [8 * MIB]


def test_export_still_extracts_a_clean_git_archive(tmp_path):
    raw = tar_bytes(("src", tarfile.DIRTYPE, b"", ""), ("src/main.cpp", tarfile.REGTYPE, b"int main(){}\n", ""), ("src/link", tarfile.SYMTYPE, b"", "main.cpp"))
    source.export_tree(raw, tmp_path / "out")
    assert (tmp_path / "out" / "src" / "main.cpp").read_bytes() == b"int main(){}\n"
    assert os.readlink(tmp_path / "out" / "src" / "link") == "main.cpp"
    assert package._tar_members(raw) == {"src/main.cpp": b"int main(){}\n"}


# -- extraction: the pipeline's own rules, the same on every Python ---------------------------------------------


def _moded(name: str, kind: bytes, mode: int = 0o644, data: bytes = b"", linkname: str = "", mtime: float = 1_700_000_000) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.size, info.linkname, info.mtime = kind, mode, len(data), linkname, mtime
    info.uid, info.gid, info.uname, info.gname = 4242, 4242, "someone", "others"
    return info


def _archive(*members: tuple[tarfile.TarInfo, bytes], pax: dict[str, str] | None = None) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT if pax else tarfile.GNU_FORMAT) as tar:
        for info, data in members:
            if pax:
                info.pax_headers = dict(pax)
            tar.addfile(info, io.BytesIO(data) if data else None)
    return buffer.getvalue()


def test_export_gives_the_data_filters_tree_on_every_python(tmp_path):
    raw = _archive(
        (_moded("src", tarfile.DIRTYPE, 0o777, mtime=1_600_000_000), b""),
        (_moded("src/plain.txt", tarfile.REGTYPE, 0o666, b"plain\n"), b"plain\n"),
        (_moded("src/tool.sh", tarfile.REGTYPE, 0o4777, b"#!/bin/sh\n"), b"#!/bin/sh\n"),  # set-uid and world-writable
        (_moded("src/private", tarfile.REGTYPE, 0o070, b"p"), b"p"),  # no owner bits at all
        (_moded("src/sub/", tarfile.DIRTYPE, 0o700, mtime=1_500_000_000), b""),
        (_moded("src/sub/link", tarfile.SYMTYPE, 0o777, linkname="../plain.txt"), b""),
        (_moded("src/sub/up", tarfile.SYMTYPE, 0o777, linkname=".."), b""),  # to a folder inside: allowed
        (_moded("./src/./dot.txt", tarfile.REGTYPE, 0o644, b"d"), b"d"),
    )
    out = tmp_path / "out"
    source.export_tree(raw, out)
    modes = {p.relative_to(out).as_posix(): p.lstat().st_mode & 0o7777 for p in sorted(out.rglob("*")) if not p.is_symlink()}
    # The data filter's file modes: no set-uid, no group/other write, the owner may always read and write,
    # and nobody may execute what the owner may not; folders 0755 whatever the archive or the umask says.
    assert modes == {"src": 0o755, "src/dot.txt": 0o644, "src/plain.txt": 0o644, "src/private": 0o640, "src/sub": 0o755, "src/tool.sh": 0o755}
    assert os.readlink(out / "src" / "sub" / "link") == "../plain.txt" and (out / "src" / "sub" / "link").read_bytes() == b"plain\n"
    assert os.readlink(out / "src" / "sub" / "up") == ".."
    # One fixed time, whatever the archive (the commit) says, folders included, after the links were made in them:
    # -lineinfo records source mtimes in device code, and a cached object must not carry another commit's.
    assert {int(p.lstat().st_mtime) for p in [out, *out.rglob("*")] if not p.is_symlink()} == {source.EXPORT_MTIME}
    # No owner from the archive, even as root.
    assert {p.lstat().st_uid for p in out.rglob("*")} == {os.getuid()}


def test_export_makes_the_folders_an_archive_does_not_list(tmp_path):
    raw = _archive(_f("src/deep/a.txt", b"a"), _l("src/deep/l", "a.txt"))  # no folder members at all
    out = tmp_path / "out"
    source.export_tree(raw, out)
    assert (out / "src" / "deep" / "a.txt").read_bytes() == b"a" and (out / "src" / "deep" / "l").read_bytes() == b"a"
    assert int((out / "src" / "deep" / "a.txt").stat().st_mtime) == source.EXPORT_MTIME


def _long_chain() -> list[tuple[tarfile.TarInfo, bytes]]:
    """CVE-2025-4517: names through links longer than PATH_MAX, so a non-strict realpath says "inside"."""
    folder, steps, path, members = "d" * 247, "abcdefghijklmnop", "", []
    for step in steps:
        members.append((_moded(f"{path}{folder}", tarfile.DIRTYPE, 0o755), b""))
        members.append((_moded(f"{path}{step}", tarfile.SYMTYPE, linkname=folder), b""))
        path = f"{path}{folder}/"
    chain = "/".join(steps) + "/" + "l" * 254
    members.append((_moded(chain, tarfile.SYMTYPE, linkname="../" * len(steps)), b""))
    members.append((_moded("escape", tarfile.SYMTYPE, linkname=chain + "/.." * 3), b""))
    members.append((_moded("escape/pwned", tarfile.REGTYPE, data=b"outside\n"), b"outside\n"))
    return members


def _f(name: str, data: bytes = b"x") -> tuple[tarfile.TarInfo, bytes]:
    return (_moded(name, tarfile.REGTYPE, data=data), data)


def _l(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tuple[tarfile.TarInfo, bytes]:
    return (_moded(name, kind, linkname=target), b"")


REFUSED = [
    ("an absolute symbolic link", [_l("src/l", "/etc")], "absolute or malformed"),
    ("a symbolic link up and out", [_l("src/l", "../../outside")], "leaves the archive's folder"),
    ("a file written through a link", [_l("src/l", "."), _f("src/l/x")], "inside a symbolic link"),
    ("a link out through another link", [_l("x", "y/.."), _l("y", ".")], "goes through another link"),
    ("a hard link", [_f("victim"), _l("h", "victim", tarfile.LNKTYPE)], "hard link"),
    ("a hard link to a symbolic link", [_l("x/y/s", "../../victim"), _l("h", "x/y/s", tarfile.LNKTYPE)], "hard link"),
    ("a FIFO", [(_moded("src/f", tarfile.FIFOTYPE), b"")], "special file"),
    ("a character device", [(_moded("src/c", tarfile.CHRTYPE), b"")], "special file"),
    ("a file replaced by a link", [_f("src/a"), _l("src/a", "../../outside")], "two members of one name"),
    ("a file over a folder", [_f("src/d/x"), _f("src/d")], "two members of one name"),
    ("names through links longer than PATH_MAX", _long_chain(), "inside a symbolic link"),
    ("a time before 1970", [(_moded("src/t", tarfile.REGTYPE, mtime=-1), b"")], "impossible time"),
]


@pytest.mark.parametrize(("label", "members", "reason"), REFUSED, ids=[r[0] for r in REFUSED])
def test_export_refuses_what_could_leave_the_folder(tmp_path, label, members, reason):
    raw = _archive((_moded("src", tarfile.DIRTYPE, 0o755), b""), _f("src/ok.txt", b"ok"), *members)
    base = tmp_path / "a" / "b" / "c"
    out = base / "out"
    before = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*"))
    with pytest.raises(InputError) as caught:
        source.export_tree(raw, out)
    assert caught.value.what.startswith("the archive holds") and reason in caught.value.what, caught.value.render()
    assert caught.value.file == "the runtime source's git archive"
    after = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if not p.is_relative_to(out))
    assert after == [*before, "a", "a/b", "a/b/c"] or after == before, after
    # No link was made at all: links come last, after every member passed.
    assert not [p for p in out.rglob("*") if p.is_symlink()]


def test_a_pax_time_or_link_target_that_python_cannot_take_is_a_refusal_not_a_crash(tmp_path):
    cases = [({"mtime": value}, "impossible time") for value in ("1e30", "inf", "nan", "-5")] + [({"linkpath": "a\x00b"}, "absolute or malformed")]
    for pax, reason in cases:
        raw = _archive(_l("src/l", "x"), pax=pax)
        with pytest.raises(InputError, match=reason):
            source.export_tree(raw, tmp_path / "out")
