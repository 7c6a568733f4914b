"""docs/RELEASING.md, executed by the acceptance runner end to end on the embedded sample.

The runbook's three Linux routes run in a product repository made from this checkout (its
pipeline, docs, lanes and runtime) whose release input `manifests/v1.0.0/release.toml` is
committed, as the runbook's "Before you start" asks:

* `lane-native` binds the RTX 4090 lane's prebuilt Windows binaries (mingw-w64 PE files, as
  the release workflow's Windows job would hand over), packages the closed set and imports
  the owner's hardware receipt (made on the same bytes: packaging is reproducible);
* `lane-container` compiles the RTX 5090 lane from the sample's own repository at a fixed
  commit, packages it, builds the image on a CUDA-like base and pushes it by digest to the
  loopback docker-registry, and qualifies it (hardware-pending here: no GPU);
* `release` composes the draft, promotes the candidate, runs docs/QUICKSTART.md's required
  routes in a fresh clone of the candidate with the same runner (nested), composes their
  receipts into the acceptance record, does the pin dance and promotes to ready.

The steps marked `requires=github` (cut, publish, push) are host-only: not granted here, so
recorded as not run, and the route goes on without them.  The cuts those steps would record are
committed with the release input instead, made by the real cut stage without GitHub: the native
lane's by the native workspace (tests/kits/winfixtures.py), the container lane's here.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from acceptkit import (
    PREVIEW_REASON,
    RELEASE,
    ROUTES,
    AssetServer,
    acceptance_toml,
    commit,
    containers_config,
    engine_can_run,
    make_product_repo,
    tag_answers,
)
from repokit import SAMPLE, make_repo

from pipeline.formats.acceptance import canonical
from pipeline.stages.accept import RunOptions, make_bundle, run_bundle

pytestmark = [pytest.mark.slow, pytest.mark.cuda, pytest.mark.registry]

IDENTITY = {"GIT_AUTHOR_NAME": "Release Maintainer", "GIT_AUTHOR_EMAIL": "maintainer@example.invalid", "GIT_COMMITTER_NAME": "Release Maintainer", "GIT_COMMITTER_EMAIL": "maintainer@example.invalid"}


def test_the_runbook_runs_end_to_end_on_the_embedded_sample(tmp_path, tmp_path_factory, registry_server, capsys):
    import imagekit
    from releasekit import LANE as NATIVE
    from releasekit import release_toml, sample_release
    from winfixtures import native_workspace

    from pipeline.formats.lanes import load_lanes
    from pipeline.formats.release.contract import verify_release
    from pipeline.lanework.toolchain import for_lane
    from pipeline.stages.cut import cut_lane

    native = sample_release(tmp_path_factory)  # the owner's receipt of the 4090 lane and the client
    workspace = native_workspace(tmp_path_factory)  # the sample's repository and the Windows job's binaries
    root = tmp_path / "product"
    make_product_repo(root, lanes_dir=native.lanes_dir)
    source_repo = tmp_path / "ninfer"
    source = f"{source_repo}@{make_repo(source_repo, SAMPLE)}"
    cut_lane("5090", source=source, dist=tmp_path / "cut-dist", lanes_dir=root / "runtime" / "lanes", use_github=False)
    toml = root / "manifests" / RELEASE / "release.toml"
    toml.parent.mkdir(parents=True)
    toml.write_text(release_toml(native.client, register={NATIVE: "qualified", "rtx5090-container": "preview"}, preview_reason=PREVIEW_REASON) + acceptance_toml(ROUTES, lanes={"rtx5090-linux": "rtx5090-container"}))
    commit(root, f"{RELEASE}: release input")

    # What the maintainer brings: the base image pinned by digest, the container lane's configuration.
    lanes = load_lanes(root / "runtime" / "lanes")
    cudart = for_lane(lanes["rtx5090-container"], "pinned").library_dir / "libcudart.so.13"
    base = imagekit.build_base_layout(tmp_path / "cuda-base", cudart=cudart.resolve(), ld_cache=True)
    imagekit.push_base(base, registry_server.host, "nvidia/cuda-runbook")
    definition = tmp_path / "definition.toml"
    definition.write_text(imagekit.definition_text(f"{registry_server.host}/nvidia/cuda-runbook", base.index_digest))
    config = tmp_path / "server-config.json"
    config.write_bytes(canonical({"deployment_profile": lanes["rtx5090-container"].deployment_profile(), "max_context": 131072, "port": 8080}))

    # The public URLs, served from what the routes publish into dist/ (read when requested).
    clients = {name: f"sample client {platform}\n".encode() * 64 for platform, (name, _n, _h) in native.client["platforms"].items()}

    def resolve(path: str):
        parts = path.split("/")
        if path.startswith("/api.github.com/"):  # audit's component-tag reads: each published row's tag names its commit
            manifest = root / "manifests" / RELEASE / "manifest.json"
            return tag_answers(json.loads(manifest.read_bytes())).get(path) if manifest.is_file() else None
        if path.startswith("/github.com/alphastorm/ninfer/releases/download/") and len(parts) == 8:
            tag, name = parts[6], parts[7]
            for receipt in (root / "dist").glob("*/assets/package-build-receipt.json"):
                if json.loads(receipt.read_bytes())["component_tag"] == tag:
                    # The set, and beside it its provenance statement, as publish --component uploads them.
                    for folder in (receipt.parent, receipt.parent.parent / "attestations"):
                        if (folder / name).is_file():
                            return folder / name
        return clients.get(parts[-1])

    server = AssetServer(resolve)
    containers = containers_config(tmp_path / "containers", registry_server.host)
    rootfs = tmp_path / "base-rootfs"
    subprocess.run(["umoci", "unpack", "--rootless", "--image", f"{base.layout}:{base.ref}", str(tmp_path / "base-bundle")], check=True, capture_output=True)
    shutil.move(tmp_path / "base-bundle" / "rootfs", rootfs)
    engine, why = engine_can_run(containers, rootfs)
    with capsys.disabled():
        print(f"\n    OCI engine: {'runs containers' if engine else 'cannot run containers here: ' + why}")
    accept_parameters = tmp_path / "accept.env"
    accept_parameters.write_text("".join(f"{k}={v}\n" for k, v in {"OMP_NINFER_MIRROR": server.mirror(), "OMP_NINFER_AUDIT_OPTIONS": "--skip-larger-than 1G", **containers}.items()))
    accept_options = f"--parameters {accept_parameters}" + ("" if engine else " --deny oci-engine")

    routes = {
        "lane-native": {"LANE": NATIVE, "SOURCE": str(workspace.repo), "PREBUILT": str(workspace.prebuilt), "OWNER_RECEIPT": str(native.owner_receipt)},
        "lane-container": {"REGISTRY": f"{registry_server.host}/alphastorm/ninfer-runtime-runbook", "IMAGE_DEFINITION": str(definition), "SOURCE": source, "QUALIFY_CONFIG": str(config)},
        "release": {"RELEASE": RELEASE, "ACCEPT_OPTIONS": accept_options, "PUBLISH_LANES": f"{NATIVE} rtx5090-container", "REVIEWS": str(tmp_path / "reviews.toml")},
    }
    receipts = {}
    try:
        for route, parameters in routes.items():
            if route == "release":  # the councils reviewed the sets the lane routes made, by the digest of each outer SHA256SUMS
                reviewed = {f"set:{lane}": hashlib.sha256((root / "dist" / lane / "assets" / "SHA256SUMS").read_bytes()).hexdigest() for lane in (NATIVE, "rtx5090-container")}
                # and the image the container route pushed, by the digest its publication receipt records
                (pushed,) = (root / "dist" / "rtx5090-container").glob("push/**/image-publication-receipt.json")
                reviewed["image:rtx5090-container"] = json.loads(pushed.read_bytes())["image_digest"]
                (tmp_path / "reviews.toml").write_text(
                    f'artifact_type = "omp_ninfer_review_ledger"\nschema_version = 1\nrelease = "{RELEASE}"\n\n[reviews.native-runtime]\nstate = "closed"\n'
                    'disposition = "Closed without remediation."\n\n[reviews.native-runtime.reviewed]\n' + "".join(f'"{k}" = "{v}"\n' for k, v in sorted(reviewed.items())))
            bundle = make_bundle(root, release=None, route_id=route, document="docs/RELEASING.md")
            assert bundle["document"]["sha256"] == hashlib.sha256((root / "docs" / "RELEASING.md").read_bytes()).hexdigest()
            work = tmp_path / f"work-{route}"
            receipt = run_bundle(canonical(bundle), f"{route}.bundle.json", RunOptions(clone=root, parameters={**IDENTITY, **parameters}, work=work, step_timeout=900))
            failed = [(s["index"], s["reason"]) for s in receipt["steps"] if s["status"] == "failed"]
            stderr = (work / f"step-{receipt['failed_step']:03d}.stderr").read_text()[-3000:] if receipt["failed_step"] else ""
            assert receipt["status"] == "passed", (route, failed, stderr)
            receipts[route] = (bundle, receipt)
    finally:
        server.close()

    for route, (bundle, receipt) in receipts.items():
        for step, ran in zip(bundle["steps"], receipt["steps"], strict=True):
            if "github" in step["requires"]:
                assert ran["status"] == "not-run" and ran["reason"].startswith("host-only: requires github"), (route, step["index"])
            else:
                assert ran["status"] == "passed" and ran["executed_sha256"] == step["sha256"], (route, step["index"])
        assert receipt["capabilities"].get("github", {"how": "not-granted"})["how"] == "not-granted"

    manifest = json.loads((root / "manifests" / RELEASE / "manifest.json").read_bytes())
    assert manifest["status"] == "ready"
    record = json.loads((root / "manifests" / RELEASE / "acceptance" / "external-installation.json").read_bytes())
    assert record["routes"] == {"audit": "passed", "rtx5090-linux": "passed", "verify": "passed"}
    assert record["documented_routes"]["document"]["path"] == "docs/QUICKSTART.md"
    report = verify_release(root, RELEASE, require="ready", check_pins=True, lanes_dir=root / "runtime" / "lanes")  # its own lanes and cuts
    assert report.valid, [p.message() for p in report.problems.items]
    assert Path(root / "dist" / "register.json").is_file()
