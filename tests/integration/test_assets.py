"""The closed asset set: names in one place, strict checksum files, and check-assets on real sets.

The set tests use the 4090 lane packaged from mingw-built PE binaries (one
build + package per session); each negative case tampers with a copy and
asserts the refusal names the offending file.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from winfixtures import packaged_native_set

from pipeline.cli import main
from pipeline.errors import IntegrityError
from pipeline.formats.assets import OUTER_SUMS, asset_set, check_assets, parse_sums, render_sums
from pipeline.formats.lanes import find_lane

H1, H2 = "1" * 64, "a" * 64


def test_native_set_is_the_eleven_names_of_the_issue():
    lane = find_lane("4090")
    names = asset_set(lane, 2).names()
    stem, platform = "ninfer-rtx4090-native-v0.7.0-beta.2", "windows-x86_64-cuda13.3-rtx4090"
    assert names == sorted([
        f"{stem}-{platform}.tar.gz", f"{stem}-source.tar.gz", f"{stem}-{platform}.spdx.json", f"{stem}-{platform}.cdx.json",
        f"{stem}-{platform}.SHA256SUMS", "package-build-receipt.json", "Install-Release.ps1", "Control-Release.ps1",
        "Control-GpuOwner.ps1", "Protect-StateRoot.ps1", "SHA256SUMS",
    ])
    assert len(asset_set(lane, 2).outer_names()) == 10
    # The CycloneDX line sorts between the inner SHA256SUMS and the SPDX file (anchor §7.1).
    ordered = [n for n in sorted(names) if n.startswith(f"{stem}-{platform}.")]
    assert [n.removeprefix(f"{stem}-{platform}") for n in ordered] == [".SHA256SUMS", ".cdx.json", ".spdx.json", ".tar.gz"]
    assert asset_set(find_lane("3090"), 7).name_of("package") == "ninfer-rtx3090-native-v0.7.0-beta.7-windows-x86_64-cuda13.3-rtx3090.tar.gz"


def test_container_set_has_seven_files_and_no_scripts():
    expected = asset_set(find_lane("5090"))
    assert expected.names() == sorted([
        "ninfer-qwen38-rtx5090-v0.7.0-linux-x86_64-cuda13.1.tar.gz",
        "ninfer-qwen38-rtx5090-v0.7.0-source.tar.gz",
        "ninfer-qwen38-rtx5090-v0.7.0-linux-x86_64-cuda13.1.spdx.json",
        "ninfer-qwen38-rtx5090-v0.7.0-linux-x86_64-cuda13.1.cdx.json",
        "ninfer-qwen38-rtx5090-v0.7.0-linux-x86_64-cuda13.1.SHA256SUMS",
        "package-build-receipt.json",
        "SHA256SUMS",
    ])
    assert expected.scripts() == []


def test_sums_round_trip_sorted_lf_ascii():
    data = render_sums({"b.txt": H2, "a.txt": H1})
    assert data == f"{H1}  a.txt\n{H2}  b.txt\n".encode()
    assert parse_sums(data, file="SHA256SUMS") == {"a.txt": H1, "b.txt": H2}
    assert parse_sums(render_sums({"bin/x.exe": H1}, paths=True), file="x", paths=True) == {"bin/x.exe": H1}
    with pytest.raises(ValueError):
        render_sums({"bin/x.exe": H1})


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (f"{H1}  a.txt\r\n".encode(), "carriage return"),
        (f"{H1}  a.txt\n{H1}  a.txt\n".encode(), "duplicate line"),
        (f"{H1}  b.txt\n{H2}  a.txt\n".encode(), "out of order"),
        (f"{H1}  a.txt".encode(), "does not end with a newline"),
        (f"{H1} *a.txt\n".encode(), "is not '<64 lowercase hex>"),
        (f"{H2.upper()}  a.txt\n".encode(), "is not '<64 lowercase hex>"),
        (f"{H1}  dir/a.txt\n".encode(), "names a path"),
        (b"", "empty"),
        (f"{H1}  \xe4.txt\n".encode("latin-1"), "non-ASCII"),
    ],
)
def test_malformed_sums_are_refused_naming_the_file(data, message):
    with pytest.raises(IntegrityError, match=message) as caught:
        parse_sums(data, file="/x/SHA256SUMS")
    assert caught.value.file == "/x/SHA256SUMS"


# -- real sets ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def native_set(tmp_path_factory):
    workspace, dist = packaged_native_set(tmp_path_factory)
    return workspace, dist / "rtx4090-windows-native" / "assets"


@pytest.fixture
def copy_of_set(native_set, tmp_path):
    workspace, assets_dir = native_set
    target = tmp_path / "download"
    shutil.copytree(assets_dir, target)
    return workspace, target


def _rewrite_outer(directory: Path) -> None:
    import hashlib

    entries = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in directory.iterdir() if p.name != OUTER_SUMS}
    (directory / OUTER_SUMS).write_bytes(render_sums(entries))


@pytest.mark.slow
def test_packaged_set_passes_check_assets_by_name_alone(native_set, capsys):
    workspace, assets_dir = native_set
    report = check_assets(assets_dir, lanes_dir=workspace.lanes_dir)
    assert report.lane == "rtx4090-windows-native" and report.component_tag == "v0.7.0-qwen38-4090-beta.2"
    assert len(report.files) == 11 and report.spdx_files == report.payload_files
    assert main(["check-assets", str(assets_dir), "--lanes-dir", str(workspace.lanes_dir), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["result"] == "ok"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("tamper", "names", "message"),
    [
        (lambda d: (d / "notes.txt").write_text("x\n"), "notes.txt", "unexpected file"),
        (lambda d: (d / "Control-Release.ps1").unlink(), "Control-Release.ps1", "missing file"),
        (lambda d: (d / "package-build-receipt.json").rename(d / "package-receipt.json"), "package-receipt.json", "misnamed file"),
        (lambda d: (d / "Install-Release.ps1").write_bytes((d / "Install-Release.ps1").read_bytes() + b"\n"), "Install-Release.ps1", "hash mismatch"),
        (lambda d: (d / "sub").mkdir(), "sub", "not a plain file"),
    ],
)
def test_a_tampered_set_is_refused_naming_the_file(copy_of_set, tamper, names, message, capsys):
    workspace, directory = copy_of_set
    tamper(directory)
    with pytest.raises(IntegrityError, match=message) as caught:
        check_assets(directory, lanes_dir=workspace.lanes_dir)
    assert Path(caught.value.file).name == names
    assert names in str(caught.value)
    # The CLI says the same in one paragraph and exits with the integrity code.
    assert main(["check-assets", str(directory), "--lanes-dir", str(workspace.lanes_dir)]) == 5
    assert names in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda text: text + text.splitlines(keepends=True)[0], "duplicate line|out of order"),
        (lambda text: text.replace("\n", "\r\n"), "carriage return"),
        (lambda text: "".join(sorted(text.splitlines(keepends=True), reverse=True)), "out of order"),
        (lambda text: "".join(text.splitlines(keepends=True)[1:]), "does not list"),
    ],
)
def test_a_broken_outer_sums_file_is_refused(copy_of_set, edit, message):
    workspace, directory = copy_of_set
    sums = directory / OUTER_SUMS
    sums.write_bytes(edit(sums.read_text()).encode())
    with pytest.raises(IntegrityError, match=message) as caught:
        check_assets(directory, lanes_dir=workspace.lanes_dir)
    assert Path(caught.value.file).name == OUTER_SUMS


@pytest.mark.slow
def test_a_duplicate_line_is_named_as_such(copy_of_set):
    workspace, directory = copy_of_set
    sums = directory / OUTER_SUMS
    lines = sums.read_text().splitlines(keepends=True)
    sums.write_text("".join([lines[0], *lines]))
    with pytest.raises(IntegrityError, match="duplicate line") as caught:
        check_assets(directory, lanes_dir=workspace.lanes_dir)
    assert Path(caught.value.file).name == OUTER_SUMS


@pytest.mark.slow
def test_a_receipt_that_lies_is_refused_even_with_fixed_checksums(copy_of_set):
    workspace, directory = copy_of_set
    receipt_path = directory / "package-build-receipt.json"
    receipt = json.loads(receipt_path.read_text())
    receipt["qualification_status"] = "qualified"
    receipt_path.write_text(json.dumps(receipt, indent=2, sort_keys=True) + "\n")
    _rewrite_outer(directory)
    with pytest.raises(IntegrityError, match="receipt disagrees") as caught:
        check_assets(directory, lanes_dir=workspace.lanes_dir)
    assert caught.value.field == "qualification_status"
    assert Path(caught.value.file).name == "package-build-receipt.json"


@pytest.mark.slow
def test_a_repacked_package_with_fixed_outer_sums_is_caught_by_the_inner_sums(copy_of_set):
    workspace, directory = copy_of_set
    package = next(directory.glob("*-rtx4090.tar.gz"))
    package.write_bytes(package.read_bytes()[:-8] + b"\0" * 8)
    _rewrite_outer(directory)
    with pytest.raises(IntegrityError, match="hash mismatch") as caught:
        check_assets(directory, lanes_dir=workspace.lanes_dir)
    assert Path(caught.value.file).name == package.name


def test_build_receipt_names_the_receipt_that_qualify_writes():
    from pipeline.formats import assets
    from pipeline.stages import qualify

    assert set(assets.QUALIFICATION_SUMMARY_TYPES.values()) == {qualify.LANE_RECEIPT_TYPE}


def _repack_with(directory: Path, extra: bytes, *, gzip_bytes=None) -> Path:
    """The attacker's repack: the package with `extra` tar members appended, every checksum and
    the receipt re-bound to the new bytes, so only the package reader itself can refuse it."""
    import gzip
    import hashlib

    package = next(p for p in directory.glob("*.tar.gz") if not p.name.endswith("-source.tar.gz"))
    tar = gzip.decompress(package.read_bytes())
    end = len(tar)
    while end >= 512 and tar[end - 512 : end] == bytes(512):  # drop the end-of-archive blocks
        end -= 512
    package.write_bytes(gzip_bytes if gzip_bytes is not None else gzip.compress(tar[:end] + extra + bytes(1024), mtime=0))
    digest = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in directory.iterdir()}
    inner = next(p for p in directory.glob("*.SHA256SUMS"))
    inner.write_bytes(render_sums({name: digest[name] for name in parse_sums(inner.read_bytes(), file=inner)}))
    receipt_path = directory / "package-build-receipt.json"
    receipt = json.loads(receipt_path.read_text())
    receipt["package"].update(sha256=digest[package.name], bytes=package.stat().st_size)
    receipt["inner_checksums"]["sha256"] = hashlib.sha256(inner.read_bytes()).hexdigest()
    receipt_path.write_text(json.dumps(receipt, indent=2, sort_keys=True) + "\n")
    _rewrite_outer(directory)
    return package


def _member(name: str, kind: bytes) -> bytes:
    import tarfile

    info = tarfile.TarInfo(name)
    info.type, info.mode = kind, 0o755
    return info.tobuf(tarfile.GNU_FORMAT, "utf-8", "strict")


@pytest.mark.slow
@pytest.mark.parametrize("member", ["{root}/../../escape", "/etc/cron.d"])
def test_check_assets_refuses_a_folder_member_leaving_the_package(copy_of_set, member):
    import tarfile

    workspace, directory = copy_of_set
    root = next(p for p in directory.glob("*.tar.gz") if not p.name.endswith("-source.tar.gz")).name.removesuffix(".tar.gz")
    name = member.format(root=root)
    package = _repack_with(directory, _member(name, tarfile.DIRTYPE))
    with pytest.raises(IntegrityError) as caught:
        check_assets(directory, lanes_dir=workspace.lanes_dir)
    assert Path(caught.value.file).name == package.name and caught.value.field == name
    assert "leaves the archive's folder" in caught.value.what


@pytest.mark.slow
def test_check_assets_refuses_a_gzip_bomb_while_it_inflates(copy_of_set):
    import gzip
    import tarfile
    import time

    workspace, directory = copy_of_set
    header = tarfile.TarInfo("pkg/zeros")
    header.size = 1 << 30
    bomb = gzip.compress(header.tobuf(tarfile.GNU_FORMAT), mtime=0) + gzip.compress(bytes(1 << 20), mtime=0) * 1024
    package = _repack_with(directory, b"", gzip_bytes=bomb)
    started = time.monotonic()
    with pytest.raises(IntegrityError) as caught:
        check_assets(directory, lanes_dir=workspace.lanes_dir)
    assert Path(caught.value.file).name == package.name and "inflates more than 100 times" in caught.value.what
    assert time.monotonic() - started < 10
