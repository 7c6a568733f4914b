"""The toolchain record: what the build's toolchain provides to the stages after it.

`<dist>/<lane>/build/toolchain.json`, register kind `toolchain` (attributes
`toolchain_kind`, `root`, `library_dir`), written by the build stage.  It
says which toolchain built the lane (`pinned`: the unpacked PyPI wheels of
`runtime/toolchain.lock.json`; `system`: the nvcc on PATH; `prebuilt`: none,
the binaries were imported), where the CUDA runtime libraries are (the
qualification harness puts `library_dir` on the loader's path), which shared
libraries the toolchain's wheels ship (file name -> path inside the unpacked
`site/` folder, wheel distribution and version, licence file, SHA-256: the
package stage may bundle them and checks their bytes first), and each wheel's
METADATA author (its SBOM supplier).  The build reads the wheels' RECORD and
METADATA files once; the stages after it read this record, never the
toolchain folder.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

from pipeline.errors import InputError
from pipeline.util.hashing import is_sha256_hex
from pipeline.util.jsonio import expect_document_type, read_json_object, write_json
from pipeline.util.safepath import safe_component, safe_relpath

RECORD_TYPE = "omp_ninfer_toolchain_record"
SCHEMA_VERSION = 1
FILE_NAME = "toolchain.json"
KINDS = ("pinned", "system", "prebuilt")


@dataclass(frozen=True)
class RecordedLibrary:
    path: str  # POSIX, relative to the toolchain's site folder
    distribution: str  # normalised wheel distribution, e.g. nvidia-cuda-runtime
    version: str
    sha256: str
    license_file: str | None = None  # relative to the site folder

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "distribution": self.distribution, "version": self.version, "sha256": self.sha256, "license_file": self.license_file}


@dataclass(frozen=True)
class ToolchainRecord:
    kind: str
    cuda_version: str | None
    root: str | None  # the unpacked toolchain (pinned only)
    library_dir: str | None  # where the CUDA runtime library is (pinned and system)
    libraries: dict[str, RecordedLibrary] = field(default_factory=dict)
    wheel_authors: dict[str, str] = field(default_factory=dict)

    @property
    def site(self) -> Path | None:
        return Path(self.root) / "site" if self.root else None

    def to_json(self) -> dict[str, Any]:
        return {
            "artifact_type": RECORD_TYPE,
            "schema_version": SCHEMA_VERSION,
            "kind": self.kind,
            "cuda_version": self.cuda_version,
            "root": self.root,
            "library_dir": self.library_dir,
            "libraries": {name: self.libraries[name].to_json() for name in sorted(self.libraries)},
            "wheel_authors": dict(sorted(self.wheel_authors.items())),
        }


def write_record(path: Path, record: ToolchainRecord) -> Path:
    write_json(path, record.to_json())
    return path


def _text(value: Any, *, file: Path, where: str, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value:
        raise InputError("toolchain record holds a missing or mistyped value", file=file, field=where, found=value, expected="a non-empty string" + (" or null" if optional else ""))
    return value


def read_record(path: Path) -> ToolchainRecord:
    """A toolchain record, checked: type and schema, the kind, absolute folders, safe library paths, hashes."""
    document = read_json_object(path)
    expect_document_type(document, RECORD_TYPE, SCHEMA_VERSION, source=path, what="a toolchain record", fix='run the build stage again')
    kind = document.get("kind")
    if kind not in KINDS:
        raise InputError("toolchain record names an unknown toolchain kind", file=path, field="kind", found=kind, expected=" or ".join(KINDS))
    folders: dict[str, str | None] = {}
    for key in ("root", "library_dir"):
        value = _text(document.get(key), file=path, where=key, optional=True)
        if value is not None and not (PurePosixPath(value).is_absolute() or PureWindowsPath(value).is_absolute()):
            raise InputError("toolchain record names a folder that is not absolute", file=path, field=key, found=value, expected="an absolute path on the build host")
        folders[key] = value
    libraries: dict[str, RecordedLibrary] = {}
    table = document.get("libraries", {})
    if not isinstance(table, dict):
        raise InputError("toolchain record's libraries are not an object", file=path, field="libraries", expected="{file name: {path, distribution, version, sha256, license_file}}")
    if table and folders["root"] is None:
        raise InputError("toolchain record lists libraries but no toolchain folder", file=path, field="root", expected="the unpacked toolchain's folder")
    for name, row in table.items():
        where = f"libraries.{name}"
        safe_component(name, file=path, field=where, hidden=True, portable=False)
        if not isinstance(row, dict):
            raise InputError("toolchain record holds a malformed library", file=path, field=where, expected="an object")
        relative = safe_relpath(row.get("path"), file=path, field=f"{where}.path", hidden=True, portable=False)
        if relative.rsplit("/", 1)[-1] != name:
            raise InputError("toolchain record's library path names another file", file=path, field=f"{where}.path", found=relative, expected=f".../{name}")
        license_file = row.get("license_file")
        if license_file is not None:
            license_file = safe_relpath(license_file, file=path, field=f"{where}.license_file", hidden=True, portable=False)
        if not is_sha256_hex(row.get("sha256")):
            raise InputError("toolchain record holds a library hash that is not a SHA-256", file=path, field=f"{where}.sha256", found=row.get("sha256"))
        libraries[name] = RecordedLibrary(
            path=relative,
            distribution=_text(row.get("distribution"), file=path, where=f"{where}.distribution") or "",
            version=_text(row.get("version"), file=path, where=f"{where}.version") or "",
            sha256=row["sha256"],
            license_file=license_file,
        )
    authors = document.get("wheel_authors", {})
    if not isinstance(authors, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in authors.items()):
        raise InputError("toolchain record's wheel authors are malformed", file=path, field="wheel_authors", expected="{distribution: author}")
    return ToolchainRecord(
        kind=kind,
        cuda_version=_text(document.get("cuda_version"), file=path, where="cuda_version", optional=True),
        root=folders["root"],
        library_dir=folders["library_dir"],
        libraries=libraries,
        wheel_authors=dict(authors),
    )
