"""The image stage on a base of distribution packages: from the lock alone, reproducible, inventoried, and its root file system runs.

The packages carry this host's C library and loader (as a pre-merged-/usr `libc6` would), the
binary archive's binaries are this host's /usr/bin/true (a real ELF needing libc.so.6), so the
assembled image is unpacked by umoci (an independent OCI implementation) and a process is started
in it with chroot.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import imagekit
import pytest

from pipeline.errors import InputError, IntegrityError
from pipeline.formats import apt_lock, build_environment, image_definition
from pipeline.formats.lanes import find_lane
from pipeline.stages import image
from pipeline.stages.image import build_image
from tests.kits.aptkit import (
    MiniRepo,
    SigningKey,
    build_deb,
    member,
    package,
    shipped_definition_on_packages,
    syft_debs,
)

LANE = "rtx5090-container"
pytestmark = pytest.mark.skipif(not Path("/lib64/ld-linux-x86-64.so.2").exists(), reason="needs an x86-64 glibc host to package its C library")


@pytest.fixture(scope="module")
def key():
    made = SigningKey.make("Image Test Archive")
    yield made
    made.close()


def _libc_deb(folder: Path) -> Path:
    libc = imagekit.host_library("libc.so.6").read_bytes()
    loader = imagekit.host_library("ld-linux-x86-64.so.2").read_bytes()
    copyright_text = b"Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n\nFiles: *\nLicense: LGPL-2.1+\n"
    return build_deb(folder / "libc6.deb", "libc6", "2.36-9", members=[
        member("./lib/", kind=tarfile.DIRTYPE, mode=0o755), member("./lib/x86_64-linux-gnu/", kind=tarfile.DIRTYPE, mode=0o755),
        member("./lib/x86_64-linux-gnu/libc.so.6", libc, mode=0o755),
        member("./lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", loader, mode=0o755),
        member("./lib64/", kind=tarfile.DIRTYPE, mode=0o755),
        member("./lib64/ld-linux-x86-64.so.2", kind=tarfile.SYMTYPE, link="/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", mode=0o777),
        member("./usr/", kind=tarfile.DIRTYPE, mode=0o755), member("./usr/share/", kind=tarfile.DIRTYPE, mode=0o755),
        member("./usr/share/doc/", kind=tarfile.DIRTYPE, mode=0o755), member("./usr/share/doc/libc6/", kind=tarfile.DIRTYPE, mode=0o755),
        member("./usr/share/doc/libc6/copyright", copyright_text),
    ])


@pytest.fixture
def world(tmp_path, key, monkeypatch):
    monkeypatch.setattr(image_definition, "REPO_ROOT", tmp_path)
    monkeypatch.setenv("OMP_NINFER_APT_CACHE", str(tmp_path / "apt-cache"))
    repo = MiniRepo(tmp_path / "archive", key)
    repo.serve()
    libc = _libc_deb(tmp_path / "debs")
    repo.publish([package("libc6", "2.36-9", deb=libc, Maintainer="GNU Libc Maintainers <debian-glibc@lists.debian.org>", Source="glibc")], debs={"libc6": libc})
    (tmp_path / "containers" / "keys").mkdir(parents=True)
    (tmp_path / "containers" / "keys" / "test.gpg").write_bytes(key.keyring)
    definition = tmp_path / "containers" / "trixie" / "ninfer-runtime.toml"  # where the lane's package.base_image names it
    definition.parent.mkdir()
    definition.write_text(shipped_definition_on_packages(repo.server.base, key, "containers/keys/test.gpg", ["libc6"]))
    yield tmp_path, repo, definition
    repo.close()


def _packaged(tmp_path: Path, name: str, *, build_environment: dict | None = None) -> Path:
    dist = tmp_path / name
    lane = find_lane(LANE)
    binaries = imagekit.stand_in_binaries(tmp_path / "stand-in-bin")
    identity = imagekit.fake_identity(lane, binaries)
    if build_environment is not None:
        identity["host_environment"] = {"build_environment": build_environment}
    imagekit.write_package(dist, lane, binaries=binaries, identity=identity)
    return dist


def _pinned_environment() -> dict:
    from pipeline.formats import build_environment

    pin = build_environment.read_pin()
    return build_environment.observed({build_environment.CONTAINER_VARIABLE: pin["container"], build_environment.SNAPSHOT_VARIABLE: pin["debian_snapshot"]})


def _unpack(layout: Path, ref: str, bundle: Path) -> Path:
    rootless = [] if os.geteuid() == 0 else ["--rootless"]
    subprocess.run(["umoci", "unpack", *rootless, "--image", f"{layout}:{ref}", str(bundle)], check=True, capture_output=True)
    return bundle / "rootfs"


@pytest.mark.skipif(shutil.which("umoci") is None, reason="umoci unpacks the layout independently (apt-get install umoci)")
def test_an_image_on_a_package_base_runs_is_inventoried_and_is_the_same_from_two_clones_and_two_cache_states(world, capsys, monkeypatch):
    tmp_path, repo, definition = world
    assert image.lock_packages(LANE, definition=definition) == 0  # fetches each .deb to record its libraries: the cache is warm
    lock_sha = apt_lock.read_lock(apt_lock.lock_path(definition))
    assert lock_sha.package("libc6").libraries == ("ld-linux-x86-64.so.2", "libc.so.6")  # lib64/ld-linux… is a link outside the multiarch folder: /usr/lib64 counts too
    dist = _packaged(tmp_path, "dist-a")
    first = build_image(LANE, dist=dist, definition=definition)
    # the archive records no pinned build environment (a build outside it): nothing to compare, each DT_NEEDED decides
    assert "build environment: the archive records none" in capsys.readouterr().err
    shutil.rmtree(tmp_path / "apt-cache")  # the second build downloads every .deb again: a cold cache
    second = build_image(LANE, dist=_packaged(tmp_path, "dist-b"), definition=definition)
    # a second clone of the repository (definition, lock, keyring copied to another folder), its cache warm from the second build
    clone = tmp_path / "clone"
    shutil.copytree(tmp_path / "containers", clone / "containers")
    monkeypatch.setattr(image_definition, "REPO_ROOT", clone)
    third = build_image(LANE, dist=_packaged(clone, "dist-c"), definition=clone / definition.relative_to(tmp_path))
    entry = next(a for a in first.outputs if a.kind == "oci-layout")
    digests = {next(a for a in result.outputs if a.kind == "oci-layout").attrs["manifest_digest"] for result in (first, second, third)}
    assert digests == {entry.attrs["manifest_digest"]}, digests
    assert entry.attrs["base_kind"] == "packages" and entry.attrs["base_packages"] == len(lock_sha.packages) == 1
    assert entry.attrs["base_libraries"]["libc.so.6"] == "libc6"
    assert [row["origin"] for row in entry.attrs["layers"]] == ["layer:packages", "layer:docs", "layer:runtime"]

    # the SBOM lists the package with its purl, .deb hash, DEP-5 licence and source package; no registry base
    document = json.loads((dist / next(a for a in first.outputs if a.kind == "image-sbom").path).read_bytes())
    debs = [p for p in document["packages"] if p["SPDXID"].startswith("SPDXRef-Deb-")]
    assert [p["name"] for p in debs] == ["libc6"] and not any(p["SPDXID"] == "SPDXRef-BaseImage" for p in document["packages"])
    (libc,) = debs
    assert libc["externalRefs"][0]["referenceLocator"] == "pkg:deb/test/libc6@2.36-9?arch=amd64&distro=test-testing"
    assert libc["checksums"] == [{"algorithm": "SHA256", "checksumValue": lock_sha.package("libc6").sha256}]
    assert libc["licenseDeclared"] == "LGPL-2.1-or-later" and "glibc 2.36-9" in libc["sourceInfo"]
    assert libc["downloadLocation"] == "NOASSERTION" and f"from {repo.server.base}/{lock_sha.package('libc6').filename}" in libc["comment"]  # loopback: no TLD for SPDX

    # an independent scanner (Syft) finds exactly the locked packages in the image's status.d
    debs, _distro = syft_debs(dist / entry.attrs["layout"])
    assert set(debs) == {(p.name, p.version) for p in lock_sha.packages}

    # the root file system runs: unpacked by umoci, the entrypoint started with chroot, its libraries from the image
    layout = dist / entry.attrs["layout"]
    root = _unpack(layout, entry.attrs["ref_name"], tmp_path / "bundle")
    assert os.readlink(root / "lib") == "usr/lib" and (root / "var/lib/dpkg/status.d/libc6").read_text().startswith("Package: libc6\n")
    chroot = ["chroot"] if os.geteuid() == 0 else ["unshare", "--user", "--map-root-user", "chroot"]
    started = subprocess.run([*chroot, str(root), "/opt/ninfer/bin/ninfer-serve", "--version"], capture_output=True, text=True, timeout=60)
    assert started.returncode == 0, started.stderr
    listing = subprocess.run([*chroot, str(root), "/lib64/ld-linux-x86-64.so.2", "--list", "/opt/ninfer/bin/ninfer-serve"], capture_output=True, text=True, timeout=60)
    assert "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6" in listing.stdout or "libc.so.6 => /usr/lib/x86_64-linux-gnu/libc.so.6" in listing.stdout, listing


def test_an_outsider_makes_the_image_again_from_its_lock_and_a_changed_deb_is_refused(world, capsys):
    tmp_path, repo, definition = world
    assert image.lock_packages(LANE, definition=definition) == 0
    dist = _packaged(tmp_path, "dist")
    published = next(a for a in build_image(LANE, dist=dist, definition=definition).outputs if a.kind == "oci-layout").attrs["manifest_digest"]
    index = (dist / LANE / "image" / "oci" / "index.json").read_bytes()
    # the shared package cache is emptied: what verify fetches comes from the archive, against the lock's SHA-256
    shutil.rmtree(tmp_path / "apt-cache")
    assert image.verify_image(LANE, published, dist=dist, definition=definition) == published
    assert "equals the published digest" in capsys.readouterr().err
    assert (dist / LANE / "image" / "oci" / "index.json").read_bytes() == index  # the published layout is left alone
    assert not (tmp_path / "apt-cache").exists()  # verify used a cache of its own
    # a digest that is not the rebuilt one: both named
    other = "sha256:" + "0" * 64
    with pytest.raises(IntegrityError, match="is not the published image") as info:
        image.verify_image(LANE, other, dist=dist, definition=definition)
    assert info.value.found == published and info.value.expected == other
    # what else the bytes depend on is named, with this run's: the zlib build and (no libc-bin in this lock) the host's ldconfig
    from pipeline.infra import oci
    from pipeline.lanework import package_layer

    assert f"zlib {oci.zlib_version()}" in info.value.why and f"this host's, {package_layer.host_ldconfig()}" in info.value.why
    assert "base_ldconfig" in info.value.why and "libc-bin" in info.value.fix
    # the archive serves a changed .deb (same name and size, other bytes): refused before anything is assembled
    served = repo.root / apt_lock.read_lock(apt_lock.lock_path(definition)).package("libc6").filename
    data = bytearray(served.read_bytes())
    data[-2] ^= 0xFF
    served.write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match="do not match the pin") as info:
        image.verify_image(LANE, published, dist=dist, definition=definition)
    assert "libc6" in info.value.file


def test_binaries_built_in_the_pinned_environment_are_refused_on_another_release_naming_both(world, key):
    tmp_path, _repo, definition = world
    assert image.lock_packages(LANE, definition=definition) == 0
    pinned = _pinned_environment()
    suite = build_environment.read_pin()["debian_suite"]
    with pytest.raises(InputError, match="not the same distribution release and snapshot") as info:
        build_image(LANE, dist=_packaged(tmp_path, "dist", build_environment=pinned), definition=definition)
    # both sides named: the image's suite from an archive that moves, the build's Debian release and snapshot
    assert "image: testing from an archive that moves (no snapshot)" in info.value.found and info.value.field == "base.source"
    assert f"build: Debian {suite} at snapshot {pinned['debian_snapshot']}" in info.value.found
    # what the check compares on the image side: a snapshot URI names its timestamp, '-security' is the same release
    moved = definition.with_name("moved.toml")
    moved.write_text(shipped_definition_on_packages(f"https://snapshot.debian.org/archive/debian/{pinned['debian_snapshot']}", key,
                                                    "containers/keys/test.gpg", ["libc6"], suite=f"{suite}-security"))
    assert image_definition.load_definition(moved).package_base.releases() == {(suite, pinned["debian_snapshot"])}
    # an archive built in another pinned environment than this checkout's: its release cannot be read here
    other = {**pinned, "container": pinned["container"].replace("@sha256:", "-other@sha256:")}
    with pytest.raises(InputError, match="another pinned build environment than this checkout's") as info:
        build_image(LANE, dist=_packaged(tmp_path, "dist-other", build_environment=other), definition=definition)
    assert info.value.found == f"archive: {other['container']}"


def test_the_lane_derives_its_base_libraries_from_the_package_lock():
    from pipeline.formats.image_definition import lane_base_libraries

    derived = lane_base_libraries(find_lane(LANE))  # runtime/lanes: package.base_image = containers/trixie/ninfer-runtime.toml
    assert derived["libavformat.so.61"] == "libavformat61" and derived["libcurl.so.4"] == "libcurl4t64"
    assert derived["libcudart.so.13"] == "wheel:nvidia-cuda-runtime" and "libavformat.so.60" not in derived


def test_a_lane_naming_a_package_base_and_typing_libraries_is_refused(tmp_path):
    from pipeline.formats.lanes import DEFAULT_LANES_DIR, load_lane

    text = (DEFAULT_LANES_DIR / f"{LANE}.toml").read_text()
    path = tmp_path / f"{LANE}.toml"
    path.write_text(text.replace('base_image = "containers/', 'base_image_libraries = ["libcurl.so.4"]\nbase_image = "containers/'))
    with pytest.raises(InputError, match="names a package base and types its libraries too") as info:
        load_lane(path)
    assert info.value.field == "package.base_image_libraries"


def test_a_stale_lock_is_refused_before_any_download(world):
    tmp_path, _repo, definition = world
    assert image.lock_packages(LANE, definition=definition) == 0
    definition.write_text(definition.read_text().replace('packages = ["libc6"]', 'packages = ["libc6", "tzdata"]'))
    with pytest.raises(InputError, match="made for another package request") as info:
        build_image(LANE, dist=_packaged(tmp_path, "dist"), definition=definition)
    assert "image lock" in info.value.fix


def test_a_library_no_package_ships_is_refused_naming_the_binary_and_the_library(world, key):
    tmp_path, repo, definition = world
    empty = build_deb(tmp_path / "debs" / "base-files.deb", "base-files", members=[member("./etc/", kind=tarfile.DIRTYPE, mode=0o755)])
    repo.publish([package("base-files", deb=empty)], debs={"base-files": empty})
    definition.write_text(shipped_definition_on_packages(repo.server.base, key, "containers/keys/test.gpg", ["base-files"]))
    assert image.lock_packages(LANE, definition=definition) == 0
    with pytest.raises(InputError, match="needs libc.so.6, which the image does not provide") as info:
        build_image(LANE, dist=_packaged(tmp_path, "dist"), definition=definition)
    assert "the packages of containers/trixie/ninfer-runtime.lock.json" in info.value.expected  # the lock's path in the repository


def test_a_wheel_file_from_a_wheel_the_toolchain_lock_does_not_pin_is_refused(world, key):
    tmp_path, repo, definition = world
    wheel_file = ('\n[[base.wheel_file]]\ndistribution = "nvidia-nothing"\nmember = "nvidia/cu13/lib/libnothing.so.13"\n'
                  'to = "/usr/lib/x86_64-linux-gnu/libnothing.so.13"\nlicense = "MIT"\n')
    definition.write_text(shipped_definition_on_packages(repo.server.base, key, "containers/keys/test.gpg", ["libc6"], scripts=wheel_file))
    assert image.lock_packages(LANE, definition=definition) == 0
    with pytest.raises(InputError, match="names a wheel the toolchain lock does not pin") as info:
        build_image(LANE, dist=_packaged(tmp_path, "dist"), definition=definition)
    assert info.value.found == "nvidia-nothing" and "nvidia-cuda-runtime" in info.value.expected


def test_a_packaged_library_whose_own_dependency_is_missing_is_refused_naming_both(world, key):
    tmp_path, repo, definition = world
    libstdcxx = build_deb(tmp_path / "debs" / "libstdc++6.deb", "libstdc++6", members=[
        member("./usr/", kind=tarfile.DIRTYPE, mode=0o755), member("./usr/lib/", kind=tarfile.DIRTYPE, mode=0o755),
        member("./usr/lib/x86_64-linux-gnu/", kind=tarfile.DIRTYPE, mode=0o755),
        member("./usr/lib/x86_64-linux-gnu/libstdc++.so.6", imagekit.host_library("libstdc++.so.6").read_bytes()),  # needs libm.so.6, libgcc_s.so.1
    ])
    libc = _libc_deb(tmp_path / "debs")
    repo.publish([package("libc6", "2.36-9", deb=libc), package("libstdc++6", deb=libstdcxx, Depends="libc6")], debs={"libc6": libc, "libstdc++6": libstdcxx})
    definition.write_text(shipped_definition_on_packages(repo.server.base, key, "containers/keys/test.gpg", ["libstdc++6"]))
    assert image.lock_packages(LANE, definition=definition) == 0
    with pytest.raises(InputError, match=r"/usr/lib/x86_64-linux-gnu/libstdc\+\+\.so\.6 needs (libm\.so\.6|libgcc_s\.so\.1), which the image does not provide"):
        build_image(LANE, dist=_packaged(tmp_path, "dist"), definition=definition)


def test_the_lanes_package_base_is_the_default_definition_and_another_is_refused_naming_both(tmp_path, capsys):
    """release.yml and `image --verify` run `image` without --definition: they must get the definition whose lock the lane's
    base libraries come from and whose supplier its base_image_provider names (Debian), never the nvidia/cuda one."""
    from pipeline.cli import main
    from pipeline.errors import ExitCode
    from pipeline.formats.lanes import REPO_ROOT

    lane = find_lane(LANE)
    default = image_definition.definition_for_lane(lane)
    assert default.file == REPO_ROOT / lane.base_image and default.package_base is not None
    assert lane.providers["base-image"].supplier == "Debian"  # what the SBOM credits: true of this base
    assert image_definition.definition_for_lane(lane, REPO_ROOT / "containers" / "trixie" / "ninfer-runtime.toml").file == default.file
    other = REPO_ROOT / "containers" / "ninfer-runtime.toml"  # the registry (nvidia/cuda Ubuntu) definition of the same lane
    with pytest.raises(InputError, match="is not the image definition the lane names") as info:
        image_definition.definition_for_lane(lane, other)
    assert info.value.found == str(other) and info.value.expected.startswith("containers/trixie/ninfer-runtime.toml (the lane's package.base_image")
    for command in (["image"], ["image", "lock"], ["image", "--verify", "sha256:" + "0" * 64]):
        assert main([*command, "--lane", LANE, "--dist", str(tmp_path / "dist"), "--definition", str(other)]) == ExitCode.INPUT
        assert "is not the image definition the lane names" in capsys.readouterr().err


def test_the_register_and_push_name_the_definitions_path_in_the_repository(world):
    tmp_path, _repo, definition = world
    from pipeline.stages.push import choose_registry

    assert image.lock_packages(LANE, definition=definition) == 0
    entry = next(a for a in build_image(LANE, dist=_packaged(tmp_path, "dist"), definition=definition).outputs if a.kind == "oci-layout")
    assert entry.attrs["definition"] == "containers/trixie/ninfer-runtime.toml" and entry.attrs["base_reference"] == "containers/trixie/ninfer-runtime.lock.json"
    assert choose_registry(None, [entry], {}) == (entry.attrs["production_repository"], "the repository of the image definition containers/trixie/ninfer-runtime.toml")


SELFTEST_SCRIPT = Path(__file__).resolve().parents[2] / "packaging" / "linux" / "selftest-image-rootfs.sh"


def _host_has_a_driver() -> bool:
    listing = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout if shutil.which("ldconfig") else ""
    return "libcuda.so.1 " in listing


def _unpacked_layers(layout: Path, into: Path) -> Path:
    """The image's layers extracted in manifest order with tar (what run.sh does on the GPU machine)."""
    (manifest_row,) = json.loads((layout / "index.json").read_text())["manifests"]
    manifest = json.loads((layout / "blobs" / "sha256" / manifest_row["digest"].split(":")[1]).read_text())
    into.mkdir()
    for layer in manifest["layers"]:
        subprocess.run(["tar", "--numeric-owner", "-xzpf", str(layout / "blobs" / "sha256" / layer["digest"].split(":")[1]), "-C", str(into)], check=True)
    return into


@pytest.mark.skipif(shutil.which("unshare") is None or shutil.which("dash") is None, reason="the script runs under a POSIX sh (dash) in a private mount namespace (unshare)")
def test_the_image_selftest_script_starts_the_engine_in_the_image_and_binds_the_driver_only_inside_its_namespace(world, tmp_path):
    """packaging/linux/selftest-image-rootfs.sh without a GPU: --version runs in the image, --selftest fails, and says why."""
    tmp, _repo, definition = world
    assert image.lock_packages(LANE, definition=definition) == 0
    dist = _packaged(tmp, "dist")
    entry = next(a for a in build_image(LANE, dist=dist, definition=definition).outputs if a.kind == "oci-layout")
    root = _unpacked_layers(dist / entry.attrs["layout"], tmp_path / "rootfs")
    env = {k: v for k, v in os.environ.items() if k != "NVIDIA_DRIVER_LIB_DIR"}
    plain = subprocess.run(["dash", str(SELFTEST_SCRIPT), str(root)], capture_output=True, text=True, timeout=60, env=env)
    # the stand-in engine (/usr/bin/true) starts in the image; its --selftest prints no "selftest: ok": refused, exit 1
    assert "running: chroot " + str(root) + " /opt/ninfer/bin/ninfer-serve --version" in plain.stderr, plain.stderr
    assert plain.returncode == 1 and "error: /opt/ninfer/bin/ninfer-serve --selftest failed (exit 0)" in plain.stderr, plain.stderr
    if not _host_has_a_driver():
        assert "no NVIDIA driver on this host: libcuda.so.* is neither in ldconfig's cache nor in" in plain.stderr
        assert "on a host without an NVIDIA driver" in plain.stderr
    # a driver folder named by NVIDIA_DRIVER_LIB_DIR: its libcuda bound read-only onto a file in the image's library
    # folder, the soname link made by ldconfig (the host's -r: this image has no libc-bin), all gone afterwards
    driver = tmp_path / "driver"
    driver.mkdir()
    shutil.copyfile(imagekit.host_library("libc.so.6"), driver / "libcuda.so.999.1")  # an ELF; what it is does not matter here
    bound = subprocess.run(["dash", str(SELFTEST_SCRIPT), str(root)], capture_output=True, text=True, timeout=60, env={**env, "NVIDIA_DRIVER_LIB_DIR": str(driver)})
    assert f"driver library {driver}/libcuda.so.999.1 -> /usr/lib/x86_64-linux-gnu/libcuda.so.999.1 (read-only bind)" in bound.stderr, bound.stderr
    assert bound.returncode == 1 and f"failed (exit 0) with the driver {driver}/libcuda.so.999.1 in place (chroot in a private mount namespace" in bound.stderr, bound.stderr
    mount_point = root / "usr" / "lib" / "x86_64-linux-gnu" / "libcuda.so.999.1"
    assert mount_point.stat().st_size == 0  # the bind lived in the script's mount namespace only
    assert not any(str(root) in line for line in Path("/proc/self/mounts").read_text().splitlines())
    # loader mode (where no mount namespace can be made): the image's own loader and libraries, a copy of the driver, no chroot
    loader = subprocess.run(["dash", str(SELFTEST_SCRIPT), str(root)], capture_output=True, text=True, timeout=60,
                            env={**env, "NVIDIA_DRIVER_LIB_DIR": str(driver), "SELFTEST_IMAGE_ROOTFS_MODE": "loader"})
    assert "running: the image's loader /usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 --inhibit-cache" in loader.stderr, loader.stderr
    assert loader.returncode == 1 and "in place (loader mode: the image's loader and libraries, no chroot)" in loader.stderr, loader.stderr
    # not a root file system: a usage error (2) naming what is expected
    wrong = subprocess.run(["dash", str(SELFTEST_SCRIPT), str(tmp_path / "nowhere")], capture_output=True, text=True, timeout=60)
    assert wrong.returncode == 2 and "not a folder (expected an unpacked image root file system)" in wrong.stderr
