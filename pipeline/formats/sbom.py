"""The two SBOMs of a package: SPDX 2.3 and CycloneDX 1.6, written from one component model.

Both documents come from the same `pipeline.formats.components.ComponentModel`
(built here by `component_model` from what the package stage gathered from the
real files), so they list the same components with the same versions,
suppliers, purls, licences, copyright texts and hashes:

- the package archive (the root: SPDX `DESCRIBES` it, CycloneDX's
  `metadata.component`); it declares no licence of its own (an aggregate) and
  its concluded licence is the conjunction of everything it ships;
- each binary and each bundled runtime library (SHA-256 and SHA-1 of its
  payload file), each library the target provides (system, driver, base
  image: supplier and version from the lane), each vendored source component
  (the source's `third_party/inventory.json`), the toolchain that built the
  binaries and, when the build identity lists them, the build host's
  dependencies (`ComponentModel.add_host_dependencies`);
- the graph from the import analysis: SPDX `CONTAINS` (the archive holds it),
  `DYNAMIC_LINK` (an ELF DT_NEEDED / PE import), `DEPENDS_ON` (a library loaded
  by name), `HAS_PREREQUISITE` + `BUILD_TOOL_OF`/`BUILD_DEPENDENCY_OF` (built
  with, not shipped); CycloneDX `dependencies` for the runtime edges.

SPDX (spdx-tools) also lists every payload file with SHA-1 and SHA-256 and a
package verification code; every package has a supplier and a version (the
NTIA minimum elements, checked in the tests with ntia-conformance-checker);
each `LicenseRef-*` carries its text; the creator tool is
`omp-ninfer-pipeline-<version of the installed package>`; namespace uuid5 of
the build identity, `created` = the source epoch.  CycloneDX
(cyclonedx-python-lib): serial number uuid5 of the build identity, timestamp =
the source epoch, validated against the bundled 1.6 JSON schema (strict).
Both are written as sorted-key JSON with LF.

Both are cross-checked against the real files before they are written: any
declared hash that differs from the bytes stops the stage, naming the file.
"""

from __future__ import annotations

import functools
import json
import re
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pipeline.errors import EnvironmentProblem, InputError, IntegrityError
from pipeline.formats import components as cm
from pipeline.util.fs import atomic_write_bytes, read_bytes_bounded
from pipeline.util.hashing import file_digests
from pipeline.util.jsonio import MAX_DOCUMENT_BYTES, canonical_bytes, loads_object

TOOL_NAME = "omp-ninfer-pipeline"
PROPERTY = "omp-ninfer"  # CycloneDX property namespace
SPDX_PACKAGE_ID = "SPDXRef-Package-NInfer"
PROVIDED_DESCRIPTIONS = {
    "system": "provided by the target operating system; not bundled",
    "driver": "provided by the NVIDIA driver; not bundled",
    "base-image": "provided by the container base image; not bundled",
}
_CDX_APPLICATIONS = ("cmake", "ninja", "nvidia-cuda-nvcc")


def tool_version() -> str:
    """The pipeline's version as its installed package metadata states it (the SBOM creator tool)."""
    from importlib import metadata

    try:
        return metadata.version(TOOL_NAME)
    except metadata.PackageNotFoundError:
        raise EnvironmentProblem(
            f"the {TOOL_NAME} package is not installed, so its version is unknown",
            why="the SBOMs name the exact pipeline version that wrote them",
            fix="install it: pip install -e . (nox does this in .nox/pipeline-env)",
        ) from None


def tool_creator() -> str:
    return f"{TOOL_NAME}-{tool_version()}"


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
    libraries: list[Any] = field(default_factory=list)  # pipeline.lanework.binaries.Library
    edges: dict[str, tuple[str, ...]] = field(default_factory=dict)
    fold_case: bool = False
    vendored: list[dict[str, Any]] = field(default_factory=list)
    toolchain: dict[str, Any] = field(default_factory=dict)
    cuda_toolkit: str = ""
    runtime_copyright: str | None = None  # from the runtime's LICENSE
    providers: dict[str, Any] = field(default_factory=dict)  # provider kind -> pipeline.formats.lanes.Provider
    license_texts: dict[str, tuple[str, str]] = field(default_factory=dict)  # LicenseRef-* -> (name, text)
    toolchain_authors: dict[str, str] = field(default_factory=dict)  # wheel distribution -> METADATA author
    host_dependencies: list[dict[str, Any]] = field(default_factory=list)  # from the build identity

    def created(self) -> datetime:
        return datetime.fromtimestamp(self.epoch, tz=UTC)

    def download_url(self, name: str) -> str:
        return f"{self.component_repository}/releases/download/{self.component_tag}/{name}"


# -- the component model ----------------------------------------------------------

def _library_purl(library) -> str | None:
    if library.wheel:
        return cm.purl("pypi", library.wheel[0], library.wheel[1])
    if library.version:
        return cm.purl("generic", library.name, library.version)
    return None


def component_model(inp: SbomInput) -> cm.ComponentModel:
    """The one list both SBOMs are written from (see pipeline.formats.components)."""
    files = {f.path: f for f in inp.files}
    owner_repo = inp.component_repository.removeprefix("https://github.com/")
    owner, _, repo = owner_repo.partition("/")
    supplier = cm.repository_owner(inp.component_repository)
    key = (lambda n: n.lower()) if inp.fold_case else (lambda n: n)

    shipped_licenses = [inp.runtime_license]
    shipped_licenses += [lib.license for lib in inp.libraries if lib.bundled and lib.license]
    shipped_licenses += [entry["license"] for entry in inp.vendored]
    root = cm.Component(
        ref=f"package:{inp.package_filename}",
        role="package",
        name=inp.package_root,
        version=inp.release_version,
        supplier=supplier,
        purl=cm.purl("github", repo, inp.component_tag, namespace=owner),
        declared=None,  # an aggregate: no single licence covers it
        concluded=cm.conjunction(shipped_licenses),
        sha256=inp.package_sha256,
        description=f"NInfer runtime package: {inp.lane_title} ({inp.component_tag})",
    )
    model = cm.ComponentModel(root=root)
    model.license_texts = {k: cm.LicenseText(k, name, text) for k, (name, text) in sorted(inp.license_texts.items())}
    refs: dict[str, str] = {}  # key(library or binary name) -> ref

    for name, payload_path in sorted(inp.binaries.items()):
        item = files[payload_path]
        model.add(cm.Component(
            ref=f"file:{payload_path}",
            role="binary",
            name=name,
            version=inp.release_version,
            supplier=supplier,
            declared=inp.runtime_license,
            concluded=inp.runtime_license,
            copyright=inp.runtime_copyright,
            sha256=item.sha256,
            sha1=item.sha1,
            path=payload_path,
            properties=(("bundled", "true"), ("path", payload_path), ("role", "binary")),
        ))
        refs[key(name)] = f"file:{payload_path}"
        model.link(root.ref, "contains", f"file:{payload_path}")

    for library in sorted(inp.libraries, key=lambda lib: lib.name.lower()):
        if library.bundled:
            payload_path = f"bin/{library.name}"
            item = files[payload_path]
            if not library.version or not library.supplier:
                raise IntegrityError(
                    f"the bundled library {library.name} has no {'version' if not library.version else 'supplier'}",
                    field=f"package.redistributables: {library.name}",
                    why="every component of the SBOMs names its supplier and version (NTIA minimum elements)",
                    fix=("a DLL states its version in its version resource (ProductVersion): bundle one that carries it; "
                         "declare the supplier (and, for a library without one, the version) in the lane's [[package.redistributables]]"),
                )
            component = cm.with_properties(cm.Component(
                ref=f"file:{payload_path}",
                role="runtime-library",
                name=library.name,
                version=library.version,
                supplier=library.supplier,
                purl=_library_purl(library),
                declared=library.license,
                concluded=library.license,
                copyright=getattr(library.redistributable, "copyright", None),
                sha256=item.sha256,
                sha1=item.sha1,
                path=payload_path,
            ), path=payload_path, role="runtime-library", bundled="true", origin=library.origin,
                wheel=f"{library.wheel[0]}=={library.wheel[1]}" if library.wheel else None,
                license_text=f"licenses/{library.license_name}" if library.license_name else None)
            model.add(component)
            model.link(root.ref, "contains", component.ref)
        else:
            provider = inp.providers.get(library.provided_by)
            if provider is None:
                raise IntegrityError(
                    f"{library.name} is provided by {cm.PROVIDERS.get(library.provided_by, library.provided_by)}, but the lane does not say who that is",
                    field=f"package.{library.provided_by.replace('-', '_')}_provider",
                    fix="declare its supplier and version in the lane file",
                )
            component = cm.with_properties(cm.Component(
                ref=f"provided:{key(library.name)}",
                role="provided-library",
                name=library.name,
                version=provider.version,
                supplier=provider.supplier,
                description=PROVIDED_DESCRIPTIONS[library.provided_by],
            ), role="runtime-library", bundled="false", provided_by=library.provided_by)
            model.add(component)
        refs[key(library.name)] = component.ref

    # The graph, from the import analysis: binaries and bundled libraries -> what they load.
    imports = {key(lib.name): {key(n) for n in lib.imports} for lib in inp.libraries if lib.bundled}
    for importer, imported in sorted(inp.edges.items()):
        source = refs.get(key(importer))
        if source is None:
            continue
        real = imports.get(key(importer))
        for name in imported:
            kind = "loads" if real is not None and key(name) not in real else "dynamic-link"
            model.link(source, kind, refs[key(name)])

    _add_vendored(model, inp)
    _add_toolchain(model, inp)
    model.add_host_dependencies(inp.host_dependencies)
    model.check_license_texts()
    return model


def _add_vendored(model: cm.ComponentModel, inp: SbomInput) -> None:
    """Each vendored source component (the source's third_party/inventory.json), compiled into the binaries."""
    for entry in sorted(inp.vendored, key=lambda e: e["name"]):
        purl = cm.canonical_purl(entry["purl"], where=f"third_party/inventory.json: {entry['name']}.purl")
        component = cm.Component(
            ref=purl,
            role="vendored-source",
            name=entry["name"],
            version=entry["version"],
            supplier=entry["supplier"],
            purl=purl,
            declared=entry["license"],
            concluded=entry["license"],
            copyright=entry.get("copyright"),
            description="vendored source compiled into the binaries",
            properties=tuple(sorted(
                [("license-file", entry["license_file"]), ("role", "vendored-source"), ("source-path", entry["path"])]
                + [(f"file-sha256:{f['path']}", f["sha256"]) for f in entry["files"]]
            )),
        )
        model.add(component)
        model.link(model.root.ref, "vendored", component.ref)


def _add_toolchain(model: cm.ComponentModel, inp: SbomInput) -> None:
    """The toolchain that built the binaries: the pinned wheels, else the CUDA toolkit the binaries' identity names."""
    wheels = inp.toolchain.get("wheels", [])
    for wheel in wheels:
        distribution = wheel["distribution"]
        component = cm.Component(
            ref=f"toolchain:{distribution}@{wheel['version']}",
            role="build-toolchain",
            name=distribution,
            version=wheel["version"],
            supplier=cm.toolchain_supplier(distribution, inp.toolchain_authors) or "",
            purl=cm.purl("pypi", distribution, wheel["version"]),
            sha256=wheel["sha256"],
            description="build toolchain wheel (used to build the binaries, not shipped)",
            properties=(("role", "build-toolchain"), ("toolchain-kind", str(inp.toolchain.get("kind")))),
        )
        model.add(component)
        model.link(model.root.ref, "build-tool", component.ref)
    if not wheels and inp.cuda_toolkit:
        component = cm.Component(
            ref=f"toolchain:cuda-toolkit@{inp.cuda_toolkit}",
            role="build-toolchain",
            name="cuda-toolkit",
            version=inp.cuda_toolkit,
            supplier="NVIDIA Corporation",
            description="CUDA toolkit of the build host (binaries built outside this pipeline run; identity read from the binaries)",
            properties=(("role", "build-toolchain"), ("toolchain-kind", str(inp.toolchain.get("kind", "prebuilt")))),
        )
        model.add(component)
        model.link(model.root.ref, "build-tool", component.ref)


# -- SPDX ---------------------------------------------------------------------

def _spdx_id(prefix: str, text: str) -> str:
    return f"SPDXRef-{prefix}-" + re.sub(r"[^A-Za-z0-9.-]", "-", text)


def _spdx_file_id(path: str) -> str:
    return _spdx_id("File", path)


_SPDX_PREFIX = {
    "binary": "Binary",
    "runtime-library": "Library",
    "provided-library": "Provided",
    "vendored-source": "Vendored",
    "build-toolchain": "Toolchain",
    "host-build-dependency": "HostDependency",
}


def spdx_package_id(component: cm.Component) -> str:
    if component.role == "package":
        return SPDX_PACKAGE_ID
    if component.path:
        return _spdx_id(_SPDX_PREFIX[component.role], component.path)
    if component.role == "provided-library":
        return _spdx_id("Provided", component.ref.removeprefix("provided:"))
    return _spdx_id(_SPDX_PREFIX[component.role], f"{component.name}-{component.version}")


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


@functools.cache
def _spdx_licensing():
    """The SPDX licence index, built once per process (building it costs ~0.1 s; a set's SBOMs parse dozens of expressions)."""
    from license_expression import get_spdx_licensing

    return get_spdx_licensing()


def _spdx_license(expression: str | None):
    from spdx_tools.spdx.model import SpdxNoAssertion

    return _spdx_licensing().parse(expression) if expression else SpdxNoAssertion()


_SPDX_RELATIONSHIPS = {
    # edge kind -> (relationship from the source, reverse relationship from the target or None)
    "contains": ("CONTAINS", None),
    "vendored": ("CONTAINS", None),
    "dynamic-link": ("DYNAMIC_LINK", None),
    "loads": ("DEPENDS_ON", None),
    # Built with, not shipped: HAS_PREREQUISITE keeps them in the graph NTIA checkers walk,
    # the reverse relationship says exactly what they are.
    "build-tool": ("HAS_PREREQUISITE", "BUILD_TOOL_OF"),
    "build-dependency": ("HAS_PREREQUISITE", "BUILD_DEPENDENCY_OF"),
}
_SPDX_PURPOSE = {
    "package": "ARCHIVE",
    "binary": "APPLICATION",
    "runtime-library": "LIBRARY",
    "provided-library": "LIBRARY",
    "vendored-source": "SOURCE",
    "build-toolchain": "APPLICATION",
    "host-build-dependency": "LIBRARY",
}


def build_spdx(inp: SbomInput, model: cm.ComponentModel | None = None):
    from spdx_tools.spdx.model import (
        Actor,
        ActorType,
        Checksum,
        ChecksumAlgorithm,
        CreationInfo,
        Document,
        ExternalPackageRef,
        ExternalPackageRefCategory,
        ExtractedLicensingInfo,
        File,
        Package,
        PackagePurpose,
        Relationship,
        RelationshipType,
        SpdxNoAssertion,
    )
    from spdx_tools.spdx.spdx_element_utils import calculate_package_verification_code

    model = model or component_model(inp)
    ids = [_spdx_file_id(f.path) for f in inp.files]
    if len(set(ids)) != len(ids):
        raise IntegrityError("two payload paths map to one SPDX id", found=sorted(ids))
    # A payload file that is a component (a binary, a bundled library) carries that component's licence.
    licence_of = {c.path: c.concluded for c in model.all() if c.path}
    files = [
        File(
            name=f"./{item.path}",
            spdx_id=spdx_id,
            checksums=[Checksum(ChecksumAlgorithm.SHA1, item.sha1), Checksum(ChecksumAlgorithm.SHA256, item.sha256)],
            file_types=[_spdx_file_type(item.path)],
            license_concluded=_spdx_license(licence_of.get(item.path)),
            license_info_in_file=[SpdxNoAssertion()],
            copyright_text=SpdxNoAssertion(),
        )
        for item, spdx_id in sorted(zip(inp.files, ids, strict=True), key=lambda pair: pair[0].path)
    ]
    file_by_path = {f.name.removeprefix("./"): f for f in files}
    package_ids = {c.ref: spdx_package_id(c) for c in model.all()}
    if len(set(package_ids.values())) != len(package_ids):
        raise IntegrityError("two SBOM components map to one SPDX id", found=sorted(package_ids.values()))

    packages = []
    relationships = [Relationship("SPDXRef-DOCUMENT", RelationshipType.DESCRIBES, SPDX_PACKAGE_ID)]
    for component in model.all():
        spdx_id = package_ids[component.ref]
        checksums = []
        if component.sha1:
            checksums.append(Checksum(ChecksumAlgorithm.SHA1, component.sha1))
        if component.sha256:
            checksums.append(Checksum(ChecksumAlgorithm.SHA256, component.sha256))
        own_files = [file_by_path[component.path]] if component.path else []
        refs = [ExternalPackageRef(ExternalPackageRefCategory.PACKAGE_MANAGER, "purl", component.purl)] if component.purl else []
        properties = dict(component.properties)
        comment = component.description or None
        if component.role == "runtime-library" and properties.get("origin"):
            comment = f"bundled in bin/; origin {properties['origin']}" + (f" (wheel {properties['wheel']})" if properties.get("wheel") else "")
        if component.role == "vendored-source":
            comment = "vendored source compiled into the binaries; files (SHA-256): " + ", ".join(
                f"{name.removeprefix('file-sha256:')} {value}" for name, value in sorted(properties.items()) if name.startswith("file-sha256:")
            )
        package = Package(
            spdx_id=spdx_id,
            name=component.name,
            version=component.version,
            supplier=Actor(ActorType.ORGANIZATION, component.supplier),
            download_location=SpdxNoAssertion(),
            files_analyzed=bool(own_files),
            verification_code=calculate_package_verification_code(own_files) if own_files else None,
            file_name=component.path,
            checksums=checksums,
            license_concluded=_spdx_license(component.concluded),
            license_declared=_spdx_license(component.declared),
            copyright_text=component.copyright or SpdxNoAssertion(),
            external_references=refs,
            primary_package_purpose=PackagePurpose[_SPDX_PURPOSE[component.role]],
            comment=comment,
        )
        if component.role == "package":
            package.file_name = inp.package_filename
            package.download_location = inp.download_url(inp.package_filename)
            package.files_analyzed = True
            package.verification_code = calculate_package_verification_code(files)
            package.summary = component.description
            package.comment = None
            package.license_comment = (
                "The archive is an aggregate and declares no licence of its own: each component it ships states its "
                "own terms on its package here, and the concluded licence is all of them together."
            )
            package.source_info = f"built from source commit {inp.source.get('commit')} (tree {inp.source.get('tree')})"
            relationships += [Relationship(SPDX_PACKAGE_ID, RelationshipType.CONTAINS, f.spdx_id) for f in files]
        else:
            relationships += [Relationship(spdx_id, RelationshipType.CONTAINS, f.spdx_id) for f in own_files]
        packages.append(package)

    for edge in sorted(model.edges, key=lambda e: (e.source, e.kind, e.target)):
        forward, reverse = _SPDX_RELATIONSHIPS[edge.kind]
        source, target = package_ids[edge.source], package_ids[edge.target]
        relationships.append(Relationship(source, RelationshipType[forward], target))
        if reverse:
            relationships.append(Relationship(target, RelationshipType[reverse], source))

    creation = CreationInfo(
        spdx_version="SPDX-2.3",
        spdx_id="SPDXRef-DOCUMENT",
        name=f"{inp.package_root}-sbom",
        data_license="CC0-1.0",
        document_namespace=spdx_namespace(inp),
        creators=[Actor(ActorType.TOOL, tool_creator()), Actor(ActorType.ORGANIZATION, model.root.supplier)],
        created=inp.created(),
    )
    extracted = [
        ExtractedLicensingInfo(license_id=text.license_id, extracted_text=text.text, license_name=text.name)
        for text in (model.license_texts[k] for k in model.license_refs())
    ]
    packages.sort(key=lambda p: (p.spdx_id != SPDX_PACKAGE_ID, p.spdx_id))
    relationships.sort(key=lambda r: (r.relationship_type != RelationshipType.DESCRIBES, r.spdx_element_id, r.relationship_type.name, r.related_spdx_element_id))
    return Document(creation_info=creation, packages=packages, files=files, relationships=relationships, extracted_licensing_info=extracted)


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


def write_spdx(path: Path, inp: SbomInput, payload_dir: Path, model: cm.ComponentModel | None = None) -> bytes:
    document = build_spdx(inp, model)
    data = spdx_bytes(document)
    cross_check(path, _spdx_declared(json.loads(data)), payload_dir)  # our own bytes, just serialised
    atomic_write_bytes(path, data)
    verify_spdx(path, _disk_digests(payload_dir), package_name=inp.package_filename, package_sha256=inp.package_sha256)
    return data


def _spdx_declared(document: dict[str, Any]) -> dict[str, dict[str, str]]:
    declared: dict[str, dict[str, str]] = {}
    for item in document.get("files", []):
        path = item["fileName"].removeprefix("./")
        declared[path] = {c["algorithm"].lower(): c["checksumValue"] for c in item.get("checksums", [])}
    return declared


# What spdx-tools and the CycloneDX library raise on a document of the wrong shape (a list where
# they expect an object, a number where a string): they are not hardened readers, so each SBOM is
# read strictly first, and their own shape errors are the document's defect, not a bug.
_LIBRARY_SHAPE_ERRORS = (AttributeError, TypeError, ValueError, KeyError, IndexError, RecursionError)


def _strict_sbom_json(path: Path, data: bytes) -> dict[str, Any]:
    """The SBOM as the pipeline's strict JSON reader sees it (duplicate keys, NaN, nesting, a non-object refused)."""
    try:
        return loads_object(data, source=path)
    except InputError as exc:
        raise IntegrityError(exc.what, file=path, found=exc.found, expected=exc.expected, why=exc.why) from None


def _parse_spdx(path: Path, data: bytes):
    from spdx_tools.spdx.parser.error import SPDXParsingError
    from spdx_tools.spdx.parser.parse_anything import parse_file

    _strict_sbom_json(path, data)  # spdx-tools would keep the last of two equal keys
    try:
        return parse_file(str(path))
    except SPDXParsingError as exc:
        raise IntegrityError(f"is not a parsable SPDX document: {exc.get_messages()[:3]}", file=path) from None
    except _LIBRARY_SHAPE_ERRORS as exc:
        raise IntegrityError(f"is not a parsable SPDX document ({type(exc).__name__}: {str(exc)[:200]})", file=path,
                             expected="an SPDX 2.3 JSON document") from None


MAX_SBOM_BYTES = MAX_DOCUMENT_BYTES  # 32 MiB: the cap of every JSON document read, applied while the file is read


def _read_sbom(path: Path) -> bytes:
    """An SBOM's bytes, refused past MAX_SBOM_BYTES without reading more than that (a sparse 1 GiB file costs 32 MiB)."""
    try:
        return read_bytes_bounded(path, MAX_SBOM_BYTES, what="SBOM")
    except InputError as error:  # too large (or absent): an SBOM of a set that is not what it should be
        raise IntegrityError(error.what, file=path, why=error.why, fix=error.fix) from None


def verify_spdx(path: Path, digests: dict[str, tuple[str | None, str | None]], *, package_name: str, package_sha256: str) -> int:
    """Parse an SPDX file back, validate it, and check it lists exactly the payload with the payload's hashes."""
    from spdx_tools.spdx.validation.document_validator import validate_full_spdx_document

    data = _read_sbom(path)
    if b"\r" in data or not data.endswith(b"\n") or data.startswith(b"\xef\xbb\xbf"):
        raise IntegrityError("SBOM is not UTF-8 without BOM with LF line endings", file=path)
    document = _parse_spdx(path, data)
    messages = validate_full_spdx_document(document)
    if messages:
        raise IntegrityError("SPDX validation failed", file=path, found=[m.validation_message for m in messages[:5]])
    if document.creation_info.spdx_version != "SPDX-2.3":
        raise IntegrityError("is not SPDX 2.3", file=path, found=document.creation_info.spdx_version, expected="SPDX-2.3")
    packages = {p.spdx_id: p for p in document.packages}
    described = [r.related_spdx_element_id for r in document.relationships if r.spdx_element_id == "SPDXRef-DOCUMENT" and r.relationship_type.name == "DESCRIBES"]
    roots = [packages[d] for d in described if d in packages]
    if len(described) != 1 or len(roots) != 1 or roots[0].file_name != package_name:
        raise IntegrityError("SPDX document must describe exactly the package archive", file=path, found=[p.file_name for p in roots] or described, expected=package_name)
    root = roots[0]
    archive_sums = {c.algorithm.name: c.value for c in root.checksums}
    if archive_sums.get("SHA256") != package_sha256:
        raise IntegrityError("hash mismatch: the SPDX package checksum is not the archive's", file=path, field=f"{root.spdx_id}.checksums (SHA256 of {package_name})", found=archive_sums.get("SHA256"), expected=package_sha256)
    declared = {f.name.removeprefix("./"): {c.algorithm.name.lower(): c.value for c in f.checksums} for f in document.files}
    _compare_declared(path, declared, digests)
    # The packages of shipped binaries and libraries name their payload file: same bytes, same hashes.
    shipped = {p.file_name: {c.algorithm.name.lower(): c.value for c in p.checksums} for p in document.packages if p is not root and p.file_name}
    for name in sorted(set(shipped) - set(digests)):
        raise IntegrityError(f"SPDX package for {name!r} names a file the payload does not hold", file=path, field=name)
    _compare_declared(path, shipped, {name: digests[name] for name in shipped})
    # Every package is reached from the archive by the relationships NTIA checkers follow.
    forward = ("DESCRIBES", "CONTAINS", "DEPENDS_ON", "DYNAMIC_LINK", "STATIC_LINK", "HAS_PREREQUISITE")
    reached, queue = {root.spdx_id}, [root.spdx_id]
    while queue:
        current = queue.pop()
        for relation in document.relationships:
            if relation.spdx_element_id == current and relation.relationship_type.name in forward and relation.related_spdx_element_id not in reached:
                reached.add(relation.related_spdx_element_id)
                queue.append(relation.related_spdx_element_id)
    for spdx_id in sorted(set(packages) - reached):
        raise IntegrityError("SPDX package is not linked to the archive by any dependency relationship", file=path, field=spdx_id, expected=f"a path of {', '.join(forward[1:])} from {root.spdx_id}")
    for spdx_id, package in sorted(packages.items()):
        if package.supplier is None or not package.version:
            raise IntegrityError("SPDX package lacks a supplier or version (NTIA minimum elements)", file=path, field=spdx_id)
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

def _licenses(expression: str | None, *, concluded: bool = False):
    from cyclonedx.contrib.license.factories import LicenseFactory
    from cyclonedx.model.license import LicenseAcknowledgement, LicenseExpression

    if not expression:
        return []
    if concluded:
        # The archive's terms are concluded from its parts, not declared by anyone.
        return [LicenseExpression(expression, acknowledgement=LicenseAcknowledgement.CONCLUDED)]
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


_CDX_SCOPE = {
    "binary": "REQUIRED",
    "runtime-library": "REQUIRED",
    "provided-library": "REQUIRED",
    "vendored-source": "REQUIRED",
    "build-toolchain": "EXCLUDED",
    "host-build-dependency": "EXCLUDED",
}


def _cdx_purl(component: cm.Component):
    """The model's purl for the CycloneDX library, which writes it back as the exact bytes SPDX carries."""
    from packageurl import PackageURL

    if not component.purl:
        return None
    parsed = PackageURL.from_string(component.purl)
    if parsed.to_string() != component.purl:
        raise IntegrityError("the CycloneDX library would write another purl than the SPDX document", field=component.ref, found=parsed.to_string(), expected=component.purl)
    return parsed


def build_cdx(inp: SbomInput, model: cm.ComponentModel | None = None):
    from cyclonedx.model import ExternalReference, ExternalReferenceType, Property, XsUri
    from cyclonedx.model.bom import Bom, BomMetaData
    from cyclonedx.model.component import Component, ComponentScope, ComponentType
    from cyclonedx.model.contact import OrganizationalEntity
    from cyclonedx.model.lifecycle import LifecyclePhase, PredefinedLifecycle
    from cyclonedx.model.tool import ToolRepository

    model = model or component_model(inp)
    top = model.root
    root = Component(
        type=ComponentType.APPLICATION,
        bom_ref=top.ref,
        name=top.name,
        version=top.version,
        description=top.description,
        supplier=OrganizationalEntity(name=top.supplier),
        hashes=_hashes(top.sha256),
        licenses=_licenses(top.concluded, concluded=True),
        purl=_cdx_purl(top),
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
    tool = Component(type=ComponentType.APPLICATION, bom_ref=f"tool:{TOOL_NAME}", name=TOOL_NAME, version=tool_version())
    bom = Bom(
        serial_number=cdx_serial(inp),
        metadata=BomMetaData(
            component=root,
            timestamp=inp.created(),
            tools=ToolRepository(components=[tool]),
            lifecycles=[PredefinedLifecycle(LifecyclePhase.BUILD)],
        ),
    )
    made: dict[str, Component] = {top.ref: root}
    for item in model.all()[1:]:
        if item.role == "build-toolchain":
            kind = ComponentType.APPLICATION if item.name in _CDX_APPLICATIONS or item.name == "cuda-toolkit" else ComponentType.LIBRARY
        elif item.role == "binary":
            kind = ComponentType.APPLICATION
        else:
            kind = ComponentType.LIBRARY
        component = Component(
            type=kind,
            bom_ref=item.ref,
            name=item.name,
            version=item.version,
            description=item.description or None,
            supplier=OrganizationalEntity(name=item.supplier),
            hashes=_hashes(item.sha256, item.sha1),
            licenses=_licenses(item.declared),
            copyright=item.copyright,
            purl=_cdx_purl(item),
            scope=ComponentScope[_CDX_SCOPE[item.role]],
            properties=[Property(name=f"{PROPERTY}:{name}", value=value) for name, value in item.properties],
        )
        bom.components.add(component)
        made[item.ref] = component

    # Runtime edges only: what is contained is listed as a component; build edges are not dependencies.
    for ref in [top.ref, *sorted(model.components)]:
        targets = [
            e.target for e in model.edges_from(ref, "dynamic-link", "loads", "vendored", "contains")
            if e.kind != "contains" or model.get(e.target).role == "binary"
        ]
        bom.register_dependency(made[ref], [made[t] for t in sorted(set(targets))])
    return bom


def cdx_bytes(bom) -> bytes:
    """Serialise a BOM as CycloneDX 1.6 JSON (sorted keys, LF) and validate it against the schema."""
    import warnings

    from cyclonedx.output import make_outputter
    from cyclonedx.schema import OutputFormat, SchemaVersion

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an incomplete dependency graph is a bug here, not a warning
        text = make_outputter(bom, OutputFormat.JSON, SchemaVersion.V1_6).output_as_string()
    data = canonical_bytes(json.loads(text), indent=2)  # the CycloneDX library's output, re-serialised
    errors = cdx_schema_errors(data)
    if errors:
        raise IntegrityError(f"the CycloneDX document does not validate against the 1.6 schema ({len(errors)} errors)", found=errors[:5])
    return data


@functools.cache
def _cdx_validator():
    """The CycloneDX 1.6 strict schema validator, loaded once per process (its schema and referenced schemas are read from disk)."""
    _import_iri_syntax_lazily()
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    return JsonStrictValidator(SchemaVersion.V1_6)


def _import_iri_syntax_lazily() -> None:
    """Import rfc3987_syntax (the validator's `iri-reference` format check) with each of its Lark parsers built
    on first use.  At import it builds 39 Earley parsers, 2.3 s of every process that validates a CycloneDX
    document, and jsonschema uses one of them: the same checks, made when a value needs one."""
    import sys

    if "rfc3987_syntax" in sys.modules:
        return
    try:
        import lark
    except ImportError:  # jsonschema then checks the format without it, as it would anyway
        return
    eager = lark.Lark

    class LazyLark:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self._args, self._kwargs, self._parser = args, kwargs, None

        def parse(self, *args: Any, **kwargs: Any) -> Any:
            if self._parser is None:
                self._parser = eager(*self._args, **self._kwargs)
            return self._parser.parse(*args, **kwargs)

    lark.Lark = LazyLark  # type: ignore[misc,assignment]
    try:
        import rfc3987_syntax  # noqa: F401 - imported now, while `from lark import Lark` finds the lazy one
    except ImportError:
        pass
    finally:
        lark.Lark = eager  # type: ignore[misc]


def cdx_schema_errors(data: bytes) -> list[str]:
    errors = _cdx_validator().validate_str(data.decode("utf-8"), all_errors=True)
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


def write_cdx(path: Path, inp: SbomInput, payload_dir: Path, model: cm.ComponentModel | None = None) -> bytes:
    data = cdx_bytes(build_cdx(inp, model))
    cross_check(path, _cdx_declared(json.loads(data)), payload_dir, complete=False)  # our own bytes, just serialised
    atomic_write_bytes(path, data)
    verify_cdx(path, _disk_digests(payload_dir), package_sha256=inp.package_sha256)
    return data


def verify_cdx(path: Path, digests: dict[str, tuple[str | None, str | None]], *, package_sha256: str) -> int:
    """Validate a CycloneDX file against the 1.6 schema and check its shipped components' hashes."""
    from cyclonedx.model.bom import Bom

    data = _read_sbom(path)
    if b"\r" in data or not data.endswith(b"\n") or data.startswith(b"\xef\xbb\xbf"):
        raise IntegrityError("SBOM is not UTF-8 without BOM with LF line endings", file=path)
    document = _strict_sbom_json(path, data)  # before the schema validator, which reads with Python's json
    errors = cdx_schema_errors(data)
    if errors:
        raise IntegrityError("CycloneDX 1.6 schema validation failed", file=path, found=errors[:5])
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


# -- one file, whatever its kind (`python -m pipeline sbom validate`, pipeline/cli.py) --------------------------

def validate_file(path: Path) -> str:
    """Standalone validation of one SBOM file (schema/semantics only; no payload to compare)."""
    if path.name.endswith(".spdx.json"):
        from spdx_tools.spdx.validation.document_validator import validate_full_spdx_document

        document = _parse_spdx(path, _read_sbom(path))
        messages = validate_full_spdx_document(document)
        if messages:
            raise IntegrityError("SPDX validation failed", file=path, found=[m.validation_message for m in messages[:5]])
        return f"{path}: valid {document.creation_info.spdx_version}, {len(document.files)} files"
    if path.name.endswith(".cdx.json"):
        data = _read_sbom(path)
        document = _strict_sbom_json(path, data)
        errors = cdx_schema_errors(data)
        if errors:
            raise IntegrityError("CycloneDX 1.6 schema validation failed", file=path, found=errors[:5])
        return f"{path}: valid CycloneDX {document.get('specVersion')}, {len(document.get('components', []))} components"
    from pipeline.errors import UsageError

    raise UsageError("unknown SBOM type", file=path, expected="a *.spdx.json or *.cdx.json file")


def cdx_components(path: Path) -> dict[str, dict[str, str | None]]:
    """The components of a CycloneDX document for comparing two SBOMs (`diff`): keyed by package URL without
    its version (else by the component's payload path or bom-ref), each with name, version, licence and purl.
    The document is data (a set's SHA256SUMS vouches for nothing its maker did not choose): a list that is not
    one, or a component that is not an object, is an InputError naming the field."""
    document = _strict_sbom_json(path, _read_sbom(path))
    found: dict[str, dict[str, str | None]] = {}
    repeated: list[tuple[str, dict[str, str | None]]] = []  # two versions of one package: each keyed by its whole purl
    for index, component in enumerate(_cdx_list(document, "components", path, "components")):
        where = f"components[{index}]"
        if not isinstance(component, dict):
            raise InputError("is not a component object", file=path, field=where)
        purl = _text(component.get("purl"))
        properties = {p["name"]: p.get("value") for p in _cdx_list(component, "properties", path, where) if isinstance(p, dict) and isinstance(p.get("name"), str)}
        key = purl.split("@", 1)[0] if purl else (_text(properties.get(f"{PROPERTY}:path")) or _text(component.get("bom-ref")) or _text(component.get("name")) or f"#{index}")
        licences = []
        for entry in _cdx_list(component, "licenses", path, where):
            if isinstance(entry, dict):
                licence = entry.get("license") if isinstance(entry.get("license"), dict) else {}
                licences.append(_text(entry.get("expression")) or _text(licence.get("id")) or _text(licence.get("name")) or "")
        entry = {"name": _text(component.get("name")), "version": _text(component.get("version")),
                 "licence": " AND ".join(sorted(filter(None, licences))) or None, "purl": purl}
        if key in found or any(key == k for k, _ in repeated):
            repeated.append((key, entry))
        else:
            found[key] = entry
    for key, entry in repeated:
        if key in found:
            first = found.pop(key)
            found[first["purl"] or key] = first
        copy, name = 1, entry["purl"] or key
        while name in found:  # the same purl twice: still two components
            copy += 1
            name = f"{entry['purl'] or key} (#{copy})"
        found[name] = entry
    return dict(sorted(found.items()))


def _cdx_list(owner: dict[str, Any], name: str, path: Path, where: str) -> list[Any]:
    value = owner.get(name)
    if value is None:
        return []
    if not isinstance(value, list):
        raise InputError(f"has {name} that is not a list", file=path, field=f"{where}.{name}" if where != name else name, found=type(value).__name__, expected="a JSON array")
    return value


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


# -- the image SBOM ---------------------------------------------------------------

@dataclass(frozen=True)
class SetLicences:
    """What the set's own SPDX document states about licences: the archive's concluded licence, each
    payload file's (the component it is), the binaries' payload paths and the vendored sources' licences
    (compiled into the binaries)."""

    archive: str | None
    files: dict[str, str]  # payload path -> concluded licence (absent: nothing is known)
    binaries: frozenset[str]
    vendored: tuple[str, ...]
    texts: dict[str, tuple[str, str]] = field(default_factory=dict)  # LicenseRef-* -> (name, text), as the set's document carries them

    def of_payload(self, paths: list[str]) -> str | None:
        """The licence expression of these payload files together: each one's terms, and the vendored
        sources' when a binary they are compiled into is among them."""
        found = [self.files[path] for path in paths if path in self.files]
        if any(path in self.binaries for path in paths):
            found += self.vendored
        return cm.conjunction(found)


def _expression(value: Any) -> str | None:
    return value if isinstance(value, str) and value not in ("NOASSERTION", "NONE") else None


def set_licences(path: Path) -> SetLicences:
    """The licences a set's SPDX document states (read strictly and bounded; the package stage wrote it)."""
    document = _strict_sbom_json(path, _read_sbom(path))
    try:
        packages = {p["SPDXID"]: p for p in document["packages"]}
        [root] = [packages[r["relatedSpdxElement"]] for r in document["relationships"] if r["spdxElementId"] == "SPDXRef-DOCUMENT" and r["relationshipType"] == "DESCRIBES"]
        files = {f["fileName"].removeprefix("./"): _expression(f.get("licenseConcluded")) for f in document.get("files", [])}
        binaries = frozenset(p["packageFileName"] for p in packages.values() if p.get("primaryPackagePurpose") == "APPLICATION" and p.get("packageFileName") and p is not root)
        vendored = tuple(sorted({e for p in packages.values() if p.get("primaryPackagePurpose") == "SOURCE" and (e := _expression(p.get("licenseConcluded")))}))
        texts = {e["licenseId"]: (e.get("name") or e["licenseId"], e["extractedText"]) for e in document.get("hasExtractedLicensingInfos", [])}
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise IntegrityError(f"is not a set SBOM this pipeline wrote ({type(error).__name__}: {error})", file=path, expected="an SPDX 2.3 document describing one archive") from None
    return SetLicences(_expression(root.get("licenseConcluded")), {k: v for k, v in files.items() if v}, binaries, vendored, texts)


@dataclass(frozen=True)
class ImageFile:
    path: str  # absolute in the image
    source: Path  # the bytes
    layer: str
    layer_digest: str
    payload_path: str | None  # the file's path in the binary archive's payload, if it comes from there
    elf: bool = False


@dataclass(frozen=True)
class DebComponent:
    """One distribution package of a package base (from the lock and the package itself)."""

    name: str
    version: str
    architecture: str
    distro: str  # the purl qualifier, e.g. 'debian-13'
    sha256: str  # of the .deb
    url: str  # where the .deb is downloaded from
    maintainer: str  # the control file's Maintainer: 'Name <email>'
    source_package: str
    source_version: str
    licence: str | None  # from its machine-readable copyright file, else None (NOASSERTION)
    licence_note: str

    @property
    def purl(self) -> str:
        return cm.purl("deb", self.name, self.version, namespace=self.distro.split("-", 1)[0], qualifiers={"arch": self.architecture, "distro": self.distro})


@dataclass(frozen=True)
class WheelComponent:
    """A file of a package base taken from a wheel the toolchain lock pins (libcudart from the CUDA runtime wheel)."""

    distribution: str
    version: str
    sha256: str  # of the wheel
    url: str
    target: str  # where the file is in the image
    licence: str
    licence_name: str | None  # its LicenseRef-*, whose text comes with it
    licence_text: str | None

    @property
    def purl(self) -> str:
        return cm.purl("pypi", self.distribution, self.version)


@dataclass
class ImageSbomInput:
    """Everything the image SBOM says, gathered by the image stage from the real bytes."""

    name: str  # the image's name (containers/<definition>.toml)
    component_tag: str
    component_repository: str
    supplier: str  # the owner of the component repository
    repository: str  # where the image is published
    platform: str
    manifest_digest: str
    epoch: int
    files: list[ImageFile]
    layer_digests: list[str]  # every layer of the image, the base's first
    base_repository: str | None  # registry/path; None when the base is made of packages
    base_tag: str | None
    base_digest: str | None
    base_manifest_digest: str | None
    base_layer_digests: list[str]
    base_supplier: str | None
    base_license: str | None  # the definition's base.license
    base_license_name: str | None  # its LicenseRef-*, if any
    base_license_text: str | None
    archive_root: str
    archive_filename: str
    archive_sha256: str
    archive_prefix: str
    source_commit: str
    licences: SetLicences
    distribution_packages: list[DebComponent] = field(default_factory=list)  # a package base's packages, by name
    wheel_files: list[WheelComponent] = field(default_factory=list)  # files of a package base from pinned wheels

    @property
    def architecture(self) -> str:
        return self.platform.split("/")[1]


def image_licence_label(inp: ImageSbomInput) -> str | None:
    """`org.opencontainers.image.licenses`: the terms of what the image's own layers carry (never the base's)."""
    return inp.licences.of_payload([f.payload_path for f in inp.files if f.payload_path])


def _image_files(inp: ImageSbomInput):
    from spdx_tools.spdx.model import Checksum, ChecksumAlgorithm, File, FileType, SpdxNoAssertion

    files = []
    for number, item in enumerate(inp.files, 1):  # the stage's order: layer by layer, each sorted by path
        sha256, sha1, _size = file_digests(item.source)
        licence = inp.licences.files.get(item.payload_path or "")
        files.append(File(
            name="." + item.path,
            spdx_id=f"SPDXRef-File-{number}",
            checksums=[Checksum(ChecksumAlgorithm.SHA1, sha1), Checksum(ChecksumAlgorithm.SHA256, sha256)],
            file_types=[FileType.BINARY if item.elf else FileType.TEXT],
            license_concluded=_spdx_license(licence),
            license_info_in_file=[SpdxNoAssertion()],
            copyright_text=SpdxNoAssertion(),
            comment=f"layer '{item.layer}' {item.layer_digest}" + (f"; {item.payload_path} of {inp.archive_filename}" if item.payload_path else ""),
        ))
    return files


def _image_base_packages(inp: ImageSbomInput) -> list:
    """The base as SPDX packages: the registry image by digest, or each distribution package of a package base."""
    from spdx_tools.spdx.model import (
        Actor,
        ActorType,
        Checksum,
        ChecksumAlgorithm,
        ExternalPackageRef,
        ExternalPackageRefCategory,
        Package,
        PackagePurpose,
        SpdxNoAssertion,
    )
    from spdx_tools.spdx.validation.uri_validators import validate_download_location

    if inp.base_digest is None:
        packages = []
        for number, deb in enumerate(inp.distribution_packages, 1):
            maintainer = re.fullmatch(r"\s*(.*?)\s*<([^>]*)>\s*", deb.maintainer)
            packages.append(Package(
                spdx_id=f"SPDXRef-Deb-{number}",
                name=deb.name,
                version=deb.version,
                supplier=Actor(ActorType.ORGANIZATION, maintainer.group(1), maintainer.group(2)) if maintainer else Actor(ActorType.ORGANIZATION, deb.maintainer or deb.distro),
                # SPDX's download-location grammar wants a host name with a top-level domain: a loopback test archive's URL is kept in the comment
                download_location=deb.url if not validate_download_location(deb.url) else SpdxNoAssertion(),
                files_analyzed=False,
                checksums=[Checksum(ChecksumAlgorithm.SHA256, deb.sha256)],
                license_concluded=SpdxNoAssertion(),
                license_declared=_spdx_license(deb.licence),
                license_comment=f"declared: {deb.licence_note}" if deb.licence else f"declared NOASSERTION: its copyright file is {deb.licence_note.removeprefix('not ')}",
                copyright_text=SpdxNoAssertion(),
                primary_package_purpose=PackagePurpose.LIBRARY,
                source_info=f"built from the {deb.distro} source package {deb.source_package} {deb.source_version}",
                comment=f"a distribution package of the image's package base, from {deb.url} (its files are in the image's package layer; the SHA-256 is of its .deb)",
                external_references=[ExternalPackageRef(ExternalPackageRefCategory.PACKAGE_MANAGER, "purl", deb.purl)],
            ))
        for number, wheel in enumerate(inp.wheel_files, 1):
            packages.append(Package(
                spdx_id=f"SPDXRef-Wheel-{number}",
                name=wheel.distribution,
                version=wheel.version,
                supplier=Actor(ActorType.ORGANIZATION, "NVIDIA Corporation") if wheel.distribution.startswith("nvidia-") else SpdxNoAssertion(),
                download_location=wheel.url,
                files_analyzed=False,
                checksums=[Checksum(ChecksumAlgorithm.SHA256, wheel.sha256)],
                license_concluded=SpdxNoAssertion(),
                license_declared=_spdx_license(wheel.licence),
                license_comment=f"declared: the terms the image definition states for it ({wheel.licence})",
                copyright_text=SpdxNoAssertion(),
                primary_package_purpose=PackagePurpose.LIBRARY,
                comment=f"the wheel pinned by the toolchain lock; the image carries one file of it at {wheel.target}",
                external_references=[ExternalPackageRef(ExternalPackageRefCategory.PACKAGE_MANAGER, "purl", wheel.purl)],
            ))
        return packages
    assert inp.base_repository is not None and inp.base_supplier is not None
    purl = cm.purl("oci", inp.base_repository.rsplit("/", 1)[-1], inp.base_digest,
                   qualifiers={"arch": inp.architecture, "repository_url": inp.base_repository, **({"tag": inp.base_tag} if inp.base_tag else {})})
    return [Package(
        spdx_id="SPDXRef-BaseImage",
        name=inp.base_repository,
        # The tag the digest was resolved from, else the digest itself: the base is pinned by digest.
        version=inp.base_tag or inp.base_digest,
        supplier=Actor(ActorType.ORGANIZATION, inp.base_supplier),
        download_location=SpdxNoAssertion(),
        files_analyzed=False,
        checksums=[Checksum(ChecksumAlgorithm.SHA256, inp.base_digest.removeprefix("sha256:"))],
        license_concluded=SpdxNoAssertion(),
        license_declared=_spdx_license(inp.base_license),
        license_comment=(
            (f"declared: the terms the image definition states for the base ({inp.base_license}); " if inp.base_license else "")
            + "concluded NOASSERTION: the base's own layers are not analysed here"
        ),
        copyright_text=SpdxNoAssertion(),
        primary_package_purpose=PackagePurpose.CONTAINER,
        comment=(
            f"base image {inp.base_repository}@{inp.base_digest}; {inp.platform} manifest {inp.base_manifest_digest}; "
            "its files are not analysed here (NOASSERTION, scoped to this package): layers " + ", ".join(inp.base_layer_digests)
        ),
        external_references=[ExternalPackageRef(ExternalPackageRefCategory.PACKAGE_MANAGER, "purl", purl)],
    )]


def build_image_spdx(inp: ImageSbomInput):
    """The image's SPDX 2.3 document: the image (DESCRIBES), its base by digest with the base's terms as the
    definition states them, the binary archive by hash with the set's concluded licence, and every file of
    our layers with SHA-1, SHA-256 and the licence the set's SBOM states for it."""
    from spdx_tools.spdx.model import (
        Actor,
        ActorType,
        Checksum,
        ChecksumAlgorithm,
        CreationInfo,
        Document,
        ExternalPackageRef,
        ExternalPackageRefCategory,
        ExtractedLicensingInfo,
        Package,
        PackagePurpose,
        Relationship,
        RelationshipType,
        SpdxNoAssertion,
    )
    from spdx_tools.spdx.spdx_element_utils import calculate_package_verification_code

    created = datetime.fromtimestamp(inp.epoch, UTC).replace(tzinfo=None)
    namespace_uuid = uuid.uuid5(uuid.NAMESPACE_URL, f"omp-ninfer:image:{inp.name}:{inp.manifest_digest}")
    files = _image_files(inp)
    label = image_licence_label(inp)
    purl_of = {"image": cm.purl("oci", inp.name, inp.manifest_digest, qualifiers={"arch": inp.architecture, "repository_url": inp.repository, "tag": inp.component_tag})}
    image = Package(
        spdx_id="SPDXRef-Image",
        name=inp.name,
        version=inp.component_tag,
        supplier=Actor(ActorType.ORGANIZATION, inp.supplier),
        # SPDX wants a URL or VCS location here; an OCI reference is neither, so it goes into the purl.
        download_location=SpdxNoAssertion(),
        files_analyzed=True,
        verification_code=calculate_package_verification_code(files),
        checksums=[Checksum(ChecksumAlgorithm.SHA256, inp.manifest_digest.removeprefix("sha256:"))],
        # An aggregate of the base and our layers, and the base's own layers are not inventoried here.
        license_concluded=SpdxNoAssertion(),
        license_declared=SpdxNoAssertion(),
        license_comment=(
            "The image declares no licence of its own: the base image states its terms on its package, and our layers "
            f"carry {label or 'NOASSERTION'} (each file's licence below, from the binary archive's SBOM; the image label "
            "org.opencontainers.image.licenses says the same)"
        ),
        copyright_text=SpdxNoAssertion(),
        primary_package_purpose=PackagePurpose.CONTAINER,
        built_date=created,
        comment=f"OCI image {inp.platform}; checksum is the SHA-256 of the image manifest; layers: {', '.join(inp.layer_digests)}",
        external_references=[ExternalPackageRef(ExternalPackageRefCategory.PACKAGE_MANAGER, "purl", purl_of["image"])],
    )
    bases = _image_base_packages(inp)
    archive = Package(
        spdx_id="SPDXRef-BinaryArchive",
        name=inp.archive_root,
        version=inp.component_tag,
        supplier=Actor(ActorType.ORGANIZATION, inp.supplier),
        file_name=inp.archive_filename,
        download_location=SpdxNoAssertion(),
        files_analyzed=False,
        checksums=[Checksum(ChecksumAlgorithm.SHA256, inp.archive_sha256)],
        license_concluded=_spdx_license(inp.licences.archive),
        license_declared=SpdxNoAssertion(),
        license_comment="an aggregate (it declares none of its own): concluded from its binaries, libraries and vendored components, each with its licence in the archive's own SPDX document",
        copyright_text=SpdxNoAssertion(),
        primary_package_purpose=PackagePurpose.ARCHIVE,
        source_info=f"built from {inp.source_commit}",
        comment=f"unpacked into our layers under {inp.archive_prefix}",
    )
    # Every LicenseRef-* the document uses comes with its text: the set's (from its SBOM) and the base's (from the definition).
    texts = dict(inp.licences.texts)
    if inp.base_license_name:
        texts[inp.base_license_name] = (inp.base_license_name.removeprefix("LicenseRef-"), inp.base_license_text or "")
    for wheel in inp.wheel_files:
        if wheel.licence_name:
            texts[wheel.licence_name] = (wheel.licence_name.removeprefix("LicenseRef-"), wheel.licence_text or "")
    used = cm.licence_refs(inp.licences.archive, inp.base_license, *(inp.licences.files.get(f.payload_path or "") for f in inp.files),
                           *(deb.licence for deb in inp.distribution_packages), *(wheel.licence for wheel in inp.wheel_files))
    missing = sorted(used - set(texts))
    if missing:
        raise IntegrityError("the image SBOM would name a licence without its text", found=missing, fix="the set's SBOM or the image definition's base.license_file must carry it")
    extracted = [ExtractedLicensingInfo(license_id=ref, extracted_text=texts[ref][1], license_name=texts[ref][0]) for ref in sorted(used)]
    creation = CreationInfo(
        spdx_version="SPDX-2.3",
        spdx_id="SPDXRef-DOCUMENT",
        name=f"{inp.name}-{inp.component_tag}-image-sbom",
        data_license="CC0-1.0",
        document_namespace=f"{inp.component_repository}/spdx/{inp.name}/{inp.component_tag}/image-{namespace_uuid}",
        creators=[Actor(ActorType.TOOL, tool_creator()), Actor(ActorType.ORGANIZATION, inp.supplier)],
        created=created,
    )
    relationships = [
        Relationship("SPDXRef-DOCUMENT", RelationshipType.DESCRIBES, "SPDXRef-Image"),
        # CONTAINS is what NTIA checkers follow: the image holds the base's layers byte for byte and
        # the archive's files in ours; the exact lineage is stated beside it.
        *(Relationship("SPDXRef-Image", RelationshipType.CONTAINS, base.spdx_id) for base in bases),
        Relationship("SPDXRef-Image", RelationshipType.CONTAINS, "SPDXRef-BinaryArchive"),
        *(Relationship("SPDXRef-Image", RelationshipType.DESCENDANT_OF, base.spdx_id) for base in bases if inp.base_digest is not None),
        Relationship("SPDXRef-Image", RelationshipType.GENERATED_FROM, "SPDXRef-BinaryArchive"),
        *(Relationship("SPDXRef-Image", RelationshipType.CONTAINS, f.spdx_id) for f in files),
    ]
    return Document(creation_info=creation, packages=[image, *bases, archive], files=files, relationships=relationships, extracted_licensing_info=extracted)


def write_image_spdx(target: Path, inp: ImageSbomInput) -> bytes:
    """Write the image SBOM (validated, sorted keys, LF: the one SPDX serialisation), then parse it back and validate it again."""
    from spdx_tools.spdx.validation.document_validator import validate_full_spdx_document

    document = build_image_spdx(inp)
    data = spdx_bytes(document)
    atomic_write_bytes(target, data)
    reparsed = _parse_spdx(target, data)
    problems = validate_full_spdx_document(reparsed)
    if problems or len(reparsed.files) != len(document.files):
        raise IntegrityError("the written image SBOM does not parse back to a valid document", file=target, found=[p.validation_message for p in problems[:3]])
    return data
