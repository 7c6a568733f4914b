"""The component model of one asset set: the single list both SBOMs of the set are written from.

`pipeline.formats.sbom` writes the SPDX 2.3 and the CycloneDX 1.6 document of a package
from one `ComponentModel`, so the two cannot disagree on what the set holds:
the same components with the same names, versions, suppliers, purls, licences,
copyright texts and hashes, and the same import graph.

Components (each with a stable `ref`, the CycloneDX bom-ref):
- the package archive (the root; the SPDX document DESCRIBES it);
- each binary and each bundled runtime library, with the SHA-256/SHA-1 of its
  payload file;
- each library the target provides (system, NVIDIA driver, base image), with
  the supplier and version the lane declares for that provider;
- each vendored source component from the source's `third_party/inventory.json`;
- the toolchain that built the binaries, and the build host's dependencies
  (`add_host_dependencies`, one call with the build identity's list).

Edges come from the import analysis (`pipeline.lanework.binaries`), never from a hand
list: `dynamic-link` (an ELF DT_NEEDED or PE import), `loads` (a library the
lane declares loaded by name, `loaded_by`), `contains` (the archive holds the
file), `vendored` (source compiled into the package's binaries), `build-tool`
and `build-dependency` (used to build, not shipped).

Licences: a shipped component's declared and concluded licence are the terms
its supplier states (the lane's redistributable, the inventory, the runtime's
own licence).  The archive itself declares none (`NOASSERTION`): it is an
aggregate, and its concluded licence is the conjunction of the terms of
everything it ships, derived from its parts, so it never claims one
component's terms for another.
"""

from __future__ import annotations

import email.parser
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pipeline.errors import InputError, IntegrityError

# A version as a component may carry it (both SBOMs, its purl, the provenance): a version word read from bytes
# (a .pc Version, a release header, vcpkg's status, a DLL's version resource), never free text from them.
VERSION_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+~:_-]{0,63}")


def is_version_word(text: object) -> bool:
    return isinstance(text, str) and VERSION_WORD.fullmatch(text) is not None

ROLES = (
    "package",  # the archive (root)
    "binary",
    "runtime-library",  # bundled in bin/
    "provided-library",  # provided by the target, not bundled
    "vendored-source",
    "build-toolchain",
    "host-build-dependency",
)
EDGE_KINDS = ("contains", "dynamic-link", "loads", "vendored", "build-tool", "build-dependency")
SHIPPED_ROLES = ("binary", "runtime-library")
BUILD_ROLES = ("build-toolchain", "host-build-dependency")
PROVIDERS = {"system": "the target operating system", "driver": "the NVIDIA driver", "base-image": "the container base image"}

_LICENSE_REF = re.compile(r"LicenseRef-[A-Za-z0-9.-]+")
_COPYRIGHT_LINE = re.compile(r"^\s*(copyright\b.*?)\s*$", re.IGNORECASE | re.MULTILINE)


@dataclass(frozen=True)
class Component:
    ref: str
    role: str
    name: str
    version: str
    supplier: str
    purl: str | None = None
    declared: str | None = None  # licence expression the supplier states
    concluded: str | None = None  # licence expression concluded for it
    copyright: str | None = None
    sha256: str | None = None
    sha1: str | None = None
    path: str | None = None  # payload path, for what the package ships
    description: str = ""
    properties: tuple[tuple[str, str], ...] = ()

    @property
    def shipped(self) -> bool:
        return self.role in SHIPPED_ROLES


@dataclass(frozen=True)
class Edge:
    source: str
    kind: str
    target: str


@dataclass(frozen=True)
class LicenseText:
    license_id: str  # LicenseRef-...
    name: str
    text: str


@dataclass
class ComponentModel:
    root: Component
    components: dict[str, Component] = field(default_factory=dict)
    edges: list[Edge] = field(default_factory=list)
    license_texts: dict[str, LicenseText] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.root.purl:
            self.root = replace(self.root, purl=canonical_purl(self.root.purl, where=self.root.ref))

    # -- building ---------------------------------------------------------------
    def add(self, component: Component) -> Component:
        if component.role not in ROLES:
            raise ValueError(f"unknown component role {component.role!r}")
        for what, value in (("name", component.name), ("version", component.version), ("supplier", component.supplier)):
            if not value or not value.strip():
                raise IntegrityError(
                    f"the SBOM component {component.ref} has no {what}",
                    field=component.ref,
                    why="every component of an SBOM names its supplier and version (NTIA minimum elements)",
                    fix="declare it where the component comes from (the lane file, the vendored inventory, the build identity)",
                )
        if component.purl:  # every purl in its one canonical spelling, whoever built the component
            component = replace(component, purl=canonical_purl(component.purl, where=component.ref))
        if component.ref in self.components or component.ref == self.root.ref:
            raise IntegrityError("two SBOM components share one reference", field=component.ref)
        self.components[component.ref] = component
        return component

    def link(self, source: str, kind: str, target: str) -> None:
        if kind not in EDGE_KINDS:
            raise ValueError(f"unknown edge kind {kind!r}")
        for ref in (source, target):
            if ref != self.root.ref and ref not in self.components:
                raise IntegrityError("the dependency graph names a component the SBOM does not hold", field=f"{source} -{kind}-> {target}", found=ref)
        edge = Edge(source, kind, target)
        if edge not in self.edges:
            self.edges.append(edge)

    def add_host_dependencies(self, entries: Iterable[Mapping[str, Any]]) -> list[Component]:
        """The build host's dependencies (from the build identity): each `name`, `version`, `purl`,
        `supplier` and `license` (SPDX expression or empty), as build dependencies of the archive."""
        added = []
        for index, entry in enumerate(entries):
            missing = [key for key in ("name", "version", "supplier") if not str(entry.get(key) or "").strip()]
            if missing:
                raise InputError("a host build dependency lacks a field", field=f"host_dependencies[{index}].{missing[0]}", found=dict(entry))
            # The canonical spelling (percent-encoded, e.g. g%2B%2B): what the CycloneDX library writes, so SPDX writes it too.
            purl = canonical_purl(entry["purl"]) if entry.get("purl") else None
            component = self.add(Component(
                ref=purl or f"host:{entry['name']}@{entry['version']}",
                role="host-build-dependency",
                name=str(entry["name"]),
                version=str(entry["version"]),
                supplier=str(entry["supplier"]),
                purl=purl,
                declared=entry.get("license") or None,
                concluded=entry.get("license") or None,
                description=_host_description(entry),
                properties=tuple(sorted((str(k), str(v)) for k, v in (entry.get("properties") or {}).items())),
            ))
            self.link(self.root.ref, "build-dependency", component.ref)
            added.append(component)
        return added

    # -- reading ----------------------------------------------------------------
    def all(self) -> list[Component]:
        """Every component, the root first, the rest sorted by reference."""
        return [self.root, *(self.components[ref] for ref in sorted(self.components))]

    def get(self, ref: str) -> Component:
        return self.root if ref == self.root.ref else self.components[ref]

    def of_role(self, *roles: str) -> list[Component]:
        return [c for c in self.all() if c.role in roles]

    def edges_from(self, ref: str, *kinds: str) -> list[Edge]:
        return sorted((e for e in self.edges if e.source == ref and (not kinds or e.kind in kinds)), key=lambda e: (e.kind, e.target))

    def license_refs(self) -> list[str]:
        found = set()
        for component in self.all():
            for expression in (component.declared, component.concluded):
                found.update(_LICENSE_REF.findall(expression or ""))
        return sorted(found)

    def check_license_texts(self) -> None:
        """Every LicenseRef-* a component uses must come with its text (SPDX needs it on the document)."""
        for license_id in self.license_refs():
            if license_id not in self.license_texts:
                users = sorted(c.ref for c in self.all() if license_id in f"{c.declared} {c.concluded}")
                raise IntegrityError(
                    f"{license_id} has no licence text",
                    field=", ".join(users),
                    why="an SBOM that names a licence outside the SPDX list must carry its text",
                    fix="give the component a license_file (lane redistributable or vendored inventory)",
                )


# -- helpers the package stage uses ------------------------------------------------

def copyright_lines(text: str) -> str | None:
    """The copyright notice(s) of a component's own licence file, as written there."""
    lines = list(dict.fromkeys(m.group(1) for m in _COPYRIGHT_LINE.finditer(text)))
    return "\n".join(lines) or None


def licence_refs(*expressions: str | None) -> set[str]:
    """The LicenseRef-* names the expressions use (each needs its text in an SPDX document)."""
    return {ref for expression in expressions for ref in _LICENSE_REF.findall(expression or "")}


def is_licence_ref(symbol: str) -> bool:
    return _LICENSE_REF.fullmatch(symbol) is not None


def conjunction(expressions: Iterable[str]) -> str | None:
    """All of the given licence expressions at once (each compound one parenthesised), sorted."""
    parts = sorted({e.strip() for e in expressions if e and e.strip()})
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    return " AND ".join(f"({p})" if " " in p else p for p in parts)


def repository_owner(repository: str) -> str:
    """The owner of a GitHub repository URL: the supplier of what the project itself publishes."""
    match = re.fullmatch(r"https://github\.com/([A-Za-z0-9-]+)/[A-Za-z0-9._-]+?/?", repository)
    if not match:
        raise InputError("is not a GitHub repository URL", field="component.repository", found=repository, expected="https://github.com/OWNER/REPO")
    return match.group(1)


_METADATA_LIMIT = 4 << 20


def _metadata_author(text: str) -> tuple[str, str]:
    headers = email.parser.HeaderParser().parsestr(text)
    name = (headers.get("Name") or "").replace("_", "-").lower()
    author = (headers.get("Author") or headers.get("Maintainer") or "").strip()
    if not author:
        emails = headers.get("Author-email") or headers.get("Maintainer-email") or ""
        author = ", ".join(n.strip().strip('"') for n in re.findall(r"([^,<]+?)\s*<[^>]*>", emails) if n.strip())
    return name, author


def wheel_authors(site: Path | None, wheels: Iterable[Path] = (), *, dist_infos: Iterable[str] | None = None) -> dict[str, str]:
    """Distribution (normalised) -> the author its wheel's METADATA names: from an unpacked
    toolchain (`site`; only the `dist_infos` folders when given), else from the pinned wheel files themselves."""
    import zipfile

    found: dict[str, str] = {}
    texts: list[str] = []
    if site is not None and site.is_dir():
        root = site / "site" if (site / "site").is_dir() else site
        metadata = sorted(root.glob("*.dist-info/METADATA")) if dist_infos is None else [root / name / "METADATA" for name in dist_infos]
        texts += [m.read_text("utf-8", "replace") for m in metadata if m.is_file() and m.stat().st_size <= _METADATA_LIMIT]
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            for info in archive.infolist():
                if re.fullmatch(r"[^/]+\.dist-info/METADATA", info.filename) and info.file_size <= _METADATA_LIMIT:
                    texts.append(archive.read(info).decode("utf-8", "replace"))
    for text in texts:
        name, author = _metadata_author(text)
        if name and author:
            found.setdefault(name, author)
    return found


def toolchain_supplier(distribution: str, authors: Mapping[str, str]) -> str | None:
    # The CUDA wheels are NVIDIA's (their METADATA names NVIDIA's installer team as author).
    if distribution.startswith("nvidia-"):
        return "NVIDIA Corporation"
    return authors.get(distribution)


def with_properties(component: Component, **values: Any) -> Component:
    extra = tuple((key.replace("_", "-"), str(value)) for key, value in sorted(values.items()) if value is not None)
    return replace(component, properties=tuple(sorted({*component.properties, *extra})))


def _host_description(entry: Mapping[str, Any]) -> str:
    """What a host dependency is, in words both SBOMs carry (CycloneDX description, SPDX comment)."""
    properties = entry.get("properties") or {}
    text = "build host dependency (compiled against, not shipped)"
    details = [f"origin {properties['origin']}"] if properties.get("origin") else []
    if properties.get("release"):
        details.append(f"release {properties['release']}")
    if properties.get("license-source"):
        details.append(f"licence {properties['license-source']}")
    files = [f"{key.removeprefix('file-sha256:')} {value}" for key, value in sorted(properties.items()) if key.startswith("file-sha256:")]
    if files:
        details.append("files (SHA-256): " + ", ".join(files))
    links = [f"{key.removeprefix('link-sha256:')} {value}" for key, value in sorted(properties.items()) if key.startswith("link-sha256:")]
    if links:
        details.append("libraries (SHA-256 of the link interface: soname and exported symbols): " + ", ".join(links))
    return text + (f"; {'; '.join(details)}" if details else "")


def purl(kind: str, name: str, version: str | None = None, *, namespace: str | None = None, qualifiers: Mapping[str, str] | None = None) -> str:
    """The one purl builder of every SBOM (and of the provenance's dependency URIs): packageurl's canonical
    string, which is what the CycloneDX library writes, so SPDX and CycloneDX carry the same bytes
    (the type's own rules applied: a github namespace and name lowercased, '+' percent-encoded)."""
    from packageurl import PackageURL

    return PackageURL(type=kind, namespace=namespace, name=name, version=version, qualifiers=dict(qualifiers or {})).to_string()


def canonical_purl(text: str, *, where: str = "purl") -> str:
    """A purl read from data (a vendored inventory, a build identity) in the builder's canonical spelling."""
    from packageurl import PackageURL

    try:
        return PackageURL.from_string(text).to_string()
    except ValueError as error:
        raise InputError("is not a package URL", field=where, found=text, expected="pkg:<type>/<namespace>/<name>@<version> (purl spec)", why=str(error)) from None


def host_purl(entry: Mapping[str, Any], distribution: str) -> str | None:
    """The purl of a recorded host dependency, from where it really came from (its `origin`).

    A Debian package: `pkg:deb/<distribution>/<package>@<version>`.  A vcpkg port (only ever recorded on a
    Windows host, from vcpkg's installed status): `pkg:generic/vcpkg/<port>@<version>?port_version=N&triplet=T`
    (purl has no vcpkg type; docs/provenance.md).  A local build (no package owns it): no purl at all; its
    `.pc` file and libraries are recorded by SHA-256 instead.
    """
    origin = _origin(entry)
    if origin == "debian" and entry.get("debian_package") and entry.get("debian_version"):
        return purl("deb", entry["debian_package"], entry["debian_version"], namespace=distribution)
    port = entry.get("vcpkg")
    if origin == "vcpkg" and isinstance(port, Mapping):
        qualifiers = {"port_version": str(port.get("port_version") or "0"), "triplet": str(port.get("triplet"))}
        return purl("generic", str(port["port"]), str(port["version"]), namespace="vcpkg", qualifiers=qualifiers)
    return None


def _origin(entry: Mapping[str, Any]) -> str:
    """The recorded origin; a record from before origins were recorded is Debian's where a package owned it, else
    local (its `vcpkg_port` was the lane's declaration, not where the library came from)."""
    return str(entry.get("origin") or ("debian" if entry.get("debian_package") else "local"))


def host_supplier(entry: Mapping[str, Any], distribution: str) -> str:
    """Who supplied a recorded host dependency: the distribution's package, the vcpkg port, or the build host itself."""
    origin = _origin(entry)
    if origin == "debian" and entry.get("debian_package"):
        return f"{distribution.capitalize()} (package {entry['debian_package']})"
    port = entry.get("vcpkg")
    if origin == "vcpkg" and isinstance(port, Mapping):
        return f"vcpkg (port {port.get('port')})"
    return "the build host (a local build: no package owns it)"


def host_dependency_entries(identity: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The build identity's `host_dependencies` (what the build's preflight found, pipeline/lanework/hostdeps.py)
    in the shape `ComponentModel.add_host_dependencies` takes: the supplier and purl are derived from where
    each one came from (a Debian package, a vcpkg port, a local build), never typed by hand; the licence is
    what the library reports or its declaration states (else none: NOASSERTION).  A supplier is the
    organisation's name alone: the SPDX writer adds the `Organization: ` actor prefix."""
    found = identity.get("host_dependencies") or []
    environment = identity.get("host_environment") or {}
    distro = str((environment.get("os_release") or {}).get("ID") or "debian").lower()
    entries = []
    for entry in found:
        release = entry.get("release") or {}
        properties = {
            "origin": entry.get("origin"),
            "release": f"{release['project']} {release['version']}" if release else None,
            "license-source": entry.get("license_source"),
            f"file-sha256:{entry.get('file')}": entry.get("file_sha256") if entry.get("origin") == "local" else None,
        }
        if entry.get("origin") == "local":
            # A library by the SHA-256 of its link interface (lanework/hostlibs.link_interface), the same under any prefix.
            properties |= {f"link-sha256:{lib['file']}": lib["link_sha256"] for lib in entry.get("libraries") or []}
        entries.append({
            "name": entry.get("name"),
            "version": entry.get("version"),
            "purl": host_purl(entry, distro),
            "supplier": host_supplier(entry, distro),
            "license": entry.get("license"),
            "properties": {k: v for k, v in properties.items() if v},
        })
    return entries
