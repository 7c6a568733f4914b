"""The package lock of an image, `containers/<definition stem>.lock.json` (its owner: this module).

Written by `python -m pipeline image lock` (online), read by the image stage (offline: the lock
alone says which bytes make the package base).  Reviewed like the toolchain lock: a change to it
is a change to the image.

    {
      "artifact_type": "omp_ninfer_apt_lock", "schema_version": 1,
      "definition": "ninfer-runtime.toml",
      "request_sha256": "<SHA-256 of the definition's package request, see request_digest>",
      "architecture": "amd64",
      "requested": ["libc6", ...],
      "sources": [{"uri", "suite", "components", "inrelease_sha256", "signers": [fingerprint, ...],
                   "date": Release's Date, "distro": e.g. "debian-13" (Origin and major Version, the purl
                   qualifier), "indexes": [{"path", "sha256", "size"}]}],
      "packages": [{"name", "version", "architecture", "multi_arch", "filename", "size", "sha256",
                    "source_package", "source_version", "source": <index into sources>,
                    "why": {"package": name or null, "field": "Depends" | "Pre-Depends" | "base.packages",
                            "relation": "libgcc-s1 (>= 3.0)"},
                    "libraries": ["libavformat.so.61", ...]}]   (sorted by name)
    }

`libraries` are the file names the package places in the loader's default folders (merged-/usr
applied), read from the `.deb` itself when the lock is made (`lanework/package_layer.py:
package_libraries`): which package ships each soname, so a lane whose base is this lock derives its
`base_image_libraries` from it (`formats/image_definition.py: lane_base_libraries`) instead of typing them.

`request_sha256` binds the lock to what the definition asks for (architecture, packages, each
source's URI, suite, components, fingerprints and keyring hash): the image stage refuses a lock
whose request differs (a stale lock), naming the command that refreshes it.  Canonical bytes:
sorted keys, two-space indent, LF, no BOM.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.errors import InputError
from pipeline.formats.apt_repository import PACKAGE_NAME, VERSION
from pipeline.util.fs import atomic_write_bytes, read_bytes_bounded
from pipeline.util.hashing import is_sha256_hex
from pipeline.util.jsonio import canonical_bytes, expect_document_type, loads_object
from pipeline.util.safepath import relpath_problem

LOCK_TYPE = "omp_ninfer_apt_lock"
SCHEMA_VERSION = 2  # 2: each package lists the libraries it ships
MAX_LOCK_BYTES = 8 * 1024 * 1024
MAX_DEB_BYTES = 512 * 1024 * 1024  # one .deb; the largest of trixie main is about 400 MiB


@dataclass(frozen=True)
class LockedSource:
    uri: str
    suite: str
    components: tuple[str, ...]
    inrelease_sha256: str
    signers: tuple[str, ...]
    date: str
    distro: str
    indexes: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class LockedPackage:
    name: str
    version: str
    architecture: str
    multi_arch: str
    filename: str
    size: int
    sha256: str
    source_package: str
    source_version: str
    source: int
    why: dict[str, Any]
    libraries: tuple[str, ...] = ()


@dataclass(frozen=True)
class AptLock:
    file: Path
    definition: str
    request_sha256: str
    architecture: str
    requested: tuple[str, ...]
    sources: tuple[LockedSource, ...]
    packages: tuple[LockedPackage, ...]

    def package(self, name: str) -> LockedPackage | None:
        return next((p for p in self.packages if p.name == name), None)

    def libraries(self) -> dict[str, str]:
        """library file name -> the package that ships it (the first by name where two do)."""
        found: dict[str, str] = {}
        for locked in self.packages:
            for library in locked.libraries:
                found.setdefault(library, locked.name)
        return found


def lock_path(definition_file: Path) -> Path:
    return definition_file.with_name(definition_file.stem + ".lock.json")


def request_digest(request: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON of the definition's package request."""
    return hashlib.sha256(json.dumps(request, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")).hexdigest()


def lock_document(*, definition: str, request_sha256: str, architecture: str, requested: list[str],
                  sources: list[dict[str, Any]], packages: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "artifact_type": LOCK_TYPE,
        "schema_version": SCHEMA_VERSION,
        "definition": definition,
        "request_sha256": request_sha256,
        "architecture": architecture,
        "requested": sorted(requested),
        "sources": sources,
        "packages": sorted(packages, key=lambda p: p["name"]),
    }


def write_lock(path: Path, document: dict[str, Any]) -> bytes:
    data = canonical_bytes(document)
    read_lock_bytes(data, path)  # never write a lock the reader would refuse
    atomic_write_bytes(path, data)
    return data


def _need(condition: bool, what: str, *, file: str, field: str, found: Any) -> None:
    if not condition:
        raise InputError(what, file=file, field=field, found=found, fix="run 'python -m pipeline image lock' again; never edit the lock by hand")


def _source(raw: Any, index: int, *, file: str) -> LockedSource:
    where = f"sources[{index}]"
    _need(isinstance(raw, dict) and set(raw) == {"uri", "suite", "components", "inrelease_sha256", "signers", "date", "distro", "indexes"},
          "is not a source record", file=file, field=where, found=sorted(raw) if isinstance(raw, dict) else raw)
    _need(isinstance(raw["uri"], str) and raw["uri"].startswith(("https://", "http://127.0.0.1", "http://localhost")), "is not an HTTPS URI", file=file, field=f"{where}.uri", found=raw["uri"])
    _need(is_sha256_hex(raw["inrelease_sha256"]), "is not a SHA-256", file=file, field=f"{where}.inrelease_sha256", found=raw["inrelease_sha256"])
    _need(isinstance(raw["signers"], list) and bool(raw["signers"]) and all(isinstance(s, str) for s in raw["signers"]),
          "names no signer", file=file, field=f"{where}.signers", found=raw["signers"])
    for key in ("suite", "date", "distro"):
        _need(isinstance(raw[key], str), "is not a string", file=file, field=f"{where}.{key}", found=raw[key])
    _need(_strings(raw["components"]), "is not a list of component names", file=file, field=f"{where}.components", found=raw["components"])
    _need(isinstance(raw["indexes"], list) and all(isinstance(i, dict) and set(i) == {"path", "sha256", "size"} and isinstance(i["path"], str)
                                                   and is_sha256_hex(i["sha256"]) and isinstance(i["size"], int) and not isinstance(i["size"], bool)
                                                   for i in raw["indexes"]),
          "is not a list of {path, sha256, size} index records", file=file, field=f"{where}.indexes", found=raw["indexes"])
    return LockedSource(raw["uri"], raw["suite"], tuple(raw["components"]), raw["inrelease_sha256"], tuple(raw["signers"]), raw["date"], raw["distro"], tuple(raw["indexes"]))


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


_PACKAGE_KEYS = {"name", "version", "architecture", "multi_arch", "filename", "size", "sha256", "source_package", "source_version", "source", "why", "libraries"}
_LIBRARY_NAME = re.compile(r"[A-Za-z0-9_+-][A-Za-z0-9_.+-]{0,254}")


def _package(raw: Any, index: int, sources: int, *, file: str) -> LockedPackage:
    where = f"packages[{index}]"
    _need(isinstance(raw, dict) and set(raw) == _PACKAGE_KEYS, "is not a package record", file=file, field=where,
          found=sorted(raw) if isinstance(raw, dict) else raw)
    _need(isinstance(raw["name"], str) and PACKAGE_NAME.fullmatch(raw["name"]) is not None, "is not a package name", file=file, field=f"{where}.name", found=raw["name"])
    _need(is_sha256_hex(raw["sha256"]), "is not a SHA-256", file=file, field=f"{where}.sha256", found=raw["sha256"])
    _need(isinstance(raw["size"], int) and not isinstance(raw["size"], bool) and 0 < raw["size"] <= MAX_DEB_BYTES,
          f"is not a size between 1 and {MAX_DEB_BYTES}", file=file, field=f"{where}.size", found=raw["size"])
    _need(relpath_problem(raw["filename"], hidden=True, portable=False) is None and raw["filename"].endswith(".deb"),
          "is not a .deb path inside the archive", file=file, field=f"{where}.filename", found=raw["filename"])
    _need(isinstance(raw["source"], int) and 0 <= raw["source"] < sources, "names no source of this lock", file=file, field=f"{where}.source", found=raw["source"])
    _need(isinstance(raw["version"], str) and VERSION.fullmatch(raw["version"]) is not None, "is not a Debian version", file=file, field=f"{where}.version", found=raw["version"])
    for key in ("architecture", "source_package", "source_version"):
        _need(isinstance(raw[key], str) and bool(raw[key]), "is not a non-empty string", file=file, field=f"{where}.{key}", found=raw[key])
    _need(raw["multi_arch"] in ("no", "same", "foreign", "allowed"), "is not a Multi-Arch value", file=file, field=f"{where}.multi_arch", found=raw["multi_arch"])
    why = raw["why"]
    _need(isinstance(why, dict) and set(why) == {"package", "field", "relation"} and (why["package"] is None or isinstance(why["package"], str))
          and isinstance(why["field"], str) and isinstance(why["relation"], str),
          "does not say why the package is there", file=file, field=f"{where}.why", found=why)
    libraries = raw["libraries"]
    _need(_strings(libraries) and libraries == sorted(set(libraries)) and all(_LIBRARY_NAME.fullmatch(name) and ".so" in name for name in libraries),
          "is not a sorted list of library file names (each a plain name with '.so')", file=file, field=f"{where}.libraries", found=libraries)
    return LockedPackage(**{key: raw[key] for key in _PACKAGE_KEYS - {"libraries"}}, libraries=tuple(libraries))


def read_lock_bytes(data: bytes, path: Path) -> AptLock:
    file = str(path)
    document = loads_object(data, source=path)
    expect_document_type(document, LOCK_TYPE, SCHEMA_VERSION, source=path, what="image package lock",
                         fix="run 'python -m pipeline image lock' to write it")
    expected = {"artifact_type", "schema_version", "definition", "request_sha256", "architecture", "requested", "sources", "packages"}
    _need(set(document) == expected, "has other keys than a lock", file=file, field="(top level)", found=sorted(document))
    _need(is_sha256_hex(document["request_sha256"]), "is not a SHA-256", file=file, field="request_sha256", found=document["request_sha256"])
    for key in ("definition", "architecture"):
        _need(isinstance(document[key], str), "is not a string", file=file, field=key, found=document[key])
    _need(_strings(document["requested"]), "is not a list of package names", file=file, field="requested", found=document["requested"])
    _need(isinstance(document["sources"], list) and bool(document["sources"]), "lists no source", file=file, field="sources", found=document["sources"])
    sources = tuple(_source(raw, i, file=file) for i, raw in enumerate(document["sources"]))
    _need(isinstance(document["packages"], list), "is not a list", file=file, field="packages", found=type(document["packages"]).__name__)
    packages = tuple(_package(raw, i, len(sources), file=file) for i, raw in enumerate(document["packages"]))
    names = [p.name for p in packages]
    _need(names == sorted(set(names)), "lists packages out of order or twice", file=file, field="packages", found=names[:10])
    return AptLock(path, document["definition"], document["request_sha256"], document["architecture"], tuple(document["requested"]), sources, packages)


def read_lock(path: Path) -> AptLock:
    if not path.is_file():
        raise InputError("the image's package lock does not exist", file=path, fix="run 'python -m pipeline image lock' (nox -s image-lock) and commit the lock")
    return read_lock_bytes(read_bytes_bounded(path, MAX_LOCK_BYTES, what="package lock"), path)
