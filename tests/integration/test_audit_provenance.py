"""`audit` and `check-assets` check the SLSA statement beside a set: its subjects are exactly the bound files.

The release is served on loopback by tests/integration/test_audit.py's server, with the
real RTX 4090 set and the statement the package stage wrote beside it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from repokit import FIXTURES
from test_audit import LANE, Tree, fails, line_for, native_set, run_audit, server  # noqa: F401 - fixtures

from pipeline.cli import main
from pipeline.formats import provenance as slsa

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
    assert line_for(lines, f"SKIP: signature {_statement(set_dir).name}").endswith(".sigstore.json)")


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
    _report, lines = run_audit(tree.publish(), tmp_path, lanes_dir=workspace.lanes_dir)
    assert "no provenance statement is published beside the set" in line_for(lines, f"SKIP: provenance {LANE}")


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
