"""The local Sigstore stand-in (tests/kits/sigstore_standin.py) and the sign stage's test seam.

Every bundle here is checked by the REAL verifier (`pipeline.infra.sigstore.verify_bundle` /
`verify_dsse_bundle`, i.e. sigstore-python's `Verifier` built from the ClientTrustConfig), nothing
patched.  Each negative case asserts the reason sigstore gives, so a test cannot pass because
verification failed for some other cause.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from sigstore_standin import DESCRIPTION, SigstoreStandIn, audit_path, leaf_hash, merkle_root
from test_sign import _release_tree
from test_sign_dsse import _statement

from pipeline import cli
from pipeline.errors import ExitCode, IntegrityError, RefusedError
from pipeline.formats import provenance as slsa
from pipeline.infra import sigstore as sg
from pipeline.register import Register
from pipeline.stages import sign as sig
from pipeline.util.hashing import sha256_bytes
from pipeline.util.proc import process_stamp

IDENTITY = "https://github.com/alphastorm/omp-ninfer/.github/workflows/release.yml@refs/tags/v0.14.0"
ISSUER = "https://token.actions.githubusercontent.com"
ARTIFACT = b"a release manifest\n" * 10
STATEMENT = slsa.statement_bytes(_statement({"SHA256SUMS": "a" * 64}))
TREE_IDENTITY = "https://github.com/trailofbits/rfc8785.py/.github/workflows/release.yml@refs/tags/v0.1.2"  # test_sign's _release_tree


@pytest.fixture(scope="module")
def kit(tmp_path_factory) -> SigstoreStandIn:
    return SigstoreStandIn(tmp_path_factory.mktemp("sigstore-standin"), identity=IDENTITY).write()


@pytest.fixture(scope="module")
def bundle(kit) -> dict:
    return json.loads(kit.sign_artifact(ARTIFACT).to_json())


@pytest.fixture(scope="module")
def dsse_bundle(kit) -> dict:
    from sigstore.dsse import Statement

    return json.loads(kit.sign_dsse(Statement(STATEMENT)).to_json())


def _raw(document: dict) -> bytes:
    return json.dumps(document).encode()


def _verify(kit, document: dict, artifact: bytes = ARTIFACT, **kwargs):
    options = {"identity": IDENTITY, "issuer": ISSUER, "trust_config": kit.trust_config_path, **kwargs}
    return sg.verify_bundle(artifact, _raw(document), **options)


def _verify_dsse(kit, document: dict, statement: bytes = STATEMENT, **kwargs):
    options = {"identity": IDENTITY, "issuer": ISSUER, "trust_config": kit.trust_config_path, **kwargs}
    return sg.verify_dsse_bundle(statement, _raw(document), **options)


# -- what the kit writes ----------------------------------------------------------------


def test_the_trust_config_is_one_client_trust_config_naming_the_kits_keys(kit):
    document = json.loads(kit.trust_config_path.read_bytes())
    assert document["mediaType"] == "application/vnd.dev.sigstore.clienttrustconfig.v0.1+json"
    trust = sg.load_trust_config(kit.trust_config_path)
    description = json.loads((kit.directory / DESCRIPTION).read_bytes())
    root = trust.trusted_root
    assert [t.log_id.key_id.hex() for t in root._inner.tlogs] == [description["log_ids"]["rekor"]]
    assert [t.log_id.key_id.hex() for t in root._inner.ctlogs] == [description["log_ids"]["ctlog"]]
    assert len(root.get_fulcio_certs()) == 2  # intermediate, root
    assert trust.signing_config.get_fulcio().url.startswith("http://127.0.0.1:")
    for name, digest in description["files"].items():
        assert sha256_bytes((kit.directory / name).read_bytes()) == digest


def test_the_rfc6962_tree_matches_sigstores_inclusion_check():
    from sigstore._internal.merkle import _chain_border_right, _chain_inner, _decomp_inclusion_proof

    leaves = [leaf_hash(bytes([i])) for i in range(11)]
    for index in range(11):
        for size in range(index + 1, 12):
            proof = audit_path(index, leaves[:size])
            inner, border = _decomp_inclusion_proof(index, size)
            assert len(proof) == inner + border
            assert _chain_border_right(_chain_inner(leaves[index], proof[:inner], index), proof[inner:]) == merkle_root(leaves[:size])


# -- the real verifier accepts ------------------------------------------------------------


def test_a_message_bundle_verifies_with_the_real_verifier(kit, bundle, tmp_path):
    verified = _verify(kit, bundle, repository="alphastorm/omp-ninfer", ref="refs/tags/v0.14.0")
    assert (verified.identity, verified.issuer, verified.sha256) == (IDENTITY, ISSUER, sha256_bytes(ARTIFACT))
    assert verified.log_index is not None and verified.log_index >= 5  # after the log's filler entries
    assert bundle["mediaType"] == "application/vnd.dev.sigstore.bundle.v0.3+json"
    entry = bundle["verificationMaterial"]["tlogEntries"][0]
    assert entry["kindVersion"] == {"kind": "hashedrekord", "version": "0.0.1"}
    assert entry["inclusionProof"]["hashes"] and entry["inclusionPromise"]["signedEntryTimestamp"]
    # the same through a file and through its digest only (as sign and audit verify)
    (tmp_path / "m.json").write_bytes(ARTIFACT)
    (tmp_path / "m.json.sigstore.json").write_bytes(_raw(bundle))
    assert sg.verify_bundle(tmp_path / "m.json", tmp_path / "m.json.sigstore.json", identity=IDENTITY, issuer=ISSUER, trust_config=kit.trust_config_path).sha256 == verified.sha256
    assert sg.verify_bundle(sg.Sha256Digest(sha256_bytes(ARTIFACT)), _raw(bundle), identity=IDENTITY, issuer=ISSUER, trust_config=str(kit.trust_config_path)).identity == IDENTITY


def test_a_dsse_bundle_verifies_with_the_real_verifier(kit, dsse_bundle):
    verified = _verify_dsse(kit, dsse_bundle, name="x.provenance.intoto.json")
    assert (verified.identity, verified.sha256) == (IDENTITY, sha256_bytes(STATEMENT))
    assert dsse_bundle["dsseEnvelope"]["payloadType"] == "application/vnd.in-toto+json"
    assert base64.b64decode(dsse_bundle["dsseEnvelope"]["payload"]) == STATEMENT
    assert dsse_bundle["verificationMaterial"]["tlogEntries"][0]["kindVersion"] == {"kind": "dsse", "version": "0.0.1"}


def test_the_certificate_is_fulcio_shaped_with_one_embedded_sct(kit, bundle):
    from cryptography import x509

    cert = x509.load_der_x509_certificate(base64.b64decode(bundle["verificationMaterial"]["certificate"]["rawBytes"]))
    assert cert.subject == x509.Name([])
    assert len(cert.extensions.get_extension_for_class(x509.PrecertificateSignedCertificateTimestamps).value) == 1
    values = {e.oid.dotted_string: e.value for e in cert.extensions}
    assert values["1.3.6.1.4.1.57264.1.1"].value == ISSUER.encode()
    assert values["1.3.6.1.4.1.57264.1.8"].value == b"\x0c" + bytes([len(ISSUER)]) + ISSUER.encode()
    assert values["1.3.6.1.4.1.57264.1.5"].value == b"alphastorm/omp-ninfer"
    assert values["1.3.6.1.4.1.57264.1.6"].value == b"refs/tags/v0.14.0"
    assert (cert.not_valid_after_utc - cert.not_valid_before_utc).total_seconds() == 600


def test_the_log_grows_and_an_older_entry_still_verifies(kit, bundle):
    second = json.loads(kit.sign_artifact(ARTIFACT).to_json())
    first_entry, second_entry = (b["verificationMaterial"]["tlogEntries"][0] for b in (bundle, second))
    assert int(second_entry["logIndex"]) > int(first_entry["logIndex"])
    assert int(second_entry["inclusionProof"]["treeSize"]) > int(first_entry["inclusionProof"]["treeSize"])
    assert _verify(kit, second).log_index == int(second_entry["logIndex"])
    assert _verify(kit, bundle).log_index == int(first_entry["logIndex"])


# -- the real verifier refuses ---------------------------------------------------------------


def test_the_production_trust_config_refuses_a_stand_in_bundle(bundle, dsse_bundle):
    with pytest.raises(sg.SignatureError) as info:
        sg.verify_bundle(ARTIFACT, _raw(bundle), identity=IDENTITY, issuer=ISSUER, trust_config="production")
    assert "failed to build timestamp certificate chain" in info.value.reason
    with pytest.raises(sg.SignatureError) as info:
        sg.verify_dsse_bundle(STATEMENT, _raw(dsse_bundle), identity=IDENTITY, issuer=ISSUER, trust_config="production")
    assert "failed to build timestamp certificate chain" in info.value.reason


def test_another_stand_ins_trust_config_refuses_the_bundle(bundle, tmp_path):
    other = SigstoreStandIn(tmp_path / "other", identity=IDENTITY).write()
    with pytest.raises(sg.SignatureError) as info:
        _verify(other, bundle)
    assert "failed to build timestamp certificate chain" in info.value.reason


@pytest.mark.parametrize(
    ("options", "reason"),
    [
        ({"identity": IDENTITY.replace("v0.14.0", "v0.14.1")}, "Certificate's SANs do not match"),
        ({"issuer": "https://github.com/login/oauth"}, "Certificate's OIDCIssuer does not match"),
        ({"repository": "alphastorm/other", "ref": "refs/tags/v0.14.0"}, "GitHubWorkflowRepository does not match (got 'alphastorm/omp-ninfer', expected 'alphastorm/other')"),
        ({"repository": "alphastorm/omp-ninfer", "ref": "refs/heads/main"}, "GitHubWorkflowRef does not match (got 'refs/tags/v0.14.0', expected 'refs/heads/main')"),
    ],
)
def test_another_signer_is_refused(kit, bundle, dsse_bundle, options, reason):
    with pytest.raises(sg.SignatureError) as info:
        _verify(kit, bundle, **options)
    assert reason in info.value.reason
    with pytest.raises(sg.SignatureError) as info:
        _verify_dsse(kit, dsse_bundle, **options)
    assert reason in info.value.reason


def test_a_changed_artifact_byte_is_refused(kit, bundle):
    changed = bytearray(ARTIFACT)
    changed[3] ^= 1
    with pytest.raises(sg.SignatureError) as info:
        _verify(kit, bundle, artifact=bytes(changed))
    assert info.value.reason == "Bundle message digest mismatch"
    # without the digest the bundle carries, the signature itself fails
    stripped = json.loads(json.dumps(bundle))
    del stripped["messageSignature"]["messageDigest"]
    assert _verify(kit, stripped).identity == IDENTITY
    with pytest.raises(sg.SignatureError) as info:
        _verify(kit, stripped, artifact=bytes(changed))
    assert info.value.reason == "Signature is invalid for input"


def _flip_b64(text: str) -> str:
    raw = bytearray(base64.b64decode(text))
    raw[len(raw) // 2] ^= 1
    return base64.b64encode(bytes(raw)).decode()


def _tamper(document: dict, how: str) -> dict:
    copy = json.loads(json.dumps(document))
    entry = copy["verificationMaterial"]["tlogEntries"][0]
    proof = entry["inclusionProof"]
    if how == "proof-hash":
        proof["hashes"][0] = _flip_b64(proof["hashes"][0])
    elif how == "root-hash":
        proof["rootHash"] = _flip_b64(proof["rootHash"])
    elif how == "set":
        entry["inclusionPromise"]["signedEntryTimestamp"] = _flip_b64(entry["inclusionPromise"]["signedEntryTimestamp"])
    elif how == "integrated-time":
        entry["integratedTime"] = str(int(entry["integratedTime"]) + 1)
    elif how == "checkpoint":
        lines = proof["checkpoint"]["envelope"].split("\n")
        lines[1] = str(int(lines[1]) + 1)  # another tree size under the same signature
        proof["checkpoint"]["envelope"] = "\n".join(lines)
    elif how == "body":
        body = json.loads(base64.b64decode(entry["canonicalizedBody"]))
        entry["canonicalizedBody"] = base64.b64encode(json.dumps(body, indent=1).encode()).decode()  # same content, other bytes
    return copy


@pytest.mark.parametrize(
    ("how", "reason"),
    [
        ("proof-hash", "invalid log entry: inclusion proof contains invalid root hash"),
        ("root-hash", "invalid log entry: inclusion proof contains invalid root hash"),
        ("set", "invalid log entry: SET: invalid inclusion promise: keyring: invalid signature"),
        ("integrated-time", "invalid log entry: SET: invalid inclusion promise: keyring: invalid signature"),
        ("checkpoint", "invalid log entry: checkpoint: invalid signature"),
        ("body", "invalid log entry: inclusion proof contains invalid root hash"),
    ],
)
def test_a_tampered_tlog_entry_is_refused(kit, bundle, dsse_bundle, how, reason):
    with pytest.raises(sg.SignatureError) as info:
        _verify(kit, _tamper(bundle, how))
    assert reason in info.value.reason
    with pytest.raises(sg.SignatureError) as info:
        _verify_dsse(kit, _tamper(dsse_bundle, how))
    assert reason in info.value.reason


def test_a_dsse_bundle_of_other_statement_bytes_is_refused(kit, dsse_bundle):
    other = STATEMENT.replace(b"a" * 64, b"b" * 64)
    with pytest.raises(sg.SignatureError) as info:
        _verify_dsse(kit, dsse_bundle, statement=other)
    assert info.value.reason == "DSSE payload differs from the statement"
    swapped = json.loads(json.dumps(dsse_bundle))
    swapped["dsseEnvelope"]["payload"] = base64.b64encode(other).decode()  # the envelope itself changed
    with pytest.raises(sg.SignatureError) as info:
        _verify_dsse(kit, swapped, statement=other)
    assert "DSSE: invalid signature" in info.value.reason


# -- sign_targets with the kit -------------------------------------------------------------


def test_sign_targets_with_the_kit_writes_bundles_that_verify(kit, tmp_path):
    manifest, statement = tmp_path / "manifest.json", tmp_path / "x.provenance.intoto.json"
    manifest.write_bytes(ARTIFACT)
    statement.write_bytes(STATEMENT)
    targets = [sig.SigningTarget(sha256_bytes(ARTIFACT), ARTIFACT, [manifest]), sig.SigningTarget(sha256_bytes(STATEMENT), STATEMENT, [statement], dsse=True)]
    signer = sg.SignerIdentity(IDENTITY, ISSUER, "alphastorm/omp-ninfer", "refs/tags/v0.14.0", str(kit.trust_config_path))
    report = sig.sign_targets(targets, signer, context_factory=kit.context_factory, token_provider=kit.token_provider())
    assert report.signed == ["manifest.json", "x.provenance.intoto.json"]
    assert [v["identity"] for v in report.verified] == [IDENTITY, IDENTITY]
    assert sg.verify_bundle(manifest, sg.bundle_path_for(manifest), identity=IDENTITY, issuer=ISSUER, trust_config=kit.trust_config_path).identity == IDENTITY
    assert sg.verify_dsse_bundle(STATEMENT, sg.bundle_path_for(statement), identity=IDENTITY, issuer=ISSUER, trust_config=kit.trust_config_path).identity == IDENTITY
    again = sig.sign_targets(targets, signer, context_factory=kit.context_factory, token_provider=kit.token_provider())
    assert again.kept == ["manifest.json", "x.provenance.intoto.json"] and not again.signed
    # a token for another workflow is refused before anything is signed
    other = IDENTITY.replace("release.yml", "ci.yml")
    for path in (manifest, statement):
        sg.bundle_path_for(path).unlink()
    with pytest.raises(RefusedError, match="not the release tree's expected signer"):
        sig.sign_targets(targets, signer, context_factory=kit.context_factory, token_provider=kit.token_provider(other))
    assert not sg.bundle_path_for(manifest).exists()


# -- the seam: PIPELINE_TEST_SIGSTORE ----------------------------------------------------------


# The seam binds a stand-in to the process that wrote it through /proc; where there is none (the Windows unit
# tier) it is always refused, which test_without_proc_the_seam_is_always_refused shows on Linux.
needs_proc = pytest.mark.skipif(process_stamp() is None, reason="the seam names its owner process through /proc (Linux only)")


def _env(kit_dir: Path, **extra: str) -> dict[str, str]:
    return {"PIPELINE_TEST_SIGSTORE": str(kit_dir), **extra}


def _kit_made_by_another_process(folder: Path) -> Path:
    """A stand-in written by a process that has exited: not this test run's own (its owner is no ancestor of ours)."""
    kits = Path(__file__).resolve().parents[1] / "kits"
    code = "import sys; sys.path.insert(0, sys.argv[1]); from sigstore_standin import SigstoreStandIn; SigstoreStandIn(sys.argv[2]).write()"
    subprocess.run([sys.executable, "-c", code, str(kits), str(folder)], check=True, cwd=Path(__file__).resolve().parents[2])
    return folder


@needs_proc
def test_the_seam_is_off_without_the_variable_and_resolves_the_kit_with_it(kit):
    assert sg.test_standin({}) is None
    assert sg.effective_trust_config("production", {}) == "production"
    standin = sg.test_standin(_env(kit.directory))
    assert standin is not None and standin.trust_config == kit.trust_config_path.resolve() and standin.identity == IDENTITY
    assert sg.effective_trust_config("production", _env(kit.directory)) == str(kit.trust_config_path.resolve())
    assert "NOT the public-good Sigstore instance" in standin.warning()


@needs_proc
def test_the_seam_holds_inside_a_github_actions_job_for_the_kit_this_run_made(kit):
    """The release workflow's `tests` job runs the suite with GITHUB_ACTIONS=true: its own stand-in still works there."""
    runner = {"GITHUB_ACTIONS": "true", "CI": "true", "GITHUB_WORKFLOW_REF": "o/r/.github/workflows/release.yml@refs/tags/v1.2.3"}
    standin = sg.test_standin(_env(kit.directory, **runner))
    assert standin is not None and standin.trust_config == kit.trust_config_path.resolve()


@needs_proc
def test_the_seam_is_refused_for_a_stand_in_that_no_ancestor_of_this_process_made(tmp_path, kit):
    """No environment switches the seam on: not GITHUB_ACTIONS, not PYTEST_CURRENT_TEST, not the variable itself."""
    foreign = _kit_made_by_another_process(tmp_path / "foreign")
    for extra in ({}, {"PYTEST_CURRENT_TEST": "t"}, {"GITHUB_ACTIONS": "true"}):
        with pytest.raises(RefusedError, match="names a Sigstore test stand-in that this process's own test run did not make") as info:
            sg.test_standin(_env(foreign, **extra))
        assert info.value.exit_code == ExitCode.REFUSED == 7
        assert info.value.field == "owner"
    # a live process that is not an ancestor (a sibling), or a description without an owner: refused as well
    sibling = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        description = json.loads((kit.directory / DESCRIPTION).read_bytes())
        for owner in (process_stamp(sibling.pid), None, {"pid": os.getpid()}):
            copy = tmp_path / f"copy-{len(list(tmp_path.iterdir()))}"
            shutil.copytree(kit.directory, copy)
            (copy / DESCRIPTION).write_text(json.dumps({**description, "owner": owner}, indent=2) + "\n")
            with pytest.raises(RefusedError, match="this process's own test run did not make"):
                sg.test_standin(_env(copy))
    finally:
        sibling.kill()
        sibling.wait()


def test_without_proc_the_seam_is_always_refused(tmp_path, monkeypatch):
    from pipeline.util import proc

    monkeypatch.setattr(proc, "_PROC", tmp_path / "no-proc")
    kit = SigstoreStandIn(tmp_path / "kit").write()
    assert json.loads((kit.directory / DESCRIPTION).read_bytes())["owner"] is None
    with pytest.raises(RefusedError, match="this process's own test run did not make"):
        sg.test_standin(_env(kit.directory))


@needs_proc
def test_the_seam_refuses_a_changed_kit_file_and_a_public_trust_root(tmp_path):
    folder = tmp_path / "k"
    SigstoreStandIn(folder).write()
    key = folder / "rekor.key.pem"
    original = key.read_bytes()
    key.write_bytes(original + b"\n")
    with pytest.raises(IntegrityError, match="differs from the stand-in's description"):
        sg.test_standin(_env(folder))
    key.write_bytes(original)
    # the production root in the kit's place, its hash even updated in the description: refused
    description = json.loads((folder / DESCRIPTION).read_bytes())
    production = sg.TRUST_CONFIGS["production"].read_bytes()
    (folder / "trust-config.json").write_bytes(production)
    description["files"]["trust-config.json"] = description["trust_config_sha256"] = sha256_bytes(production)
    (folder / DESCRIPTION).write_text(json.dumps(description, indent=2) + "\n")
    with pytest.raises(RefusedError, match="is \\(or shares keys with\\) a pinned public Sigstore one"):
        sg.test_standin(_env(folder))
    # a kit root with one production log key spliced in: refused as well
    kit_config = json.loads(SigstoreStandIn(tmp_path / "k2").write().trust_config_path.read_bytes())
    kit_config["trustedRoot"]["tlogs"].append(json.loads(production)["trustedRoot"]["tlogs"][0])
    data = (json.dumps(kit_config, indent=2) + "\n").encode()
    (folder / "trust-config.json").write_bytes(data)
    description["files"]["trust-config.json"] = description["trust_config_sha256"] = sha256_bytes(data)
    (folder / DESCRIPTION).write_text(json.dumps(description, indent=2) + "\n")
    with pytest.raises(RefusedError, match="shares keys with"):
        sg.test_standin(_env(folder))


def _signable_release(tmp_path: Path) -> tuple[Path, Path, Path]:
    """test_sign's release tree, plus a shipped set's provenance statement in the register."""
    tree = _release_tree(tmp_path)
    sums = (tree / "qualification" / "rtx4090-windows-native.SHA256SUMS").read_bytes()
    dist = tmp_path / "dist"
    folder = dist / "rtx4090-windows-native" / slsa.FOLDER
    folder.mkdir(parents=True)
    statement = folder / "set.provenance.intoto.json"
    statement.write_bytes(slsa.statement_bytes(_statement({"SHA256SUMS": sha256_bytes(sums)})))
    register = Register(dist)
    register.record_stage("package:rtx4090-windows-native", "f" * 64, [register.make("provenance", statement, stage="package", lane="rtx4090-windows-native", name=statement.name, component_tag="t", build_type=slsa.BUILD_TYPE_SET)])
    return tree, dist, statement


def _check_signed(tree: Path, statement: Path, trust: Path) -> None:
    for name in ("manifest.json", "qualification/rtx4090-windows-native.SHA256SUMS"):
        path = tree / name
        assert sg.verify_bundle(path, sg.bundle_path_for(path), identity=TREE_IDENTITY, issuer=ISSUER, trust_config=trust).identity == TREE_IDENTITY
    assert sg.verify_dsse_bundle(statement.read_bytes(), sg.bundle_path_for(statement), identity=TREE_IDENTITY, issuer=ISSUER, trust_config=trust).identity == TREE_IDENTITY
    with pytest.raises(sg.SignatureError):
        sg.verify_bundle(tree / "manifest.json", sg.bundle_path_for(tree / "manifest.json"), identity=TREE_IDENTITY, issuer=ISSUER, trust_config="production")


@needs_proc
def test_the_sign_command_signs_with_the_kit_under_the_seam(tmp_path, monkeypatch, capsys):
    tree, dist, statement = _signable_release(tmp_path)
    kit = SigstoreStandIn(tmp_path / "kit").write()  # no identity: its job signs as the tree's expected signer
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    monkeypatch.setenv("PIPELINE_TEST_SIGSTORE", str(kit.directory))
    assert cli.main(["sign", "--release", "v0.1.2", "--dist", str(dist)]) == 0
    captured = capsys.readouterr()
    assert "WARNING: TEST STAND-IN SIGSTORE (PIPELINE_TEST_SIGSTORE=" in captured.err
    assert f"OK: {tree.resolve() / 'manifest.json'}: signed by {TREE_IDENTITY}" in captured.out
    _check_signed(tree, statement, kit.trust_config_path)
    assert len(Register(dist).query("signature-bundle")) == 3


@needs_proc
def test_the_sign_command_as_a_subprocess_under_the_seam_and_its_refusals(tmp_path):
    tree, dist, statement = _signable_release(tmp_path)
    kit = SigstoreStandIn(tmp_path / "kit").write()
    env = {k: v for k, v in os.environ.items() if k not in ("ACTIONS_ID_TOKEN_REQUEST_URL", "ACTIONS_ID_TOKEN_REQUEST_TOKEN", "PYTEST_CURRENT_TEST")}
    command = [sys.executable, "-m", "pipeline", "sign", "--release", "v0.1.2", "--dist", str(dist)]

    foreign = _kit_made_by_another_process(tmp_path / "foreign")
    refused = subprocess.run(command, cwd=tmp_path, env={**env, "PIPELINE_TEST_SIGSTORE": str(foreign), "PYTEST_CURRENT_TEST": "t"}, capture_output=True, text=True)
    assert refused.returncode == 7 and "this process's own test run did not make" in refused.stderr, refused.stderr
    assert not list(tmp_path.rglob("*.sigstore.json"))

    # a child of the process that made the kit, as the release workflow's `tests` job runs it (GITHUB_ACTIONS=true)
    done = subprocess.run(command, cwd=tmp_path, env={**env, "PIPELINE_TEST_SIGSTORE": str(kit.directory), "GITHUB_ACTIONS": "true"}, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "WARNING: TEST STAND-IN SIGSTORE" in done.stderr
    _check_signed(tree, statement, kit.trust_config_path)


def test_without_the_seam_sign_still_refuses_outside_ci(tmp_path, monkeypatch, capsys):
    _release_tree(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    monkeypatch.delenv("PIPELINE_TEST_SIGSTORE", raising=False)
    assert cli.main(["sign", "--release", "v0.1.2"]) == 7
    assert "sign runs only in the release workflow on GitHub Actions" in capsys.readouterr().err
