"""sigstore-js (@sigstore/verify, tools/node/verify-sigstore-bundle.cjs) verifies what the stand-in signs.

The Sigstore stand-in (tests/kits/sigstore_standin.py) must make bundles any conforming verifier
accepts, not only sigstore-python: every kind it makes (message signatures, DSSE) is verified here by
both verifiers from the same bytes.  The harness is shown able to fail: it accepts the real bundles of
the vendored vectors (tests/fixtures/sigstore-vectors/) and refuses the negative ones, each for its
own reason (the error code sigstore-js gives).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import urllib.parse
from pathlib import Path

import pytest
from repokit import SIGSTORE_VECTORS
from sigstore_js import verify_js
from sigstore_standin import SigstoreStandIn

from pipeline.formats import provenance as slsa
from pipeline.infra import sigstore as sg

IDENTITY = "https://github.com/alphastorm/omp-ninfer/.github/workflows/release.yml@refs/tags/v0.13.2"
ISSUER = "https://token.actions.githubusercontent.com"
GH_SAN = "https://github.com/trailofbits/rfc8785.py/.github/workflows/release.yml@refs/tags/v0.1.2"
ARTIFACT = b"a release manifest\n" * 10
PRODUCTION = SIGSTORE_VECTORS / "production-trust-config.json"
STAGING = SIGSTORE_VECTORS / "staging-trust-config.json"


@pytest.fixture(scope="module")
def kit(tmp_path_factory) -> SigstoreStandIn:
    return SigstoreStandIn(tmp_path_factory.mktemp("sigstore-standin"), identity=IDENTITY).write()


@pytest.fixture(scope="module")
def signed(kit, tmp_path_factory) -> dict[str, Path]:
    """One bundle of each kind the stand-in makes, as files (the artefact beside its message bundle)."""
    folder = tmp_path_factory.mktemp("signed")
    artifact = folder / "manifest.json"
    artifact.write_bytes(ARTIFACT)
    statement = slsa.statement_bytes(slsa.statement(  # a set's SLSA provenance, as sign signs it
        subjects={"SHA256SUMS": "a" * 64}, build_type=slsa.BUILD_TYPE_SET,
        external={"lane": "rtx4090-windows-native", "component_tag": "v0.7.0-qwen38-4090-beta.2", "source_repository": "https://x/y.git", "source_commit": "c" * 40},
        internal={}, dependencies=[slsa.descriptor("source-commit", digest={"gitCommit": "c" * 40})], byproducts=[], run_details=slsa.builder({})))
    (folder / "statement.json").write_bytes(statement)
    (folder / "manifest.json.sigstore.json").write_bytes(kit.sign_artifact(ARTIFACT).to_bytes())
    (folder / "statement.json.sigstore.json").write_bytes(kit.sign_dsse(statement).to_bytes())
    return {"artifact": artifact, "message": folder / "manifest.json.sigstore.json",
            "statement": folder / "statement.json", "dsse": folder / "statement.json.sigstore.json"}


# -- the vendored vectors: intact, and the harness accepts and refuses them ---------------------


def test_the_vendored_vectors_are_the_files_their_readme_names():
    readme = (SIGSTORE_VECTORS / "README.md").read_text("utf-8")
    listed = dict(re.findall(r"^\| (\S+) \| ([0-9a-f]{64}) \|$", readme, flags=re.MULTILINE))
    present = {p.name for p in SIGSTORE_VECTORS.iterdir()} - {"README.md", "LICENSE.sigstore-python"}
    assert set(listed) == present and len(present) == 12
    for name, digest in listed.items():
        assert hashlib.sha256((SIGSTORE_VECTORS / name).read_bytes()).hexdigest() == digest, name
    assert "Apache License" in (SIGSTORE_VECTORS / "LICENSE.sigstore-python").read_text("utf-8")


@pytest.mark.parametrize(
    ("artifact", "bundle", "trust", "identity", "issuer"),
    [
        ("bundle_v3_github.whl", "bundle_v3_github.whl.sigstore", PRODUCTION, GH_SAN, ISSUER),
        ("bundle_v3.txt", "bundle_v3.txt.sigstore", STAGING, "william@yossarian.net", "https://github.com/login/oauth"),
        ("staging-rekor-v2.txt", "staging-rekor-v2.txt.sigstore.json", STAGING, "jku@goto.fi", "https://github.com/login/oauth"),
    ],
)
def test_sigstore_js_accepts_the_real_vectors(artifact, bundle, trust, identity, issuer):
    answer = verify_js(SIGSTORE_VECTORS / bundle, trust, artifact=SIGSTORE_VECTORS / artifact, identity=identity, issuer=issuer)
    assert answer == {"ok": True, "identity": identity, "issuer": issuer}


@pytest.mark.parametrize(
    ("artifact", "bundle", "trust", "code", "message"),
    [
        # CVE-2022-36056: the log entry's body does not carry the bundle's signature
        ("bundle_cve_2022_36056.txt", "bundle_cve_2022_36056.txt.sigstore", STAGING, "TLOG_BODY_ERROR", "signature mismatch"),
        # no transparency-log entry and no timestamp: nothing vouches for when the certificate was used
        ("bundle_no_log_entry.txt", "bundle_no_log_entry.txt.sigstore", STAGING, "TIMESTAMP_ERROR", "expected 1 timestamps, got 0"),
        # a real production bundle is not trusted by the staging root
        ("bundle_v3_github.whl", "bundle_v3_github.whl.sigstore", STAGING, "CERTIFICATE_ERROR", "Failed to verify certificate chain"),
        # another artefact under a real bundle
        ("bundle_v3.txt", "bundle_v3_github.whl.sigstore", PRODUCTION, "SIGNATURE_ERROR", "signature verification failed"),
    ],
)
def test_sigstore_js_refuses_the_negative_vectors_for_their_own_reason(artifact, bundle, trust, code, message):
    answer = verify_js(SIGSTORE_VECTORS / bundle, trust, artifact=SIGSTORE_VECTORS / artifact)
    assert (answer["ok"], answer["code"], answer["message"]) == (False, code, message)


def test_sigstore_js_refuses_another_signer():
    answer = verify_js(SIGSTORE_VECTORS / "bundle_v3_github.whl.sigstore", PRODUCTION, artifact=SIGSTORE_VECTORS / "bundle_v3_github.whl",
                       identity=IDENTITY, issuer=ISSUER)
    assert (answer["ok"], answer["code"]) == (False, "UNTRUSTED_SIGNER_ERROR")
    assert GH_SAN in answer["message"]


# -- the stand-in's bundles: both verifiers accept every kind ------------------------------------


def test_a_stand_in_message_bundle_verifies_with_sigstore_js_and_sigstore_python(kit, signed):
    answer = verify_js(signed["message"], kit.trust_config_path, artifact=signed["artifact"], identity=IDENTITY, issuer=ISSUER)
    assert answer == {"ok": True, "identity": IDENTITY, "issuer": ISSUER}
    verified = sg.verify_bundle(signed["artifact"], signed["message"], identity=IDENTITY, issuer=ISSUER, trust_config=kit.trust_config_path)
    assert verified.identity == IDENTITY


def test_a_stand_in_dsse_bundle_verifies_with_sigstore_js_and_sigstore_python(kit, signed):
    answer = verify_js(signed["dsse"], kit.trust_config_path, identity=IDENTITY, issuer=ISSUER)
    assert answer == {"ok": True, "identity": IDENTITY, "issuer": ISSUER}
    verified = sg.verify_dsse_bundle(signed["statement"].read_bytes(), signed["dsse"].read_bytes(), identity=IDENTITY, issuer=ISSUER,
                                     trust_config=kit.trust_config_path)
    assert verified.identity == IDENTITY


def test_the_checkpoint_is_signed_as_the_host_of_the_logs_base_url(kit, signed):
    """Rekor's checkpoint origin and signer name are its base URL's host (rekor.sigstore.dev - <tree id>)."""
    trusted_root = json.loads(kit.trust_config_path.read_bytes())["trustedRoot"]
    (tlog,) = trusted_root["tlogs"]
    host = urllib.parse.urlsplit(tlog["baseUrl"]).hostname
    for kind in ("message", "dsse"):
        envelope = json.loads(signed[kind].read_bytes())["verificationMaterial"]["tlogEntries"][0]["inclusionProof"]["checkpoint"]["envelope"]
        note, signature_lines = envelope.split("\n\n", 1)
        assert note.split("\n")[0].startswith(f"{host} - ")
        (line,) = signature_lines.splitlines()
        name, keyed = line.removeprefix("\u2014 ").split(" ")
        assert name == host
        assert base64.b64decode(keyed)[:4] == base64.b64decode(tlog["logId"]["keyId"])[:4]


def test_sigstore_js_refuses_a_checkpoint_signed_under_another_name(kit, signed, tmp_path):
    """The check the stand-in used to fail: a checkpoint whose signer name the log's base URL does not match."""
    document = json.loads(signed["message"].read_bytes())
    proof = document["verificationMaterial"]["tlogEntries"][0]["inclusionProof"]
    note, signature = proof["checkpoint"]["envelope"].split("\n\n", 1)
    name = signature.removeprefix("\u2014 ").split(" ")[0]
    proof["checkpoint"]["envelope"] = note + "\n\n" + signature.replace(f"\u2014 {name} ", "\u2014 rekor.elsewhere.test ", 1)
    (tmp_path / "renamed.sigstore.json").write_text(json.dumps(document))
    answer = verify_js(tmp_path / "renamed.sigstore.json", kit.trust_config_path, artifact=signed["artifact"])
    assert (answer["ok"], answer["code"], answer["message"]) == (False, "TLOG_INCLUSION_PROOF_ERROR", "invalid checkpoint signature")


def test_sigstore_js_refuses_a_stand_in_bundle_under_production_and_a_changed_byte(kit, signed, tmp_path):
    answer = verify_js(signed["message"], PRODUCTION, artifact=signed["artifact"])
    assert (answer["ok"], answer["code"]) == (False, "CERTIFICATE_ERROR")
    changed = tmp_path / "manifest.json"
    changed.write_bytes(b"A" + ARTIFACT[1:])
    answer = verify_js(signed["message"], kit.trust_config_path, artifact=changed)
    assert (answer["ok"], answer["code"]) == (False, "SIGNATURE_ERROR")


def test_a_github_style_release_attestation_verifies_with_sigstore_js_on_its_timestamp_alone(tmp_path):
    """The third kind of bundle the kits make (tests/kits/github_attestation_standin.py): no log entry, no SCT, an
    RFC 3161 timestamp.  sigstore-js verifies it with no log and no SCT required, and refuses it otherwise."""
    from github_attestation_standin import RELEASES_SAN, GitHubAttestationStandIn

    kit = GitHubAttestationStandIn(tmp_path / "github").write()
    root = tmp_path / "github-root.json"
    root.write_bytes(kit.trusted_root_path.read_bytes())  # one trusted root: the .jsonl's only line
    bundle = tmp_path / "release.sigstore.json"
    bundle.write_bytes(kit.attest_release(repository="alphastorm/omp-ninfer", tag="v0.13.2", commit="a" * 40, assets={"SHA256SUMS": "b" * 64}))
    timestamp_only = {"tlog_threshold": 0, "ctlog_threshold": 0}
    assert verify_js(bundle, root, identity=RELEASES_SAN, **timestamp_only) == {"ok": True, "identity": RELEASES_SAN, "issuer": None}
    assert verify_js(bundle, root)["message"] == "expected 1 SCTs, got 0"  # the public-good policy wants an SCT and a log entry
    assert verify_js(bundle, PRODUCTION, **timestamp_only)["code"] == "TIMESTAMP_ERROR"  # public-good trusts no such TSA
    document = json.loads(bundle.read_bytes())
    payload = base64.b64decode(document["dsseEnvelope"]["payload"])
    document["dsseEnvelope"]["payload"] = base64.b64encode(payload.replace(b"v0.13.2", b"v0.13.3")).decode()
    bundle.write_text(json.dumps(document))
    assert verify_js(bundle, root, **timestamp_only)["code"] == "SIGNATURE_ERROR"
