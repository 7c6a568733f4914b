"""Sigstore: offline verification of real bundles, and the signing path.

Verification runs against the real bundles the repository carries in
`tests/fixtures/sigstore-vectors/` (made on the live Sigstore services by others) and
the pinned trust configurations vendored under `pipeline/data/sigstore/`.
Each negative case asserts the reason sigstore gives, so a test cannot pass
because verification failed for some other cause.
"""

from __future__ import annotations

import base64
import json
import shutil
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from repokit import SIGSTORE_VECTORS

from pipeline import cli
from pipeline.errors import ExitCode, InputError, RefusedError
from pipeline.formats.release.manifest import parse_manifest
from pipeline.formats.release.signer import release_signer, signer_from_manifest
from pipeline.infra import sigstore as sg
from pipeline.stages import sign as sig
from pipeline.util.hashing import sha256_bytes, sha256_file

GH_SAN = "https://github.com/trailofbits/rfc8785.py/.github/workflows/release.yml@refs/tags/v0.1.2"
GH_ISSUER = "https://token.actions.githubusercontent.com"
GH_OAUTH = "https://github.com/login/oauth"


@pytest.fixture(scope="module")
def vectors() -> Path:
    return SIGSTORE_VECTORS


# -- the pinned trust configurations ---------------------------------------------


def test_vendored_trust_configs_are_the_shared_ones_and_the_readme_names_their_hashes(vectors):
    readme = (sg.TRUST_CONFIG_DIR / "README.md").read_text()
    for name, path in sg.TRUST_CONFIGS.items():
        assert path.read_bytes() == (vectors / f"{name}-trust-config.json").read_bytes()
        assert sha256_file(path) in readme
        document = json.loads(path.read_bytes())
        assert document["mediaType"] == "application/vnd.dev.sigstore.clienttrustconfig.v0.1+json"


# -- the GitHub Actions release-workflow signature (production) ------------------


def test_github_release_workflow_bundle_verifies_with_its_repository_and_ref(vectors):
    verified = sg.verify_bundle(
        vectors / "bundle_v3_github.whl",
        vectors / "bundle_v3_github.whl.sigstore",
        identity=GH_SAN,
        issuer=GH_ISSUER,
        trust_config="production",
        repository="trailofbits/rfc8785.py",
        ref="refs/tags/v0.1.2",
    )
    assert verified.identity == GH_SAN
    assert verified.issuer == GH_ISSUER
    assert verified.log_index == 79605083
    assert verified.sha256 == sha256_file(vectors / "bundle_v3_github.whl")


def test_release_signer_derives_the_workflow_identity():
    signer = release_signer("https://github.com/trailofbits/rfc8785.py", "v0.1.2")
    assert signer.identity == GH_SAN
    assert (signer.issuer, signer.repository, signer.ref) == (GH_ISSUER, "trailofbits/rfc8785.py", "refs/tags/v0.1.2")


@pytest.mark.parametrize(
    ("repository", "ref", "reason"),
    [
        ("alphastorm/omp-ninfer", "refs/tags/v0.1.2", "GitHubWorkflowRepository does not match (got 'trailofbits/rfc8785.py', expected 'alphastorm/omp-ninfer')"),
        ("trailofbits/rfc8785.py", "refs/tags/v0.1.3", "GitHubWorkflowRef does not match (got 'refs/tags/v0.1.2', expected 'refs/tags/v0.1.3')"),
        ("trailofbits/rfc8785.py", "refs/heads/main", "GitHubWorkflowRef does not match (got 'refs/tags/v0.1.2', expected 'refs/heads/main')"),
    ],
)
def test_github_release_workflow_bundle_fails_with_another_repository_or_ref(vectors, repository, ref, reason):
    with pytest.raises(sg.SignatureError) as caught:
        sg.verify_bundle(
            vectors / "bundle_v3_github.whl",
            vectors / "bundle_v3_github.whl.sigstore",
            identity=GH_SAN,
            issuer=GH_ISSUER,
            repository=repository,
            ref=ref,
        )
    assert reason in caught.value.reason
    assert "another identity than the release tree declares" in str(caught.value)
    assert caught.value.exit_code == ExitCode.INTEGRITY


def test_github_bundle_fails_for_another_workflow_identity_and_lists_the_actual_san(vectors):
    other = "https://github.com/alphastorm/omp-ninfer/.github/workflows/release.yml@refs/tags/v0.13.1"
    with pytest.raises(sg.SignatureError) as caught:
        sg.verify_bundle(vectors / "bundle_v3_github.whl", vectors / "bundle_v3_github.whl.sigstore", identity=other, issuer=GH_ISSUER)
    assert f"Certificate's SANs do not match {other}" in caught.value.reason
    assert GH_SAN in caught.value.reason  # the actual SAN is shown (sigstore-python#309)


def test_github_bundle_fails_for_another_issuer(vectors):
    with pytest.raises(sg.SignatureError) as caught:
        sg.verify_bundle(vectors / "bundle_v3_github.whl", vectors / "bundle_v3_github.whl.sigstore", identity=GH_SAN, issuer=GH_OAUTH)
    assert "OIDCIssuer" in caught.value.reason and "does not match" in caught.value.reason


# -- staging bundles against the staging configuration ---------------------------


@pytest.mark.parametrize(
    ("artifact", "bundle", "identity"),
    [
        ("bundle_v3.txt", "bundle_v3.txt.sigstore", "william@yossarian.net"),
        ("staging-rekor-v2.txt", "staging-rekor-v2.txt.sigstore.json", "jku@goto.fi"),
    ],
)
def test_staging_bundles_verify_against_the_staging_config(vectors, artifact, bundle, identity):
    verified = sg.verify_bundle(vectors / artifact, vectors / bundle, identity=identity, issuer=GH_OAUTH, trust_config="staging")
    assert verified.identity == identity


def test_staging_bundle_fails_against_the_production_root_naming_the_instance(vectors):
    with pytest.raises(sg.SignatureError) as caught:
        sg.verify_bundle(vectors / "bundle_v3.txt", vectors / "bundle_v3.txt.sigstore", identity="william@yossarian.net", issuer=GH_OAUTH, trust_config="production")
    assert "certificate chain" in caught.value.reason
    assert "another Sigstore instance (staging vs production)" in str(caught.value)


def test_a_trust_config_file_path_is_accepted(vectors):
    verified = sg.verify_bundle(
        vectors / "bundle_v3.txt",
        vectors / "bundle_v3.txt.sigstore",
        identity="william@yossarian.net",
        issuer=GH_OAUTH,
        trust_config=vectors / "staging-trust-config.json",
    )
    assert verified.log_index == 25915956


# -- adversarial bundles -----------------------------------------------------------


def test_malformed_cve_2022_36056_bundle_fails(vectors):
    """The bundle's certificate and log entry do not belong together (CVE-2022-36056)."""
    with pytest.raises(sg.SignatureError) as caught:
        sg.verify_bundle(
            vectors / "bundle_cve_2022_36056.txt",
            vectors / "bundle_cve_2022_36056.txt.sigstore",
            identity="william@yossarian.net",  # the SAN it carries: the identity check passes, the material does not
            issuer=GH_OAUTH,
            trust_config="staging",
        )
    assert caught.value.reason == "transparency log entry is inconsistent with other materials"
    assert "transparency-log evidence does not belong to this signature" in str(caught.value)


def test_bundle_without_a_log_entry_fails(vectors):
    with pytest.raises(sg.SignatureError) as caught:
        sg.verify_bundle(
            vectors / "bundle_no_log_entry.txt",
            vectors / "bundle_no_log_entry.txt.sigstore",
            identity="william@yossarian.net",
            issuer=GH_OAUTH,
            trust_config="staging",
        )
    assert caught.value.reason == "expected exactly one log entry in bundle"
    assert "malformed or lacks required material" in str(caught.value)


# -- tampered artefacts, digests, bytes ------------------------------------------


@pytest.mark.parametrize("offset", [0, 4585, 9171])
def test_a_tampered_artefact_fails(vectors, tmp_path, offset):
    data = bytearray((vectors / "bundle_v3_github.whl").read_bytes())
    data[offset] ^= 0x01
    tampered = tmp_path / "bundle_v3_github.whl"
    tampered.write_bytes(bytes(data))
    with pytest.raises(sg.SignatureError) as caught:
        sg.verify_bundle(tampered, vectors / "bundle_v3_github.whl.sigstore", identity=GH_SAN, issuer=GH_ISSUER, repository="trailofbits/rfc8785.py", ref="refs/tags/v0.1.2")
    assert caught.value.reason == "Bundle message digest mismatch"
    assert "signs other bytes than this file" in str(caught.value)


def test_verification_by_digest_and_by_bytes(vectors):
    data = (vectors / "bundle_v3_github.whl").read_bytes()
    bundle = (vectors / "bundle_v3_github.whl.sigstore").read_bytes()
    by_digest = sg.verify_bundle(sg.Sha256Digest(sha256_bytes(data)), bundle, identity=GH_SAN, issuer=GH_ISSUER)
    by_bytes = sg.verify_bundle(data, bundle, identity=GH_SAN, issuer=GH_ISSUER)
    assert by_digest.sha256 == by_bytes.sha256 == sha256_bytes(data)
    with pytest.raises(sg.SignatureError, match="Bundle message digest mismatch"):
        sg.verify_bundle(sg.Sha256Digest("0" * 64), bundle, identity=GH_SAN, issuer=GH_ISSUER)


def test_a_missing_bundle_is_a_clear_failure(vectors, tmp_path):
    with pytest.raises(sg.SignatureError) as caught:
        sg.verify_bundle(vectors / "bundle_v3_github.whl", tmp_path / "absent.sigstore.json", identity=GH_SAN, issuer=GH_ISSUER)
    assert caught.value.reason == "no bundle absent.sigstore.json"


def test_a_bundle_that_is_not_json_fails(vectors, tmp_path):
    bad = tmp_path / "x.sigstore.json"
    bad.write_bytes(b"not a bundle")
    with pytest.raises(sg.SignatureError, match="does not verify"):
        sg.verify_bundle(vectors / "bundle_v3_github.whl", bad, identity=GH_SAN, issuer=GH_ISSUER)


def test_an_unknown_trust_config_is_an_input_error(vectors, tmp_path):
    with pytest.raises(InputError, match="trust configuration does not exist"):
        sg.verify_bundle(vectors / "bundle_v3.txt", vectors / "bundle_v3.txt.sigstore", identity="a", issuer="b", trust_config=str(tmp_path / "nope.json"))


# -- the expected signer in a release tree ---------------------------------------


def manifest_of(document: dict):
    return parse_manifest(json.dumps(document).encode(), source="manifest.json", check_type=False)


def test_signer_from_manifest_reads_the_signing_block_or_derives_it():
    block = {"certificate_identity": GH_SAN, "certificate_oidc_issuer": GH_ISSUER, "bundle_suffix": ".sigstore.json", "signed_files": []}
    signer = signer_from_manifest(manifest_of({"release": "v0.1.2", "signing": block}))
    assert signer == sg.SignerIdentity(GH_SAN, GH_ISSUER, "trailofbits/rfc8785.py", "refs/tags/v0.1.2", "production")
    derived = signer_from_manifest(manifest_of({"release": "v0.1.2", "product": {"repository": "https://github.com/trailofbits/rfc8785.py"}}))
    assert derived == signer
    with pytest.raises(InputError, match="declares no expected signer"):
        signer_from_manifest(manifest_of({"release": "v0.1.2"}))
    with pytest.raises(InputError, match="unknown Sigstore instance"):
        signer_from_manifest(manifest_of({"signing": {**block, "trust_config": "elsewhere"}}))
    with pytest.raises(InputError, match="the expected signer lacks a value"):
        signer_from_manifest(manifest_of({"signing": {**block, "certificate_oidc_issuer": None}}))


# -- sign: refusals and the plan -------------------------------------------------


def _release_tree(root: Path, release: str = "v0.1.2", lanes: tuple[str, ...] = ("rtx4090-windows-native",)) -> Path:
    """A release tree shaped as docs/release-tree.md says: the signing block lists the files to sign."""
    tree = root / "manifests" / release
    (tree / "qualification").mkdir(parents=True)
    signed = [f"manifests/{release}/manifest.json"]
    for index, lane in enumerate(lanes):
        (tree / "qualification" / f"{lane}.SHA256SUMS").write_bytes(bytes([97 + index]) * 64 + b"  Install-Release.ps1\n")
        signed.append(f"manifests/{release}/qualification/{lane}.SHA256SUMS")
    identity = f"https://github.com/trailofbits/rfc8785.py/.github/workflows/release.yml@refs/tags/{release}"
    manifest = {
        "schema_version": 1,
        "release": release,
        "product": {"repository": "https://github.com/trailofbits/rfc8785.py"},
        "signing": {"certificate_identity": identity, "certificate_oidc_issuer": GH_ISSUER, "bundle_suffix": ".sigstore.json", "signed_files": signed},
    }
    (tree / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", newline="\n")
    return tree


def test_sign_outside_ci_refuses_with_exit_7(tmp_path, monkeypatch, capsys):
    _release_tree(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    assert cli.main(["sign", "--release", "v0.1.2"]) == ExitCode.REFUSED == 7
    err = capsys.readouterr().err
    assert "error[refused]: sign runs only in the release workflow on GitHub Actions" in err
    assert "a release is never published unsigned" in err
    assert not list(tmp_path.rglob("*.sigstore.json"))


def test_sign_in_actions_without_id_token_permission_refuses(tmp_path, monkeypatch, capsys):
    _release_tree(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.delenv("ACTIONS_ID_TOKEN_REQUEST_URL", raising=False)
    monkeypatch.delenv("ACTIONS_ID_TOKEN_REQUEST_TOKEN", raising=False)
    assert cli.main(["sign", "--release", "v0.1.2"]) == 7
    assert "permissions: id-token: write" in capsys.readouterr().err


def test_sign_dry_run_lists_each_distinct_file_and_the_expected_signer(tmp_path, monkeypatch, capsys):
    _release_tree(tmp_path, lanes=("rtx3090-windows-native", "rtx4090-windows-native"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    assert cli.main(["sign", "--dry-run", "--quiet"]) == 0  # newest release found by itself
    plan = json.loads(capsys.readouterr().out)
    assert plan["release"] == "v0.1.2"
    assert plan["signer"]["identity"] == GH_SAN and plan["signer"]["ref"] == "refs/tags/v0.1.2"
    assert plan["signer"]["repository"] == "trailofbits/rfc8785.py"
    files = [Path(t["files"][0]).name for t in plan["targets"]]
    assert files == ["manifest.json", "rtx3090-windows-native.SHA256SUMS", "rtx4090-windows-native.SHA256SUMS"]
    assert all(b.endswith(".sigstore.json") for t in plan["targets"] for b in t["bundle"])


def test_sign_refuses_a_signed_file_outside_the_release_tree(tmp_path, monkeypatch, capsys):
    tree = _release_tree(tmp_path)
    manifest = json.loads((tree / "manifest.json").read_text())
    manifest["signing"]["signed_files"].append("README.md")
    (tmp_path / "README.md").write_text("x\n", newline="\n")
    (tree / "manifest.json").write_text(json.dumps(manifest))
    monkeypatch.chdir(tmp_path)
    assert cli.main(["sign", "--dry-run", "--release", "v0.1.2"]) == 1
    assert "signing.signed_files[2]: names a file outside the release tree" in capsys.readouterr().err


# -- the signing path through a fake SigningContext ------------------------------


def _github_token(job_workflow_ref: str) -> str:
    """An unsigned JWT shaped like a GitHub Actions OIDC token (sigstore does not check its signature)."""

    def part(obj: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    now = int(time.time())
    repo, _, ref = job_workflow_ref.partition("/.github/workflows/release.yml@")
    claims = {
        "iss": GH_ISSUER,
        "aud": "sigstore",
        "sub": f"repo:{repo}:ref:{ref}",
        "iat": now,
        "nbf": now,
        "exp": now + 300,
        "job_workflow_ref": job_workflow_ref,
        "repository": repo,
        "ref": ref,
    }
    return f"{part({'alg': 'RS256', 'typ': 'JWT'})}.{part(claims)}.c2ln"


class FakeSigningContext:
    """Honours sigstore's `SigningContext.signer(token, cache=True)` -> `Signer.sign_artifact(bytes)`.

    Signing needs Fulcio, Rekor and an OIDC issuer on the network, which no
    test machine here can reach, so this fake stands in for those services
    only: it returns a bundle that the live services really issued (from the
    shared vectors).  Everything around it is real: the IdentityToken parsing,
    the identity check before signing, the bundle files written beside every
    copy, and the offline verification of what was written.
    """

    def __init__(self, bundles: dict[str, bytes], calls: list):
        self.bundles = bundles  # sha256 of the signed bytes -> the bundle the services issued
        self.calls = calls

    @contextmanager
    def signer(self, identity_token, *, cache=True):
        from sigstore.models import Bundle
        from sigstore.oidc import IdentityToken

        assert isinstance(identity_token, IdentityToken) and cache is True
        outer = self

        class _Signer:
            def sign_artifact(self, input_: bytes):
                outer.calls.append(sha256_bytes(input_))
                return Bundle.from_json(outer.bundles[sha256_bytes(input_)])

            def sign_dsse(self, input_):
                from sigstore.dsse import Statement

                assert isinstance(input_, Statement)  # sigstore's own type: the statement was parsed as in-toto
                digest = sha256_bytes(input_._contents)
                outer.calls.append(digest)
                return Bundle.from_json(outer.bundles[digest])

        yield _Signer()


@pytest.fixture
def whl_target(vectors, tmp_path):
    """The real signed wheel, present as a release file and a checked-in copy (one content, two files)."""
    data = (vectors / "bundle_v3_github.whl").read_bytes()
    first = tmp_path / "release" / "bundle_v3_github.whl"
    copy = tmp_path / "tree" / "qualification" / "bundle_v3_github.whl"
    for path in (first, copy):
        path.parent.mkdir(parents=True)
        path.write_bytes(data)
    return sig.SigningTarget(sha256_bytes(data), data, [first, copy])


def _signer() -> sg.SignerIdentity:
    return release_signer("trailofbits/rfc8785.py", "v0.1.2")


def test_signing_writes_a_bundle_beside_every_copy_and_verifies_it(vectors, whl_target):
    from sigstore.oidc import IdentityToken

    calls: list = []
    bundle = (vectors / "bundle_v3_github.whl.sigstore").read_bytes()
    report = sig.sign_targets(
        [whl_target],
        _signer(),
        context_factory=lambda trust: FakeSigningContext({whl_target.sha256: bundle}, calls),
        token_provider=lambda: IdentityToken(_github_token(GH_SAN.removeprefix("https://github.com/"))),
    )
    assert calls == [whl_target.sha256]  # one content signed once
    for path in whl_target.files:
        written = sg.bundle_path_for(path)
        assert written.name == "bundle_v3_github.whl.sigstore.json"
        assert json.loads(written.read_bytes()) == json.loads(bundle)
    assert report.signed == ["bundle_v3_github.whl (+1 copies)"]
    assert report.verified[0]["identity"] == GH_SAN and report.verified[0]["log_index"] == 79605083

    # A re-run signs nothing: the existing bundles verify and are kept.
    again = sig.sign_targets([whl_target], _signer(), context_factory=lambda trust: pytest.fail("must not sign"), token_provider=lambda: pytest.fail("must not ask"))
    assert again.signed == [] and again.kept == ["bundle_v3_github.whl (+1 copies)"]


def test_a_bundle_that_does_not_verify_after_signing_is_removed_and_fails(vectors, whl_target):
    from sigstore.oidc import IdentityToken

    wrong = (vectors / "bundle_v3.txt.sigstore").read_bytes()  # a real bundle, of other bytes, from staging
    with pytest.raises(sg.SignatureError) as caught:
        sig.sign_targets(
            [whl_target],
            _signer(),
            context_factory=lambda trust: FakeSigningContext({whl_target.sha256: wrong}, []),
            token_provider=lambda: IdentityToken(_github_token(GH_SAN.removeprefix("https://github.com/"))),
        )
    assert "does not verify against the expected signer" in str(caught.value)
    assert not [p for p in whl_target.files if sg.bundle_path_for(p).exists()]


def test_a_token_for_another_ref_is_refused_before_signing(whl_target):
    from sigstore.oidc import IdentityToken

    branch = "trailofbits/rfc8785.py/.github/workflows/release.yml@refs/heads/main"
    with pytest.raises(RefusedError) as caught:
        sig.sign_targets(
            [whl_target],
            _signer(),
            context_factory=lambda trust: pytest.fail("must not reach the signing services"),
            token_provider=lambda: IdentityToken(_github_token(branch)),
        )
    assert "not the release tree's expected signer" in str(caught.value)
    assert f"https://github.com/{branch}" in str(caught.value) and GH_SAN in str(caught.value)


def test_an_existing_invalid_bundle_is_refused_unless_overwrite(vectors, whl_target):
    from sigstore.oidc import IdentityToken

    shutil.copyfile(vectors / "bundle_v3.txt.sigstore", sg.bundle_path_for(whl_target.files[0]))
    with pytest.raises(RefusedError, match="an existing bundle does not verify: failed to build timestamp certificate chain"):
        sig.sign_targets([whl_target], _signer(), context_factory=lambda trust: pytest.fail("no"), token_provider=lambda: pytest.fail("no"))
    bundle = (vectors / "bundle_v3_github.whl.sigstore").read_bytes()
    report = sig.sign_targets(
        [whl_target],
        _signer(),
        context_factory=lambda trust: FakeSigningContext({whl_target.sha256: bundle}, []),
        token_provider=lambda: IdentityToken(_github_token(GH_SAN.removeprefix("https://github.com/"))),
        overwrite=True,
    )
    assert report.signed and json.loads(sg.bundle_path_for(whl_target.files[0]).read_bytes()) == json.loads(bundle)


def test_sign_plan_adds_dist_copies_of_signed_sums_and_leaves_unshipped_sets_out(tmp_path, monkeypatch, capsys):
    """The register's outer SHA256SUMS join the target with the same bytes; a set the release does not ship is not signed."""
    from pipeline.register import Register

    tree = _release_tree(tmp_path)
    shipped = (tree / "qualification" / "rtx4090-windows-native.SHA256SUMS").read_bytes()
    dist = tmp_path / "dist"
    register = Register(dist)
    outputs = []
    for lane, data in (("rtx4090-windows-native", shipped), ("rtx3090-windows-native", b"c" * 64 + b"  Install-Release.ps1\n")):
        path = dist / lane / "assets" / "SHA256SUMS"
        path.parent.mkdir(parents=True)
        path.write_bytes(data)
        outputs.append(register.make("outer-checksums", path, stage="package", lane=lane, component_tag="v0.7.0-x"))
    register.record_stage("package", "f" * 64, outputs)
    from pipeline.util import ui

    monkeypatch.setattr(ui.current(), "quiet", False)  # another test's --quiet must not hide the warning
    monkeypatch.chdir(tmp_path)
    assert cli.main(["sign", "--dry-run", "--release", "v0.1.2", "--dist", "dist"]) == 0
    captured = capsys.readouterr()
    plan = json.loads(captured.out)
    files = {Path(f).relative_to(tmp_path).as_posix() for t in plan["targets"] for f in t["files"]}
    assert files == {"manifests/v0.1.2/manifest.json", "manifests/v0.1.2/qualification/rtx4090-windows-native.SHA256SUMS", "dist/rtx4090-windows-native/assets/SHA256SUMS"}
    assert "dist/rtx3090-windows-native/assets/SHA256SUMS: not among the release tree's signed files" in captured.err


@pytest.mark.parametrize(("value", "reason"), [("/etc/hostname", "is an absolute path"), ("manifests/v0.1.2/../../README.md", "has a '..' segment"), ("manifests\\\\v0.1.2\\\\x", "(the separator is '/')")])
def test_sign_refuses_a_signed_file_that_is_not_a_plain_relative_path(tmp_path, monkeypatch, capsys, value, reason):
    tree = _release_tree(tmp_path)
    manifest = json.loads((tree / "manifest.json").read_text())
    manifest["signing"]["signed_files"].append(value)
    (tree / "manifest.json").write_text(json.dumps(manifest))
    monkeypatch.chdir(tmp_path)
    assert cli.main(["sign", "--dry-run", "--release", "v0.1.2"]) == 1
    err = capsys.readouterr().err
    assert "signing.signed_files[2]: is not a safe name: it " in err and reason in err


@pytest.mark.parametrize("explicit", [True, False], ids=["--release", "newest"])
def test_sign_refuses_a_release_tree_that_is_a_link_to_a_folder_outside(tmp_path, monkeypatch, capsys, explicit):
    elsewhere = tmp_path / "elsewhere"
    tree = _release_tree(elsewhere)
    repo = tmp_path / "repo"
    (repo / "manifests").mkdir(parents=True)
    (repo / "manifests" / "v0.1.2").symlink_to(tree, target_is_directory=True)
    monkeypatch.chdir(repo)
    assert cli.main(["sign", "--dry-run", *(["--release", "v0.1.2"] if explicit else [])]) == 1
    err = capsys.readouterr().err
    assert "manifests/v0.1.2: the release tree is a symbolic link" in err and str(tree) in err


# -- the sign stage: targets from the register, bundles into it ---------------------------

ACTIONS_ENV = {"GITHUB_ACTIONS": "true", "ACTIONS_ID_TOKEN_REQUEST_URL": "https://token.invalid/", "ACTIONS_ID_TOKEN_REQUEST_TOKEN": "request-token"}


def _compose_entries(dist: Path, tree: Path, release: str = "v0.1.2") -> None:
    """`release-tree` entries as compose records them: one per file of the tree, with its hash."""
    from pipeline.register import Artifact, Register

    register = Register(dist)
    outputs = []
    for path in sorted(p for p in tree.rglob("*") if p.is_file() and not p.name.endswith(".sigstore.json")):
        rel = path.relative_to(tree).as_posix()
        data = path.read_bytes()
        outputs.append(Artifact(kind="release-tree", name=f"manifests/{release}/{rel}", path=f"manifests/{release}/{rel}", sha256=sha256_bytes(data),
                                size=len(data), stage="compose",
                                attrs={"release": release, sig.TREE_PATH_ATTR: rel, "root": "repository", "role": "tree", "signed": False}))
    register.record_stage(f"compose:{release}", "f" * 64, outputs)


def _stand_in_bundle(data: bytes, identity: str) -> str:
    return json.dumps({"stand_in_bundle": True, "sha256": sha256_bytes(data), "identity": identity})


def _stand_in_verify(artifact, bundle_path, *, identity, issuer, trust_config="production", repository=None, ref=None):
    """What the real verifier is asked (digest, identity, issuer, repository, ref), on stand-in bundles:
    live Fulcio and Rekor cannot issue a real bundle for a test's manifest."""
    raw = bundle_path if isinstance(bundle_path, bytes) else Path(bundle_path).read_bytes()
    bundle = json.loads(raw)
    digest = artifact.hexdigest if isinstance(artifact, sg.Sha256Digest) else sha256_bytes(artifact if isinstance(artifact, bytes) else Path(artifact).read_bytes())
    if bundle.get("sha256") != digest:
        raise sg.SignatureError("Sigstore bundle does not verify: Bundle message digest mismatch", reason="Bundle message digest mismatch")
    if bundle.get("identity") != identity or issuer != GH_ISSUER or (repository, ref) != sg.github_claims(identity):
        raise sg.SignatureError("Sigstore bundle does not verify: identity", reason="Certificate's SANs do not match")
    return sg.VerifiedSignature("x", digest, identity, issuer, 7, 1)


class StandInSigningContext:
    """sigstore's `SigningContext.signer(token, cache=True)` -> `sign_artifact(bytes)`; the bundle is a stand-in."""

    def __init__(self, calls: list) -> None:
        self.calls = calls

    @contextmanager
    def signer(self, identity_token, *, cache=True):
        outer = self
        identity = "https://github.com/" + identity_token._unverified_claims["job_workflow_ref"]

        class _Bundle:
            def __init__(self, data: bytes) -> None:
                self.data = data

            def to_json(self) -> str:
                return _stand_in_bundle(self.data, identity)

        class _Signer:
            def sign_artifact(self, input_: bytes):
                outer.calls.append(sha256_bytes(input_))
                return _Bundle(input_)

        yield _Signer()


def _sign_in_actions(tmp_path: Path, dist: Path, calls: list, **kwargs):
    from sigstore.oidc import IdentityToken

    return sig.sign_release(
        kwargs.pop("release", "v0.1.2"),
        dist=dist,
        manifests=tmp_path / "manifests",
        environ=ACTIONS_ENV,
        context_factory=lambda trust: StandInSigningContext(calls),
        token_provider=lambda: IdentityToken(_github_token(GH_SAN.removeprefix("https://github.com/"))),
        **kwargs,
    )


@pytest.fixture
def stand_in_verifier(monkeypatch):
    monkeypatch.setattr(sig, "verify_bundle", _stand_in_verify)


def test_the_sign_stage_signs_the_composed_tree_and_records_every_bundle(tmp_path, stand_in_verifier):
    from pipeline.register import Register

    tree = _release_tree(tmp_path)
    dist = tmp_path / "dist"
    _compose_entries(dist, tree)
    register = Register(dist)
    sums = dist / "rtx4090-windows-native" / "assets" / "SHA256SUMS"
    sums.parent.mkdir(parents=True)
    sums.write_bytes((tree / "qualification" / "rtx4090-windows-native.SHA256SUMS").read_bytes())
    register.record_stage("package:rtx4090-windows-native", "e" * 64, [register.make("outer-checksums", sums, stage="package", lane="rtx4090-windows-native", component_tag="v0.7.0-x")])

    calls: list = []
    result, stage = _sign_in_actions(tmp_path, dist, calls)
    assert len(calls) == 2 and not result.skipped  # two distinct contents, each signed once
    assert sorted(stage.report.signed) == ["manifest.json", "rtx4090-windows-native.SHA256SUMS (+1 copies)"]
    beside_set = sums.parent.parent / "attestations" / "SHA256SUMS.sigstore.json"  # the closed set's folder stays closed
    for path, bundle in ((tree / "manifest.json", None), (tree / "qualification" / "rtx4090-windows-native.SHA256SUMS", None), (sums, beside_set)):
        assert json.loads((bundle or sg.bundle_path_for(path)).read_bytes())["sha256"] == sha256_file(path)
    assert not sg.bundle_path_for(sums).exists(), "no bundle inside the asset set's folder"
    register = Register(dist)
    bundles = {a.path: a for a in register.query("signature-bundle")}
    assert set(bundles) == {
        "sign/v0.1.2/manifest.json.sigstore.json",
        "sign/v0.1.2/qualification/rtx4090-windows-native.SHA256SUMS.sigstore.json",
        "rtx4090-windows-native/attestations/SHA256SUMS.sigstore.json",
    }
    # The copies under dist are byte for byte the bundles beside the tree files.
    assert (dist / "sign" / "v0.1.2" / "manifest.json.sigstore.json").read_bytes() == sg.bundle_path_for(tree / "manifest.json").read_bytes()
    entry = bundles["rtx4090-windows-native/attestations/SHA256SUMS.sigstore.json"]
    assert (entry.lane, entry.attrs["signed_name"], entry.attrs["signed_sha256"]) == ("rtx4090-windows-native", "SHA256SUMS", sha256_file(sums))
    assert register.stages["sign:v0.1.2"]["outputs"] == sorted(a.name for a in bundles.values())

    # Again: nothing new is signed, every bundle is verified again (sign always runs), the entries stay.
    again, stage = _sign_in_actions(tmp_path, dist, calls)
    assert len(calls) == 2 and stage.report.signed == [] and len(stage.report.kept) == 2
    assert {a.sha256 for a in again.outputs} == {a.sha256 for a in bundles.values()}


def test_a_tree_file_edited_after_compose_is_refused_before_signing(tmp_path, stand_in_verifier):
    from pipeline.errors import IntegrityError

    tree = _release_tree(tmp_path)
    dist = tmp_path / "dist"
    _compose_entries(dist, tree)
    edited = tree / "qualification" / "rtx4090-windows-native.SHA256SUMS"
    edited.write_bytes(b"f" * 64 + b"  Install-Release.ps1\n")
    calls: list = []
    with pytest.raises(IntegrityError) as caught:
        _sign_in_actions(tmp_path, dist, calls)
    assert "differs from the bytes compose recorded" in str(caught.value) and str(edited) in str(caught.value)
    assert calls == [] and not list(tree.rglob("*.sigstore.json"))


def test_a_signed_file_compose_did_not_record_is_refused(tmp_path, monkeypatch, capsys):
    tree = _release_tree(tmp_path)
    dist = tmp_path / "dist"
    _compose_entries(dist, tree)
    manifest = json.loads((tree / "manifest.json").read_text())
    (tree / "NOTES.md").write_text("# v0.1.2\n")
    manifest["signing"]["signed_files"].append("manifests/v0.1.2/NOTES.md")
    (tree / "manifest.json").write_text(json.dumps(manifest))
    monkeypatch.chdir(tmp_path)
    # The manifest itself changed after compose recorded it: refused first.
    assert cli.main(["sign", "--dry-run", "--release", "v0.1.2"]) == ExitCode.INTEGRITY
    assert "manifest.json: the release tree's file differs from the bytes compose recorded" in capsys.readouterr().err
    from pipeline.register import Register

    _compose_entries(dist, tree)  # compose again, then lose NOTES.md's entry
    register = Register(dist)
    register.record_stage("compose:v0.1.2", "f" * 64, [a for a in register.outputs_of("compose:v0.1.2") if not a.name.endswith("NOTES.md")])
    assert cli.main(["sign", "--dry-run", "--release", "v0.1.2"]) == ExitCode.INPUT
    assert "the register holds no release-tree entry for NOTES.md" in capsys.readouterr().err


def test_sign_signs_the_newest_release_compose_recorded(tmp_path, monkeypatch, capsys):
    _release_tree(tmp_path, "v0.1.2")
    _release_tree(tmp_path, "v0.1.3")  # on disk, newer, but not what compose recorded in this dist
    _compose_entries(tmp_path / "dist", tmp_path / "manifests" / "v0.1.2")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["sign", "--dry-run"]) == 0
    assert json.loads(capsys.readouterr().out)["release"] == "v0.1.2"
    assert cli.main(["sign", "--dry-run", "--dist", "elsewhere"]) == 0  # no register: the newest tree folder
    assert json.loads(capsys.readouterr().out)["release"] == "v0.1.3"
    assert not (tmp_path / "elsewhere").exists()  # a dry run writes nothing


def test_a_manifest_without_a_list_of_signed_files_is_refused(tmp_path, monkeypatch, capsys):
    tree = _release_tree(tmp_path)
    manifest = json.loads((tree / "manifest.json").read_text())
    del manifest["signing"]["signed_files"]
    (tree / "manifest.json").write_text(json.dumps(manifest))
    monkeypatch.chdir(tmp_path)
    assert cli.main(["sign", "--dry-run", "--release", "v0.1.2"]) == 1
    assert "signing.signed_files: declares no signed files" in capsys.readouterr().err


def test_release_skips_sign_where_keyless_signing_cannot_happen(monkeypatch):
    import argparse

    from pipeline.stage import Skip

    options = argparse.Namespace(release="v0.1.2")
    for name in ACTIONS_ENV:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(Skip, match="only in the release workflow on GitHub Actions"):
        sig.release_plan(None, [], options)
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    with pytest.raises(Skip, match="cannot request an OIDC identity token"):
        sig.release_plan(None, [], options)
    monkeypatch.setenv("ACTIONS_ID_TOKEN_REQUEST_URL", "https://token.invalid/")
    monkeypatch.setenv("ACTIONS_ID_TOKEN_REQUEST_TOKEN", "t")
    with pytest.raises(Skip, match="no --release given"):
        sig.release_plan(None, [], argparse.Namespace(release=None))
    (step,) = sig.release_plan(None, [], options)
    assert step[0] == "v0.1.2" and callable(step[1])
