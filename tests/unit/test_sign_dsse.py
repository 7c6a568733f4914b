"""DSSE: provenance statements signed as in-toto envelopes, verified offline against the expected workflow.

Verification runs on a real DSSE bundle made on the Sigstore staging services
(tests/fixtures/sigstore/, from sigstore-python's test assets); signing goes
through the same fake SigningContext as tests/unit/test_sign.py, which stands in for
Fulcio/Rekor only and returns that real bundle.
"""

from __future__ import annotations

import base64
import json

import pytest
from repokit import FIXTURES
from test_sign import FakeSigningContext, _github_token, _release_tree

from pipeline.formats import provenance as slsa
from pipeline.infra import sigstore as sg
from pipeline.register import Register
from pipeline.stages import sign as sig
from pipeline.util.hashing import sha256_bytes

FIXTURE = FIXTURES / "sigstore" / "a.dsse.staging-rekor-v2.txt.sigstore.json"
BEACON = "https://github.com/sigstore-conformance/extremely-dangerous-public-oidc-beacon/.github/workflows/extremely-dangerous-oidc-beacon.yml@refs/heads/main"
ISSUER = "https://token.actions.githubusercontent.com"


def _payload() -> bytes:
    return base64.b64decode(json.loads(FIXTURE.read_bytes())["dsseEnvelope"]["payload"])


def _beacon() -> sg.SignerIdentity:
    return sg.SignerIdentity(BEACON, ISSUER, "sigstore-conformance/extremely-dangerous-public-oidc-beacon", "refs/heads/main", "staging")


def test_fixture_is_the_vendored_bundle():
    assert sha256_bytes(FIXTURE.read_bytes()) == "56e79ba9f94a34aba285769574c456601f38beeaa48a3acb67f8d5db706f9420"
    assert "56e79ba9f94a34aba285769574c456601f38beeaa48a3acb67f8d5db706f9420" in (FIXTURE.parent / "README.md").read_text()


def test_a_real_dsse_bundle_verifies_offline_and_returns_its_statement():
    verified = sg.verify_dsse_bundle(_payload(), FIXTURE, identity=BEACON, issuer=ISSUER, trust_config="staging", name="a.intoto.json")
    assert verified.identity == BEACON and verified.issuer == ISSUER
    assert verified.sha256 == sha256_bytes(_payload())
    assert json.loads(_payload())["predicateType"] == slsa.PREDICATE_TYPE


def test_another_statement_than_the_envelopes_is_refused():
    with pytest.raises(sg.SignatureError, match="carries another statement") as info:
        sg.verify_dsse_bundle(_payload() + b"\n", FIXTURE, identity=BEACON, issuer=ISSUER, trust_config="staging")
    assert info.value.reason == "DSSE payload differs from the statement"


@pytest.mark.parametrize(
    ("identity", "trust", "reason"),
    [
        ("https://github.com/alphastorm/omp-ninfer/.github/workflows/release.yml@refs/tags/v0.14.0", "staging", "Certificate's SANs do not match"),
        (BEACON, "production", "not enough sources of verified time"),  # a Rekor v2 bundle: staging's timestamp authority
    ],
)
def test_a_dsse_bundle_fails_for_another_workflow_or_trust_root(identity, trust, reason):
    with pytest.raises(sg.SignatureError) as info:
        sg.verify_dsse_bundle(_payload(), FIXTURE, identity=identity, issuer=ISSUER, trust_config=trust)
    assert reason in info.value.reason


def _token():
    from sigstore.oidc import IdentityToken

    return IdentityToken(_github_token(BEACON.removeprefix("https://github.com/")))


def test_signing_a_statement_writes_a_dsse_bundle_beside_it_and_verifies_it(tmp_path):
    statement = tmp_path / "attestations" / "x.provenance.intoto.json"
    statement.parent.mkdir()
    statement.write_bytes(_payload())
    target = sig.SigningTarget(sha256_bytes(_payload()), _payload(), [statement], dsse=True)
    calls: list = []
    bundles = {target.sha256: FIXTURE.read_bytes()}
    report = sig.sign_targets([target], _beacon(), context_factory=lambda trust: FakeSigningContext(bundles, calls), token_provider=_token)
    assert calls == [target.sha256]
    written = sg.bundle_path_for(statement)
    assert written.name == "x.provenance.intoto.json.sigstore.json"
    assert json.loads(written.read_bytes()) == json.loads(FIXTURE.read_bytes())
    assert report.signed == ["x.provenance.intoto.json"] and report.verified[0]["identity"] == BEACON
    again = sig.sign_targets([target], _beacon(), context_factory=lambda trust: pytest.fail("must not sign"), token_provider=lambda: pytest.fail("must not ask"))
    assert again.kept == ["x.provenance.intoto.json"]


def test_a_dsse_bundle_of_another_statement_is_removed_and_fails(tmp_path):
    ours = slsa.statement_bytes(_statement({"SHA256SUMS": "a" * 64}))
    statement = tmp_path / "ours.provenance.intoto.json"
    statement.write_bytes(ours)
    target = sig.SigningTarget(sha256_bytes(ours), ours, [statement], dsse=True)
    bundles = {target.sha256: FIXTURE.read_bytes()}  # the services "returned" an envelope of other bytes
    with pytest.raises(sg.SignatureError, match="does not verify against the expected signer") as info:
        sig.sign_targets([target], _beacon(), context_factory=lambda trust: FakeSigningContext(bundles, []), token_provider=_token)
    assert info.value.reason == "DSSE payload differs from the statement"
    assert not sg.bundle_path_for(statement).exists()


def _statement(subjects: dict[str, str]) -> dict:
    return slsa.statement(
        subjects=subjects,
        build_type=slsa.BUILD_TYPE_SET,
        external={"lane": "rtx4090-windows-native", "component_tag": "v0.7.0-qwen38-4090-beta.2", "source_repository": "https://x/y.git", "source_commit": "c" * 40},
        internal={},
        dependencies=[slsa.descriptor("source-commit", digest={"gitCommit": "c" * 40})],
        byproducts=[],
        run_details=slsa.builder({}),
    )


def test_sign_collects_the_statements_of_the_sets_the_release_ships_and_only_those(tmp_path, capsys):
    tree = _release_tree(tmp_path)
    sums = (tree / "qualification" / "rtx4090-windows-native.SHA256SUMS").read_bytes()
    dist = tmp_path / "dist"
    folder = dist / "rtx4090-windows-native" / slsa.FOLDER
    folder.mkdir(parents=True)
    shipped = folder / "shipped.provenance.intoto.json"
    shipped.write_bytes(slsa.statement_bytes(_statement({"SHA256SUMS": sha256_bytes(sums), "pkg.tar.gz": "d" * 64})))
    other = folder / "other.provenance.intoto.json"
    other.write_bytes(slsa.statement_bytes(_statement({"SHA256SUMS": "e" * 64})))
    register = Register(dist)
    entries = [
        register.make("provenance", path, stage="package", lane="rtx4090-windows-native", name=path.name, component_tag="t", build_type=slsa.BUILD_TYPE_SET)
        for path in (shipped, other)
    ]
    register.record_stage("package:rtx4090-windows-native", "f", entries)
    targets = sig.plan_signing(tree.parent, tree.name, Register(dist)).targets
    dsse = [t for t in targets if t.dsse]
    assert [t.files for t in dsse] == [[shipped.resolve()]]
    assert dsse[0].data == shipped.read_bytes()
    assert "other.provenance.intoto.json: the statement describes a set or image this release does not ship" in capsys.readouterr().err
    assert sorted(t.files[0].name for t in targets if not t.dsse) == ["manifest.json", "rtx4090-windows-native.SHA256SUMS"]
