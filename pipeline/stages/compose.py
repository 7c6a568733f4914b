"""Stage `compose`: write the product release tree `manifests/<release>/` (docs/release-tree.md).

    python -m pipeline compose --release vX.Y.Z [--dist DIR]
    python -m pipeline compose stage --from vX.Y.Z --release vX.Y.Z
    python -m pipeline compose rebind --release vX.Y.Z [--pin COMMIT]
    python -m pipeline compose accept --release vX.Y.Z --record FILE
    python -m pipeline compose promote --release vX.Y.Z --to candidate|ready

`compose` reads the release's hand-written `release.toml`; for every lane built
by this pipeline (`from = "register"`) it takes the lane's closed asset set and
its `package-archive` entry (checked as check-assets does,
`pipeline.formats.assets.check_registered_set`), its lane receipt and, for the
container lane, that lane's image publication receipt from the artefact register,
refuses any drift between them (a receipt for other bytes, a publication
receipt for another archive, a mutable image tag) with the file and field
named, and copies them into the tree byte for byte.  Then `rebind` recomputes
the hash chain in one fixed order -- lane receipts and checksum copies -> lane
rows -> authority and summary -> manifest -- and renders COMPATIBILITY.md and
NOTES.md.  No hash is ever typed.

`stage` starts a release from its predecessor (a draft whose lanes are all
"rebound unchanged": same bytes, same receipts), `accept` binds an external
installation acceptance made on a candidate commit, and `promote` moves the
status forward after checking the target state's rules.  `rebind --pin COMMIT`
is the pin dance: a record's raw URL may name only a commit that already holds
its bytes, which `git show COMMIT:PATH` proves locally.

Every action runs through `stage.execute()` as its own stage key and records
the tree it leaves as `release-tree` entries (see "the stages" below); the
format itself -- names, release.toml, derivation, renderings, the state and
acceptance rules, verify's checks -- is `pipeline.formats.release`.
"""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.errors import (
    EnvironmentProblem,
    InputError,
    IntegrityError,
    PipelineError,
    RefusedError,
    UsageError,
)
from pipeline.formats.lanes import REPO_ROOT, Lane, load_lanes
from pipeline.formats.receipts import (
    IMAGE_PUBLICATION_TYPE,
    LANE_RECEIPT_SCHEMA,
    LANE_RECEIPT_STATUSES,
    LANE_RECEIPT_TYPE,
    publication_facts,
    receipt_facts,
)
from pipeline.formats.release.contract import evidence_problems, tree_digests, verify_release
from pipeline.formats.release.derive import (
    Derived,
    derive,
    null_identities,
    unknown_keys_unused,
)
from pipeline.formats.release.evidence import collect_pins, expected_names, file_sha256, predecessor_row
from pipeline.formats.release.manifest import acceptance_subject, blockers, lane_rows
from pipeline.formats.release.names import (
    ACCEPTANCE,
    AUTHORITY,
    AUTHORITY_MD,
    MANIFEST,
    NOTES,
    PUBLICATION_RECEIPT,
    RELEASE_RE,
    RELEASE_TOML,
    ROW_RECORDS,
    STATES,
    SUMMARY,
    component_publication_name,
    image_provenance_name,
    parse_raw_url,
    provenance_name,
    raw_url,
    receipt_name,
    release_dir,
    repo_path,
    sort_release_key,
    split_image_reference,
    sums_name,
)
from pipeline.formats.release.problems import Problem, Problems
from pipeline.formats.release.rules import acceptance_problems, diff, state_problems
from pipeline.formats.release.spec import SHIPPED, dump_toml, load_release_toml
from pipeline.infra.git import GitObjects, GitUnavailable, git_has_commit, git_show, rev_parse_commit
from pipeline.register import REGISTER_FILE, REPOSITORY, Artifact, Register
from pipeline.stage import Context, Skip, Stage, StageResult, execute
from pipeline.util import ui
from pipeline.util.fs import atomic_write_bytes
from pipeline.util.hashing import is_commit_hex, sha256_bytes
from pipeline.util.jsonio import (
    canonical_bytes,
    check_text_hygiene,
    expect_object,
    loads_document,
    loads_object,
    read_json_object,
)
from pipeline.util.safepath import within


@dataclass
class Outcome:
    release: str
    status: str
    blockers: list[str]
    written: list[str] = field(default_factory=list)
    pinned: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    # the closed tree after the action: repository path -> its role (derive's Derived.files), and the signed files
    files: dict[str, str] = field(default_factory=dict)
    signed: list[str] = field(default_factory=list)


def _refuse(problems: list[Problem], *, kind: type[PipelineError] = InputError, lead: str = "compose refused") -> None:
    """Print every problem, then raise the first (it names its file and field)."""
    if not problems:
        return
    for problem in problems[1:]:
        sys.stderr.write(f"error: {problem.message()}\n")
    first = problems[0]
    more = f" (and {len(problems) - 1} more error{'s' if len(problems) > 2 else ''} listed above)" if len(problems) > 1 else ""
    raise kind(f"{lead}: {first.what}{more}", **first.details())


def _check_release_name(release: str, flag: str = "--release") -> None:
    if not RELEASE_RE.fullmatch(release or ""):
        raise UsageError(f"{flag} is not a product release name", field=flag, found=release, expected="vX.Y.Z or vX.Y.Z-beta.N")


def _read_manifest(root: Path, release: str) -> dict[str, Any] | None:
    path = root / repo_path(release, MANIFEST)
    if not path.exists():
        return None
    return read_json_object(path)


# -- importing lane evidence from the register ---------------------------------------------

def _want(check: bool, what: str, *, file: Path | str, field: str, found: Any, expected: Any, fix: str | None = None) -> None:
    if not check:
        raise IntegrityError(
            what,
            file=file,
            field=field,
            found=found,
            expected=expected,
            why="compose binds one set of bytes per lane; evidence about other bytes is drift",
            fix=fix or "re-run the stage that produced the stale file (package, qualify or push) so all evidence describes the same bytes",
        )


def import_register_lane(root: Path, release: str, lane: Lane, register: Register, *, status: str, model_sha256: str | None) -> dict[str, bytes]:
    """The evidence files of one register-mode lane, checked against each other: {tree path: bytes}."""
    from pipeline.formats.assets import asset_set, check_registered_set

    outer = register.one("outer-checksums", lane=lane.id, needed_by="compose", produced_by="package")
    # Deep, as check-assets: the closed set, its checksum files, receipt, package payload and SBOMs,
    # and every register entry of the set (the package archive among them) naming exactly the bytes checked.
    check_registered_set(register, lane, needed_by="compose")
    sums_path = register.verified_path(outer)
    tag = outer.attrs["component_tag"]
    package_name = asset_set(lane, lane.beta_from_tag(tag)).name_of("package")
    package = register.one("package-archive", lane=lane.id, needed_by="compose", produced_by="package")
    package_path = register.verified_path(package)
    _want(package_path.name == package_name, "the register's package archive is not the set's package", file=register.file, field=f"{package.name}.path", found=package.path, expected=package_name)
    _want(package.attrs["component_tag"] == tag, "the register's package archive is of another component tag than the set", file=register.file, field=f"{package.name}.component_tag", found=package.attrs["component_tag"], expected=tag)
    sums_bytes = sums_path.read_bytes()

    entry = register.one("lane-receipt", lane=lane.id, needed_by="compose", produced_by="qualify")
    receipt_path = register.verified_path(entry)
    receipt_bytes = receipt_path.read_bytes()
    doc = loads_object(receipt_bytes, source=receipt_path)
    facts = receipt_facts(doc)
    f = receipt_path
    _want(doc.get("artifact_type") == LANE_RECEIPT_TYPE, "is not a lane receipt", file=f, field="artifact_type", found=doc.get("artifact_type"), expected=LANE_RECEIPT_TYPE)
    _want(doc.get("schema_version") == LANE_RECEIPT_SCHEMA, "has an unsupported schema version", file=f, field="schema_version", found=doc.get("schema_version"), expected=LANE_RECEIPT_SCHEMA)
    _want(facts.lane == lane.id, "is a receipt of another lane", file=f, field="lane", found=facts.lane, expected=lane.id)
    _want(facts.component_tag == tag, "qualified another component tag than the packaged set", file=f, field="component_tag", found=facts.component_tag, expected=tag)
    _want(facts.package_name == package_name, "qualified another package file", file=f, field="identity.package.name", found=facts.package_name, expected=package_name)
    _want(facts.package_sha256 == package.sha256, "is a receipt for other bytes: its package hash differs from the set's SHA256SUMS", file=f, field="identity.package.sha256", found=facts.package_sha256, expected=package.sha256, fix="qualify the packaged bytes again (python -m pipeline qualify --lane " + lane.id + ")")
    _want(facts.package_bytes == package.size, "qualified a package of another size", file=f, field="identity.package.bytes", found=facts.package_bytes, expected=package.size)
    _want(facts.outer_checksums_sha256 == sha256_bytes(sums_bytes), "binds another outer SHA256SUMS than the packaged set", file=f, field="identity.outer_checksums_sha256", found=facts.outer_checksums_sha256, expected=sha256_bytes(sums_bytes))
    _want(is_commit_hex(facts.source_commit), "does not bind a full source commit", file=f, field="identity.source_commit", found=facts.source_commit, expected="40 hex")
    _want(facts.patch_stack_sha == facts.source_commit, "build identity names another source commit", file=f, field="identity.build_identity.patch_stack_sha", found=facts.patch_stack_sha, expected=facts.source_commit)
    _want(facts.status in LANE_RECEIPT_STATUSES, "has an unknown status", file=f, field="status", found=facts.status, expected=", ".join(LANE_RECEIPT_STATUSES))
    _want(facts.secret_values_recorded == 0, "records secret values", file=f, field="secret_values_recorded", found=facts.secret_values_recorded, expected=0)
    if model_sha256 is not None:
        _want(facts.model_artifact_sha256 == model_sha256, "was qualified with another model than release.toml binds", file=f, field="identity.model_artifact_sha256", found=facts.model_artifact_sha256, expected=model_sha256, fix="qualify with the release's model, or correct [model] in release.toml")
    identities = register.query("build-identity", lane=lane.id)
    if identities:
        build_path = register.verified_path(identities[0])
        build_doc = loads_object(build_path.read_bytes(), source=build_path)
        serve = expect_object(build_doc.get("binaries") or {}, source=build_path, field="binaries").get(lane.binary_file("ninfer-serve"))
        if serve is not None:
            _want(facts.server_binary_sha256 == serve, "qualified another server binary than the build", file=f, field="identity.server_binary_sha256", found=facts.server_binary_sha256, expected=serve)
    if status == "qualified" and facts.status != "passed":
        raise RefusedError(
            f"lane {lane.id} is marked qualified in release.toml, but its receipt says {facts.status}",
            file=repo_path(release, RELEASE_TOML),
            field=f"lanes.{lane.id}.status",
            found="qualified",
            expected="'preview' (installable false) until a passed receipt exists",
            fix="set status = 'preview', or qualify on the lane's hardware (python -m pipeline qualify --lane " + lane.id + " --import RECEIPT)",
        )
    files = {
        repo_path(release, receipt_name(lane.id)): receipt_bytes,
        repo_path(release, sums_name(lane.id)): sums_bytes,
        repo_path(release, provenance_name(lane.id)): _kept_statement(root / repo_path(release, provenance_name(lane.id)), set_provenance(register, lane, tag, sums_bytes, facts.source_commit)),
    }
    if lane.kind == "container":
        # Only this lane's own receipt: an image pushed for another lane is never evidence for this one.
        entries = register.query("publication-receipt", lane=lane.id)
        if len(entries) > 1:
            raise InputError(f"the register has {len(entries)} publication receipts for lane {lane.id}", file=register.file, found=[e.name for e in entries], expected="exactly one")
        if entries:
            pub_path = register.verified_path(entries[0])
            pub_bytes = pub_path.read_bytes()
            pub = loads_object(pub_bytes, source=pub_path)
            pf = publication_facts(pub)
            p = pub_path
            _want(pub.get("artifact_type") == IMAGE_PUBLICATION_TYPE, "is not an image publication receipt", file=p, field="artifact_type", found=pub.get("artifact_type"), expected=IMAGE_PUBLICATION_TYPE)
            if split_image_reference(pf.image_reference) is None:
                raise IntegrityError(
                    "the image reference is not pinned by digest (a mutable tag)",
                    file=p,
                    field="image_reference",
                    found=pf.image_reference,
                    expected="'<registry>/<repository>@sha256:<64 hex>'",
                    why="a tag can be moved to other bytes; the manifest binds images by digest only",
                    fix="push by digest (python -m pipeline push) and bind the digest reference",
                )
            _want(pf.image_digest == split_image_reference(pf.image_reference)[1], "the digest differs from the image reference", file=p, field="image_digest", found=pf.image_digest, expected=split_image_reference(pf.image_reference)[1])
            _want(pf.binary_sha256 == package.sha256, "the image was built from another binary archive than the packaged set", file=p, field="binary_sha256", found=pf.binary_sha256, expected=package.sha256, fix="rebuild and push the image from the packaged archive (python -m pipeline image, push)")
            _want(pf.binary_name == package_name, "the image names another binary archive", file=p, field="binary_asset", found=pf.binary_name, expected=package_name)
            _want(pf.source_commit == facts.source_commit, "the image names another source commit than the receipt", file=p, field="source_commit", found=pf.source_commit, expected=facts.source_commit)
            _want(pf.component_tag == tag, "the image names another component tag", file=p, field="release_tag", found=pf.component_tag, expected=tag)
            _want(pf.secret_free is True, "does not declare itself secret-free", file=p, field="secret_free", found=pf.secret_free, expected=True)
            files[repo_path(release, PUBLICATION_RECEIPT)] = pub_bytes
            statement = image_provenance(register, lane, tag, pf.image_digest, facts.source_commit)
            if statement is not None:
                rel = repo_path(release, image_provenance_name(lane.id))
                files[rel] = _kept_statement(root / rel, statement)
        else:
            ui.warn(f"{lane.id}: no publication-receipt in the register yet (run image and push); the image stays null with a blocker")
    ui.info(f"{lane.id}: {tag}, package {package_name} {package.sha256[:12]}, receipt {facts.status}")
    return files


def _statement_entries(register: Register, lane: Lane, tag: str, build_type: str) -> list[Artifact]:
    return [e for e in register.query("provenance", lane=lane.id) if e.attrs.get("build_type") == build_type and e.attrs.get("component_tag") == tag]


def set_provenance(register: Register, lane: Lane, tag: str, sums_bytes: bytes, source_commit: str | None) -> bytes:
    """The register's provenance statement of this lane's set (package writes it beside the set), checked
    to describe exactly the set compose binds: every file of its SHA256SUMS and the SHA256SUMS itself."""
    from pipeline.formats import provenance
    from pipeline.formats.assets import parse_sums

    entries = _statement_entries(register, lane, tag, provenance.BUILD_TYPE_SET)
    if len(entries) != 1:
        raise InputError(
            f"the register has {len(entries)} provenance statements of the {tag} set",
            file=register.file,
            found=[e.name for e in entries],
            expected="exactly one (the package stage writes it beside the set)",
            fix=f"package the lane again (python -m pipeline package --lane {lane.id})",
        )
    path = register.verified_path(entries[0])
    data = path.read_bytes()
    statement = provenance.read_statement(data, origin=str(path))
    set_files = {**parse_sums(sums_bytes, file=sums_name(lane.id)), "SHA256SUMS": sha256_bytes(sums_bytes)}
    provenance.check_subjects(statement, set_files, origin=str(path), what="the packaged set's files")
    provenance.check_parameters(statement, lane=lane.id, tag=tag, source_commit=source_commit, origin=str(path))
    return data


def _kept_statement(tree_copy: Path, registered: bytes) -> bytes:
    """The tree's statement bytes: the committed copy when it states what the register's does.

    A statement's `runDetails` say who ran the build (the release workflow and its run in CI,
    a local builder elsewhere), so a statement made in another run differs only there. The
    tree binds what was built (subjects, parameters, dependencies, byproducts); the signed
    statement beside the set says who built it. Re-composing in CI must not rewrite a
    committed tree for that difference alone (release.yml's compose job diffs the tree).
    """
    from pipeline.formats import provenance

    if not tree_copy.is_file():
        return registered
    committed = tree_copy.read_bytes()
    if committed == registered:
        return committed
    try:
        old = provenance.read_statement(committed, origin=str(tree_copy)).document
    except PipelineError:
        return registered  # a damaged copy is replaced (a draft) or refused as a change (a candidate)
    new = provenance.read_statement(registered, origin="register").document

    def what(document: dict[str, Any]) -> Any:
        return {"subject": document["subject"], "buildDefinition": document["predicate"]["buildDefinition"], "byproducts": document["predicate"]["runDetails"].get("byproducts")}

    return committed if what(old) == what(new) else registered


def image_provenance(register: Register, lane: Lane, tag: str, image_digest: str | None, source_commit: str | None) -> bytes | None:
    """The image's provenance statement, when the register holds one for the pushed image (None otherwise)."""
    from pipeline.formats import provenance

    for entry in _statement_entries(register, lane, tag, provenance.BUILD_TYPE_IMAGE):
        if entry.attrs.get("manifest_digest") != image_digest:
            continue  # a statement of another build of the image than the one pushed
        path = register.verified_path(entry)
        data = path.read_bytes()
        statement = provenance.read_statement(data, origin=str(path))
        _want(sorted(statement.subjects.values()) == [str(image_digest).removeprefix("sha256:")], "the image provenance names other subjects than the pushed image", file=path, field="subject", found=sorted(statement.subjects.values()), expected=str(image_digest))
        provenance.check_parameters(statement, lane=lane.id, tag=tag, source_commit=source_commit, origin=str(path))
        return data
    ui.warn(f"{lane.id}: the register holds no provenance statement of the pushed image {image_digest}; the tree binds none")
    return None


def component_publication(register: Register, lane: Lane, tag: str, set_files: dict[str, str], source_commit: str | None) -> tuple[dict[str, Any], bytes] | None:
    """The register's publication receipt of this lane's component (pipeline/stages/publish/), checked
    to bind exactly this closed set at this tag and commit; None when the component is not published
    by the pipeline.  Drift (a receipt of other bytes, tag, commit or repository) is refused."""
    from pipeline.formats.publication_plan import read_receipt
    from pipeline.infra.github import repository_of

    entries = [e for e in register.query("release-publication", lane=lane.id) if e.attrs.get("tag") == tag]
    if not entries:
        return None
    if len(entries) > 1:
        raise InputError(f"the register has {len(entries)} publication receipts of {tag}", file=register.file, found=[e.name for e in entries], expected="exactly one")
    from pipeline.formats.assets import asset_set
    from pipeline.formats.provenance import set_statement_name
    from pipeline.formats.publication_plan import set_part

    path = register.verified_path(entries[0])
    receipt = read_receipt(path)
    statement = set_statement_name(asset_set(lane, lane.beta_from_tag(tag)).package_root)
    assets = set_part({a["name"]: a["sha256"] for a in receipt["assets"]}, statement)
    _want(receipt["kind"] == "component", "is not a component publication receipt", file=path, field="kind", found=receipt["kind"], expected="component")
    _want(receipt["repository"] == repository_of(lane.component_repository), "publishes to another repository than the lane's component repository", file=path, field="repository", found=receipt["repository"], expected=repository_of(lane.component_repository))
    _want(receipt["tag"] == tag, "publishes another component tag than the packaged set", file=path, field="tag", found=receipt["tag"], expected=tag)
    _want(receipt["commit"] == source_commit, "tags another commit than the lane receipt's source commit", file=path, field="commit", found=receipt["commit"], expected=source_commit)
    _want(sorted(assets) == sorted(set_files), "publishes another asset set than the packaged closed set", file=path, field="assets", found=sorted(assets), expected=sorted(set_files))
    for name, digest in sorted(set_files.items()):
        _want(assets[name] == digest, f"published other bytes for {name} than the packaged set", file=path, field=f"assets[{name}].sha256", found=assets[name], expected=digest, fix="publish the packaged set again under a new cut (python -m pipeline cut, publish --component)")
    return receipt, path.read_bytes()  # the bytes the tree copies: the file read_receipt checked, verified by the register


def _pins_checksums(root: Path, release: str, lane: Lane, source: str, tag: str | None) -> bytes:
    """Bind a downloaded published SHA256SUMS (pins mode): strict format, closed set of the lane's names."""
    from pipeline.formats.assets import parse_sums

    path = root / source
    if not path.is_file():
        raise InputError("checksums_file does not exist", file=repo_path(release, RELEASE_TOML), field=f"lanes.{lane.id}.checksums_file", found=source, expected="a repository-relative path of the published SHA256SUMS")
    data = path.read_bytes()
    entries = parse_sums(data, file=path)
    names = expected_names(lane, tag)
    if names is not None:
        wanted = sorted(v for k, v in names.items() if k != "outer-sums")
        if sorted(entries) != wanted:
            extra = sorted(set(entries) - set(wanted))
            missing = sorted(set(wanted) - set(entries))
            raise IntegrityError("is not the lane's closed asset set", file=path, field=(extra or missing)[0], found=sorted(entries), expected=wanted)
    return data


# -- the pin dance -------------------------------------------------------------------------

def resolve_commit(root: Path, rev: str) -> str:
    commit = rev_parse_commit(root, rev, why="pinning proves with 'git show' that a commit holds the bytes")
    if commit is None:
        raise UsageError("--pin names no commit of this repository", field="--pin", found=rev, expected="a commit (e.g. HEAD or 40 hex) that holds the committed release tree", fix="commit the tree first, then pin that commit")
    return commit


def _record_bytes(root: Path, derived: Derived) -> dict[str, bytes]:
    """Every pinnable record's current bytes, in chain order (evidence first, then derived records)."""
    m = derived.manifest
    assert m is not None
    out: dict[str, bytes] = {}
    rows = lane_rows(m)
    for row in rows:
        rel = row["qualification"]["summary"]
        if rel and (root / rel).is_file():
            out[rel] = (root / rel).read_bytes()
        for key in ROW_RECORDS:
            record = row.get(key)
            if isinstance(record, dict) and (root / record["path"]).is_file():
                out[record["path"]] = (root / record["path"]).read_bytes()
    acc = m["qualification"]["acceptance"]
    if acc and (root / acc["path"]).is_file():
        out[acc["path"]] = (root / acc["path"]).read_bytes()
    reviews = m.get("reviews")
    if isinstance(reviews, dict) and (root / reviews["path"]).is_file():
        out[reviews["path"]] = (root / reviews["path"]).read_bytes()
    out[m["qualification"]["summary"]] = canonical_bytes(derived.summary)
    out[m["compatibility"]["path"]] = canonical_bytes(derived.authority)
    return out


def compute_pins(root: Path, release: str, lanes: dict[str, Lane], current: dict[str, Any] | None, commit: str | None, outcome: Outcome) -> dict[str, str]:
    """Pins that hold: existing ones whose commit still serves the bytes, plus `commit` where it does."""
    pins = collect_pins(current)
    unverifiable: set[str] = set()
    with GitObjects(root) as objects:
        pins = _settle_pins(root, release, lanes, current, commit, pins, objects, unverifiable)
    before = collect_pins(current)
    outcome.pinned = sorted(rel for rel in pins if before.get(rel) != pins[rel])
    outcome.dropped = sorted(rel for rel in before if rel not in pins and (root / rel).exists())
    for rel in sorted(unverifiable):
        outcome.warnings.append(Problem("pins", "kept a pin whose commit is not in local history (cannot check it here)", file=rel))
    return pins


def _settle_pins(root, release, lanes, current, commit, pins, objects, unverifiable) -> dict[str, str]:
    """Iterate to the fixed point: pinning a receipt changes the summary, which may then be pinnable."""
    for _ in range(8):
        problems = Problems()
        derived = derive(root, release, problems, lanes=lanes, current=current, pins=pins)
        if derived.manifest is None:
            return pins
        new: dict[str, str] = {}
        for rel, data in _record_bytes(root, derived).items():
            options = []
            parsed = parse_raw_url(pins.get(rel))
            if parsed and parsed[1] == rel:
                options.append(parsed[0])
            if commit and commit not in options:
                options.append(commit)
            for option in options:
                try:
                    if not objects.has_commit(option):
                        if parsed and option == parsed[0]:
                            new[rel] = pins[rel]  # cannot check here: keep, verify --check-pins fails closed
                            unverifiable.add(rel)
                            break
                        continue
                    held = objects.show(option, rel)
                except GitUnavailable:
                    if rel in pins:
                        new[rel] = pins[rel]
                        unverifiable.add(rel)
                    break
                if held == data:
                    new[rel] = raw_url(option, rel)
                    break
        if new == pins:
            break
        pins = new
    return pins


# -- rebind: the hash chain ------------------------------------------------------------------

def rebind(
    root: Path,
    release: str,
    *,
    pin: str | None = None,
    status: str | None = None,
    lanes: dict[str, Lane] | None = None,
    allow_frozen_change: bool = False,
) -> Outcome:
    """Recompute summary, authority, renderings and manifest from release.toml and the evidence."""
    _check_release_name(release)
    lanes = lanes or load_lanes()
    tree = release_dir(root, release)
    if not (tree / RELEASE_TOML).is_file():
        raise InputError("the release has no release.toml", file=repo_path(release, RELEASE_TOML), fix=f"write it (docs/release-tree.md) or start from a predecessor: python -m pipeline compose stage --from vX.Y.Z --release {release}")
    current = _read_manifest(root, release)
    commit = resolve_commit(root, pin) if pin else None
    current_status = current.get("status") if isinstance(current, dict) and current.get("status") in STATES else "draft"
    target = status or current_status
    outcome = Outcome(release, target, [])
    pins = compute_pins(root, release, lanes, current, commit, outcome)
    problems = Problems()
    derived = derive(root, release, problems, lanes=lanes, current=current, status=target, pins=pins)
    _refuse(problems.items)
    assert derived.manifest is not None and derived.release is not None
    # The evidence in the tree must agree with itself before any hash is bound to it.
    _refuse(evidence_problems(root, release, derived, lanes), kind=IntegrityError, lead="the evidence in the tree disagrees")
    if isinstance(current, dict) and current_status != "draft" and not allow_frozen_change:
        before, after = acceptance_subject(current), acceptance_subject(derived.manifest)
        if before != after:
            changed = _first_difference(before, after)
            raise RefusedError(
                f"the release is {current_status}: its install identities are frozen, but this would change them",
                file=repo_path(release, MANIFEST),
                field=changed[0],
                found=changed[1],
                expected=changed[2],
                why="acceptance and qualification are evidence for the exact candidate bytes; rebinding old evidence to new bytes is forbidden",
                fix="stage a new release for new bytes (python -m pipeline compose stage --from " + release + " --release vX.Y.Z)",
            )
    violations = state_problems(derived.manifest, derived, target, lanes)
    if violations:
        _refuse(
            [Problem("states", what, file=repo_path(release, MANIFEST), field=name, found=found, expected=expected) for name, what, found, expected in violations],
            kind=RefusedError,
            lead=f"the tree would break the rules of status {target}",
        )
    writes = [
        (derived.manifest["qualification"]["summary"], canonical_bytes(derived.summary)),
        (derived.manifest["compatibility"]["path"], canonical_bytes(derived.authority)),
        (repo_path(release, AUTHORITY_MD), derived.authority_md.encode("utf-8")),
        (repo_path(release, NOTES), derived.notes.encode("utf-8")),
        (repo_path(release, MANIFEST), canonical_bytes(derived.manifest)),
    ]
    for rel, data in writes:
        path = root / rel
        if not path.is_file() or path.read_bytes() != data:
            atomic_write_bytes(path, data)
            outcome.written.append(rel)
    outcome.blockers = list(derived.manifest["publication"]["blockers"])
    outcome.warnings += problems.warnings
    outcome.files = dict(derived.files)
    outcome.signed = list(derived.manifest["signing"]["signed_files"])
    for key in unknown_keys_unused(derived.release, null_identities(derived.manifest["components"], lanes)):
        outcome.warnings.append(Problem("input", "explains a value that is no longer null", file=derived.release.path, field=f"unknown.{key}", fix="remove the entry"))
    return outcome


def _first_difference(before: Any, after: Any, path: str = "subject") -> tuple[str, Any, Any]:
    out: list[tuple[str, Any, Any]] = []
    diff(after, before, path, out)
    return out[0] if out else (path, after, before)


# -- compose: import + rebind ----------------------------------------------------------------

def compose_release(root: Path, release: str, *, dist: Path | None = None, lanes_dir: Path | None = None, register: Register | None = None) -> Outcome:
    """Import the register lanes' evidence from `dist`'s register (or `register`, already open on it) and rebind."""
    _check_release_name(release)
    lanes = load_lanes(lanes_dir)
    rt = load_release_toml(root, release, lanes)
    current = _read_manifest(root, release)
    status = current.get("status") if isinstance(current, dict) else "draft"
    ui.step("compose", f"{release}: {len(rt.lanes)} lanes from {rt.path}")
    writes: dict[str, bytes] = {}
    register_lanes = [li for li in rt.lanes.values() if li.mode == "register" and li.status in SHIPPED]
    if register_lanes:
        if dist is None or not (Path(dist) / REGISTER_FILE).is_file():
            raise InputError(
                "lanes built by this pipeline need the artefact register",
                file=(Path(dist) / REGISTER_FILE) if dist else None,
                field=f"lanes.{register_lanes[0].id}.from",
                found="register",
                fix="pass --dist DIR (the output folder of build, package and qualify)",
            )
        register = register if register is not None and register.dist.resolve() == Path(dist).resolve() else Register(Path(dist))
        for li in register_lanes:
            writes.update(import_register_lane(root, release, lanes[li.id], register, status=li.status, model_sha256=rt.model["artifact_sha256"]))
            _check_published(root, release, lanes[li.id], li, register, writes)
    for li in rt.lanes.values():
        if li.mode == "pins" and li.status in SHIPPED and li.pins.get("checksums_file"):
            writes[repo_path(release, sums_name(li.id))] = _pins_checksums(root, release, lanes[li.id], li.pins["checksums_file"], li.pins.get("release_tag"))
    changed = [rel for rel, data in writes.items() if not (root / rel).is_file() or (root / rel).read_bytes() != data]
    if changed and status != "draft":
        raise RefusedError(
            f"the release is {status}: its evidence is frozen, but compose would replace it",
            file=changed[0],
            why="a candidate's bytes and receipts are frozen together",
            fix=f"stage a new release for new bytes (python -m pipeline compose stage --from {release} --release vX.Y.Z)",
        )
    # Evidence files that a mode change made obsolete would leave the tree unclosed: remove them.
    obsolete: list[str] = []
    if status == "draft":
        for lane_id, li in rt.lanes.items():
            if li.mode == "register" and li.status in SHIPPED:
                continue
            names = [receipt_name(lane_id), sums_name(lane_id), provenance_name(lane_id), image_provenance_name(lane_id), component_publication_name(lane_id)]
            if lanes[lane_id].kind == "container" and li.mode != "predecessor":
                names.append(PUBLICATION_RECEIPT)
            for name in names:
                rel = repo_path(release, name)
                keep = rel in writes or li.mode == "predecessor" or (li.mode == "pins" and name == receipt_name(lane_id))
                if (root / rel).exists() and not keep:
                    obsolete.append(rel)
    with _rollback(root, [*changed, *obsolete]):
        for rel in obsolete:
            (root / rel).unlink()
            ui.info(f"removed {rel}: the lane no longer binds it")
        for rel in sorted(changed):
            atomic_write_bytes(root / rel, writes[rel])
        outcome = rebind(root, release, lanes=lanes)
    outcome.written = sorted(set(changed) | set(outcome.written) | set(obsolete))
    return outcome


def _check_published(root: Path, release: str, lane: Lane, li: Any, register: Register, writes: dict[str, bytes]) -> None:
    """`published` of a register lane against the component's publication receipt in the register."""
    from pipeline.formats.assets import parse_sums

    sums = writes[repo_path(release, sums_name(lane.id))]
    set_files = {**parse_sums(sums, file=sums_name(lane.id)), "SHA256SUMS": sha256_bytes(sums)}
    facts = receipt_facts(json.loads(writes[repo_path(release, receipt_name(lane.id))]))
    outer = register.one("outer-checksums", lane=lane.id, needed_by="compose", produced_by="package")
    published = component_publication(register, lane, outer.attrs["component_tag"], set_files, facts.source_commit)
    receipt, receipt_bytes = published if published is not None else (None, b"")
    if receipt is not None and not li.published:
        raise RefusedError(
            f"the component {receipt['tag']} is published (release {receipt['release_id']} of {receipt['repository']}), but release.toml says it is not",
            file=repo_path(release, RELEASE_TOML),
            field=f"lanes.{lane.id}.published",
            found=False,
            expected="true: the register's publication receipt binds exactly this set",
            fix="set published = true",
        )
    if receipt is None and li.published:
        ui.warn(f"{lane.id}: published = true is stated by hand; the register holds no publication receipt of {outer.attrs['component_tag']} (python -m pipeline publish --component {lane.id})")
    elif receipt is not None:
        ui.info(f"{lane.id}: published as release {receipt['release_id']} of {receipt['repository']} ({len(receipt['assets'])} assets, plan {receipt['plan_sha256'][:12]})")
    if receipt is not None:
        # The receipt is the tree's evidence for `published` (docs/release-tree.md): copied byte for byte.
        writes[repo_path(release, component_publication_name(lane.id))] = receipt_bytes


@contextmanager
def _rollback(root: Path, rels: list[str]):
    """Restore these files (or their absence) when the block fails: a refused compose writes nothing."""
    saved = {rel: (root / rel).read_bytes() if (root / rel).is_file() else None for rel in rels}
    try:
        yield
    except BaseException:
        for rel, data in saved.items():
            path = root / rel
            if data is None:
                path.unlink(missing_ok=True)
            else:
                atomic_write_bytes(path, data)
        raise


# -- stage --------------------------------------------------------------------------------------

def stage_release(root: Path, previous: str, release: str, *, lanes_dir: Path | None = None) -> Outcome:
    _check_release_name(previous, "--from")
    _check_release_name(release)
    if sort_release_key(release) <= sort_release_key(previous):
        raise UsageError("the new release must come after its predecessor", field="--release", found=release, expected=f"a release after {previous}")
    lanes = load_lanes(lanes_dir)
    old_tree = release_dir(root, previous)
    new_tree = release_dir(root, release)
    if not old_tree.is_dir():
        raise InputError("the predecessor has no release tree", file=repo_path(previous, ""), fix="name a release under manifests/")
    if new_tree.exists():
        raise RefusedError("the release tree already exists; stage never overwrites", file=repo_path(release, ""), fix="remove it first if it is a failed attempt (git clean), or pick the next release number")
    report = verify_release(root, previous, lanes_dir=lanes_dir)
    if not report.valid:
        _refuse(report.problems.items, kind=RefusedError, lead=f"the predecessor {previous} does not verify")
    old_rt = load_release_toml(root, previous, lanes)
    old_manifest = _read_manifest(root, previous)
    data = json.loads(json.dumps(old_rt.data))  # a deep copy of the parsed TOML
    data["release"] = release
    data["predecessor"] = previous
    carried: list[str] = []
    copies: dict[str, bytes] = {}
    new_lanes: dict[str, Any] = {}
    for lane_id, li in old_rt.lanes.items():
        row = predecessor_row(old_manifest, lane_id)
        entry: dict[str, Any] = {"from": "predecessor" if row is not None else "pins", "status": li.status, "published": li.published}
        if li.deferral is not None:
            entry["deferral"] = dict(li.deferral)
        new_lanes[lane_id] = entry
        if row is None:
            continue
        carried.append(lane_id)
        for name in (receipt_name(lane_id), sums_name(lane_id), provenance_name(lane_id), image_provenance_name(lane_id), component_publication_name(lane_id)):
            source = old_tree / name
            if source.is_file():
                copies[repo_path(release, name)] = source.read_bytes()
        if lanes[lane_id].kind == "container" and (old_tree / PUBLICATION_RECEIPT).is_file():
            copies[repo_path(release, PUBLICATION_RECEIPT)] = (old_tree / PUBLICATION_RECEIPT).read_bytes()
    data["lanes"] = new_lanes
    publication = dict(data.get("publication") or {})
    publication["targets"] = [t.replace(previous, release) for t in publication.get("targets", [])]
    publication["blockers"] = []
    data["publication"] = publication
    header = (
        f"# Release input of {release}, staged from {previous} by 'python -m pipeline compose stage'.\n"
        "# Every lane is rebound unchanged; switch a lane that changes to from = \"register\" (bytes built by this\n"
        "# pipeline) or \"pins\", and update client, model, title, summary and limitations.  docs/release-tree.md\n"
    )
    text = dump_toml(data, header=header)
    new_tree.mkdir(parents=True)
    try:
        atomic_write_bytes(new_tree / RELEASE_TOML, text.encode("utf-8"))
        for rel, blob in sorted(copies.items()):
            atomic_write_bytes(root / rel, blob)
        outcome = rebind(root, release, lanes=lanes, status="draft")
    except BaseException:
        import shutil

        shutil.rmtree(new_tree, ignore_errors=True)
        raise
    outcome.written = sorted({repo_path(release, RELEASE_TOML), *copies, *outcome.written})
    ui.step("compose", f"staged {release} from {previous} as a draft; rebound unchanged: {', '.join(carried) or 'nothing'}")
    return outcome


def remaining_steps(release: str) -> list[str]:
    return [
        f"Edit manifests/{release}/release.toml: lanes that change get from = \"register\" (built here) or \"pins\"; update client, model, title, summary, limitations.",
        f"python -m pipeline compose --release {release} --dist dist    (imports lane evidence, rebinds the chain)",
        f"python -m pipeline verify --release {release}    (only blockers may remain); commit",
        f"python -m pipeline compose promote --release {release} --to candidate; commit (the candidate commit)",
        f"Run the documented routes on the candidate; python -m pipeline compose accept --release {release} --record FILE; commit",
        f"The councils review the candidate and record it in manifests/{release}/reviews.toml (docs/review-ledger.md); python -m pipeline compose rebind --release {release}; commit",
        f"python -m pipeline compose rebind --release {release} --pin HEAD; commit; repeat until no 'pins' blocker remains",
        f"python -m pipeline compose promote --release {release} --to ready; commit; python -m pipeline verify --release {release} --require-ready --check-pins",
        "The release lead publishes; nothing here authorizes publication.",
    ]


# -- accept and promote ---------------------------------------------------------------------------

def accept_release(root: Path, release: str, record: Path, *, lanes_dir: Path | None = None) -> Outcome:
    _check_release_name(release)
    lanes = load_lanes(lanes_dir)
    manifest = _read_manifest(root, release)
    if manifest is None:
        raise InputError("the release has no manifest yet", file=repo_path(release, MANIFEST), fix=f"run 'python -m pipeline compose --release {release}'")
    if manifest.get("status") != "candidate":
        raise RefusedError("acceptance is bound to a candidate only", file=repo_path(release, MANIFEST), field="status", found=manifest.get("status"), expected="candidate", fix=f"python -m pipeline compose promote --release {release} --to candidate, commit, run acceptance on that commit")
    data = Path(record).read_bytes() if Path(record).is_file() else None
    if data is None:
        raise InputError("acceptance record does not exist", file=record)
    check_text_hygiene(record, data)
    doc = loads_object(data, source=record)
    declared = load_release_toml(root, release, lanes).acceptance
    required = sorted(declared["routes"]) if declared else None
    problems = [Problem("acceptance", what, file=str(record), field=name, found=found, expected=expected) for name, found, expected, what in acceptance_problems(doc, manifest, release, required)]
    _refuse(problems, kind=IntegrityError, lead="acceptance refused")
    if doc["status"] != "passed":
        raise RefusedError("the acceptance did not pass", file=record, field="status", found=doc["status"], expected="passed", fix="fix the failure, make a new candidate if bytes change, and run acceptance again")
    candidate = doc["candidate_commit"]
    try:
        present = git_has_commit(root, candidate)
    except GitUnavailable:
        raise EnvironmentProblem("git is not installed", why="acceptance is checked against the candidate commit", fix="install git") from None
    if not present:
        raise RefusedError("the accepted candidate commit is not in this repository's history", file=record, field="candidate_commit", found=candidate, fix="fetch it (git fetch) or accept on a commit of this repository")
    held = git_show(root, candidate, repo_path(release, MANIFEST))
    old = loads_document(held, source=f"{candidate}:{repo_path(release, MANIFEST)}") if held else None
    if not isinstance(old, dict) or old.get("status") != "candidate":
        raise RefusedError("the accepted commit does not hold this release as a candidate", file=record, field="candidate_commit", found=candidate, expected=f"a commit whose {repo_path(release, MANIFEST)} has status candidate")
    if acceptance_subject(old) != acceptance_subject(manifest):
        name, found, expected = _first_difference(acceptance_subject(manifest), acceptance_subject(old))
        raise RefusedError("the accepted candidate bound other identities than the current manifest", file=record, field=name, found=found, expected=expected)
    with _rollback(root, [repo_path(release, ACCEPTANCE)]):
        atomic_write_bytes(root / repo_path(release, ACCEPTANCE), data)
        outcome = rebind(root, release, lanes=lanes)
    outcome.written = sorted({repo_path(release, ACCEPTANCE), *outcome.written})
    return outcome


def promote_release(root: Path, release: str, to: str, *, lanes_dir: Path | None = None) -> Outcome:
    _check_release_name(release)
    lanes = load_lanes(lanes_dir)
    manifest = _read_manifest(root, release)
    if manifest is None:
        raise InputError("the release has no manifest yet", file=repo_path(release, MANIFEST), fix=f"run 'python -m pipeline compose --release {release}'")
    current = manifest.get("status")
    order = {"draft": 0, "candidate": 1, "ready": 2}
    if current not in order:
        raise InputError("has an unknown status", file=repo_path(release, MANIFEST), field="status", found=current)
    if order[to] != order[current] + 1:
        raise RefusedError(
            f"cannot promote from {current} to {to}",
            file=repo_path(release, MANIFEST),
            field="status",
            found=current,
            expected=f"{[s for s, i in order.items() if i == order[to] - 1][0] if order[to] > 0 else 'nothing'} (states move draft -> candidate -> ready, one step at a time)",
            why="acceptance runs on a candidate commit, so ready always follows candidate; a status is never moved back, a new release is staged instead",
        )
    report = verify_release(root, release, lanes_dir=lanes_dir)
    if not report.valid:
        _refuse(report.problems.items, kind=RefusedError, lead=f"{release} does not verify as {current}")
    outcome = rebind(root, release, lanes=lanes, status=to)
    return outcome


# -- the stages: every action runs through stage.execute() ------------------------------------------
#
# Each action is its own stage key, so that the register says which action last bound the tree and
# each has its own fingerprint: compose:<release> (import + rebind), compose-stage:<release>,
# compose-rebind:<release>, compose-accept:<release>, compose-promote:<release>.  All of them exclude
# each other on one lock per tree (a tree has one writer at a time), and each records the closed tree
# it leaves as `release-tree` entries (root "repository", with the file's role), so the register always
# describes the tree as the last action left it, one entry per file.
#
# Only the plain compose can be "up to date": its inputs are every byte it reads that it does not write
# (release.toml and the other hand-placed files of the tree, the register's evidence of its lanes, the
# predecessor's manifest, pinned checksum files, lane files and cut ledgers), and what it writes is
# checked intact by the register.  stage, rebind, accept and promote are transitions decided on the tree's
# current state and its git history (a second `promote --to candidate` is refused, `rebind --pin HEAD`
# asks git which commit serves the bytes): they always run.

# The register entries compose reads for a lane from = "register": their bytes are compose's inputs.
EVIDENCE_KINDS = frozenset({
    "outer-checksums", "package-archive", "source-archive", "spdx-sbom", "cdx-sbom", "inner-checksums",
    "package-build-receipt", "support-script", "lane-receipt", "build-identity", "publication-receipt", "release-publication",
    "provenance",
})
DERIVED_FILES = (SUMMARY, AUTHORITY, AUTHORITY_MD, NOTES, MANIFEST)  # what rebind writes


class TreeAction(Stage):
    """One action of compose on one release tree (base of the compose stages)."""

    name = "compose"
    action = "compose"

    def __init__(self, ctx: Context, release: str, *, lanes_dir: Path | None = None) -> None:
        super().__init__(ctx)
        _check_release_name(release)
        self.root = ctx.repo_root
        self.release = release
        self.lanes_dir = lanes_dir
        self.outcome: Outcome | None = None

    @property
    def key(self) -> str:
        return f"compose:{self.release}" if self.action == "compose" else f"compose-{self.action}:{self.release}"

    @property
    def lock_key(self) -> str:
        return f"release-tree:{self.release}"

    def describe(self) -> str:
        return f"{self.action} {self.release}"

    def leftovers(self) -> list[tuple[Path, tuple[str, ...]]]:
        # atomic_write_bytes' temporary names; only compose actions write the tree, and they hold one lock.
        # Never through a link: a tree (or a folder of it) that leads elsewhere is not ours to clean.
        tree = release_dir(self.root, self.release)
        folders = (tree, tree / "qualification", tree / "acceptance")
        return [(folder, (".*.tmp",)) for folder in folders if not folder.is_symlink() and within(folder, self.root) and not tree.is_symlink()]

    def inputs(self) -> dict[str, Any]:
        return {"root": str(self.root.resolve()), "release": self.release, "action": self.action, "tree": tree_digests(self.root, self.release)}

    def act(self) -> Outcome:
        raise NotImplementedError

    def run(self) -> list[Artifact]:
        self.outcome = self.act()
        return self.tree_entries(self.outcome)

    def tree_entries(self, outcome: Outcome) -> list[Artifact]:
        """Every file of the closed tree the action left, as a `release-tree` entry."""
        register = self.ctx.register
        entries = []
        prefix = f"manifests/{self.release}/"
        for rel, role in sorted(outcome.files.items()):
            path = self.root / rel
            if path.is_file() and not path.is_symlink():
                # tree_path: the file's path inside manifests/<release>/, what sign names its targets by
                entries.append(register.make("release-tree", path, stage=self.name, lane=None, name=rel, root=REPOSITORY,
                                             release=self.release, role=role, signed=rel in outcome.signed, action=self.action,
                                             tree_path=rel.removeprefix(prefix)))
        return entries


class ComposeStage(TreeAction):
    """`compose`: import the register lanes' evidence and rebind the hash chain (key compose:<release>)."""

    def __init__(self, ctx: Context, release: str, *, evidence: bool = True, lanes_dir: Path | None = None) -> None:
        super().__init__(ctx, release, lanes_dir=lanes_dir)
        self.evidence = evidence  # lanes from = "register" import from ctx's register (without it they are refused)

    def inputs(self) -> dict[str, Any]:
        lanes = load_lanes(self.lanes_dir)
        rt = load_release_toml(self.root, self.release, lanes)
        register_lanes = sorted(li.id for li in rt.lanes.values() if li.mode == "register" and li.status in SHIPPED)
        made = {repo_path(self.release, name) for name in DERIVED_FILES}
        for lane_id in register_lanes:
            made |= {repo_path(self.release, name(lane_id)) for name in (receipt_name, sums_name, provenance_name, component_publication_name)}
            if lanes[lane_id].kind == "container":
                made |= {repo_path(self.release, PUBLICATION_RECEIPT), repo_path(self.release, image_provenance_name(lane_id))}
        register = self.ctx.register
        evidence = {a.name: a.sha256 for a in register.artifacts.values() if a.lane in register_lanes and a.kind in EVIDENCE_KINDS} if self.evidence else None
        pinned = {li.id: file_sha256(self.root, li.pins["checksums_file"]) for li in rt.lanes.values() if li.mode == "pins" and li.pins.get("checksums_file")}
        ledgers = {lane_id: [lanes[lane_id].file_sha256, file_sha256(lanes[lane_id].ledger_file().parent, lanes[lane_id].ledger_file().name)] for lane_id in sorted(rt.lanes)}
        return {
            "root": str(self.root.resolve()),
            "release": self.release,
            "register": str(register.dist.resolve()) if self.evidence else None,
            # what compose writes is checked intact by the register; the rest of the tree is input
            "tree": {rel: digest for rel, digest in tree_digests(self.root, self.release).items() if rel not in made},
            "evidence": evidence,
            "pinned_checksums": pinned,
            "predecessor": file_sha256(self.root, repo_path(rt.predecessor, MANIFEST)) if rt.predecessor else None,
            "lanes": ledgers,
        }

    def act(self) -> Outcome:
        register = self.ctx.register
        return compose_release(self.root, self.release, dist=register.dist if self.evidence else None, lanes_dir=self.lanes_dir, register=register)


class StageReleaseStage(TreeAction):
    """`compose stage --from`: a new draft from its predecessor (key compose-stage:<release>)."""

    action = "stage"
    always_runs = True  # refused when the tree exists: decided on the repository as it is now

    def __init__(self, ctx: Context, previous: str, release: str, *, lanes_dir: Path | None = None) -> None:
        _check_release_name(previous, "--from")
        super().__init__(ctx, release, lanes_dir=lanes_dir)
        self.previous = previous

    def inputs(self) -> dict[str, Any]:
        return {**super().inputs(), "from": self.previous, "predecessor_tree": tree_digests(self.root, self.previous)}

    def act(self) -> Outcome:
        return stage_release(self.root, self.previous, self.release, lanes_dir=self.lanes_dir)


class RebindStage(TreeAction):
    """`compose rebind [--pin COMMIT]`: recompute the hash chain, pin what a commit holds (key compose-rebind:<release>)."""

    action = "rebind"
    always_runs = True  # pins are decided by what git history holds now

    def __init__(self, ctx: Context, release: str, *, pin: str | None = None, lanes_dir: Path | None = None) -> None:
        super().__init__(ctx, release, lanes_dir=lanes_dir)
        self.pin = pin

    def inputs(self) -> dict[str, Any]:
        return {**super().inputs(), "pin": self.pin}

    def act(self) -> Outcome:
        return rebind(self.root, self.release, pin=self.pin, lanes=load_lanes(self.lanes_dir))


class AcceptStage(TreeAction):
    """`compose accept --record`: bind a passed acceptance made on the candidate commit (key compose-accept:<release>)."""

    action = "accept"
    always_runs = True  # checked against the candidate commit in git history

    def __init__(self, ctx: Context, release: str, record: Path, *, lanes_dir: Path | None = None) -> None:
        super().__init__(ctx, release, lanes_dir=lanes_dir)
        self.record = Path(record)

    def inputs(self) -> dict[str, Any]:
        return {**super().inputs(), "record": sha256_bytes(self.record.read_bytes()) if self.record.is_file() else None}

    def act(self) -> Outcome:
        return accept_release(self.root, self.release, self.record, lanes_dir=self.lanes_dir)


class PromoteStage(TreeAction):
    """`compose promote --to`: move the status one step after checking its rules (key compose-promote:<release>)."""

    action = "promote"
    always_runs = True  # a second promotion to the same status is refused, never "up to date"

    def __init__(self, ctx: Context, release: str, to: str, *, lanes_dir: Path | None = None) -> None:
        super().__init__(ctx, release, lanes_dir=lanes_dir)
        self.to = to

    def inputs(self) -> dict[str, Any]:
        return {**super().inputs(), "to": self.to}

    def act(self) -> Outcome:
        return promote_release(self.root, self.release, self.to, lanes_dir=self.lanes_dir)


STAGE = ComposeStage


def release_plan(ctx: Context, lanes: list, options: argparse.Namespace) -> list:
    """`release`: compose the tree of `--release` from this checkout's manifests/ and the run's register."""
    release = getattr(options, "release", None)
    if not release:
        raise Skip("no --release given")
    return [(release, lambda: execute(ComposeStage(ctx, release, evidence=True, lanes_dir=options.lanes_dir)))]


def tree_outcome(root: Path, release: str) -> Outcome:
    """What an action that changed nothing reports: the tree's status and blockers, nothing written."""
    manifest = _read_manifest(root, release) or {}
    return Outcome(release, str(manifest.get("status")), blockers(manifest))


# -- CLI --------------------------------------------------------------------------------------------

def _print_outcome(outcome: Outcome, *, steps: bool = False) -> None:
    for rel in outcome.written:
        ui.info(f"wrote {rel}")
    for rel in outcome.pinned:
        ui.info(f"pinned {rel}")
    for rel in outcome.dropped:
        ui.info(f"unpinned {rel}: the pinned commit serves other bytes now (pin the new bytes after committing them)")
    for warning in outcome.warnings:
        ui.warn(warning.message())
    ui.step("compose", f"{outcome.release} is {outcome.status} with {len(outcome.blockers)} blocker(s)")
    for blocker in outcome.blockers:
        ui.info(f"blocker: {blocker}")
    if steps:
        sys.stderr.write("remaining steps:\n")
        for number, line in enumerate(remaining_steps(outcome.release), start=1):
            sys.stderr.write(f"  {number}. {line}\n")
    sys.stdout.write(json.dumps({"release": outcome.release, "status": outcome.status, "blockers": outcome.blockers, "written": outcome.written, "pinned": outcome.pinned}, indent=2, sort_keys=True) + "\n")


def run_cli(args: argparse.Namespace) -> int:
    action = getattr(args, "action", None)
    root = Path(args.root)
    release = getattr(args, "release", None)
    if release is None:
        raise UsageError("--release is required", field="--release", expected="e.g. --release v0.13.1")
    if action == "stage":
        _check_release_name(args.previous, "--from")
    _check_release_name(release)  # a bad name is a usage error before anything is written
    if not root.is_dir():
        raise InputError("the repository root is not a folder", file=root, expected="a clone holding manifests/", fix="pass --root PATH")
    dist = getattr(args, "dist", None)
    # The run is recorded in --dist, else in the repository's own dist/; lanes from = "register"
    # import evidence only from a register named with --dist (as before: never from a guessed folder).
    ctx = Context.open(dist or root / "dist", args.lanes_dir, root=root)
    if action is None:
        stage: TreeAction = ComposeStage(ctx, release, evidence=dist is not None, lanes_dir=args.lanes_dir)
    elif action == "stage":
        stage = StageReleaseStage(ctx, args.previous, release, lanes_dir=args.lanes_dir)
    elif action == "rebind":
        stage = RebindStage(ctx, release, pin=args.pin, lanes_dir=args.lanes_dir)
    elif action == "accept":
        stage = AcceptStage(ctx, release, args.record, lanes_dir=args.lanes_dir)
    elif action == "promote":
        stage = PromoteStage(ctx, release, args.to, lanes_dir=args.lanes_dir)
    else:  # pragma: no cover - argparse restricts the choices
        raise UsageError(f"unknown compose action {action!r}")
    result: StageResult = execute(stage)
    outcome = stage.outcome if stage.outcome is not None and not result.skipped else tree_outcome(root, release)
    _print_outcome(outcome, steps=action == "stage")
    return 0


def register_cli(sub) -> None:
    parser = sub.add_parser(
        "compose",
        help="write the release tree manifests/<release>/ (stage, rebind, accept, promote)",
        description="Compose the product release tree from release.toml and the lane evidence (docs/release-tree.md).",
    )
    parser.add_argument("--release", help="product release, e.g. v0.13.1")
    parser.add_argument("--dist", type=Path, default=None, help="output folder holding the artefact register: lanes from = 'register' import from it, and the run is recorded in it (default: ROOT/dist, no import)")
    parser.add_argument("--root", type=Path, default=REPO_ROOT, help="repository root holding manifests/ (default: this checkout)")
    parser.add_argument("--lanes-dir", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--quiet", action="store_true", help="print only errors and results")
    actions = parser.add_subparsers(dest="action", metavar="{stage,rebind,accept,promote}")

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--release", default=argparse.SUPPRESS, help="product release, e.g. v0.13.1")
        p.add_argument("--root", type=Path, default=argparse.SUPPRESS, help="repository root (default: this checkout)")
        p.add_argument("--dist", type=Path, default=argparse.SUPPRESS, help="output folder whose register records the run (default: ROOT/dist)")
        p.add_argument("--lanes-dir", type=Path, default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        p.add_argument("--quiet", action="store_true", default=argparse.SUPPRESS, help="print only errors and results")

    stage = actions.add_parser("stage", help="start a new draft from its predecessor (lanes rebound unchanged)")
    stage.add_argument("--from", dest="previous", required=True, help="the predecessor release, e.g. v0.13.0")
    common(stage)
    rebind_p = actions.add_parser("rebind", help="recompute the hash chain; --pin COMMIT pins raw URLs of records that commit holds")
    rebind_p.add_argument("--pin", help="a commit (e.g. HEAD) holding the committed tree")
    common(rebind_p)
    accept = actions.add_parser("accept", help="bind a passed external-installation acceptance made on the candidate commit")
    accept.add_argument("--record", type=Path, required=True, help="the acceptance record (JSON, docs/release-tree.md)")
    common(accept)
    promote = actions.add_parser("promote", help="move the status forward after checking the target state's rules")
    promote.add_argument("--to", required=True, choices=("candidate", "ready"))
    common(promote)
    parser.set_defaults(func=run_cli)
