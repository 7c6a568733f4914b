"""A complete sample product release, made by the pipeline, once per test session.

The RTX 4090 native lane is built from the sample runtime (its Windows binaries
cross-compiled with mingw-w64, `tests/kits/winfixtures.py`), packaged into its closed
11-file set, qualified hardware-pending, composed into a draft of a product
repository (a real git repository with `manifests/`), then qualified on the
"owner's hardware" (the harness against the protocol-faithful test server, on a
copy of the same bytes), imported, composed again, promoted to candidate,
accepted on the candidate commit, pinned (the pin dance, one commit per step) and
promoted to ready.  Every step is a commit, so tests can clone the product
repository at any state and change it without touching the shared one.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from repokit import git
from winfixtures import packaged_native_set

RELEASE = "v1.0.0"
LANE = "rtx4090-windows-native"
KEY = "sk-omp-release-kit-2c4e6a8b0d1f3a5c7e9b1d3f5a7c9e1b3d5f7a9c"
MODEL = {
    "repository": "https://huggingface.co/neroued/Qwen3.8-27B-NInfer",
    "revision": "1cbd84e7221e51186bd7f093a149912d2489625b",
    "artifact_name": "qwen3_8_27b.ninfer",
    "artifact_bytes": 20437521664,
    "artifact_sha256": "81f924d440c27261d820c19a9f8d45794c5aee410f8a68bd358133fa8c0375da",
}


def sha256(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


DEFERRALS = {
    "rtx3090-windows-native": ("blocked", "the sample suite builds one native lane", "rtx-3090"),
    "rtx4090-windows-native": ("blocked", "this sample release ships only its container lane", "rtx-4090"),
    "rtx5090-container": ("unsupported", "the sample release has no container lane", "rtx-5090"),
}


def release_toml(
    client: dict[str, Any],
    *,
    status: str = "qualified",
    extra_blockers: list[str] | None = None,
    model: dict[str, Any] | None = None,
    lane: str = LANE,
    register: dict[str, str] | None = None,
    preview_reason: str | None = None,
) -> str:
    """The hand-written input of the sample release: `register` lanes (lane -> status) from the
    register, the others deferred; a register lane that is not qualified is deferred with `preview_reason`."""
    model = model or MODEL
    register = register or {lane: status}
    blocks = []
    for lane_id in sorted(set(DEFERRALS) | set(register)):
        kind, reason, anchor = DEFERRALS[lane_id]
        if lane_id in register:
            block = f'''
[lanes.{lane_id}]
from = "register"
status = "{register[lane_id]}"
published = true
'''
            if register[lane_id] == "qualified" or preview_reason is None:
                blocks.append(block)
                continue
            reason = preview_reason
        else:
            block = f'''
[lanes.{lane_id}]
from = "pins"
status = "{kind}"
published = false
'''
        blocks.append(block + f'''
[lanes.{lane_id}.deferral]
reason = "{reason}"
predecessor_release = "v0.13.1"
route = "https://github.com/alphastorm/omp-ninfer/blob/v0.13.1/docs/QUICKSTART.md#{anchor}"
''')
    deferred = "".join(blocks)
    platforms = "\n".join(
        f'\n[[client.platforms]]\nplatform = "{p}"\nartifact_name = "{name}"\nartifact_bytes = {size}\nartifact_sha256 = "{digest}"'
        for p, (name, size, digest) in sorted(client["platforms"].items())
    )
    blockers = ", ".join(json.dumps(b) for b in extra_blockers or [])
    return f'''schema_version = 1
release = "{RELEASE}"
title = "sample release made by the pipeline"
channel = "public"
audience = "public"
summary = """
A sample product release composed by the test suite from the sample runtime: the RTX 4090
native lane built, packaged, qualified and accepted through the pipeline's own stages.
"""
limitations = ["Sample data: the binaries are the sample runtime, not NInfer."]

[client]
upstream_repository = "https://github.com/can1357/oh-my-pi"
upstream_tag = "v18.12.6"
upstream_commit = "{client["commit"]}"
published = true
{platforms}

[model]
repository = "{model["repository"]}"
revision = "{model["revision"]}"
artifact_name = "{model["artifact_name"]}"
artifact_bytes = {model["artifact_bytes"]}
artifact_sha256 = "{model["artifact_sha256"]}"
public_model_id = "q38-ninfer"
published = true

{deferred}
[publication]
targets = ["https://github.com/alphastorm/omp-ninfer/releases/tag/{RELEASE}"]
blockers = [{blockers}]
'''


def review_ledger(manifest: dict[str, Any], candidate: str, *, state: str = "closed", findings: dict[str, dict[str, str]] | None = None,
                  reviewed: dict[str, str] | None = None, council: str = "native-runtime") -> str:
    """A review ledger (docs/review-ledger.md) whose councils reviewed exactly what `manifest` binds at `candidate`:
    each row's set, the container's image and the candidate manifest.  `findings` are
    {id: {severity, scope, state, disposition[, tracking_issue]}} of the first council; `reviewed` overrides its digests."""
    from pipeline.formats.release.manifest import review_subjects

    subjects = {**review_subjects(manifest), "manifest-candidate": candidate}
    lines = ['artifact_type = "omp_ninfer_review_ledger"', "schema_version = 1", f'release = "{manifest["release"]}"']
    for name, review_state in ((council, state), ("product-tooling", "closed")):
        named = {**subjects, **(reviewed or {})} if name == council else subjects
        lines += ["", f"[reviews.{name}]", f'state = "{review_state}"', 'disposition = "Closed without remediation by the test suite\'s council."',
                  "", f"[reviews.{name}.reviewed]", *(f'"{label}" = "{digest}"' for label, digest in sorted(named.items()))]
        for finding_id, finding in sorted((findings or {}).items()) if name == council else ():
            lines += ["", f"[reviews.{name}.findings.{finding_id}]", *(f'{key} = "{value}"' for key, value in sorted(finding.items()))]
    return "\n".join(lines) + "\n"


@dataclass
class SampleRelease:
    root: Path  # the product repository
    dist: Path  # the pipeline's output folder (register)
    lanes_dir: Path
    client: dict[str, Any]
    owner_receipt: Path
    commits: dict[str, str] = field(default_factory=dict)  # state -> commit

    def tree(self, root: Path | None = None) -> Path:
        return (root or self.root) / "manifests" / RELEASE

    def clone(self, target: Path, state: str = "ready") -> Path:
        """A full clone of the product repository checked out at `state` (history kept for pins)."""
        subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(self.root), str(target)], check=True, capture_output=True)
        git(target, "config", "core.autocrlf", "false")
        git(target, "checkout", "-q", self.commits[state])
        return target


def commit(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--allow-empty", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def acceptance_record(manifest: dict[str, Any], candidate: str, *, status: str = "passed", lane: str = LANE) -> dict[str, Any]:
    from pipeline.formats.release.manifest import acceptance_subject

    return {
        "artifact_type": "omp_ninfer_external_installation_acceptance",
        "schema_version": 1,
        "release": manifest["release"],
        "status": status,
        "as_of": "2026-11-05",
        "candidate_commit": candidate,
        "operator_class": "owner-operated tester-equivalent",
        "subject": acceptance_subject(manifest),
        "routes": {lane: "passed"},
        "limitations": ["sample acceptance made by the test suite against the protocol-faithful server"],
        "secret_values_recorded": 0,
    }


class _NoGpu:
    def facts(self):
        return None

    def sampling(self):
        from contextlib import nullcontext

        from pipeline.harness.gpu import GpuSamples

        return nullcontext(GpuSamples())


class _FakeGpu:
    def __init__(self, name: str = "NVIDIA GeForce RTX 4090", cc: str = "8.9", memory: int = 24564) -> None:
        self.name, self.cc, self.memory = name, cc, memory

    def facts(self):
        return {"gpu_name": self.name, "driver": "580.95.05", "cuda": "13.0", "compute_capability": self.cc,
                "memory_total_mib": self.memory, "nvidia_smi": "580.95.05", "gpu_index": 0, "gpu_count": 1}

    def sampling(self):
        import contextlib

        from pipeline.harness.gpu import GpuSamples

        @contextlib.contextmanager
        def run():
            samples = GpuSamples()
            samples.add(21000.0, 280.0)
            yield samples
            samples.add(22100.0, 305.5)

        return run()


def qualify_pending(dist: Path, lane, config: Path | None = None) -> Path:
    from pipeline.stage import Context, execute
    from pipeline.stages.qualify import QualifyStage

    stage = QualifyStage(Context.open(dist), lane, gpu=_NoGpu(), config=config, now="2026-11-02T10:00:00Z")
    execute(stage, force=True)
    return stage.receipt_path


def qualify_on_owner_hardware(dist: Path, lane, work: Path, config: Path | None = None) -> Path:
    """The harness against the test server, on a copy of the same packaged bytes; returns the receipt."""
    from ninfer_fake_server import FakeNInfer

    from pipeline.stage import Context, execute
    from pipeline.stages.qualify import QualifyStage, resolve_identity

    owner = work / "owner-dist"
    shutil.copytree(dist, owner)
    ident = resolve_identity(Context.open(owner), lane, config=config)
    identity = ident.identity
    served = {
        **identity["build_identity"],
        "deployment_profile": ident.deployment_profile,
        "binary_sha256": identity["server_binary_sha256"],
        "config_sha256": identity["configuration_sha256"],
        "model_artifact_sha256": identity["model_artifact_sha256"],
    }
    with FakeNInfer(api_key=KEY, identity=served) as fake:
        gpu = _FakeGpu() if lane.kind != "container" else _FakeGpu("NVIDIA GeForce RTX 5090", "12.0", 32607)
        stage = QualifyStage(Context.open(owner), lane, endpoint=fake.url, api_key=KEY, restart_hook=fake, gpu=gpu, config=config, now="2026-11-03T08:00:00Z")
        execute(stage, force=True)
    receipt = json.loads(stage.receipt_path.read_text())
    assert receipt["status"] == "passed", receipt.get("status_reason")
    target = work / f"{lane.id}-owner-receipt.json"
    target.write_bytes(stage.receipt_path.read_bytes())
    return target


def import_receipt(dist: Path, lane, receipt: Path, config: Path | None = None) -> None:
    from pipeline.stage import Context, execute
    from pipeline.stages.qualify import QualifyStage

    execute(QualifyStage(Context.open(dist), lane, import_path=receipt, gpu=_NoGpu(), config=config, now="2026-11-03T09:00:00Z"), force=True)


def make_client(work: Path, commit_hex: str) -> dict[str, Any]:
    """Three small client 'binaries' with real bytes; the release binds their sizes and hashes."""
    out = work / "client"
    out.mkdir(parents=True, exist_ok=True)
    platforms = {}
    for platform, name in (("darwin-arm64", "omp-darwin-arm64"), ("linux-x64", "omp-linux-x64"), ("windows-x64", "omp-windows-x64.exe")):
        data = f"sample client {platform}\n".encode() * 64
        (out / name).write_bytes(data)
        platforms[platform] = (name, len(data), sha256(data))
    return {"commit": commit_hex, "platforms": platforms}


_CACHE: dict[str, SampleRelease] = {}


def sample_release(tmp_path_factory) -> SampleRelease:
    if "release" in _CACHE:
        return _CACHE["release"]
    from pipeline.formats.lanes import load_lane
    from pipeline.stages.compose import accept_release, compose_release, promote_release, rebind
    from pipeline.util import ui

    ui.set_quiet(True)
    workspace, packaged = packaged_native_set(tmp_path_factory)
    work = tmp_path_factory.mktemp("sample-release")
    dist = work / "dist"
    shutil.copytree(packaged, dist)
    lane = load_lane(workspace.lanes_dir / f"{LANE}.toml")
    lanes_dir = workspace.lanes_dir

    root = work / "product"
    (root / "manifests").mkdir(parents=True)
    git(root.parent, "init", "-q", "-b", "main", str(root))
    git(root, "config", "core.autocrlf", "false")
    (root / ".gitattributes").write_text("* -text\n")
    (root / "README.md").write_text("sample product repository\n")
    commits: dict[str, str] = {"empty": commit(root, "empty product repository")}
    client = make_client(work, workspace.commit)
    toml = root / "manifests" / RELEASE / "release.toml"
    toml.parent.mkdir(parents=True)

    # 1. hardware-pending receipt: the lane can only be a preview in a draft
    qualify_pending(dist, lane)
    toml.write_text(release_toml(client, status="preview"))
    compose_release(root, RELEASE, dist=dist, lanes_dir=lanes_dir)
    commits["draft-pending"] = commit(root, "draft: hardware-pending")

    # 2. the owner's hardware receipt, imported; the lane is qualified
    owner = qualify_on_owner_hardware(dist, lane, work)
    import_receipt(dist, lane, owner)
    toml.write_text(release_toml(client, status="qualified"))
    compose_release(root, RELEASE, dist=dist, lanes_dir=lanes_dir)
    commits["draft"] = commit(root, "draft: qualified lane")

    # 3. candidate, accepted on the candidate commit
    promote_release(root, RELEASE, "candidate", lanes_dir=lanes_dir)
    commits["candidate"] = commit(root, "candidate")
    manifest = json.loads((root / "manifests" / RELEASE / "manifest.json").read_text())
    record = work / "acceptance.json"
    record.write_text(json.dumps(acceptance_record(manifest, commits["candidate"]), indent=2, sort_keys=True) + "\n")
    accept_release(root, RELEASE, record, lanes_dir=lanes_dir)
    commits["accepted"] = commit(root, "acceptance bound")
    # 3b. the councils reviewed the candidate: their closed reviews bind its digests in the review ledger
    (root / "manifests" / RELEASE / "reviews.toml").write_text(review_ledger(manifest, commits["candidate"]))
    commits["reviewed"] = commit(root, "reviews recorded")

    # 4. the pin dance: each pass pins what the last commit holds
    from pipeline.formats.lanes import load_lanes

    lanes = load_lanes(lanes_dir)
    for step in range(1, 4):
        outcome = rebind(root, RELEASE, pin="HEAD", lanes=lanes)
        commits[f"pin-{step}"] = commit(root, f"pin step {step}")
        if not any(b.startswith("pins:") for b in outcome.blockers):
            break
    commits["pinned"] = commits[f"pin-{step}"]

    # 5. ready
    promote_release(root, RELEASE, "ready", lanes_dir=lanes_dir)
    commits["ready"] = commit(root, "ready")
    ui.set_quiet(False)
    release = SampleRelease(root, dist, lanes_dir, client, owner, commits)
    _CACHE["release"] = release
    return release
