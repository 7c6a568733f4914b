"""The build's content-addressed compile cache: Debian's ccache as CMake's compiler launcher.

`build --cache DIR` (or PIPELINE_BUILD_CACHE) routes every C, C++ and CUDA
compile step through ccache; the lane's compile flags stay exactly as they
are.  The CUDA launcher chain is `<python> nvcc_deterministic.py ccache nvcc
…`: the deterministic launcher adds `-frandom-seed=<object>` and `-objtemp`
first, so those flags are part of what ccache hashes, and a hit returns the
object the same command would have produced.

What keeps the cache exact (and what keeps hits):
- the pipeline writes the cache's configuration file itself on every build
  and points CCACHE_CONFIGPATH at it, so neither a system ccache.conf nor an
  edited one in the cache folder is read (compiler_check=content, no hard
  links or clones, strict sloppiness, no remote storage, umask 077);
- the entries are keyed on the exact toolchain through ccache's `namespace`:
  the pinned toolchain's lock entry (every wheel's SHA-256; the files are
  checked against the pins on every build) or, for a system toolkit, the
  bytes of its compiler programs, plus the host compiler's programs (cc1,
  cc1plus, as: nvcc runs them, and ccache's own compiler check sees only the
  driver) and the deterministic launcher;
- the cache folder is private (owned by you, not writable by group or others),
  as the toolchain root is: whoever can write to it chooses what is linked.

A cache can be poisoned by anyone who can write to it, and no check after the
fact sees it in the bytes; so `rebuild --verify` and the release workflow
never use one (`refusal`), and a build with a cache is recorded as such in
the register, never in the build identity (which must stay byte-identical).
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import EnvironmentProblem, RefusedError
from pipeline.util.fs import atomic_write_bytes
from pipeline.util.hashing import sha256_bytes, sha256_file
from pipeline.util.jsonio import canonical_bytes
from pipeline.util.proc import run_text

CACHE_VARIABLE = "PIPELINE_BUILD_CACHE"
CONFIG_FILE = "omp-ninfer-ccache.conf"
MINIMUM_VERSION = (4, 6)  # `namespace` arrived in ccache 4.6; nvcc is supported since 4.0
RELEASE_WORKFLOW_REF = "/.github/workflows/release.yml@"
# The compiler programs of a CUDA toolkit whose bytes key a system toolkit's entries.
CUDA_PROGRAMS = ("bin/nvcc", "bin/nvcc.profile", "bin/cudafe++", "bin/ptxas", "bin/fatbinary", "bin/nvlink", "bin/bin2c", "nvvm/bin/cicc")
HOST_PROGRAMS = (("c++", "cc1plus"), ("cc", "cc1"), ("c++", "as"))


@dataclass(frozen=True)
class CompileCache:
    """A ready cache: where it is, the ccache that serves it and the toolchain key its entries live under."""

    directory: Path
    ccache: Path
    version: str
    key: str

    @property
    def config_path(self) -> Path:
        return self.directory / CONFIG_FILE

    def env(self) -> dict[str, str]:
        return {"CCACHE_CONFIGPATH": str(self.config_path), "CCACHE_DIR": str(self.directory)}

    def cmake_args(self, cuda_launcher: list[str]) -> list[str]:
        """The launchers: ccache for C and C++, and after the deterministic nvcc launcher for CUDA."""
        return [
            f"-DCMAKE_C_COMPILER_LAUNCHER={self.ccache}",
            f"-DCMAKE_CXX_COMPILER_LAUNCHER={self.ccache}",
            "-DCMAKE_CUDA_COMPILER_LAUNCHER=" + ";".join([*cuda_launcher, str(self.ccache)]),
        ]

    def statistics(self, env: dict[str, str]) -> dict[str, int]:
        """ccache's counters for this cache (`--print-stats`); {} when they cannot be read."""
        try:
            text = run_text([self.ccache, "--print-stats"], env={**env, **self.env()}, what="read the compile cache's statistics", failure=EnvironmentProblem, timeout=60)
        except EnvironmentProblem:
            return {}
        counters: dict[str, int] = {}
        for line in text.splitlines():
            name, _, value = line.partition("\t")
            if value.strip().isdigit():
                counters[name.strip()] = int(value)
        return counters

    def to_json(self) -> dict[str, str]:
        # What the register records of a cached build (never a shipped document: the folder is a private path).
        return {"ccache_version": self.version, "toolchain_key": self.key}


def hits_and_misses(before: dict[str, int], after: dict[str, int]) -> tuple[int, int]:
    def delta(*names: str) -> int:
        return sum(after.get(n, 0) - before.get(n, 0) for n in names)

    return delta("direct_cache_hit", "preprocessed_cache_hit"), delta("cache_miss")


def requested(option: str | os.PathLike[str] | None, *, disabled: bool = False) -> Path | None:
    """The cache folder the caller asked for: --cache, else PIPELINE_BUILD_CACHE; None with --no-cache."""
    if disabled:
        return None
    value = os.fspath(option) if option else os.environ.get(CACHE_VARIABLE, "")
    return Path(os.path.abspath(value)) if value else None


def refusal(who: str) -> RefusedError:
    return RefusedError(
        f"{who} never uses a compile cache",
        found=f"{CACHE_VARIABLE}={os.environ.get(CACHE_VARIABLE, '')}" if os.environ.get(CACHE_VARIABLE) else "--cache",
        why="whoever can write to a cache chooses the objects that are linked, and nothing in the bytes afterwards shows "
        "it: a poisoned cache must never reach a release or a verification of one",
        fix=f"unset {CACHE_VARIABLE} (and drop --cache); the build then compiles every object from the source",
    )


def refuse_where_forbidden(*, environ=os.environ) -> None:
    """The release workflow builds from the source only (GITHUB_WORKFLOW_REF names .github/workflows/release.yml)."""
    if environ.get("GITHUB_ACTIONS") == "true" and RELEASE_WORKFLOW_REF in environ.get("GITHUB_WORKFLOW_REF", ""):
        raise refusal("the release workflow")


def ccache_version(ccache: Path) -> str:
    text = run_text([ccache, "--version"], what="ask ccache for its version", failure=EnvironmentProblem, timeout=60)
    match = re.match(r"ccache version ([0-9]+)\.([0-9]+)(\.[0-9]+)?", text)
    if not match or (int(match.group(1)), int(match.group(2))) < MINIMUM_VERSION:
        raise EnvironmentProblem(
            "the compile cache needs ccache 4.6 or newer",
            file=str(ccache),
            found=text.splitlines()[0] if text else "no version",
            expected="ccache version 4.6 or newer (its `namespace` keys the entries on the exact toolchain)",
            fix="install Debian's ccache (apt-get install ccache; bookworm has 4.7.5), or build without --cache",
        )
    return match.group(0).removeprefix("ccache version ")


def find_ccache(path: tuple[str, ...]) -> Path:
    found = shutil.which("ccache", path=os.pathsep.join(path))
    if found is None:
        raise EnvironmentProblem(
            f"--cache needs ccache, which is not in {os.pathsep.join(path)}",
            why="the compile cache is ccache run as CMake's compiler launcher",
            fix="install it (Debian: apt-get install ccache), or build without --cache",
        )
    return Path(found)


def _program_digests(root: Path, names: tuple[str, ...]) -> dict[str, str | None]:
    return {name: sha256_file(root / name) if (root / name).is_file() else None for name in names}


def host_programs(path: tuple[str, ...], env: dict[str, str]) -> dict[str, str | None]:
    """SHA-256 of the host compiler's own programs (what `c++ -print-prog-name=…` runs), and its version line."""
    search = os.pathsep.join(path)
    digests: dict[str, str | None] = {}
    for driver, program in HOST_PROGRAMS:
        found = shutil.which(driver, path=search)
        if found is None:
            digests[f"{driver}:{program}"] = None
            continue
        name = run_text([found, f"-print-prog-name={program}"], env=env, what=f"ask {driver} where {program} is", failure=EnvironmentProblem, timeout=60).strip()
        located = name if os.path.isabs(name) else shutil.which(name, path=search)
        digests[f"{driver}:{program}"] = sha256_file(Path(located)) if located and os.path.isfile(located) else None
        digests[f"{driver}:driver"] = sha256_file(Path(os.path.realpath(found)))
    return digests


def toolchain_key(*, toolchain_description: dict, cuda_home: Path, path: tuple[str, ...], env: dict[str, str], launcher: Path) -> str:
    if toolchain_description.get("kind") == "pinned":
        cuda = {"lock_entry_sha256": toolchain_description["lock_entry_sha256"]}
    else:
        cuda = {"programs": _program_digests(cuda_home, CUDA_PROGRAMS), "cuda_version": toolchain_description.get("cuda_version")}
    material = {"cuda": cuda, "host": host_programs(path, env), "launcher_sha256": sha256_file(launcher)}
    return sha256_bytes(canonical_bytes(material))


def config_text(cache: CompileCache) -> str:
    return "\n".join(
        [
            "# Written by the OMP NInfer pipeline on every build with --cache; edits are overwritten.",
            f"cache_dir = {cache.directory}",
            "compiler_check = content",
            f"namespace = omp-ninfer-{cache.key}",
            "hard_link = false",
            "file_clone = false",
            "sloppiness =",
            "umask = 077",
            "remote_storage =",
            "remote_only = false",
            "read_only = false",
            "stats = true",
            "",
        ]
    )


def prepare(directory: Path, *, toolchain_description: dict, cuda_home: Path, path: tuple[str, ...], env: dict[str, str], launcher: Path) -> CompileCache:
    """The cache at `directory`, made private when absent and refused when it is not (infra/private_dir.py)."""
    from pipeline.infra.private_dir import ensure_private_dir

    ensure_private_dir(
        directory,
        what="the compile cache",
        fix=f"use a folder of your own for --cache / {CACHE_VARIABLE} (made 0700 when absent), or remove this one",
    )
    ccache = find_ccache(path)
    cache = CompileCache(
        directory=directory,
        ccache=ccache,
        version=ccache_version(ccache),
        key=toolchain_key(toolchain_description=toolchain_description, cuda_home=cuda_home, path=path, env=env, launcher=launcher),
    )
    atomic_write_bytes(cache.config_path, config_text(cache).encode(), mode=0o600)
    return cache
