"""`publish --release`: the product release of the ready sample release made by the pipeline
(tests/kits/releasekit.py), through its gates, against the GitHub stand-in.

Every bundle is made by the local Sigstore stand-in (tests/kits/sigstore_standin.py) for the tree's
expected identity and checked by the REAL verifier, through the `PIPELINE_TEST_SIGSTORE` seam.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path

import pytest
from github_standin import FakeClock, StandIn, Token, declared_checks, workflow_job_permissions
from releasekit import RELEASE, sample_release
from repokit import ROOT, SIGSTORE_VECTORS, git
from sigstore_standin import SigstoreStandIn, record_statement_bundle

from pipeline.cli import main
from pipeline.errors import PipelineError, RefusedError
from pipeline.formats.publication_plan import read_receipt
from pipeline.formats.test_receipt import (
    SKIPS_ALLOWED_FOR_PUBLICATION,
    Selection,
    make_test_receipt,
    write_test_receipt,
)
from pipeline.formats.test_subset import read_subset
from pipeline.infra.github import GitHub
from pipeline.register import Register
from pipeline.stages.publish import VERIFIER_KINDS, publish_release
from pipeline.stages.verifier_dist import build_verifier_dist
from pipeline.util.hashing import sha256_bytes

TOKEN = "ghp_productStandinToken0123456789abcdef"
JOB_TOKEN = "ghs_publishJobGithubToken0123456789abcd"  # an installation token: the publish job's github.token
WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"
REPO = "alphastorm/omp-ninfer"
TREE = f"manifests/{RELEASE}"
SIGNED = ["manifest.json", "qualification/rtx4090-windows-native.SHA256SUMS"]




@pytest.fixture(scope="module")
def release(tmp_path_factory):
    return sample_release(tmp_path_factory)


@pytest.fixture(scope="module")
def sigstore_kit(tmp_path_factory):
    return SigstoreStandIn(tmp_path_factory.mktemp("sigstore")).write()


@pytest.fixture(autouse=True)
def _standin_trust(sigstore_kit, monkeypatch):
    monkeypatch.setenv("PIPELINE_TEST_SIGSTORE", str(sigstore_kit.directory))


VERIFIERS: dict[str, Path] = {}  # product commit -> a dist holding its verifier-dist outputs


class Product:
    def __init__(self, release, tmp: Path, gh: StandIn, monkeypatch, kit: SigstoreStandIn) -> None:
        self.release = release
        self.root = release.clone(tmp / "product", "ready")
        self.add_pipeline_source()
        self.dist = tmp / "dist"
        self.dist.mkdir()
        self.gh = gh
        gh.tokens[TOKEN] = Token()
        self.monkeypatch = monkeypatch
        self.kit = kit
        self.settle()

    @property
    def commit(self) -> str:
        return git(self.root, "rev-parse", "HEAD")

    def settle(self) -> None:
        """Everything the gates need for HEAD: on GitHub, a green test run, a bundle per signed file, the verifier of HEAD."""
        commit = self.commit
        self.verifier(commit)
        self.gh.add_commit(commit, [f"{TREE}/manifest.json"])
        with contextlib.suppress(RefusedError):  # a commit that declares no required checks: the ci-at-commit gate refuses it
            self.gh.pass_checks(commit, declared_checks(self.root, commit))  # the product's CI green at exactly this commit
        tree = git(self.root, "rev-parse", f"{commit}^{{tree}}")
        write_test_receipt(self.dist / "test-run-receipt.json", make_test_receipt(commit=commit, tree=tree, passed=812, failed=0, errors=0, skipped_tests=SKIPS_ALLOWED_FOR_PUBLICATION))
        manifest = json.loads(git(self.root, "show", f"{commit}:{TREE}/manifest.json"))
        identity = manifest["signing"]["certificate_identity"]
        for rel in SIGNED:
            data = (self.root / TREE / rel).read_bytes()
            (self.root / TREE / (rel + ".sigstore.json")).write_bytes(self.kit.sign_artifact(data, self.kit.token(identity)).to_bytes())

    def add_pipeline_source(self) -> None:
        """The product repository holds the pipeline (as this one does), so verifier-dist can build its commit.
        Files the sample product already has (its lanes, cuts, release trees) are kept; the commit is deterministic."""
        from acceptkit import product_files

        subsets = sorted(path.relative_to(ROOT).as_posix() for path in (ROOT / "tests" / "subsets").glob("*.txt"))
        for name in [*product_files(), *subsets]:  # the declared test subsets too: publish reads them at the commit
            target = self.root / name
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(ROOT / name, target)
                shutil.copymode(ROOT / name, target)
        git(self.root, "add", "-A")
        git(self.root, "commit", "-q", "-m", "the pipeline beside the release tree")

    def verifier(self, commit: str) -> None:
        """verifier-dist of the product commit (built once per commit, recorded in this dist's register)."""
        template = VERIFIERS.get(commit)
        if template is None:
            template = self.dist.parent / f"verifier-{commit[:12]}"
            build_verifier_dist(dist=template, source=f"{self.root}@{commit}")
            VERIFIERS[commit] = template
        entries = [a for kind in VERIFIER_KINDS for a in Register(template).query(kind)]
        for entry in entries:
            (self.dist / entry.path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(template / entry.path, self.dist / entry.path)
        Register(self.dist).record_stage("verifier-dist", "0" * 64, entries)

    def client(self, token: str = TOKEN) -> GitHub:
        return GitHub(REPO, token, api=self.gh.url, uploads=self.gh.uploads, clock=FakeClock(), write_interval=0)

    def subset_receipt(self, name: str, sha256: str) -> Selection:
        """A green test-run receipt of HEAD that names the declared subset `name` with `sha256`."""
        selection = Selection("subset", name, sha256)
        tree = git(self.root, "rev-parse", "HEAD^{tree}")
        write_test_receipt(self.dist / "test-run-receipt.json",
                           make_test_receipt(commit=self.commit, tree=tree, passed=40, failed=0, errors=0,
                                             skipped_tests=SKIPS_ALLOWED_FOR_PUBLICATION, selection=selection))
        return selection

    def publish(self, **kwargs):
        return publish_release(RELEASE, root=self.root, dist=self.dist, lanes_dir=self.release.lanes_dir, github=kwargs.pop("github", None) or self.client(), **kwargs)

    def plan_sha(self) -> str:
        with contextlib.suppress(RefusedError):  # a dry run whose gates refuse still writes the plan
            self.publish()
        return sha256_bytes((self.dist / "publish" / f"product-{RELEASE}" / "plan.json").read_bytes())

    def refused(self, gate: str, message: str) -> RefusedError:
        sha = self.plan_sha()
        with pytest.raises(RefusedError) as caught:
            self.publish(apply=True, plan_sha256=sha)
        error = caught.value
        assert error.exit_code == 7
        assert error.what.startswith(f"gate {gate} refused: "), error.what
        assert message in error.what, error.what
        assert "(and" not in error.what, f"only the {gate} gate may refuse: {error.what}"
        assert self.gh.writes == 0, "a gate refused after a write"
        return error


@pytest.fixture
def product(release, tmp_path, monkeypatch, sigstore_kit):
    with StandIn(REPO) as gh:
        yield Product(release, tmp_path, gh, monkeypatch, sigstore_kit)


@pytest.mark.slow
def test_a_ready_release_made_by_the_pipeline_publishes_through_its_gates(product, capsys):
    sha = product.plan_sha()
    plan = json.loads((product.dist / "publish" / f"product-{RELEASE}" / "plan.json").read_bytes())
    assert plan["release"]["make_latest"] == "true" and plan["release"]["prerelease"] is False
    assert plan["gates"] == ["verify-ready", "acceptance", "reviews", "test-run", "signatures", "evidence", "verifier", "token", "rate-limit", "github-unchanged", "ci-at-commit", "tag", "single-draft", "draft-assets"]
    names = ["manifest.json", "manifest.json.sigstore.json", "omp_ninfer_pipeline-0.1.0-py3-none-any.whl", "omp_ninfer_pipeline-0.1.0.SHA256SUMS",
             "omp_ninfer_pipeline-0.1.0.auditor-requirements.txt", "omp_ninfer_pipeline-0.1.0.tar.gz", "rtx4090-windows-native.SHA256SUMS", "rtx4090-windows-native.SHA256SUMS.sigstore.json"]  # and the verifier auditors install
    assert [a["name"] for a in plan["assets"]] == names
    err = capsys.readouterr().err
    assert all(f"OK:   gate {gate}" in err for gate in plan["gates"]), err
    product.publish(apply=True, plan_sha256=sha)
    [published] = product.gh.releases_for(RELEASE)
    assert not published.draft and not published.prerelease and product.gh.latest_id == published.id, "make_latest true, set explicitly"
    assert product.gh.refs[RELEASE] == product.commit
    assert published.body == (product.root / TREE / "NOTES.md").read_text() and published.name == published.body.splitlines()[0][2:]
    by_name = {a.name: a for a in product.gh.assets_of(published)}
    assert sorted(by_name) == names
    assert by_name["manifest.json"].data == (product.root / TREE / "manifest.json").read_bytes()
    receipt = read_receipt(product.dist / "publish" / f"product-{RELEASE}" / "receipt.json")
    assert receipt["kind"] == "product" and receipt["plan_sha256"] == sha and receipt["make_latest"] == "true"
    assert receipt["ci"]["sha"] == product.commit and receipt["ci"]["required"] == [".ci/run", "unit tier on Windows"], "the CI that gated it"
    assert plan["test_selection"] == receipt["test_selection"] == {"kind": "full"}, "the release records the whole suite"
    # Converged: a re-run writes nothing.
    writes = product.gh.writes
    product.publish(apply=True, plan_sha256=sha)
    assert product.gh.writes == writes


@pytest.mark.slow
def test_the_product_is_refused_until_its_ci_passed_at_exactly_the_tagged_commit(product):
    run = product.gh.add_check_run(product.commit, ".ci/run", conclusion="failure")  # re-run after the green one, and failed
    product.refused("ci-at-commit", f"the required check '.ci/run' run {run['id']} concluded failure, {run['html_url']}")
    assert not product.gh.releases_for(RELEASE) and RELEASE not in product.gh.refs, "nothing is written"


@pytest.mark.slow
def test_a_commit_that_declares_no_required_checks_is_refused(product):
    git(product.root, "rm", "-q", ".github/required-checks.toml")
    git(product.root, "commit", "-qm", "no required checks")
    product.settle()
    product.refused("ci-at-commit", "are not known: the commit declares no required checks (.github/required-checks.toml)")


@pytest.mark.slow
def test_the_verify_gate_runs_on_a_clean_checkout_of_the_exact_commit(product):
    # A file the closed release tree does not list, committed: verify --require-ready fails on that commit.
    (product.root / TREE / "stray.txt").write_text("not part of the release tree\n")
    git(product.root, "add", f"{TREE}/stray.txt")
    git(product.root, "commit", "-qm", "a stray file in the release tree")
    product.settle()
    product.refused("verify-ready", "fails on a clean checkout of")


@pytest.mark.slow
def test_uncommitted_changes_do_not_reach_the_verify_gate(product):
    """The gate verifies the commit being tagged, not the working tree."""
    (product.root / TREE / "stray.txt").write_text("uncommitted\n")
    sha = product.plan_sha()
    product.publish(apply=True, plan_sha256=sha)
    assert product.gh.releases_for(RELEASE)


@pytest.mark.slow
def test_the_acceptance_gate_refuses_without_a_passing_record(product, monkeypatch):
    """A ready tree always binds a passing record, so verify refuses first; verify is passed over
    here only to show that the acceptance gate also refuses on its own."""
    import pipeline.formats.release.contract as verify_module

    manifest_path = product.root / TREE / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["qualification"]["acceptance"] = None
    manifest["qualification"]["external_installation_passed"] = False
    from pipeline.util.jsonio import canonical_bytes

    manifest_path.write_bytes(canonical_bytes(manifest))
    git(product.root, "commit", "-qam", "acceptance unbound")
    product.settle()
    monkeypatch.setattr(verify_module, "verify_release", lambda root, release, **kw: type("R", (), {"valid": True})())
    # Unbinding the acceptance unbinds the candidate the councils reviewed, so the reviews gate refuses too
    # (tests/integration/test_review_gate.py); passed over here as verify is.
    import pipeline.stages.publish.product as publish_product  # where product_target looks the gate up

    monkeypatch.setattr(publish_product, "_review_gate", lambda manifest, show, release: lambda: "passed over")
    product.refused("acceptance", "no passing external-installation acceptance record is bound")


@pytest.mark.slow
def test_the_reviews_gate_refuses_a_ledger_other_than_the_one_the_manifest_binds(product, monkeypatch):
    """A ready tree's ledger is bound by hash, so verify refuses first; verify is passed over here only to show
    that the reviews gate reads the ledger at the commit and refuses other bytes on its own."""
    import pipeline.formats.release.contract as verify_module

    ledger = product.root / TREE / "reviews.toml"
    ledger.write_text(ledger.read_text().replace('state = "closed"', 'state = "open"', 1))
    git(product.root, "commit", "-qam", "a council reopened its review without rebinding")
    product.settle()
    monkeypatch.setattr(verify_module, "verify_release", lambda root, release, **kw: type("R", (), {"valid": True})())
    error = product.refused("reviews", "the review ledger differs from the bytes the manifest binds")
    assert error.field == "reviews.sha256"


@pytest.mark.slow
def test_the_test_run_gate_needs_a_green_run_of_this_commit(product):
    dist_receipt = product.dist / "test-run-receipt.json"
    tree = git(product.root, "rev-parse", "HEAD^{tree}")
    write_test_receipt(dist_receipt, make_test_receipt(commit="0" * 40, tree=tree, passed=812, failed=0, errors=0))
    product.refused("test-run", "the test-run receipt is for another commit")
    write_test_receipt(dist_receipt, make_test_receipt(commit=product.commit, tree=tree, passed=810, failed=2, errors=0))
    product.refused("test-run", "did not pass (2 failed, 0 errors)")
    # green, but a test of the real Sigstore verifier did not run (a clone without its vectors): not tested
    write_test_receipt(dist_receipt, make_test_receipt(commit=product.commit, tree=tree, passed=812, failed=0, errors=0,
                                                       skipped_tests=["tests/unit/test_sign.py::test_bundle_without_a_log_entry_fails"]))
    product.refused("test-run", "skipped 1 tests that publication does not allow")
    dist_receipt.unlink()
    product.refused("test-run", "there is no test-run receipt")


@pytest.mark.slow
def test_the_test_run_receipt_is_read_once_for_the_plan_and_its_gate(product, monkeypatch, capsys):
    """The plan's test_selection and gate test-run come from one read of the receipt: the gate judges the very
    receipt whose selection the plan binds."""
    import pipeline.formats.test_receipt as test_receipt_module

    reads = []
    real = test_receipt_module.read_test_receipt
    monkeypatch.setattr(test_receipt_module, "read_test_receipt", lambda path: reads.append(path) or real(path))
    product.publish()  # the dry run: the plan and every gate
    assert "OK:   gate test-run: test run on" in capsys.readouterr().err
    assert len(reads) == 1, reads


@pytest.mark.slow
def test_a_declared_subsets_receipt_passes_only_against_the_rehearsals_stand_in_world(product, capsys):
    """The release workflow's rehearsal runs its `tests` job on the declared subset `rehearsal`: that receipt may
    pass only where this process tree's Sigstore test stand-in is the trust in force AND the GitHub API is loopback."""
    subset = product.subset_receipt("rehearsal", read_subset(ROOT, "rehearsal").sha256)
    product.publish()  # the dry run: every gate checked, nothing written
    err = capsys.readouterr().err
    assert (f"OK:   gate test-run: test run of the declared subset 'rehearsal' (sha256 {subset.sha256}), allowed because the Sigstore "
            f"trust in force is the test stand-in of this process tree ({product.kit.directory.resolve()}) and the GitHub API {product.gh.url}") in err
    plan = json.loads((product.dist / "publish" / f"product-{RELEASE}" / "plan.json").read_bytes())
    assert plan["test_selection"] == {"kind": "subset", "name": "rehearsal", "sha256": subset.sha256}, "the plan says what was accepted"
    # Any other GitHub (github.com, an Enterprise Server): the test-run gate refuses the subset, first, and says why.
    elsewhere = GitHub(REPO, TOKEN, api="https://127.0.0.2:9", clock=FakeClock(), write_interval=0, max_attempts=1)
    with pytest.raises(RefusedError) as caught:
        product.publish(github=elsewhere)
    assert caught.value.what.startswith("gate test-run refused: the test-run receipt is of the declared subset 'rehearsal'")
    assert caught.value.field == "selection" and "unset PIPELINE_TEST_SUBSET" in caught.value.fix
    assert "GitHub API: https://127.0.0.2:9 (not loopback)" in caught.value.found
    assert product.gh.writes == 0


@pytest.mark.slow
def test_a_loopback_github_alone_does_not_pass_a_subsets_receipt(product, monkeypatch, capsys):
    """An Enterprise Server through a tunnel (https://localhost:8443/api/v3) or a local proxy to github.com is
    loopback too: without this process tree's Sigstore stand-in in force, the subset receipt is refused."""
    product.subset_receipt("rehearsal", read_subset(ROOT, "rehearsal").sha256)
    monkeypatch.delenv("PIPELINE_TEST_SIGSTORE")
    with pytest.raises(RefusedError):
        product.publish()
    line = next(line for line in capsys.readouterr().err.splitlines() if line.startswith("FAIL: gate test-run:"))
    assert "not in the rehearsal's stand-in world" in line and "unset PIPELINE_TEST_SUBSET" in line
    assert f"Sigstore trust: the release signer's pinned configuration (PIPELINE_TEST_SIGSTORE unset); GitHub API: {product.gh.url} (loopback)" in line
    # A stand-in folder this process tree did not make (a workflow step's env: pointing at one) is no proof either.
    foreign = product.dist.parent / "foreign-standin"
    shutil.copytree(product.kit.directory, foreign)
    description = json.loads((foreign / "standin.json").read_text())
    description["owner"] = {**description["owner"], "start_ticks": description["owner"]["start_ticks"] + 1}  # a reused pid: another process
    (foreign / "standin.json").write_text(json.dumps(description, sort_keys=True) + "\n")
    monkeypatch.setenv("PIPELINE_TEST_SIGSTORE", str(foreign))
    with pytest.raises(RefusedError):
        product.publish()
    line = next(line for line in capsys.readouterr().err.splitlines() if line.startswith("FAIL: gate test-run:"))
    assert "Sigstore trust: PIPELINE_TEST_SIGSTORE refused (PIPELINE_TEST_SIGSTORE names a Sigstore test stand-in that this process's own test run did not make)" in line
    assert product.gh.writes == 0


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "sha256", "message"),
    [
        ("rehearsal", "0" * 64, "the test-run receipt's subset 'rehearsal' has another SHA-256 than the subset file declared at the published commit"),
        ("quick", None, "the test-run receipt's subset 'quick' is not declared at the published commit"),
    ],
)
def test_a_subsets_receipt_must_name_a_subset_the_commit_declares_with_its_sha256(product, capsys, name, sha256, message):
    """In the stand-in world too: the receipt's subset is tests/subsets/<name>.txt at the published commit, byte for byte."""
    product.subset_receipt(name, sha256 or read_subset(ROOT, "rehearsal").sha256)
    with pytest.raises(RefusedError):
        product.publish()
    line = next(line for line in capsys.readouterr().err.splitlines() if line.startswith("FAIL: gate test-run:"))
    assert message in line and "unset PIPELINE_TEST_SUBSET" in line
    assert product.gh.writes == 0


@pytest.mark.slow
def test_the_signature_gate_needs_a_verifying_bundle_for_every_signed_file(product, monkeypatch):
    bundle = product.root / TREE / "qualification" / "rtx4090-windows-native.SHA256SUMS.sigstore.json"
    bundle.unlink()
    product.refused("signatures", "qualification/rtx4090-windows-native.SHA256SUMS has no Sigstore bundle")
    product.settle()
    # A real Sigstore bundle of another file, checked by the real verifier: it must not pass.
    manifest_bundle = product.root / TREE / "manifest.json.sigstore.json"
    shutil.copyfile(SIGSTORE_VECTORS / "bundle_v3_github.whl.sigstore", manifest_bundle)
    product.refused("signatures", f"the Sigstore bundle of {TREE}/manifest.json does not verify")
    # A stand-in bundle of these bytes, but signed by another workflow (a branch run, not the release tag).
    data = (product.root / TREE / "manifest.json").read_bytes()
    other = "https://github.com/alphastorm/omp-ninfer/.github/workflows/release.yml@refs/heads/main"
    manifest_bundle.write_bytes(product.kit.sign_artifact(data, product.kit.token(other)).to_bytes())
    product.refused("signatures", f"the Sigstore bundle of {TREE}/manifest.json does not verify")


@pytest.mark.slow
def test_the_verifier_gate_needs_the_verifier_of_the_tagged_commit(product):
    register = Register(product.dist)
    register.record_stage("verifier-dist", "0" * 64, [])  # no verifier of this commit
    product.refused("verifier", f"the register holds no single verifier-wheel built from {product.commit[:12]}")
    wheel = next(product.dist.glob("verifier/*.whl"))
    product.verifier(product.commit)
    wheel.write_bytes(wheel.read_bytes() + b"\0")  # the bytes changed after verifier-dist recorded them
    with pytest.raises(Exception, match="changed on disk"):
        product.publish()


@pytest.mark.slow
def test_the_cli_dry_run_prints_the_plan_and_apply_publishes(product, monkeypatch, capsys):
    for key, value in product.gh.env(TOKEN).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("PIPELINE_GITHUB_WRITE_INTERVAL", "0")
    common = ["--root", str(product.root), "--dist", str(product.dist), "--lanes-dir", str(product.release.lanes_dir)]
    assert main(["publish", "--release", RELEASE, *common]) == 0
    out, err = capsys.readouterr()
    sha = sha256_bytes(out.encode())
    assert f"apply with: --apply --plan-sha256 {sha}" in err and TOKEN not in out + err
    assert main(["publish", "--release", RELEASE, "--apply", "--plan-sha256", "f" * 64, *common]) == 7
    assert "not the one that was reviewed" in capsys.readouterr().err
    assert main(["publish", "--release", RELEASE, "--apply", "--plan-sha256", sha, *common]) == 0
    assert [r.draft for r in product.gh.releases_for(RELEASE)] == [False]


@pytest.mark.slow
def test_compose_binds_the_component_publication_receipt(release, tmp_path, capsys, sigstore_kit):
    """The component published by `publish --component` is what compose binds as published."""
    from dataclasses import replace

    from pipeline.errors import IntegrityError
    from pipeline.formats.lanes import load_lane
    from pipeline.register import Register
    from pipeline.stages.compose import compose_release
    from pipeline.stages.publish import publish_lane
    from pipeline.util.jsonio import canonical_bytes

    dist = tmp_path / "dist"
    shutil.copytree(release.dist, dist)
    (tmp_path / "w").mkdir()
    lanes = tmp_path / "w" / "lanes"
    shutil.copytree(release.lanes_dir, lanes)
    shutil.copytree(release.lanes_dir.parent / "cuts", tmp_path / "w" / "cuts")
    lane = load_lane(lanes / "rtx4090-windows-native.toml")
    record_statement_bundle(sigstore_kit, dist, next((dist / lane.id / "attestations").glob("*.provenance.intoto.json")), RELEASE)
    with StandIn("alphastorm/ninfer") as gh:
        gh.tokens[TOKEN] = Token()
        gh.add_commit(lane.ledger().current("0.7.0").source_commit)
        gh.pass_checks(lane.ledger().current("0.7.0").source_commit, lane.required_checks)
        client = GitHub("alphastorm/ninfer", TOKEN, api=gh.url, uploads=gh.uploads, clock=FakeClock(), write_interval=0)
        publish_lane("4090", dist=dist, lanes_dir=lanes, github=client)
        sha = sha256_bytes((dist / "publish" / "component-v0.7.0-qwen38-4090-beta.2" / "plan.json").read_bytes())
        publish_lane("4090", dist=dist, lanes_dir=lanes, github=client, apply=True, plan_sha256=sha)
    root = release.clone(tmp_path / "product", "draft")
    capsys.readouterr()
    compose_release(root, RELEASE, dist=dist, lanes_dir=lanes)
    assert "rtx4090-windows-native: published as release" in capsys.readouterr().err
    # The receipt is copied into the tree byte for byte and bound by hash: the tree's evidence for `published`.
    from pipeline.formats.release.contract import verify_release

    register = Register(dist)
    published = register.one("release-publication", lane="rtx4090-windows-native", needed_by="t", produced_by="t")
    copy = root / TREE / "qualification" / "rtx4090-windows-native.component-publication.json"
    assert copy.read_bytes() == (dist / published.path).read_bytes()
    row = json.loads((root / TREE / "manifest.json").read_text())["components"]["ninfer_variants"][0]
    assert row["published"] is True
    assert row["component_publication"] == {"path": f"{TREE}/qualification/rtx4090-windows-native.component-publication.json", "sha256": sha256_bytes(copy.read_bytes()), "public_url": None}
    assert verify_release(root, RELEASE, lanes_dir=lanes).valid
    # A copy that names other bytes (hash rebound by a forger) is named by verify.
    original = copy.read_bytes()
    forged = json.loads(original)
    forged["assets"][0]["sha256"] = "1" * 64
    forged["assets"][0]["digest"] = "sha256:" + "1" * 64
    copy.write_bytes(canonical_bytes(forged))
    manifest_path = root / TREE / "manifest.json"
    manifest_before = manifest_path.read_bytes()
    manifest = json.loads(manifest_before)
    manifest["components"]["ninfer_variants"][0]["component_publication"]["sha256"] = sha256_bytes(copy.read_bytes())
    manifest_path.write_bytes(canonical_bytes(manifest))
    report = verify_release(root, RELEASE, lanes_dir=lanes)
    assert any(p.check == "publication" and p.file == f"{TREE}/qualification/rtx4090-windows-native.component-publication.json" and p.field == "assets" for p in report.problems.items), [p.message() for p in report.problems.items]
    copy.write_bytes(original)
    manifest_path.write_bytes(manifest_before)
    toml = root / TREE / "release.toml"
    text = toml.read_text()
    toml.write_text(text.replace('from = "register"\nstatus = "qualified"\npublished = true', 'from = "register"\nstatus = "qualified"\npublished = false'))
    assert toml.read_text() != text
    with pytest.raises(RefusedError, match="is published \\(release .* but release.toml says it is not") as caught:
        compose_release(root, RELEASE, dist=dist, lanes_dir=lanes)
    assert caught.value.field == "lanes.rtx4090-windows-native.published"
    toml.write_text(text)
    # A receipt of other bytes is drift, named with found and expected.
    register = Register(dist)
    entry = register.one("release-publication", lane="rtx4090-windows-native", needed_by="t", produced_by="t")
    path = dist / entry.path
    doc = json.loads(path.read_text())
    doc["assets"][0]["sha256"] = "0" * 64
    doc["assets"][0]["digest"] = "sha256:" + "0" * 64
    path.write_bytes(canonical_bytes(doc))
    register.artifacts[entry.name] = replace(entry, sha256=sha256_bytes(path.read_bytes()), size=path.stat().st_size)
    register.save()
    with pytest.raises(IntegrityError, match=f"published other bytes for {doc['assets'][0]['name']}"):
        compose_release(root, RELEASE, dist=dist, lanes_dir=lanes)


# -- the token in hand: release.yml's product publish job runs with github.token -------------------

def _dry_run_sha(product: Product, token: str) -> str:
    with contextlib.suppress(RefusedError):
        product.publish(github=product.client(token))
    return sha256_bytes((product.dist / "publish" / f"product-{RELEASE}" / "plan.json").read_bytes())


@pytest.mark.slow
def test_the_publish_jobs_own_token_publishes_with_the_immutable_setting_unknown(product, capsys):
    """`github.token` carries exactly the job's `permissions:` (read from release.yml): no administration, so
    GitHub answers GET /immutable-releases with 403.  That is an unknown setting, recorded and warned once, and
    immutability is read from the published release's own field; the publication goes through."""
    product.gh.tokens[JOB_TOKEN] = Token(permissions=workflow_job_permissions(WORKFLOW, "publish"))
    product.gh.immutable_enabled = True
    sha = _dry_run_sha(product, JOB_TOKEN)
    err = capsys.readouterr().err
    assert "apply with:" in err, err
    assert err.count("immutable-releases setting unknown") == 1 and "Resource not accessible by integration" in err
    plan = json.loads((product.dist / "publish" / f"product-{RELEASE}" / "plan.json").read_bytes())
    assert plan["observed"]["immutable_releases"] is None, "unknown, not false"
    assert ("GET", f"/repos/{REPO}/immutable-releases", 403) in product.gh.log
    product.publish(apply=True, plan_sha256=sha, github=product.client(JOB_TOKEN))
    assert capsys.readouterr().err.count("immutable-releases setting unknown") == 1, "warned once per run"
    [published] = product.gh.releases_for(RELEASE)
    assert not published.draft and published.immutable and product.gh.refs[RELEASE] == product.commit
    receipt = read_receipt(product.dist / "publish" / f"product-{RELEASE}" / "receipt.json")
    assert receipt["immutable"] is True and receipt["immutable_releases_enabled"] is None
    assert "setting is unknown" in receipt["immutable_reason"] and "own immutable field is true" in receipt["immutable_reason"]
    assert "Resource not accessible by integration" in receipt["immutable_reason"] and JOB_TOKEN not in json.dumps(receipt)
    writes = product.gh.writes
    product.publish(apply=True, plan_sha256=sha, github=product.client(JOB_TOKEN))  # converged: the re-run writes nothing
    assert product.gh.writes == writes


@pytest.mark.slow
def test_a_token_that_cannot_read_releases_is_told_what_it_lacks_not_to_export_it(product, capsys):
    """A set token GitHub refuses (a job with `permissions: {}`: metadata only): every gate that reads GitHub says so,
    and no fix line tells the user to export a token that is already set."""
    product.gh.tokens[JOB_TOKEN] = Token(permissions={})
    with pytest.raises(PipelineError) as caught:
        product.publish(github=product.client(JOB_TOKEN))
    err = capsys.readouterr().err
    assert caught.value.exit_code == 7 and "apply with:" not in err
    assert "export GITHUB_TOKEN" not in err + str(caught.value), err
    assert "may not write" in err or "Resource not accessible by integration" in err, err
    assert product.gh.writes == 0
