from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pipeline.errors import InputError, IntegrityError, RemoteError
from pipeline.infra import toolchain
from pipeline.infra.toolchain import LOCK_FILE, Wheel, fetch_wheel, load_lock, toolchain_spec


def test_shipped_lock_pins_both_toolkits_for_both_platforms():
    lock = load_lock()
    for toolkit, nvcc in (("13.1", "13.1.115"), ("13.3", "13.3.73")):
        for platform in ("linux-x86_64", "windows-x86_64"):
            spec = toolchain_spec(toolkit, platform)
            names = {w.distribution for w in spec.wheels}
            assert names == {*toolchain.CUDA_DISTRIBUTIONS, *toolchain.TOOL_DISTRIBUTIONS}
            assert spec.cuda_version == nvcc
            assert all(w.url.startswith(toolchain.PYPI_FILES) and len(w.sha256) == 64 for w in spec.wheels)
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
