"""rebuild --verify's host preflight: it compares every field the set's documents record, runs only the lane file's
tools, and says each fix once."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from pipeline.errors import EnvironmentProblem, InputError
from pipeline.formats import provenance as slsa
from pipeline.formats.lanes import HostDependency, find_lane
from pipeline.lanework import hostdeps, hostlibs
from pipeline.stage import Context
from pipeline.stages.rebuild import RebuildStage

RELEASE = {"project": "FFmpeg", "version": "7.1.5", "source": "libavutil/ffversion.h FFMPEG_VERSION"}


def _found(name: str, link_sha256: str) -> hostdeps.Found:
    library = hostlibs.LibraryFile(name.removeprefix("lib"), f"{name}.so.59.39.100", f"{name}.so.59", link_sha256, f"/somewhere/{name}.so.59.39.100")
    return hostdeps.Found(HostDependency(name, "pkg-config", "58"), "59.39.100", f"/somewhere/{name}.pc", origin="local", file_sha256="c" * 64,
                          libraries=(library,), release=RELEASE, license="LGPL-2.1-or-later", license_source="self-reported: avutil_license()")


def _recorded(found: hostdeps.Found) -> dict:
    """A dependency as recorded_host reads it back from a statement the build wrote for `found`."""
    record = found.to_json()
    return {**record, "annotations": slsa.host_annotations(record)}


def _check(*found: hostdeps.Found) -> hostdeps.HostCheck:
    return hostdeps.HostCheck(declared_by="provenance", host="linux-x86_64", path=("/usr/bin",), pkg_config_path=(), found=list(found))


def test_a_library_with_another_link_interface_is_drift_naming_the_library_and_both_digests():
    recorded = [_recorded(_found("libavutil", "a" * 64))]
    same = hostdeps.host_drift(recorded, _check(_found("libavutil", "a" * 64)), [], annotate=slsa.host_annotations)
    assert same == []
    [drift] = hostdeps.host_drift(recorded, _check(_found("libavutil", "b" * 64)), [], annotate=slsa.host_annotations)
    assert drift["dependency"] == "libavutil (pkg-config)" and drift["differs_in"] == "libraries"
    assert "libavutil.so.59.39.100" in drift["recorded"] and "a" * 64 in drift["recorded"] and "b" * 64 in drift["found"]
    # The same version, release and origin: before, only those were compared, and this host passed the preflight.
    assert "version" not in drift["differs_in"]


def test_the_declarations_floor_is_not_compared():
    recorded = [_recorded(_found("libavutil", "a" * 64))]
    here = _found("libavutil", "a" * 64)
    here = hostdeps.Found(HostDependency("libavutil", "pkg-config", None), here.version, here.path, origin="local", file_sha256=here.file_sha256,
                          libraries=here.libraries, release=here.release, license=here.license, license_source=here.license_source)
    assert hostdeps.host_drift(recorded, _check(here), [], annotate=slsa.host_annotations) == []


def _stage(tmp_path, monkeypatch, recorded: list[dict], here: list[hostdeps.Found]) -> tuple[RebuildStage, list]:
    stage = RebuildStage(Context.open(tmp_path / "dist"), find_lane("5090"), published=tmp_path / "set", resource_uri=None)
    stage.statement = SimpleNamespace(dependency=lambda name: None)
    stage.statement_path = tmp_path / "set.intoto.json"
    probed: list = []
    monkeypatch.setattr(slsa, "recorded_host", lambda statement, origin: recorded)
    monkeypatch.setattr(hostdeps, "probe", lambda wanted, **kw: probed.append(wanted) or (_check(*here), []))
    return stage, probed


def test_a_refusal_names_each_difference_and_says_its_fix_once(tmp_path, monkeypatch):
    names = ("libavformat", "libavcodec", "libavutil", "libswscale")
    stage, _ = _stage(tmp_path, monkeypatch, [_recorded(_found(n, "a" * 64)) for n in names], [_found(n, "b" * 64) for n in names])
    with pytest.raises(EnvironmentProblem) as refused:
        stage._check_host()
    error = refused.value
    assert all(f"{n} (pkg-config): recorded libraries {n}.so.59.39.100" in str(error.found) for n in names)
    hint = "build FFmpeg 7.1.5 under a prefix and pass --pkg-config-path <prefix>/lib/pkgconfig"
    assert error.fix.count(hint) == 1, error.fix
    assert "build-identity.json, both SBOMs and the statement" in error.why


def test_a_statement_naming_a_tool_the_lane_file_does_not_declare_is_refused_before_anything_runs(tmp_path, monkeypatch):
    tool = {"name": "evil", "kind": "tool", "version": "1", "origin": "debian", "annotations": {}}
    stage, probed = _stage(tmp_path, monkeypatch, [tool], [])
    with pytest.raises(InputError, match="the lane file does not declare") as refused:
        stage._check_host()
    assert probed == [] and "build-host:tool:evil" in str(refused.value.found)
    assert "c++" in str(refused.value.expected) and "pkg-config" in str(refused.value.expected)


# -- diffoscope's report, bounded by the pipeline ------------------------------------------------

_ENDLESS_WRITER = "import sys, time\nwith open(sys.argv[1], 'w') as out:\n    while True:\n        out.write('x' * 65536)\n        out.flush()\n        time.sleep(0.001)\n"
_SLEEPER = "import sys, time\nopen(sys.argv[1], 'w').write('started\\n')\ntime.sleep(600)\n"


def test_a_report_writer_that_ignores_its_size_limit_is_stopped_and_its_report_cut(tmp_path):
    import sys
    import time

    from pipeline.stages.rebuild import run_bounded_report

    report = tmp_path / "report.txt"
    started = time.monotonic()
    code, stopped = run_bounded_report([sys.executable, "-c", _ENDLESS_WRITER, str(report)], report, max_bytes=1 << 20, timeout=60)
    assert code is None and stopped == f"stopped: its report passed {1 << 20} bytes" and time.monotonic() - started < 30
    data = report.read_bytes()
    assert data.endswith(b"[cut at 1048576 bytes by rebuild --verify]\n") and len(data) < (1 << 20) + 100


def test_a_report_writer_past_its_time_is_stopped(tmp_path):
    import sys
    import time

    from pipeline.stages.rebuild import run_bounded_report

    report = tmp_path / "report.txt"
    started = time.monotonic()
    code, stopped = run_bounded_report([sys.executable, "-c", _SLEEPER, str(report)], report, max_bytes=1 << 20, timeout=1)
    assert (code, stopped) == (None, "stopped: it ran past 1 s") and time.monotonic() - started < 20
    assert run_bounded_report([sys.executable, "-c", "raise SystemExit(1)"], report, max_bytes=1 << 20, timeout=30) == (1, None)


# -- a FAILED summary's likely cause -------------------------------------------------------------


def _outcome(root: str, differing: dict[str, bool]):
    from pipeline.stages.rebuild import Outcome

    outcome = Outcome(Path(), False)
    outcome.members = [{"name": f"{root}/{name}", "binary": binary, "result": "differs"} for name, binary in differing.items()]
    outcome.members.append({"name": f"{root}/LICENSE", "binary": False, "result": "same"})
    return outcome


def test_a_failed_rebuild_differing_only_where_the_host_reaches_names_that_as_the_likely_cause(tmp_path):
    from pipeline.formats.assets import asset_set

    stage = RebuildStage(Context.open(tmp_path / "dist"), find_lane("5090"), published=tmp_path / "set", resource_uri=None)
    stage.expected = asset_set(find_lane("5090"))
    root = stage.expected.package_root
    only_binaries = _outcome(root, {"bin/ninfer": True, "bin/ninfer-serve": True, "build-identity.json": False, "SHA256SUMS.txt": False})
    cause = stage._likely_cause(only_binaries)
    assert cause is not None and cause.startswith("only the binaries differ (bin/ninfer, bin/ninfer-serve, and the files that record their hashes)")
    assert "a path of the build host" in cause and "pinned build environment" in cause
    # A difference the host cannot explain (a document of the source): no guess.
    assert stage._likely_cause(_outcome(root, {"bin/ninfer": True, "README.md": False})) is None
