"""The closed asset set of a component release: names, checksum files and the checker.

This module is the one place that names the files of a set.  A native
(Windows) lane publishes eleven files for a component tag:

    <stem>-<platform>.tar.gz        the package (payload below)
    <stem>-source.tar.gz            `git archive` of the exact source commit, gzipped
    <stem>-<platform>.spdx.json     SPDX 2.3 file inventory of the payload
    <stem>-<platform>.cdx.json      CycloneDX 1.6 dependency inventory
    <stem>-<platform>.SHA256SUMS    inner set: package, source and both SBOMs
    package-build-receipt.json      what was built from what
    Install-Release.ps1, Control-Release.ps1, Control-GpuOwner.ps1, Protect-StateRoot.ps1
    SHA256SUMS                      the outer set: every other file, sorted by name

The container lane (binary-archive layout) publishes the same without the four
scripts (seven files).  `check_assets` is what anyone runs on a downloaded
set: it refuses an extra, missing or misnamed file, a malformed checksum line
(a CR, a duplicate, unsorted lines, a path), any hash mismatch, and then opens
the package and both SBOMs and checks them against the bytes.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.errors import InputError, IntegrityError
from pipeline.formats.lanes import Lane, load_lanes, pattern_regex
from pipeline.formats.receipts import LANE_RECEIPT_TYPE
from pipeline.util.fs import read_bytes_bounded
from pipeline.util.hashing import is_sha256_hex, sha256_file
from pipeline.util.jsonio import check_text_hygiene, expect_object, loads_object
from pipeline.util.safepath import component_problem, relpath_problem

OUTER_SUMS = "SHA256SUMS"
ASSETS_DIR = "assets"  # dist/<lane>/assets/: where the package stage publishes the set
RECEIPT = "package-build-receipt.json"
PAYLOAD_SUMS = "SHA256SUMS.txt"
MAX_MEMBER_DOCUMENT_BYTES = 16 * 1024 * 1024  # a package member read into memory (SHA256SUMS.txt, build-identity.json)
RECEIPT_SCHEMA = 2
RECEIPT_TYPES = {
    "native-asset-set": "ninfer_windows_package_build_receipt",
    "binary-archive": "ninfer_container_package_build_receipt",
}
# What qualification will later produce from these bytes (never written into the package):
# the lane receipt (pipeline/formats/receipts.py), the same for both layouts.
QUALIFICATION_SUMMARY_TYPES = {layout: LANE_RECEIPT_TYPE for layout in RECEIPT_TYPES}
# Lifecycle script -> its key in the receipt's support_assets (anchor §8).
SUPPORT_SCRIPT_KEYS = {
    "Install-Release.ps1": "installer_sha256",
    "Control-Release.ps1": "controller_sha256",
    "Control-GpuOwner.ps1": "gpu_owner_controller_sha256",
    "Protect-StateRoot.ps1": "state_protection_sha256",
}
# Role of a file in the set -> the artefact kind the register records it as.
ROLE_KINDS = {
    "package": "package-archive",
    "source": "source-archive",
    "spdx": "spdx-sbom",
    "cdx": "cdx-sbom",
    "inner-sums": "inner-checksums",
    "receipt": "package-build-receipt",
    "support-script": "support-script",
    "outer-sums": "outer-checksums",
}
INNER_ROLES = ("package", "source", "spdx", "cdx")

# Fixed payload members (paths relative to the package's top folder).
PAYLOAD_FILES = ("LICENSE", "VERSION", "README.md", "RELEASE_NOTES.md", "build-identity.json")
NATIVE_PAYLOAD_FILES = ("server-config.json", "release-spec.json")
LICENSES_DIR = "licenses"
BIN_DIR = "bin"

_SUMS_LINE = re.compile(rb"([0-9a-f]{64})  ([^\n]+)")
_BARE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")
_PAYLOAD_PATH = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+-]*(/[A-Za-z0-9_][A-Za-z0-9._+-]*)*")


@dataclass(frozen=True)
class Asset:
    name: str
    role: str

    @property
    def kind(self) -> str:
        return ROLE_KINDS[self.role]


@dataclass(frozen=True)
class AssetSet:
    lane_id: str
    layout: str
    component_tag: str
    stem: str
    platform: str
    assets: tuple[Asset, ...]

    @property
    def package_root(self) -> str:
        """The package's name without extension: its top folder and the SBOM/SUMS stem."""
        return f"{self.stem}-{self.platform}"

    def names(self) -> list[str]:
        return sorted(asset.name for asset in self.assets)

    def name_of(self, role: str) -> str:
        found = [asset.name for asset in self.assets if asset.role == role]
        if len(found) != 1:
            raise KeyError(f"the set has {len(found)} files of role {role!r}")
        return found[0]

    def scripts(self) -> list[str]:
        return sorted(asset.name for asset in self.assets if asset.role == "support-script")

    def inner_names(self) -> list[str]:
        return sorted(self.name_of(role) for role in INNER_ROLES)

    def outer_names(self) -> list[str]:
        return sorted(asset.name for asset in self.assets if asset.role != "outer-sums")

    def role_of(self, name: str) -> str:
        for asset in self.assets:
            if asset.name == name:
                return asset.role
        raise KeyError(name)

    def entry_name(self, name: str) -> str:
        """The register name of file `name` of this set, as the package stage records it: `<lane>/assets/<file>`."""
        self.role_of(name)  # a file of the set, or KeyError
        return f"{self.lane_id}/{ASSETS_DIR}/{name}"

    def entry_attrs(self, name: str) -> dict[str, str]:
        """The register attributes every entry of this set carries (consumers query by them)."""
        return {"component_tag": self.component_tag, "stem": self.stem, "platform": self.platform, "role": self.role_of(name)}


def asset_set(lane: Lane, beta: int | None = None) -> AssetSet:
    """The exact file names of `lane`'s set for beta `beta` (default: the lane file's)."""
    stem = lane.stem(beta)
    root = f"{stem}-{lane.asset_platform}"
    assets = [
        Asset(f"{root}.tar.gz", "package"),
        Asset(f"{stem}-source.tar.gz", "source"),
        Asset(f"{root}.spdx.json", "spdx"),
        Asset(f"{root}.cdx.json", "cdx"),
        Asset(f"{root}.SHA256SUMS", "inner-sums"),
        Asset(RECEIPT, "receipt"),
        Asset(OUTER_SUMS, "outer-sums"),
    ]
    if lane.package_layout == "native-asset-set":
        for script in lane.support_scripts:
            name = Path(script).name
            if name not in SUPPORT_SCRIPT_KEYS:
                raise InputError(
                    "names a lifecycle script the asset set does not know",
                    file=lane.file,
                    field="package.support_scripts",
                    found=name,
                    expected="one of " + ", ".join(sorted(SUPPORT_SCRIPT_KEYS)),
                )
            assets.append(Asset(name, "support-script"))
    names = [a.name for a in assets]
    if len(set(names)) != len(names):
        raise InputError("the lane's asset names collide", file=lane.file, found=names)
    return AssetSet(lane.id, lane.package_layout, lane.tag(beta), stem, lane.asset_platform, tuple(sorted(assets, key=lambda a: a.name)))


def payload_required(lane: Lane, binaries: list[str]) -> list[str]:
    """Members every package of this lane must hold (relative to the top folder)."""
    required = [*PAYLOAD_FILES, PAYLOAD_SUMS, *(f"{BIN_DIR}/{name}" for name in binaries)]
    if lane.package_layout == "native-asset-set":
        required += list(NATIVE_PAYLOAD_FILES)
        required += [Path(script).name for script in lane.support_scripts]
    return sorted(required)


# -- checksum files ----------------------------------------------------------

def render_sums(entries: Mapping[str, str], *, paths: bool = False) -> bytes:
    """`<sha256>  <name>` lines sorted by name, ASCII, LF, trailing newline."""
    lines = []
    for name in sorted(entries, key=lambda n: n.encode("utf-8")):
        digest = entries[name]
        if not is_sha256_hex(digest):
            raise ValueError(f"not a lowercase SHA-256 for {name!r}: {digest!r}")
        pattern = _PAYLOAD_PATH if paths else _BARE_NAME
        if not pattern.fullmatch(name):
            raise ValueError(f"{name!r} is not a valid {'payload path' if paths else 'bare file name'}")
        lines.append(f"{digest}  {name}\n")
    return "".join(lines).encode("ascii")


def parse_sums(data: bytes, *, file: str | Path, paths: bool = False) -> dict[str, str]:
    """Read a checksum file strictly; every defect is an IntegrityError naming the file and line."""
    if not data:
        raise IntegrityError("checksum file is empty", file=file, expected="one '<sha256>  <name>' line per file")
    if b"\r" in data:
        line = data[: data.index(b"\r")].count(b"\n") + 1
        raise IntegrityError(
            f"checksum file contains a carriage return (CR) at line {line}",
            file=file,
            expected="LF line endings only",
            why="a CRLF rewrite (Windows checkout, text-mode transfer) changes the bytes the release hash binds",
            fix="download the file again in binary mode; never let a tool convert its line endings",
        )
    if not data.endswith(b"\n"):
        raise IntegrityError("checksum file does not end with a newline (LF)", file=file)
    try:
        data.decode("ascii")
    except UnicodeDecodeError as exc:
        raise IntegrityError(f"checksum file holds a non-ASCII byte at offset {exc.start}", file=file) from None
    entries: dict[str, str] = {}
    previous = None
    for number, raw in enumerate(data[:-1].split(b"\n"), start=1):
        match = _SUMS_LINE.fullmatch(raw)
        if not match:
            raise IntegrityError(
                f"line {number} is not '<64 lowercase hex><two spaces><name>'",
                file=file,
                found=raw.decode("ascii")[:160],
                expected="e.g. '" + "0" * 64 + "  SHA256SUMS.txt'",
            )
        digest, name = match.group(1).decode(), match.group(2).decode()
        pattern = _PAYLOAD_PATH if paths else _BARE_NAME
        # Names become paths (the set folder, an audit's cache): the same gate as every name from data.
        if not pattern.fullmatch(name) or (relpath_problem(name) if paths else component_problem(name)) is not None:
            raise IntegrityError(
                f"line {number} names {'an invalid path' if paths else 'a path or an invalid file name'}",
                file=file,
                found=name,
                expected="a relative path of plain segments" if paths else "a bare file name without folders",
            )
        if name in entries:
            raise IntegrityError(f"line {number} lists {name!r} a second time (duplicate line)", file=file, found=name)
        if previous is not None and name.encode() < previous.encode():
            raise IntegrityError(
                f"line {number} is out of order: {name!r} sorts before {previous!r}",
                file=file,
                expected="lines sorted by name (byte order)",
            )
        entries[name] = digest
        previous = name
    return entries


# -- the checker -------------------------------------------------------------

@dataclass
class AssetReport:
    directory: Path
    lane: str
    component_tag: str
    layout: str
    files: dict[str, str] = field(default_factory=dict)  # name -> sha256
    payload_files: int = 0
    spdx_files: int = 0
    cdx_components: int = 0
    checks: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "directory": str(self.directory),
            "lane": self.lane,
            "component_tag": self.component_tag,
            "layout": self.layout,
            "files": self.files,
            "payload_files": self.payload_files,
            "spdx_files": self.spdx_files,
            "cdx_components": self.cdx_components,
            "checks": self.checks,
            "result": "ok",
        }


def identify(directory: Path, names: list[str], lanes: dict[str, Lane]) -> tuple[Lane, int | None]:
    """Which lane (and beta) a folder's package name belongs to."""
    candidates: list[tuple[Lane, int | None]] = []
    for lane in lanes.values():
        stem_re = pattern_regex(lane.stem_pattern, lane.version).pattern
        package_re = re.compile(stem_re + re.escape(f"-{lane.asset_platform}.tar.gz"))
        for name in names:
            match = package_re.fullmatch(name)
            if match:
                beta = int(match.group("n")) if "n" in match.groupdict() else None
                candidates.append((lane, beta))
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        examples = ", ".join(f"{asset_set(lane, lane.beta or 1).name_of('package')} ({lane.id})" for lane in lanes.values())
        raise IntegrityError(
            "no package archive of a known lane in the folder",
            file=directory,
            found=sorted(names),
            expected=f"one of the lanes' package names, e.g. {examples}",
            fix="point check-assets at the folder holding one complete downloaded set, or name the lane with --lane",
        )
    raise IntegrityError(
        "the folder holds packages of more than one lane or beta",
        file=directory,
        found=sorted(name for name in names if name.endswith(".tar.gz")),
        expected="exactly one set per folder",
    )


def _beta_from_receipt(directory: Path, lane: Lane) -> int | None:
    receipt = directory / RECEIPT
    if not receipt.is_file():
        return None
    try:
        tag = loads_object(receipt.read_bytes(), source=receipt).get("component_tag")
    except InputError:
        return None  # the receipt check reports it
    if not isinstance(tag, str):
        return None
    try:
        return lane.beta_from_tag(tag)
    except InputError:
        return None


def _closed_set(directory: Path, expected: AssetSet, present: list[str]) -> None:
    wanted = set(expected.names())
    have = set(present)
    extra = sorted(have - wanted)
    missing = sorted(wanted - have)
    if not extra and not missing:
        return
    if len(extra) == 1 and len(missing) == 1:
        raise IntegrityError(
            f"misnamed file: {extra[0]!r} is not part of the {expected.component_tag} set, and {missing[0]!r} is missing",
            file=directory / extra[0],
            found=extra[0],
            expected=missing[0],
            why="the set is closed: a file is accepted under its exact name only",
            fix=f"rename it to {missing[0]} if it is that file (the checksums below still have to match)",
        )
    if extra:
        raise IntegrityError(
            f"unexpected file {extra[0]!r} in the asset set" + (f" (and {len(extra) - 1} more)" if len(extra) > 1 else ""),
            file=directory / extra[0],
            found=extra,
            expected="only " + ", ".join(expected.names()),
            why="the set is closed: every file a user downloads must be listed and hashed",
            fix="remove the file from the folder (or download into an empty folder)",
        )
    raise IntegrityError(
        f"missing file {missing[0]!r} of the {expected.component_tag} set" + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""),
        file=directory / missing[0],
        found=sorted(have),
        expected="all of " + ", ".join(expected.names()),
        fix="download the missing file from the release",
    )


def _compare_sums(sums_file: Path, listed: dict[str, str], wanted: list[str], actual: dict[str, str]) -> None:
    extra = sorted(set(listed) - set(wanted))
    if extra:
        raise IntegrityError(
            f"lists {extra[0]!r}, which is not a file of this set",
            file=sums_file,
            found=sorted(listed),
            expected=wanted,
        )
    missing = sorted(set(wanted) - set(listed))
    if missing:
        raise IntegrityError(f"does not list {missing[0]!r}", file=sums_file, found=sorted(listed), expected=wanted)
    for name in wanted:
        if listed[name] != actual[name]:
            raise IntegrityError(
                f"hash mismatch: {name} has other bytes than {sums_file.name} records",
                file=sums_file.parent / name,
                found=actual[name],
                expected=listed[name],
                why="the file was changed, truncated or replaced after the set was made",
                fix="download the file again; if the mismatch stays, do not use the release and report it",
            )


def _check_receipt(path: Path, expected: AssetSet, hashes: dict[str, str], directory: Path) -> dict[str, Any]:
    data = path.read_bytes()
    check_text_hygiene(path, data)
    try:
        receipt = loads_object(data, source=path)
    except InputError as exc:
        raise IntegrityError(exc.what, file=path, found=exc.found, expected=exc.expected, why=exc.why) from None

    def want(field_name: str, value: Any) -> None:
        node: Any = receipt
        for part in field_name.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node != value:
            raise IntegrityError("receipt disagrees with the asset set", file=path, field=field_name, found=node, expected=repr(value))

    package = expected.name_of("package")
    want("artifact_type", RECEIPT_TYPES[expected.layout])
    want("schema_version", RECEIPT_SCHEMA)
    want("lane", expected.lane_id)
    want("component_tag", expected.component_tag)
    want("package.filename", package)
    want("package.sha256", hashes[package])
    want("package.bytes", (directory / package).stat().st_size)
    want("source_archive.filename", expected.name_of("source"))
    want("source_archive.sha256", hashes[expected.name_of("source")])
    want("sboms.spdx.sha256", hashes[expected.name_of("spdx")])
    want("sboms.cyclonedx.sha256", hashes[expected.name_of("cdx")])
    want("inner_checksums.filename", expected.name_of("inner-sums"))
    want("inner_checksums.sha256", hashes[expected.name_of("inner-sums")])
    want("checksums.filename", OUTER_SUMS)
    want("checksums.role", "closed-outer-distribution-set")
    want("checksums.entries", len(expected.outer_names()))
    want("checksums.line_ending", "LF")
    want("qualification_status", "hardware-pending")
    want("secret_values_recorded", 0)
    for script in expected.scripts():
        want(f"support_assets.{SUPPORT_SCRIPT_KEYS[script]}", hashes[script])
    return receipt


def check_assets(
    directory: Path | str,
    *,
    lane: Lane | None = None,
    beta: int | None = None,
    lanes_dir: Path | None = None,
    deep: bool = True,
) -> AssetReport:
    """Check a folder holding one downloaded asset set; raise on the first defect, naming the file."""
    directory = Path(directory)
    if not directory.is_dir():
        raise InputError("asset folder does not exist", file=directory, fix="pass the folder holding the downloaded set")
    present: list[str] = []
    for entry in sorted(directory.iterdir()):
        if entry.is_symlink() or not entry.is_file():
            raise IntegrityError(
                "the asset folder holds something that is not a plain file",
                file=entry,
                expected="only the set's plain files (no folders, no links)",
                fix="remove it; the set is a flat, closed list of files",
            )
        present.append(entry.name)
    if lane is None:
        lane, beta_from_name = identify(directory, present, load_lanes(lanes_dir))
        beta = beta if beta is not None else beta_from_name
    if beta is None:
        beta = _beta_from_receipt(directory, lane)
    expected = asset_set(lane, beta)
    report = AssetReport(directory, lane.id, expected.component_tag, expected.layout)
    _closed_set(directory, expected, present)
    report.checks.append(f"closed set: exactly the {len(expected.names())} files of {expected.component_tag}")

    outer_path = directory / OUTER_SUMS
    outer = parse_sums(outer_path.read_bytes(), file=outer_path)
    hashes = {name: sha256_file(directory / name) for name in expected.outer_names()}
    _compare_sums(outer_path, outer, expected.outer_names(), hashes)
    report.checks.append(f"{OUTER_SUMS}: {len(outer)} entries, sorted, LF, every hash matches")

    inner_path = directory / expected.name_of("inner-sums")
    inner = parse_sums(inner_path.read_bytes(), file=inner_path)
    _compare_sums(inner_path, inner, expected.inner_names(), hashes)
    report.checks.append(f"{inner_path.name}: package, source and both SBOMs match")

    for script in expected.scripts():
        check_text_hygiene(directory / script, (directory / script).read_bytes())
    receipt = _check_receipt(directory / RECEIPT, expected, hashes, directory)
    bound = "package, source, checksums and lifecycle scripts" if expected.scripts() else "package, source and checksums"
    report.checks.append(f"{RECEIPT}: {receipt['artifact_type']} binds the {bound}")
    report.files = {name: hashes[name] for name in expected.outer_names()}
    report.files[OUTER_SUMS] = sha256_file(outer_path)

    if deep:
        _deep_check(directory, lane, expected, report)
    return report


def _deep_check(directory: Path, lane: Lane, expected: AssetSet, report: AssetReport) -> None:
    from pipeline.formats import sbom  # the SBOM libraries are heavy; only the deep check needs them
    from pipeline.infra.archive import gzip_header_fields, read_tar_gz

    package_path = directory / expected.name_of("package")
    entries = read_tar_gz(package_path)
    root = expected.package_root
    files: dict[str, Any] = {}
    mtimes = set()
    for entry in entries:
        where = f"{package_path.name}: member {entry.name}"
        if entry.kind not in ("file", "dir"):
            raise IntegrityError(f"package member is a {entry.kind}, not a file or folder", file=package_path, field=entry.name, why="links and special files are refused on install")
        if entry.name != root and not entry.name.startswith(root + "/"):
            raise IntegrityError("package member lies outside the single top folder", file=package_path, field=entry.name, expected=f"{root}/...")
        if (entry.uid, entry.gid, entry.uname, entry.gname) != (0, 0, "", ""):
            raise IntegrityError("package member has an owner", file=package_path, field=entry.name, found=f"{entry.uid}/{entry.gid} {entry.uname}/{entry.gname}", expected="0/0 with empty names")
        if entry.mode not in (0o644, 0o755):
            raise IntegrityError("package member has unusual mode bits", file=package_path, field=entry.name, found=oct(entry.mode), expected="0o644 or 0o755")
        mtimes.add(entry.mtime)
        if entry.kind == "file":
            relative = entry.name[len(root) + 1:]
            if relative in files:
                raise IntegrityError("package lists a member twice", file=package_path, field=where)
            files[relative] = entry
    if len(mtimes) != 1:
        raise IntegrityError("package members carry different times", file=package_path, found=sorted(mtimes), expected="one fixed source epoch")
    flags, gzip_mtime = gzip_header_fields(package_path)
    if flags & 0x08:
        raise IntegrityError("the gzip header carries a file name", file=package_path, why="a name in the header makes the bytes depend on how the file was called when it was compressed")
    if gzip_mtime != next(iter(mtimes)):
        raise IntegrityError("the gzip header time differs from the members' time", file=package_path, found=gzip_mtime, expected=next(iter(mtimes)))

    if PAYLOAD_SUMS not in files:
        raise IntegrityError(f"package has no {PAYLOAD_SUMS} at its top folder", file=package_path, field=f"{root}/{PAYLOAD_SUMS}")
    payload_sums = _read_member(package_path, f"{root}/{PAYLOAD_SUMS}")
    listed = parse_sums(payload_sums, file=f"{package_path}!{root}/{PAYLOAD_SUMS}", paths=True)
    payload = {name: entry.sha256 for name, entry in files.items() if name != PAYLOAD_SUMS}
    _compare_member_sums(package_path, root, listed, payload)
    identity = loads_object(_read_member(package_path, f"{root}/build-identity.json"), source=f"{package_path}!{root}/build-identity.json")
    for key in ("binaries", "runtime_dependencies"):
        expect_object(identity.get(key, {}), source=f"{package_path}!{root}/build-identity.json", field=key)
    binaries = sorted(identity.get("binaries", {}))
    for name in payload_required(lane, binaries):
        if name not in files:
            raise IntegrityError("package lacks a required member", file=package_path, field=f"{root}/{name}")
    for name, digest in identity.get("binaries", {}).items():
        if payload.get(f"{BIN_DIR}/{name}") != digest:
            raise IntegrityError("build-identity.json disagrees with the packaged binary", file=package_path, field=f"{root}/build-identity.json: binaries.{name}", found=payload.get(f"{BIN_DIR}/{name}"), expected=digest)
    for name, digest in identity.get("runtime_dependencies", {}).items():
        if payload.get(f"{BIN_DIR}/{name}") != digest:
            raise IntegrityError("build-identity.json disagrees with a bundled library", file=package_path, field=f"{root}/build-identity.json: runtime_dependencies.{name}", found=payload.get(f"{BIN_DIR}/{name}"), expected=digest)
    for script in expected.scripts():
        if payload.get(script) != report.files[script]:
            raise IntegrityError("the packaged lifecycle script differs from the published one", file=package_path, field=f"{root}/{script}", found=payload.get(script), expected=report.files[script])
    report.payload_files = len(files)
    report.checks.append(f"package: {len(files)} files under {root}/, {PAYLOAD_SUMS} closed and matching, owners 0/0, one epoch, no gzip name")

    source_path = directory / expected.name_of("source")
    from pipeline.infra.safetar import inflate_chunks

    digest = hashlib.sha256()
    for chunk in inflate_chunks(source_path, size=1 << 22):  # bounded: a gzip bomb is refused while it inflates
        digest.update(chunk)
    if identity.get("source_tar_sha256") and digest.hexdigest() != identity["source_tar_sha256"]:
        raise IntegrityError(
            "the source archive is not the tar the build was made from",
            file=source_path,
            found=digest.hexdigest(),
            expected=f"{identity['source_tar_sha256']} (build-identity.json source_tar_sha256)",
        )
    report.checks.append(f"source archive: gunzips to the git archive tar recorded in build-identity.json ({digest.hexdigest()[:12]})")

    digests = {name: (entry.sha256, entry.sha1) for name, entry in files.items()}
    spdx_path = directory / expected.name_of("spdx")
    report.spdx_files = sbom.verify_spdx(spdx_path, digests, package_name=package_path.name, package_sha256=report.files[package_path.name])
    report.checks.append(f"SPDX 2.3: valid, {report.spdx_files} files, every SHA-1/SHA-256 equals the payload")
    cdx_path = directory / expected.name_of("cdx")
    report.cdx_components = sbom.verify_cdx(cdx_path, digests, package_sha256=report.files[package_path.name])
    report.checks.append(f"CycloneDX 1.6: valid against the schema, {report.cdx_components} components, hashes equal the payload")


def _read_member(package_path: Path, name: str) -> bytes:
    from pipeline.infra.safetar import SafeTar

    with SafeTar(package_path) as archive:
        for info in archive:
            if info.name == name and info.isreg():
                return archive.read_member(info, MAX_MEMBER_DOCUMENT_BYTES)
    raise IntegrityError("package lacks a member", file=package_path, field=name)


def _compare_member_sums(package_path: Path, root: str, listed: dict[str, str], payload: dict[str, str | None]) -> None:
    where = f"{package_path}!{root}/{PAYLOAD_SUMS}"
    for name in sorted(set(payload) - set(listed)):
        raise IntegrityError(f"payload file {name!r} is not listed in {PAYLOAD_SUMS} (the payload is a closed set)", file=where, field=name)
    for name in sorted(set(listed) - set(payload)):
        raise IntegrityError(f"{PAYLOAD_SUMS} lists {name!r}, which the package does not hold", file=where, field=name)
    for name in sorted(listed):
        if listed[name] != payload[name]:
            raise IntegrityError("hash mismatch inside the package", file=where, field=name, found=payload[name], expected=listed[name])


def check_registered_set(register: Any, lane: Lane, *, needed_by: str) -> AssetReport | None:
    """Re-check a lane's published set as `check-assets` would, before a stage binds it.

    The register's own check (`verified_path`) only compares bytes with the
    hashes it recorded, so a hand edit that also updated register.json passes
    it.  This one does not: the set must still be closed, its checksum files
    and receipt must agree with its bytes, the package and SBOMs with each
    other, and every register entry of the set must name the bytes checked.
    None when the register holds no set for the lane.
    """
    from pipeline.util import ui

    outer = register.query("outer-checksums", lane=lane.id)
    if not outer:
        return None
    if len(outer) > 1:
        raise InputError("the register holds more than one outer SHA256SUMS for the lane", file=register.file, found=[a.name for a in outer], expected="exactly one")
    sums_path = register.verified_path(outer[0])
    folder = sums_path.parent
    beta = lane.beta_from_tag(outer[0].attrs["component_tag"])
    ui.info(f"{needed_by}: re-checking the asset set in {folder} as check-assets does")
    report = check_assets(folder, lane=lane, beta=beta)
    for kind in sorted(set(ROLE_KINDS.values())):
        for entry in register.query(kind, lane=lane.id):
            path = register.path_of(entry)
            if path.parent != folder or report.files.get(path.name) != entry.sha256:
                raise IntegrityError(
                    "the register's entry is not a file of the checked asset set",
                    file=register.file,
                    field=f"{entry.name}.sha256",
                    found=entry.sha256,
                    expected=report.files.get(path.name, f"a file of {folder}"),
                    why=f"{needed_by} binds only a set that check-assets accepts, and the register must describe exactly that set",
                    fix=f"package the lane again (python -m pipeline package --lane {lane.id})",
                )
    return report


@dataclass(frozen=True)
class SetContents:
    """What a checked set holds, for a report that compares sets (`diff`): the set's files by role,
    its package build receipt, the package's payload SHA-256s and its build identity."""

    report: AssetReport
    expected: AssetSet
    sizes: dict[str, int]
    receipt: dict[str, Any]
    payload: dict[str, str]  # payload path (e.g. bin/ninfer.exe) -> SHA-256, from the package's SHA256SUMS.txt
    identity: dict[str, Any]


def read_set(directory: Path | str, *, lanes_dir: Path | None = None) -> SetContents:
    """Check a set folder (closed, every hash, the receipt: `check_assets` without the deep SBOM pass), then
    read its receipt and the package's payload checksums and build identity, bounded."""
    directory = Path(directory)
    report = check_assets(directory, lanes_dir=lanes_dir, deep=False)
    lane = load_lanes(lanes_dir)[report.lane]
    expected = asset_set(lane, lane.beta_from_tag(report.component_tag))
    receipt = loads_object(read_bytes_bounded(directory / RECEIPT, MAX_MEMBER_DOCUMENT_BYTES, what="package build receipt"), source=directory / RECEIPT)
    package = directory / expected.name_of("package")
    root = expected.package_root
    payload = parse_sums(_read_member(package, f"{root}/{PAYLOAD_SUMS}"), file=f"{package}!{root}/{PAYLOAD_SUMS}", paths=True)
    identity = loads_object(_read_member(package, f"{root}/build-identity.json"), source=f"{package}!{root}/build-identity.json")
    sizes = {name: (directory / name).stat().st_size for name in report.files}
    return SetContents(report, expected, sizes, receipt, payload, identity)
