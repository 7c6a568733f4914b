"""Pinned CUDA toolchains, provisioned from PyPI wheels named in a lock file.

`runtime/toolchain.lock.json` pins, per CUDA toolkit line and host platform,
every wheel (nvcc, crt, nvvm, cudart, cccl, nvtx, plus cmake and ninja) by
exact version, URL, size and SHA-256.  Provisioning downloads each wheel
(hashing while it streams, into a content-addressed cache), refuses any byte
that differs from the lock, unpacks the wheels into a canonical directory and
applies the layout fix nvcc.profile needs.  The directory is canonical
(`/var/tmp/omp-ninfer/toolchains/...`) because the toolkit path is embedded in
the binaries (nvlink command line), so a different location would change them.

A folder there is used only when it is this user's (or root's), nobody else can
write to it or a folder above it, and it holds exactly the files the lock's
wheels pin, each re-hashed (a verification kept in a sealed state file, so a
warm start re-hashes only what changed): /var/tmp is shared, and another user
could have made the folder first.  `OMP_NINFER_TOOLCHAIN_ROOT` moves the root to
a private folder.  The rule is pipeline/infra/private_dir.py's, which the
canonical build root and the compile cache apply too.

`--toolchain system` uses the nvcc on PATH (or CUDA_HOME) instead; the build
identity then records it as a system toolchain with its version.
"""

from __future__ import annotations

import base64
import contextlib
import csv
import hashlib
import hmac
import io
import os
import re
import shutil
import stat
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.errors import (
    EnvironmentProblem,
    InputError,
    IntegrityError,
    PipelineError,
    RefusedError,
    RemoteError,
)
from pipeline.formats.lanes import Lane, current_host_platform
from pipeline.formats.toolchain_lock import (
    LOCK_FILE,
    LOCK_TYPE,
    PYPI_FILES,
    ToolchainSpec,
    Wheel,
    load_lock,
    toolchain_spec,
)
from pipeline.formats.toolchain_record import RecordedLibrary, ToolchainRecord
from pipeline.infra import net
from pipeline.infra.private_dir import (
    ON_WINDOWS,
    check_private_dir,
    ensure_private_dir,
    expected_owner,
    is_trusted_owner,
    owner_and_mode,
)
from pipeline.util import ui
from pipeline.util.fs import atomic_output_dir, atomic_write_bytes, read_bytes_bounded
from pipeline.util.hashing import is_sha256_hex, sha256_file, sha256_files
from pipeline.util.jsonio import canonical_bytes, expect_object, loads_object, read_json_object, write_json
from pipeline.util.proc import run_text
from pipeline.util.safepath import safe_relpath

# Short and fixed on both hosts: the path is embedded in binaries and MSVC dislikes long paths.
CANONICAL_ROOT = Path("C:/omp-ninfer") if ON_WINDOWS else Path("/var/tmp/omp-ninfer")
EXE = ".exe" if ON_WINDOWS else ""
MAX_PYPI_ANSWER_BYTES = 32 * 1024 * 1024  # PyPI's JSON for a project with every release's files

# Wheels a CUDA toolkit line consists of (the design's list) plus the build tools.
CUDA_DISTRIBUTIONS = ("nvidia-cuda-nvcc", "nvidia-cuda-crt", "nvidia-nvvm", "nvidia-cuda-runtime", "nvidia-cuda-cccl", "nvidia-nvtx")
TOOL_DISTRIBUTIONS = ("cmake", "ninja")


ROOT_VARIABLE = "OMP_NINFER_TOOLCHAIN_ROOT"


def toolchain_root() -> Path:
    override = os.environ.get(ROOT_VARIABLE)
    return Path(override) if override else CANONICAL_ROOT / "toolchains"


def wheel_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "omp-ninfer" / "wheels"


# The lock (`runtime/toolchain.lock.json`: Wheel, ToolchainSpec, toolchain_spec) is read by its owner,
# pipeline/formats/toolchain_lock.py; provisioning, verification and `toolchain lock` live here.


@dataclass
class Toolchain:
    """A toolchain ready to use: where nvcc, cmake and ninja are, and how to describe it."""

    kind: str  # "pinned" or "system"
    nvcc: Path
    cmake: Path
    ninja: Path
    cuda_home: Path
    cuda_version: str
    description: dict[str, Any] = field(default_factory=dict)
    wheels: tuple[Wheel, ...] = ()  # the pinned wheels it was unpacked from (none for a system toolkit)

    @property
    def library_dir(self) -> Path:
        """Where the CUDA runtime library lives (for running --version and the selftest)."""
        if ON_WINDOWS:
            return self.cuda_home / "bin" / "x86_64"
        for candidate in (self.cuda_home / "lib", self.cuda_home / "lib64", self.cuda_home / "targets" / "x86_64-linux" / "lib"):
            if (candidate / "libcudart.so.13").exists() or (candidate / "libcudart.so").exists():
                return candidate
        return self.cuda_home / "lib"


def fetch_wheel(wheel: Wheel, *, session=None) -> Path:
    """The wheel's bytes in the content-addressed cache, downloaded if needed and always verified."""
    cache = wheel_cache()
    target = cache / wheel.sha256[:2] / wheel.sha256 / wheel.filename
    if target.exists():
        if target.stat().st_size == wheel.size and sha256_file(target) == wheel.sha256:
            return target
        target.unlink()
    from pipeline.infra.transfer import download_verified  # the blob mover shared with audit

    download_verified(wheel.url, target, expected_sha256=wheel.sha256, expected_size=wheel.size, label=wheel.filename, session=session)
    return target


def _extract_wheel(path: Path, destination: Path) -> None:
    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            name = info.filename
            if name.startswith("/") or ".." in Path(name).parts:
                raise IntegrityError("wheel holds a path outside its root", file=path, found=name)
            out = destination / safe_relpath(name.rstrip("/"), file=path, field="member name", hidden=True, portable=False)
            if info.is_dir():
                out.mkdir(parents=True, exist_ok=True)
                continue
            out.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(info) as source, open(out, "wb") as sink:
                shutil.copyfileobj(source, sink, 1024 * 1024)
            mode = (info.external_attr >> 16) & 0o777
            os.chmod(out, 0o755 if mode & 0o111 else 0o644)


def _fix_cuda_layout(cuda_home: Path) -> None:
    """nvcc.profile expects targets/x86_64-linux/{include,lib}; the wheels ship include/ and lib/."""
    targets = cuda_home / "targets" / "x86_64-linux"
    targets.mkdir(parents=True, exist_ok=True)
    for name in ("include", "lib"):
        link = targets / name
        if not link.exists():
            link.symlink_to(Path("..") / ".." / name)
    lib64 = cuda_home / "lib64"
    if not lib64.exists():
        lib64.symlink_to("lib")
    cudart = cuda_home / "lib" / "libcudart.so"
    if not cudart.exists() and (cuda_home / "lib" / "libcudart.so.13").exists():
        cudart.symlink_to("libcudart.so.13")



# The folders the toolchains live in are private (pipeline/infra/private_dir.py: check_private_dir, ensure_private_dir).

def _toolchain_fix(root: Path) -> str:
    return (f"remove {root} (the next build provisions it again), or set {ROOT_VARIABLE} to a private folder of yours "
            f"(mkdir -m 700 ~/omp-ninfer-toolchains; export {ROOT_VARIABLE}=~/omp-ninfer-toolchains: builds there are "
            "not byte-identical to the release's, whose toolkit path is the canonical one)")


# -- verifying a pinned toolchain folder ----------------------------------------
#
# The lock pins every wheel by SHA-256, and each wheel's RECORD (inside the
# verified wheel) pins every file it ships.  A folder is used only when it holds
# exactly those files (plus the layout links provisioning makes), each hashing to
# its pin.  The result is kept in a state file inside the folder, keyed by each
# file's inode, size, mtime and ctime and sealed with an HMAC under a key only
# its owner can read (`state.key`, 0600, in the toolchain root, which is itself
# checked private; not in the home folder, since the acceptance runner gives each
# route a fresh HOME): a warm check re-hashes only files whose stat changed, and a
# state file that was edited, copied from elsewhere or sealed by another user is
# ignored (a cold check reads the pinned wheels again).

STATE_FILE = "verified.json"
STATE_TYPE = "omp_ninfer_toolchain_verification"
MARKER_FILE = "toolchain.json"
MAX_STATE_BYTES = 16 * 1024 * 1024  # about 180 bytes per file; a CUDA toolchain has some 6,000
KEY_BYTES = 32


def state_key_path(base: Path | None = None) -> Path:
    """The key sealing the state files of the toolchains under `base` (default: the toolchain root)."""
    return Path(os.path.abspath(base or toolchain_root())) / "state.key"


def _state_key(base: Path) -> bytes | None:
    """The owner's key for sealing state files under `base` (made on first use), or None when it is not private."""
    path = state_key_path(base)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except FileExistsError:
        pass
    except OSError as exc:
        ui.warn(f"cannot make the toolchain state key {path} ({exc.strerror}): every toolchain check re-hashes every file")
        return None
    else:
        with os.fdopen(fd, "wb") as handle:
            handle.write(os.urandom(KEY_BYTES))
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or (not ON_WINDOWS and (st.st_uid != os.geteuid() or st.st_mode & 0o077)) or st.st_size != KEY_BYTES:
            ui.warn(f"the toolchain state key {path} is not a private {KEY_BYTES}-byte file of yours ({owner_and_mode(st)}): "
                    "not using it, every toolchain check re-hashes every file; remove it to get a new one")
            return None
        return path.read_bytes()
    except OSError as exc:
        ui.warn(f"cannot read the toolchain state key {path} ({exc.strerror}): every toolchain check re-hashes every file")
        return None


def _seal(key: bytes, body: bytes) -> str:
    return hmac.new(key, body, hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class _Tree:
    files: dict[str, os.stat_result]
    links: dict[str, str]


def _scan(root: Path, fix: str) -> _Tree:
    """Every entry under <root>/site, by lstat; refuses one that is not ours or is writable by others."""
    files: dict[str, os.stat_result] = {}
    links: dict[str, str] = {}
    pending = [root / "site"]
    base = len(str(root / "site")) + 1
    while pending:
        folder = pending.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError as exc:
            raise IntegrityError(f"cannot list the pinned toolchain folder ({exc.strerror})", file=folder, fix=fix) from None
        for entry in entries:
            st = entry.stat(follow_symlinks=False)
            rel = entry.path[base:].replace(os.sep, "/")
            if not ON_WINDOWS and not is_trusted_owner(st.st_uid):
                raise RefusedError("the pinned toolchain holds a file that is not yours", file=entry.path, found=owner_and_mode(st), expected=expected_owner(), fix=fix)
            if stat.S_ISLNK(st.st_mode):
                links[rel] = os.readlink(entry.path)
                continue
            if not ON_WINDOWS and st.st_mode & 0o022:
                raise RefusedError("the pinned toolchain holds a file writable by group or others", file=entry.path, found=owner_and_mode(st), expected=expected_owner(), fix=fix)
            if stat.S_ISDIR(st.st_mode):
                pending.append(Path(entry.path))
            elif stat.S_ISREG(st.st_mode):
                files[rel] = st
            else:
                raise IntegrityError("the pinned toolchain holds something that is neither a file, a folder nor a link", file=entry.path, found=owner_and_mode(st), fix=fix)
    return _Tree(files, links)


def _record_digests(record: bytes, *, source: str) -> dict[str, str]:
    """path -> SHA-256 hex from a wheel's RECORD (rows without a sha256 are left out)."""
    digests = {}
    for row in csv.reader(io.StringIO(record.decode("utf-8", errors="replace"))):
        if len(row) >= 2 and row[1].startswith("sha256="):
            encoded = row[1][len("sha256="):]
            try:
                digests[row[0]] = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).hex()
            except ValueError:
                raise IntegrityError("a pinned wheel's RECORD holds a hash that is not base64", file=source, found=row[1]) from None
    return digests


def pinned_files(spec: ToolchainSpec) -> dict[str, str]:
    """Every file the lock pins for this toolchain: site-relative path -> SHA-256, read from the verified wheels.

    The wheels come from the content-addressed cache (re-hashed against the lock),
    downloaded when missing.  A later wheel's file replaces an earlier one's, as
    unpacking does.
    """
    manifest: dict[str, str] = {}
    for wheel in spec.wheels:
        path = fetch_wheel(wheel)
        with zipfile.ZipFile(path) as archive:
            members = [info for info in archive.infolist() if not info.is_dir()]
            records = [info for info in members if info.filename == f"{wheel.dist_info}/RECORD"]
            recorded = _record_digests(archive.read(records[0]), source=str(path)) if records else {}
            for info in members:
                name = safe_relpath(info.filename, file=path, field="member name", hidden=True, portable=False)
                digest = recorded.get(info.filename)
                if digest is None:  # RECORD itself, and anything its RECORD does not hash
                    digest = hashlib.sha256(archive.read(info)).hexdigest()
                manifest[name] = digest
    return manifest


def layout_links(spec: ToolchainSpec, files: dict[str, str] | set[str]) -> dict[str, str]:
    """The links _fix_cuda_layout makes for these files: site-relative path -> target."""
    if ON_WINDOWS:
        return {}
    home = spec.cuda_home.rstrip("/")
    links = {
        f"{home}/targets/x86_64-linux/include": "../../include",
        f"{home}/targets/x86_64-linux/lib": "../../lib",
        f"{home}/lib64": "lib",
    }
    if f"{home}/lib/libcudart.so.13" in files and f"{home}/lib/libcudart.so" not in files:
        links[f"{home}/lib/libcudart.so"] = "libcudart.so.13"
    return links


def _stat_key(st: os.stat_result) -> list[int]:
    return [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _read_state(root: Path, spec: ToolchainSpec, key: bytes | None) -> dict[str, list[Any]] | None:
    """The files of a state file this user sealed for this folder and lock entry, or None (then a cold check).

    The file is one line `<HMAC-SHA256 hex of the rest>` and the canonical JSON
    body; the seal is checked on the raw bytes before the body is parsed.
    """
    path = root / STATE_FILE
    if key is None:
        return None
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or (not ON_WINDOWS and (not is_trusted_owner(st.st_uid) or st.st_mode & 0o022)):
            ui.warn(f"ignoring the toolchain state file {path}: not a private file of yours ({owner_and_mode(st)})")
            return None
        data = read_bytes_bounded(path, MAX_STATE_BYTES, what="the toolchain state file")
    except FileNotFoundError:
        return None
    except (OSError, PipelineError) as exc:
        ui.warn(f"ignoring the toolchain state file {path}: {exc}")
        return None
    seal, _, body_bytes = data.partition(b"\n")
    if not hmac.compare_digest(seal, _seal(key, body_bytes).encode()):
        ui.warn(f"ignoring the toolchain state file {path}: its seal does not verify (edited, copied, or sealed by another user); re-hashing every file")
        return None
    try:
        body = loads_object(body_bytes, source=path, max_bytes=MAX_STATE_BYTES)
    except PipelineError as exc:
        ui.warn(f"ignoring the toolchain state file {path}: {exc}")
        return None
    if body.get("artifact_type") != STATE_TYPE or body.get("digest") != spec.digest or body.get("root") != str(root) or not isinstance(body.get("files"), dict):
        return None
    return body["files"]


def _write_state(root: Path, spec: ToolchainSpec, key: bytes | None, files: dict[str, list[Any]]) -> None:
    if key is None:
        return
    body = canonical_bytes({"artifact_type": STATE_TYPE, "schema_version": 1, "digest": spec.digest, "root": str(root), "files": files}, indent=None)
    try:
        atomic_write_bytes(root / STATE_FILE, _seal(key, body).encode() + b"\n" + body, mode=0o600)
    except OSError as exc:  # a folder of root's used by another user: every check is then a cold one
        ui.info(f"cannot keep the toolchain verification in {root / STATE_FILE} ({exc.strerror}); the next check re-hashes every file")


def verify_toolchain_dir(root: Path, spec: ToolchainSpec) -> None:
    """Refuse a pinned toolchain folder that is not ours (RefusedError) or not exactly the pinned files (IntegrityError)."""
    fix = _toolchain_fix(root)
    check_private_dir(root, what="the pinned toolchain folder", fix=fix)
    marker = root / MARKER_FILE
    if not ON_WINDOWS:
        try:
            st = os.lstat(marker)
        except OSError as exc:
            raise IntegrityError(f"the pinned toolchain has no readable marker ({exc.strerror})", file=marker, fix=fix) from None
        if not stat.S_ISREG(st.st_mode) or not is_trusted_owner(st.st_uid) or st.st_mode & 0o022:
            raise RefusedError("the pinned toolchain's marker is not a private file of yours", file=marker, found=owner_and_mode(st), expected=expected_owner(), fix=fix)
    tree = _scan(root, fix)
    key = _state_key(root.parent)
    state = _read_state(root, spec, key)
    if state is not None:
        pins = {rel: entry[-1] for rel, entry in state.items() if isinstance(entry, list) and entry and isinstance(entry[-1], str)}
        known = {rel: entry[:-1] for rel, entry in state.items() if isinstance(entry, list)}
    else:
        pins = pinned_files(spec)
        known = {}
    missing = sorted(set(pins) - set(tree.files))
    if missing:
        raise IntegrityError(f"the pinned toolchain folder lacks {len(missing)} pinned file(s)", file=root / "site" / missing[0],
                             found="no such file", expected=f"the file the lock's wheels pin (sha256 {pins[missing[0]]})", fix=fix)
    extra = sorted(set(tree.files) - set(pins))
    if extra:
        raise IntegrityError(f"the pinned toolchain folder holds {len(extra)} file(s) no pinned wheel ships", file=root / "site" / extra[0],
                             found="a file", expected="only the files of the lock's wheels", fix=fix)
    links = layout_links(spec, pins)
    for rel, target in sorted(tree.links.items()):
        if links.get(rel) != target:
            raise IntegrityError("the pinned toolchain folder holds a link provisioning does not make", file=root / "site" / rel,
                                 found=f"a link to {target}", expected=f"a link to {links[rel]}" if rel in links else "no link", fix=fix)
    for rel in (f"{spec.cuda_home}/bin/nvcc{EXE}", spec.cmake, spec.ninja):
        if rel not in tree.files:
            raise IntegrityError("a tool the toolchain runs is not a pinned file", file=root / "site" / rel, expected="a file of the lock's wheels", fix=fix)
    stale = [rel for rel, st in tree.files.items() if known.get(rel) != _stat_key(st)]
    digests = sha256_files([root / "site" / rel for rel in stale])
    for rel in sorted(stale):
        found = digests[root / "site" / rel]
        if found != pins[rel]:
            raise IntegrityError("a file of the pinned toolchain differs from the lock's wheels", file=root / "site" / rel,
                                 found=f"sha256 {found}", expected=f"sha256 {pins[rel]}", fix=fix)
    if stale or state is None:
        _write_state(root, spec, key, {rel: [*_stat_key(st), pins[rel]] for rel, st in tree.files.items()})


def provision(spec: ToolchainSpec) -> Toolchain:
    """Make the pinned toolchain available at its canonical path (a no-op when already there)."""
    base = ensure_private_dir(toolchain_root(), what="the toolchain root", fix=_toolchain_fix(toolchain_root()))
    root = base / f"cuda-{spec.cuda_version}-{spec.platform}-{spec.digest[:12]}"
    with _provisioning_lock(base / f".{root.name}.lock"):
        return _provision_locked(spec, root)


@contextlib.contextmanager
def _provisioning_lock(path: Path) -> Iterator[None]:
    """One process provisions a toolchain at a time (pytest-xdist workers, parallel builds): two at once wrote
    into one wheel's .part, and the second's folder replaced (and deleted) the first's while it was in use."""
    if ON_WINDOWS:  # one build at a time there (no parallel builds of a lane on Windows)
        yield
        return
    import fcntl

    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            ui.info(f"waiting for another process that is provisioning {path.name.removeprefix('.').removesuffix('.lock')}")
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _provision_locked(spec: ToolchainSpec, root: Path) -> Toolchain:
    marker = root / MARKER_FILE
    if os.path.lexists(root):  # nothing in a folder someone else made is read, let alone run
        check_private_dir(root, what="the pinned toolchain folder", fix=_toolchain_fix(root))
    if not (marker.exists() and read_json_object(marker).get("digest") == spec.digest):
        ui.step("toolchain", f"provisioning CUDA {spec.cuda_version} ({len(spec.wheels)} pinned wheels) into {root}")
        paths = [fetch_wheel(wheel) for wheel in spec.wheels]
        with atomic_output_dir(root) as staging:
            for wheel, path in zip(spec.wheels, paths, strict=True):
                ui.info(f"unpacking {wheel.filename}")
                _extract_wheel(path, staging / "site")
            if not ON_WINDOWS:  # the Windows wheels already have the toolkit's own layout
                _fix_cuda_layout(staging / "site" / spec.cuda_home)
            write_json(staging / MARKER_FILE, {"digest": spec.digest, "spec": spec.to_json()})
        verify_toolchain_dir(root, spec)
    else:
        verify_toolchain_dir(root, spec)
        ui.info(f"pinned CUDA {spec.cuda_version} toolchain already at {root} (owner, mode and every pinned file checked)")
    site = root / "site"
    cuda_home = site / spec.cuda_home
    toolchain = Toolchain(
        kind="pinned",
        nvcc=cuda_home / "bin" / f"nvcc{EXE}",
        cmake=site / spec.cmake,
        ninja=site / spec.ninja,
        cuda_home=cuda_home,
        cuda_version=spec.cuda_version,
        wheels=spec.wheels,
    )
    toolchain.description = {
        "kind": "pinned",
        "toolkit": spec.toolkit,
        "cuda_version": spec.cuda_version,
        "lock_entry_sha256": spec.digest,
        "root": str(root),
        "wheels": [{"distribution": w.distribution, "version": w.version, "sha256": w.sha256} for w in spec.wheels],
    }
    _check_versions(toolchain, expected_cuda=spec.cuda_version)
    return toolchain


def system_toolchain(lane: Lane) -> Toolchain:
    nvcc = shutil.which("nvcc")
    if not nvcc and os.environ.get("CUDA_HOME"):
        candidate = Path(os.environ["CUDA_HOME"]) / "bin" / f"nvcc{EXE}"
        nvcc = str(candidate) if candidate.exists() else None
    if not nvcc:
        raise EnvironmentProblem(
            "--toolchain system was asked for, but no nvcc is on PATH or under CUDA_HOME",
            fix="install a CUDA 13 toolkit, or drop --toolchain system to use the pinned wheel toolchain",
        )
    cmake = shutil.which("cmake")
    ninja = shutil.which("ninja") or shutil.which("ninja-build")
    if not cmake or not ninja:
        raise EnvironmentProblem(
            "--toolchain system needs cmake and ninja on PATH",
            fix="apt-get install cmake ninja-build, or use the pinned toolchain",
        )
    nvcc_path = Path(nvcc).resolve()
    toolchain = Toolchain(
        kind="system",
        nvcc=nvcc_path,
        cmake=Path(cmake),
        ninja=Path(ninja),
        cuda_home=nvcc_path.parent.parent,
        cuda_version="",
    )
    toolchain.cuda_version = nvcc_version(toolchain.nvcc)
    if not toolchain.cuda_version.startswith(lane.cuda_toolkit + "."):
        ui.warn(
            f"system nvcc is CUDA {toolchain.cuda_version}, the lane pins CUDA {lane.cuda_toolkit}: "
            "the build is recorded as a system-toolchain build and is not the pinned release toolchain"
        )
    from pipeline.lanework.hostdeps import public_name

    # The identity and the provenance ship this: a toolkit under a home or an opt folder is named, not placed.
    toolchain.description = {"kind": "system", "cuda_version": toolchain.cuda_version, "nvcc": public_name(str(toolchain.nvcc))}
    _check_versions(toolchain, expected_cuda=None)
    return toolchain


def nvcc_version(nvcc: Path) -> str:
    text = run_text([nvcc, "--version"], what="ask nvcc for its version", failure=EnvironmentProblem)
    match = re.search(r"release [0-9.]+, V([0-9]+\.[0-9]+\.[0-9]+)", text)
    if not match:
        raise EnvironmentProblem("cannot read the CUDA version from 'nvcc --version'", file=str(nvcc), found=text.strip()[-200:])
    return match.group(1)


def _check_versions(toolchain: Toolchain, *, expected_cuda: str | None) -> None:
    version = nvcc_version(toolchain.nvcc)
    if expected_cuda and version != expected_cuda:
        raise IntegrityError(
            "the provisioned nvcc reports another version than the lock pins",
            file=str(toolchain.nvcc),
            found=version,
            expected=expected_cuda,
            fix=f"delete {toolchain.cuda_home.parent.parent.parent} and provision again",
        )
    cmake_text = run_text([toolchain.cmake, "--version"], what="ask cmake for its version", failure=EnvironmentProblem)
    ninja_text = run_text([toolchain.ninja, "--version"], what="ask ninja for its version", failure=EnvironmentProblem)
    toolchain.description.update(
        {
            "nvcc_version": version,
            "cmake_version": cmake_text.split()[2] if cmake_text.startswith("cmake version") else cmake_text.strip(),
            "ninja_version": ninja_text.strip(),
        }
    )


def toolchain_record(toolchain: Toolchain | None, *, cuda_version: str | None = None) -> ToolchainRecord:
    """What the build's toolchain provides to the later stages (pipeline/formats/toolchain_record.py).

    A pinned toolchain's shared libraries are read once, here, from the RECORD
    of each pinned wheel (its dist-info folder named by the lock's file name),
    with their hashes and licence files, and each wheel's METADATA author;
    `None` is a prebuilt import (no toolchain ran).
    """
    if toolchain is None:
        return ToolchainRecord("prebuilt", cuda_version, None, None)
    if toolchain.kind != "pinned":
        return ToolchainRecord(toolchain.kind, toolchain.cuda_version, None, str(toolchain.library_dir))
    from pipeline.formats.components import wheel_authors
    from pipeline.lanework.binaries import toolchain_libraries

    root = Path(toolchain.description["root"])
    site = root / "site"
    dist_infos = [wheel.dist_info for wheel in toolchain.wheels]
    libraries = {
        name: RecordedLibrary(
            path=library.path.relative_to(site).as_posix(),
            distribution=library.distribution,
            version=library.version,
            sha256=sha256_file(library.path),
            license_file=library.license_file.relative_to(site).as_posix() if library.license_file else None,
        )
        for name, library in toolchain_libraries(root, dist_infos=dist_infos).items()
    }
    return ToolchainRecord("pinned", toolchain.cuda_version, str(root), str(toolchain.library_dir), libraries, wheel_authors(root, dist_infos=dist_infos))


def for_lane(lane: Lane, mode: str) -> Toolchain:
    if mode == "system":
        return system_toolchain(lane)
    if mode != "pinned":
        from pipeline.errors import UsageError

        raise UsageError(f"unknown toolchain mode {mode!r}", expected="'pinned' or 'system'")
    return provision(toolchain_spec(lane.cuda_toolkit, current_host_platform()))


# -- writing the lock (maintainers) -------------------------------------------

def _pypi_files(distribution: str, version: str, session) -> list[dict[str, Any]]:
    url = f"https://pypi.org/pypi/{distribution}/json"
    response, body = net.fetch_bytes(session, url, cap=MAX_PYPI_ANSWER_BYTES, timeout=60, what="a PyPI project answer", redirects="same-origin", accept_status=lambda status: True)
    if response.status_code != 200:
        raise RemoteError(f"PyPI answered HTTP {response.status_code} for {distribution}", fix="check the network and the distribution name")
    releases = expect_object(loads_object(body, source=url, max_bytes=MAX_PYPI_ANSWER_BYTES).get("releases", {}), source=url, field="releases")
    if not isinstance(releases.get(version, []), list):
        raise InputError("lists a release that is not an array of files", file=url, field=f"releases.{version}")
    if version not in releases:
        raise InputError(f"PyPI has no {distribution} {version}", found=version, expected="one of " + ", ".join(sorted(releases)[-8:]))
    files = releases[version]
    for index, entry in enumerate(files):
        where = f"releases.{version}[{index}]"
        expect_object(entry, source=url, field=where)
        for key in ("filename", "packagetype", "url"):
            if not isinstance(entry.get(key), str):
                raise InputError(f"lists a file without a string {key!r}", file=url, field=f"{where}.{key}", found=entry.get(key))
        digests = expect_object(entry.get("digests"), source=url, field=f"{where}.digests")
        if not is_sha256_hex(digests.get("sha256")) or not isinstance(entry.get("size"), int) or isinstance(entry.get("size"), bool):
            raise InputError("lists a file without a SHA-256 and a byte size", file=url, field=where)
    return files


def _canonical_url(url: str) -> str:
    # Mirrors may answer with relative file URLs ("../../packages/packages/<path>");
    # the lock always names PyPI's file host with the same content-addressed path.
    return PYPI_FILES + url.rsplit("packages/", 1)[1]


_PLATFORM_TAGS = {"linux-x86_64": ("manylinux", "x86_64"), "windows-x86_64": ("win_amd64", "")}


def _pick_wheel(files: list[dict[str, Any]], platform: str) -> dict[str, Any]:
    tag, arch = _PLATFORM_TAGS[platform]
    candidates = [
        f for f in files
        if f["packagetype"] == "bdist_wheel" and tag in f["filename"] and arch in f["filename"] and "musllinux" not in f["filename"]
    ]
    if not candidates:
        raise InputError(f"no {platform} wheel among {[f['filename'] for f in files]}")
    return sorted(candidates, key=lambda f: f["filename"])[0]


def write_lock(toolkits: dict[str, dict[str, str]], tools: dict[str, str], path: Path = LOCK_FILE, session=None) -> dict[str, Any]:
    """Pin wheels: toolkits = {"13.1": {"nvidia-cuda-nvcc": "13.1.115", ...}}, tools = {"cmake": "3.31.10", "ninja": "1.13.0"}."""
    import requests

    session = session or requests.Session()
    document: dict[str, Any] = {"artifact_type": LOCK_TYPE, "schema_version": 1, "toolkits": {}}
    for toolkit, versions in sorted(toolkits.items()):
        platforms: dict[str, Any] = {}
        for platform in _PLATFORM_TAGS:
            wheels = []
            for distribution in (*CUDA_DISTRIBUTIONS, *TOOL_DISTRIBUTIONS):
                version = versions.get(distribution) or tools[distribution]
                info = _pick_wheel(_pypi_files(distribution, version, session), platform)
                wheels.append(
                    {
                        "distribution": distribution,
                        "version": version,
                        "filename": info["filename"],
                        "url": _canonical_url(info["url"]),
                        "sha256": info["digests"]["sha256"],
                        "size": info["size"],
                    }
                )
            windows = platform.startswith("windows")
            platforms[platform] = {
                "cuda_version": versions["nvidia-cuda-nvcc"],
                "cuda_home": "nvidia/cu13",
                "cmake": "cmake/data/bin/cmake.exe" if windows else "cmake/data/bin/cmake",
                "ninja": f"ninja-{tools['ninja']}.data/scripts/ninja" + (".exe" if windows else ""),
                "wheels": wheels,
            }
        document["toolkits"][toolkit] = {"platforms": platforms}
    write_json(path, document)
    return document


def describe_lock(path: Path = LOCK_FILE) -> list[str]:
    lock = load_lock(path)
    lines = []
    for toolkit, entry in sorted(lock["toolkits"].items()):
        for platform, spec in sorted(entry["platforms"].items()):
            total = sum(w["size"] for w in spec["wheels"])
            lines.append(f"CUDA {toolkit} ({spec['cuda_version']}) {platform}: {len(spec['wheels'])} wheels, {total / 1e6:.0f} MB")
    return lines


# -- front door -------------------------------------------------------------

PINNED_VERSIONS = {
    # What `toolchain lock` pins; changing a line here and re-running it is the reviewed way to move.
    "13.1": {"nvidia-cuda-nvcc": "13.1.115", "nvidia-cuda-crt": "13.1.115", "nvidia-nvvm": "13.1.115", "nvidia-cuda-runtime": "13.1.80", "nvidia-cuda-cccl": "13.1.115", "nvidia-nvtx": "13.1.115"},
    "13.3": {"nvidia-cuda-nvcc": "13.3.73", "nvidia-cuda-crt": "13.3.73", "nvidia-nvvm": "13.3.73", "nvidia-cuda-runtime": "13.3.29", "nvidia-cuda-cccl": "13.3.3.4.1", "nvidia-nvtx": "13.3.29"},
}
PINNED_TOOLS = {"cmake": "3.31.10", "ninja": "1.13.0"}
