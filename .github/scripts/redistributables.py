"""Put a native lane's bundled DLLs and their packages' licence files beside its binaries (used by release.yml).

`python .github/scripts/redistributables.py <lane-id> <bin-folder> --vcpkg DIR --directstorage NUPKG
--toolchain-record FILE` copies every `[[package.redistributables]]` of the lane file into the folder the
Windows job hands `build --prebuilt`, each from where its `origin` says it comes from:

- `vcpkg`: `<DIR>/bin/<name>` (DIR: vcpkg's installed tree of the triplet, e.g. installed/x64-windows),
  which vcpkg's file list (`installed/vcpkg/info/<port>_*_<triplet>.list`) must give to the lane's
  `vcpkg_port`, and whose version resource (ProductVersion, read by the pipeline's PE reader) must be
  that port's installed version (`installed/vcpkg/status`: the pinned baseline's, e.g. ffmpeg 7.1.2#5);
- `directstorage`: `<dll_folder>/<name>` of the NuGet package packaging/windows/directstorage.toml pins,
  whose SHA-256 is checked before the archive is opened; a `license_from_prebuilt` file (LICENSE.txt) is
  the package's own file of that name, copied unchanged;
- `cuda-toolkit`: the library of that name the build's toolchain record (`toolchain.json`) lists, its
  SHA-256 checked against the record.

`... directstorage-url` prints the pinned package's URL, which the job downloads.  Standard library only,
like host_packages.py, but for the vcpkg DLLs' version check (the pipeline's PE reader); each copy is bounded, and a name from the lane file is a
plain file name or the job stops (an ::error line, exit 1) before anything is copied.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import sys
import tomllib
import zipfile
from pathlib import Path

PIN = Path("packaging/windows/directstorage.toml")
LANE = re.compile(r"rtx[0-9]{4}-[a-z-]+")
PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,127}")
MAX_BYTES = 512 << 20  # one DLL or licence file
MAX_ARCHIVE = 1 << 30


class Stop(Exception):
    """A refusal: printed as one ::error line."""


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def redistributables(lane: str) -> list[dict]:
    path = Path("runtime/lanes") / f"{lane}.toml"
    items = tomllib.loads(path.read_text(encoding="utf-8")).get("package", {}).get("redistributables", [])
    for index, item in enumerate(items):
        for key in ("name", "license_from_prebuilt"):
            value = item.get(key, "x" if key != "name" else None)
            if not isinstance(value, str) or not PLAIN.fullmatch(value):
                raise Stop(f"file={path}::package.redistributables[{index}].{key}: {value!r} is not a plain file name")
    return items


def directstorage_members(nupkg: Path) -> tuple[zipfile.ZipFile, str]:
    """The pinned NuGet package, opened only after its SHA-256 is the pin's."""
    pin = tomllib.loads(PIN.read_text(encoding="utf-8"))
    if pin.get("schema_version") != 1 or not re.fullmatch(r"[0-9a-f]{64}", str(pin.get("sha256"))):
        raise Stop(f"file={PIN}::sha256: not a 64-hex SHA-256 (schema_version 1)")
    if not nupkg.is_file() or nupkg.stat().st_size > MAX_ARCHIVE:
        raise Stop(f"::--directstorage {nupkg}: not a file of at most {MAX_ARCHIVE} bytes (download {pin.get('url')})")
    found = sha256_of(nupkg)
    if found != pin["sha256"]:
        raise Stop(f"file={PIN}::{nupkg.name} has SHA-256 {found}, the pin says {pin['sha256']}: not the pinned {pin.get('package')} {pin.get('version')}")
    return zipfile.ZipFile(nupkg), str(pin.get("dll_folder", "native/bin/x64")).strip("/")


def copy_member(archive: zipfile.ZipFile, member: str, target: Path) -> None:
    try:
        info = archive.getinfo(member)
    except KeyError:
        raise Stop(f"::the DirectStorage package has no {member}") from None
    if info.file_size > MAX_BYTES:
        raise Stop(f"::{member} in the DirectStorage package is larger than {MAX_BYTES} bytes")
    with archive.open(info) as source, open(target, "wb") as out:
        shutil.copyfileobj(source, out)


def toolchain_library(record_file: Path, name: str) -> Path:
    record = json.loads(record_file.read_text(encoding="utf-8"))
    row = (record.get("libraries") or {}).get(name)
    if not isinstance(row, dict) or not record.get("root"):
        raise Stop(f"file={record_file}::the build's toolchain lists no {name}")
    path = Path(record["root"]) / "site" / row["path"]
    if ".." in Path(row["path"]).parts or sha256_of(path) != row.get("sha256"):
        raise Stop(f"file={record_file}::{path} is not the {name} the toolchain record lists (SHA-256 {row.get('sha256')})")
    return path


def installed_port(installed: Path, port: str) -> tuple[str, list[str]]:
    """`<version>[#<port-version>]` of an installed vcpkg port (its status paragraph) and the files vcpkg lists for it."""
    triplet, database = installed.name, installed.parent / "vcpkg"
    status = database / "status"
    if not status.is_file() or status.stat().st_size > 64 << 20:
        raise Stop(f"::vcpkg's installed status {status} is missing or too large")
    for paragraph in status.read_text(encoding="utf-8").split("\n\n"):
        fields = dict(line.split(": ", 1) for line in paragraph.splitlines() if ": " in line)
        if fields.get("Package") == port and "Feature" not in fields and fields.get("Architecture") == triplet and fields.get("Status", "").endswith(" installed"):
            version = fields.get("Version", "") + (f"#{fields['Port-Version']}" if fields.get("Port-Version", "0") != "0" else "")
            break
    else:
        raise Stop(f"::vcpkg's status {status} has no installed {port}:{triplet}")
    lists = sorted((database / "info").glob(f"{port}_*_{triplet}.list"))
    if len(lists) != 1:
        raise Stop(f"::vcpkg lists {len(lists)} file lists for {port}:{triplet} under {database / 'info'}, not one")
    return version, lists[0].read_text(encoding="utf-8").splitlines()


def check_vcpkg_dll(lane_file: Path, installed: Path, item: dict, dll: Path) -> str:
    """The DLL is the lane's port's (vcpkg's own file list says so) and states that port's installed version."""
    # The pipeline's one PE reader (the build step installed the pipeline before this one runs).
    from pipeline.lanework.binaries import pe_product_version

    port, name = item.get("vcpkg_port"), item["name"]
    if not isinstance(port, str) or not re.fullmatch(r"[a-z0-9][a-z0-9-]*", port):
        raise Stop(f"file={lane_file}::{name}: vcpkg_port {port!r} is not a vcpkg port name")
    version, files = installed_port(installed, port)
    if f"{installed.name}/bin/{name}" not in files:
        raise Stop(f"file={lane_file}::{name} is not a file of vcpkg's {port} (its list names no {installed.name}/bin/{name}): fix vcpkg_port")
    stated = pe_product_version(dll)
    if stated != version.partition("#")[0]:
        raise Stop(f"file={lane_file}::{name} states ProductVersion {stated!r}, but vcpkg installed {port} {version} (the pinned baseline's): the DLL is not that port's build")
    return f"{name}: vcpkg port {port} {version} ({installed.name}), ProductVersion {stated}"


def gather(args: argparse.Namespace) -> list[str]:
    if not LANE.fullmatch(args.lane):
        raise Stop(f"::{args.lane!r} is not a lane id")
    items = redistributables(args.lane)
    archive, folder = directstorage_members(args.directstorage) if any(i.get("origin") == "directstorage" for i in items) else (None, "")
    args.bin.mkdir(parents=True, exist_ok=True)
    copied = []
    for item in items:
        name, origin, target = item["name"], item.get("origin"), args.bin / item["name"]
        if origin == "vcpkg":
            source = args.vcpkg / "bin" / name
            if not source.is_file() or source.stat().st_size > MAX_BYTES:
                raise Stop(f"::vcpkg installed no {name} under {args.vcpkg / 'bin'} (the lane's {name} comes from vcpkg)")
            shutil.copyfile(source, target)
            print(f"::notice::{check_vcpkg_dll(Path('runtime/lanes') / f'{args.lane}.toml', args.vcpkg, item, target)}", file=sys.stderr)
        elif origin == "directstorage" and archive is not None:
            copy_member(archive, f"{folder}/{name}", target)
            licence = item.get("license_from_prebuilt")
            if licence:  # the package's own licence file, at its root, unchanged
                copy_member(archive, licence, args.bin / licence)
                copied.append(licence)
        elif origin == "cuda-toolkit":
            shutil.copyfile(toolchain_library(args.toolchain_record, name), target)
        else:
            raise Stop(f"::{name}: no source for origin {origin!r} in the Windows job")
        copied.append(name)
    return sorted(set(copied))


def _pipeline_errors() -> tuple[type[Exception], ...]:
    """The pipeline's own refusals (a DLL that is no readable PE, a version resource that is no version), as
    one ::error line like the others, never a traceback; looked up only once one is raised."""
    try:
        from pipeline.errors import PipelineError
    except ImportError:
        return ()
    return (PipelineError,)


def main(argv: list[str]) -> int:
    if argv == ["directstorage-url"]:  # what the job downloads (it checks nothing: gather checks the SHA-256)
        print(tomllib.loads(PIN.read_text(encoding="utf-8"))["url"])
        return 0
    parser = argparse.ArgumentParser(prog="redistributables.py")
    parser.add_argument("lane")
    parser.add_argument("bin", type=Path)
    parser.add_argument("--vcpkg", type=Path, required=True)
    parser.add_argument("--directstorage", type=Path, required=True)
    parser.add_argument("--toolchain-record", type=Path, required=True)
    try:
        for name in gather(parser.parse_args(argv)):
            print(name)
    except (Stop, OSError, ValueError, zipfile.BadZipFile, tomllib.TOMLDecodeError, *_pipeline_errors()) as exc:
        text = str(exc)
        print(f"::error {text}" if text.startswith("file=") else f"::error{text}" if text.startswith("::") else f"::error::{text}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
