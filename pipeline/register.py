"""The artefact register: the one way stages hand results to each other.

Every output a stage makes is recorded as a typed entry (kind, name, lane,
path inside the output folder, SHA-256, size, kind-specific attributes) in
`<dist>/register.json`.  An entry whose attributes say `root: "repository"`
names a file of the repository instead (the release tree compose writes under
`manifests/`): its path is relative to the repository root the register was
opened with (`Context.open(..., root=PATH)`), never `..` or absolute, and it is
re-hashed like any other.  A later stage asks the register for "the package
archive of lane X" and gets exactly one entry, whose bytes are re-hashed
before use; it never globs folders.  The register also remembers, per stage
and lane, the fingerprint of the inputs of its last successful run, so a
re-run with unchanged inputs is a no-op.  Beside that one fingerprint a record
keeps what `python -m pipeline status` needs to say why a stage is stale
without running it: the digest of each input, the digest of each file of the
stage's code, the entries it read (name -> SHA-256) and its lane.  The last
refusal of a stage key (its error message, class and exit code) is kept in the
refusal log `refusals.json` beside the register until the key next succeeds: a
refusal never changes the register itself, so "nothing written" stays true of
every refused stage but for that one log.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pipeline.errors import InputError, IntegrityError, UsageError, redact_document
from pipeline.util import ui
from pipeline.util.fs import exclusive_lock, remove_leftovers
from pipeline.util.hashing import is_sha256_hex, sha256_file
from pipeline.util.jsonio import canonical_bytes, expect_list, expect_object, read_json_object, write_json
from pipeline.util.safepath import relpath_problem, safe_relative

REGISTER_FILE = "register.json"
REFUSALS_FILE = "refusals.json"  # the refusal log (status shows each stage's last refusal)
REFUSALS_TYPE = "omp_ninfer_refusal_log"
LOCK_FILE = ".register.lock"
REGISTER_TYPE = "omp_ninfer_artifact_register"
MAX_REFUSAL_CHARS = 2000  # a refusal's message as the register keeps it (the full one was printed when it happened)
REPOSITORY = "repository"  # attrs["root"] of an entry naming a file of the repository, not of the dist

# kind -> attributes every entry of that kind must carry
KINDS: dict[str, frozenset[str]] = {
    "binary": frozenset({"binary"}),
    "build-identity": frozenset(),
    "source-tar": frozenset({"commit"}),
    # what the build's toolchain gives later stages (pipeline/formats/toolchain_record.py)
    "toolchain": frozenset({"toolchain_kind", "toolchain_root", "library_dir"}),  # not "root": that names where an entry lives
    "runtime-library": frozenset({"library", "origin"}),
    # a redistributable's own licence text given with it to build --prebuilt (DirectStorage's LICENSE.txt)
    "licence-text": frozenset({"licence_file", "redistributables"}),
    "package-archive": frozenset({"component_tag"}),
    "source-archive": frozenset({"component_tag"}),
    "spdx-sbom": frozenset({"component_tag"}),
    "cdx-sbom": frozenset({"component_tag"}),
    "inner-checksums": frozenset({"component_tag"}),
    "outer-checksums": frozenset({"component_tag"}),
    "package-build-receipt": frozenset({"component_tag"}),
    # SLSA provenance beside a closed set or image (formats/provenance.py); never a member of the set.
    "provenance": frozenset({"component_tag", "build_type"}),
    # rebuild --verify's SLSA verification summary (formats/vsa.py), in the rebuild's own work folder.
    "verification-summary": frozenset({"component_tag", "result"}),
    "support-script": frozenset({"component_tag"}),
    "oci-layout": frozenset({"manifest_digest"}),
    "image-sbom": frozenset({"manifest_digest"}),
    "publication-receipt": frozenset({"image_reference"}),
    "lane-receipt": frozenset({"status", "component_tag"}),
    # compose: every file of manifests/<release>/ (root "repository"), with its role in the tree
    "release-tree": frozenset({"release", "root", "role"}),
    # verify: the report of one verification of a tree (pipeline/formats/release/contract.py)
    "verification-report": frozenset({"release", "valid"}),
    "signature-bundle": frozenset({"signed_name"}),
    # what an audit of a published release found (pipeline/stages/audit/, pipeline/formats/audit_report.py)
    "audit-report": frozenset({"manifest", "release", "passed"}),
    "benchmark": frozenset(),
    "verifier-wheel": frozenset({"commit", "version"}),
    "verifier-sdist": frozenset({"commit", "version"}),
    "verifier-requirements": frozenset({"commit", "version"}),  # the auditor's hash-locked requirements
    "verifier-checksums": frozenset({"commit", "version"}),
    # the lane's cut as `cut` recorded it (pipeline/stages/cut.py)
    "cut": frozenset({"component_tag", "n", "commit"}),
    # publish: the reviewed plan, and GitHub's release once published (pipeline/formats/publication_plan.py)
    "publication-plan": frozenset({"plan_sha256", "tag", "repository"}),
    "release-publication": frozenset({"plan_sha256", "tag", "repository", "release_id"}),
    # documented-route acceptance (pipeline/stages/accept/)
    "acceptance-bundle": frozenset({"route", "bundle_kind", "release"}),
    "acceptance-receipt": frozenset({"route", "bundle_sha256", "status"}),
    "acceptance-record": frozenset({"release", "status"}),
}


@dataclass(frozen=True)
class Artifact:
    kind: str
    name: str
    path: str  # POSIX path relative to the output folder
    sha256: str
    size: int
    stage: str
    lane: str | None = None
    attrs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown artefact kind {self.kind!r}")
        missing = KINDS[self.kind] - set(self.attrs)
        if missing:
            raise ValueError(f"artefact {self.name!r} of kind {self.kind} lacks attributes {sorted(missing)}")
        if Path(self.path).is_absolute() or ".." in Path(self.path).parts:
            raise ValueError(f"artefact path must stay inside the output folder: {self.path!r}")
        root = self.attrs.get("root")
        if root is not None and root != REPOSITORY:
            raise ValueError(f"artefact {self.name!r} names an unknown root {root!r} (only {REPOSITORY!r}, or none for the output folder)")
        if root == REPOSITORY and relpath_problem(self.path, hidden=True) is not None:
            raise ValueError(f"artefact {self.name!r} path {self.path!r} {relpath_problem(self.path, hidden=True)}")

    @property
    def in_repository(self) -> bool:
        return self.attrs.get("root") == REPOSITORY

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


_ENTRY_FIELDS: dict[str, tuple[type, ...]] = {
    "kind": (str,),
    "name": (str,),
    "path": (str,),
    "sha256": (str,),
    "size": (int,),
    "stage": (str,),
    "lane": (str, type(None)),
    "attrs": (dict,),
}
_SHAPE_FIX = "the register is written only by the stages: remove the output folder (or this file) and run the stages again"


def _type_names(types: tuple[type, ...]) -> str:
    names = {str: "a string", int: "a whole number", dict: "an object", list: "a list", type(None): "null"}
    return " or ".join(names[t] for t in types)


_REFUSALS_FIX = f"remove {REFUSALS_FILE} from the output folder (it only records refusals for `status`); the next refusal writes it again"


class Register:
    def __init__(self, dist: Path, *, repo_root: Path | None = None) -> None:
        self.dist = dist
        self.repo_root = repo_root  # where entries with root "repository" live (None: such entries cannot be read)
        self.file = dist / REGISTER_FILE
        self.refusals_file = dist / REFUSALS_FILE
        self.lock_file = dist / LOCK_FILE
        self.artifacts: dict[str, Artifact] = {}
        self.stages: dict[str, dict[str, Any]] = {}
        self.refusals: dict[str, dict[str, Any]] = {}
        # name -> SHA-256 of every entry handed out by one() or checked by verified_path() while a stage runs
        self.read_log: dict[str, str] = {}
        self._load_all()

    def _load_all(self) -> None:
        if self.file.exists():
            self._load()
        if self.refusals_file.exists():
            self._load_refusals()

    def _bad(self, what: str, field: str, found: Any, expected: str) -> InputError:
        return InputError(what, file=self.file, field=field, found=found, expected=expected, fix=_SHAPE_FIX)

    def _load(self) -> None:
        data = read_json_object(self.file)
        if data.get("artifact_type") != REGISTER_TYPE or data.get("schema_version") != 1:
            raise InputError(
                "is not an artefact register of schema 1",
                file=self.file,
                field="artifact_type",
                found=data.get("artifact_type"),
                expected=REGISTER_TYPE,
                fix="remove the output folder or pass another --dist",
            )
        # Wrong JSON types are named in the strict reader's words (pipeline/util/jsonio.py), with the fix.
        entries = expect_list(data.get("artifacts", []), source=self.file, field="artifacts", expected="a list of entry objects", fix=_SHAPE_FIX)
        artifacts: dict[str, Artifact] = {}
        for index, entry in enumerate(entries):
            where = f"artifacts[{index}]"
            expect_object(entry, source=self.file, field=where, expected="an object with " + ", ".join(_ENTRY_FIELDS), fix=_SHAPE_FIX)
            for key, types in _ENTRY_FIELDS.items():
                value = entry.get(key)
                if key not in entry or not isinstance(value, types) or isinstance(value, bool):
                    raise self._bad("has an artefact entry with a missing or mistyped field", f"{where}.{key}", value, _type_names(types))
            extra = sorted(set(entry) - set(_ENTRY_FIELDS))
            if extra:
                raise self._bad("has an artefact entry with unknown fields", f"{where}.{extra[0]}", extra, ", ".join(_ENTRY_FIELDS))
            if not is_sha256_hex(entry["sha256"]) or entry["size"] < 0:
                field_name = "sha256" if not is_sha256_hex(entry["sha256"]) else "size"
                raise self._bad("has an artefact entry with an impossible value", f"{where}.{field_name}", entry[field_name], "64 lowercase hex digits and a size >= 0")
            try:
                artifact = Artifact(**entry)
            except (TypeError, ValueError) as exc:
                raise InputError(f"entry is malformed: {exc}", file=self.file, field=where, fix=_SHAPE_FIX) from None
            if artifact.name in artifacts:
                raise self._bad("lists an artefact name twice", f"{where}.name", artifact.name, "each name once")
            artifacts[artifact.name] = artifact
        stages = expect_object(data.get("stages", {}), source=self.file, field="stages", expected="an object {stage key: {fingerprint, outputs}}", fix=_SHAPE_FIX)
        for key, record in stages.items():
            where = f"stages.{key}"
            expect_object(record, source=self.file, field=where, expected="an object {fingerprint, outputs}", fix=_SHAPE_FIX)
            outputs = expect_list(record.get("outputs"), source=self.file, field=f"{where}.outputs", expected="a list of artefact names", fix=_SHAPE_FIX)
            if not all(isinstance(name, str) for name in outputs):
                raise self._bad("names outputs that are not strings", f"{where}.outputs", outputs, "a list of artefact names")
            if not isinstance(record.get("fingerprint"), str):
                raise self._bad("has a stage record without a fingerprint", f"{where}.fingerprint", record.get("fingerprint"), "a string")
            self._check_facts(record, where)
        self.artifacts = artifacts
        self.stages = {key: dict(record) for key, record in stages.items()}

    def _load_refusals(self) -> None:
        data = read_json_object(self.refusals_file)
        def bad(what: str, field: str, found: Any, expected: str) -> InputError:
            return InputError(what, file=self.refusals_file, field=field, found=found, expected=expected, fix=_REFUSALS_FIX)

        if data.get("artifact_type") != REFUSALS_TYPE or data.get("schema_version") != 1:
            raise bad("is not a refusal log of schema 1", "artifact_type", data.get("artifact_type"), REFUSALS_TYPE)
        refusals = expect_object(data.get("refusals", {}), source=self.refusals_file, field="refusals", expected="an object {stage key: {message, class, exit_code, lane}}", fix=_REFUSALS_FIX)
        for key, refusal in refusals.items():
            expect_object(refusal, source=self.refusals_file, field=f"refusals.{key}", expected="an object {message, class, exit_code, lane}", fix=_REFUSALS_FIX)
            if not isinstance(refusal.get("message"), str) or not isinstance(refusal.get("class"), str):
                raise bad("has a refusal without its message or class", f"refusals.{key}", refusal, "strings message and class")
            code = refusal.get("exit_code")
            if not isinstance(code, int) or isinstance(code, bool) or not 0 < code < 256:
                raise bad("has a refusal with an impossible exit code", f"refusals.{key}.exit_code", code, "an integer 1..255")
            if refusal.get("lane") is not None and not isinstance(refusal.get("lane"), str):
                raise bad("has a refusal whose lane is not a string", f"refusals.{key}.lane", refusal.get("lane"), "a lane id or null")
        self.refusals = {key: dict(refusal) for key, refusal in refusals.items()}

    def _check_facts(self, record: dict[str, Any], where: str) -> None:
        """A record's explanations (lane, inputs, code, read: `stage.run_facts`) are optional, but when present
        they have their shape: `status` compares them and hashes the code files they name."""
        if record.get("lane") is not None and not isinstance(record.get("lane"), str):
            raise self._bad("has a stage record whose lane is not a string", f"{where}.lane", record.get("lane"), "a lane id or null")
        for name in ("inputs", "code", "read"):
            if name not in record:
                continue
            facts = expect_object(record[name], source=self.file, field=f"{where}.{name}", expected="an object {name: digest}", fix=_SHAPE_FIX)
            for key, digest in facts.items():
                if not is_sha256_hex(digest):
                    raise self._bad("has a stage record with a malformed digest", f"{where}.{name}.{key}", digest, "64 lowercase hex digits")
                problem = relpath_problem(key) if name == "code" else None
                if problem:  # status hashes these files under the package: never a path out of it
                    raise self._bad(f"names a code file that {problem}", f"{where}.code", key, "a path under pipeline/")

    def reload(self) -> None:
        """Read the register from disk again (what other processes recorded meanwhile)."""
        self.artifacts, self.stages, self.refusals = {}, {}, {}
        self._load_all()

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Exclusive hold on the register for a read-modify-write, across processes.

        Stages on one dist may run at once (two lanes in two shells); each
        record re-reads the register under this lock and merges by stage key,
        so no update is lost.  While it is held no one else writes the
        register, so a temporary file beside it is a dead writer's: removed.
        """
        with exclusive_lock(self.lock_file, waiting=f"another stage is recording in {self.file}; waiting", on_wait=ui.info):
            remove_leftovers(self.dist, (f".{REGISTER_FILE}.*.tmp",))
            yield

    # -- writing ---------------------------------------------------------
    def make(self, kind: str, path: Path, *, stage: str, lane: str | None, name: str | None = None, root: str | None = None, **attrs: Any) -> Artifact:
        """Hash a file already written under dist (or, with root="repository", under the repository) and describe it."""
        if root == REPOSITORY:
            relative = path.resolve().relative_to(self._repository().resolve()).as_posix()
            attrs["root"] = REPOSITORY
        elif root is not None:
            raise ValueError(f"unknown root {root!r}")
        else:
            relative = path.resolve().relative_to(self.dist.resolve()).as_posix()
        return Artifact(
            kind=kind,
            name=name or relative,
            path=relative,
            sha256=sha256_file(path),
            size=path.stat().st_size,
            stage=stage,
            lane=lane,
            attrs=attrs,
        )

    def record_stage(self, key: str, fingerprint: str, outputs: Iterable[Artifact], *, facts: dict[str, Any] | None = None) -> None:
        """Record a successful run of `key`; `facts` are the record's explanations (lane, inputs, code, read)."""
        outputs = list(outputs)
        with self.locked():
            # Merge into what is on disk now, not into what this process read at its start:
            # another stage may have recorded its own key meanwhile, and that must be kept.
            self.reload()
            # A stage's new outputs replace whatever it wrote before for the same key, and only that.
            for name in self.stages.get(key, {}).get("outputs", []):
                self.artifacts.pop(name, None)
            for artifact in outputs:
                self.artifacts[artifact.name] = artifact
            self.stages[key] = {**(facts or {}), "fingerprint": fingerprint, "outputs": sorted(a.name for a in outputs)}
            # A success answers the refusals of its own key and of the same stage for the same lane under
            # another key (publish:component-<old tag>, push:<lane>:<other target>): status shows the last word.
            lane, kind = (facts or {}).get("lane"), key.split(":", 1)[0]
            answered = [k for k, r in self.refusals.items() if k == key or (lane and r.get("lane") == lane and k.split(":", 1)[0] == kind)]
            for refused in answered:
                del self.refusals[refused]
            self._write()
            if answered:
                self._write_refusals()

    def record_refusal(self, key: str, *, message: str, label: str, exit_code: int, lane: str | None) -> None:
        """Remember that `key` refused (its last successful record, if any, is kept as it was).  The message is
        the rendered error (secrets already redacted), cut to MAX_REFUSAL_CHARS: a refusal quoting a huge
        found value must not grow the register every stage re-reads."""
        if len(message) > MAX_REFUSAL_CHARS:
            message = message[: MAX_REFUSAL_CHARS - 1] + "\u2026"
        with self.locked():
            self.reload()
            self.refusals[key] = {"class": label, "exit_code": exit_code, "lane": lane, "message": message}
            self._write_refusals()

    def save(self) -> None:
        with self.locked():
            self._write()

    def _write(self) -> None:
        document = {
            "artifact_type": REGISTER_TYPE,
            "schema_version": 1,
            "artifacts": [self.artifacts[name].to_json() for name in sorted(self.artifacts)],
            "stages": self.stages,
        }
        write_json(self.file, redact_document(document))  # no URL's password in the record, whatever a stage named

    def _write_refusals(self) -> None:
        """The refusal log, only while it holds a refusal (a dist whose stages all answered has none)."""
        if not self.refusals:
            self.refusals_file.unlink(missing_ok=True)
            return
        write_json(self.refusals_file, redact_document({"artifact_type": REFUSALS_TYPE, "schema_version": 1, "refusals": self.refusals}))

    # -- reading ---------------------------------------------------------
    def query(self, kind: str, *, lane: str | None = None, **attrs: Any) -> list[Artifact]:
        return [
            artifact
            for name, artifact in sorted(self.artifacts.items())
            if artifact.kind == kind
            and (lane is None or artifact.lane == lane)
            and all(artifact.attrs.get(key) == value for key, value in attrs.items())
        ]

    def one(self, kind: str, *, lane: str | None = None, needed_by: str, produced_by: str, **attrs: Any) -> Artifact:
        found = self.query(kind, lane=lane, **attrs)
        where = f" for lane {lane}" if lane else ""
        if not found:
            raise InputError(
                f"the register has no {kind} entry{where}",
                file=self.file,
                why=f"{needed_by} needs the output of the {produced_by} stage",
                fix=f"run the {produced_by} stage first with the same --dist",
            )
        if len(found) > 1:
            raise InputError(
                f"the register has {len(found)} {kind} entries{where}, expected exactly one",
                file=self.file,
                found=[a.name for a in found],
            )
        self.read_log[found[0].name] = found[0].sha256
        return found[0]

    def _repository(self) -> Path:
        if self.repo_root is None:
            raise UsageError(
                "the register was opened without a repository root, but an entry names a file of the repository",
                file=self.file,
                why="entries with root 'repository' (the release tree) are relative to the repository, not to the output folder",
                fix="open it through the stage context (Context.open(dist, root=REPOSITORY)) or pass --root",
            )
        return self.repo_root

    def path_of(self, artifact: Artifact) -> Path:
        if artifact.in_repository:
            # The same gate as every name from data: no '..', no absolute path, no link out of the repository.
            return safe_relative(artifact.path, self._repository(), file=self.file, field=f"{artifact.name}.path", hidden=True, what="the repository")
        return self.dist / artifact.path

    def verified_path(self, artifact: Artifact) -> Path:
        """The artefact's file after checking its bytes still match the register."""
        path = self.path_of(artifact)
        self.read_log[artifact.name] = artifact.sha256
        if not path.exists():
            raise IntegrityError(
                f"registered artefact {artifact.name!r} is missing",
                file=path,
                fix=f"re-run the {artifact.stage} stage",
            )
        actual = sha256_file(path)
        if actual != artifact.sha256:
            raise IntegrityError(
                f"registered artefact {artifact.name!r} changed on disk",
                file=path,
                found=actual,
                expected=artifact.sha256,
                why="a file in the output folder was edited or replaced after its stage recorded it",
                fix=f"re-run the {artifact.stage} stage, or find out who changed the file",
            )
        return path

    def stage_is_current(self, key: str, fingerprint: str) -> bool:
        record = self.stages.get(key)
        if not record or record.get("fingerprint") != fingerprint:
            return False
        for name in record.get("outputs", []):
            artifact = self.artifacts.get(name)
            if artifact is None:
                return False
            path = self.path_of(artifact)
            if not path.exists() or path.stat().st_size != artifact.size or sha256_file(path) != artifact.sha256:
                return False
        return True

    def outputs_of(self, key: str) -> list[Artifact]:
        return [self.artifacts[name] for name in self.stages.get(key, {}).get("outputs", []) if name in self.artifacts]


def fingerprint(inputs: Any) -> str:
    from pipeline.util.hashing import sha256_bytes

    return sha256_bytes(canonical_bytes(json.loads(json.dumps(inputs, default=str))))
