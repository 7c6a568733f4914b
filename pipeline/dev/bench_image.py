"""`bench` measurement `image-from-packages` (issue 29): a package base assembled from a warm package cache.

Ours: `lanework/package_layer.py: assemble` on the committed Debian trixie lock
(`containers/trixie/ninfer-runtime.lock.json`, 155 packages) from a package cache that already holds every
`.deb` (each one still re-hashed against the lock, read through the bounded tar reader, placed merged-/usr,
status.d written, `ld.so.cache` generated), written as one uncompressed layer tar; twice, and the two tars
must be byte-identical.

Reference: Debian's `mmdebstrap --variant=extract` making a tarball of the same package set (every package
of the lock named with its version) from a local flat repository of the same `.deb` files (`copy://`, a
`Packages` index by `dpkg-scanpackages`), so neither side downloads anything while it is timed; mmdebstrap
runs apt (update, resolution, "download": a copy from that mirror) and dpkg-deb, and writes its tar.  Goal: ours no
slower (ratio = ours / mmdebstrap seconds, the faster of two interleaved runs each, <= 1.0) and ours
byte-identical across its two runs.  Ours reads several packages at once (threads: xz and hashing release the
GIL), as mmdebstrap's dpkg-deb and tar run as separate processes.

Not timed: filling the package cache (the lock's `.deb`s fetched by SHA-256 from Debian's archive, once) and
laying out the flat repository.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from pipeline.util.hashing import sha256_file

GOAL_RATIO = 1.0
DEFINITION = Path("containers/trixie/ninfer-runtime.toml")
EPOCH = 1795965149


def _warm_cache(lock, cache: Path) -> dict[str, Path]:
    """Every .deb of the lock in the package cache (fetched by SHA-256 where missing): name -> cached file."""
    from pipeline.lanework import apt

    return {p.name: apt.cached_fetch(apt.deb_url(lock.sources[p.source].uri, p.filename), cache, sha256=p.sha256, size=p.size,
                                     label=f"{p.name}.deb") for p in lock.packages}


def _flat_repository(lock, debs: dict[str, Path], folder: Path) -> str:
    """A flat apt repository of the same .deb files for mmdebstrap: the files (hard links) and a Packages index."""
    folder.mkdir(parents=True)
    for package in lock.packages:
        target = folder / Path(package.filename).name
        try:
            os.link(debs[package.name], target)
        except OSError:
            shutil.copyfile(debs[package.name], target)
    index = subprocess.run(["dpkg-scanpackages", "--multiversion", "."], cwd=folder, capture_output=True, check=True).stdout
    (folder / "Packages").write_bytes(index)
    return f"deb [trusted=yes] copy://{folder} ./"  # copy://: mmdebstrap reads a file:// mirror from inside its chroot


def _ours(lock, stand_ins, cache: Path, staging: Path) -> tuple[float, Path, int]:
    from pipeline.lanework import package_layer

    started = time.monotonic()
    result = package_layer.assemble(lock, stand_ins, staging, epoch=EPOCH, compression="none", gzip_level=9, cache=cache)
    seconds = time.monotonic() - started
    return seconds, staging / "packages.layer", len(result.entries)


def _mmdebstrap(lock, source: str, output: Path, suite: str) -> tuple[float, int]:
    include = ",".join(f"{p.name}={p.version}" for p in lock.packages)
    command = ["mmdebstrap", "--quiet", "--variant=extract", "--architectures=" + lock.architecture, f"--include={include}",
               "--aptopt=Acquire::Languages \"none\"", suite, str(output), source]
    env = {**os.environ, "SOURCE_DATE_EPOCH": str(EPOCH)}
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        from pipeline.errors import EnvironmentProblem

        raise EnvironmentProblem("mmdebstrap did not make the reference tarball", found=done.stderr[-2000:], fix="run the command by hand: " + " ".join(command[:4]) + " …")
    listing = subprocess.run(["tar", "-tf", str(output)], capture_output=True, text=True, check=True).stdout
    return seconds, len(listing.splitlines())


def measure_image_from_packages(work: Path, payload: Path, size: int, level: int) -> dict[str, Any]:
    from pipeline.formats.image_definition import load_definition, read_package_lock
    from pipeline.formats.lanes import REPO_ROOT
    from pipeline.lanework import apt
    from pipeline.util import ui
    from pipeline.util.proc import require_tool

    for tool, package in (("mmdebstrap", "mmdebstrap"), ("dpkg-scanpackages", "dpkg-dev")):
        require_tool(tool, purpose="the image-from-packages reference", debian_package=package)
    definition = load_definition(REPO_ROOT / DEFINITION)
    lock = read_package_lock(definition)
    assert definition.package_base is not None
    cache = apt.package_cache()
    root = work / "image-from-packages"
    ui.step("bench", f"image-from-packages: {len(lock.packages)} packages of {lock.file.name} in the package cache {cache} (fetched where missing)")
    debs = _warm_cache(lock, cache)
    deb_bytes = sum(p.size for p in lock.packages)
    source = _flat_repository(lock, debs, root / "mirror")
    stand_ins = definition.package_base.stand_ins()
    runs, peers = [], []
    for number in (1, 2):  # interleaved, the faster of each side compared: a shared machine's load hits both alike
        ui.step("bench", f"image-from-packages: ours, run {number}")
        runs.append(_ours(lock, stand_ins, cache, root / f"ours-{number}"))
        ui.step("bench", f"image-from-packages: mmdebstrap --variant=extract of the same packages from a copy:// mirror, run {number}")
        peers.append(_mmdebstrap(lock, source, root / f"mmdebstrap-{number}.tar", definition.package_base.sources[0].suite))
    ours_seconds = min(run[0] for run in runs)
    peer_seconds, peer_members = min(peer[0] for peer in peers), peers[0][1]
    identical = sha256_file(runs[0][1]) == sha256_file(runs[1][1])
    ratio = round(ours_seconds / peer_seconds, 3) if peer_seconds else None
    return {
        "name": "image-from-packages",
        "what": f"one uncompressed layer tar of the {len(lock.packages)} packages of {DEFINITION} ({deb_bytes} bytes of .deb) from a warm package cache, "
        "against mmdebstrap --variant=extract making a tarball of the same packages from a copy:// mirror of the same .debs",
        "ours": {"tool": "package_layer.assemble", "seconds": round(ours_seconds, 2), "runs_seconds": [round(r[0], 2) for r in runs],
                 "tar_bytes": runs[0][1].stat().st_size, "tar_sha256": sha256_file(runs[0][1]), "entries": runs[0][2]},
        "reference": {"tool": "mmdebstrap --variant=extract", "version": _version(), "seconds": round(peer_seconds, 2),
                      "runs_seconds": [round(p[0], 2) for p in peers], "tar_bytes": (root / "mmdebstrap-1.tar").stat().st_size, "members": peer_members},
        "ratio": ratio,
        "bytes_identical_across_runs": identical,
        "goal": f"ours <= {GOAL_RATIO}x mmdebstrap's seconds, and our two tars byte-identical",
        "summary": f"ours {round(ours_seconds, 2)} s (runs {', '.join(str(round(r[0], 2)) for r in runs)}), mmdebstrap {round(peer_seconds, 2)} s "
        f"(runs {', '.join(str(round(p[0], 2)) for p in peers)}; ratio {ratio}x, the faster run of each); ours byte-identical across runs: {identical}",
        "met": identical and ratio is not None and ratio <= GOAL_RATIO,
    }


def _version() -> str | None:
    done = subprocess.run(["mmdebstrap", "--version"], capture_output=True, text=True)
    return done.stdout.strip() or None


MEASUREMENTS = {"image-from-packages": measure_image_from_packages}
