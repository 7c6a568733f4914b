"""`diff` between two states of the sample release tree: the owner's receipt replaced the hardware-pending one."""

from __future__ import annotations

from releasekit import LANE, RELEASE, sample_release

from pipeline.tools.diff import compare
from pipeline.tools.diff_sources import load_source


def test_the_pending_draft_and_the_ready_tree_differ_by_state_receipt_gates_and_acceptance(tmp_path_factory, tmp_path):
    release = sample_release(tmp_path_factory)
    pending = release.clone(tmp_path / "pending", "draft-pending") / "manifests" / RELEASE
    ready = release.clone(tmp_path / "ready", "ready") / "manifests" / RELEASE
    changes = compare(load_source(str(pending), lanes_dir=release.lanes_dir), load_source(str(ready), lanes_dir=release.lanes_dir))
    found = {(c.section, c.path): c for c in changes}
    assert (found[("product and channel", "status")].old, found[("product and channel", "status")].new) == ("draft", "ready")
    receipt = found[("qualification results and gates", f"lanes.{LANE}.receipt.status")]
    assert (receipt.old, receipt.new) == ("hardware-pending", "passed")
    assert any(c.path.startswith(f"lanes.{LANE}.receipt.gates.") for c in changes)
    assert any(c.section == "acceptance routes" for c in changes)
    lane = {(c.group, c.path) for c in changes if c.section == f"lane {LANE}"}
    assert ("component tag and cut", "status") in lane  # preview -> qualified
    assert not any(group == "assets" for group, _ in lane)  # the same bytes: only their standing changed
