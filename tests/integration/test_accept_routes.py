"""The documented routes of docs/QUICKSTART.md, run for real on a candidate made by the pipeline.

The candidate (tests/kits/acceptkit.py) ships the RTX 4090 native lane, qualified on the owner's
hardware, and the RTX 5090 container lane compiled here and pushed by digest to a loopback
docker-registry.  A fresh clone of the candidate commit runs, through the runner, exactly the
blocks of the real QUICKSTART: the verify route (`verify --require-installable`), the audit
route (every public URL served on loopback through OMP_NINFER_MIRROR) and the RTX 5090 Linux
route (the set's SHA256SUMS, the image digest at the registry, the unpacked `ninfer-serve
--version` against the manifest, and the same in a container with Debian's podman).  The
receipts compose into the acceptance record and the release reaches ready through
`compose promote` with no hand-made record.  The Windows routes are bundled (PowerShell 5.1
parse, no 7-only syntax, every asset pinned) and refused by the runner on Linux.
"""

from __future__ import annotations

import json

import pytest
from acceptkit import (
    RELEASE,
    VENV_BIN,
    AssetServer,
    commit,
    container_candidate,
    containers_config,
    engine_can_run,
    serve_release,
)
from releasekit import review_ledger

from pipeline.errors import EnvironmentProblem, InputError, RefusedError
from pipeline.formats.acceptance import canonical
from pipeline.register import Register
from pipeline.stages.accept import RunOptions, make_bundle, run_bundle

pytestmark = [pytest.mark.slow, pytest.mark.cuda, pytest.mark.registry]


@pytest.fixture(scope="module")
def candidate(tmp_path_factory, registry_server):
    return container_candidate(tmp_path_factory, registry_server.host)


@pytest.fixture(scope="module")
def served(candidate):
    server = AssetServer()
    serve_release(server, candidate.manifest(), candidate.assets(), candidate.client)
    yield server
    server.close()


def test_the_linux_routes_run_on_the_candidate_and_their_receipts_make_the_release_ready(candidate, served, tmp_path, capsys):
    from pipeline.cli import main
    from pipeline.formats.lanes import load_lanes
    from pipeline.formats.release.contract import verify_release
    from pipeline.stages.compose import promote_release, rebind
    from pipeline.util import ui

    root = candidate.clone(tmp_path / "product")  # the maintainer's checkout, where the record is bound
    containers = containers_config(tmp_path / "containers", candidate.registry)
    engine, why = engine_can_run(containers, candidate.base_rootfs)
    # On this host podman runs containers with runc (crun refuses the hybrid cgroup layout) within the
    # hard resource limits; where it cannot, the engine step is denied and the reason printed, not hidden.
    denies = [] if engine else ["oci-engine"]
    with capsys.disabled():
        print(f"\n    OCI engine: {'runs containers' if engine else 'cannot run containers here: ' + why}")
    parameters = {"OMP_NINFER_MIRROR": served.mirror(), "OMP_NINFER_AUDIT_OPTIONS": "--skip-larger-than 1G", **containers}
    clone = candidate.clone(tmp_path / "fresh-clone")  # a fresh clone of the candidate commit
    dist = tmp_path / "dist"
    receipts = []
    for route in ("verify", "audit", "rtx5090-linux"):
        assert main(["accept", "bundle", "--release", RELEASE, "--route", route, "--root", str(root), "--dist", str(dist), "--lanes-dir", str(candidate.lanes_dir), "--quiet"]) == 0
        entry = next(e for e in Register(dist).query("acceptance-bundle") if e.attrs["route"] == route)
        receipt = run_bundle((dist / entry.path).read_bytes(), entry.path, RunOptions(clone=clone, offered=parameters, denies=denies, work=tmp_path / f"work-{route}"))
        assert receipt["status"] == "passed", (route, receipt["failed_step"], receipt["failure"], sorted((tmp_path / f"work-{route}").glob("*.stderr")))
        # the steps' python3 is the runner's own (its virtual environment's bin first on the fixed PATH)
        assert receipt["environment"]["path"].split(":")[0] == VENV_BIN
        path = tmp_path / f"{route}.receipt.json"
        path.write_bytes(canonical(receipt))
        receipts.append(path)
        statuses = [s["status"] for s in receipt["steps"]]
        if route in ("verify", "audit"):
            assert statuses == ["not-run", *["passed"] * (len(statuses) - 1)]  # only the pip install (requires network) is host-only
        else:
            bundle = json.loads((dist / entry.path).read_bytes())
            for step, ran in zip(bundle["steps"], receipt["steps"], strict=True):
                expected = "not-run" if "gpu" in step["requires"] or (step["requires"] == ["oci-engine"] and not engine) else "passed"
                assert ran["status"] == expected, (step["index"], step["requires"], ran)
            assert receipt["capabilities"]["oci-engine"]["available"] is engine
            assert receipt["environment"]["parameters"]["OMP_NINFER_MIRROR"] == {"source": "set", "value": served.mirror()}
    # The audit route fetched the assets through the mirror only.
    assert any(path.startswith("/github.com/alphastorm/ninfer/releases/download/") for path in served.log)

    ui.set_quiet(True)
    assert main(["accept", "compose", "--release", RELEASE, *map(str, receipts), "--root", str(root), "--dist", str(dist), "--lanes-dir", str(candidate.lanes_dir), "--quiet"]) == 0
    record = json.loads((root / "manifests" / RELEASE / "acceptance" / "external-installation.json").read_bytes())
    assert record["routes"] == {"audit": "passed", "rtx5090-linux": "passed", "verify": "passed"}
    assert record["candidate_commit"] == candidate.commits["candidate"]
    linux = record["documented_routes"]["routes"]["rtx5090-linux"]
    assert linux["lane"] == "rtx5090-container" and linux["steps"] == 9 and linux["steps_run"] == (6 if engine else 5)
    assert record["documented_routes"]["blocks_total"] == 14
    commit(root, "acceptance composed from the documented routes")
    # the councils' closed reviews of the candidate, which ready needs too
    manifest = json.loads((root / "manifests" / RELEASE / "manifest.json").read_bytes())
    (root / "manifests" / RELEASE / "reviews.toml").write_text(review_ledger(manifest, record["candidate_commit"]))
    commit(root, "reviews recorded")
    for step in range(4):
        outcome = rebind(root, RELEASE, pin="HEAD", lanes=load_lanes(candidate.lanes_dir))
        commit(root, f"pin {step}")
        if not any(b.startswith("pins:") for b in outcome.blockers):
            break
    promote_release(root, RELEASE, "ready", lanes_dir=candidate.lanes_dir)
    commit(root, "ready")
    ui.set_quiet(False)
    report = verify_release(root, RELEASE, require="ready", check_pins=True, lanes_dir=candidate.lanes_dir)
    assert report.valid, [p.message() for p in report.problems.items]


def test_the_windows_routes_are_bundled_on_their_lanes_and_run_only_on_windows(candidate, tmp_path):
    bundle = make_bundle(candidate.root, release=RELEASE, route_id="rtx4090-windows", lanes_dir=candidate.lanes_dir)
    assert bundle["route"]["host_kind"] == "windows-x86_64" and bundle["checks"]["powershell51"] == "passed"
    assert "components.ninfer_variants[rtx4090-windows-native].package_sha256" in bundle["checks"]["pinned_fields"]
    wsl = make_bundle(candidate.root, release=RELEASE, route_id="rtx5090-wsl2", lanes_dir=candidate.lanes_dir)
    assert "components.ninfer.oci_manifest_digest" in wsl["checks"]["pinned_fields"]
    # The RTX 3090 lane is not in this release: its route reads values the manifest does not bind.
    with pytest.raises(InputError) as caught:
        make_bundle(candidate.root, release=RELEASE, route_id="rtx3090-windows", lanes_dir=candidate.lanes_dir)
    assert "components.ninfer_variants[rtx3090-windows-native]" in caught.value.render()
    clone = candidate.clone(tmp_path / "clone")
    with pytest.raises(EnvironmentProblem) as caught:
        run_bundle(canonical(bundle), "rtx4090-windows.bundle.json", RunOptions(clone=clone))
    assert caught.value.expected == "windows-x86_64"


def test_the_runner_refuses_a_clone_of_another_commit(candidate, tmp_path):
    bundle = canonical(make_bundle(candidate.root, release=RELEASE, route_id="verify", lanes_dir=candidate.lanes_dir))
    clone = candidate.clone(tmp_path / "draft-clone", "draft")
    with pytest.raises(RefusedError) as caught:
        run_bundle(bundle, "verify.bundle.json", RunOptions(clone=clone))
    assert caught.value.field == "HEAD" and caught.value.expected == candidate.commits["candidate"]
