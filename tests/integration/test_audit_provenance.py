"""`audit` and `check-assets` check the SLSA statement beside a set: its subjects are exactly the bound files.

The release is served on loopback by tests/integration/test_audit.py's server, with the
real RTX 4090 set and the statement the package stage wrote beside it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from repokit import FIXTURES
from test_audit import (  # noqa: F401 - fixtures
    LANE,
    RECORD_COMMIT,
    RELEASE,
    Tree,
    _image_row,
    fails,
    line_for,
    native_set,
    run_audit,
    server,
)

from pipeline.cli import main
from pipeline.formats import provenance as slsa
from pipeline.formats.release.names import EVIDENCE

FIXTURE = FIXTURES / "sigstore" / "a.dsse.staging-rekor-v2.txt.sigstore.json"


def _statement(set_dir: Path) -> Path:
    [path] = list((set_dir.parent / slsa.FOLDER).glob("*" + slsa.SUFFIX))
    return path


def _publish_statement(tree: Tree, set_dir: Path, data: bytes | None = None) -> str:
    receipt = json.loads((set_dir / "package-build-receipt.json").read_bytes())
    path = _statement(set_dir)
    url_path = f"/alphastorm/ninfer/releases/download/{receipt['component_tag']}/{path.name}"
    tree.server.files[url_path] = path.read_bytes() if data is None else data
    return url_path


@pytest.mark.slow
def test_audit_checks_the_statement_beside_the_set(server, tmp_path, native_set):  # noqa: F811
    workspace, set_dir = native_set
    tree = Tree(server, set_dir, workspace.lanes_dir)
    _publish_statement(tree, set_dir)
    report, lines = run_audit(tree.publish(), tmp_path, lanes_dir=workspace.lanes_dir)
    assert fails(lines) == [], "\n".join(lines)
    line = line_for(lines, f"OK: provenance {LANE} {_statement(set_dir).name}")
    assert "11 subjects are exactly the set's files" in line and slsa.LOCAL_BUILDER in line
    skipped = line_for(lines, f"SKIP: signature {_statement(set_dir).name}")
    assert skipped.startswith(f"SKIP: signature {_statement(set_dir).name}: made before signing.evidence") and skipped.endswith(".sigstore.json")


@pytest.mark.slow
def test_audit_fails_a_statement_that_names_other_bytes(server, tmp_path, native_set):  # noqa: F811
    workspace, set_dir = native_set
    tree = Tree(server, set_dir, workspace.lanes_dir)
    document = json.loads(_statement(set_dir).read_bytes())
    document["subject"][0]["digest"]["sha256"] = "0" * 64
    _publish_statement(tree, set_dir, slsa.statement_bytes(document))
    _report, lines = run_audit(tree.publish(), tmp_path, lanes_dir=workspace.lanes_dir)
    [line] = fails(lines)
    assert line.startswith(f"FAIL: provenance {LANE}") and "the provenance names other bytes for" in line


@pytest.mark.slow
def test_audit_fails_a_dsse_bundle_that_is_not_the_release_workflows(server, tmp_path, native_set):  # noqa: F811
    workspace, set_dir = native_set
    tree = Tree(server, set_dir, workspace.lanes_dir)
    url_path = _publish_statement(tree, set_dir)
    server.files[url_path + ".sigstore.json"] = FIXTURE.read_bytes()  # a real DSSE bundle, of another workflow and statement
    _report, lines = run_audit(tree.publish(), tmp_path, lanes_dir=workspace.lanes_dir)
    [line] = fails(lines)
    assert line.startswith(f"FAIL: signature {_statement(set_dir).name}")


@pytest.mark.slow
def test_a_set_without_a_statement_is_skipped_not_passed(server, tmp_path, native_set):  # noqa: F811
    workspace, set_dir = native_set
    tree = Tree(server, set_dir, workspace.lanes_dir)
    report, lines = run_audit(tree.publish(), tmp_path, lanes_dir=workspace.lanes_dir)
    line = line_for(lines, f"SKIP: provenance {LANE} {_statement(set_dir).name}")
    assert "made before signing.evidence" in line and line.endswith(tree.server.url(_statement_url(set_dir)))
    assert report.passed, "a release made before the promise keeps SKIP"


@pytest.mark.slow
def test_check_assets_checks_a_statement_given_beside_the_set(native_set, tmp_path, capsys):  # noqa: F811
    workspace, set_dir = native_set
    lanes = ["--lanes-dir", str(workspace.lanes_dir)]
    assert main(["check-assets", str(set_dir), "--provenance", str(_statement(set_dir)), *lanes]) == 0
    assert "provenance: 11 subjects are exactly the set's files" in capsys.readouterr().out
    other = tmp_path / "other.provenance.intoto.json"
    document = json.loads(_statement(set_dir).read_bytes())
    document["subject"] = document["subject"][1:]
    other.write_bytes(slsa.statement_bytes(document))
    assert main(["check-assets", str(set_dir), "--provenance", str(other), *lanes]) == 5
    assert "the provenance subjects are not exactly the set's files" in capsys.readouterr().err


# -- signing.evidence: the release promises its statements and bundles ------------------------------


def _statement_url(set_dir: Path) -> str:
    receipt = json.loads((set_dir / "package-build-receipt.json").read_bytes())
    return f"/alphastorm/ninfer/releases/download/{receipt['component_tag']}/{_statement(set_dir).name}"


def _promise(tree: Tree, row: dict, key: str, name: str, data: bytes) -> None:
    """The manifest promises the evidence, and the row binds the tree copy of the statement (raw-pinned)."""
    tree.manifest["signing"]["evidence"] = dict(EVIDENCE)
    path = f"manifests/{RELEASE}/qualification/{name}"
    tree.server.files[f"/alphastorm/omp-ninfer/raw/{RECORD_COMMIT}/{path}"] = data
    row[key] = {"path": path, "sha256": hashlib.sha256(data).hexdigest(), "public_url": f"{tree.product}/raw/{RECORD_COMMIT}/{path}"}


def _promising_set(srv, set_dir: Path, lanes_dir: Path) -> Tree:
    tree = Tree(srv, set_dir, lanes_dir)
    _promise(tree, tree.manifest["components"]["ninfer_variants"][0], "provenance", f"{LANE}.provenance.intoto.json", _statement(set_dir).read_bytes())
    return tree


@pytest.mark.slow
def test_a_promised_set_statement_that_is_missing_fails_naming_its_url(server, tmp_path, native_set):  # noqa: F811
    workspace, set_dir = native_set
    tree = _promising_set(server, set_dir, workspace.lanes_dir)
    report, lines = run_audit(tree.publish(), tmp_path, lanes_dir=workspace.lanes_dir)
    url = server.url(_statement_url(set_dir))
    assert fails(lines) == [f"FAIL: provenance {LANE} {_statement(set_dir).name}: not published: no provenance statement at {url} (signing.evidence promises it, with its DSSE bundle beside it)"]
    assert line_for(lines, f"OK: {LANE} provenance")  # the tree copy itself is bound and fetched at its raw URL
    assert not report.passed


@pytest.mark.slow
def test_a_promised_set_bundle_that_is_missing_fails(server, tmp_path, native_set):  # noqa: F811
    workspace, set_dir = native_set
    tree = _promising_set(server, set_dir, workspace.lanes_dir)
    url_path = _publish_statement(tree, set_dir)
    report, lines = run_audit(tree.publish(), tmp_path, lanes_dir=workspace.lanes_dir, allow_unsigned=False)
    assert line_for(lines, f"OK: provenance {LANE} {_statement(set_dir).name}")
    bundle = server.url(url_path) + ".sigstore.json"
    assert line_for(fails(lines), f"FAIL: signature {_statement(set_dir).name}") == f"FAIL: signature {_statement(set_dir).name}: not signed: no DSSE bundle at {bundle}"
    # --allow-unsigned (pre-signing audits) turns only the missing bundles into SKIP, as for signed files.
    report, lines = run_audit(tree.publish(), tmp_path / "unsigned", lanes_dir=workspace.lanes_dir, allow_unsigned=True)
    assert fails(lines) == [] and report.passed
    assert line_for(lines, f"SKIP: signature {_statement(set_dir).name}").endswith("(allowed: --allow-unsigned, or status candidate)")


@pytest.mark.slow
def test_a_promised_set_statement_for_other_subjects_fails(server, tmp_path, native_set):  # noqa: F811
    workspace, set_dir = native_set
    tree = _promising_set(server, set_dir, workspace.lanes_dir)
    document = json.loads(_statement(set_dir).read_bytes())
    document["subject"] = document["subject"][1:]
    _publish_statement(tree, set_dir, slsa.statement_bytes(document))
    _report, lines = run_audit(tree.publish(), tmp_path, lanes_dir=workspace.lanes_dir)
    [line] = fails(lines)
    assert line.startswith(f"FAIL: provenance {LANE} {_statement(set_dir).name}: ") and "the provenance subjects are not exactly the set's files" in line


@pytest.mark.slow
def test_a_published_statement_must_be_the_tree_copy_the_manifest_binds(server, tmp_path, native_set):  # noqa: F811
    workspace, set_dir = native_set
    tree = _promising_set(server, set_dir, workspace.lanes_dir)
    document = json.loads(_statement(set_dir).read_bytes())
    document["predicate"]["runDetails"]["builder"]["id"] = "https://example.invalid/another-builder"  # same subjects, other bytes
    _publish_statement(tree, set_dir, slsa.statement_bytes(document))
    _report, lines = run_audit(tree.publish(), tmp_path, lanes_dir=workspace.lanes_dir)
    [line] = fails(lines)
    assert "the published statement is not the tree copy the manifest binds" in line and f"{LANE}.provenance.sha256" in line


def _image_tree(srv, *, promised: bool, subject: str | None = None) -> tuple[Tree, str, str]:
    """A release with the container row, its image in the registry, and (promised) the row's image_provenance record."""
    body = b'{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{},"layers":[]}'
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    srv.registry[("alphastorm/ninfer-runtime", digest)] = body
    tree = Tree(srv, None, None)
    row = _image_row(f"127.0.0.1:{srv.port}/alphastorm/ninfer-runtime@{digest}", digest)
    tree.manifest["components"]["ninfer"] = row
    document = json.loads(slsa.statement_bytes(_any_statement_document()))
    document["subject"] = [{"name": "ninfer-runtime", "digest": {"sha256": (subject or digest).removeprefix("sha256:")}}]
    document["predicate"]["buildDefinition"]["buildType"] = slsa.BUILD_TYPE_IMAGE
    document["predicate"]["buildDefinition"]["externalParameters"]["lane"] = row["id"]
    data = slsa.statement_bytes(document)
    name = f"{row['id']}.image.provenance.intoto.json"
    if promised:
        _promise(tree, row, "image_provenance", name, data)
    return tree, f"/alphastorm/omp-ninfer/releases/download/{RELEASE}/{name}", data


def _any_statement_document() -> dict:
    return {
        "_type": slsa.STATEMENT_TYPE,
        "predicateType": slsa.PREDICATE_TYPE,
        "subject": [{"name": "x", "digest": {"sha256": "0" * 64}}],
        "predicate": {
            "buildDefinition": {
                "buildType": slsa.BUILD_TYPE_IMAGE,
                "externalParameters": {"component_tag": "v0.13.0-qwen38-5090", "lane": "rtx5090-container", "source_commit": "4" * 40, "source_repository": "https://github.com/alphastorm/ninfer"},
                "internalParameters": {},
                "resolvedDependencies": [],
            },
            "runDetails": {"builder": {"id": slsa.LOCAL_BUILDER}},
        },
    }


def test_a_promised_image_statement_is_fetched_from_the_product_release_and_checked(server, tmp_path):  # noqa: F811
    tree, path, data = _image_tree(server, promised=True)
    name = path.rsplit("/", 1)[1]
    report, lines = run_audit(tree.publish(), tmp_path)
    assert fails(lines) == [f"FAIL: provenance rtx5090-container {name}: not published: no provenance statement at {server.url(path)} (signing.evidence promises it, with its DSSE bundle beside it)"]
    server.files[path] = data
    report, lines = run_audit(tree.publish(), tmp_path / "published", allow_unsigned=False)
    digest = tree.manifest["components"]["ninfer"]["oci_manifest_digest"]
    assert line_for(lines, f"OK: provenance rtx5090-container {name}").startswith(f"OK: provenance rtx5090-container {name} (its subject is the image manifest {digest}; ")
    assert line_for(fails(lines), f"FAIL: signature {name}") == f"FAIL: signature {name}: not signed: no DSSE bundle at {server.url(path)}.sigstore.json"


def test_a_promised_image_statement_for_another_image_fails(server, tmp_path):  # noqa: F811
    tree, path, data = _image_tree(server, promised=True, subject="sha256:" + "5" * 64)
    server.files[path] = data
    _report, lines = run_audit(tree.publish(), tmp_path)
    [line] = fails(lines)
    assert line.startswith("FAIL: provenance rtx5090-container ") and "the image provenance names other subjects than the row's image" in line


def test_an_image_statement_of_a_release_made_before_the_promise_is_skipped(server, tmp_path):  # noqa: F811
    tree, path, _data = _image_tree(server, promised=False)
    report, lines = run_audit(tree.publish(), tmp_path, allow_unsigned=False, certificate_identity=None)
    line = line_for(lines, "SKIP: provenance rtx5090-container")
    assert "made before signing.evidence" in line and line.endswith(server.url(path))


def test_before_ready_only_a_404_for_the_image_statement_is_skip_any_other_answer_fails(server, tmp_path):  # noqa: F811
    """docs/audit-and-sign.md: the product release is published after ready, so a candidate's missing (404) image
    statement is SKIP; a server error for it is FAIL at every status (an audit cannot tell what it would have held)."""
    tree, path, _data = _image_tree(server, promised=True)
    tree.manifest["status"] = "candidate"
    name = path.rsplit("/", 1)[1]
    _report, lines = run_audit(tree.publish(), tmp_path)
    line = line_for(lines, f"SKIP: provenance rtx5090-container {name}")
    assert "status candidate: the product release is published after ready" in line and line.endswith(server.url(path) + " yet")
    assert not [f for f in fails(lines) if name in f], fails(lines)
    server.answer[path] = 503
    _report, lines = run_audit(tree.publish(), tmp_path / "unavailable")
    assert line_for(fails(lines), f"FAIL: provenance rtx5090-container {name}").startswith(f"FAIL: provenance rtx5090-container {name}: ")
    assert not [skipped for skipped in lines if skipped.startswith(f"SKIP: provenance rtx5090-container {name}")]


def test_an_unknown_evidence_promise_is_refused_before_any_download(server, tmp_path):  # noqa: F811
    tree = Tree(server, None, None)
    tree.manifest["signing"]["evidence"] = {"statements": "maybe"}
    url = tree.publish()
    server.log.clear()
    report, lines = run_audit(url, tmp_path)
    assert "signing.evidence" in line_for(fails(lines), "FAIL: manifest") and "is not the evidence promise this audit knows" in line_for(fails(lines), "FAIL: manifest")
    assert len(server.log) == 1 and not report.passed


# -- a rebound lane's set bundle: signed by the release that first shipped the set (issue #17) ------------

PRODUCT_WORKFLOW = "https://github.com/alphastorm/omp-ninfer/.github/workflows/release.yml@refs/tags/"


def _served_manifest(tree: Tree, release: str, document: dict) -> bytes:
    """Another release's manifest in the same repository, beside this one's tree (`manifests/<release>/manifest.json`)."""
    data = (json.dumps(document, indent=2, sort_keys=True) + "\n").encode()
    tree.server.files[tree.manifest_path.replace(f"/manifests/{RELEASE}/", f"/manifests/{release}/")] = data
    return data


def _rebound_tree(srv, set_dir: Path, lanes_dir: Path, chain: list[str]) -> Tree:
    """This release's row rebound unchanged through `chain` (newest first); the last release of it shipped the set."""
    tree = _promising_set(srv, set_dir, lanes_dir)
    row = tree.manifest["components"]["ninfer_variants"][0]
    pinned = None
    for index in range(len(chain) - 1, -1, -1):  # oldest first: each manifest pins its predecessor's by hash
        older = chain[index + 1] if index + 1 < len(chain) else None
        document = {"artifact_type": "omp_ninfer_release_manifest", "release": chain[index], "predecessor": pinned,
                    "components": {"ninfer": None, "ninfer_variants": [{**row, "rebound_from": older}]}}
        pinned = {"release": chain[index], "manifest_sha256": hashlib.sha256(_served_manifest(tree, chain[index], document)).hexdigest()}
    row["rebound_from"] = chain[0]
    tree.manifest["predecessor"] = pinned
    return tree


def _sign_statement(tree: Tree, set_dir: Path, kit, release: str) -> None:
    url_path = _publish_statement(tree, set_dir)
    tree.server.files[url_path + ".sigstore.json"] = kit.sign_dsse(_statement(set_dir).read_bytes(), kit.token(PRODUCT_WORKFLOW + release)).to_bytes()


@pytest.fixture
def sigstore_kit(tmp_path):
    from sigstore_standin import SigstoreStandIn

    return SigstoreStandIn(tmp_path / "sigstore").write()


@pytest.mark.slow
@pytest.mark.parametrize("chain", [["v0.13.0"], ["v0.13.0", "v0.12.0"]], ids=["one-rebind", "rebound-twice"])
def test_a_rebound_sets_bundle_signed_by_the_release_that_first_shipped_it_verifies(server, tmp_path, native_set, sigstore_kit, chain):  # noqa: F811
    workspace, set_dir = native_set
    tree = _rebound_tree(server, set_dir, workspace.lanes_dir, chain)
    _sign_statement(tree, set_dir, sigstore_kit, chain[-1])
    report, lines = run_audit(tree.publish(), tmp_path, lanes_dir=workspace.lanes_dir, trust_config=str(sigstore_kit.trust_config_path))
    assert fails(lines) == [], "\n".join(lines)
    line = line_for(lines, f"OK: signature {_statement(set_dir).name}")
    assert line.startswith(f"OK: signature {_statement(set_dir).name} (DSSE signed by {PRODUCT_WORKFLOW}{chain[-1]}, log index ")
    assert line.endswith(f"; {chain[-1]} first shipped the set (rebound_from {' -> '.join(chain)}))")
    # The auditor's own signer is still this release's: only the rebound set's bundle is checked against the earlier one.
    assert line_for(lines, "OK: signer").startswith(f"OK: signer ({PRODUCT_WORKFLOW}{RELEASE} ")
    assert report.passed


@pytest.mark.slow
@pytest.mark.parametrize("signer", ["v0.12.0", RELEASE], ids=["a-third-release", "this-release"])
def test_a_rebound_sets_bundle_signed_by_another_release_fails(server, tmp_path, native_set, sigstore_kit, signer):  # noqa: F811
    workspace, set_dir = native_set
    tree = _rebound_tree(server, set_dir, workspace.lanes_dir, ["v0.13.0"])
    _sign_statement(tree, set_dir, sigstore_kit, signer)
    report, lines = run_audit(tree.publish(), tmp_path, lanes_dir=workspace.lanes_dir, trust_config=str(sigstore_kit.trust_config_path))
    [line] = fails(lines)
    assert line.startswith(f"FAIL: signature {_statement(set_dir).name}: ")
    assert line.endswith(f" (a rebound set: v0.13.0 first shipped the set (rebound_from v0.13.0), so its bundle must be signed by {PRODUCT_WORKFLOW}v0.13.0)"), line
    assert not report.passed


@pytest.mark.slow
def test_a_rebound_set_whose_predecessor_manifest_is_not_the_pinned_one_fails(server, tmp_path, native_set, sigstore_kit):  # noqa: F811
    workspace, set_dir = native_set
    tree = _rebound_tree(server, set_dir, workspace.lanes_dir, ["v0.13.0"])
    _sign_statement(tree, set_dir, sigstore_kit, "v0.13.0")
    # Another manifest of v0.13.0 served beside this one's tree (the row says it shipped the set itself).
    data = _served_manifest(tree, "v0.13.0", {"artifact_type": "omp_ninfer_release_manifest", "release": "v0.13.0", "components": {"ninfer_variants": []}})
    _report, lines = run_audit(tree.publish(), tmp_path, lanes_dir=workspace.lanes_dir, trust_config=str(sigstore_kit.trust_config_path))
    [line] = fails(lines)
    pinned = tree.manifest["predecessor"]["manifest_sha256"]
    assert line.startswith(f"FAIL: signature {_statement(set_dir).name}: rebound set: the manifest of v0.13.0 at ")
    assert line.endswith(f"has sha256 {hashlib.sha256(data).hexdigest()}, but predecessor.manifest_sha256 binds {pinned}"), line


@pytest.mark.slow
@pytest.mark.parametrize(("edit", "reason"), [
    (lambda m, r: r.update(rebound_from="v0.13.0/../x"), "rebound set: the row rtx4090-windows-native.rebound_from of v0.13.1 is not a release name (found 'v0.13.0/../x')"),
    (lambda m, r: r.update(rebound_from="v0.14.0"), "rebound set: the row rtx4090-windows-native.rebound_from of v0.13.1 names v0.14.0, which is not a release before v0.13.1"),
    (lambda m, r: m.update(predecessor={"release": "v0.12.0", "manifest_sha256": "0" * 64}), "has the predecessor 'v0.12.0': a rebound row is its predecessor's row"),
], ids=["not-a-release-name", "a-later-release", "not-the-predecessor"])
def test_a_rebound_row_that_names_no_earlier_predecessor_fails(server, tmp_path, native_set, sigstore_kit, edit, reason):  # noqa: F811
    workspace, set_dir = native_set
    tree = _rebound_tree(server, set_dir, workspace.lanes_dir, ["v0.13.0"])
    edit(tree.manifest, tree.manifest["components"]["ninfer_variants"][0])
    _sign_statement(tree, set_dir, sigstore_kit, "v0.13.0")
    _report, lines = run_audit(tree.publish(), tmp_path, lanes_dir=workspace.lanes_dir, trust_config=str(sigstore_kit.trust_config_path))
    [line] = fails(lines)
    assert line.startswith(f"FAIL: signature {_statement(set_dir).name}: ") and reason in line, line


@pytest.mark.slow
def test_a_rebound_signer_is_derived_from_the_auditors_identity_only(server, tmp_path, native_set, sigstore_kit):  # noqa: F811
    """An explicit --certificate-identity without the release's tag ref cannot be rewritten: FAIL, never a guess."""
    workspace, set_dir = native_set
    tree = _rebound_tree(server, set_dir, workspace.lanes_dir, ["v0.13.0"])
    branch = "https://github.com/alphastorm/omp-ninfer/.github/workflows/release.yml@refs/heads/main"
    tree.manifest["signing"]["certificate_identity"] = branch
    _sign_statement(tree, set_dir, sigstore_kit, "v0.13.0")
    _report, lines = run_audit(tree.publish(), tmp_path, lanes_dir=workspace.lanes_dir, trust_config=str(sigstore_kit.trust_config_path), certificate_identity=branch)
    [line] = fails(lines)
    assert line == (f"FAIL: signature {_statement(set_dir).name}: rebound set: the expected signer {branch} does not end with @refs/tags/{RELEASE}, "
                    "so the signer of v0.13.0, which first shipped the rebound set, cannot be derived from it"), line
