"""Bounded downloads and the shared HTTP rules (pipeline/infra/net.py, pipeline/transfer.py).

Against a hostile server on 127.0.0.1 (tests/kits/hostile_http.py): bodies over
the pin or the cap, endless and slow-drip streams, redirects across origins
and schemes, a gzip-encoded answer that inflates without end.  Every refusal
asserts its reason, how long it took and that no rejected byte is left on
disk; the server's own byte count shows the client stopped reading.
"""

from __future__ import annotations

import gzip
import hashlib

import pytest
import requests
from hostile_http import Route, hostile_server, timed

from pipeline.errors import InputError, IntegrityError, RemoteError
from pipeline.infra import net, transfer
from pipeline.infra import registry as oci_registry

PIN = 1024


def leftovers(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


# -- loopback, schemes, redirects ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("127.255.255.254", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("LOCALHOST", True),
        ("127.attacker.com", False),  # a host name that merely starts with "127."
        ("127.0.0.1.nip.io", False),
        ("127.example", False),
        ("127.1", False),  # inet_aton's short form is a name to ipaddress: fail closed
        ("128.0.0.1", False),
        ("0.0.0.0", False),
        ("::", False),
        ("::ffff:127.0.0.1", False),
        ("10.0.0.1", False),
        ("localhost.attacker.com", False),
        ("", False),
        (None, False),
    ],
)
def test_loopback_is_decided_by_ip_address_not_by_prefix(host, expected):
    assert net.is_loopback(host) is expected


def test_a_name_is_not_loopback_where_only_addresses_count():
    assert net.is_loopback("localhost", allow_name=False) is False
    assert net.is_loopback("127.0.0.1", allow_name=False) is True
    assert net.is_loopback("::1", allow_name=False) is True


@pytest.mark.parametrize(
    ("authority", "expected"),
    [("127.0.0.1:5000", True), ("[::1]:5000", True), ("localhost:5000", True), ("127.attacker.com:5000", False), ("127.attacker.com", False), ("ghcr.io", False)],
)
def test_registry_hosts_use_the_same_rule(authority, expected):
    assert net.authority_is_loopback(authority) is expected
    assert oci_registry.parse_push_target(f"{authority}/alphastorm/ninfer-runtime").plain_http is expected
    assert oci_registry.parse_repository(f"{authority}/nvidia/cuda", origin="lane.toml", field_name="base").plain_http is expected


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("https://github.com/a/b", None),
        ("http://127.0.0.1:8080/a", None),
        ("http://[::1]:8080/a", None),
        ("http://localhost/a", None),
        ("http://127.attacker.com/a", "plain HTTP is not accepted"),
        ("http://198.51.100.7/a", "plain HTTP is not accepted"),
        ("ftp://127.0.0.1/a", "is not an HTTPS URL (scheme 'ftp')"),
        ("file:///etc/passwd", "is not an HTTPS URL (scheme 'file')"),
        ("https://user:secret@github.com/a", "carries credentials"),
        ("https:///a", "names no host"),
    ],
)
def test_the_scheme_rule(url, problem):
    found = net.scheme_problem(url)
    assert (found is None) if problem is None else (found is not None and found.startswith(problem))


@pytest.mark.parametrize(
    ("first", "target", "problem"),
    [
        ("http://127.0.0.1:8000/a", "http://127.0.0.1:8000/b", None),
        ("http://127.0.0.1:8000/a", "http://127.0.0.1:8001/b", "it leaves the origin"),
        ("http://127.0.0.1:8000/a", "http://localhost:8000/b", "it leaves the origin"),
        ("http://127.0.0.1:8000/a", "https://127.0.0.1:8000/b", "it changes the scheme from http to https"),
        ("https://github.com/o/r/releases/download/v1/f", "http://github.com/o/r/f", "it changes the scheme from https to http"),
        ("https://github.com/o/r/releases/download/v1/f", "https://release-assets.githubusercontent.com/x", None),
        ("https://github.com/o/r/releases/download/v1/f", "https://objects.githubusercontent.com/x", None),
        ("https://github.com/o/r/releases/download/v1/f", "https://githubusercontent.com.attacker.com/x", "it leaves the origin"),
        ("https://github.com/o/r/releases/download/v1/f", "https://attacker.com/x", "it leaves the origin"),
        ("https://huggingface.co/o/m/resolve/abc/f", "https://cas-bridge.xethub.hf.co/x", None),
        ("https://huggingface.co/o/m/resolve/abc/f", "https://cdn-lfs-us-1.hf.co/x", None),
        ("https://raw.githubusercontent.com/o/r/c/f", "https://objects.githubusercontent.com/x", "it leaves the origin"),
        ("https://example.org/a", "ftp://example.org/a", "it changes the scheme"),
    ],
)
def test_redirect_rules(first, target, problem):
    found = net.redirect_problem(first, target, "same-origin")
    assert (found is None) if problem is None else (found is not None and found.startswith(problem)), found
    assert net.redirect_problem(first, target, "none") is not None  # the manifest follows none


# -- pinned and unpinned bodies -----------------------------------------------------------------


def test_an_honest_content_length_over_the_pin_is_refused_before_reading(tmp_path):
    with hostile_server() as server:
        url = server.add("/asset", Route("body", body=b"z" * (300 * 1024)))
        error, seconds = timed(lambda: transfer.download(url, tmp_path / "asset", expected_size=PIN, progress=False, timeout=5))
    assert isinstance(error, IntegrityError) and f"more than the {PIN} bytes pinned" in error.what
    assert leftovers(tmp_path) == [], "rejected bytes must not stay on disk"
    assert seconds < 3


def test_an_endless_stream_stops_at_the_pin(tmp_path):
    with hostile_server() as server:
        url = server.add("/asset", Route("endless"))  # no Content-Length: only the running count can stop it
        error, seconds = timed(lambda: transfer.download(url, tmp_path / "asset", expected_size=PIN, progress=False, timeout=5))
        sent = server.sent.get("/asset", 0)
    assert isinstance(error, IntegrityError) and f"more than the {PIN} bytes pinned" in error.what
    assert leftovers(tmp_path) == []
    assert seconds < 5
    assert sent < 32 * 1024 * 1024, f"the client kept reading: the server wrote {sent} bytes"


def test_an_endless_unpinned_stream_stops_at_its_cap(tmp_path):
    cap = 64 * 1024
    with hostile_server() as server:
        url = server.add("/manifest.json", Route("endless"))
        error, seconds = timed(lambda: transfer.download(url, tmp_path / "manifest.json", max_size=cap, progress=False, timeout=5, resume=False))
    assert isinstance(error, RemoteError) and f"larger than the {cap} bytes allowed" in error.what
    assert leftovers(tmp_path) == []
    assert seconds < 5


def test_an_unpinned_download_needs_a_cap(tmp_path):
    with pytest.raises(ValueError, match="max_size"):
        transfer.download("http://127.0.0.1:9/x", tmp_path / "x", progress=False)


def test_a_gzip_encoded_answer_is_counted_as_it_inflates(tmp_path):
    bomb = gzip.compress(bytes(64 * 1024 * 1024), mtime=0)  # 64 MiB of zeros in about 64 KiB
    with hostile_server() as server:
        url = server.add("/asset", Route("body", body=bomb, headers={"Content-Encoding": "gzip"}))
        error, seconds = timed(lambda: transfer.download(url, tmp_path / "asset", expected_size=PIN, progress=False, timeout=5))
    assert isinstance(error, IntegrityError) and f"more than the {PIN} bytes pinned" in error.what
    assert leftovers(tmp_path) == [] and seconds < 5


def test_a_pinned_file_of_the_right_size_still_arrives(tmp_path):
    data = hashlib.sha256(b"seed").digest() * 4096  # 128 KiB
    with hostile_server() as server:
        url = server.add("/asset", Route("body", body=data))
        result = transfer.download(url, tmp_path / "asset", expected_size=len(data), progress=False, timeout=5)
    assert result.sha256 == hashlib.sha256(data).hexdigest() and (tmp_path / "asset").read_bytes() == data
    assert leftovers(tmp_path) == ["asset"]


# -- time: idle timeout and overall deadline -----------------------------------------------------


def test_a_slow_drip_on_a_pinned_file_is_cut_at_the_deadline(tmp_path):
    with hostile_server() as server:
        # One byte every 0.25 s never trips the idle timeout; 1 KiB would take over four minutes.
        url = server.add("/asset", Route("drip", interval=0.25, length=PIN))
        error, seconds = timed(lambda: transfer.download(url, tmp_path / "asset", expected_size=PIN, progress=False, timeout=1.5, retries=0))
    assert isinstance(error, RemoteError) and "ran past its deadline" in error.what, error
    assert 1.4 <= seconds < 4.0, seconds
    assert not (tmp_path / "asset").exists()
    part = tmp_path / "asset.part"
    assert not part.exists() or part.stat().st_size <= PIN  # a valid prefix of a pinned file may be resumed


def test_a_slow_drip_on_an_unpinned_document_is_cut_and_deleted(tmp_path):
    with hostile_server() as server:
        url = server.add("/manifest.json", Route("drip", interval=0.2))
        error, seconds = timed(lambda: transfer.download(url, tmp_path / "manifest.json", max_size=4 << 20, progress=False, timeout=1.0, resume=False))
    assert isinstance(error, RemoteError) and "ran past its deadline" in error.what
    assert 0.9 <= seconds < 3.0, seconds
    assert leftovers(tmp_path) == []


def test_a_slow_drip_on_a_large_pinned_file_is_cut_after_about_the_timeout(tmp_path):
    # A 1 GiB pin may take hours at the floor rate, but a drip earns no time: the deadline moves
    # only with the bytes that arrive (timeout + received / DEADLINE_FLOOR_RATE).
    with hostile_server() as server:
        url = server.add("/model", Route("drip", interval=0.1, length=1 << 30))
        error, seconds = timed(lambda: transfer.download(url, tmp_path / "model", expected_size=1 << 30, progress=False, timeout=1.5, retries=0))
    assert isinstance(error, RemoteError) and "ran past its deadline" in error.what, error
    assert 1.4 <= seconds < 4.0, seconds


def test_the_deadline_grows_with_the_pinned_size_and_with_progress_only():
    floor = net.DEADLINE_FLOOR_RATE
    assert net.deadline_for(60, None) == 60
    assert net.deadline_for(60, 20 * 1024**3) == 60 + 20 * 1024**3 / floor
    paced = net.paced_deadline(100.0, 60, ends=100.0 + net.deadline_for(60, 10 * floor))
    assert paced(0) == 160.0 and paced(5 * floor) == 165.0 and paced(50 * floor) == 170.0  # never past the pin's bound


# -- redirects -----------------------------------------------------------------------------------


def test_a_same_origin_redirect_is_followed_for_a_pinned_file(tmp_path):
    data = b"pinned bytes\n"
    with hostile_server() as server:
        server.add("/real", Route("body", body=data))
        url = server.add("/asset", Route("redirect", status=302, location="/real"))
        result = transfer.download(url, tmp_path / "asset", expected_size=len(data), progress=False, timeout=5)
    assert (tmp_path / "asset").read_bytes() == data and result.size == len(data)


def test_a_cross_origin_redirect_is_refused_and_never_fetched(tmp_path):
    with hostile_server() as server, hostile_server() as other:
        other.add("/evil", Route("body", body=b"x" * PIN))
        url = server.add("/asset", Route("redirect", status=302, location=other.url("/evil")))
        error, _ = timed(lambda: transfer.download(url, tmp_path / "asset", expected_size=PIN, progress=False, timeout=5))
        assert other.requests == [], "the other origin must not even be asked"
    assert isinstance(error, RemoteError) and "refused to follow the redirect" in error.what and "leaves the origin" in error.why
    assert leftovers(tmp_path) == []


def test_a_scheme_changing_redirect_is_refused(tmp_path):
    with hostile_server() as server:
        url = server.add("/asset", Route("redirect", status=301, location=f"https://127.0.0.1:{server.port}/asset"))
        error, _ = timed(lambda: transfer.download(url, tmp_path / "asset", expected_size=PIN, progress=False, timeout=5))
    assert isinstance(error, RemoteError) and "changes the scheme from http to https" in error.why


def test_a_document_fetched_without_redirects_refuses_even_a_same_origin_one(tmp_path):
    with hostile_server() as server:
        server.add("/real.json", Route("body", body=b"{}"))
        url = server.add("/manifest.json", Route("redirect", status=302, location="/real.json"))
        error, _ = timed(lambda: transfer.download(url, tmp_path / "m.json", max_size=4096, progress=False, timeout=5, redirects="none", resume=False))
        assert "/real.json" not in server.requests
    assert isinstance(error, RemoteError) and "redirects are not followed" in error.why


def test_a_redirect_loop_ends(tmp_path):
    with hostile_server() as server:
        url = server.add("/a", Route("redirect", status=302, location="/b"))
        server.add("/b", Route("redirect", status=302, location="/a"))
        error, seconds = timed(lambda: transfer.download(url, tmp_path / "a", expected_size=PIN, progress=False, timeout=5))
        hops = len(server.requests)
    assert isinstance(error, RemoteError) and f"more than {net.MAX_REDIRECTS} redirects" in error.what
    assert hops == net.MAX_REDIRECTS + 1 and seconds < 3


# -- small documents and clients whose requests a library makes -----------------------------------------


def test_fetch_bytes_caps_a_small_document():
    with hostile_server() as server:
        url = server.add("/token", Route("endless"))
        error, seconds = timed(lambda: net.fetch_bytes(requests.Session(), url, cap=4096, timeout=5, what="a token answer"))
    assert isinstance(error, RemoteError) and "larger than the 4096 bytes allowed for a token answer" in error.what and seconds < 5


def test_the_bounded_adapter_caps_unstreamed_answers_and_keeps_one_scheme():
    session = requests.Session()
    adapter = net.bounded_adapter(cap=4096, timeout=5, scheme="http")
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    with hostile_server() as server:
        small = server.add("/small", Route("body", body=b"{}"))
        big = server.add("/big", Route("endless"))
        hop = server.add("/hop", Route("redirect", status=302, location=f"https://127.0.0.1:{server.port}/small"))
        assert session.get(small).content == b"{}"
        with pytest.raises(RemoteError, match="larger than the 4096 bytes"):
            session.get(big)
        with pytest.raises(RemoteError, match="refused a request to https"):
            session.get(hop)


def _bearer_registry(server, token_answer: bytes) -> str:
    realm = server.url("/token")
    challenge = {"WWW-Authenticate": f'Bearer realm="{realm}",service="test",scope="repository:a/b:pull"'}
    server.add("/v2/", Route("body", status=401, body=b'{"errors":[]}', headers=challenge))
    server.add("/v2/a/b/manifests/latest", Route("body", status=401, body=b'{"errors":[]}', headers=challenge))
    server.add("/token", Route("body", body=token_answer))
    return f"127.0.0.1:{server.port}/a/b"


@pytest.mark.parametrize(
    ("answer", "what"),
    [
        (b'["token"]', "must hold a JSON object"),
        (b'{"token": "a", "token": "b"}', "holds the key 'token' twice"),
        (b'{"token": NaN}', "non-finite number NaN"),
        (b'{"token": 42}', "answered a token that is not a string"),
        (b'{"token": ' + b"[" * 200 + b"]" * 200 + b"}", "nests arrays or objects deeper than"),
    ],
)
def test_the_registry_clients_token_answer_is_read_strictly(answer, what):
    with hostile_server() as server:
        target = oci_registry.parse_push_target(_bearer_registry(server, answer))
        client = oci_registry.RegistryClient(target, credentials=None, retries=0, sleep=lambda s: None)
        with pytest.raises(InputError) as caught:
            client.get_manifest("latest")
    assert what in caught.value.what and "token service" in caught.value.render()


def test_the_registry_clients_token_answer_is_capped():
    with hostile_server() as server:
        registry = _bearer_registry(server, b"")
        server.add("/token", Route("endless"))
        client = oci_registry.RegistryClient(oci_registry.parse_push_target(registry), credentials=None, retries=0, sleep=lambda s: None)
        error, seconds = timed(lambda: client.get_manifest("latest"))
        sent = server.sent.get("/token", 0)
    assert isinstance(error, RemoteError) and f"larger than the {oci_registry.MAX_ANSWER_BYTES} bytes" in error.what
    assert sent < 64 * 1024 * 1024 and seconds < 10


@pytest.mark.parametrize("challenge", ["Bearer ", 'Bearer service="test",scope="repository:a/b:pull"'])
def test_a_bearer_challenge_without_a_realm_is_a_remote_error(challenge):
    # Found by the registry-client fuzzer (tests/fuzz, target 'registry_client'): oras-py's token
    # backend called .startswith on the missing realm, an AttributeError (internal error) in push and image.
    with hostile_server() as server:
        headers = {"WWW-Authenticate": challenge}
        server.add("/v2/", Route("body", status=401, body=b'{"errors":[]}', headers=headers))
        server.add("/v2/a/b/manifests/latest", Route("body", status=401, body=b'{"errors":[]}', headers=headers))
        client = oci_registry.RegistryClient(oci_registry.parse_push_target(f"127.0.0.1:{server.port}/a/b"), credentials=None, retries=0, sleep=lambda s: None)
        with pytest.raises(RemoteError) as caught:
            client.get_manifest("latest")
    assert "bearer challenge names no token service" in caught.value.what and caught.value.field == "WWW-Authenticate"


def test_a_redirect_to_an_invalid_url_is_a_remote_error(tmp_path):
    # requests (parsing the Location even with allow_redirects=False) and urljoin raised a bare
    # ValueError ("Invalid IPv6 URL") for a Location with an unbalanced '[', an internal error of
    # every download (found in review of the redirect path after the manifest fuzzer's urlsplit crash).
    with hostile_server() as server:
        url = server.add("/asset", Route("redirect", status=302, location="http://[::1/x"))
        error, _ = timed(lambda: transfer.download(url, tmp_path / "asset", expected_size=PIN, progress=False, timeout=5))
    assert isinstance(error, RemoteError) and "redirected" in error.what and "invalid URL" in error.what
    assert not (tmp_path / "asset").exists() and not (tmp_path / "asset.part").exists()


@pytest.mark.parametrize("url", ["http://[", "https://[::1/x", "https://host:99999999999999999999/x"])
def test_the_url_rules_answer_for_every_string(url):
    # Found by the manifest fuzzer: urlsplit raises ValueError for these, which made check_scheme
    # (every URL of a manifest goes through it) an internal error instead of a refused location.
    problem = net.scheme_problem(url)
    assert problem is None or isinstance(problem, str)
    if "[" in url and "]" not in url:
        assert problem.startswith("is not a valid URL")
    assert net.origin("http://[") == ("", "", None)
