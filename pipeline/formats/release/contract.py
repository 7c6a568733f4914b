"""Checking a release tree against the release contract (docs/release-tree.md): what `verify` runs.

`verify_release(root, release)` runs every check and collects every error
before the verdict (a `Report`); each error names the file, the field, the
value found and the value expected.  The checks, in their groups (`GROUPS`):

- line endings: a checkout rewritten with CRLF is one actionable error naming
  git's core.autocrlf, not a page of hash mismatches;
- schema and states; every recorded path stays inside the release tree;
- every recorded SHA-256 equals the bytes it names;
- each lane's checked-in SHA256SUMS equals the manifest row line for line, and
  the set is closed;
- lane receipts bind the row's source, binary, configuration, model and
  package; the image publication receipt binds the row's archive and image;
- URLs are immutable (release downloads under the component tag, raw URLs at a
  40-hex commit, the model at `<repository>/resolve/<revision>/<artifact>`);
  image references are pinned by digest;
- every copied or derived record (manifest rows, summary, authority, both
  renderings, blockers) equals what release.toml and the evidence derive;
- no private markers or placeholders; `publication.authorized` is false;
- the state rules of the manifest's status (pipeline/formats/release/rules.py),
  and of `require="installable"` / `require="ready"`;
- `check_pins`: every pinned raw URL's bytes, re-hashed from local git history
  (`git show <commit>:<path>`), failing closed on a missing commit;
- `require="ready"`: Sigstore bundles through `pipeline.infra.sigstore.verify_bundle`.

`compose` runs the evidence checks on what it is about to bind
(`evidence_problems`) and the whole contract before it stages a release from
its predecessor or promotes a tree.  The report is also a document:
`report_document()` is what the verify stage records in the register
(`<dist>/verify/<release>.json`, kind `verification-report`).
"""

from __future__ import annotations

import contextlib
import getpass
import json
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from pipeline.errors import InputError, PipelineError, UsageError
from pipeline.formats.assets import parse_sums
from pipeline.formats.lanes import Lane, load_lanes
from pipeline.formats.receipts import (
    IMAGE_PUBLICATION_TYPE,
    LANE_RECEIPT_STATUSES,
    LANE_RECEIPT_TYPE,
    publication_facts,
    receipt_facts,
)
from pipeline.formats.release.derive import (
    Derived,
    derive,
    null_identities,
    unknown_keys_unused,
)
from pipeline.formats.release.manifest import (
    MAX_MANIFEST_BYTES,
    acceptance_subject,
    lane_rows,
    parse_manifest,
    section,
)
from pipeline.formats.release.names import (
    AUTHORITY_MD,
    BUNDLE_SUFFIX,
    MANIFEST,
    MANIFEST_TYPE,
    NINFER_REPOSITORY,
    NOTES,
    PRE_EVIDENCE_RELEASES,
    PRE_REVIEW_LEDGER_RELEASES,
    RELEASE_RE,
    ROW_RECORDS,
    STATES,
    component_publication_name,
    evidence_promise,
    image_provenance_name,
    list_releases,
    package_prefix,
    parse_raw_url,
    provenance_name,
    release_dir,
    repo_path,
    review_ledger_required,
    role_fields,
    split_image_reference,
)
from pipeline.formats.release.problems import Problem, Problems
from pipeline.formats.release.rules import (
    abbreviate,
    acceptance_problems,
    diff,
    row_field,
    row_kind,
    state_problems,
)
from pipeline.infra.git import GitObjects, GitUnavailable
from pipeline.util.fs import read_bytes_bounded
from pipeline.util.hashing import is_commit_hex, is_sha256_hex, sha256_bytes
from pipeline.util.jsonio import canonical_bytes, loads_document
from pipeline.util.safepath import relpath_problem, within

GROUPS = (
    ("line-endings", "line endings: no CRLF rewrite"),
    ("input", "release.toml and predecessor readable"),
    ("schema", "manifest schema, release and status"),
    ("paths", "every recorded path stays inside the release tree"),
    ("hashes", "every recorded SHA-256 equals its bytes"),
    ("checksums", "checksum copies equal the manifest rows; sets closed"),
    ("receipts", "receipts bind the rows' source, binary, config, model and package"),
    ("provenance", "provenance statements describe exactly the bound assets and image"),
    ("images", "image references pinned by digest and bound to the archive"),
    ("urls", "URLs immutable"),
    ("model", "model binding exact"),
    ("copies", "derived and copied records equal release.toml and the evidence"),
    ("acceptance", "acceptance record binds this release"),
    ("hygiene", "no private markers or placeholders"),
    ("publication", "publication not authorized in the repository"),
    ("states", "state rules"),
    ("tree", "the release tree is closed"),
    ("pins", "pinned raw URLs serve the recorded bytes"),
    ("signatures", "Sigstore bundles"),
)
OFFICIAL_IMAGE_REPOSITORIES = ("ghcr.io/alphastorm/ninfer-runtime", "ghcr.io/alphastorm/ninfer")
TEXT_SUFFIXES = (".json", ".md", ".toml", ".SHA256SUMS")
PLACEHOLDERS = re.compile(r"\b(TODO|TBD|FIXME|XXX)\b|<[A-Za-z][A-Za-z0-9 _./:|-]{0,60}>")
PRIVATE_MARKERS = re.compile(
    r"/home/[A-Za-z0-9._-]+|/Users/[A-Za-z0-9._-]+|[A-Za-z]:[\\/]+Users[\\/]|/root/|\bDESKTOP-[A-Z0-9]{5,}\b"
    r"|\b[A-Za-z0-9-]+\.(local|lan|internal|home\.arpa)\b"
)
COMMON_NAMES = {"root", "user", "runner", "admin", "ubuntu", "debian", "localhost", "sample", "build", "ninfer", "nvidia"}


@dataclass
class Report:
    release: str | None
    status: str | None
    problems: Problems
    groups: list[str] = field(default_factory=list)
    blockers: int = 0

    @property
    def valid(self) -> bool:
        return not self.problems.items

    def to_json(self) -> dict[str, Any]:
        return {
            "release": self.release,
            "status": self.status,
            "valid": self.valid,
            "errors": [p.to_json() for p in self.problems.items],
            "warnings": [p.to_json() for p in self.problems.warnings],
        }


class Verifier:
    def __init__(self, root: Path, release: str, *, lanes: dict[str, Lane], require: str | None, check_pins: bool) -> None:
        self.root = root
        self.release = release
        self.lanes = lanes
        self.require = require
        self.check_pins = check_pins
        self.tree = release_dir(root, release)
        self.problems = Problems()
        self.manifest_rel = repo_path(release, MANIFEST)
        self.manifest: dict[str, Any] = {}
        self.derived: Derived | None = None
        self.groups: list[str] = []
        self._seen: set[tuple[str | None, str | None]] = set()
        self.git = GitObjects(root)

    # recording, with one error per (file, field): the first check to see a defect names it
    def error(self, check: str, what: str, *, unique: bool = True, **kwargs: Any) -> None:
        key = (kwargs.get("file"), kwargs.get("field"))
        if unique and key[1] is not None and key in self._seen:
            return
        self._seen.add(key)
        self.problems.add(check, what, **kwargs)

    def from_error(self, check: str, error: PipelineError, *, file: str | None = None) -> None:
        problem = Problem.of(check, error, file=file)
        self.error(check, problem.what, **problem.details())

    def warn(self, check: str, what: str, **kwargs: Any) -> None:
        self.problems.warn(check, what, **kwargs)

    def run(self) -> Report:
        try:
            return self._run()
        finally:
            self.git.close()

    def _run(self) -> Report:
        if not self.tree.is_dir():
            self.error("input", "release tree does not exist", file=repo_path(self.release, ""), expected="a folder manifests/<release>/ made by 'python -m pipeline compose'")
            return self.report(None)
        if self.check_tree_location():
            return self.report(None)
        self.groups.append("line-endings")
        if self.check_line_endings():
            return self.report(None)
        manifest = self.load_manifest()
        if manifest is None:
            return self.report(None)
        self.manifest = manifest
        status = manifest.get("status") if manifest.get("status") in STATES else None
        derive_problems = Problems()
        self.derived = derive(self.root, self.release, derive_problems, lanes=self.lanes, current=manifest)
        self.groups.append("input")
        for problem in derive_problems.items:
            self.error(problem.check, problem.what, file=problem.file, field=problem.field, found=problem.found, expected=problem.expected, fix=problem.fix, why=problem.why)
        for check in (
            self.check_schema,
            self.check_paths,
            self.check_hashes,
            self.check_checksums,
            self.check_receipts,
            self.check_provenance,
            self.check_images,
            self.check_urls,
            self.check_model,
            self.check_copies,
            self.check_acceptance,
            self.check_hygiene,
            self.check_publication,
            self.check_states,
            self.check_tree,
        ):
            check()
        if self.check_pins:
            self.groups.append("pins")
            self.check_pinned()
        if self.require == "ready":
            self.groups.append("signatures")
            self.check_signatures()
        return self.report(status)

    def report(self, status: str | None) -> Report:
        pub = section(self.manifest, "publication")
        blockers = pub.get("blockers") if isinstance(pub.get("blockers"), list) else []
        return Report(self.release, status, self.problems, self.groups, len(blockers))

    # 0 -------------------------------------------------------------------------------------
    def check_tree_location(self) -> bool:
        """The tree is a real folder of this repository and no link in it leaves it; checked before any byte is read.

        A tree that is a link to a folder elsewhere (or holds a link to a file
        elsewhere) would make verify vouch for bytes the repository does not hold.
        """
        tree = repo_path(self.release, "").rstrip("/")
        if self.tree.is_symlink() or not within(self.tree, self.root) or self.tree.resolve().parent != (self.root / "manifests").resolve():
            self.groups.append("tree")
            self.error(
                "tree",
                "the release tree is a symbolic link" + ("" if within(self.tree, self.root) else " to a folder outside the repository"),
                file=tree,
                found=str(self.tree.resolve()),
                expected=f"a real folder {tree}/ of the repository at {self.root}",
                why="verify vouches for the bytes the repository holds; a linked tree is someone else's",
                fix=f"replace the link with the tree itself (git checkout -- {tree})",
            )
            return True
        escaping = []
        for path in sorted(self.tree.rglob("*")):
            if path.is_symlink() and not within(path, self.tree):
                escaping.append(path)
        for path in escaping:
            rel = path.relative_to(self.root).as_posix()
            self.error("tree", "is a symbolic link that leaves the release tree", file=rel, found=str(path.resolve()), expected="a plain file of the tree",
                       fix=f"replace the link with the file itself (git checkout -- {rel})")
        if escaping:
            self.groups.append("tree")
        return bool(escaping)

    # 1 -------------------------------------------------------------------------------------
    def check_line_endings(self) -> bool:
        crlf = []
        for path in sorted(self.tree.rglob("*")):
            if path.is_file() and not path.is_symlink() and b"\r\n" in path.read_bytes():
                crlf.append(path.relative_to(self.root).as_posix())
        if not crlf:
            return False
        tree = repo_path(self.release, "").rstrip("/")
        self.error(
            "line-endings",
            f"{len(crlf)} file(s) of the release tree have CRLF line endings, so every hash over them differs ({', '.join(crlf[:3])}{', ...' if len(crlf) > 3 else ''})",
            file=tree,
            field="core.autocrlf",
            why="git rewrote LF to CRLF on checkout (core.autocrlf=true, the Windows default); the hash chain is over the exact LF bytes",
            fix=f"run 'git config core.autocrlf false', then 'rm -r {tree} && git checkout -- {tree}' and verify again",
        )
        return True

    def load_manifest(self) -> dict[str, Any] | None:
        self.groups.append("schema")
        path = self.root / self.manifest_rel
        if not path.is_file():
            self.error("schema", "the release tree has no manifest", file=self.manifest_rel, fix="run 'python -m pipeline compose --release " + self.release + "'")
            return None
        try:
            data = read_bytes_bounded(path, MAX_MANIFEST_BYTES, what="release manifest")
            # verify needs the whole document, not the model's questions: it checks the shape the questions
            # assume (check_schema), the bytes' canonical form, and every field against the derived manifest.
            # check_type off: check_schema names a wrong type among the other problems.
            document = dict(parse_manifest(data, source=self.manifest_rel, check_type=False).document)
        except InputError as exc:
            self.error("schema", exc.what, file=self.manifest_rel, found=exc.found, fix="restore the file from git; never edit it by hand (compose writes it)")
            return None
        if data != canonical_bytes(document):
            self.error("schema", "is not in canonical form (sorted keys, indent 2, LF, one trailing newline)", file=self.manifest_rel, why="compose writes canonical JSON; other bytes mean a hand edit or a rewriting tool", fix=f"run 'python -m pipeline compose rebind --release {self.release}'")
        return document

    # 2 -------------------------------------------------------------------------------------
    def check_schema(self) -> None:
        m = self.manifest
        f = self.manifest_rel
        if m.get("artifact_type") != MANIFEST_TYPE:
            self.error("schema", "is not a release manifest", file=f, field="artifact_type", found=m.get("artifact_type"), expected=MANIFEST_TYPE)
        if m.get("schema_version") != 1 or isinstance(m.get("schema_version"), bool):
            self.error("schema", "has an unsupported schema version", file=f, field="schema_version", found=m.get("schema_version"), expected="1")
        if m.get("release") != self.release:
            self.error("schema", "names another release than its folder", file=f, field="release", found=m.get("release"), expected=repr(self.release))
        if m.get("status") not in STATES:
            self.error("schema", "has an unknown status", file=f, field="status", found=m.get("status"), expected="draft, candidate or ready")
        for key in ("components", "qualification", "publication", "compatibility", "signing", "inputs", "installation"):
            if not isinstance(m.get(key), dict):
                self.error("schema", "is missing or not an object", file=f, field=key, found=abbreviate(m.get(key)), expected="an object")
        signing = section(m, "signing")
        promise = evidence_promise(self.release)
        if signing.get("evidence", None) != promise or (promise is None and "evidence" in signing):
            self.error(
                "schema",
                "does not carry the evidence promise of its release" if promise is not None else "promises evidence, but the tree was made before signing.evidence existed",
                file=f,
                field="signing.evidence",
                found=abbreviate(signing.get("evidence")) if "evidence" in signing else "absent",
                expected=json.dumps(promise, sort_keys=True) if promise is not None else f"absent (a release of {', '.join(PRE_EVIDENCE_RELEASES)})",
                why="the promise decides whether audit FAILs a missing provenance statement or bundle; removing it would turn those failures into skips",
                fix=f"run 'python -m pipeline compose rebind --release {self.release}'",
            )

        required = review_ledger_required(self.release)
        if required != ("reviews" in m) or ("reviews" in m and not isinstance(m.get("reviews"), (dict, type(None)))):
            self.error(
                "schema",
                "does not carry its review ledger binding" if required else "binds a review ledger, but the tree was made before the ledger existed",
                file=f,
                field="reviews",
                found=abbreviate(m.get("reviews")) if "reviews" in m else "absent",
                expected="{path, sha256, public_url} of the bound ledger, or null" if required else f"absent (a release of {', '.join(PRE_REVIEW_LEDGER_RELEASES)})",
                why="the binding decides whether compose, publish and audit hold the release to its councils' reviews; removing it would skip them",
                fix=f"run 'python -m pipeline compose rebind --release {self.release}'",
            )

    # 3 -------------------------------------------------------------------------------------
    def _path_fields(self) -> list[tuple[str, Any]]:
        m = self.manifest
        out: list[tuple[str, Any]] = []
        inputs = section(m, "inputs")
        out.append(("inputs.release_toml", inputs.get("release_toml")))
        comp = section(m, "compatibility")
        out.append(("compatibility.path", comp.get("path")))
        qual = section(m, "qualification")
        out.append(("qualification.summary", qual.get("summary")))
        if isinstance(qual.get("acceptance"), dict):
            out.append(("qualification.acceptance.path", qual["acceptance"].get("path")))
        if isinstance(m.get("reviews"), dict):
            out.append(("reviews.path", m["reviews"].get("path")))
        for row in lane_rows(m):
            where = row_field(row, self.lanes)
            if row.get("checksums_path") is not None:
                out.append((f"{where}.checksums_path", row.get("checksums_path")))
            q = section(row, "qualification")
            if q.get("summary") is not None:
                out.append((f"{where}.qualification.summary", q.get("summary")))
            for key in ROW_RECORDS:
                if isinstance(row.get(key), dict):
                    out.append((f"{where}.{key}.path", row[key].get("path")))
        signing = section(m, "signing")
        for index, value in enumerate(signing.get("signed_files") or []):
            out.append((f"signing.signed_files[{index}]", value))
        return out

    def inside(self, value: Any) -> Path | None:
        """The file a recorded path names, when it is a plain relative path that stays in the tree (links resolved)."""
        if relpath_problem(value, hidden=True) is not None or not value.startswith(repo_path(self.release, "")):
            return None
        path = self.root / value
        return path if within(path, self.tree) else None

    def record(self, value: Any) -> dict[str, Any] | None:
        """A JSON object recorded inside the tree, or None (unreadable records are reported by derive)."""
        path = self.inside(value)
        if path is None or not path.is_file():
            return None
        try:
            doc = loads_document(path.read_bytes(), source=path)
        except InputError:
            return None
        return doc if isinstance(doc, dict) else None

    def check_paths(self) -> None:
        self.groups.append("paths")
        for name, value in self._path_fields():
            path = self.inside(value)
            if path is None:
                self.error("paths", "path is not a repository-relative path inside the release tree", file=self.manifest_rel, field=name, found=value, expected=f"a path under {repo_path(self.release, '')} without '..'")
            elif path.is_symlink() or not path.is_file():
                self.error("paths", "path names no regular file", file=self.manifest_rel, field=name, found=value, fix="run 'python -m pipeline compose' to restore the evidence copies")

    # 4 -------------------------------------------------------------------------------------
    def _hash_pairs(self) -> list[tuple[str, Any, Any]]:
        """(field, recorded sha256, repository path) for every file the manifest binds by hash."""
        m = self.manifest
        pairs: list[tuple[str, Any, Any]] = []
        inputs = section(m, "inputs")
        pairs.append(("inputs.release_toml_sha256", inputs.get("release_toml_sha256"), inputs.get("release_toml")))
        comp = section(m, "compatibility")
        pairs.append(("compatibility.sha256", comp.get("sha256"), comp.get("path")))
        qual = section(m, "qualification")
        pairs.append(("qualification.summary_sha256", qual.get("summary_sha256"), qual.get("summary")))
        if isinstance(qual.get("acceptance"), dict):
            pairs.append(("qualification.acceptance.sha256", qual["acceptance"].get("sha256"), qual["acceptance"].get("path")))
        if isinstance(m.get("reviews"), dict):
            pairs.append(("reviews.sha256", m["reviews"].get("sha256"), m["reviews"].get("path")))
        for row in lane_rows(m):
            where = row_field(row, self.lanes)
            q = section(row, "qualification")
            if q.get("summary") is not None or q.get("sha256") is not None:
                pairs.append((f"{where}.qualification.sha256", q.get("sha256"), q.get("summary")))
            if row.get("checksums_path") is not None:
                pairs.append((f"{where}.checksums_sha256", row.get("checksums_sha256"), row.get("checksums_path")))
            for key in ROW_RECORDS:
                if isinstance(row.get(key), dict):
                    pairs.append((f"{where}.{key}.sha256", row[key].get("sha256"), row[key].get("path")))
        return pairs

    def check_hashes(self) -> None:
        self.groups.append("hashes")
        for name, recorded, rel in self._hash_pairs():
            if not is_sha256_hex(recorded):
                self.error("hashes", "is not a lowercase 64-hex SHA-256", file=self.manifest_rel, field=name, found=recorded, expected="64 lowercase hex digits")
                continue
            path = self.inside(rel)
            if path is None or not path.is_file():
                continue  # reported by the path check
            actual = sha256_bytes(path.read_bytes())
            if actual != recorded:
                self.error("hashes", f"recorded SHA-256 differs from the bytes of {rel}", file=self.manifest_rel, field=name, found=recorded, expected=actual, why="the file or the hash was edited by hand after compose bound it", fix=f"never edit either; restore the file from git or run 'python -m pipeline compose rebind --release {self.release}' if the new bytes are intended")
        pred = self.manifest.get("predecessor")
        if isinstance(pred, dict):
            rel = repo_path(str(pred.get("release")), MANIFEST)
            path = self.root / rel
            if RELEASE_RE.fullmatch(str(pred.get("release"))) and path.is_file():
                actual = sha256_bytes(path.read_bytes())
                if pred.get("manifest_sha256") != actual:
                    self.error("hashes", "recorded predecessor manifest hash differs from its bytes", file=self.manifest_rel, field="predecessor.manifest_sha256", found=pred.get("manifest_sha256"), expected=actual, why="a released tree is immutable; its manifest changed after this release was staged")

    # 5 -------------------------------------------------------------------------------------
    def check_checksums(self) -> None:
        self.groups.append("checksums")
        for row in lane_rows(self.manifest):
            rel = row.get("checksums_path")
            path = self.inside(rel)
            if path is None or not path.is_file():
                continue
            where = row_field(row, self.lanes)
            try:
                entries = parse_sums(path.read_bytes(), file=rel)
            except PipelineError as error:
                self.from_error("checksums", error, file=rel)
                continue
            bound: dict[str, str] = {}
            for _role, prefix in role_fields(row_kind(row, self.lanes)):
                if prefix == "checksums":
                    continue
                url = row.get(f"{prefix}_url")
                if isinstance(url, str):
                    bound[url.rsplit("/", 1)[-1]] = prefix
            for name, digest in entries.items():
                prefix = bound.get(name)
                if prefix is None:
                    self.error("checksums", "lists a file the manifest row does not bind (the set must be closed)", file=rel, field=name, found=name, expected="only " + ", ".join(sorted(bound)))
                    continue
                if row.get(f"{prefix}_sha256") != digest:
                    self.error("checksums", f"differs from the {name} line of {PurePosixPath(rel).name}", file=self.manifest_rel, field=f"{where}.{prefix}_sha256", found=row.get(f"{prefix}_sha256"), expected=digest, why="every asset hash is taken from the published SHA256SUMS, never typed", fix=f"run 'python -m pipeline compose rebind --release {self.release}'")
            for name, prefix in sorted(bound.items()):
                if name not in entries:
                    self.error("checksums", f"binds {name}, which {PurePosixPath(rel).name} does not list", file=self.manifest_rel, field=f"{where}.{prefix}_url", found=row.get(f"{prefix}_url"), expected="a file listed in the set's SHA256SUMS")

    # 6 -------------------------------------------------------------------------------------
    def check_receipts(self) -> None:
        self.groups.append("receipts")
        d = self.derived
        if d is None or d.manifest is None:
            return
        model_sha = d.manifest["components"]["model"]["artifact_sha256"]
        for row in lane_rows(d.manifest):
            where = row_field(row, self.lanes)
            if row.get("model_artifact_sha256") and model_sha and row["model_artifact_sha256"] != model_sha:
                self.error("receipts", "the lane binds another model than components.model", file=self.manifest_rel, field=f"{where}.model_artifact_sha256", found=row["model_artifact_sha256"], expected=model_sha, fix="requalify the lane on the release's model, or bind the model it was qualified with")
            rel = row["qualification"]["summary"]
            doc = self.record(rel)
            if doc is None:
                continue
            facts = receipt_facts(doc)
            pkg = package_prefix(row_kind(row, self.lanes))

            def want(field_name: str, found: Any, expected: Any, what: str, rel: str = rel) -> None:
                if expected is not None and found != expected:
                    self.error("receipts", what, file=rel, field=field_name, found=found, expected=expected, why="a receipt is evidence for exact bytes; evidence for other bytes proves nothing about these", fix="qualify the bytes the row binds (python -m pipeline qualify), or bind the bytes the receipt qualified")

            want("artifact_type", doc.get("artifact_type"), LANE_RECEIPT_TYPE, "is not a lane receipt")
            want("schema_version", doc.get("schema_version"), 1, "has an unsupported schema version")
            want("lane", facts.lane, row["id"], "is a receipt of another lane")
            want("component_tag", facts.component_tag, row["release_tag"], "names another component tag than the row")
            want("deployment_profile", facts.deployment_profile, row["deployment_profile"], "names another deployment profile than the row")
            want("identity.source_commit", facts.source_commit, row["source_commit"], "binds another source commit than the row")
            want("identity.build_identity.patch_stack_sha", facts.patch_stack_sha, row["source_commit"], "build identity names another source commit")
            want("identity.build_identity.upstream_base_sha", facts.upstream_commit, row["upstream_commit"], "build identity names another upstream commit")
            want("identity.server_binary_sha256", facts.server_binary_sha256, row["server_binary_sha256"], "binds another server binary than the row")
            want("identity.configuration_sha256", facts.configuration_sha256, row["configuration_sha256"], "binds another configuration than the row")
            want("identity.model_artifact_sha256", facts.model_artifact_sha256, model_sha, "binds another model than components.model")
            want("identity.package.name", facts.package_name, row[f"{pkg}_name"], "binds another package file than the row")
            want("identity.package.sha256", facts.package_sha256, row[f"{pkg}_sha256"], "binds other package bytes than the set's SHA256SUMS")
            want("identity.package.bytes", facts.package_bytes, row[f"{pkg}_bytes"], "binds another package size than the row")
            want("identity.outer_checksums_sha256", facts.outer_checksums_sha256, row.get("checksums_sha256"), "binds another outer SHA256SUMS than the tree's copy")
            want("secret_values_recorded", facts.secret_values_recorded, 0, "records secret values")
            if facts.status not in LANE_RECEIPT_STATUSES:
                self.error("receipts", "has an unknown status", file=rel, field="status", found=facts.status, expected=", ".join(LANE_RECEIPT_STATUSES))
            elif row["status"] == "qualified" and facts.status != "passed":
                rt_path = d.release.path if d.release else None
                self.error("receipts", f"the lane is marked qualified but its receipt says {facts.status}", file=rt_path, field=f"lanes.{row['id']}.status", found="qualified", expected="'preview' until a passed receipt is bound (python -m pipeline qualify --import RECEIPT on the lane's hardware)")

    # 6b ------------------------------------------------------------------------------------
    def check_provenance(self) -> None:
        """Each copied statement's subjects are exactly the row's bound files (or its image), for its lane, cut and commit.

        The statements are the ones the package and image stages wrote; their DSSE
        bundles ship beside the published statements (audit checks those from the public URLs).
        """
        from pipeline.formats import provenance

        self.groups.append("provenance")
        for row in lane_rows(self.manifest):
            lane_id = row.get("id")
            if not isinstance(lane_id, str) or lane_id not in self.lanes:
                continue
            rel = repo_path(self.release, provenance_name(lane_id))
            path = self.inside(rel)
            if path is not None and path.is_file():
                try:
                    expected = self._bound_set(row)
                except PipelineError as error:
                    self.from_error("provenance", error, file=row.get("checksums_path"))
                    expected = None
                if expected is None:
                    self.error("provenance", "a set provenance is copied, but the row binds no readable checksum copy to compare it with", file=rel, expected="the lane's SHA256SUMS copy beside it")
                else:
                    try:
                        check_set_statement(provenance.read_statement(path.read_bytes(), origin=rel), expected, row, origin=rel, what="the files the row binds")
                    except PipelineError as error:
                        self.from_error("provenance", error, file=rel)
            image_rel = repo_path(self.release, image_provenance_name(lane_id))
            image_path = self.inside(image_rel)
            if image_path is None or not image_path.is_file():
                continue
            try:
                check_image_statement(provenance.read_statement(image_path.read_bytes(), origin=image_rel), row, origin=image_rel)
            except PipelineError as error:
                self.from_error("provenance", error, file=image_rel)

    # 7 -------------------------------------------------------------------------------------
    def check_images(self) -> None:
        self.groups.append("images")
        comp = section(self.manifest, "components")
        row = comp.get("ninfer")
        if not isinstance(row, dict):
            return
        ref = row.get("oci_reference")
        if ref is not None:
            split = split_image_reference(ref)
            if split is None:
                self.error("images", "image reference is not pinned by digest (a tag is mutable)", file=self.manifest_rel, field="components.ninfer.oci_reference", found=ref, expected="'<registry>/<repository>@sha256:<64 hex>' without a tag", why="a mutable tag can point at other bytes tomorrow (a correct-looking tag served another image before)")
            else:
                repo, digest = split
                if row.get("oci_repository") != repo:
                    self.error("images", "repository differs from the image reference", file=self.manifest_rel, field="components.ninfer.oci_repository", found=row.get("oci_repository"), expected=repo)
                if row.get("oci_manifest_digest") != digest:
                    self.error("images", "manifest digest differs from the image reference", file=self.manifest_rel, field="components.ninfer.oci_manifest_digest", found=row.get("oci_manifest_digest"), expected=digest)
                if repo not in OFFICIAL_IMAGE_REPOSITORIES:
                    self.warn("images", "the image lives outside the product's registry repositories", file=self.manifest_rel, field="components.ninfer.oci_repository", found=repo, expected=" or ".join(OFFICIAL_IMAGE_REPOSITORIES))
        pub = row.get("publication_receipt")
        if not isinstance(pub, dict):
            return
        doc = self.record(pub.get("path"))
        if doc is None:
            return
        facts = publication_facts(doc)
        rel = pub.get("path")
        checks = (
            ("artifact_type", doc.get("artifact_type"), IMAGE_PUBLICATION_TYPE, "is not an image publication receipt"),
            ("image_reference", facts.image_reference, ref, "names another image than the row"),
            ("image_digest", facts.image_digest, row.get("oci_manifest_digest"), "names another digest than the row"),
            ("binary_sha256", facts.binary_sha256, row.get("binary_archive_sha256"), "was built from another binary archive than the set's SHA256SUMS binds"),
            ("binary_asset", facts.binary_name, row.get("binary_archive_name"), "names another binary archive than the row"),
            ("source_commit", facts.source_commit, row.get("source_commit"), "names another source commit than the row"),
            ("release_tag", facts.component_tag, row.get("release_tag"), "names another component tag than the row"),
            ("secret_free", facts.secret_free, True, "does not declare itself secret-free"),
        )
        for name, found, expected, what in checks:
            if expected is not None and found != expected:
                self.error("images", what, file=rel, field=name, found=found, expected=expected)
        if split_image_reference(facts.image_reference) is None:
            self.error("images", "image reference is not pinned by digest (a tag is mutable)", file=rel, field="image_reference", found=facts.image_reference, expected="'<registry>/<repository>@sha256:<64 hex>'")

    # 8 -------------------------------------------------------------------------------------
    def check_urls(self) -> None:
        self.groups.append("urls")
        f = self.manifest_rel
        for row in lane_rows(self.manifest):
            where = row_field(row, self.lanes)
            tag = row.get("release_tag")
            prefix = f"{NINFER_REPOSITORY}/releases/download/{tag}/"
            for key, value in sorted(row.items()):
                if not key.endswith("_url") or value is None:
                    continue
                if not isinstance(tag, str) or not isinstance(value, str) or not value.startswith(prefix) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._+-]*", value[len(prefix):]):
                    self.error("urls", "asset URL is not an immutable release download under the component tag", file=f, field=f"{where}.{key}", found=value, expected=f"{prefix}<file name> (no query, fragment or other tag)")
            pkg = package_prefix(row_kind(row, self.lanes))
            url, name = row.get(f"{pkg}_url"), row.get(f"{pkg}_name")
            if isinstance(url, str) and isinstance(name, str) and url.rsplit("/", 1)[-1] != name:
                self.error("urls", "package URL does not end in the package name", file=f, field=f"{where}.{pkg}_url", found=url, expected=f"{prefix}{name}")
            if isinstance(row.get("checksums_url"), str) and not row["checksums_url"].endswith("/SHA256SUMS"):
                self.error("urls", "checksums URL must name the set's SHA256SUMS", file=f, field=f"{where}.checksums_url", found=row["checksums_url"])
            if row.get("repository") != NINFER_REPOSITORY:
                self.error("urls", "component repository is not the runtime fork", file=f, field=f"{where}.repository", found=row.get("repository"), expected=NINFER_REPOSITORY)
        comp = section(self.manifest, "components")
        omp = section(comp, "omp")
        for p in omp.get("platforms") or []:
            if not isinstance(p, dict):
                continue
            expected = f"{omp.get('upstream_repository')}/releases/download/{omp.get('upstream_tag')}/{p.get('artifact_name')}"
            if p.get("artifact_url") != expected:
                self.error("urls", "client asset URL is not the upstream release download of its tag", file=f, field=f"components.omp.platforms[{p.get('platform')}].artifact_url", found=p.get("artifact_url"), expected=expected)
        for field_name, path_key, record in self._pinned_records():
            url = record.get("public_url") if isinstance(record, dict) else None
            if url is None:
                continue
            parsed = parse_raw_url(url)
            if parsed is None or parsed[1] != record.get(path_key):
                self.error("urls", "raw URL is not pinned to a 40-hex commit at the record's own path", file=f, field=field_name, found=url, expected=f"https://raw.githubusercontent.com/alphastorm/omp-ninfer/<40 hex>/{record.get(path_key)}")

    def _pinned_records(self) -> list[tuple[str, str, dict[str, Any]]]:
        """(url field, path key, record) of every record that carries a raw URL in the manifest."""
        m = self.manifest
        out: list[tuple[str, str, dict[str, Any]]] = []
        qual = section(m, "qualification")
        out.append(("qualification.public_url", "summary", qual))
        if isinstance(qual.get("acceptance"), dict):
            out.append(("qualification.acceptance.public_url", "path", qual["acceptance"]))
        if isinstance(m.get("reviews"), dict):
            out.append(("reviews.public_url", "path", m["reviews"]))
        comp = section(m, "compatibility")
        out.append(("compatibility.public_url", "path", comp))
        for row in lane_rows(m):
            where = row_field(row, self.lanes)
            if isinstance(row.get("qualification"), dict):
                out.append((f"{where}.qualification.public_url", "summary", row["qualification"]))
            for key in ROW_RECORDS:
                if isinstance(row.get(key), dict):
                    out.append((f"{where}.{key}.public_url", "path", row[key]))
        return out

    # 9 -------------------------------------------------------------------------------------
    def check_model(self) -> None:
        self.groups.append("model")
        comp = section(self.manifest, "components")
        model = comp.get("model")
        f = self.manifest_rel
        if not isinstance(model, dict):
            self.error("model", "the manifest binds no model", file=f, field="components.model")
            return
        revision = model.get("revision")
        if revision is not None and not is_commit_hex(revision):
            self.error("model", "revision is not a full 40-hex commit", file=f, field="components.model.revision", found=revision)
        if model.get("artifact_sha256") is not None and not is_sha256_hex(model.get("artifact_sha256")):
            self.error("model", "is not a lowercase 64-hex SHA-256", file=f, field="components.model.artifact_sha256", found=model.get("artifact_sha256"))
        url = model.get("artifact_url")
        if url is not None or revision is not None:
            expected = f"{model.get('repository')}/resolve/{revision}/{model.get('artifact_name')}"
            if url != expected:
                self.error("model", "model URL is not exactly <repository>/resolve/<revision>/<artifact>", file=f, field="components.model.artifact_url", found=url, expected=expected, why="only a revision-pinned resolve URL names fixed bytes; a branch such as main can move")

    # 10 ------------------------------------------------------------------------------------
    def check_copies(self) -> None:
        self.groups.append("copies")
        d = self.derived
        if d is None or d.manifest is None:
            return
        differences: list[tuple[str, Any, Any]] = []
        diff(self.manifest, d.manifest, "", differences)
        for name, found, expected in differences:
            self.error("copies", "differs from what release.toml and the evidence derive", file=self.manifest_rel, field=name, found=abbreviate(found), expected=abbreviate(expected) if isinstance(expected, str) else json.dumps(abbreviate(expected)), why="every manifest value is derived; a difference is a hand edit, or evidence changed after compose", fix=f"restore the tree from git, or run 'python -m pipeline compose rebind --release {self.release}' if the evidence change is intended")
        for rel, derived_doc in ((d.manifest["qualification"]["summary"], d.summary), (d.manifest["compatibility"]["path"], d.authority)):
            path = self.root / rel
            if not path.is_file():
                self.error("copies", "derived record is missing", file=rel, fix=f"run 'python -m pipeline compose rebind --release {self.release}'")
                continue
            data = path.read_bytes()
            if data == canonical_bytes(derived_doc):
                continue
            try:
                on_disk = loads_document(data, source=rel)
            except InputError as exc:
                self.error("copies", exc.what, file=rel)
                continue
            out: list[tuple[str, Any, Any]] = []
            diff(on_disk, derived_doc, "", out)
            if not out:
                self.error("copies", "is not in canonical form", file=rel, expected="sorted keys, indent 2, LF, one trailing newline")
            for name, found, expected in out:
                self.error("copies", "differs from the manifest and the evidence it copies", file=rel, field=name, found=abbreviate(found), expected=abbreviate(expected) if isinstance(expected, str) else json.dumps(abbreviate(expected)))
        for rel, text in ((repo_path(self.release, AUTHORITY_MD), d.authority_md), (repo_path(self.release, NOTES), d.notes)):
            path = self.root / rel
            if not path.is_file():
                self.error("copies", "rendering is missing", file=rel, fix=f"run 'python -m pipeline compose rebind --release {self.release}'")
            elif path.read_bytes() != (text or "").encode("utf-8"):
                current = path.read_bytes().decode("utf-8", "replace").splitlines()
                wanted = (text or "").splitlines()
                line = next((i + 1 for i, (a, b) in enumerate(zip(current, wanted, strict=False)) if a != b), min(len(current), len(wanted)) + 1)
                self.error("copies", f"is stale or edited by hand (first difference at line {line}); it is generated, do not edit", file=rel, field=f"line {line}", fix=f"run 'python -m pipeline compose rebind --release {self.release}'")
        if d.release is not None:
            for key in unknown_keys_unused(d.release, null_identities(d.manifest["components"], self.lanes)):
                self.warn("copies", "explains a value that is no longer null", file=d.release.path, field=f"unknown.{key}", fix="remove the entry")

    # 11 ------------------------------------------------------------------------------------
    def check_acceptance(self) -> None:
        self.groups.append("acceptance")
        qual = section(self.manifest, "qualification")
        acc = qual.get("acceptance")
        if not isinstance(acc, dict):
            return
        rel = acc.get("path")
        doc = self.record(rel)
        if doc is None:
            return
        release_input = self.derived.release if self.derived is not None else None
        required = sorted(release_input.acceptance["routes"]) if release_input is not None and release_input.acceptance else None
        problems = acceptance_problems(doc, self.manifest, self.release, required)
        for field_name, found, expected, what in problems:
            self.error("acceptance", what, file=rel, field=field_name, found=abbreviate(found), expected=abbreviate(expected) if not isinstance(expected, (dict, list)) else json.dumps(abbreviate(expected)))
        candidate = doc.get("candidate_commit")
        if is_commit_hex(candidate):
            try:
                missing = not self.git.has_commit(candidate)
            except GitUnavailable:
                missing = True
            if missing:
                (self.error if self.check_pins else self.warn)("acceptance", "the accepted candidate commit is not in local git history", file=rel, field="candidate_commit", found=candidate, fix="fetch the full history (git fetch --unshallow) and verify again")
            else:
                data = self.git.show(candidate, self.manifest_rel)
                old = None
                if data is not None:
                    try:
                        old = loads_document(data, source=f"{candidate}:{self.manifest_rel}")
                    except InputError:
                        old = None
                if not isinstance(old, dict) or old.get("status") != "candidate":
                    self.error("acceptance", "the accepted commit does not hold this release as a candidate", file=rel, field="candidate_commit", found=candidate, expected=f"a commit whose {self.manifest_rel} has status candidate")
                elif acceptance_subject(old) != acceptance_subject(self.manifest):
                    self.error("acceptance", "the accepted candidate bound other identities than this manifest", file=rel, field="candidate_commit", found=candidate, why="acceptance is evidence for the exact candidate; changed bytes need a new candidate and a new acceptance")
                document = (doc.get("documented_routes") or {}).get("document") if isinstance(doc.get("documented_routes"), dict) else None
                if isinstance(document, dict) and isinstance(document.get("path"), str):
                    held = self.git.show(candidate, document["path"])
                    if held is None or sha256_bytes(held) != document.get("sha256_at_candidate"):
                        self.error("acceptance", "the route document at the candidate commit does not have the recorded hash", file=rel, field="documented_routes.document.sha256_at_candidate", found=None if held is None else sha256_bytes(held), expected=document.get("sha256_at_candidate"), why="the accepted blocks are the document's bytes at the candidate")

    # 12 ------------------------------------------------------------------------------------
    def check_hygiene(self) -> None:
        self.groups.append("hygiene")
        private = [PRIVATE_MARKERS]
        names = set()
        with contextlib.suppress(Exception):  # no login name in this environment
            names.add(getpass.getuser())
        names.add(socket.gethostname().split(".")[0])
        names = {n for n in names if n and len(n) >= 4 and n.lower() not in COMMON_NAMES}
        if names:
            private.append(re.compile(r"\b(" + "|".join(re.escape(n) for n in sorted(names)) + r")\b"))
        for path in sorted(self.tree.rglob("*")):
            if not path.is_file() or path.is_symlink() or not path.name.endswith(TEXT_SUFFIXES) or path.name.endswith(BUNDLE_SUFFIX):
                continue
            rel = path.relative_to(self.root).as_posix()
            text = path.read_bytes().decode("utf-8", "replace")
            for number, line in enumerate(text.splitlines(), start=1):
                match = PLACEHOLDERS.search(line)
                if match:
                    self.error("hygiene", "holds a placeholder", unique=False, file=rel, field=f"line {number}", found=match.group(0), expected="a real value, or null with a blocker")
                for pattern in private:
                    match = pattern.search(line)
                    if match:
                        self.error("hygiene", "holds a private marker (home folder, user or host name)", unique=False, file=rel, field=f"line {number}", found=match.group(0), why="release documents are public", fix="remove it at its source and re-run compose")

    # 13 ------------------------------------------------------------------------------------
    def check_publication(self) -> None:
        self.groups.append("publication")
        pub = section(self.manifest, "publication")
        if pub.get("authorized") is not False:
            self.error("publication", "publication must never be authorized in the repository", file=self.manifest_rel, field="publication.authorized", found=pub.get("authorized"), expected="false", why="ready means technically cuttable; publishing is a separate act of the release lead")
        if not isinstance(pub.get("blockers"), list) or not all(isinstance(b, str) for b in pub.get("blockers") or []):
            self.error("publication", "blockers must be a list of strings", file=self.manifest_rel, field="publication.blockers", found=abbreviate(pub.get("blockers")))
        self.check_component_publications()
        d = self.derived
        if d is not None and d.summary is not None:
            rel = d.manifest["qualification"]["summary"]
            try:
                summary = loads_document((self.root / rel).read_bytes(), source=rel)
            except (OSError, InputError):
                return
            if isinstance(summary, dict) and summary.get("publication_authorized") is not False:
                self.error("publication", "publication must never be authorized in the repository", file=rel, field="publication_authorized", found=summary.get("publication_authorized"), expected="false")

    def _bound_set(self, row: dict[str, Any]) -> dict[str, str] | None:
        """name -> SHA-256 of every file the row binds: its SHA256SUMS copy's lines and the copy itself."""
        sums_path = self.inside(row.get("checksums_path"))
        if sums_path is None or not sums_path.is_file():
            return None
        sums = sums_path.read_bytes()
        return {**parse_sums(sums, file=row["checksums_path"]), "SHA256SUMS": sha256_bytes(sums)}

    def check_component_publications(self) -> None:
        """A bound component publication receipt published exactly the row's set, at its tag and commit."""
        from pipeline.formats.assets import asset_set
        from pipeline.formats.provenance import set_statement_name
        from pipeline.formats.publication_plan import read_receipt, set_part
        from pipeline.infra.github import repository_of

        for row in lane_rows(self.manifest):
            lane = self.lanes.get(row.get("id")) if isinstance(row.get("id"), str) else None
            rel = repo_path(self.release, component_publication_name(lane.id)) if lane else None
            path = self.inside(rel) if rel else None
            if lane is None or path is None or not path.is_file():
                continue
            where = row_field(row, self.lanes)

            def want(condition: bool, what: str, *, field: str, found: Any, expected: Any, rel: str = rel) -> None:
                if not condition:
                    self.error("publication", what, file=rel, field=field, found=found, expected=expected, why="the receipt is the evidence that this component, these exact bytes, is published")

            try:
                receipt = read_receipt(path)
                bound = self._bound_set(row)
                published = {a.get("name"): a.get("sha256") for a in receipt["assets"]}
                statement = set_statement_name(asset_set(lane, lane.beta_from_tag(row.get("release_tag"))).package_root)
                assets = set_part(published, statement)
                record = row.get("provenance") if isinstance(row.get("provenance"), dict) else None
                if statement in published and record is not None:
                    want(published[statement] == record.get("sha256"), "published another provenance statement than the one the row binds", field=f"assets[{statement}].sha256", found=published[statement], expected=record.get("sha256"))
                want(receipt.get("kind") == "component", "is not a component publication receipt", field="kind", found=receipt.get("kind"), expected="component")
                want(receipt.get("repository") == repository_of(lane.component_repository), "publishes to another repository than the lane's", field="repository", found=receipt.get("repository"), expected=repository_of(lane.component_repository))
                want(receipt.get("tag") == row.get("release_tag"), "publishes another component tag than the row", field="tag", found=receipt.get("tag"), expected=row.get("release_tag"))
                want(receipt.get("commit") == row.get("source_commit"), "tags another commit than the row's source commit", field="commit", found=receipt.get("commit"), expected=row.get("source_commit"))
                if bound is None:
                    want(False, "the row binds no checksum copy to compare the published assets with", field="assets", found=sorted(assets), expected="the lane's SHA256SUMS copy beside it")
                else:
                    want(assets == bound, "published another set than the files the row binds", field="assets", found=abbreviate({k: v for k, v in sorted(assets.items()) if bound.get(k) != v}), expected=abbreviate({k: v for k, v in sorted(bound.items()) if assets.get(k) != v}))
                if row.get("published") is not True:
                    self.error("publication", "the row says the component is not published, but its publication receipt is bound", file=self.manifest_rel, field=f"{where}.published", found=row.get("published"), expected=True)
            except PipelineError as error:
                self.from_error("publication", error, file=rel)

    # 14 ------------------------------------------------------------------------------------
    def check_states(self) -> None:
        self.groups.append("states")
        status = self.manifest.get("status")
        if status not in STATES or self.derived is None or self.derived.manifest is None:
            return
        target = status
        if self.require == "installable" and status == "draft":
            self.error("states", "the release is not installable: --require-installable needs status candidate or ready", file=self.manifest_rel, field="status", found=status, expected="candidate or ready")
            target = "candidate"
        if self.require == "ready" and status != "ready":
            self.error("states", "the release is not ready: --require-ready needs status ready", file=self.manifest_rel, field="status", found=status, expected="ready")
            target = "ready"
        for field_name, what, found, expected in state_problems(self.manifest, self.derived, target, self.lanes):
            self.error("states", what, file=self.manifest_rel, field=field_name, found=found, expected=expected)

    # 15 ------------------------------------------------------------------------------------
    def check_tree(self) -> None:
        self.groups.append("tree")
        if self.derived is None:
            return
        allowed = set(self.derived.files)
        signing = section(self.manifest, "signing")
        signed = [s for s in signing.get("signed_files") or [] if isinstance(s, str)]
        allowed |= {s + BUNDLE_SUFFIX for s in signed}
        for path in sorted(self.tree.rglob("*")):
            if path.is_dir() and not path.is_symlink():
                continue
            rel = path.relative_to(self.root).as_posix()
            if path.is_symlink() or not path.is_file():
                self.error("tree", "is a link or special file; the release tree holds plain files only", file=rel)
            elif rel not in allowed:
                self.error("tree", "is not part of the release tree (the tree is closed)", file=rel, expected="only the files docs/release-tree.md lists", fix="remove it, or bind it through release.toml and compose")

    # 16 ------------------------------------------------------------------------------------
    def check_pinned(self) -> None:
        hashes = {rel: recorded for _name, recorded, rel in self._hash_pairs() if isinstance(rel, str)}
        for field_name, path_key, record in self._pinned_records():
            url = record.get("public_url") if isinstance(record, dict) else None
            parsed = parse_raw_url(url)
            if parsed is None:
                continue
            commit, rel = parsed
            try:
                if not self.git.has_commit(commit):
                    self.error("pins", "the pinned commit is not in local git history (failing closed)", file=self.manifest_rel, field=field_name, found=commit, why="a pin can only be checked against the commit's bytes", fix="fetch the full history (git fetch --unshallow) or re-pin with 'compose rebind --pin COMMIT'")
                    continue
                data = self.git.show(commit, rel)
            except GitUnavailable:
                self.error("pins", "git is not available to check pins", file=self.manifest_rel, field=field_name, fix="install git and run from a clone with full history")
                return
            if data is None:
                self.error("pins", f"the pinned commit does not contain {rel}", file=self.manifest_rel, field=field_name, found=url, fix="pin a commit that holds the file")
                continue
            recorded = hashes.get(record.get(path_key))
            actual = sha256_bytes(data)
            if recorded != actual:
                self.error("pins", "the pinned URL serves other bytes than the recorded SHA-256", file=self.manifest_rel, field=field_name, found=actual, expected=recorded, why="the record changed after it was pinned", fix=f"commit the tree and run 'python -m pipeline compose rebind --release {self.release} --pin COMMIT'")

    # 17 ------------------------------------------------------------------------------------
    def check_signatures(self) -> None:
        signing = section(self.manifest, "signing")
        identity = signing.get("certificate_identity")
        issuer = signing.get("certificate_oidc_issuer")
        try:
            from pipeline.infra.sigstore import verify_bundle  # offline, pinned trust
        except ImportError:
            verify_bundle = None
        for rel in signing.get("signed_files") or []:
            if not isinstance(rel, str):
                continue
            bundle = self.root / (rel + BUNDLE_SUFFIX)
            if not bundle.is_file():
                self.warn("signatures", "not signed yet (the release workflow signs after the ready commit is tagged)", file=rel + BUNDLE_SUFFIX)
                continue
            if verify_bundle is None:
                self.warn("signatures", "bundle check not available: the Sigstore verifier (pipeline.infra.sigstore) cannot be imported here", file=rel + BUNDLE_SUFFIX)
                continue
            try:
                verify_bundle(self.root / rel, bundle, identity=identity, issuer=issuer)
            except PipelineError as error:
                self.from_error("signatures", error, file=rel + BUNDLE_SUFFIX)


# -- provenance statements: the rules verify (tree copies) and audit (published statements) share ----------


def check_set_statement(statement, files: dict[str, str], row: dict[str, Any], *, origin: str, what: str) -> None:
    """A set's statement (formats/provenance.py) for a lane row: an asset-set build whose subjects are
    exactly `files` (name -> sha256), naming the row's lane, component tag and source commit."""
    from pipeline.errors import IntegrityError
    from pipeline.formats import provenance

    if statement.build_type != provenance.BUILD_TYPE_SET:
        raise IntegrityError("is not the statement of an asset set", file=origin, field="predicate.buildDefinition.buildType", found=statement.build_type, expected=provenance.BUILD_TYPE_SET)
    provenance.check_subjects(statement, files, origin=origin, what=what)
    _check_row_parameters(statement, row, origin=origin)


def check_image_statement(statement, row: dict[str, Any], *, origin: str) -> None:
    """The image's statement for the container row: an OCI-image build whose one subject is the
    image manifest digest the row binds (`oci_manifest_digest`), naming the row's lane, tag and commit."""
    from pipeline.errors import IntegrityError
    from pipeline.formats import provenance

    if statement.build_type != provenance.BUILD_TYPE_IMAGE:
        raise IntegrityError("is not the statement of an OCI image", file=origin, field="predicate.buildDefinition.buildType", found=statement.build_type, expected=provenance.BUILD_TYPE_IMAGE)
    digest = row.get("oci_manifest_digest")
    if not isinstance(digest, str) or sorted(statement.subjects.values()) != [digest.removeprefix("sha256:")]:
        raise IntegrityError(
            "the image provenance names other subjects than the row's image",
            file=origin,
            field="subject",
            found=sorted(statement.subjects.values()),
            expected=f"exactly one subject, the row's oci_manifest_digest {digest}",
            why="a statement about another image is no evidence for the image the release pins",
        )
    _check_row_parameters(statement, row, origin=origin)


def _check_row_parameters(statement, row: dict[str, Any], *, origin: str) -> None:
    from pipeline.formats import provenance

    tag, commit = row.get("release_tag"), row.get("source_commit")
    provenance.check_parameters(statement, lane=str(row.get("id")), tag=tag if isinstance(tag, str) else None, source_commit=commit if isinstance(commit, str) else None, origin=origin)


def evidence_problems(root: Path, release: str, derived: Derived, lanes: dict[str, Lane]) -> list:
    """The evidence checks of verify, run on a freshly derived manifest (compose refuses on any)."""
    checker = Verifier(root, release, lanes=lanes, require=None, check_pins=False)
    checker.manifest = derived.manifest or {}
    checker.derived = derived
    for check in (checker.check_checksums, checker.check_receipts, checker.check_images, checker.check_urls, checker.check_model):
        check()
    checker.git.close()
    return checker.problems.items


# -- the report as a document -------------------------------------------------------------

REPORT_TYPE = "omp_ninfer_verification_report"
REPORT_SCHEMA = 1


def tree_digests(root: Path, release: str) -> dict[str, str]:
    """{repository path: SHA-256} of every plain file of the tree, as verify read it (links skipped)."""
    tree = release_dir(root, release)
    if tree.is_symlink() or not tree.is_dir():
        return {}
    return {
        path.relative_to(root).as_posix(): sha256_bytes(path.read_bytes())
        for path in sorted(tree.rglob("*"))
        if path.is_file() and not path.is_symlink() and within(path, tree)
    }


def report_document(report: Report, *, require: str | None, check_pins: bool, tree: dict[str, str]) -> dict[str, Any]:
    """What verify records (`<dist>/verify/<release>.json`): the verdict, every error and warning,
    the checks asked for and the bytes observed.  No clock: the same tree gives the same bytes."""
    return {
        "artifact_type": REPORT_TYPE,
        "schema_version": REPORT_SCHEMA,
        **report.to_json(),
        "require": require,
        "check_pins": check_pins,
        "groups": list(report.groups),
        "blockers": report.blockers,
        "tree": dict(sorted(tree.items())),
    }


def resolve_release(root: Path, release: str | None) -> str:
    if release is not None:
        if not RELEASE_RE.fullmatch(release):
            raise UsageError("--release is not a product release name", field="--release", found=release, expected="vX.Y.Z or vX.Y.Z-beta.N (a folder under manifests/)")
        return release
    releases = list_releases(root)
    if not releases:
        raise UsageError("there is no release tree under manifests/ to verify", file=root / "manifests", fix="run 'python -m pipeline compose --release vX.Y.Z' first, or pass --root")
    return releases[-1]


def verify_release(
    root: Path,
    release: str | None = None,
    *,
    require: str | None = None,
    check_pins: bool = False,
    lanes_dir: Path | None = None,
) -> Report:
    release = resolve_release(root, release)
    return Verifier(root, release, lanes=load_lanes(lanes_dir), require=require, check_pins=check_pins).run()

