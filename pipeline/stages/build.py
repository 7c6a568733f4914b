"""Stage `build`: compile one lane's runtime from an exact commit, byte-reproducibly.

Preflight refuses, before any work: a lane whose build host is not this host
(Windows lanes build with MSVC on Windows), a dirty or unpinned source, a
missing toolchain, and a missing or too old build-host dependency (the lane's
`[[build.host_dependencies]]`, or the source's own `host-dependencies.toml`;
pipeline/lanework/hostdeps.py), naming the command that installs it.  A source
can also be a published `git archive` tarball bound to its provenance
(`--source-archive`, `--provenance`).  Run: export the commit with `git archive` to the canonical
source path, configure CMake + Ninja for the lane's single CUDA architecture
with the deterministic nvcc launcher, build the lane's targets (showing
`[n/N]`), copy the binaries out, check that every binary prints the same
identity and that it names this source, lane and toolchain, and write
`build-identity.json` and the toolchain record `toolchain.json` (register
kind `toolchain`: the toolchain's libraries and where the CUDA runtime is,
which package and qualify query instead of looking into the toolchain).

Each build compiles in a private folder of its own that only the compile sees at the
canonical path, in a private mount namespace (pipeline/infra/buildns.py), so builds of
one lane run at once; where no namespace can be made, they take turns under the lane's
lock.  `--cache DIR` (PIPELINE_BUILD_CACHE) compiles through ccache keyed on the exact
toolchain (pipeline/infra/compile_cache.py): the bytes are a clean build's, and neither
`rebuild --verify` nor the release workflow uses one.

`--prebuilt DIR` takes binaries built elsewhere (the Windows job of the
release workflow) instead: their hashes and identity are checked and recorded
exactly like a local build's.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.codedigest import code_digest
from pipeline.errors import BuildFailure, EnvironmentProblem, InputError, IntegrityError, UsageError
from pipeline.formats import build_environment
from pipeline.formats import host_dependencies as host_declaration
from pipeline.formats.identity import (
    IDENTITY_TYPE,
    BuildIdentity,
    check_expected,
    embedded_identity,
    parse_version_line,
    require_identical,
)
from pipeline.formats.image_definition import lane_base_libraries
from pipeline.formats.lanes import REPO_ROOT, Lane, current_host_platform
from pipeline.formats.toolchain_lock import LOCK_FILE, toolchain_spec
from pipeline.formats.toolchain_record import FILE_NAME as TOOLCHAIN_RECORD
from pipeline.formats.toolchain_record import write_record
from pipeline.infra import buildns
from pipeline.infra import compile_cache as ccache
from pipeline.infra.cubin import cubin_architectures
from pipeline.infra.private_dir import ensure_private_dir
from pipeline.lanework import binaries, hostdeps
from pipeline.lanework.hostdeps import BUILD_PATH, host_probe_environment
from pipeline.lanework.source import (
    SourceSpec,
    archive_source,
    archive_tar,
    export_tree,
    resolve_source,
    source_file,
)
from pipeline.lanework.toolchain import (
    CANONICAL_ROOT,
    ON_WINDOWS,
    Toolchain,
    for_lane,
    toolchain_record,
)
from pipeline.register import Artifact
from pipeline.stage import Context, Stage
from pipeline.util import ui
from pipeline.util.fs import atomic_write_bytes, copy_file
from pipeline.util.hashing import sha256_bytes, sha256_file
from pipeline.util.jsonio import write_json
from pipeline.util.proc import run, run_text

LAUNCHER = REPO_ROOT / "runtime" / "launcher" / "nvcc_deterministic.py"
# Every ELF is linked with its final RUNPATH, $ORIGIN, and nothing else: CMake would otherwise link the build tree's
# binaries with the folders of their libraries (the toolchain's, a --pkg-config-path prefix's), and the GNU build-id
# the linker computes over those bytes would keep the prefix even after a RUNPATH rewrite. Given on the configure
# line so that a source setting none of these (the NInfer engine) gets them; one that sets them must set $ORIGIN only.
RPATH_CMAKE_ARGS = (
    "-DCMAKE_SKIP_BUILD_RPATH=OFF",
    "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON",
    "-DCMAKE_INSTALL_RPATH=$ORIGIN",
    "-DCMAKE_INSTALL_RPATH_USE_LINK_PATH=OFF",
)


# Where an imported redistributable's licence text is kept (beside bin/), and its bound (Microsoft's are ~10 KB).
LICENCE_DIR = "licenses"
MAX_LICENCE_BYTES = 256 << 10


def build_root(lane: Lane) -> Path:
    return CANONICAL_ROOT / "build" / lane.id


def canonical_source_dir(lane: Lane) -> Path:
    # Fixed on purpose: -lineinfo embeds absolute .cu paths in device code.
    return build_root(lane) / "src"


def private_build_root(lane: Lane) -> Path:
    """The canonical build root, made private (0700) when absent; refused when another user owns it or others can write to it."""
    root = build_root(lane)
    # /var/tmp is shared by every user (infra/private_dir.py).
    return ensure_private_dir(
        root,
        what="the canonical build root",
        fix="remove the folder named here (its owner or an administrator can; the next build makes it again, private "
        f"to you, at {root}). The path is fixed because -lineinfo embeds it in device code; each build mounts its own "
        "folder there (or, without a mount namespace, builds there in turn)",
    )


@contextmanager
def lane_lock(lane: Lane):
    """The lane's machine-wide lock: the fallback where no private mount namespace can be made (buildns)."""
    root = private_build_root(lane)
    with open(root.parent / f"{lane.id}.lock", "a+") as handle:
        handle.seek(0)
        if ON_WINDOWS:
            import msvcrt

            msvcrt.locking(handle.fileno(), msvcrt.LK_LOCK, 1)  # retries for 10 s, then raises
            yield
            return
        import fcntl

        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = handle.read(200).strip() or "pid unknown"  # what the holder wrote when it took the lock
            ui.info(f"waiting for another build of this lane: {holder}")
            fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()} since {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n")
        handle.flush()
        yield


@dataclass(frozen=True)
class CompilePlace:
    """Where one build compiles: the paths the compiler sees, the folders the pipeline reads and writes, the wrapper."""

    src: Path  # the canonical source path, as the compiler sees it
    build: Path  # the build folder, as the compiler sees it
    real_src: Path  # the same folders as this process sees them (the private folder in a namespace)
    real_build: Path
    private: Path | None  # the build's private folder, bind-mounted at the canonical build root (None: the lane lock)
    isolation: buildns.Isolation

    def command(self, argv: list[str]) -> list[str]:
        if self.private is None:
            return argv
        return self.isolation.wrap(self.private, self.src.parent, argv)


# Written inside a --work folder when the pipeline makes it: a build empties a folder only when it holds this
# file naming the folder itself (device and inode), so that a marker copied or committed into another folder
# (a clone's) claims nothing.  `--work .` once emptied the checkout.
WORK_MARKER = ".omp-ninfer-build-work"


def _marker_text(folder: Path) -> str:
    identity = folder.stat()
    return f"made by python -m pipeline build --work (folder {identity.st_dev}:{identity.st_ino}); a later build empties this folder\n"


def _made_by_a_build(folder: Path) -> bool:
    marker = folder / WORK_MARKER
    if marker.is_symlink() or not marker.is_file() or marker.stat().st_size > 4096:
        return False
    return marker.read_text(encoding="utf-8", errors="replace") == _marker_text(folder)


def check_work_dir(work_dir: Path) -> None:
    """Refuse a --work that is not a folder the build may empty: a new or empty folder, or one a build made."""
    if work_dir.is_symlink() or (work_dir.exists() and not work_dir.is_dir()):
        raise UsageError("--work is not a folder", field="--work", found=str(work_dir), expected="a new or empty folder", fix="name a new folder, e.g. --work /var/tmp/my-ninfer-build")
    if work_dir.is_dir() and any(work_dir.iterdir()) and not _made_by_a_build(work_dir):
        raise UsageError(
            "--work names a folder that holds files the pipeline did not make", field="--work", found=str(work_dir),
            expected=f"a new or empty folder, or one an earlier build made (its {WORK_MARKER} names it)",
            why="a build starts from an empty build folder, and it never deletes files it did not make",
            fix="name a new folder (e.g. --work /var/tmp/my-ninfer-build), or leave --work out",
        )


def claim_work_dir(work_dir: Path) -> None:
    """Make `work_dir` an empty build folder with its WORK_MARKER, emptying it only when a build made it."""
    check_work_dir(work_dir)
    if work_dir.is_dir() and any(work_dir.iterdir()):
        shutil.rmtree(work_dir)  # a build's own folder (checked above); links inside are removed, never followed
    work_dir.mkdir(parents=True, exist_ok=True)
    (work_dir / WORK_MARKER).write_text(_marker_text(work_dir), encoding="utf-8")


@contextmanager
def compile_place(lane: Lane, work_dir: Path | None):
    """The build's own folder at the canonical path (a private mount namespace), else the canonical folder under the lane lock."""
    root = private_build_root(lane)
    work_parent = ensure_private_dir(
        CANONICAL_ROOT / "work",
        what="the private build folders' parent",
        fix=f"remove the folder named here; the next build makes it again, private to you, at {CANONICAL_ROOT / 'work'}",
    )
    isolation = buildns.detect(work_parent)
    if not isolation.available:
        ui.info(f"builds of {lane.id} take turns at {root}: {isolation.reason}")
        with lane_lock(lane):
            build = work_dir or root / "build"
            place = CompilePlace(root / "src", build, root / "src", build, None, isolation)
            for path in (place.src, place.build):
                if path == work_dir:
                    claim_work_dir(work_dir)
                elif path.exists():
                    shutil.rmtree(path)
            yield place
        return
    build = work_dir or root / "build"
    if not build.is_relative_to(root):  # a --work outside the canonical root
        claim_work_dir(build)
    for left in buildns.prune_finished(work_parent, f"{lane.id}."):
        ui.info(f"removed {left}, the folder an earlier build of {lane.id} left when it failed")
    private = Path(tempfile.mkdtemp(prefix=f"{lane.id}.", dir=work_parent))
    real_build = private / build.relative_to(root) if build.is_relative_to(root) else build
    ui.info(f"private build folder {private}, mounted at {root} for the compile only (a mount namespace of its own)")
    with buildns.held(private):
        try:
            yield CompilePlace(root / "src", build, private / "src", real_build, private, isolation)
        except BaseException:
            ui.warn(f"the failed build's folder is kept for inspection: {private} (the next build of {lane.id} removes it)")
            raise
        shutil.rmtree(private)  # still locked: no other build's pruning removes it at the same time


def host_compiler() -> str:
    try:
        return run_text(["c++", "--version"], what="ask the host C++ compiler for its version", failure=EnvironmentProblem).splitlines()[0]
    except EnvironmentProblem:
        return "unavailable"


def shipped_toolchain_description(description: dict[str, Any]) -> dict[str, Any]:
    """The toolchain as build-identity.json (shipped in the payload) states it: the pinned toolchain's folder only
    where it is the canonical one, the same on every host; an OMP_NINFER_TOOLCHAIN_ROOT elsewhere is this machine's."""
    out = dict(description)
    if out.get("root") is not None and not Path(out["root"]).is_relative_to(CANONICAL_ROOT):
        out["root"] = None
    return out


def _code_digest() -> str:
    # the stage's code closure is in every fingerprint (stage.execute); the launcher lives outside the package
    return code_digest(__name__, LAUNCHER)


# The exit statuses of a program stopped by SIGINT, SIGTERM or SIGHUP, as a shell or a wrapper script reports them.
# (POSIX numbers: 128 + 2, 15, 1; spelled out because Windows' signal module has no SIGHUP.)
_SIGNAL_EXITS = {130: "SIGINT", 143: "SIGTERM", 129: "SIGHUP"}


def ninja_interruption(code: int, lines: list[str]) -> str | None:
    """How ninja was interrupted before it finished (a signal, or its own "interrupted by user"), or None when it
    finished or failed on its own (a compile error)."""
    if code < 0:
        try:
            return f"ninja was stopped by {signal.Signals(-code).name}"
        except ValueError:
            return f"ninja was stopped by signal {-code}"
    if code in _SIGNAL_EXITS:
        return f"ninja exited with status {code} ({_SIGNAL_EXITS[code]})"
    # (Not a last step k < N: ninja skips planned steps whose outputs a restat rule left unchanged and ends below N.)
    stopped = next((line.strip() for line in reversed(lines) if "interrupted by user" in line), None)
    return stopped[:200] if stopped is not None else None


class BuildStage(Stage):
    name = "build"

    def __init__(
        self,
        ctx: Context,
        lane: Lane,
        *,
        source: SourceSpec,
        toolchain_mode: str = "pinned",
        prebuilt: Path | None = None,
        work_dir: Path | None = None,
        rehearsal: bool = False,
        pkg_config_path: tuple[str, ...] = (),
        cut=None,
        cache_dir: Path | None = None,
    ) -> None:
        super().__init__(ctx)
        self.lane = lane
        self.source_spec = source
        self.toolchain_mode = toolchain_mode
        self.prebuilt = prebuilt
        if work_dir is not None:
            check_work_dir(work_dir)  # before any work; compile_place claims it (claim_work_dir)
        self.work_dir = work_dir
        self.rehearsal = rehearsal
        # rebuild --verify: the CutBinding the published set was built as (not the lane's current cut).
        self.given_cut = cut
        self.cut = None  # the CutBinding, known after preflight
        self.beta = cut.n if cut is not None else lane.beta
        self.source = None
        self.toolchain: Toolchain | None = None
        self.pkg_config_path = tuple(pkg_config_path)
        self.host_check: hostdeps.HostCheck | None = None
        # --cache: the compile cache's folder; the bytes are those of a build without it (infra/compile_cache).
        self.cache_dir = cache_dir
        self.cache: ccache.CompileCache | None = None

    @property
    def key(self) -> str:
        return f"build:{self.lane.id}"

    def describe(self) -> str:
        cut = self.cut or self.given_cut
        return f"{self.lane.id} ({cut.tag if cut else 'current cut'})"

    @property
    def out_dir(self) -> Path:
        return self.ctx.dist / self.lane.id / "build"

    # -- preflight -----------------------------------------------------
    def preflight(self) -> None:
        lane = self.lane
        host = current_host_platform()
        if self.prebuilt is None and lane.build_host != host:
            raise EnvironmentProblem(
                f"lane {lane.id} is built on a {lane.build_host} host (MSVC, CUDA {lane.cuda_toolkit}); this host is {host}",
                file=lane.file,
                field="platform.build_host",
                found=host,
                expected=lane.build_host,
                why="a Windows-native runtime cannot be compiled on Linux",
                fix=(
                    f"either run 'nox -s build-{lane.short_name}' on the Windows job of the release workflow "
                    f"(.github/workflows/release.yml, job build-windows), or package binaries built there with "
                    f"'python -m pipeline build --lane {lane.id} --prebuilt DIR'"
                ),
            )
        if self.prebuilt is not None:
            if not self.prebuilt.is_dir():
                raise InputError("--prebuilt folder does not exist", field="--prebuilt", found=str(self.prebuilt))
            for binary in lane.binaries:
                if not (self.prebuilt / lane.binary_file(binary)).is_file():
                    raise InputError(
                        f"prebuilt folder lacks the required binary {lane.binary_file(binary)}",
                        file=self.prebuilt,
                        expected=", ".join(lane.binary_file(b) for b in lane.binaries),
                    )
        if shutil.which("git") is None:
            raise EnvironmentProblem("git is not on PATH", why="the source is exported from an exact commit", fix="apt-get install git")
        if self.prebuilt is None and not ON_WINDOWS:
            self._require_host_compilers()
        if self.cache_dir is not None:
            self._check_cache_request()
        self.source = resolve_source(self.source_spec, lane)
        from pipeline.formats.cut_binding import binding_for_build

        if self.given_cut is not None:
            if not self.given_cut.rehearsal and self.given_cut.commit != self.source.commit:
                raise IntegrityError(
                    f"the source is not the commit {self.given_cut.tag} was cut from",
                    field="cut.commit",
                    found=self.source.commit,
                    expected=self.given_cut.commit,
                    why="a build as a cut must be of the cut's commit",
                )
            self.cut = self.given_cut
        else:
            kind = "embedded-sample" if self.rehearsal else self.source_spec.kind
            self.cut = binding_for_build(lane, commit=self.source.commit, source_kind=kind, stage="build")
        self.beta = self.cut.n
        if self.prebuilt is None and self.toolchain_mode == "pinned":
            toolchain_spec(lane.cuda_toolkit, host)  # the lock must pin this toolkit before any download
        ui.info(f"source: {self.source_spec.display} at {self.source.commit}")
        for problem in self.source.problems:
            ui.warn(f"source archive: {problem}; building it anyway, as rebuild --verify asked")
        if self.prebuilt is None:
            self.host_check = self._check_host_dependencies(host)
            self._check_library_names(self.host_check)
            self.host_check.build_environment = build_environment.observed()

    def host_declaration(self) -> tuple[tuple, str, str]:
        """(dependencies, declared_by, file for errors): the source's own declaration, else the lane's."""
        assert self.source is not None
        data = source_file(self.source, host_declaration.FILE_NAME)
        if data is not None:
            origin = f"{self.source_spec.display}: {host_declaration.FILE_NAME}"
            return host_declaration.parse(data, origin=origin, build_host=self.lane.build_host), f"source:{host_declaration.FILE_NAME}", origin
        return self.lane.host_dependencies, f"lane:{self.lane.file.name}", str(self.lane.file)

    def _check_host_dependencies(self, host: str) -> hostdeps.HostCheck:
        dependencies, declared_by, origin = self.host_declaration()
        path, base_env = host_probe_environment(ON_WINDOWS)
        check = hostdeps.check(
            dependencies,
            host=host,
            declared_by=declared_by,
            declaration_file=origin,
            path=path,
            pkg_config_path=self.pkg_config_path,
            base_env=base_env,
        )
        for item in check.found:
            package = f", {item.debian_package} {item.debian_version}" if item.debian_package else ""
            ui.info(f"host dependency {item.dependency.name}: {item.version} ({item.path}{package})")
        if not check.found:
            ui.info(f"host dependencies: none declared for {host} ({declared_by})")
        return check

    def _check_cache_request(self) -> None:
        ccache.refuse_where_forbidden()
        if self.prebuilt is not None or ON_WINDOWS:
            raise UsageError(
                "--cache applies to a local Linux compile only",
                field="--cache",
                found="--prebuilt" if self.prebuilt is not None else "a Windows host (MSVC)",
                fix="drop --cache (and unset PIPELINE_BUILD_CACHE)",
            )
        ccache.ccache_version(ccache.find_ccache(BUILD_PATH))

    def _check_library_names(self, check: hostdeps.HostCheck) -> None:
        """The sonames the host's libraries give must be the ones the lane names (else package refuses after the build)."""
        lane = self.lane
        conflicts = hostdeps.soname_conflicts(check, [*lane_base_libraries(lane), *lane.system_libraries, *(r.name for r in lane.redistributables)])
        if not conflicts:
            return
        found = "; ".join(f"{item.dependency.name} {item.version} gives {soname}, the lane names {named}" for item, soname, named in conflicts)
        raise EnvironmentProblem(
            f"the host's libraries are not the ones lane {lane.id} names ({len(conflicts)} differ)",
            file=lane.file,
            field="package.base_image" if lane.base_image else "package.base_image_libraries",
            found=found,
            expected=", ".join(named for _, _, named in conflicts) + (f" (shipped by the package base {lane.base_image})" if lane.base_image else ""),
            why="the binaries would link the host's sonames, and package would refuse them as missing libraries only after the whole compile",
            fix="install the library release whose soname the lane names (or give its prefix with --pkg-config-path), "
            + (f"or re-lock {lane.base_image} on the distribution release the build environment uses" if lane.base_image else
               "or change the lane's package.base_image_libraries to " + ", ".join(soname for _, soname, _ in conflicts) + " together with a base image that provides them"),
        )

    def _require_host_compilers(self) -> None:
        # The one prerequisite besides python and git: CMake's C/C++ compilers (nvcc's host compiler),
        # looked up on the fixed PATH the build runs with (_build_env), not the caller's.
        search = os.pathsep.join(BUILD_PATH)
        missing = [name for name in ("cc", "c++") if shutil.which(name, path=search) is None]
        if missing:
            raise EnvironmentProblem(
                f"no C/C++ compiler: {' and '.join(repr(m) for m in missing)} not found in {search}",
                why="CMake compiles the runtime's C and C++ code, and nvcc uses the host C++ compiler",
                fix="install the host compiler (Debian/Ubuntu: apt-get install g++), or build elsewhere and pass --prebuilt DIR",
            )

    def inputs(self) -> dict[str, Any]:
        assert self.source is not None
        data: dict[str, Any] = {
            "lane": self.lane.id,
            "lane_file_sha256": self.lane.file_sha256,
            "cut": self.cut.to_json() if self.cut else None,
            "source": self.source.to_json(),
            "code": _code_digest(),
        }
        if self.prebuilt is not None:
            files = sorted(p for p in self.prebuilt.iterdir() if p.is_file())
            data["prebuilt"] = {p.name: sha256_file(p) for p in files}
        else:
            data["toolchain_mode"] = self.toolchain_mode
            data["host_compiler"] = host_compiler()
            if self.host_check is not None:
                data["host_dependencies"] = self.host_check.dependencies_json()
                data["host_environment"] = self.host_check.environment_json()
            data["work_dir"] = str(self.work_dir) if self.work_dir else None
            # A build without the cache never counts a cached build as its own (only whether, not where: same bytes).
            data["compile_cache"] = self.cache_dir is not None
            if self.toolchain_mode == "pinned":
                data["toolchain"] = toolchain_spec(self.lane.cuda_toolkit, current_host_platform()).digest
            else:
                data["toolchain"] = shutil.which("nvcc")
        return data

    # -- run -------------------------------------------------------------
    def expected_identity(self, cuda_toolkit: str | None) -> dict[str, str]:
        assert self.source is not None
        upstream = self.source.commit if self.source.kind == "embedded-sample" else (self.lane.upstream_base or self.source.commit)
        expected = {  # the source commit first: it is the most telling mismatch
            "patch_stack_sha": self.source.commit,
            "upstream_base_sha": upstream,
            "build_profile": self.lane.build_profile(self.beta),
            "build_type": "Release",
            "cuda_architecture": self.lane.cuda_architecture,
            "source_dirty": "false",
        }
        if cuda_toolkit:
            expected["cuda_toolkit"] = cuda_toolkit
        return expected

    def run(self) -> list[Artifact]:
        assert self.source is not None
        lane = self.lane
        bin_dir = self.out_dir / "bin"
        if self.out_dir.exists():
            shutil.rmtree(self.out_dir)
        bin_dir.mkdir(parents=True)
        source_tar = archive_tar(self.source)
        atomic_write_bytes(self.out_dir / "source.tar", source_tar)
        libraries: list[Path] = []
        licences: list[Path] = []
        if self.prebuilt is not None:
            identity, toolchain_description = self._import_prebuilt(bin_dir, libraries, licences)
        else:
            identity, toolchain_description = self._compile(source_tar, bin_dir)
        binaries = {lane.binary_file(b): sha256_file(bin_dir / lane.binary_file(b)) for b in self._present_binaries(bin_dir)}
        document = {
            "artifact_type": IDENTITY_TYPE,
            "schema_version": 2,
            "lane": lane.id,
            "platform": lane.asset_platform,
            "component_tag": lane.tag(self.beta),
            "release_version": f"{lane.version}-beta.{self.beta}",
            "deployment_profile": lane.deployment_profile(self.beta),
            # Which cut the build is, or which cut's names a rehearsal carries: rebuild --verify builds as the same.
            "cut": self.cut.to_json(),
            **identity.values,
            "binaries": binaries,
            "runtime_dependencies": {p.name: sha256_file(p) for p in sorted(libraries)},
            # The redistributables' own licence texts handed with them (--prebuilt), by name and SHA-256.
            "redistributable_licences": {p.name: sha256_file(p) for p in sorted(licences)},
            "toolchain": toolchain_description,
            "source": self.source.to_json(),
            "source_tar_sha256": sha256_bytes(source_tar),
            "source_date_epoch": self.source.commit_time,
            "build_route": "prebuilt" if self.prebuilt is not None else "local-build",
            # The pipeline's own inputs, by hash: what provenance names and `rebuild --verify` checks.
            "lane_file_sha256": lane.file_sha256,
            "toolchain_lock_sha256": sha256_file(LOCK_FILE) if self.prebuilt is None and self.toolchain_mode == "pinned" else None,
            # What the build host provided (null for --prebuilt: built elsewhere, not observed here).
            "host_dependencies": self.host_check.dependencies_json() if self.host_check is not None else None,
            "host_environment": self.host_check.environment_json() if self.host_check is not None else None,
        }
        identity_path = self.out_dir / "build-identity.json"
        write_json(identity_path, document)
        # What the toolchain gives the later stages (its libraries, where the CUDA runtime is): one record,
        # so package and qualify never look into the toolchain folder themselves.
        toolchain = toolchain_record(self.toolchain if self.prebuilt is None else None, cuda_version=identity.values.get("cuda_toolkit"))
        toolchain_path = write_record(self.out_dir / TOOLCHAIN_RECORD, toolchain)
        register = self.ctx.register
        artifacts = [
            register.make("binary", bin_dir / name, stage=self.name, lane=lane.id, name=f"{lane.id}/bin/{name}", binary=name.removesuffix(".exe"))
            for name in sorted(binaries)
        ]
        artifacts += [
            register.make("runtime-library", lib, stage=self.name, lane=lane.id, name=f"{lane.id}/bin/{lib.name}", library=lib.name, origin="prebuilt-folder")
            for lib in sorted(libraries)
        ]
        artifacts += [
            register.make("licence-text", path, stage=self.name, lane=lane.id, name=f"{lane.id}/{LICENCE_DIR}/{path.name}",
                          licence_file=path.name, redistributables=list(lane.prebuilt_licences[path.name]))
            for path in sorted(licences)
        ]
        assert self.cut is not None
        # Whether a compile cache served the objects: recorded here (the register stays on this machine), never in
        # the identity, which is byte-identical either way; rebuild --verify and the release workflow use none.
        cache_record = {"compile_cache": self.cache.to_json()} if self.cache is not None else {}
        artifacts.append(register.make("build-identity", identity_path, stage=self.name, lane=lane.id, name=f"{lane.id}/build-identity.json", cut=self.cut.to_json(), **cache_record))
        artifacts.append(register.make("source-tar", self.out_dir / "source.tar", stage=self.name, lane=lane.id, name=f"{lane.id}/source.tar", commit=self.source.commit))
        artifacts.append(register.make("toolchain", toolchain_path, stage=self.name, lane=lane.id, name=f"{lane.id}/{TOOLCHAIN_RECORD}",
                                       toolchain_kind=toolchain.kind, toolchain_root=toolchain.root, library_dir=toolchain.library_dir))
        ui.info(f"build identity: {identity.text()}")
        ui.info(f"cut: {self.cut.tag}" + (" (a rehearsal: the cut's names, not its commit; publish refuses it)" if self.cut.rehearsal else f" at {self.cut.commit}"))
        for name, digest in sorted(binaries.items()):
            ui.info(f"{name}: sha256 {digest}")
        return artifacts

    def _present_binaries(self, bin_dir: Path) -> list[str]:
        names = list(self.lane.binaries)
        names += [b for b in self.lane.optional_binaries if (bin_dir / self.lane.binary_file(b)).exists()]
        return names

    # -- local compile -----------------------------------------------------
    def _compile(self, source_tar: bytes, bin_dir: Path) -> tuple[BuildIdentity, dict[str, Any]]:
        lane = self.lane
        toolchain = for_lane(lane, self.toolchain_mode)
        self.toolchain = toolchain
        env = self._build_env(toolchain)
        cache = self._prepare_cache(toolchain, env)
        with compile_place(lane, self.work_dir) as place:
            export_tree(source_tar, place.real_src)
            configure = [
                str(toolchain.cmake), "-S", str(place.src), "-B", str(place.build), "-G", "Ninja",
                f"-DCMAKE_MAKE_PROGRAM={toolchain.ninja}",
                "-DCMAKE_BUILD_TYPE=Release",
                f"-DCMAKE_CUDA_ARCHITECTURES={lane.cuda_architecture}",
                f"-DCMAKE_CUDA_COMPILER={toolchain.nvcc}",
                f"-DCUDAToolkit_ROOT={toolchain.cuda_home}",
                *(cache.cmake_args([sys.executable, str(LAUNCHER)]) if cache else [f"-DCMAKE_CUDA_COMPILER_LAUNCHER={sys.executable};{LAUNCHER}"]),
                *(self.host_check.cmake_args() if self.host_check is not None else []),
                *(() if ON_WINDOWS else RPATH_CMAKE_ARGS),
                *self._identity_cache_args(),
                *lane.cmake_args,
            ]
            ui.step(self.name, f"configure {lane.id}: CUDA {toolchain.cuda_version}, architecture {lane.cuda_architecture}")
            run(place.command(configure), env=env, what=f"configure {lane.id} with CMake", fix="read the CMake output above; the lane's cmake_args or the source may be wrong")
            before = cache.statistics(env) if cache else {}
            self._ninja(toolchain, place, env)
            if cache:
                hits, misses = ccache.hits_and_misses(before, cache.statistics(env))
                ui.info(f"compile cache: {hits} hits, {misses} misses (counted over the whole cache: builds sharing it at once add theirs)")
            for binary in self._wanted_binaries():
                produced = self._find_binary(place.real_build, lane.binary_file(binary))
                if produced is None:
                    if binary in lane.binaries:
                        raise BuildFailure(f"the build did not produce {binary}", file=place.real_build,
                                           why="ninja finished without an error and without it, so no step builds it (an interrupted compile is reported as such)",
                                           fix=f"check that the CMake target {binary!r} exists in the source and is built by the lane's targets")
                    continue
                copy_file(produced, bin_dir / lane.binary_file(binary), mode=0o755)
                self._refuse_host_paths(bin_dir / lane.binary_file(binary), place)
        identity = self._identity_of_local(bin_dir, toolchain)
        description = shipped_toolchain_description(toolchain.description)
        description["host_cxx_compiler"] = host_compiler()
        description["launcher_sha256"] = sha256_file(LAUNCHER)
        return identity, description

    def _refuse_host_paths(self, binary: Path, place: CompilePlace) -> None:
        """A built binary is linked with RUNPATH=$ORIGIN and holds no path of this host in any section (lanework/binaries)."""
        binaries.require_linked_origin_runpath(binary)
        binaries.refuse_host_paths(binary, self.host_paths(place))

    def host_paths(self, place: CompilePlace) -> list[str]:
        """Where this host keeps what the build used and another host need not: each --pkg-config-path folder, the
        prefix above it, the library folders found through it, and the build's private folder."""
        paths: list[str] = []
        for folder in self.pkg_config_path:
            paths.append(folder)
            # <prefix>/lib/pkgconfig, <prefix>/lib/x86_64-linux-gnu/pkgconfig, <prefix>/share/pkgconfig: the prefix too
            above = next((a for a in Path(folder).parents if a.name in ("lib", "lib64", "share")), None)
            if Path(folder).name == "pkgconfig" and above is not None:
                paths.append(str(above.parent))
        if self.host_check is not None:
            paths += self.host_check.library_dirs()
        if place.private is not None:
            paths.append(str(place.private))
        if self.work_dir is not None:
            paths.append(str(self.work_dir))
        # Never "/" or a top folder, nor a system folder (the same on every host: /usr/lib/x86_64-linux-gnu/pkgconfig).
        return [p for p in paths if len(Path(p).parts) > 2 and not (p.rstrip("/") + "/").startswith(hostdeps.PUBLIC_ROOTS)]

    def _prepare_cache(self, toolchain: Toolchain, env: dict[str, str]) -> ccache.CompileCache | None:
        """The compile cache (--cache), keyed on this toolchain; None without one."""
        if self.cache_dir is None:
            return None
        cache = ccache.prepare(self.cache_dir, toolchain_description=toolchain.description, cuda_home=toolchain.cuda_home, path=BUILD_PATH, env=env, launcher=LAUNCHER)
        env.update(cache.env())
        ui.info(f"compile cache: {cache.directory} (ccache {cache.version}, entries keyed on toolchain {cache.key[:16]})")
        self.cache = cache
        return cache

    def _wanted_binaries(self) -> list[str]:
        return [b for b in (*self.lane.binaries, *self.lane.optional_binaries) if b in self.lane.targets]

    def _identity_cache_args(self) -> list[str]:
        expected = self.expected_identity(None)
        return [
            f"-DNINFER_UPSTREAM_BASE_SHA={expected['upstream_base_sha']}",
            f"-DNINFER_PATCH_STACK_SHA={expected['patch_stack_sha']}",
            f"-DNINFER_BUILD_PROFILE={expected['build_profile']}",
            "-DNINFER_SOURCE_DIRTY=OFF",
        ]

    def _build_env(self, toolchain: Toolchain) -> dict[str, str]:
        assert self.source is not None
        tools = [str(toolchain.nvcc.parent), str(toolchain.cmake.parent), str(toolchain.ninja.parent)]
        fixed = {"TZ": "UTC", "SOURCE_DATE_EPOCH": str(self.source.commit_time)}
        # pkg-config's search path is passed explicitly (--pkg-config-path), never inherited.
        search = self.host_check.build_env() if self.host_check is not None else {}
        if ON_WINDOWS:
            # MSVC needs the Visual Studio developer environment (INCLUDE, LIB, PATH) it was started in.
            inherited = {k: v for k, v in os.environ.items() if not k.upper().startswith("PKG_CONFIG")}
            return dict(inherited, PATH=os.pathsep.join([*tools, os.environ.get("PATH", "")]), **fixed, **search)
        return {
            "PATH": os.pathsep.join([*tools, *BUILD_PATH]),
            "HOME": os.environ.get("HOME", "/tmp"),
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            **fixed,
            **search,
        }

    def _ninja(self, toolchain: Toolchain, place: CompilePlace, env: dict[str, str]) -> None:
        targets = list(self.lane.targets)
        ui.step(self.name, f"compile {self.lane.id}: targets {', '.join(targets)}")
        command = place.command([str(toolchain.ninja), "-C", str(place.build), *targets])
        last = deque(maxlen=40)
        with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace") as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                line = line.rstrip()
                last.append(line)
                if line.startswith("[") and "]" in line:
                    counter, _, rest = line.partition("]")
                    ui.info(f"compile {counter}] {rest.strip()[:110]}")
            code = proc.wait()
        interrupted = ninja_interruption(code, list(last))
        if interrupted is not None:
            raise BuildFailure(
                f"compiling {self.lane.id} was interrupted: {interrupted}",
                why="ninja stopped before it finished the targets, not because a compile failed (Ctrl-C, a CI job's cancel, "
                "a signal to the build); nothing is known to be wrong with the source",
                fix="run the same build again; the interrupted build's folder is kept at " + str(place.real_build) + " until then",
            )
        if code != 0:
            output = "\n".join(last)
            raise BuildFailure(
                f"compiling {self.lane.id} failed: ninja exited with status {code}",
                why=f"its last output was:\n{output}\n",
                fix="fix the compile error in the source at this commit; the build directory is kept at " + str(place.real_build),
            )

    @staticmethod
    def _find_binary(build: Path, name: str) -> Path | None:
        matches = [p for p in build.rglob(name) if p.is_file() and "CMakeFiles" not in p.parts and os.access(p, os.X_OK)]
        if len(matches) > 1:
            raise BuildFailure(f"the build produced {len(matches)} files named {name}", found=[str(m) for m in matches])
        return matches[0] if matches else None

    def _identity_of_local(self, bin_dir: Path, toolchain: Toolchain) -> BuildIdentity:
        extra = self.host_check.library_dirs() if self.host_check is not None else []
        if ON_WINDOWS:
            env = dict(os.environ, PATH=os.pathsep.join([str(toolchain.library_dir), *extra, os.environ.get("PATH", "")]))
        else:
            env = dict(os.environ, LD_LIBRARY_PATH=os.pathsep.join([str(toolchain.library_dir), *extra]))
        identities: dict[str, BuildIdentity] = {}
        for binary in self._present_binaries(bin_dir):
            path = bin_dir / self.lane.binary_file(binary)
            result = run([path, "--version"], env=env, what=f"ask {binary} for its build identity", failure=BuildFailure, timeout=60)
            identity = parse_version_line(result.stdout.decode("utf-8", "replace"), binary=binary, origin=str(path))
            embedded = embedded_identity(path)
            if embedded is not None and embedded.values != identity.values:
                raise BuildFailure("the embedded identity differs from --version", file=path)
            identities[binary] = identity
            self._check_architectures(path)
        identity = require_identical(identities)
        check_expected(identity, self.expected_identity(toolchain.cuda_version), origin=str(bin_dir))
        return identity

    def _check_architectures(self, path: Path) -> None:
        """The linked GPU code must be exactly the lane's architecture (what cuobjdump --list-elf shows)."""
        data = path.read_bytes()
        if not data.startswith(b"\x7fELF"):
            return
        cubins = cubin_architectures(data)
        expected = {f"sm_{self.lane.cuda_architecture}"}
        if cubins and cubins != expected:
            raise BuildFailure(
                "the binary carries GPU code for other architectures than the lane's",
                file=path,
                found=sorted(cubins),
                expected=sorted(expected),
                why="CMAKE_CUDA_ARCHITECTURES was overridden inside the source, or objects from another build leaked in",
            )

    # -- prebuilt -------------------------------------------------------------
    def _import_licence(self, path: Path) -> Path:
        """A redistributable's own licence text from the prebuilt folder (DirectStorage's LICENSE.txt), bounded
        and checked to be text before it is copied; package ships it verbatim in licenses/ and the SBOMs."""
        with open(path, "rb") as handle:
            data = handle.read(MAX_LICENCE_BYTES + 1)
        if len(data) > MAX_LICENCE_BYTES or not data.strip() or b"\0" in data:
            raise InputError(
                "is not a licence text",
                file=path,
                found=f"{len(data)} bytes" + (" (more than the bound)" if len(data) > MAX_LICENCE_BYTES else ", empty or with NUL bytes"),
                expected=f"a non-empty text of at most {MAX_LICENCE_BYTES} bytes: the licence file the redistributable's package ships",
                fix="copy the package's licence file unchanged (DirectStorage's NuGet package: LICENSE.txt) beside the DLLs",
            )
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError("is not UTF-8 text", file=path, found=f"byte {exc.start}", fix="copy the package's licence file unchanged beside the DLLs") from None
        target = self.out_dir / LICENCE_DIR / path.name
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(target, data)
        return target

    def _import_prebuilt(self, bin_dir: Path, libraries: list[Path], licences: list[Path]) -> tuple[BuildIdentity, dict[str, Any]]:
        lane = self.lane
        assert self.prebuilt is not None
        identities: dict[str, BuildIdentity] = {}
        runnable = lane.target_platform == current_host_platform()
        wanted = {lane.binary_file(b): b for b in (*lane.binaries, *lane.optional_binaries)}
        for path in sorted(self.prebuilt.iterdir()):
            if not path.is_file():
                continue
            if path.name in wanted:
                binary = wanted[path.name]
                target = bin_dir / path.name
                copy_file(path, target, mode=0o755)
                if runnable:
                    result = run([target, "--version"], what=f"ask prebuilt {binary} for its build identity", failure=BuildFailure, timeout=60)
                    identity = parse_version_line(result.stdout.decode("utf-8", "replace"), binary=binary, origin=str(path))
                    embedded = embedded_identity(target)
                    if embedded is not None and embedded.values != identity.values:
                        raise BuildFailure("the embedded identity differs from --version", file=path)
                    self._check_architectures(target)
                else:
                    identity = embedded_identity(target)
                    if identity is None:
                        raise InputError(
                            f"cannot establish the build identity of {path.name} on this host",
                            file=path,
                            why=f"it is a {lane.target_platform} binary that cannot run here, and it carries no embedded NINFER-BUILD-IDENTITY marker",
                            fix="package it on a host of its platform (the Windows job of the release workflow)",
                        )
                identities[binary] = identity
            elif path.suffix.lower() in (".dll", ".so") or ".so." in path.name:
                target = bin_dir / path.name
                copy_file(path, target, mode=0o755)
                libraries.append(target)
            elif path.name in lane.prebuilt_licences:
                licences.append(self._import_licence(path))
            else:
                raise InputError(
                    "prebuilt folder holds a file that is neither a lane binary, a runtime library nor a declared licence text",
                    file=path,
                    expected="only " + ", ".join(sorted(wanted)) + ", .dll/.so libraries" + "".join(f" and {name}" for name in lane.prebuilt_licences),
                    fix="remove it; the prebuilt folder is taken whole, so stray files would be bundled by mistake",
                )
        for name, users in lane.prebuilt_licences.items():
            if not (self.prebuilt / name).is_file():
                ui.warn(f"the prebuilt folder has no {name} (the licence text of {', '.join(users)}): only a rehearsal can be packaged from this build")
        identity = require_identical(identities)
        toolkit = identity.values["cuda_toolkit"]
        if not toolkit.startswith(lane.cuda_toolkit + "."):
            raise InputError(
                "prebuilt binaries were built with another CUDA toolkit than the lane pins",
                file=self.prebuilt,
                field="cuda_toolkit",
                found=toolkit,
                expected=f"{lane.cuda_toolkit}.x (runtime/lanes/{lane.id}.toml: cuda.toolkit)",
            )
        check_expected(identity, self.expected_identity(None), origin=str(self.prebuilt))
        return identity, {"kind": "prebuilt", "cuda_version": toolkit, "note": "built outside this pipeline run; identity read from the binaries"}


# -- front door (CLI and nox) -------------------------------------------------

def build_lane(
    lane_name: str,
    *,
    dist: Path | str = "dist",
    source: str | None = None,
    toolchain: str = "pinned",
    prebuilt: Path | str | None = None,
    work: Path | str | None = None,
    rehearsal: bool = False,
    lanes_dir: Path | None = None,
    force: bool = False,
    pkg_config_path: list[str] | None = None,
    source_archive: Path | str | None = None,
    provenance: Path | str | None = None,
    cache: Path | str | None = None,
    no_cache: bool = False,
):
    """Build one lane; `cache` (else PIPELINE_BUILD_CACHE, unless `no_cache`) is the compile cache's folder."""
    from pipeline.formats.lanes import find_lane
    from pipeline.lanework.source import parse_source
    from pipeline.stage import execute

    lane = find_lane(lane_name, lanes_dir)
    ctx = Context.open(dist, lanes_dir)
    if source_archive is not None:
        if source or provenance is None:
            raise UsageError("--source-archive takes --provenance (what the archive must be) and no --source", field="--source-archive", fix="pass --source-archive FILE --provenance STATEMENT")
        spec = archive_source(Path(source_archive), Path(provenance))
    else:
        spec = parse_source(source)
    stage = BuildStage(
        ctx,
        lane,
        source=spec,
        toolchain_mode=toolchain,
        prebuilt=Path(prebuilt) if prebuilt else None,
        work_dir=Path(work).resolve() if work else None,
        rehearsal=rehearsal,
        pkg_config_path=hostdeps.parse_search_path(pkg_config_path),
        # PIPELINE_BUILD_CACHE does not apply to --prebuilt (nothing compiles); an explicit --cache is refused there.
        cache_dir=ccache.requested(cache, disabled=no_cache or (prebuilt is not None and cache is None)),
    )
    return execute(stage, force=force)


def run_build(args: argparse.Namespace) -> int:
    """`build`: the command line's front door to `build_lane`."""
    build_lane(
        args.lane,
        dist=args.dist,
        source=args.source,
        toolchain=args.toolchain,
        prebuilt=args.prebuilt,
        work=args.work,
        rehearsal=args.rehearsal,
        lanes_dir=args.lanes_dir,
        force=args.force,
        pkg_config_path=args.pkg_config_path,
        source_archive=args.source_archive,
        provenance=args.provenance,
        cache=args.cache,
        no_cache=args.no_cache,
    )
    return 0


def register_cli(sub) -> None:
    from pipeline.cli import add_common

    parser = sub.add_parser("build", help="compile one lane's runtime from an exact commit (or import --prebuilt binaries)")
    parser.add_argument("--lane", required=True, help="lane id or short name (see 'lanes')")
    parser.add_argument("--source", help="PATH[@COMMIT] of a git checkout or URL@COMMIT (default: the embedded sample runtime)")
    parser.add_argument("--source-archive", type=Path, help="a published source archive (git archive tar[.gz], no history) instead of a checkout; needs --provenance")
    parser.add_argument("--provenance", type=Path, help="the SLSA provenance naming the archive's SHA-256, commit and tree (with --source-archive)")
    parser.add_argument("--prebuilt", type=Path, help="folder of binaries built elsewhere (e.g. the Windows job) to check and record")
    parser.add_argument("--toolchain", choices=("pinned", "system"), default="pinned", help="pinned wheel toolchain (default) or the system nvcc")
    parser.add_argument("--work", type=Path, help=f"build directory (default: /var/tmp/omp-ninfer/build/<lane>/build): a new or empty folder, or one an earlier build made ({WORK_MARKER} inside); a build empties no other")
    parser.add_argument("--rehearsal", action="store_true", help="build a commit that is not the lane's current cut under the cut's names (a test build: publish refuses it); the embedded sample always is one unless a cut binds its commit")
    parser.add_argument("--force", action="store_true", help="rebuild even when inputs are unchanged")
    parser.add_argument(
        "--cache",
        type=Path,
        metavar="DIR",
        help="compile through ccache with this private cache folder (default: $PIPELINE_BUILD_CACHE); the bytes are a clean build's; "
        "never in rebuild --verify or the release workflow",
    )
    parser.add_argument("--no-cache", action="store_true", help="compile every object even when PIPELINE_BUILD_CACHE is set")
    parser.add_argument(
        "--pkg-config-path",
        action="append",
        metavar="DIR[:DIR]",
        help="folders pkg-config searches before its built-in ones (passed to CMake as PKG_CONFIG_PATH and recorded; the build never inherits PKG_CONFIG_PATH)",
    )
    add_common(parser)
    parser.set_defaults(func=run_build)


STAGE = BuildStage


def release_plan(ctx: Context, lanes: list[Lane], options) -> list:
    """`release`: build each lane that can be built on this host (the others say how instead)."""
    from pipeline.stage import Skip

    host = current_host_platform()
    steps: list = []
    for lane in lanes:
        if lane.build_host != host:
            steps.append((lane.id, Skip(f"built on {lane.build_host} (the release workflow's Windows job, or 'build --prebuilt DIR')")))
            continue
        steps.append((lane.id, lambda lane=lane: build_lane(lane.id, dist=ctx.dist, source=options.source, toolchain=options.toolchain, lanes_dir=options.lanes_dir)))
    return steps
