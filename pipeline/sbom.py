"""The two SBOMs of a package: an SPDX 2.3 file inventory and a CycloneDX 1.6 dependency inventory.

SPDX (spdx-tools): one package (the archive, with its SHA-256), every payload
file with SHA-1 and SHA-256, `DESCRIBES` and `CONTAINS` relationships, a
package verification code, a namespace derived from the build identity
(uuid5) and `created` = the source epoch.  Written as compact JSON with sorted
keys + LF (the anchor's serialization), validated with spdx-tools before
writing and again after parsing the written bytes back.

CycloneDX (cyclonedx-python-lib): the package as root component; each binary;
each bundled runtime library with hashes, licence, supplier and origin (the
toolchain wheel or the declared redistributable); each target-provided library
(system, driver, base image) as a required but unbundled component; each
vendored source component from the source's `third_party/inventory.json`
(purl, licence, per-file SHA-256); the toolchain that built the binaries; and
the graph binary -> the libraries it imports.  Serial number uuid5 of the
build identity, timestamp = the source epoch, validated against the bundled
1.6 JSON schema (strict).

Both are cross-checked against the real files before they are written: any
declared hash that differs from the bytes stops the stage, naming the file.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from . import __version__
from .errors import IntegrityError
from .util.fs import atomic_write_bytes
from .util.hashing import file_digests
from .util.jsonio import canonical_bytes

TOOL_NAME = "omp-ninfer-pipeline"
PROPERTY = "omp-ninfer"  # CycloneDX property namespace
SPDX_PACKAGE_ID = "SPDXRef-Package-NInfer"


@dataclass(frozen=True)
class PayloadFile:
    path: str  # relative to the package's top folder
    sha256: str
    sha1: str
    size: int


@dataclass
class SbomInput:
    """Everything both SBOMs say, gathered by the package stage from the real files."""

    package_root: str  # <stem>-<platform>: the archive's top folder
    package_filename: str
    package_sha256: str
    package_bytes: int
    lane_id: str
    lane_title: str
    component_repository: str
    component_tag: str
    release_version: str
    runtime_license: str
    epoch: int
    identity_sha256: str  # SHA-256 of the packaged build-identity.json bytes
    source: dict[str, Any]
    files: list[PayloadFile]
    binaries: dict[str, str] = field(default_factory=dict)  # binary file name -> payload path
    libraries: list[Any] = field(default_factory=list)  # pipeline.binaries.Library
    edges: dict[str, tuple[str, ...]] = field(default_factory=dict)
    fold_case: bool = False
    vendored: list[dict[str, Any]] = field(default_factory=list)
    toolchain: dict[str, Any] = field(default_factory=dict)
    cuda_toolkit: str = ""
    # build-identity.json host_dependencies: what the build host provided (pipeline/infra/hostdeps.py).
    host_dependencies: list[dict[str, Any]] = field(default_factory=list)

    def created(self) -> datetime:
        return datetime.fromtimestamp(self.epoch, tz=UTC)

    def download_url(self, name: str) -> str:
        return f"{self.component_repository}/releases/download/{self.component_tag}/{name}"


# -- SPDX ---------------------------------------------------------------------

def _spdx_file_id(path: str) -> str:
    return "SPDXRef-File-" + re.sub(r"[^A-Za-z0-9.-]", "-", path)


def _spdx_file_type(path: str):
    from spdx_tools.spdx.model import FileType

    lowered = path.lower()
    if path.startswith("bin/"):
        if lowered.endswith((".dll", ".so")) or ".so." in lowered:
            return FileType.BINARY
        return FileType.APPLICATION
    if lowered.endswith(".ps1"):
        return FileType.SOURCE
    if lowered.endswith(".md") or path.startswith("licenses/") or path in ("LICENSE", "VERSION"):
        return FileType.DOCUMENTATION
    return FileType.TEXT


def spdx_namespace(inp: SbomInput) -> str:
    name = uuid.uuid5(uuid.NAMESPACE_URL, f"ninfer:{inp.package_root}:{inp.identity_sha256}")
    return f"{inp.component_repository}/spdx/{inp.release_version}/sbom-{name}"


def build_spdx(inp: SbomInput):
    from license_expression import get_spdx_licensing
    from spdx_tools.spdx.model import (
        Actor,
        ActorType,
        Checksum,
        ChecksumAlgorithm,
        CreationInfo,
        Document,
        ExternalPackageRef,
        ExternalPackageRefCategory,
        File,
        Package,
        Relationship,
        RelationshipType,
        SpdxNoAssertion,
    )
    from spdx_tools.spdx.spdx_element_utils import calculate_package_verification_code

    ids = [_spdx_file_id(f.path) for f in inp.files]
    if len(set(ids)) != len(ids):
        raise IntegrityError("two payload paths map to one SPDX id", found=sorted(ids))
    files = [
        File(
            name=f"./{item.path}",
            spdx_id=spdx_id,
            checksums=[Checksum(ChecksumAlgorithm.SHA1, item.sha1), Checksum(ChecksumAlgorithm.SHA256, item.sha256)],
            file_types=[_spdx_file_type(item.path)],
            license_concluded=SpdxNoAssertion(),
            license_info_in_file=[SpdxNoAssertion()],
            copyright_text=SpdxNoAssertion(),
        )
        for item, spdx_id in sorted(zip(inp.files, ids, strict=True), key=lambda pair: pair[0].path)
    ]
    owner_repo = inp.component_repository.removeprefix("https://github.com/")
    owner, _, repo = owner_repo.partition("/")
    package = Package(
        spdx_id=SPDX_PACKAGE_ID,
        name=inp.package_root,
        version=inp.release_version,
        file_name=inp.package_filename,
        download_location=inp.download_url(inp.package_filename),
        checksums=[Checksum(ChecksumAlgorithm.SHA256, inp.package_sha256)],
        files_analyzed=True,
        verification_code=calculate_package_verification_code(files),
        license_concluded=SpdxNoAssertion(),
        license_declared=get_spdx_licensing().parse(inp.runtime_license),
        copyright_text=SpdxNoAssertion(),
        summary=f"NInfer runtime package: {inp.lane_title} ({inp.component_tag})",
        external_references=[
            ExternalPackageRef(ExternalPackageRefCategory.PACKAGE_MANAGER, "purl", f"pkg:github/{owner}/{repo}@{inp.component_tag}"),
        ],
        source_info=f"built from source commit {inp.source.get('commit')} (tree {inp.source.get('tree')})",
    )
    creation = CreationInfo(
        spdx_version="SPDX-2.3",
        spdx_id="SPDXRef-DOCUMENT",
        name=f"{inp.package_root}-sbom",
        data_license="CC0-1.0",
        document_namespace=spdx_namespace(inp),
        creators=[Actor(ActorType.TOOL, f"{TOOL_NAME}-{__version__}")],
        created=inp.created(),
    )
    relationships = [Relationship("SPDXRef-DOCUMENT", RelationshipType.DESCRIBES, SPDX_PACKAGE_ID)]
    relationships += [Relationship(SPDX_PACKAGE_ID, RelationshipType.CONTAINS, f.spdx_id) for f in files]
    return Document(creation_info=creation, packages=[package], files=files, relationships=relationships)


def spdx_bytes(document) -> bytes:
    """Validate an SPDX document and serialise it deterministically (sorted keys, compact, LF)."""
    from spdx_tools.spdx.jsonschema.document_converter import DocumentConverter
    from spdx_tools.spdx.validation.document_validator import validate_full_spdx_document

    messages = validate_full_spdx_document(document)
    if messages:
        raise IntegrityError(
            f"the SPDX document is invalid ({len(messages)} problems)",
            found=[m.validation_message for m in messages[:5]],
            why="spdx-tools' validator refused it",
        )
    return canonical_bytes(DocumentConverter().convert(document), indent=None)


def write_spdx(path: Path, inp: SbomInput, payload_dir: Path) -> bytes:
    document = build_spdx(inp)
    data = spdx_bytes(document)
    cross_check(path, _spdx_declared(json.loads(data)), payload_dir)
    atomic_write_bytes(path, data)
    verify_spdx(path, _disk_digests(payload_dir), package_name=inp.package_filename, package_sha256=inp.package_sha256)
    return data


def _spdx_declared(document: dict[str, Any]) -> dict[str, dict[str, str]]:
    declared: dict[str, dict[str, str]] = {}
    for item in document.get("files", []):
        path = item["fileName"].removeprefix("./")
        declared[path] = {c["algorithm"].lower(): c["checksumValue"] for c in item.get("checksums", [])}
    return declared


def verify_spdx(path: Path, digests: dict[str, tuple[str | None, str | None]], *, package_name: str, package_sha256: str) -> int:
    """Parse an SPDX file back, validate it, and check it lists exactly the payload with the payload's hashes."""
    from spdx_tools.spdx.parser.error import SPDXParsingError
    from spdx_tools.spdx.parser.parse_anything import parse_file
    from spdx_tools.spdx.validation.document_validator import validate_full_spdx_document

    data = path.read_bytes()
    if b"\r" in data or not data.endswith(b"\n") or data.startswith(b"\xef\xbb\xbf"):
        raise IntegrityError("SBOM is not UTF-8 without BOM with LF line endings", file=path)
    try:
        document = parse_file(str(path))
    except SPDXParsingError as exc:
        raise IntegrityError(f"is not a parsable SPDX document: {exc.get_messages()[:3]}", file=path) from None
    except (ValueError, KeyError, json.JSONDecodeError) as exc:
        raise IntegrityError(f"is not a parsable SPDX document ({exc})", file=path) from None
    messages = validate_full_spdx_document(document)
    if messages:
        raise IntegrityError("SPDX validation failed", file=path, found=[m.validation_message for m in messages[:5]])
    if document.creation_info.spdx_version != "SPDX-2.3":
        raise IntegrityError("is not SPDX 2.3", file=path, found=document.creation_info.spdx_version, expected="SPDX-2.3")
    packages = document.packages
    if len(packages) != 1 or packages[0].file_name != package_name:
        raise IntegrityError("SPDX document must describe exactly the package archive", file=path, found=[p.file_name for p in packages], expected=package_name)
    archive_sums = {c.algorithm.name: c.value for c in packages[0].checksums}
    if archive_sums.get("SHA256") != package_sha256:
        raise IntegrityError("hash mismatch: the SPDX package checksum is not the archive's", file=path, field=f"packages[0].checksums (SHA256 of {package_name})", found=archive_sums.get("SHA256"), expected=package_sha256)
    declared = {f.name.removeprefix("./"): {c.algorithm.name.lower(): c.value for c in f.checksums} for f in document.files}
    _compare_declared(path, declared, digests)
    return len(declared)


def _compare_declared(path: Path, declared: dict[str, dict[str, str]], digests: dict[str, tuple[str | None, str | None]]) -> None:
    for name in sorted(set(digests) - set(declared)):
        raise IntegrityError(f"SBOM does not list the payload file {name!r}", file=path, field=name)
    for name in sorted(set(declared) - set(digests)):
        raise IntegrityError(f"SBOM lists {name!r}, which the payload does not hold", file=path, field=name)
    for name in sorted(declared):
        sha256, sha1 = digests[name]
        for algorithm, actual in (("sha256", sha256), ("sha1", sha1)):
            if algorithm in declared[name] and declared[name][algorithm] != actual:
                raise IntegrityError(
                    f"hash mismatch: the SBOM declares a {algorithm.upper()} for {name} that differs from the file's bytes",
                    file=path,
                    field=name,
                    found=declared[name][algorithm],
                    expected=actual,
                    why="an SBOM must describe the exact bytes it ships with",
                )


def _disk_digests(payload_dir: Path) -> dict[str, tuple[str | None, str | None]]:
    digests: dict[str, tuple[str | None, str | None]] = {}
    for path in sorted(p for p in payload_dir.rglob("*") if p.is_file()):
        sha256, sha1, _size = file_digests(path)
        digests[path.relative_to(payload_dir).as_posix()] = (sha256, sha1)
    return digests


def cross_check(sbom_path: Path, declared: dict[str, dict[str, str]], payload_dir: Path, *, complete: bool = True) -> None:
    """Compare declared payload hashes with the files on disk before an SBOM is written."""
    digests = _disk_digests(payload_dir)
    if not complete:
        digests = {name: digests.get(name, (None, None)) for name in declared}
    _compare_declared(sbom_path, declared, digests)


# -- CycloneDX ------------------------------------------------------------------

def _licenses(expression: str | None):
    from cyclonedx.contrib.license.factories import LicenseFactory
    from cyclonedx.model.license import LicenseExpression

    if not expression:
        return []
    if expression.startswith("LicenseRef-"):
        return [LicenseExpression(expression)]
    return [LicenseFactory().make_from_string(expression)]


def _hashes(sha256: str | None, sha1: str | None = None):
    from cyclonedx.model import HashAlgorithm, HashType

    hashes = []
    if sha256:
        hashes.append(HashType(alg=HashAlgorithm.SHA_256, content=sha256))
    if sha1:
        hashes.append(HashType(alg=HashAlgorithm.SHA_1, content=sha1))
    return hashes


def _props(**values: Any):
    from cyclonedx.model import Property

    return [Property(name=f"{PROPERTY}:{key.replace('_', '-')}", value=str(value)) for key, value in sorted(values.items()) if value is not None]


def cdx_serial(inp: SbomInput) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_URL, f"urn:omp-ninfer:cyclonedx:{inp.package_root}:{inp.identity_sha256}")


def build_cdx(inp: SbomInput):
    from cyclonedx.model import ExternalReference, ExternalReferenceType, XsUri
    from cyclonedx.model.bom import Bom, BomMetaData
    from cyclonedx.model.component import Component, ComponentScope, ComponentType
    from cyclonedx.model.contact import OrganizationalEntity
    from cyclonedx.model.lifecycle import LifecyclePhase, PredefinedLifecycle
    from cyclonedx.model.tool import ToolRepository
    from packageurl import PackageURL

    files = {f.path: f for f in inp.files}
    owner_repo = inp.component_repository.removeprefix("https://github.com/")
    owner, _, repo = owner_repo.partition("/")
    root = Component(
        type=ComponentType.APPLICATION,
        bom_ref=f"package:{inp.package_filename}",
        name=inp.package_root,
        version=inp.release_version,
        description=f"NInfer runtime package: {inp.lane_title} ({inp.component_tag})",
        hashes=_hashes(inp.package_sha256),
        licenses=_licenses(inp.runtime_license),
        purl=PackageURL(type="github", namespace=owner, name=repo, version=inp.component_tag),
        external_references=[
            ExternalReference(type=ExternalReferenceType.DISTRIBUTION, url=XsUri(inp.download_url(inp.package_filename))),
            ExternalReference(type=ExternalReferenceType.VCS, url=XsUri(inp.component_repository)),
        ],
        properties=_props(
            lane=inp.lane_id,
            component_tag=inp.component_tag,
            source_commit=inp.source.get("commit"),
            source_tree=inp.source.get("tree"),
            source_kind=inp.source.get("kind"),
            package_bytes=inp.package_bytes,
        ),
    )
    tool = Component(type=ComponentType.APPLICATION, bom_ref=f"tool:{TOOL_NAME}", name=TOOL_NAME, version=__version__)
    bom = Bom(
        serial_number=cdx_serial(inp),
        metadata=BomMetaData(
            component=root,
            timestamp=inp.created(),
            tools=ToolRepository(components=[tool]),
            lifecycles=[PredefinedLifecycle(LifecyclePhase.BUILD)],
        ),
    )
    key = (lambda n: n.lower()) if inp.fold_case else (lambda n: n)
    refs: dict[str, Component] = {}

    for name, payload_path in sorted(inp.binaries.items()):
        item = files[payload_path]
        component = Component(
            type=ComponentType.APPLICATION,
            bom_ref=f"file:{payload_path}",
            name=name,
            version=inp.release_version,
            hashes=_hashes(item.sha256, item.sha1),
            licenses=_licenses(inp.runtime_license),
            scope=ComponentScope.REQUIRED,
            properties=_props(path=payload_path, role="binary", bundled="true"),
        )
        bom.components.add(component)
        refs[key(name)] = component

    for library in sorted(inp.libraries, key=lambda lib: lib.name.lower()):
        if library.bundled:
            payload_path = f"bin/{library.name}"
            item = files[payload_path]
            purl = None
            if library.wheel:
                purl = PackageURL(type="pypi", name=library.wheel[0], version=library.wheel[1])
            elif library.version:
                purl = PackageURL(type="generic", name=library.name, version=library.version)
            component = Component(
                type=ComponentType.LIBRARY,
                bom_ref=f"file:{payload_path}",
                name=library.name,
                version=library.version,
                hashes=_hashes(item.sha256, item.sha1),
                supplier=OrganizationalEntity(name=library.supplier) if library.supplier else None,
                licenses=_licenses(library.license),
                purl=purl,
                scope=ComponentScope.REQUIRED,
                properties=_props(
                    path=payload_path,
                    role="runtime-library",
                    bundled="true",
                    origin=library.origin,
                    wheel=f"{library.wheel[0]}=={library.wheel[1]}" if library.wheel else None,
                    license_text=f"licenses/{Path(library.license_file).name}" if library.license_file else None,
                ),
            )
        else:
            component = Component(
                type=ComponentType.LIBRARY,
                bom_ref=f"provided:{key(library.name)}",
                name=library.name,
                scope=ComponentScope.REQUIRED,
                description={
                    "system": "provided by the target operating system; not bundled",
                    "driver": "provided by the NVIDIA driver; not bundled",
                    "base-image": "provided by the container base image; not bundled",
                }[library.provided_by],
                properties=_props(role="runtime-library", bundled="false", provided_by=library.provided_by),
            )
        bom.components.add(component)
        refs[key(library.name)] = component

    vendored_components = []
    for entry in sorted(inp.vendored, key=lambda e: e["name"]):
        purl = PackageURL.from_string(entry["purl"])
        component = Component(
            type=ComponentType.LIBRARY,
            bom_ref=entry["purl"],
            name=entry["name"],
            version=entry["version"],
            supplier=OrganizationalEntity(name=entry["supplier"]),
            licenses=_licenses(entry["license"]),
            purl=purl,
            scope=ComponentScope.REQUIRED,
            description="vendored source compiled into the binaries",
            properties=_props(role="vendored-source", source_path=entry["path"], license_file=entry["license_file"])
            + [p for f in entry["files"] for p in _file_props(f)],
        )
        bom.components.add(component)
        vendored_components.append(component)

    toolchain_components = []
    for wheel in inp.toolchain.get("wheels", []):
        component = Component(
            type=ComponentType.APPLICATION if wheel["distribution"] in ("cmake", "ninja", "nvidia-cuda-nvcc") else ComponentType.LIBRARY,
            bom_ref=f"toolchain:{wheel['distribution']}@{wheel['version']}",
            name=wheel["distribution"],
            version=wheel["version"],
            hashes=_hashes(wheel["sha256"]),
            purl=PackageURL(type="pypi", name=wheel["distribution"], version=wheel["version"]),
            scope=ComponentScope.EXCLUDED,
            description="build toolchain wheel (used to build the binaries, not shipped)",
            properties=_props(role="build-toolchain", toolchain_kind=inp.toolchain.get("kind")),
        )
        bom.components.add(component)
        toolchain_components.append(component)
    if not toolchain_components and inp.cuda_toolkit:
        component = Component(
            type=ComponentType.APPLICATION,
            bom_ref=f"toolchain:cuda-toolkit@{inp.cuda_toolkit}",
            name="cuda-toolkit",
            version=inp.cuda_toolkit,
            supplier=OrganizationalEntity(name="NVIDIA Corporation"),
            scope=ComponentScope.EXCLUDED,
            description="CUDA toolkit of the build host (binaries built outside this pipeline run; identity read from the binaries)",
            properties=_props(role="build-toolchain", toolchain_kind=inp.toolchain.get("kind", "prebuilt")),
        )
        bom.components.add(component)
        toolchain_components.append(component)

    for entry in inp.host_dependencies:
        component = Component(
            type=ComponentType.LIBRARY if entry["kind"] == "pkg-config" else ComponentType.APPLICATION,
            bom_ref=f"build-host:{entry['kind']}:{entry['name']}@{entry['version']}",
            name=entry["name"],
            version=entry["version"],
            scope=ComponentScope.EXCLUDED,
            description="build-host dependency (found by the build's preflight; used to compile, not shipped)",
            properties=_props(
                role="build-host-dependency",
                kind=entry["kind"],
                min_version=entry.get("min_version"),
                debian_package=entry.get("debian_package"),
                debian_version=entry.get("debian_version"),
                vcpkg_port=entry.get("vcpkg_port"),
            ),
        )
        bom.components.add(component)
        toolchain_components.append(component)

    bom.register_dependency(root, [refs[key(name)] for name in sorted(inp.binaries)] + vendored_components)
    for importer, imported in sorted(inp.edges.items()):
        if key(importer) not in refs:
            continue
        bom.register_dependency(refs[key(importer)], [refs[key(name)] for name in imported])
    for component in [*refs.values(), *vendored_components, *toolchain_components]:
        if not any(d.ref == component.bom_ref for d in bom.dependencies):
            bom.register_dependency(component, [])
    return bom


def _file_props(entry: dict[str, str]):
    from cyclonedx.model import Property

    return [Property(name=f"{PROPERTY}:file-sha256:{entry['path']}", value=entry["sha256"])]


def cdx_bytes(bom) -> bytes:
    """Serialise a BOM as CycloneDX 1.6 JSON (sorted keys, LF) and validate it against the schema."""
    import warnings

    from cyclonedx.output import make_outputter
    from cyclonedx.schema import OutputFormat, SchemaVersion

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an incomplete dependency graph is a bug here, not a warning
        text = make_outputter(bom, OutputFormat.JSON, SchemaVersion.V1_6).output_as_string()
    data = canonical_bytes(json.loads(text), indent=2)
    errors = cdx_schema_errors(data)
    if errors:
        raise IntegrityError(f"the CycloneDX document does not validate against the 1.6 schema ({len(errors)} errors)", found=errors[:5])
    return data


def cdx_schema_errors(data: bytes) -> list[str]:
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    errors = JsonStrictValidator(SchemaVersion.V1_6).validate_str(data.decode("utf-8"), all_errors=True)
    if errors is None:
        return []
    return [str(getattr(getattr(e, "data", None), "message", e)) for e in errors]


def _cdx_declared(document: dict[str, Any]) -> dict[str, dict[str, str]]:
    declared: dict[str, dict[str, str]] = {}
    for component in document.get("components", []):
        properties = {p["name"]: p["value"] for p in component.get("properties", [])}
        path = properties.get(f"{PROPERTY}:path")
        if path is None:
            continue
        hashes = {h["alg"].replace("-", "").lower(): h["content"] for h in component.get("hashes", [])}
        declared[path] = {"sha256": hashes.get("sha256", ""), "sha1": hashes.get("sha1", "")}
    return declared


def write_cdx(path: Path, inp: SbomInput, payload_dir: Path) -> bytes:
    data = cdx_bytes(build_cdx(inp))
    cross_check(path, _cdx_declared(json.loads(data)), payload_dir, complete=False)
    atomic_write_bytes(path, data)
    verify_cdx(path, _disk_digests(payload_dir), package_sha256=inp.package_sha256)
    return data


def verify_cdx(path: Path, digests: dict[str, tuple[str | None, str | None]], *, package_sha256: str) -> int:
    """Validate a CycloneDX file against the 1.6 schema and check its shipped components' hashes."""
    from cyclonedx.model.bom import Bom

    data = path.read_bytes()
    if b"\r" in data or not data.endswith(b"\n") or data.startswith(b"\xef\xbb\xbf"):
        raise IntegrityError("SBOM is not UTF-8 without BOM with LF line endings", file=path)
    errors = cdx_schema_errors(data)
    if errors:
        raise IntegrityError("CycloneDX 1.6 schema validation failed", file=path, found=errors[:5])
    document = json.loads(data)
    if document.get("specVersion") != "1.6":
        raise IntegrityError("is not CycloneDX 1.6", file=path, field="specVersion", found=document.get("specVersion"), expected="1.6")
    root_hashes = {h["alg"]: h["content"] for h in document.get("metadata", {}).get("component", {}).get("hashes", [])}
    if root_hashes.get("SHA-256") != package_sha256:
        raise IntegrityError("hash mismatch: the CycloneDX root component is not the package archive", file=path, field="metadata.component.hashes", found=root_hashes.get("SHA-256"), expected=package_sha256)
    declared = _cdx_declared(document)
    for name in sorted(declared):
        if name not in digests:
            raise IntegrityError(f"SBOM lists {name!r} as shipped, but the payload does not hold it", file=path, field=name)
    _compare_declared(path, declared, {name: digests[name] for name in declared})
    bom = Bom.from_json(document)  # the library must read back what it wrote
    refs = {str(c.bom_ref) for c in bom.components}
    for dependency in bom.dependencies:
        for edge in dependency.dependencies:
            if str(edge.ref) not in refs:
                raise IntegrityError("dependency graph names a component the SBOM does not hold", file=path, field=str(dependency.ref), found=str(edge.ref))
    return len(bom.components)


# -- CLI ------------------------------------------------------------------------

def validate_file(path: Path) -> str:
    """Standalone validation of one SBOM file (schema/semantics only; no payload to compare)."""
    if path.name.endswith(".spdx.json"):
        from spdx_tools.spdx.parser.error import SPDXParsingError
        from spdx_tools.spdx.parser.parse_anything import parse_file
        from spdx_tools.spdx.validation.document_validator import validate_full_spdx_document

        try:
            document = parse_file(str(path))
        except SPDXParsingError as exc:
            raise IntegrityError(f"is not a parsable SPDX document: {exc.get_messages()[:3]}", file=path) from None
        messages = validate_full_spdx_document(document)
        if messages:
            raise IntegrityError("SPDX validation failed", file=path, found=[m.validation_message for m in messages[:5]])
        return f"{path}: valid {document.creation_info.spdx_version}, {len(document.files)} files"
    if path.name.endswith(".cdx.json"):
        errors = cdx_schema_errors(path.read_bytes())
        if errors:
            raise IntegrityError("CycloneDX 1.6 schema validation failed", file=path, found=errors[:5])
        document = json.loads(path.read_bytes())
        return f"{path}: valid CycloneDX {document.get('specVersion')}, {len(document.get('components', []))} components"
    from .errors import UsageError

    raise UsageError("unknown SBOM type", file=path, expected="a *.spdx.json or *.cdx.json file")


def register_cli(sub) -> None:
    parser = sub.add_parser("sbom", help="validate SPDX 2.3 / CycloneDX 1.6 documents")
    action = parser.add_subparsers(dest="sbom_action", required=True)
    validate = action.add_parser("validate", help="validate *.spdx.json with spdx-tools and *.cdx.json against the CycloneDX 1.6 schema")
    validate.add_argument("files", nargs="+", type=Path)
    validate.set_defaults(func=lambda args: [print(validate_file(p)) for p in args.files] and 0)
