"""One deterministic image layer made from the packages of a lock, with nothing run from them.

`assemble` takes the lock alone (`formats/apt_lock.py`): each `.deb` comes from the package cache or
its archive by the SHA-256 and size the lock pins (`lanework/apt.py: cached_fetch`, through
`infra/transfer.py`), is read as `ar` + `control.tar` + `data.tar` (`infra/deb.py`, the bounded tar
reader; several packages are read at once on threads, `read_package`), and its files go into one tree,
package by package in name order (`PackageTree.place`, sequential, so the result is that of a one-by-one run):

- **merged /usr** (Debian 12+, Ubuntu 24.04): the layer carries `bin -> usr/bin`, `sbin -> usr/sbin`,
  `lib -> usr/lib` (and `lib64 -> usr/lib64` on amd64), as `base-files` would; a package member
  under `/bin`, `/sbin`, `/lib`, `/lib64` is placed under `/usr` (a relative link target moved with
  it is recomputed so it names the same file), and never replaces one of those links.
- **refused**: a member that is a device, FIFO or socket, one owned by anyone but root, a file over
  `MAX_MEMBER_BYTES`, a relative link whose target leaves the root, a member written through a
  link, two packages shipping one path with different contents; names with `..` or absolute names
  are refused by the tar reader.  Hard links become copies (the layer is sorted by name, so a link
  could precede its target).
- **no maintainer script runs**: a `preinst` or `postinst` that does more than `ldconfig` is refused
  unless the definition lists it by SHA-256 with what stands in for it (`ScriptStandIn`: a text for
  the reviewer and the links that take the place of e.g. `update-alternatives`).
- **package metadata for scanners**, the distroless convention Trivy and Syft read:
  `/var/lib/dpkg/status.d/<package>` (its control file) and `<package>.md5sums` (of the files as
  placed).
- **the lock's `libraries` checked**: what each package's members place in the loader's folders must
  be the list its lock entry carries (`check_lock_libraries`), since a lane derives its base
  libraries from that field and no digest covers it.
- **`/etc/ld.so.cache` for the final file system**: the tree is unpacked into a scratch folder (each
  file a reflink or copy of its blob, never a hard link: what runs there cannot reach a recorded
  blob) and `ldconfig -X` runs on it: the image's own `/usr/sbin/ldconfig` (from `libc-bin`, statically
  linked) chrooted into it when the lock has it, else this host's `ldconfig -r`; the host's
  version is then recorded (`LayerResult.ldconfig`), since its cache format is the host glibc's.

The layer tar is sorted by name, numeric owner 0:0 with no names, mtimes clamped to `epoch` (the
source commit's time), PAX format, and gzip without name or time, so the same lock gives the same
bytes from any package cache state.
"""

from __future__ import annotations

import concurrent.futures
import fcntl
import gzip
import hashlib
import os
import posixpath
import re
import shutil
import subprocess
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.errors import EnvironmentProblem, InputError, IntegrityError
from pipeline.formats.apt_lock import AptLock, LockedPackage
from pipeline.formats.image_definition import ScriptStandIn
from pipeline.infra import deb, oci
from pipeline.infra.rootfs import library_folders
from pipeline.infra.safetar import TarLimits
from pipeline.lanework import apt

MAX_MEMBER_BYTES = 512 * 1024 * 1024
READ_WORKERS = 4  # packages read at once (assemble), at most one per core
DEB_LIMITS = TarLimits(max_members=100_000, max_total_bytes=8 * 1024**3, max_member_read=deb.MAX_CONTROL_FILE)
_FICLONE = 0x40049409  # linux/fs.h: share the source's extents (a reflink)
MERGED_USR = {"amd64": ("bin", "sbin", "lib", "lib64"), "arm64": ("bin", "sbin", "lib")}
STATUS_DIR = "var/lib/dpkg/status.d"
_TRIVIAL_SCRIPT_LINE = re.compile(r'set -e|ldconfig|exit 0|fi|if \[ "\$1" = "?configure"? \]; then')
CHECKED_SCRIPTS = ("preinst", "postinst")


@dataclass
class Entry:
    kind: str  # 'dir', 'file', 'symlink'
    mode: int
    package: str  # '' for what this module makes itself
    mtime: int
    target: str = ""
    blob: Path | None = None
    sha256: str = ""
    md5: str = ""


@dataclass
class LayerResult:
    layer: oci.BuiltLayer
    entries: dict[str, Entry]
    ldconfig: str  # 'image' or the host ldconfig's version line
    files_by_package: dict[str, list[str]] = field(default_factory=dict)
    libraries_by_package: dict[str, list[str]] = field(default_factory=dict)  # what each package's members place in the loader's folders


def _is_trivial_script(text: bytes) -> bool:
    lines = [line.strip() for line in text.decode("utf-8", "replace").splitlines()]
    return all(not line or line.startswith("#") or _TRIVIAL_SCRIPT_LINE.fullmatch(line) for line in lines)


@dataclass(frozen=True)
class MemberRead:
    """One data-archive member as read (a regular file's bytes already in the blob store); placed by PackageTree.place."""

    name: str
    kind: str  # 'dir', 'symlink', 'file', 'hardlink', 'special'
    mode: int
    mtime: float
    uid: int
    gid: int
    linkname: str = ""
    blob: Path | None = None
    sha256: str = ""
    md5: str = ""


@dataclass(frozen=True)
class PackageRead:
    locked: LockedPackage
    label: str
    control: dict[str, bytes]
    members: tuple[MemberRead, ...]


def _refusal(label: str, what: str, member: str, **details) -> IntegrityError:
    details.setdefault("fix", "do not build an image from this package; check the lock and the archive it came from")
    return IntegrityError(f"the package {what}", file=label, field=member, **details)


def _store(tar, member, blobs: Path, scratch_name: str) -> tuple[Path, str, str]:
    scratch = blobs / scratch_name
    sha, md5 = hashlib.sha256(), hashlib.md5()  # noqa: S324 - md5sums is dpkg's format, not a security check
    with open(scratch, "wb") as sink:
        for chunk in tar.chunks(member):
            sha.update(chunk)
            md5.update(chunk)
            sink.write(chunk)
    blob = blobs / sha.hexdigest()
    os.replace(scratch, blob)
    return blob, sha.hexdigest(), md5.hexdigest()


def read_package(locked: LockedPackage, path: Path, blobs: Path) -> PackageRead:
    """The reading half of placing a package, safe to run for several packages at once (assemble does, one per core):
    control files, and each data member with a regular file's bytes streamed into the content-addressed blob store
    (hashed on the way; a member over MAX_MEMBER_BYTES is refused before it is read).  What may be placed where is
    decided afterwards, package by package in lock order, by PackageTree.place."""
    label = f"{locked.name} {locked.version} ({locked.filename})"
    control = deb.control_files(path, label=label, limits=DEB_LIMITS)
    members = deb.ar_members(path, label=label)
    read: list[MemberRead] = []
    with deb.open_tar(path, members[2], label=label, limits=DEB_LIMITS) as tar:
        for member in tar:
            common = {"name": member.name, "mode": member.mode, "mtime": member.mtime, "uid": member.uid, "gid": member.gid}
            if member.isdir():
                read.append(MemberRead(kind="dir", **common))
            elif member.issym():
                read.append(MemberRead(kind="symlink", linkname=member.linkname, **common))
            elif member.isreg():
                if member.size > MAX_MEMBER_BYTES:
                    raise _refusal(label, f"holds a file of {member.size} bytes, over the {MAX_MEMBER_BYTES} allowed", member.name,
                                   why="a member that size is an attack on the disk, not a library")
                blob, sha, md5 = _store(tar, member, blobs, f".incoming-{locked.name}")
                read.append(MemberRead(kind="file", blob=blob, sha256=sha, md5=md5, **common))
            elif member.islnk():
                read.append(MemberRead(kind="hardlink", linkname=member.linkname, **common))
            else:
                read.append(MemberRead(kind="special", **common))
    return PackageRead(locked, label, control, tuple(read))


def merged_path(name: str, merged: tuple[str, ...]) -> str:
    """Where a package member lands on a merged-/usr system: under /usr when it is below one of the merged tops."""
    top = name.split("/", 1)[0]
    return f"usr/{name}" if top in merged and name != top else name


class PackageTree:
    """The merged file system of the lock's packages, in memory; file contents in a content-addressed scratch store."""

    def __init__(self, architecture: str, staging: Path, epoch: int) -> None:
        self.merged = MERGED_USR.get(architecture, ("bin", "sbin", "lib"))
        self.staging, self.epoch = staging, epoch
        self.blobs = staging / "blobs"
        self.blobs.mkdir(parents=True, exist_ok=True)
        self.entries: dict[str, Entry] = {"usr": Entry("dir", 0o755, "", epoch)}
        for top in self.merged:
            self.entries[f"usr/{top}"] = Entry("dir", 0o755, "", epoch)
            self.entries[top] = Entry("symlink", 0o777, "", epoch, target=f"usr/{top}")
        self.files_by_package: dict[str, list[str]] = {}
        self.library_folders = library_folders(architecture)
        self.libraries_by_package: dict[str, list[str]] = {}

    # -- names
    def _placed(self, name: str) -> str:
        return merged_path(name, self.merged)

    def _refuse(self, label: str, what: str, member: str, **details) -> IntegrityError:
        return _refusal(label, what, member, **details)

    def _link_target(self, label: str, member: str, original: str, placed: str, target: str) -> str:
        if "\0" in target or not target:
            raise self._refuse(label, "holds a symbolic link with an empty or malformed target", member, found=target)
        if target.startswith("/"):
            return target  # resolved inside the image's root by the kernel of any container
        where = original.split("/")[:-1]
        for part in target.split("/"):
            if part in ("", "."):
                continue
            if part == "..":
                if not where:
                    raise self._refuse(label, "holds a symbolic link that leaves the root file system", member, found=target,
                                       why="unpacked anywhere but a container, it would reach the host's files")
                where.pop()
            else:
                where.append(part)
        if original == placed:
            return target
        return posixpath.relpath(self._placed("/".join(where)) or ".", posixpath.dirname(placed) or ".")

    # -- adding
    def _put(self, label: str, member: str, path: str, entry: Entry) -> None:
        parts = path.split("/")
        for depth in range(1, len(parts)):
            parent = "/".join(parts[:depth])
            known = self.entries.get(parent)
            if known is None:
                self.entries[parent] = Entry("dir", 0o755, entry.package, self.epoch)
            elif known.kind != "dir":
                raise self._refuse(label, f"writes through the {known.kind} /{parent}", member,
                                   why="a member under a link or file would land somewhere else than it says (merged-/usr links included)")
        known = self.entries.get(path)
        if known is None:
            self.entries[path] = entry
            return
        same = known.kind == entry.kind and (entry.kind == "dir" or (known.target, known.sha256) == (entry.target, entry.sha256))
        if not same:
            raise self._refuse(label, f"ships /{path}, which {known.package or 'the merged-/usr layout'} already ships differently", member,
                               found=f"{entry.kind} {entry.sha256 or entry.target}", expected=f"{known.kind} {known.sha256 or known.target}",
                               fix="leave one of the two packages out of the definition's base.packages")

    def add_package(self, locked: LockedPackage, path: Path, stand_ins: dict[tuple[str, str], ScriptStandIn]) -> None:
        self.place(read_package(locked, path, self.blobs), stand_ins)

    def place(self, read: PackageRead, stand_ins: dict[tuple[str, str], ScriptStandIn]) -> None:
        """The members of one read package into the tree, in the order its data archive lists them (every rule checked here)."""
        locked, label = read.locked, read.label
        self._check_scripts(locked, read.control, stand_ins, label=label)
        placed_files: dict[str, str] = {}  # original name -> placed path, for hard links
        libraries: set[str] = set()  # as package_libraries reads them for the lock: file, link or hard link in a loader folder
        for member in read.members:
            name = "/".join(part for part in member.name.split("/") if part not in ("", "."))
            if not name:
                continue
            placed = self._placed(name)
            if member.uid != 0 or member.gid != 0:
                raise self._refuse(label, "holds a member not owned by root", member.name, found=f"{member.uid}:{member.gid}", expected="0:0")
            mtime = max(0, min(int(member.mtime), self.epoch))
            if name in self.merged:
                if member.kind == "dir" or (member.kind == "symlink" and member.linkname.strip("/") == f"usr/{name}"):
                    continue  # the merged-/usr link stays
                raise self._refuse(label, f"would replace the merged-/usr link /{name}", member.name, found=member.linkname or "a file")
            if member.kind == "dir":
                self._put(label, member.name, placed, Entry("dir", member.mode & 0o7777, locked.name, mtime))
            elif member.kind == "symlink":
                target = self._link_target(label, member.name, name, placed, member.linkname)
                self._put(label, member.name, placed, Entry("symlink", 0o777, locked.name, mtime, target=target))
            elif member.kind == "file":
                self._put(label, member.name, placed, Entry("file", member.mode & 0o7777, locked.name, mtime, blob=member.blob, sha256=member.sha256, md5=member.md5))
                placed_files[name] = placed
            elif member.kind == "hardlink":
                source = "/".join(part for part in member.linkname.split("/") if part not in ("", "."))
                original = self.entries.get(placed_files.get(source, ""))
                if original is None:
                    raise self._refuse(label, "holds a hard link to a file it does not ship before it", member.name, found=member.linkname)
                self._put(label, member.name, placed, Entry("file", member.mode & 0o7777, locked.name, mtime, blob=original.blob,
                                                             sha256=original.sha256, md5=original.md5))
                placed_files[name] = placed
            else:
                raise self._refuse(label, "holds a device node, FIFO or other special file", member.name,
                                   expected="files, folders and links only", why="an image layer from packages never needs one; a device node grants access to hardware")
            if member.kind != "dir" and (library := _library_name(placed, self.library_folders)) is not None:
                libraries.add(library)
        self.libraries_by_package[locked.name] = sorted(libraries)
        self._metadata(locked, read.control["control"])

    def _check_scripts(self, locked: LockedPackage, control: dict[str, bytes], stand_ins: dict[tuple[str, str], ScriptStandIn], *, label: str) -> None:
        for script in CHECKED_SCRIPTS:
            text = control.get(script)
            if text is None or _is_trivial_script(text):
                continue
            digest = hashlib.sha256(text).hexdigest()
            listed = stand_ins.get((locked.name, script))
            if listed is None or listed.sha256 != digest:
                raise InputError(
                    f"{locked.name} has a {script} script that does more than ldconfig, and no stand-in is listed for it",
                    file=label, field=f"control.tar/{script}", found=f"sha256 {digest}" + (f" (listed: {listed.sha256})" if listed else ""),
                    why="no maintainer script runs when the layer is made; what the script would have done must be reviewed and replaced",
                    fix=f"read the script (dpkg-deb --ctrl-tarfile), then add [[base.script]] package = \"{locked.name}\", script = \"{script}\", "
                        f"sha256 = \"{digest}\", stand_in = \"<what replaces it>\" (and links = {{...}} for alternatives) to the definition",
                )
            for path, target in listed.links:
                self._put(label, f"{script} stand-in", self._placed(path.lstrip("/")), Entry("symlink", 0o777, locked.name, self.epoch, target=target))

    def _metadata(self, locked: LockedPackage, control: bytes) -> None:
        files = sorted(path for path, entry in self.entries.items() if entry.package == locked.name and entry.kind == "file")
        self.files_by_package[locked.name] = files
        md5sums = "".join(f"{self.entries[path].md5}  {path}\n" for path in files).encode()
        for name, data in ((locked.name, control if control.endswith(b"\n") else control + b"\n"), (f"{locked.name}.md5sums", md5sums)):
            blob = self.blobs / hashlib.sha256(data).hexdigest()
            blob.write_bytes(data)
            self._put("status.d", name, f"{STATUS_DIR}/{name}", Entry("file", 0o644, "", self.epoch, blob=blob, sha256=hashlib.sha256(data).hexdigest()))

    def add_file(self, path: str, data_source: Path, *, owner: str, label: str) -> None:
        """A file that comes from elsewhere than a package (a wheel of the toolchain lock), placed before the loader cache is made."""
        sha, md5 = hashlib.sha256(), hashlib.md5()  # noqa: S324 - md5sums is dpkg's format
        data = data_source.read_bytes()
        sha.update(data)
        md5.update(data)
        blob = self.blobs / sha.hexdigest()
        blob.write_bytes(data)
        self._put(label, path, self._placed(path.lstrip("/")), Entry("file", 0o644, owner, self.epoch, blob=blob, sha256=sha.hexdigest(), md5=md5.hexdigest()))

    # -- the loader cache
    def materialize(self, root: Path) -> None:
        """The tree as files under `root`, for ldconfig: each file a copy of its blob (a reflink where the file system
        can), never a hard link.  The image's own ldconfig runs there as root: through a hard link it could rewrite a
        blob whose SHA-256 the layer and md5sums already record, and a chmod would change the shared inode."""
        root.mkdir(parents=True)
        for path in sorted(self.entries):
            entry, target = self.entries[path], root / path
            if entry.kind == "dir":
                target.mkdir(exist_ok=True)
            elif entry.kind == "symlink":
                os.symlink(entry.target, target)
            else:
                assert entry.blob is not None
                _private_copy(entry.blob, target)
                os.chmod(target, entry.mode & 0o777)

    def generate_ld_cache(self) -> str:
        root = self.staging / "root"
        self.materialize(root)
        (root / "etc").mkdir(exist_ok=True)  # ldconfig writes etc/ld.so.cache~ first
        own = self.entries.get("usr/sbin/ldconfig")
        privileged = [] if os.geteuid() == 0 else ["unshare", "--user", "--map-root-user"]
        if own is not None and own.kind == "file":
            command, used = [*privileged, "chroot", str(root), "/usr/sbin/ldconfig", "-X"], "image"
        else:
            command = [*privileged, shutil.which("ldconfig") or "/usr/sbin/ldconfig", "-X", "-r", str(root)]
            used = host_ldconfig()
        result = subprocess.run(command, capture_output=True, text=True, timeout=300)
        cache = root / "etc" / "ld.so.cache"
        if result.returncode != 0 or not cache.is_file():
            raise EnvironmentProblem("could not generate /etc/ld.so.cache for the package layer", found=(result.stderr or result.stdout).strip()[-400:],
                                     why="ldconfig -r needs chroot: run as root or where unprivileged user namespaces are allowed",
                                     fix="run the image stage as root, or enable user namespaces (sysctl kernel.unprivileged_userns_clone=1)")
        data = cache.read_bytes()
        blob = self.blobs / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        self._put("ldconfig", "etc/ld.so.cache", "etc/ld.so.cache", Entry("file", 0o644, "", self.epoch, blob=blob, sha256=hashlib.sha256(data).hexdigest()))
        shutil.rmtree(root)
        return used

    # -- the layer
    def layer_files(self) -> tuple[oci.LayerFile, ...]:
        return tuple(oci.LayerFile("/" + path, entry.blob, bool(entry.mode & 0o111)) for path, entry in sorted(self.entries.items()) if entry.kind == "file")

    def write_tar(self, sink) -> None:
        with tarfile.open(fileobj=sink, mode="w|", format=tarfile.PAX_FORMAT, encoding="utf-8") as tar:
            for path in sorted(self.entries, key=lambda p: p.encode("utf-8")):
                entry = self.entries[path]
                info = tarfile.TarInfo(path)
                info.mtime, info.mode, info.uid, info.gid, info.uname, info.gname = entry.mtime, entry.mode, 0, 0, "", ""
                if entry.kind == "dir":
                    info.type = tarfile.DIRTYPE
                    tar.addfile(info)
                elif entry.kind == "symlink":
                    info.type, info.linkname = tarfile.SYMTYPE, entry.target
                    tar.addfile(info)
                else:
                    assert entry.blob is not None
                    info.size = entry.blob.stat().st_size
                    with open(entry.blob, "rb") as handle:
                        tar.addfile(info, handle)


def _private_copy(source: Path, target: Path) -> None:
    """`target` with `source`'s bytes and an inode of its own: a reflink (FICLONE: no data copied on btrfs, XFS, …), else a copy."""
    with open(source, "rb") as reading, open(target, "xb") as writing:
        try:
            fcntl.ioctl(writing.fileno(), _FICLONE, reading.fileno())
            return
        except OSError:
            pass
        shutil.copyfileobj(reading, writing, 1 << 20)


def check_lock_libraries(lock: AptLock, shipped: dict[str, list[str]]) -> None:
    """The lock's per-package `libraries` (what a lane derives its base libraries from) must be what the packages' bytes place.

    The field is written by `image lock` from each .deb, but no digest covers it (request_sha256 binds the request,
    the .deb's SHA-256 its bytes): a hand-edited list would change what build and package count as provided by the base."""
    for index, locked in enumerate(lock.packages):
        placed = shipped.get(locked.name, [])
        if list(locked.libraries) != placed:
            only_lock, only_package = sorted(set(locked.libraries) - set(placed)), sorted(set(placed) - set(locked.libraries))
            raise IntegrityError(
                f"the lock says {locked.name} ships other libraries than its .deb places in the loader's folders",
                file=lock.file, field=f"packages[{index}].libraries ({locked.name})",
                found=", ".join([*(f"{name} (in the lock, not in the package)" for name in only_lock),
                                 *(f"{name} (in the package, not in the lock)" for name in only_package)]),
                expected=", ".join(placed) or "no library",
                why="the lane's base libraries are derived from this field, and no digest covers it: only the package's bytes say what it ships",
                fix="run 'python -m pipeline image lock' (nox -s image-lock) to write the lock from the packages again, and review its difference",
            )


def host_ldconfig() -> str:
    """This host's `ldconfig --version` line: the package layer's ld.so.cache bytes depend on it unless the lock brings libc-bin."""
    host = shutil.which("ldconfig") or "/usr/sbin/ldconfig"
    try:
        version = subprocess.run([host, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "ldconfig: not found"
    return (version.stdout.splitlines() or ["ldconfig"])[0]


def write_layer(tree: PackageTree, destination: Path, *, compression: str, gzip_level: int, name: str) -> oci.BuiltLayer:
    destination.parent.mkdir(parents=True, exist_ok=True)
    with open(destination, "wb") as raw:
        outer = oci.HashingWriter(raw)
        if compression == "gzip":
            with gzip.GzipFile(filename="", mode="wb", fileobj=outer, mtime=0, compresslevel=gzip_level) as packed:
                inner = oci.HashingWriter(packed)
                tree.write_tar(inner)
            media_type, diff_id = oci.LAYER_GZIP, inner.digest
        else:
            tree.write_tar(outer)
            media_type, diff_id = oci.LAYER_TAR, outer.digest
    return oci.BuiltLayer(oci.Descriptor(media_type, outer.digest, outer.size), diff_id, tree.layer_files(), name)


def wheel_member(wheel: Path, member: str, destination: Path, *, label: str) -> Path:
    """One file of a (verified) wheel, read bounded, written to `destination`."""
    import zipfile

    try:
        with zipfile.ZipFile(wheel) as archive:
            info = archive.getinfo(member)
            if info.file_size > MAX_MEMBER_BYTES or info.is_dir():
                raise IntegrityError(f"the wheel's {member} is a folder or over {MAX_MEMBER_BYTES} bytes", file=label, found=info.file_size)
            with archive.open(info) as source:
                data = source.read(MAX_MEMBER_BYTES + 1)
    except KeyError:
        raise InputError("the wheel holds no such file", file=label, field="member", found=member, fix="check the path with 'unzip -l' on the wheel") from None
    except (zipfile.BadZipFile, OSError) as exc:
        raise IntegrityError(f"the wheel is not a readable zip archive ({exc})", file=label) from None
    destination.parent.mkdir(parents=True, exist_ok=True)
    destination.write_bytes(data)
    return destination


def assemble(lock: AptLock, stand_ins: dict[tuple[str, str], ScriptStandIn], staging: Path, *, epoch: int, compression: str,
             gzip_level: int, cache: Path | None = None, name: str = "packages",
             extra_files: tuple[tuple[str, Path, str], ...] = ()) -> LayerResult:
    """The lock's packages as one layer at `staging/<name>.layer` (see the module docstring); `extra_files`
    are (image path, file, owner) placed too, before the loader cache is made (libcudart from its wheel)."""
    cache = cache or apt.package_cache()
    tree = PackageTree(lock.architecture, staging / "tree", epoch)
    paths = []
    for locked in lock.packages:  # every .deb by its pinned hash first, one at a time (downloads are bounded by the network, not the cores)
        source = lock.sources[locked.source]
        paths.append(apt.cached_fetch(apt.deb_url(source.uri, locked.filename), cache, sha256=locked.sha256, size=locked.size, label=f"{locked.name}.deb"))
    # Reading (xz/zstd inflation, hashing, writing blobs) on up to READ_WORKERS threads: the decompressors and hashlib
    # release the GIL.  Placing stays sequential in lock order, so the tree, every refusal and the bytes are those of a
    # one-by-one run; the first failing package in lock order is the one reported.
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(READ_WORKERS, os.cpu_count() or 1))) as pool:
        reads = [pool.submit(read_package, locked, path, tree.blobs) for locked, path in zip(lock.packages, paths, strict=True)]
        try:
            for future in reads:
                tree.place(future.result(), stand_ins)
        except BaseException:
            for future in reads:
                future.cancel()
            raise
    check_lock_libraries(lock, tree.libraries_by_package)
    for target, source_file, owner in extra_files:
        tree.add_file(target, source_file, owner=owner, label=owner)
    used = tree.generate_ld_cache()
    layer = write_layer(tree, staging / f"{name}.layer", compression=compression, gzip_level=gzip_level, name=name)
    return LayerResult(layer, tree.entries, used, tree.files_by_package, tree.libraries_by_package)


def package_control(result: LayerResult, name: str) -> dict[str, str]:
    """The control stanza of a package as the layer's status.d carries it."""
    from pipeline.formats.apt_repository import decode_text, parse_stanzas

    entry = result.entries[f"{STATUS_DIR}/{name}"]
    assert entry.blob is not None
    stanzas = parse_stanzas(decode_text(entry.blob.read_bytes(), source=f"{name}/control"), source=f"{name}/control")
    return stanzas[0] if stanzas else {}


def package_copyright(result: LayerResult, name: str) -> bytes | None:
    """`/usr/share/doc/<package>/copyright` from the layer, following one documentation-folder link (Policy 12.5)."""
    folder = f"usr/share/doc/{name}"
    link = result.entries.get(folder)
    if link is not None and link.kind == "symlink" and not link.target.startswith("/"):
        folder = posixpath.normpath(posixpath.join("usr/share/doc", link.target))
    entry = result.entries.get(f"{folder}/copyright")
    return entry.blob.read_bytes() if entry is not None and entry.kind == "file" and entry.blob is not None else None


def _library_name(placed: str, folders: frozenset[str]) -> str | None:
    folder, _, name = placed.rpartition("/")
    return name if folder in folders and ".so" in name else None


def shipped_libraries(result: LayerResult, architecture: str) -> dict[str, str]:
    """soname-like file name -> package, for the libraries the layer ships in the loader's default folders."""
    folders = library_folders(architecture)
    found: dict[str, str] = {}
    for path, entry in sorted(result.entries.items()):
        name = _library_name(path, folders)
        if name is not None and entry.package and entry.kind in ("file", "symlink"):
            found.setdefault(name, entry.package)
    return found


def package_libraries(path: Path, architecture: str, *, label: str) -> list[str]:
    """The library file names a .deb places in the loader's default folders, merged-/usr applied (what the lock records).

    The same names `shipped_libraries` finds in the assembled layer, read from the data archive's member
    names alone (nothing is extracted); the loader looks a DT_NEEDED name up as a file name in those folders."""
    folders = library_folders(architecture)
    merged = MERGED_USR.get(architecture, ("bin", "sbin", "lib"))
    found: set[str] = set()
    members = deb.ar_members(path, label=label)
    with deb.open_tar(path, members[2], label=label, limits=DEB_LIMITS) as tar:
        for member in tar:
            name = "/".join(part for part in member.name.split("/") if part not in ("", "."))
            library = _library_name(merged_path(name, merged), folders)
            if library is not None and (member.isreg() or member.issym() or member.islnk()):
                found.add(library)
    return sorted(found)


def lock_libraries(document: dict, *, cache: Path | None = None) -> dict:
    """The lock document with each package's `libraries`, read from its .deb (fetched by the pinned SHA-256 into the package cache)."""
    cache = cache or apt.package_cache()
    for locked in document["packages"]:
        source = document["sources"][locked["source"]]
        label = f"{locked['name']}.deb"
        path = apt.cached_fetch(apt.deb_url(source["uri"], locked["filename"]), cache, sha256=locked["sha256"], size=locked["size"], label=label)
        locked["libraries"] = package_libraries(path, document["architecture"], label=label)
    return document
