"""What one host library found through pkg-config really is: its files, sonames, release, licence and owner.

`hostdeps.check` finds a declared module; this module inspects it without
recording where it lives (a prefix under --pkg-config-path is a private path):

- the `.pc` file by module name and SHA-256, and the library files its `Libs`
  name (`-l<name>` found in its `-L` folders or `libdir`; a relative `-L` is resolved
  against the `.pc` file's own prefix and must stay inside it) by file name, DT_SONAME
  (pyelftools) and the SHA-256 of their link interface (`link_interface`: what a link
  reads from a shared library and the binaries can depend on, never its code or the
  configure line, prefix included, that FFmpeg's libraries embed; docs/provenance.md);
- the upstream release where the library states it (FFmpeg's `FFMPEG_VERSION`
  in `<includedir>/libavutil/ffversion.h`, libcurl's `LIBCURL_VERSION` in
  `<includedir>/curl/curlver.h`);
- the licence the library reports about itself where it can (FFmpeg's
  `<lib>_license()`, called through ctypes in a child process with a timeout:
  loading a library runs its constructors, which must not take the pipeline down);
- on a Windows host, the vcpkg port that installed the `.pc` file, from vcpkg's
  own installed status (`installed/vcpkg/status` and `installed/vcpkg/info/*.list`).

Every read is bounded in size, every child process in time.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.formats.components import is_version_word
from pipeline.util.hashing import sha256_bytes, sha256_file

TIMEOUT = 30
MAX_PC_BYTES = 64 << 10
MAX_HEADER_BYTES = 256 << 10
MAX_LIBRARY_BYTES = 1 << 30
MAX_STATUS_BYTES = 16 << 20
MAX_LIST_FILES = 4096
MAX_LIST_BYTES = 8 << 20
MAX_OUTPUT_BYTES = 1 << 20  # what pkg-config or a probe may print
_LINK_NAME = re.compile(r"[A-Za-z0-9_+][A-Za-z0-9_+.-]{0,127}")

# module -> (project, header under includedir, macro): where a library states its upstream release.
FFMPEG_LIBRARIES = ("libavcodec", "libavdevice", "libavfilter", "libavformat", "libavutil", "libpostproc", "libswresample", "libswscale")
RELEASE_HEADERS: dict[str, tuple[str, str, str]] = {
    **{name: ("FFmpeg", "libavutil/ffversion.h", "FFMPEG_VERSION") for name in FFMPEG_LIBRARIES},
    "libcurl": ("curl", "curl/curlver.h", "LIBCURL_VERSION"),
}
# What FFmpeg's <lib>_license() returns (libavutil/utils.c: FFMPEG_LICENSE from configure) -> SPDX.
FFMPEG_LICENSES = {
    "LGPL version 2.1 or later": "LGPL-2.1-or-later",
    "LGPL version 3 or later": "LGPL-3.0-or-later",
    "GPL version 2 or later": "GPL-2.0-or-later",
    "GPL version 3 or later": "GPL-3.0-or-later",
}
# Runs in a child: print what `<symbol>()` of the library returns (a C string), nothing else.
_LICENSE_PROBE = (
    "import ctypes, sys\n"
    "library = ctypes.CDLL(sys.argv[1])\n"
    "function = getattr(library, sys.argv[2])\n"
    "function.restype = ctypes.c_char_p\n"
    "sys.stdout.write((function() or b'')[:200].decode('ascii', 'replace'))\n"
)


@dataclass(frozen=True)
class LibraryFile:
    """One library a module's Libs names: its real file name, DT_SONAME and link interface's SHA-256 (never its folder)."""

    link_name: str  # -l<name>
    file: str  # the real file's name, e.g. libavformat.so.61.7.100
    soname: str | None
    link_sha256: str  # the link interface's (link_interface), the same under any prefix
    path: str  # where it is on this host: to probe it, never recorded

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "soname": self.soname, "link_sha256": self.link_sha256}


def read_bounded(path: str | os.PathLike[str], limit: int) -> bytes | None:
    """At most `limit` bytes of `path`, or None if it is missing, unreadable or larger."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except OSError:
        return None
    return data if len(data) <= limit else None


def file_digest(path: str | os.PathLike[str]) -> str | None:
    """SHA-256 of a host file (streamed), or None if it is unreadable or larger than a library may be."""
    try:
        return sha256_file(path) if os.path.getsize(path) <= MAX_LIBRARY_BYTES else None
    except OSError:
        return None


def _run(argv: list[str], env: Mapping[str, str]) -> str | None:
    """What `argv` prints (at most MAX_OUTPUT_BYTES, else None) when it succeeds within TIMEOUT, else None.

    It may run a host library's code (the licence probe): its output goes to a file, not a pipe held in memory,
    and it runs in a session of its own, killed whole on timeout (a child it left behind cannot hold us)."""
    with tempfile.TemporaryFile() as output:
        try:
            process = subprocess.Popen(argv, env=dict(env), stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.DEVNULL, start_new_session=True)
        except OSError:
            return None
        try:
            code = process.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            with contextlib.suppress(OSError):
                if hasattr(os, "killpg"):
                    os.killpg(process.pid, signal.SIGKILL)
                else:  # Windows: no process groups of this kind; the child itself
                    process.kill()
            process.wait()
        output.seek(0)
        data = output.read(MAX_OUTPUT_BYTES + 1)
    if code != 0 or len(data) > MAX_OUTPUT_BYTES:
        return None
    return data.decode("utf-8", "replace").strip()


def variable(pkg_config: str, module: str, name: str, env: Mapping[str, str]) -> str | None:
    return _run([pkg_config, f"--variable={name}", module], env) or None


def elf_soname(path: str | os.PathLike[str]) -> str | None:
    """DT_SONAME of an ELF shared library, or None (not ELF, none set, unreadable, too large)."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.dynamic import DynamicSection

    try:
        with _elf_library(path) as elf:
            if elf is None:
                return None
            for section in elf.iter_sections():
                if isinstance(section, DynamicSection):
                    for tag in section.iter_tags("DT_SONAME"):
                        return str(tag.soname)[:255]
    except (OSError, ELFError, ValueError, KeyError):
        return None
    return None


@contextlib.contextmanager
def _elf_library(path: str | os.PathLike[str]) -> Iterator[Any]:
    """The ELF file at `path` (pyelftools' ELFFile, its handle open), or None for a file over MAX_LIBRARY_BYTES or
    without the ELF magic.  The caller catches the read errors: each has its own answer for an unreadable file."""
    from elftools.elf.elffile import ELFFile

    if os.path.getsize(path) > MAX_LIBRARY_BYTES:
        yield None
        return
    with open(path, "rb") as handle:
        if handle.read(4) != b"\x7fELF":
            yield None
            return
        handle.seek(0)
        yield ELFFile(handle)


def link_interface(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """What a link reads from a shared library and a dynamically linked binary can depend on: its DT_SONAME and each
    symbol it exports (name, version, type, binding; the size of a data object, which a copy relocation takes).

    Not its code, addresses or strings: a library's self-describing text (FFmpeg's avutil_configuration(), its
    configure line with `--prefix`) differs under another prefix, and with it the length of .rodata and every
    later offset, while the binaries linked against it are the same. None when it is not a readable ELF library."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.gnuversions import GNUVerDefSection, GNUVerSymSection

    try:
        with _elf_library(path) as elf:
            if elf is None:
                return None
            dynsym = elf.get_section_by_name(".dynsym")
            if dynsym is None:
                return None
            versym = next((s for s in elf.iter_sections() if isinstance(s, GNUVerSymSection)), None)
            verdef = next((s for s in elf.iter_sections() if isinstance(s, GNUVerDefSection)), None)
            names = {int(entry["vd_ndx"]): next(aux).name for entry, aux in verdef.iter_versions()} if verdef is not None else {}
            symbols = []
            for index, symbol in enumerate(dynsym.iter_symbols()):
                info = symbol["st_info"]
                if symbol["st_shndx"] == "SHN_UNDEF" or not symbol.name or info["bind"] == "STB_LOCAL":
                    continue
                ndx = versym.get_symbol(index).entry["ndx"] if versym is not None else None
                version = names.get(ndx & 0x7FFF) if isinstance(ndx, int) else None
                size = int(symbol["st_size"]) if info["type"] in ("STT_OBJECT", "STT_TLS") else None
                symbols.append([symbol.name, version, info["type"], info["bind"], size])
    except (OSError, ELFError, ValueError, KeyError, StopIteration):
        return None
    return {"soname": elf_soname(path), "symbols": sorted(symbols, key=lambda s: (s[0], s[1] or ""))}


def link_digest(path: str | os.PathLike[str]) -> str | None:
    """SHA-256 of the canonical JSON of `link_interface(path)` (sorted keys, no spaces); for a file that is no readable
    ELF library (a GNU ld script such as libc.so), which the linker reads whole, the file's SHA-256; None when unreadable."""
    interface = link_interface(path)
    if interface is None:
        return file_digest(path)
    return sha256_bytes(json.dumps(interface, sort_keys=True, separators=(",", ":")).encode())


def _link_folders(flags: list[str], prefix: str | None, libdir: str | None) -> list[str]:
    """The `-L` folders of a module's Libs, then its libdir: an absolute folder as written, a relative one (`-L./evil`)
    against the `.pc` file's own prefix only, and only when it stays inside it (never this process's current folder)."""
    folders = []
    for flag in flags:
        if not flag.startswith("-L") or len(flag) <= 2:
            continue
        folder = flag[2:]
        if not os.path.isabs(folder):
            if not prefix or not os.path.isabs(prefix):
                continue
            root = os.path.realpath(prefix)
            folder = os.path.realpath(os.path.join(root, folder))
            if os.path.commonpath([root, folder]) != root:
                continue
        folders.append(folder)
    return folders + ([libdir] if libdir and os.path.isabs(libdir) else [])


def library_files(pkg_config: str, module: str, env: Mapping[str, str], libdir: str | None) -> list[LibraryFile]:
    """The shared libraries `pkg-config --libs <module>` names, found where the linker would find them."""
    flags = (_run([pkg_config, "--libs", module], env) or "").split()
    folders = _link_folders(flags, variable(pkg_config, module, "prefix", env), libdir)
    out = []
    for flag in flags:
        if not flag.startswith("-l") or len(flag) <= 2:
            continue
        name = flag[2:]
        if not _LINK_NAME.fullmatch(name):  # a name from the .pc, joined to a folder below: never a path
            continue
        for folder in folders:
            candidate = Path(folder) / f"lib{name}.so"
            if candidate.is_file():
                real = Path(os.path.realpath(candidate))
                digest = link_digest(real)  # None: unreadable, not an ELF library or larger than a library may be
                if digest is not None:
                    out.append(LibraryFile(name, real.name, elf_soname(real), digest, str(real)))
                break
    return out


def upstream_release(module: str, includedir: str | None) -> dict[str, str] | None:
    """{project, version, source} where the module's headers state its upstream release, else None."""
    known = RELEASE_HEADERS.get(module)
    if known is None or not includedir:
        return None
    project, header, macro = known
    data = read_bounded(Path(includedir) / header, MAX_HEADER_BYTES)
    if data is None:
        return None
    match = re.search(rb'^[ \t]*#[ \t]*define[ \t]+' + macro.encode() + rb'[ \t]+"([^"\n]{1,64})"', data, re.MULTILINE)
    if match is None:
        return None
    version = match.group(1).decode("ascii", "replace")
    if not is_version_word(version):
        return None
    return {"project": project, "version": version, "source": f"{header} {macro}"}


def self_reported_license(module: str, libraries: list[LibraryFile], env: Mapping[str, str]) -> str | None:
    """The SPDX licence an FFmpeg library reports about itself (`<lib>_license()`), else None."""
    if module not in FFMPEG_LIBRARIES or not libraries:
        return None
    library = libraries[0]
    symbol = f"{module.removeprefix('lib')}_license"
    # The library's own folder first: its NEEDED siblings (libavutil for libavformat) are in the same prefix.
    search = os.pathsep.join([os.path.dirname(library.path), *filter(None, [env.get("LD_LIBRARY_PATH")])])
    text = _run([sys.executable, "-I", "-S", "-c", _LICENSE_PROBE, library.path, symbol], {**env, "LC_ALL": "C", "LD_LIBRARY_PATH": search})
    return FFMPEG_LICENSES.get(text or "")


RELOCATED_PREFIX = b"@PREFIX@"


def pc_file_digest(pc_file: str, *, relocate: bool) -> str | None:
    """SHA-256 of the `.pc` file; `relocate`d (a local build), of its bytes with its own `prefix=` folder written
    `@PREFIX@`: a .pc names the folder it was installed under, so the same build under two prefixes has one digest
    (and the digest says nothing about the private folder).

    The rewriting is reversible, so two .pc files that differ other than in their prefix never share a digest:
    every `@` of the file is doubled first (a file's own literal `@PREFIX@` stays apart from the marker), and the
    prefix is replaced only as a whole folder (`/opt/a` in `/opt/a/lib`, never in `/opt/abc`)."""
    data = read_bounded(pc_file, MAX_PC_BYTES)
    if data is None:
        return None
    if relocate:
        match = re.search(rb"^prefix=(/[^\n]*?)/*$", data, re.MULTILINE)
        if match and len(match.group(1)) > 1:
            prefix = match.group(1).replace(b"@", b"@@")
            data = re.sub(re.escape(prefix) + rb"(?=[/\s\"':]|$)", RELOCATED_PREFIX, data.replace(b"@", b"@@"), flags=re.MULTILINE)
    return sha256_bytes(data)


# -- vcpkg's installed status (Windows hosts) -----------------------------------------------


def _paragraphs(text: str) -> list[dict[str, str]]:
    out, current = [], {}
    for line in text.splitlines():
        if not line.strip():
            if current:
                out.append(current)
            current = {}
            continue
        key, sep, value = line.partition(":")
        if sep and not line.startswith((" ", "\t")):
            current[key.strip()] = value.strip()
    if current:
        out.append(current)
    return out


def vcpkg_owner(pc_file: str) -> dict[str, str] | None:
    """{port, version, port_version, triplet} of the vcpkg port whose files list `pc_file`, from vcpkg's status.

    `pc_file` is `<installed>/<triplet>/lib/pkgconfig/<module>.pc` (or under `debug/`); vcpkg records every file a
    port installed in `<installed>/vcpkg/info/<port>_<version>_<triplet>.list` and each installed port's version
    in `<installed>/vcpkg/status` (a Debian-control-like file).
    """
    path = Path(pc_file)
    parts = path.parts
    for depth in (3, 4):  # <triplet>/lib/pkgconfig/x.pc, <triplet>/debug/lib/pkgconfig/x.pc
        if len(parts) <= depth + 1:
            continue
        installed = path.parents[depth]
        triplet = path.parents[depth - 1].name
        relative = "/".join(parts[len(installed.parts):])
        status = read_bounded(installed / "vcpkg" / "status", MAX_STATUS_BYTES)
        info = installed / "vcpkg" / "info"
        if status is None or not info.is_dir():
            continue
        port = _listing_port(info, relative, triplet)
        if port is None:
            continue
        for paragraph in _paragraphs(status.decode("utf-8", "replace")):
            if (paragraph.get("Package"), paragraph.get("Architecture")) == (port, triplet) and "Feature" not in paragraph and paragraph.get("Status", "").endswith(" installed"):
                version, port_version = paragraph.get("Version", ""), paragraph.get("Port-Version", "0")
                # What the identity, both SBOMs' purls and rebuild's install hint carry: vcpkg's own shapes only.
                if is_version_word(version) and re.fullmatch(r"[0-9]{1,9}", port_version) and re.fullmatch(r"[a-z0-9][a-z0-9-]{0,63}", triplet):
                    return {"port": port, "version": version, "port_version": port_version, "triplet": triplet}
    return None


def _listing_port(info: Path, relative: str, triplet: str) -> str | None:
    lists = sorted(info.glob(f"*_{triplet}.list"))[:MAX_LIST_FILES]
    for listing in lists:
        data = read_bounded(listing, MAX_LIST_BYTES)
        if data is None:
            continue
        lines = {line.strip().replace("\\", "/").lower() for line in data.decode("utf-8", "replace").splitlines()}
        if relative.lower() in lines:
            return listing.name.split("_", 1)[0]
    return None
