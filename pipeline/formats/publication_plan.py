"""The publication plan, its journal and the publication receipt (the `publish` stage's documents).

Plan (`omp_ninfer_publication_plan`, schema 3): every remote write of one
publication, in order, made from local bytes, and the GitHub state the dry run
observed for the tag, so the same inputs and the same GitHub state give the
same bytes and the same SHA-256:

    {"kind": "component" | "product", "subject": <lane id | release>, "repository": "owner/name",
     "tag": ..., "commit": <40 hex>,
     "release": {"name", "body", "prerelease", "make_latest": "true" | "false"},
     "assets": [{"name", "size", "sha256", "content_type", "source": {"root", "path"}}],
     "observed": {"read": true, "tag": <commit> | null, "immutable_releases": bool | null,
                  "releases": [{"id", "name", "body_sha256", "draft", "prerelease", "immutable",
                                "assets": [{"name", "size", "digest", "state"}]}],
                  "ci": {"repository", "sha", "required": [names],
                         "check_runs": [{"id", "name", "head_sha", "status", "conclusion", "html_url", "app"}],
                         "statuses": [{"context", "state", "target_url"}]} | null}
                 | {"read": false, "why": "..."},
     "operations": [{"op": "create-draft", ...}, {"op": "upload-asset", "name", "size", "sha256", "content_type"}...,
                    {"op": "create-tag", ...}, {"op": "publish", ...}],
     "after": ["re-read-by-tag", "immutable-if-enabled", "audit-published-assets"],
     "gates": [gate names, in the order they are checked],
     "test_selection": {"kind": "full"} | {"kind": "subset", "name", "sha256"}}   (product only)

`test_selection` (a product plan's; absent from a component's) is the selection of the test-run receipt that gate
`test-run` checks (pipeline/formats/test_receipt.py): the whole suite, or, only in the release workflow's rehearsal,
a declared subset by name and SHA-256; null when the receipt could not be read (the gate then refuses).  The plan
binds it, so the plan's hash changes with it, and the receipt copies it, so a published release says which tests
its publication accepted.

`ci` is what GitHub reported for the required checks at the planned commit (formats/ci_checks.py:
every run of each required name, re-runs included, and the latest status of each required context), so a
check that is re-run or finishes between the dry run and the apply is a change `github-unchanged` refuses;
null where no required checks are known (the `ci` gate then refuses).  `immutable_releases` is null when the token may not read the setting (GitHub
answers 403 to a token without admin read access, which an Actions
`github.token` never has): unknown, not false.  `body_sha256` is the SHA-256 of
a release's body text (UTF-8), so a release whose notes differ is told apart
without copying anyone's text into the plan.

The tag is the only write that can never be undone, so it comes last but one:
after the draft holds every planned asset with its planned digest, immediately
before publishing.  `--apply` re-reads the observed facts first and refuses on
any difference that is not this plan's own journalled progress.

`--apply --plan-sha256 HEX` executes exactly the plan whose canonical bytes hash
to HEX.  `source.root` is `dist` (the register's folder) or `repository` (the
product checkout), `source.path` a POSIX path inside it: nothing absolute, so
the plan does not depend on where the checkout lies.

Journal (`<dist>/publish/<slug>/journal/<plan sha256>.jsonl`): one canonical
JSON object per line, appended and fsynced, never rewritten: `seq`, `event`
(`run-start`, `op-start`, `op-done`, `op-skip`, `op-ambiguous`, `op-retry`,
`check`, `run-done`, `run-failed`), `op` (the operation's index, or null),
`detail` and GitHub's `request_id`.  It is a record for people, not the
source of truth: a re-run reconciles from GitHub's state.  A torn last line
(a kill -9 in the middle of a write) is ignored by the reader and cut off
before the next append; any other bad line is an error.

Receipt (`omp_ninfer_release_publication_receipt`, schema 1): plan hash,
repository, release id, tag -> commit, and each published asset's id, name,
size, SHA-256 and GitHub digest; `immutable` (the published release's own
field), `immutable_releases_enabled` (true, false, or null when the token may
not read the setting) and, where the repository enables immutable releases
but this release is not immutable (it was published before the setting was
switched on) or the setting is unknown, `immutable_reason`; `ci`, the plan's observed CI block (the
checks that gated it), where the plan recorded one; for a product publication, the plan's `test_selection`;
no token, no time.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pipeline.errors import InputError
from pipeline.formats.release.names import BUNDLE_SUFFIX
from pipeline.formats.test_receipt import check_selection
from pipeline.util.hashing import is_commit_hex, is_sha256_hex, sha256_bytes
from pipeline.util.jsonio import canonical_bytes, compact_identity_bytes, parse_strict
from pipeline.util.safepath import component_problem

PLAN_TYPE = "omp_ninfer_publication_plan"
RECEIPT_TYPE = "omp_ninfer_release_publication_receipt"
SCHEMA_VERSION = 1  # the receipt's
PLAN_SCHEMA_VERSION = 3  # 2: the plan binds the GitHub state it was made against (`observed`); 3: and the CI at its commit (`observed.ci`) and, for a product, its test selection (`test_selection`)
KINDS = ("component", "product")
MAX_ASSET_BYTES = 2 * 1024**3 - 1  # GitHub: each asset < 2 GiB
MAX_ASSETS = 1000  # GitHub: at most 1,000 assets per release
AFTER = ["re-read-by-tag", "immutable-if-enabled", "audit-published-assets"]
EVENTS = ("run-start", "op-start", "op-done", "op-skip", "op-ambiguous", "op-retry", "check", "run-done", "run-failed")

CONTENT_TYPES = (
    (".tar.gz", "application/gzip"),
    (".tgz", "application/gzip"),
    (".whl", "application/zip"),
    (".zip", "application/zip"),
    (".json", "application/json"),
    (".ps1", "text/plain"),
    (".txt", "text/plain"),
    (".md", "text/markdown"),
    ("SHA256SUMS", "text/plain"),
)


def content_type(name: str) -> str:
    for suffix, kind in CONTENT_TYPES:
        if name.endswith(suffix):
            return kind
    return "application/octet-stream"


def make_plan(
    *,
    kind: str,
    subject: str,
    repository: str,
    tag: str,
    commit: str,
    name: str,
    body: str,
    prerelease: bool,
    make_latest: bool,
    assets: list[dict[str, Any]],
    gates: list[str],
    observed: dict[str, Any],
    test_selection: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The plan document; `assets` are {name, size, sha256, source: {root, path}} (sorted here by name)."""
    assert kind in KINDS and is_commit_hex(commit)
    rows = []
    for asset in sorted(assets, key=lambda a: a["name"]):
        rows.append({
            "name": asset["name"],
            "size": asset["size"],
            "sha256": asset["sha256"],
            "content_type": content_type(asset["name"]),
            "source": {"root": asset["source"]["root"], "path": asset["source"]["path"]},
        })
    latest = "true" if make_latest else "false"
    operations: list[dict[str, Any]] = [{"op": "create-draft", "tag": tag, "name": name, "prerelease": prerelease}]
    operations += [{"op": "upload-asset", "name": a["name"], "size": a["size"], "sha256": a["sha256"], "content_type": a["content_type"]} for a in rows]
    operations.append({"op": "create-tag", "tag": tag, "commit": commit})  # the one write never undone: last before publishing
    operations.append({"op": "publish", "tag": tag, "prerelease": prerelease, "make_latest": latest})
    plan = {
        "artifact_type": PLAN_TYPE,
        "schema_version": PLAN_SCHEMA_VERSION,
        "kind": kind,
        "subject": subject,
        "repository": repository,
        "tag": tag,
        "commit": commit,
        "release": {"name": name, "body": body, "prerelease": prerelease, "make_latest": latest},
        "assets": rows,
        "observed": observed,
        "operations": operations,
        "after": list(AFTER),
        "gates": list(gates),
    }
    if kind == "product":
        plan["test_selection"] = test_selection
    check_plan(plan, file="plan")
    return plan


def plan_bytes(plan: dict[str, Any]) -> bytes:
    return canonical_bytes(plan)


def plan_sha256(plan: dict[str, Any]) -> str:
    return sha256_bytes(plan_bytes(plan))


def check_plan(plan: Any, *, file: str | os.PathLike[str]) -> dict[str, Any]:
    name = str(file)
    if not isinstance(plan, dict) or plan.get("artifact_type") != PLAN_TYPE or plan.get("schema_version") != PLAN_SCHEMA_VERSION:
        raise InputError(f"is not a publication plan of schema {PLAN_SCHEMA_VERSION}", file=name, field="artifact_type", expected=PLAN_TYPE,
                         fix="run the publish command without --apply again: a plan of an earlier schema does not bind GitHub's state or the test selection")
    if plan.get("kind") not in KINDS:
        raise InputError("has an unknown kind", file=name, field="kind", found=plan.get("kind"), expected=" | ".join(KINDS))
    if not is_commit_hex(plan.get("commit")):
        raise InputError("does not name a full commit", file=name, field="commit", found=plan.get("commit"))
    assets = plan.get("assets")
    if not isinstance(assets, list) or not assets:
        raise InputError("plans no asset", file=name, field="assets")
    if len(assets) > MAX_ASSETS:
        raise InputError(f"plans more assets than GitHub allows per release ({MAX_ASSETS})", file=name, field="assets", found=len(assets))
    names = [a.get("name") for a in assets]
    if names != sorted(set(names)):
        raise InputError("asset names must be unique and sorted", file=name, field="assets")
    for index, asset in enumerate(assets):
        where = f"assets[{index}]"
        if not isinstance(asset.get("name"), str) or not asset["name"] or "/" in asset["name"] or asset["name"] in (".", ".."):
            raise InputError("is not a plain file name", file=name, field=f"{where}.name", found=asset.get("name"))
        size = asset.get("size")
        if not isinstance(size, int) or isinstance(size, bool) or not 0 < size <= MAX_ASSET_BYTES:
            raise InputError("is not a size GitHub accepts for an asset", file=name, field=f"{where}.size", found=size, expected=f"1..{MAX_ASSET_BYTES} bytes (each asset < 2 GiB)")
        if not is_sha256_hex(asset.get("sha256")):
            raise InputError("is not a SHA-256", file=name, field=f"{where}.sha256", found=asset.get("sha256"))
        source = asset.get("source") or {}
        path = source.get("path")
        if source.get("root") not in ("dist", "repository") or not isinstance(path, str) or path.startswith("/") or ".." in Path(path).parts:
            raise InputError("names a source outside its root", file=name, field=f"{where}.source", found=source)
    check_observed(plan.get("observed"), file=name)
    _check_test_selection(plan, file=name)
    return plan


def _check_test_selection(document: dict[str, Any], *, file: str | os.PathLike[str]) -> None:
    """`test_selection`, where present: null (plan only) or a test-run receipt's selection (test_receipt.py's rule)."""
    if "test_selection" in document and document["test_selection"] is not None:
        check_selection(document["test_selection"], file=file)


def check_observed(observed: Any, *, file: str) -> None:
    """The `observed` block: what GitHub held for the tag at the dry run (shape only)."""
    if not isinstance(observed, dict) or not isinstance(observed.get("read"), bool):
        raise InputError("does not say what GitHub held when it was made", file=file, field="observed", found=type(observed).__name__)
    if not observed["read"]:
        if set(observed) != {"read", "why"} or not isinstance(observed.get("why"), str):
            raise InputError("an unread GitHub state carries only its reason", file=file, field="observed", found=sorted(observed))
        return
    if set(observed) != {"read", "tag", "immutable_releases", "releases", "ci"} or not (observed["tag"] is None or is_commit_hex(observed["tag"])):
        raise InputError("is not an observed GitHub state", file=file, field="observed", found=sorted(observed))
    if not (observed["immutable_releases"] is None or isinstance(observed["immutable_releases"], bool)) or not isinstance(observed["releases"], list):
        raise InputError("is not an observed GitHub state", file=file, field="observed.releases")
    for index, release in enumerate(observed["releases"]):
        if not isinstance(release, dict) or not isinstance(release.get("id"), int) or not isinstance(release.get("assets"), list):
            raise InputError("is not an observed release", file=file, field=f"observed.releases[{index}]")
    if observed["ci"] is not None:
        from pipeline.formats.ci_checks import check_recorded

        check_recorded(observed["ci"], file=file, field="observed.ci")


def read_plan(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise InputError("there is no plan yet", file=path, fix="run the same publish command without --apply first and review the plan")
    return check_plan(parse_strict(path.read_bytes(), file=path, max_bytes=8 * 1024 * 1024), file=path)


# -- the journal ----------------------------------------------------------------------

class Journal:
    """Append-only, fsynced JSON lines keyed by the plan hash."""

    def __init__(self, directory: Path, plan_sha: str) -> None:
        self.path = directory / f"{plan_sha}.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.seq = len(read_journal(self.path))
        if self.path.exists():
            data = self.path.read_bytes()
            if data and not data.endswith(b"\n"):  # a torn last line: drop the fragment before appending
                with open(self.path, "r+b") as handle:
                    handle.truncate(data.rfind(b"\n") + 1)

    def event(self, event: str, *, op: int | None = None, request_id: str | None = None, **detail: Any) -> None:
        assert event in EVENTS, event
        self.seq += 1
        line = compact_identity_bytes({"seq": self.seq, "event": event, "op": op, "request_id": request_id, "detail": detail}) + b"\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)


def read_journal(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    data = path.read_bytes()
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    elif lines:
        lines.pop()  # a torn last line: the process died while appending it
    entries = []
    for number, raw in enumerate(lines, 1):
        try:
            entry = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise InputError(f"line {number} is not a journal entry", file=path, why="only the last line may be torn by a crash") from None
        if not isinstance(entry, dict) or entry.get("event") not in EVENTS:
            raise InputError(f"line {number} is not a journal entry", file=path, found=raw[:80].decode("utf-8", "replace"))
        entries.append(entry)
    return entries


# -- the receipt -----------------------------------------------------------------------

def make_receipt(plan: dict[str, Any], plan_sha: str, release: dict[str, Any], assets: list[dict[str, Any]], *, immutable_enabled: bool | None, immutable_reason: str | None = None) -> dict[str, Any]:
    by_name = {a["name"]: a for a in assets}
    rows = []
    for planned in plan["assets"]:
        remote = by_name[planned["name"]]
        rows.append({
            "id": remote["id"],
            "name": planned["name"],
            "size": planned["size"],
            "sha256": planned["sha256"],
            "digest": remote.get("digest"),
            "content_type": planned["content_type"],
            "url": remote.get("browser_download_url"),
        })
    receipt = {
        "artifact_type": RECEIPT_TYPE,
        "schema_version": SCHEMA_VERSION,
        "kind": plan["kind"],
        "subject": plan["subject"],
        "plan_sha256": plan_sha,
        "repository": plan["repository"],
        "release_id": release["id"],
        "release_url": release.get("html_url"),
        "tag": plan["tag"],
        "commit": plan["commit"],
        "prerelease": bool(release.get("prerelease")),
        "make_latest": plan["release"]["make_latest"],
        "immutable": bool(release.get("immutable")),
        "immutable_releases_enabled": immutable_enabled,
        "assets": rows,
        "secret_free": True,
    }
    if immutable_reason is not None:
        receipt["immutable_reason"] = immutable_reason
    if plan["observed"].get("ci") is not None:
        receipt["ci"] = plan["observed"]["ci"]  # the checks that gated the publication, as the reviewed plan saw them
    if "test_selection" in plan:
        receipt["test_selection"] = plan["test_selection"]
    return receipt




def evidence_names(statement: str) -> tuple[str, str, str]:
    """What a component publication ships beside its closed set: the set's provenance statement, its DSSE bundle,
    and the Sigstore bundle of the set's outer SHA256SUMS (all made by `sign`)."""
    from pipeline.formats.assets import OUTER_SUMS

    return statement, statement + BUNDLE_SUFFIX, OUTER_SUMS + BUNDLE_SUFFIX


def set_part(assets: dict[str, Any], statement: str) -> dict[str, Any]:
    """The closed set's part of a component publication's assets: all but the evidence beside it (`evidence_names`)."""
    beside = evidence_names(statement)
    return {name: value for name, value in assets.items() if name not in beside}


def read_receipt(path: Path) -> dict[str, Any]:
    doc = parse_strict(path.read_bytes(), file=path, max_bytes=8 * 1024 * 1024)
    if not isinstance(doc, dict) or doc.get("artifact_type") != RECEIPT_TYPE or doc.get("schema_version") != SCHEMA_VERSION:
        raise InputError("is not a release publication receipt of schema 1", file=path, field="artifact_type", found=doc.get("artifact_type") if isinstance(doc, dict) else None, expected=RECEIPT_TYPE)
    for key in ("plan_sha256",):
        if not is_sha256_hex(doc.get(key)):
            raise InputError("is not a SHA-256", file=path, field=key, found=doc.get(key))
    if not is_commit_hex(doc.get("commit")):
        raise InputError("does not name a full commit", file=path, field="commit", found=doc.get("commit"))
    for key in ("kind", "repository", "tag"):
        if not isinstance(doc.get(key), str) or not doc[key]:
            raise InputError("must be a non-empty string", file=path, field=key, found=doc.get(key))
    if not isinstance(doc.get("assets"), list) or not doc["assets"]:
        raise InputError("lists no asset", file=path, field="assets")
    if len(doc["assets"]) > MAX_ASSETS:
        raise InputError("lists more assets than a GitHub release holds", file=path, field="assets", found=len(doc["assets"]), expected=f"at most {MAX_ASSETS}")
    names: set[str] = set()
    for index, asset in enumerate(doc["assets"]):
        if not isinstance(asset, dict) or not is_sha256_hex(asset.get("sha256")) or asset.get("digest") != f"sha256:{asset.get('sha256')}":
            raise InputError("binds an asset without its matching GitHub digest", file=path, field=f"assets[{index}]")
        name = asset.get("name")
        problem = component_problem(name, max_len=255)
        if problem is not None:
            raise InputError(f"names no asset file ({problem})", file=path, field=f"assets[{index}].name", found=name, expected="a bare file name")
        if name in names:
            raise InputError("names an asset twice", file=path, field=f"assets[{index}].name", found=name, expected="each asset once")
        names.add(name)
    _check_test_selection(doc, file=path)
    return doc
