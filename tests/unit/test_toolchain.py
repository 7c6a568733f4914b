from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import stat
import threading
import time
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest

from pipeline.errors import InputError, IntegrityError, RefusedError, RemoteError
from pipeline.formats import toolchain_lock
from pipeline.formats.toolchain_lock import LOCK_FILE, Wheel, load_lock, toolchain_spec
from pipeline.lanework import toolchain
from pipeline.lanework.toolchain import fetch_wheel


def test_shipped_lock_pins_both_toolkits_for_both_platforms():
    lock = load_lock()
    for toolkit, nvcc in (("13.1", "13.1.115"), ("13.3", "13.3.73")):
        for platform in ("linux-x86_64", "windows-x86_64"):
            spec = toolchain_spec(toolkit, platform)
            names = {w.distribution for w in spec.wheels}
            assert names == {*toolchain.CUDA_DISTRIBUTIONS, *toolchain.TOOL_DISTRIBUTIONS}
            assert spec.cuda_version == nvcc
            assert all(w.url.startswith(toolchain_lock.PYPI_FILES) and len(w.sha256) == 64 for w in spec.wheels)
    assert lock["schema_version"] == 1


def _lock_with(tmp_path, mutate):
    lock = json.loads(LOCK_FILE.read_text())
    mutate(lock["toolkits"]["13.1"]["platforms"]["linux-x86_64"]["wheels"][0])
    path = tmp_path / "toolchain.lock.json"
    path.write_text(json.dumps(lock))
    return path


def test_lock_refuses_bad_hash_and_foreign_url(tmp_path):
    bad_hash = _lock_with(tmp_path, lambda w: w.update(sha256="ABC"))
    with pytest.raises(InputError, match="not 64 lowercase hex") as info:
        toolchain_spec("13.1", "linux-x86_64", lock_path=bad_hash)
    assert info.value.field.endswith("wheels[0].sha256")
    foreign = _lock_with(tmp_path, lambda w: w.update(url="https://example.com/nvcc.whl"))
    with pytest.raises(InputError, match="not a PyPI file URL"):
        toolchain_spec("13.1", "linux-x86_64", lock_path=foreign)
    with pytest.raises(InputError, match="no CUDA 12.9 toolchain"):
        toolchain_spec("12.9", "linux-x86_64")


class _Files(BaseHTTPRequestHandler):
    payload = b""

    def do_GET(self):  # noqa: N802
        if self.path != "/wheel.whl":
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.payload)))
        self.end_headers()
        self.wfile.write(self.payload)

    def log_message(self, *args):
        pass


@pytest.fixture
def file_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Files)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_wheel_bytes_must_match_the_pin(tmp_path, monkeypatch, file_server):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    _Files.payload = b"real wheel bytes" * 1000
    good = hashlib.sha256(_Files.payload).hexdigest()
    wheel = Wheel("nvidia-cuda-nvcc", "13.1.115", "w.whl", f"{file_server}/wheel.whl", good, len(_Files.payload))
    path = fetch_wheel(wheel)
    assert path.read_bytes() == _Files.payload
    # A cached file that was altered is re-fetched, not trusted.
    path.write_bytes(b"altered")
    assert fetch_wheel(wheel).read_bytes() == _Files.payload
    tampered = Wheel("nvidia-cuda-nvcc", "13.1.115", "t.whl", f"{file_server}/wheel.whl", "0" * 64, len(_Files.payload))
    with pytest.raises(IntegrityError, match="do not match the pin"):
        fetch_wheel(tampered)
    missing = Wheel("nvidia-cuda-nvcc", "13.1.115", "m.whl", f"{file_server}/absent.whl", good, 1)
    with pytest.raises(RemoteError, match="HTTP 404"):
        fetch_wheel(missing)


# -- a pinned toolchain folder is trusted only when it is ours and exactly the pinned files (issue 18, §3) ----------
#
# A small fake toolchain: three wheels (nvcc + cudart, cmake, ninja) whose tools are shell scripts printing the
# versions the lock pins, put in the wheel cache under their SHA-256, and a lock in tmp that pins them.

NVCC = b'#!/bin/sh\necho "Cuda compilation tools, release 13.1, V13.1.115"\n'
CMAKE = b"#!/bin/sh\necho 'cmake version 3.31.10'\n"
NINJA = b"#!/bin/sh\necho 1.13.0\n"


def _record_row(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _fake_wheel(cache: Path, distribution: str, version: str, files: dict[str, bytes]) -> dict:
    filename = f"{distribution.replace('-', '_')}-{version}-py3-none-manylinux2014_x86_64.whl"
    dist_info = f"{distribution.replace('-', '_')}-{version}.dist-info"
    members = {**files, f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {version}\n".encode()}
    record = "\n".join([*(_record_row(name, data) for name, data in members.items()), f"{dist_info}/RECORD,,"]) + "\n"
    members[f"{dist_info}/RECORD"] = record.encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in members.items():
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if data.startswith(b"#!") else 0o644) << 16
            archive.writestr(info, data)
    payload = buffer.getvalue()
    sha = hashlib.sha256(payload).hexdigest()
    target = cache / "omp-ninfer" / "wheels" / sha[:2] / sha / filename
    target.parent.mkdir(parents=True)
    target.write_bytes(payload)
    return {"distribution": distribution, "version": version, "filename": filename,
            "url": f"{toolchain_lock.PYPI_FILES}fake/{filename}", "sha256": sha, "size": len(payload)}


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """(spec, toolchain root folder, the folder provisioning makes); cache, key and toolchain root all under tmp."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    base = tmp_path / "toolchains"
    monkeypatch.setenv(toolchain.ROOT_VARIABLE, str(base))
    wheels = [
        _fake_wheel(cache, "nvidia-cuda-nvcc", "13.1.115", {"nvidia/cu13/bin/nvcc": NVCC, "nvidia/cu13/include/cuda.h": b"/* cuda */\n"}),
        _fake_wheel(cache, "nvidia-cuda-runtime", "13.1.80", {"nvidia/cu13/lib/libcudart.so.13": b"\x7fELF cudart\n"}),
        _fake_wheel(cache, "cmake", "3.31.10", {"cmake/data/bin/cmake": CMAKE}),
        _fake_wheel(cache, "ninja", "1.13.0", {"ninja-1.13.0.data/scripts/ninja": NINJA}),
    ]
    lock = {"artifact_type": toolchain_lock.LOCK_TYPE, "schema_version": 1, "toolkits": {"13.1": {"platforms": {"linux-x86_64": {
        "cuda_version": "13.1.115", "cuda_home": "nvidia/cu13", "cmake": "cmake/data/bin/cmake",
        "ninja": "ninja-1.13.0.data/scripts/ninja", "wheels": wheels}}}}}
    lock_path = tmp_path / "toolchain.lock.json"
    lock_path.write_text(json.dumps(lock))
    spec = toolchain_spec("13.1", "linux-x86_64", lock_path=lock_path)
    return spec, base, base / f"cuda-{spec.cuda_version}-{spec.platform}-{spec.digest[:12]}"


@pytest.fixture
def hashed(monkeypatch):
    """The files each check re-hashed, one list per call."""
    calls: list[list[Path]] = []
    real = toolchain.sha256_files

    def counting(paths, jobs=None):
        paths = list(paths)
        calls.append(paths)
        return real(paths, jobs)

    monkeypatch.setattr(toolchain, "sha256_files", counting)
    return calls


needs_root = pytest.mark.skipif(os.name == "nt" or os.geteuid() != 0, reason="giving a folder to another uid (os.chown to 65534) needs root")
posix_only = pytest.mark.skipif(os.name == "nt", reason="owners and mode bits are POSIX (Windows ACLs are not modelled)")


def _planted(root: Path, spec) -> Path:
    """A folder as another user (or a stale run) could leave it: the marker, and an nvcc that leaves a trace when run."""
    nvcc = root / "site" / "nvidia" / "cu13" / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    sentinel = root.parent / "nvcc-ran"
    nvcc.write_text(f"#!/bin/sh\ntouch {sentinel}\necho 'Cuda compilation tools, release 13.1, V13.1.115'\n")
    nvcc.chmod(0o755)
    (root / "toolchain.json").write_text(json.dumps({"digest": spec.digest, "spec": spec.to_json()}))
    return sentinel


def test_a_provisioned_toolchain_is_verified_and_a_warm_check_rehashes_nothing(fake, hashed):
    spec, base, root = fake
    tc = toolchain.provision(spec)
    assert tc.nvcc == root / "site" / "nvidia" / "cu13" / "bin" / "nvcc" and tc.description["nvcc_version"] == "13.1.115"
    state = root / toolchain.STATE_FILE
    assert state.exists() and stat.S_IMODE(state.stat().st_mode) == 0o600
    assert stat.S_IMODE(toolchain.state_key_path().stat().st_mode) == 0o600
    assert len(hashed[-1]) == 13  # every pinned file, once, after unpacking
    hashed.clear()
    started = time.perf_counter()
    toolchain.verify_toolchain_dir(root, spec)
    warm = time.perf_counter() - started
    assert hashed == [[]], "a warm check re-hashes no file whose inode, size, mtime and ctime are unchanged"
    assert warm < 1.0
    toolchain.provision(spec)  # 'already at': verified, not provisioned again
    assert hashed[-1] == []


def test_a_warm_check_needs_neither_the_wheels_nor_the_home_folder(fake, hashed, tmp_path, monkeypatch):
    """The acceptance runner gives each route a fresh HOME: the seal's key lives with the toolchains, not in ~/.cache."""
    spec, base, root = fake
    toolchain.provision(spec)
    assert toolchain.state_key_path() == base / "state.key"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "fresh-home" / ".cache"))
    monkeypatch.setattr(toolchain, "fetch_wheel", lambda wheel: pytest.fail(f"a warm check fetched {wheel.filename}"))
    hashed.clear()
    toolchain.provision(spec)
    assert hashed == [[]]


def test_a_marker_only_folder_is_refused_and_its_nvcc_never_runs(fake):
    spec, base, root = fake
    base.mkdir(mode=0o700)
    sentinel = _planted(root, spec)
    with pytest.raises(IntegrityError, match="lacks 12 pinned file") as info:
        toolchain.provision(spec)
    assert info.value.exit_code == 5 and "remove" in info.value.fix and toolchain.ROOT_VARIABLE in info.value.fix
    assert not sentinel.exists()
    # The same with every pinned file present but the planted nvcc: its bytes are not the lock's.
    (root / "site" / "nvidia" / "cu13" / "bin" / "nvcc").unlink()
    for wheel in spec.wheels:
        toolchain._extract_wheel(toolchain.fetch_wheel(wheel), root / "site")
    nvcc = root / "site" / "nvidia" / "cu13" / "bin" / "nvcc"
    nvcc.write_text(f"#!/bin/sh\ntouch {sentinel}\n")
    with pytest.raises(IntegrityError, match="differs from the lock's wheels") as info:
        toolchain.provision(spec)
    assert info.value.file == str(nvcc) and "sha256 " + hashlib.sha256(NVCC).hexdigest() in info.value.render()
    assert not sentinel.exists()


@needs_root
def test_a_folder_owned_by_another_user_is_refused(fake):
    spec, base, root = fake
    base.mkdir(mode=0o755)
    sentinel = _planted(root, spec)
    for path in (root, *root.rglob("*")):
        os.chown(path, 65534, 65534, follow_symlinks=False)
    with pytest.raises(RefusedError, match="is not yours") as info:
        toolchain.provision(spec)
    message = info.value.render()
    assert info.value.exit_code == 7 and info.value.file == str(root)
    assert "uid 65534" in message and "mode 0755" in message and "(you)" in message and "/var/tmp" in message
    assert f"remove {root}" in message and toolchain.ROOT_VARIABLE in message
    assert not sentinel.exists()


@needs_root
def test_a_toolchain_root_owned_by_another_user_is_refused_before_anything_is_unpacked(fake):
    spec, base, root = fake
    base.mkdir(mode=0o755)
    os.chown(base, 65534, 65534)
    with pytest.raises(RefusedError, match="toolchain root is not yours") as info:
        toolchain.provision(spec)
    assert info.value.file == str(base)
    assert list(base.iterdir()) == []


@needs_root
def test_a_file_inside_owned_by_another_user_is_refused(fake):
    spec, base, root = fake
    toolchain.provision(spec)
    os.chown(root / "site" / "nvidia" / "cu13" / "bin" / "nvcc", 65534, 65534)
    with pytest.raises(RefusedError, match="holds a file that is not yours"):
        toolchain.provision(spec)


@posix_only
def test_a_group_writable_folder_or_ancestor_is_refused(fake, tmp_path, monkeypatch):
    spec, base, root = fake
    toolchain.provision(spec)
    root.chmod(0o775)
    with pytest.raises(RefusedError, match="writable by group or others") as info:
        toolchain.provision(spec)
    assert info.value.file == str(root) and "mode 0775" in info.value.render()
    root.chmod(0o755)
    base.chmod(0o777)  # world-writable but not sticky: anyone could rename our folder away and put theirs
    with pytest.raises(RefusedError, match="writable by group or others") as info:
        toolchain.provision(spec)
    assert info.value.file == str(base)
    base.chmod(0o700)
    # An ancestor further up, group-writable, even with root-owned 0755 folders between it and the toolchain.
    shared = tmp_path / "shared"
    (shared / "deep").mkdir(parents=True)
    shared.chmod(0o775)
    monkeypatch.setenv(toolchain.ROOT_VARIABLE, str(shared / "deep" / "toolchains"))
    with pytest.raises(RefusedError, match="writable by group or others") as info:
        toolchain.provision(spec)
    assert info.value.file == str(shared)
    assert not (shared / "deep" / "toolchains").exists() or list((shared / "deep" / "toolchains").iterdir()) == []
    # A sticky world-writable folder above ours (as /var/tmp is) is fine.
    sticky = tmp_path / "vartmp"
    sticky.mkdir()
    sticky.chmod(0o1777)
    monkeypatch.setenv(toolchain.ROOT_VARIABLE, str(sticky / "omp-ninfer" / "toolchains"))
    tc = toolchain.provision(spec)
    assert stat.S_IMODE((sticky / "omp-ninfer").stat().st_mode) == 0o700
    assert tc.nvcc.is_file()


@posix_only
def test_a_symlinked_toolchain_root_must_be_ours_where_it_points(fake, tmp_path, monkeypatch):
    spec, base, root = fake
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    elsewhere.chmod(0o777)
    link = tmp_path / "link"
    link.symlink_to(elsewhere)
    monkeypatch.setenv(toolchain.ROOT_VARIABLE, str(link))
    with pytest.raises(RefusedError, match="writable by group or others") as info:
        toolchain.provision(spec)
    assert info.value.file == str(elsewhere)


@posix_only
def test_a_tampered_nvcc_is_refused_even_with_a_warm_cache(fake, hashed):
    spec, base, root = fake
    toolchain.provision(spec)
    nvcc = root / "site" / "nvidia" / "cu13" / "bin" / "nvcc"
    before = nvcc.stat()
    data = bytearray(nvcc.read_bytes())
    data[-2] ^= 0x01  # one byte, same size
    nvcc.write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match="differs from the lock's wheels"):
        toolchain.provision(spec)
    assert hashed[-1] == [nvcc]  # only the file whose stat changed was re-read
    # Its mtime put back as it was: the ctime (which no one can set) still tells.
    os.utime(nvcc, ns=(before.st_atime_ns, before.st_mtime_ns))
    with pytest.raises(IntegrityError, match="differs from the lock's wheels"):
        toolchain.verify_toolchain_dir(root, spec)
    # Put right (same bytes again): accepted, and the state learns the new stat.
    nvcc.write_bytes(NVCC)
    toolchain.verify_toolchain_dir(root, spec)
    hashed.clear()
    toolchain.verify_toolchain_dir(root, spec)
    assert hashed == [[]]


def _edit_state(root: Path, edit) -> None:
    state = root / toolchain.STATE_FILE
    seal, _, body = state.read_bytes().partition(b"\n")
    document = json.loads(body)
    edit(document)
    state.write_bytes(seal + b"\n" + json.dumps(document).encode())


@posix_only
def test_an_edited_state_file_is_not_trusted(fake, hashed, capsys):
    spec, base, root = fake
    toolchain.provision(spec)
    nvcc = root / "site" / "nvidia" / "cu13" / "bin" / "nvcc"
    nvcc.write_bytes(NVCC.replace(b"13.1", b"13.9"))
    tampered = nvcc.stat()
    rel = "nvidia/cu13/bin/nvcc"

    def vouch(document):  # record the tampered file's stat and hash, as if it had been checked
        document["files"][rel] = [tampered.st_ino, tampered.st_size, tampered.st_mtime_ns, tampered.st_ctime_ns, hashlib.sha256(nvcc.read_bytes()).hexdigest()]

    _edit_state(root, vouch)
    hashed.clear()
    with pytest.raises(IntegrityError, match="differs from the lock's wheels"):
        toolchain.verify_toolchain_dir(root, spec)
    assert "seal does not verify" in capsys.readouterr().err
    assert len(hashed[-1]) == 13  # a cold check: the pins were read from the wheels again, every file re-hashed
    nvcc.write_bytes(NVCC)
    toolchain.verify_toolchain_dir(root, spec)
    # A state file sealed under another key (another user's, or a copied folder's) is not trusted either.
    toolchain.state_key_path().unlink()
    hashed.clear()
    toolchain.verify_toolchain_dir(root, spec)
    assert len(hashed[-1]) == 13
    # Nor one that is garbage, nor one writable by others: the check is then a cold one, and it still passes.
    (root / toolchain.STATE_FILE).write_bytes(b"\x00not a state\n{")
    hashed.clear()
    toolchain.verify_toolchain_dir(root, spec)
    assert len(hashed[-1]) == 13
    (root / toolchain.STATE_FILE).chmod(0o666)
    hashed.clear()
    toolchain.verify_toolchain_dir(root, spec)
    assert len(hashed[-1]) == 13 and "not a private file of yours" in capsys.readouterr().err


@posix_only
def test_a_key_that_is_not_private_is_not_used(fake, hashed, capsys):
    spec, base, root = fake
    toolchain.provision(spec)
    toolchain.state_key_path().chmod(0o644)
    hashed.clear()
    toolchain.verify_toolchain_dir(root, spec)
    toolchain.verify_toolchain_dir(root, spec)
    assert [len(paths) for paths in hashed] == [13, 13]
    assert "is not a private 32-byte file of yours" in capsys.readouterr().err


def test_a_planted_file_or_link_inside_is_refused(fake):
    spec, base, root = fake
    toolchain.provision(spec)
    evil = root / "site" / "nvidia" / "cu13" / "lib" / "libevil.so"
    evil.write_bytes(b"\x7fELF evil\n")
    with pytest.raises(IntegrityError, match="1 file\\(s\\) no pinned wheel ships") as info:
        toolchain.provision(spec)
    assert info.value.file == str(evil)
    evil.unlink()
    (root / "site" / "nvidia" / "cu13" / "lib" / "libcuda.so.1").symlink_to("/tmp/anything")
    with pytest.raises(IntegrityError, match="a link provisioning does not make"):
        toolchain.provision(spec)


# -- the canonical build root (stages/build.py: lane_lock) -----------------------------------------------------------

@pytest.fixture
def build_root(tmp_path, monkeypatch):
    from pipeline.stages import build

    monkeypatch.setattr(build, "CANONICAL_ROOT", tmp_path / "omp-ninfer")
    return build, SimpleNamespace(id="lane-x"), tmp_path / "omp-ninfer"


@posix_only
def test_the_build_root_is_made_private(build_root):
    build, lane, canonical = build_root
    with build.lane_lock(lane):
        pass
    for folder in (canonical, canonical / "build", canonical / "build" / "lane-x"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    with build.lane_lock(lane):  # an existing private one is used as is
        pass


@posix_only
def test_a_group_writable_build_root_is_refused(build_root):
    build, lane, canonical = build_root
    (canonical / "build" / "lane-x").mkdir(parents=True)
    (canonical / "build").chmod(0o775)
    with pytest.raises(RefusedError, match="canonical build root is not private") as info, build.lane_lock(lane):
        pytest.fail("the lane lock was taken in a folder others can write to")
    assert info.value.file == str(canonical / "build") and "remove the folder" in info.value.fix
    assert not (canonical / "build" / "lane-x.lock").exists()


@needs_root
def test_a_build_root_owned_by_another_user_is_refused(build_root):
    build, lane, canonical = build_root
    (canonical / "build" / "lane-x").mkdir(parents=True)
    os.chown(canonical / "build" / "lane-x", 65534, 65534)
    with pytest.raises(RefusedError, match="canonical build root is not yours") as info, build.lane_lock(lane):
        pytest.fail("the lane lock was taken in a folder another user owns")
    assert info.value.file == str(canonical / "build" / "lane-x") and "uid 65534" in info.value.render()


def test_two_processes_provisioning_one_toolchain_take_turns(fake, monkeypatch):
    # pytest-xdist workers on a fresh machine: two at once wrote into one wheel's .part, and the second's
    # folder replaced (and deleted) the first's while it was in use.
    spec, base, root = fake
    unpacked: list[str] = []
    real = toolchain._extract_wheel
    start = threading.Barrier(2)

    def slow_extract(path, destination):
        unpacked.append(path.name)
        time.sleep(0.05)
        return real(path, destination)

    monkeypatch.setattr(toolchain, "_extract_wheel", slow_extract)
    results: list[object] = []

    def provision() -> None:
        start.wait()
        try:
            results.append(toolchain.provision(spec).nvcc)
        except Exception as exc:  # noqa: BLE001 - asserted below
            results.append(exc)

    threads = [threading.Thread(target=provision) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert results == [root / "site" / "nvidia" / "cu13" / "bin" / "nvcc"] * 2
    assert sorted(unpacked) == sorted(w.filename for w in spec.wheels), "the second found the first's toolchain, and unpacked nothing"
