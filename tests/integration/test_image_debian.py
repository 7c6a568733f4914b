"""The Debian trixie package base (containers/trixie/): its committed lock, and the real archive.

Offline: the committed lock is the one the committed definition asks for, and says why each package
is there.  Network (Debian's archive over HTTPS, as apt uses it here): a fresh lock of the same
definition picks exactly the packages and versions apt's own resolver installs into an empty
system (`apt-get -s install --no-install-recommends`, an isolated root, the same moment's indexes),
and a layer made from trixie's C library starts a process: chroot into it and run trixie's
`getconf`, linked against its glibc 2.41 through the ld.so.cache trixie's own ldconfig wrote.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from repokit import ROOT

from pipeline.formats import apt_lock, image_definition
from pipeline.formats.image_definition import load_definition
from pipeline.formats.lanes import find_lane
from pipeline.lanework import package_layer
from pipeline.stages import image
from tests.kits.aptkit import syft_debs

DEFINITION = ROOT / "containers" / "trixie" / "ninfer-runtime.toml"
LANE = "rtx5090-container"


def test_the_committed_trixie_lock_is_the_one_its_definition_asks_for():
    definition = load_definition(DEFINITION)
    lock = image.read_package_lock(definition)  # refuses a stale lock
    names = {p.name for p in lock.packages}
    assert set(definition.package_base.packages) <= names
    assert "libavcodec61" in names and "libavcodec-extra61" not in names  # a concrete name over Provides (rules_distroless#265)
    assert {(s.package) for s in definition.package_base.scripts} <= names
    by_name = {p.name: p for p in lock.packages}
    for package in lock.packages:  # every package is reached from a requested one by the edges the lock records
        seen, current = set(), package
        while current.why["package"] is not None and current.name not in seen:
            seen.add(current.name)
            current = by_name[current.why["package"]]
        assert current.why["field"] == "base.packages", package.name
    assert [s.distro for s in lock.sources] == ["debian-13", "debian-13"]



def test_the_committed_sample_base_is_the_product_base_cut_down_to_what_the_sample_links():
    """containers/trixie/sample-runtime.toml (the GPU self-test's image base): its lock is current, and every package
    in it is the product lock's, at the same version, from the same archives and keys."""
    sample = load_definition(DEFINITION.with_name("sample-runtime.toml"))
    product = load_definition(DEFINITION)
    sample_lock, product_lock = image.read_package_lock(sample), image.read_package_lock(product)  # each refuses a stale lock
    assert sample.lane == product.lane == LANE and sample.package_base.sources == product.package_base.sources
    assert sample.package_base.wheel_files == product.package_base.wheel_files
    versions = {p.name: p.version for p in product_lock.packages}
    assert {p.name: p.version for p in sample_lock.packages} == {p.name: versions[p.name] for p in sample_lock.packages}
    assert "libavcodec61" not in {p.name for p in sample_lock.packages} and "libstdc++6" in {p.name for p in sample_lock.packages}

def _isolated(tmp_path, monkeypatch, packages: list[str] | None = None) -> Path:
    monkeypatch.setattr(image_definition, "REPO_ROOT", tmp_path)
    monkeypatch.setenv("OMP_NINFER_APT_CACHE", str(tmp_path / "apt-cache"))
    shutil.copytree(ROOT / "containers" / "keys", tmp_path / "containers" / "keys")
    shutil.copytree(ROOT / "packaging" / "licenses", tmp_path / "packaging" / "licenses")  # the wheel file's licence text
    text = DEFINITION.read_text()
    if packages is not None:
        start = text.index("\npackages = [")
        text = text[:start] + f"\npackages = {packages!r}".replace("'", '"') + text[text.index("]", start) + 1:]
    path = tmp_path / "containers" / "trixie" / "ninfer-runtime.toml"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    return path


def _apt_selection(tmp_path: Path, definition, keys: Path) -> set[str]:
    root = tmp_path / "apt-root"
    for folder in ("etc/apt/preferences.d", "etc/apt/trusted.gpg.d", "var/lib/apt/lists/partial", "var/lib/dpkg", "var/cache/apt/archives/partial"):
        (root / folder).mkdir(parents=True)
    (root / "var/lib/dpkg/status").write_text("")
    (root / "etc/apt/sources.list").write_text("".join(
        f"deb [signed-by={keys / Path(s.keyring).name}] {s.uri} {s.suite} {' '.join(s.components)}\n" for s in definition.package_base.sources))
    options = [f"-oDir={root}", f"-oDir::State::status={root}/var/lib/dpkg/status", "-oAPT::Architecture=amd64", "-oAPT::Architectures=amd64",
               "-oDebug::NoLocking=1", "-oDir::Etc::trusted=/dev/null", f"-oDir::Etc::trustedparts={root}/etc/apt/trusted.gpg.d"]
    subprocess.run(["apt-get", *options, "update", "-qq"], check=True, capture_output=True, timeout=600)
    simulated = subprocess.run(["apt-get", *options, "-s", "install", "--no-install-recommends", *definition.package_base.packages],
                               check=True, capture_output=True, text=True, timeout=300).stdout
    return {" ".join(line.split()[1:3]).replace("(", "") for line in simulated.splitlines() if line.startswith("Inst ")}


@pytest.mark.network
@pytest.mark.slow
@pytest.mark.skipif(shutil.which("apt-get") is None, reason="apt's resolver is the reference (a Debian host)")
def test_a_fresh_trixie_lock_picks_what_apt_installs(tmp_path, monkeypatch):
    path = _isolated(tmp_path, monkeypatch)
    assert image.lock_packages(LANE, definition=path) == 0
    lock = apt_lock.read_lock(apt_lock.lock_path(path))
    ours = {f"{p.name} {p.version}" for p in lock.packages}
    assert ours == _apt_selection(tmp_path, load_definition(path), ROOT / "containers" / "keys")
    assert len(ours) > 100 and "libavcodec61" in {p.name for p in lock.packages}


@pytest.mark.network
@pytest.mark.slow
def test_a_layer_of_trixies_c_library_starts_a_process(tmp_path, monkeypatch):
    path = _isolated(tmp_path, monkeypatch, ["libc6", "libc-bin"])
    assert image.lock_packages(LANE, definition=path) == 0
    definition = load_definition(path)
    lock = image.read_package_lock(definition)
    result = package_layer.assemble(lock, definition.package_base.stand_ins(), tmp_path / "layer", epoch=1793534400, compression="gzip", gzip_level=9)
    assert result.ldconfig == "image"  # trixie's own ldconfig wrote the cache: no host glibc in the bytes
    again = package_layer.assemble(lock, definition.package_base.stand_ins(), tmp_path / "again", epoch=1793534400, compression="gzip", gzip_level=9)
    assert again.layer.descriptor.digest == result.layer.descriptor.digest
    root = tmp_path / "root"
    subprocess.run(["tar", "-xzf", str(tmp_path / "layer" / "packages.layer"), "-C", str(root.mkdir() or root), "--numeric-owner"], check=True)
    chroot = ["chroot"] if os.geteuid() == 0 else ["unshare", "--user", "--map-root-user", "chroot"]
    started = subprocess.run([*chroot, str(root), "/usr/bin/getconf", "GNU_LIBC_VERSION"], capture_output=True, text=True, timeout=60)
    assert started.returncode == 0 and started.stdout.strip().startswith("glibc 2.41"), started
    cache = subprocess.run([*chroot, str(root), "/usr/sbin/ldconfig", "-p"], capture_output=True, text=True, timeout=60).stdout
    assert "libc.so.6 (libc6,x86-64) => /lib/x86_64-linux-gnu/libc.so.6" in cache or "=> /usr/lib/x86_64-linux-gnu/libc.so.6" in cache
    assert os.readlink(root / "etc" / "nsswitch.conf") == "../usr/share/libc-bin/nsswitch.conf"  # libc-bin's postinst stand-in


@pytest.mark.cuda
@pytest.mark.slow
@pytest.mark.network
@pytest.mark.skipif(shutil.which("umoci") is None, reason="umoci unpacks the layout independently (apt-get install umoci)")
def test_the_sample_image_on_trixie_runs_and_is_the_same_from_a_cold_and_a_warm_package_cache(tmp_path, sample_repo, monkeypatch):
    """build (real nvcc) -> package -> image on the committed trixie lock, libcudart from the pinned wheel; then a process in it."""
    from repokit import have_nvcc

    from pipeline.lanework.source import parse_source
    from pipeline.stage import Context, execute
    from pipeline.stages.build import BuildStage
    from pipeline.stages.package import package_lane

    monkeypatch.setenv("OMP_NINFER_APT_CACHE", str(tmp_path / "apt-cache"))  # cold: every .deb from Debian's archive
    lane = find_lane("5090")
    repo, _commit = sample_repo
    built = tmp_path / "dist-a"
    execute(BuildStage(Context.open(built), lane, source=parse_source(str(repo)), toolchain_mode="system" if have_nvcc() else "pinned", rehearsal=True))
    package_lane("5090", dist=built)
    shutil.copytree(built, tmp_path / "dist-b")  # the same set twice: what differs is only the package cache
    digests, results = [], []
    for name in ("dist-a", "dist-b"):
        result = image.build_image(LANE, dist=tmp_path / name, definition=DEFINITION)
        results.append(result)
        digests.append(next(a for a in result.outputs if a.kind == "oci-layout"))
    assert digests[0].attrs["manifest_digest"] == digests[1].attrs["manifest_digest"]  # cold cache, then warm
    entry = digests[0]
    assert entry.attrs["base_libraries"]["libcudart.so.13"] == "wheel:nvidia-cuda-runtime"
    assert entry.attrs["base_libraries"]["libavcodec.so.61"] == "libavcodec61" and entry.attrs["base_ldconfig"] == "image"
    document = json.loads((tmp_path / "dist-a" / next(a for a in results[0].outputs if a.kind == "image-sbom").path).read_bytes())
    purls = {ref["referenceLocator"] for p in document["packages"] for ref in p.get("externalRefs", [])}
    assert "pkg:pypi/nvidia-cuda-runtime@13.1.80" in purls and any(p.startswith("pkg:deb/debian/libavcodec61@") and "distro=debian-13" in p for p in purls)
    debs, distro = syft_debs(tmp_path / "dist-a" / entry.attrs["layout"])  # an independent scanner reads the image's status.d and os-release
    lock = image.read_package_lock(load_definition(DEFINITION))
    assert set(debs) == {(p.name, p.version) for p in lock.packages} and distro == "Debian GNU/Linux 13 (trixie)"
    assert debs[("libavcodec61", lock.package("libavcodec61").version)].startswith("pkg:deb/debian/libavcodec61@")
    root = (tmp_path / "bundle" / "rootfs")
    rootless = [] if os.geteuid() == 0 else ["--rootless"]
    subprocess.run(["umoci", "unpack", *rootless, "--image", f"{tmp_path / 'dist-a' / entry.attrs['layout']}:{entry.attrs['ref_name']}", str(root.parent)],
                   check=True, capture_output=True)
    chroot = ["chroot"] if os.geteuid() == 0 else ["unshare", "--user", "--map-root-user", "chroot"]
    started = subprocess.run([*chroot, str(root), "/opt/ninfer/bin/ninfer-serve", "--version"], capture_output=True, text=True, timeout=60)
    assert started.returncode == 0 and started.stdout.startswith("ninfer-serve "), started
    listing = subprocess.run([*chroot, str(root), "/lib64/ld-linux-x86-64.so.2", "--list", "/opt/ninfer/bin/ninfer-serve"], capture_output=True, text=True, timeout=60).stdout
    assert "libcudart.so.13 => /lib/x86_64-linux-gnu/libcudart.so.13" in listing and "not found" not in listing

