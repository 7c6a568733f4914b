"""The toolchain lock (`omp_ninfer_toolchain_lock`), `runtime/toolchain.lock.json`: per CUDA toolkit line and host
platform, every wheel (nvcc, crt, nvvm, cudart, cccl, nvtx, plus cmake and ninja) by exact version, URL, size and
SHA-256, and the three tool paths inside the unpacked site.  Read here, once, into a `ToolchainSpec` whose digest a cut
records and a build, a provenance statement and a rebuild compare; provisioning and `toolchain lock` (which writes it)
are pipeline/lanework/toolchain.py's."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.errors import InputError
from pipeline.formats.lanes import REPO_ROOT
from pipeline.util.hashing import is_sha256_hex, sha256_bytes
from pipeline.util.jsonio import canonical_bytes, read_json_object
from pipeline.util.safepath import safe_component, safe_relpath

LOCK_FILE = REPO_ROOT / "runtime" / "toolchain.lock.json"
LOCK_TYPE = "omp_ninfer_toolchain_lock"
PYPI_FILES = "https://files.pythonhosted.org/packages/"


@dataclass(frozen=True)
class Wheel:
    distribution: str
    version: str
    filename: str
    url: str
    sha256: str
    size: int

    @property
    def dist_info(self) -> str:
        """The folder the unpacked wheel keeps its metadata in: `<distribution>-<version>.dist-info` (PEP 427)."""
        distribution, version = self.filename.split("-")[:2]
        return f"{distribution}-{version}.dist-info"


@dataclass(frozen=True)
class ToolchainSpec:
    toolkit: str
    platform: str
    cuda_version: str
    wheels: tuple[Wheel, ...]
    cuda_home: str  # relative to the unpacked site folder
    cmake: str
    ninja: str

    @property
    def digest(self) -> str:
        return sha256_bytes(canonical_bytes(self.to_json()))

    def to_json(self) -> dict[str, Any]:
        return {
            "toolkit": self.toolkit,
            "platform": self.platform,
            "cuda_version": self.cuda_version,
            "cuda_home": self.cuda_home,
            "cmake": self.cmake,
            "ninja": self.ninja,
            "wheels": [w.__dict__ for w in self.wheels],
        }


def load_lock(path: Path = LOCK_FILE) -> dict[str, Any]:
    lock = read_json_object(path)
    if lock.get("artifact_type") != LOCK_TYPE or lock.get("schema_version") != 1:
        raise InputError("is not a toolchain lock of schema 1", file=path, field="artifact_type", found=lock.get("artifact_type"), expected=LOCK_TYPE)
    return lock


def toolchain_spec(toolkit: str, platform: str, *, lock_path: Path = LOCK_FILE) -> ToolchainSpec:
    lock = load_lock(lock_path)
    entry = lock.get("toolkits", {}).get(toolkit, {}).get("platforms", {}).get(platform)
    if entry is None:
        raise InputError(
            f"the toolchain lock has no CUDA {toolkit} toolchain for {platform}",
            file=lock_path,
            field=f"toolkits.{toolkit}.platforms.{platform}",
            fix="run 'python -m pipeline toolchain lock' to pin it (see README, Toolchains)",
        )
    wheels = []
    for index, item in enumerate(entry["wheels"]):
        where = f"toolkits.{toolkit}.platforms.{platform}.wheels[{index}]"
        if not is_sha256_hex(item.get("sha256")):
            raise InputError("wheel hash is not 64 lowercase hex digits", file=lock_path, field=f"{where}.sha256", found=item.get("sha256"))
        if not str(item.get("url", "")).startswith(PYPI_FILES):
            raise InputError("wheel URL is not a PyPI file URL", file=lock_path, field=f"{where}.url", found=item.get("url"), expected=f"{PYPI_FILES}...")
        # The file name becomes a cache path, the three tool paths paths under the unpacked site.
        safe_component(item.get("filename"), file=lock_path, field=f"{where}.filename", expected="a wheel file name")
        wheels.append(Wheel(**item))
    for key in ("cuda_home", "cmake", "ninja"):
        safe_relpath(entry.get(key), file=lock_path, field=f"toolkits.{toolkit}.platforms.{platform}.{key}", hidden=True, portable=False)
    return ToolchainSpec(
        toolkit=toolkit,
        platform=platform,
        cuda_version=entry["cuda_version"],
        wheels=tuple(wheels),
        cuda_home=entry["cuda_home"],
        cmake=entry["cmake"],
        ninja=entry["ninja"],
    )


# -- downloading ------------------------------------------------------------
