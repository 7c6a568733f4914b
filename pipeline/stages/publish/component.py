"""`publish --component`: the lane's current cut as a prerelease of the runtime repository, and its gates."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pipeline.errors import InputError, PipelineError
from pipeline.formats import publication_plan as fmt
from pipeline.formats.assets import OUTER_SUMS
from pipeline.formats.lanes import Lane
from pipeline.infra.github import GitHub, repository_of
from pipeline.stage import Context
from pipeline.stages.publish.evidence import check_evidence, check_sums_signature, statement_bundle
from pipeline.stages.publish.gates import Remote, remote_gates
from pipeline.stages.publish.target import Target, asset_entry, refuse
from pipeline.util.hashing import sha256_file
from pipeline.util.jsonio import parse_strict


def component_target(ctx: Context, lane: Lane, github_of: Callable[[str], GitHub | None]) -> tuple[Target, Remote]:
    from pipeline.formats.assets import asset_set, check_assets

    register = ctx.register
    # The closed set's entries; the set's provenance statement is recorded beside the set, not in it.
    entries = [e for e in register.outputs_of(f"package:{lane.id}") if e.kind != "provenance"]
    if not entries:
        raise InputError(f"the register holds no packaged asset set of {lane.id}", file=register.file, fix=f"run 'python -m pipeline package --lane {lane.id}' first, with the same --dist")
    tags = sorted({e.attrs.get("component_tag") for e in entries})
    if len(tags) != 1:
        raise InputError("the register's asset set names more than one component tag", file=register.file, found=tags)
    tag = tags[0]
    beta = lane.beta_from_tag(tag)
    expected = asset_set(lane, beta)
    identity_entry = register.one("build-identity", lane=lane.id, needed_by="publish", produced_by="build")
    identity = parse_strict(register.verified_path(identity_entry).read_bytes(), file=register.path_of(identity_entry))
    commit = identity.get("patch_stack_sha")
    if not isinstance(commit, str) or len(commit) != 40:
        raise InputError("the build identity names no full source commit", file=register.path_of(identity_entry), field="patch_stack_sha", found=commit)
    assets_dir = ctx.dist / lane.id / "assets"
    files = {name: assets_dir / name for name in expected.names()}
    # Beside the set (not in it): its provenance statement with its DSSE bundle, and its SHA256SUMS's bundle (fmt.evidence_names).
    statements = [e for e in register.outputs_of(f"package:{lane.id}") if e.kind == "provenance"]
    statement = register.verified_path(statements[0]) if len(statements) == 1 else None
    bundle = statement_bundle(register, statements[0].sha256) if statement is not None else None
    sums = files.get(OUTER_SUMS)
    sums_bundle = statement_bundle(register, sha256_file(sums)) if sums is not None and sums.is_file() else None
    if statement is not None:
        _, statement_bundle_name, sums_bundle_name = fmt.evidence_names(statement.name)
        files[statement.name] = statement
        if bundle is not None:
            files[statement_bundle_name] = register.path_of(bundle)
        if sums_bundle is not None:
            files[sums_bundle_name] = register.path_of(sums_bundle)
    assets = [asset_entry(name, path, "dist", path.relative_to(ctx.dist).as_posix()) for name, path in sorted(files.items()) if path.is_file()]
    repository = repository_of(lane.component_repository)
    sums = files.get("SHA256SUMS")
    body = (
        f"Component {tag} of the OMP NInfer lane {lane.id} ({lane.title}).\n\n"
        f"Source commit: {commit}\n"
        f"Closed asset set: {len(expected.names())} files"
        + (f"; SHA256SUMS {sha256_file(sums)}" if sums is not None and sums.is_file() else "")
        + f"\nCut: beta.{beta} of {lane.version} (runtime/cuts/{lane.id}.json), published by the OMP NInfer release pipeline.\n"
    )
    target = Target("component", lane.id, repository, tag, commit, tag, body, True, False, assets, files, lane,
                    ci_required=lane.required_checks, ci_declared_in=str(lane.file))
    remote = Remote(github_of(repository), target)

    def gate_evidence() -> str:
        from pipeline.formats.release.names import RELEASE_RE

        fix = f"sign the release in the release workflow (python -m pipeline sign --dist {ctx.dist}) before publishing the component"
        signed_by = sorted({str(b.attrs.get("release")) for b in (bundle, sums_bundle) if b is not None})
        if len(signed_by) > 1 or not all(RELEASE_RE.fullmatch(r) for r in signed_by):
            raise refuse("the set's DSSE bundle and SHA256SUMS bundle do not name one product release that signed them", file=register.file, field="signature-bundle.release",
                          found=signed_by, expected="one release name vX.Y.Z[-beta.N], the same for both", fix=fix)
        if statement is None:
            raise refuse(f"the register holds {len(statements)} provenance statements of {lane.id}'s set", file=register.file, field="provenance", found=len(statements), expected=1,
                          fix=f"package the lane again (python -m pipeline package --lane {lane.id})")
        path = register.verified_path(bundle) if bundle is not None else None  # the bytes sign recorded, or an IntegrityError naming the change
        done = check_evidence(statement, path, bundle.attrs["release"] if bundle is not None else "", what=f"the provenance statement of {tag}", fix=fix)
        return f"{done}; {check_sums_signature(register, files[OUTER_SUMS], sums_bundle, fix=fix)}"

    def gate_assets() -> str:
        missing = sorted(n for n in expected.names() if not files[n].is_file())
        if missing:
            raise refuse(f"the asset set lacks {missing[0]}", file=assets_dir, found=sorted(p.name for p in assets_dir.iterdir()) if assets_dir.is_dir() else [], expected=expected.names())
        try:
            report = check_assets(assets_dir, lane=lane, beta=beta, deep=True)
        except PipelineError as exc:
            raise refuse(f"check-assets refuses the set: {exc.what}", file=exc.file, field=exc.field, fix=exc.fix or f"package the lane again (python -m pipeline package --lane {lane.id})") from None
        return f"check-assets: {report.component_tag} is a complete, intact set of {len(report.files)} files"

    def gate_register() -> str:
        by_name = {Path(e.path).name: e for e in entries}
        if sorted(by_name) != expected.names():
            raise refuse("the register's package entries are not the asset set", file=register.file, found=sorted(by_name), expected=expected.names())
        for name, entry in sorted(by_name.items()):
            actual = sha256_file(files[name]) if name in files and files[name].is_file() else None
            if entry.sha256 != actual:
                raise refuse(f"the register records other bytes for {name}", file=files[name], field=f"{entry.name}.sha256", found=actual, expected=entry.sha256, fix=f"package the lane again (python -m pipeline package --lane {lane.id})")
        return f"the register's {len(by_name)} entries equal the set"

    def gate_cut() -> str:
        ledger = lane.ledger()
        cut = ledger.current(lane.version)
        if identity_entry.attrs.get("cut", {}).get("rehearsal"):
            raise refuse(f"the build is a rehearsal under {tag}'s names, not the cut", file=register.path_of(identity_entry), field="cut.rehearsal", found=True, expected=False,
                          why="the embedded sample or a --rehearsal build carries the cut's names without being its source", fix=f"build the cut's commit: python -m pipeline build --lane {lane.id} --source URL_OR_PATH@<the cut's commit>")
        if cut is None or cut.tag != tag:
            raise refuse(f"{tag} is not the lane's current cut", file=lane.ledger_file(), found=tag, expected=cut.tag if cut else "a cut (python -m pipeline cut)")
        if cut.source_commit != commit:
            raise refuse("the cut's commit is not the build identity's patch_stack_sha", file=lane.ledger_file(), field=f"{tag}.source_commit", found=cut.source_commit, expected=commit, fix="build and package the cut's commit")
        return f"{tag} ({cut.state}) binds {commit}, the build identity's patch_stack_sha"

    def gate_limits() -> str:
        big = [a for a in assets if a["size"] > fmt.MAX_ASSET_BYTES]
        if big:
            raise refuse(f"{big[0]['name']} is too large for a GitHub release asset", found=big[0]["size"], expected=f"< 2 GiB ({fmt.MAX_ASSET_BYTES + 1} bytes)")
        if len(assets) > fmt.MAX_ASSETS:
            raise refuse("too many assets for one GitHub release", found=len(assets), expected=f"at most {fmt.MAX_ASSETS}")
        return f"{len(assets)} assets, largest {max((a['size'] for a in assets), default=0)} bytes"

    target.gates = [
        ("check-assets", gate_assets),
        ("register-equals-set", gate_register),
        ("evidence", gate_evidence),
        ("cut-commit", gate_cut),
        ("asset-limits", gate_limits),
        *remote_gates(remote),
    ]
    return target, remote
