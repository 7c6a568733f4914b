"""Job: each lane's closed asset set (`formats/assets.py: check_assets`) and every SBOM document of it."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from pipeline.errors import PipelineError
from pipeline.infra.download_cache import link_or_copy
from pipeline.stages.audit import provenance
from pipeline.stages.audit.model import Binding, Fetched, Item
from pipeline.stages.audit.session import AuditSession


def audit_set(auditor: AuditSession, lane: str, row: dict[str, Any], results: list[Fetched], cache: Path) -> None:
    label = f"set {lane} {row.get('release_tag')}"
    sums = next((r for r in results if r.binding.role == "outer-sums"), None)
    if sums is None:
        auditor.add(Item(label, False, "the row binds no outer SHA256SUMS (checksums_url)", "set"))
        return
    if sums.error or not auditor.matches(sums) or sums.path is None:
        auditor.add(Item(label, False, "its outer SHA256SUMS could not be verified (see above)", "set"))
        return
    try:
        from pipeline.formats.assets import parse_sums
    except ImportError:  # pragma: no cover - pipeline/assets.py is part of the package stage
        auditor.add(Item(label, False, "set check not available: pipeline.formats.assets is missing from this checkout", "set"))
        return
    try:
        listed = parse_sums(sums.path.read_bytes(), file=sums.binding.url)
    except PipelineError as error:
        auditor.add(Item(label, False, f"SHA256SUMS: {error.what}", "set"))
        return
    problems: list[str] = []
    for result in results:
        binding = result.binding
        if binding.role == "outer-sums":
            continue
        if binding.name not in listed:
            problems.append(f"{binding.field} names {binding.name!r}, which SHA256SUMS does not list")
        elif listed[binding.name] != binding.sha256:
            problems.append(f"{binding.field.rsplit('.', 1)[0]}.{binding.field.rsplit('.', 1)[1].removesuffix('_url')}_sha256 differs from SHA256SUMS for {binding.name}")
    # Every listed file is part of the set: fetch the ones the row does not bind by field.
    bound = {r.binding.name: r for r in results}
    prefix = f"{str(row.get('repository') or '').rstrip('/')}/releases/download/{row.get('release_tag')}/"
    extra = [
        Binding(label=f"{lane} {name}", field=f"SHA256SUMS: {name}", url=prefix + name, sha256=digest, name=name, kind="set-file", group=lane, role="listed")
        for name, digest in sorted(listed.items())
        if name not in bound
    ]
    for result in auditor.fetch_all(extra, cache):
        auditor.add(auditor.judge(result))
        bound[result.binding.name] = result
    available = {}
    for name in [*sorted(listed), "SHA256SUMS"]:
        result = bound.get(name)
        if result is None or result.path is None or result.error or not auditor.matches(result):
            problems.append(f"{name} is not available with the bytes SHA256SUMS records")
        else:
            available[name] = result.path
    if problems:
        auditor.add(Item(label, False, "; ".join(problems), "set"))
        return
    try:
        from pipeline.formats.assets import check_assets
        from pipeline.formats.lanes import load_lanes

        lanes = load_lanes(auditor.lanes_dir)
        lane_obj = lanes.get(lane)
        beta = lane_obj.beta_from_tag(row.get("release_tag")) if lane_obj is not None else None
        # The set is assembled in a folder of this run's own (another audit sharing --cache
        # assembles its copy beside it), removed once it is checked.
        (cache / "sets").mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=f".{lane}.", dir=cache / "sets") as staging:
            folder = Path(staging) / lane
            folder.mkdir()
            for name, path in available.items():
                link_or_copy(path, folder / name)
            report = check_assets(folder, lane=lane_obj, beta=beta, lanes_dir=auditor.lanes_dir)
    except PipelineError as error:
        auditor.add(Item(label, False, error.render(), "set"))
        return
    auditor.add(Item(label, True, f"closed set of {len(report.files)} files, SHA256SUMS matches, receipt and payload agree, SPDX {report.spdx_files} files / CycloneDX {report.cdx_components} components", "set"))
    if lane_obj is not None:
        from pipeline.formats.assets import asset_set

        provenance.audit_set_statement(auditor, lane, asset_set(lane_obj, beta).package_root, prefix, report.files, cache, row)


def validate_sbom(auditor: AuditSession, result: Fetched) -> None:
    assert result.path is not None
    label = f"sbom {result.binding.name}"
    try:
        from pipeline.formats.sbom import validate_file
    except ImportError:  # pragma: no cover - pipeline/sbom.py is part of the package stage
        auditor.add(Item(label, False, "SBOM validation not available: pipeline.formats.sbom is missing from this checkout", "sbom"))
        return
    try:
        message = validate_file(result.path)
    except PipelineError as error:
        auditor.add(Item(label, False, error.render(), "sbom"))
        return
    auditor.add(Item(label, True, message.split(": ", 1)[-1], "sbom"))
