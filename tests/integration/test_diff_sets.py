"""`diff` on asset-set folders made by the pipeline: one binary compiled from one changed source file,
and one bundled component whose licence changed."""

from __future__ import annotations

import json
import shutil

import pytest
from winfixtures import FIXTURES, compile_windows_prebuilt, native_identity, packaged_native_set

from pipeline.formats.assets import OUTER_SUMS, RECEIPT, asset_set, render_sums
from pipeline.tools.diff import compare
from pipeline.tools.diff_sources import load_source
from pipeline.util.hashing import sha256_file

LANE = "rtx4090-windows-native"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def set_a(tmp_path_factory):
    workspace, dist = packaged_native_set(tmp_path_factory)
    return workspace, dist / LANE / "assets"


def _sections(changes):
    grouped: dict[tuple[str, str], list] = {}
    for change in changes:
        grouped.setdefault((change.section, change.group), []).append(change)
    return grouped


def test_one_changed_source_file_changes_one_binary_the_sets_hashes_and_the_provenance(set_a, tmp_path):
    workspace, assets_a = set_a
    source = tmp_path / "ninfer_app.c"
    source.write_text((FIXTURES / "ninfer_app.c").read_text() + '\nconst char ninfer_one_changed_line[] = "one source file changed";\n')
    prebuilt = tmp_path / "prebuilt"
    shutil.copytree(workspace.prebuilt, prebuilt)
    one = compile_windows_prebuilt(tmp_path / "one", native_identity(workspace.lane, workspace.commit), binaries=("ninfer_bench",), dlls=(),
                                  app_source=source, import_libs=workspace.import_libs)
    shutil.copyfile(one / "ninfer_bench.exe", prebuilt / "ninfer_bench.exe")
    dist_b = tmp_path / "dist"
    workspace.build(dist_b, prebuilt=prebuilt)
    workspace.package(dist_b)

    changes = compare(load_source(str(assets_a), lanes_dir=workspace.lanes_dir), load_source(str(dist_b / LANE / "assets"), lanes_dir=workspace.lanes_dir))
    grouped = _sections(changes)
    section = f"lane {LANE}"
    assert set(grouped) == {(section, "assets"), (section, "binaries inside the package"), (section, "provenance inputs")}, sorted(grouped)
    binaries = grouped[(section, "binaries inside the package")]
    assert [(c.path, c.change) for c in binaries] == [("bin/ninfer_bench.exe", "changed")]
    assert binaries[0].new == sha256_file(prebuilt / "ninfer_bench.exe") != binaries[0].old
    roles = {c.path.split(".")[0] for c in grouped[(section, "assets")]}
    assert roles == {"package", "spdx", "cdx", "inner-sums", "receipt", "outer-sums"}  # the source archive and scripts are the same bytes
    provenance = {c.path.split(".")[0] for c in grouped[(section, "provenance inputs")]}
    assert provenance == {"statement_sha256", "inputs", "subjects"}, provenance
    # of the inputs, only the one prebuilt binary that changed (the provenance lists each by SHA-256)
    inputs = [c for c in grouped[(section, "provenance inputs")] if c.path.startswith("inputs")]
    assert [c.path for c in inputs] == ["inputs.prebuilt:ninfer_bench.exe.sha256"], [(c.path, c.change) for c in inputs]


def _reseal(folder, lanes_dir, lane, beta):
    """Re-seal a set whose CycloneDX SBOM was edited: its inner sums, the receipt, SHA256SUMS (as package writes them)."""
    expected = asset_set(lane, beta)
    inner = folder / expected.name_of("inner-sums")
    inner.write_bytes(render_sums({name: sha256_file(folder / name) for name in expected.inner_names()}))
    receipt = json.loads((folder / RECEIPT).read_text())
    receipt["sboms"]["cyclonedx"]["sha256"] = sha256_file(folder / expected.name_of("cdx"))
    receipt["inner_checksums"]["sha256"] = sha256_file(inner)
    (folder / RECEIPT).write_text(json.dumps(receipt, indent=2, sort_keys=True) + "\n")
    (folder / OUTER_SUMS).write_bytes(render_sums({name: sha256_file(folder / name) for name in expected.outer_names()}))


def test_a_licence_change_in_one_bundled_component_is_one_sbom_difference(set_a, tmp_path):
    workspace, packaged = set_a
    assets_a = tmp_path / "a" / LANE / "assets"  # the sets alone: the provenance beside the original binds its bytes only
    copy = tmp_path / "b" / LANE / "assets"
    shutil.copytree(packaged, assets_a)
    shutil.copytree(packaged, copy)
    lane = workspace.lane
    cdx = copy / asset_set(lane, lane.beta).name_of("cdx")
    document = json.loads(cdx.read_text())
    component = next(c for c in document["components"] if (c.get("purl") or "").startswith("pkg:generic/tinycrc@"))
    old = component["licenses"][0]["license"].get("id")
    component["licenses"] = [{"license": {"id": "GPL-3.0-only"}}]
    cdx.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
    _reseal(copy, workspace.lanes_dir, lane, lane.beta)

    changes = compare(load_source(str(assets_a), lanes_dir=workspace.lanes_dir), load_source(str(copy), lanes_dir=workspace.lanes_dir))
    sbom = [c for c in changes if c.group == "SBOM components"]
    assert [(c.path, c.change, c.old, c.new) for c in sbom] == [("pkg:generic/tinycrc.licence", "changed", old, "GPL-3.0-only")]
    assert {c.group for c in changes} == {"SBOM components", "assets"}  # and the hashes of the files that bind the SBOM
    assert main_exit(assets_a, copy, workspace.lanes_dir) == 1
    assert main_exit(assets_a, assets_a, workspace.lanes_dir) == 0
    # the original's provenance does not bind the edited set: refused, not shown as its provenance
    shutil.copytree(packaged.parent / "attestations", copy.parent / "attestations")
    assert main_exit(packaged, copy, workspace.lanes_dir) == 2


def main_exit(a, b, lanes_dir) -> int:
    from pipeline.cli import main

    return main(["diff", str(a), str(b), "--lanes-dir", str(lanes_dir), "--quiet"])
