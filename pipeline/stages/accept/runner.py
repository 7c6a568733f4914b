"""`accept run`: one bundle run from a clean clone at its candidate commit, its receipt written under --dist."""

from __future__ import annotations

import platform
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from pipeline.errors import InputError
from pipeline.formats import acceptance as fmt
from pipeline.register import Artifact
from pipeline.stage import Context, Stage
from pipeline.stages.accept.document import (
    OUTPUT_DIR,
    RUNNER,
    check_document_in_clone,
    host_arch,
    host_os,
    read_json_file,
    utc_now,
)
from pipeline.stages.accept.environment import (
    RunOptions,
    probe_capabilities,
    route_parameters,
    run_environment,
)
from pipeline.stages.accept.session import (
    check_host_and_options,
    clean_clone,
    run_bash_route,
    run_powershell_route,
)
from pipeline.util import ui
from pipeline.util.fs import atomic_write_bytes
from pipeline.util.hashing import sha256_bytes
from pipeline.util.safepath import within


def run_bundle(bundle_bytes: bytes, bundle_file: str, options: RunOptions) -> dict[str, Any]:
    """Run one bundle; returns the run receipt (passed or failed).  Refuses before the first step
    when the host, the clone or the parameters do not fit the bundle."""
    bundle = fmt.validate_bundle(fmt.loads_strict(bundle_bytes, file=bundle_file), file=bundle_file)
    route = bundle["route"]
    check_host_and_options(route, options, bundle_file)
    clone, commit = clean_clone(options, bundle)
    doc_in_clone = check_document_in_clone(clone, bundle, bundle_file)
    route_parameters(bundle, options)  # refused before the work folder is made

    work = options.work or Path(tempfile.mkdtemp(prefix="omp-ninfer-accept-"))
    env, sources = run_environment(bundle, options, work)
    steps = bundle["steps"]
    needed = {cap for step in steps for cap in step["requires"]}
    caps, gpus = probe_capabilities(needed, env, clone, options.grants, options.denies)
    for cap, capability in sorted(caps.items()):
        (ui.info if capability.available else ui.warn)(f"capability {cap}: {'available' if capability.available else 'absent'}" + (f" ({capability.why})" if capability.why else ""))

    started = utc_now()
    ui.step("accept", f"route {route['id']}: {len(steps)} steps in one {route['shell']} session, clone {commit[:12]}")
    if route["shell"] == "sh":
        run = run_bash_route(steps, caps, env, clone, work, options.step_timeout)
    else:
        run = run_powershell_route(steps, caps, env, clone, work, options.step_timeout, bundle_file)
    finished = utc_now()
    if not options.keep_work and run.failed_step is None and options.work is None:
        shutil.rmtree(work, ignore_errors=True)
    receipt = {
        "artifact_type": fmt.RECEIPT_TYPE,
        "schema_version": fmt.SCHEMA_VERSION,
        "bundle_sha256": sha256_bytes(bundle_bytes),
        "kind": bundle["kind"],
        "release": bundle["release"],
        "route": route["id"],
        "candidate_commit": bundle["candidate_commit"],
        "document": {"path": bundle["document"]["path"], "sha256": bundle["document"]["sha256"], "sha256_in_clone": doc_in_clone},
        "clone": {"commit": commit, "clean": True},
        "status": "passed" if run.failed_step is None else "failed",
        "failed_step": run.failed_step,
        "failure": run.failure,
        "steps": run.records,
        "environment": {
            "variables": sorted(env),
            "path": env.get("PATH", ""),
            # Parameters are declared public inputs of the route (the document says so): recorded by value.
            "parameters": {name: {"source": source, "value": env.get(name) if source != "unset" else None} for name, source in sorted(sources.items())},
            "shell": route["shell"],
        },
        "capabilities": {cap: capability.to_json() for cap, capability in sorted(caps.items())},
        "host": {
            "os": host_os(),
            "os_release": platform.release(),
            "arch": host_arch(),
            "python": platform.python_version(),
            "shell_version": run.shell_version,
            "gpus": gpus,
        },
        "started_at": started,
        "finished_at": finished,
        "runner": {"module": RUNNER, "stdin": "end-of-file", "errexit": route["shell"] == "sh"},
        "secret_values_recorded": 0,
    }
    fmt.validate_receipt(receipt, file="(receipt being written)")
    return receipt


def receipt_path(dist: Path, bundle: dict[str, Any], bundle_sha256: str, *, file: str) -> Path:
    """Where a run's receipt goes: `<dist>/acceptance/<release>/receipts/` (runbooks: `runbook/`), never elsewhere."""
    release = bundle["release"]
    if release is not None:
        fmt.check_release_name(release, file=file)  # validate_bundle did; the name becomes a path part here
    where = release or "runbook"
    route = bundle["route"]["id"]
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,62}", route):  # pragma: no cover - validate_bundle refused it
        raise InputError("is not a route id", file=file, field="route.id", found=route)
    path = dist / OUTPUT_DIR / where / "receipts" / f"{route}-{bundle_sha256[:12]}.receipt.json"
    base = dist / OUTPUT_DIR
    base.mkdir(parents=True, exist_ok=True)
    if not within(base, dist) or (path.parent.exists() and not within(path.parent, base)):
        raise InputError("the receipt folder leaves --dist through a symbolic link", file=path.parent, expected=f"a folder under {dist}", fix=f"remove the link {path.parent}")
    return path


class RunStage(Stage):
    """`accept run`: always runs (a run is an observation), records its receipt in the register."""

    name = "accept"

    def __init__(self, ctx: Context, bundle: Path, options: RunOptions, out: Path | None = None) -> None:
        super().__init__(ctx)
        self.bundle_path = bundle
        self.options = options
        self.out = out
        self.bundle_bytes, doc = read_json_file(bundle, "the bundle")
        self.bundle = fmt.validate_bundle(doc, file=str(bundle))
        self.receipt: dict[str, Any] | None = None
        self.receipt_path: Path | None = None

    @property
    def key(self) -> str:
        return f"accept-run:{self.bundle['route']['id']}:{sha256_bytes(self.bundle_bytes)[:16]}"

    def describe(self) -> str:
        return f"run route {self.bundle['route']['id']}"

    def inputs(self) -> dict[str, Any]:
        return {"bundle_sha256": sha256_bytes(self.bundle_bytes), "clone": str(self.options.clone.resolve())}

    def run(self) -> list[Artifact]:
        receipt = run_bundle(self.bundle_bytes, str(self.bundle_path), self.options)
        self.receipt = receipt
        data = fmt.canonical(receipt)
        path = receipt_path(self.ctx.dist, self.bundle, receipt["bundle_sha256"], file=str(self.bundle_path))
        atomic_write_bytes(path, data)
        self.receipt_path = path
        if self.out is not None:
            atomic_write_bytes(self.out, data)
        return [self.ctx.register.make("acceptance-receipt", path, stage="accept", lane=self.bundle["route"]["lane"], route=receipt["route"], bundle_sha256=receipt["bundle_sha256"], status=receipt["status"])]
