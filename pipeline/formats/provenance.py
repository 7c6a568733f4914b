"""SLSA provenance of an asset set and of the OCI image: in-toto Statement v1, SLSA Provenance v1.

One statement per lane's closed asset set (`<package root>.provenance.intoto.json`)
and one per OCI image (`<image>-<tag>.image.provenance.intoto.json`), written
beside the set (under `dist/<lane>/attestations/`), never inside it: the
closed sets keep their 11 and 7 files, and their outer `SHA256SUMS` keeps
binding exactly those (a statement cannot list its own digest, so it cannot be
a member of the set it describes).  The register records it as its own kind,
`provenance`.  docs/provenance.md documents the build types and every field.

- `subject`: every file of the closed set (the outer `SHA256SUMS` included),
  or the image manifest, each with its SHA-256, sorted by name.
- `buildDefinition.externalParameters`: exactly `lane`, `component_tag`,
  `source_repository`, `source_commit` (what a verifier must check; a reader
  refuses any other key).
- `resolvedDependencies`: the source commit and tree, the `git archive` tar,
  every pinned toolchain wheel (URL, SHA-256, from runtime/toolchain.lock.json),
  the lane file and the toolchain lock by SHA-256, each build-host dependency
  with its version, and for the image the base image by digest and the binary
  archive.
- `runDetails.builder.id`: the release workflow's identity in GitHub Actions
  (the same string as its Sigstore certificate identity), else a local
  builder; `byproducts`: the packaged build identity, the SBOMs and the inner
  sums.  No clock time appears anywhere: the bytes are a function of the set.

Statements are canonical JSON (sorted keys, indent 2, LF).  `read_statement`
parses untrusted bytes strictly and `check_subjects` compares the subjects
with the bound assets; DSSE signing and verification live in pipeline/sign.py.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pipeline import __version__
from pipeline.errors import InputError, IntegrityError
from pipeline.formats.components import VERSION_WORD, is_version_word
from pipeline.formats.lanes import HOST_DEPENDENCY_KINDS, HOST_DEPENDENCY_NAME
from pipeline.formats.release.names import PROVENANCE_SUFFIX
from pipeline.util.hashing import is_commit_hex, is_sha256_hex
from pipeline.util.jsonio import canonical_bytes, parse_strict

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
DOCS = "https://github.com/alphastorm/omp-ninfer/blob/main/docs/provenance.md"
BUILD_TYPE_SET = f"{DOCS}#asset-set-v1"
BUILD_TYPE_IMAGE = f"{DOCS}#oci-image-v1"
BUILD_TYPES = (BUILD_TYPE_SET, BUILD_TYPE_IMAGE)
LOCAL_BUILDER = f"{DOCS}#local-builder"
SUFFIX = PROVENANCE_SUFFIX  # one spelling: the release tree copies statements under it too
IMAGE_SUFFIX = ".image" + SUFFIX
FOLDER = "attestations"
EXTERNAL_KEYS = ("component_tag", "lane", "source_commit", "source_repository")
MAX_BYTES = 4 << 20

_WORKFLOW_REF = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+/\.github/workflows/[A-Za-z0-9_./-]+@refs/[A-Za-z0-9_./+-]+")
_SERVER = re.compile(r"https://[A-Za-z0-9.-]+(:[0-9]+)?")
_NUMBER = re.compile(r"[0-9]{1,20}")


def set_statement_name(package_root: str) -> str:
    return package_root + SUFFIX


def image_statement_name(image_name: str, component_tag: str) -> str:
    return f"{image_name}-{component_tag}{IMAGE_SUFFIX}"


def builder(environ: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """`runDetails` of this run: the release workflow in GitHub Actions, a local builder elsewhere.

    In Actions the id is `<server>/<owner>/<repo>/.github/workflows/<file>@<ref>`
    (GITHUB_SERVER_URL + GITHUB_WORKFLOW_REF), the certificate identity the
    sign job's Sigstore bundle carries, and the invocation is the run attempt.
    """
    version = {"omp-ninfer-pipeline": __version__}
    if environ.get("GITHUB_ACTIONS") != "true":
        return {"builder": {"id": LOCAL_BUILDER, "version": version}}
    server = environ.get("GITHUB_SERVER_URL", "")
    ref = environ.get("GITHUB_WORKFLOW_REF", "")
    repository = environ.get("GITHUB_REPOSITORY", "")
    if not _SERVER.fullmatch(server) or not _WORKFLOW_REF.fullmatch(ref) or not ref.startswith(repository + "/"):
        raise InputError(
            "the GitHub Actions environment does not name a workflow this builder can state",
            field="GITHUB_SERVER_URL, GITHUB_REPOSITORY, GITHUB_WORKFLOW_REF",
            found=f"{server!r}, {repository!r}, {ref!r}",
            expected="https://<host>, <owner>/<repo>, <owner>/<repo>/.github/workflows/<file>@refs/...",
        )
    details: dict[str, Any] = {"builder": {"id": f"{server}/{ref}", "version": version}}
    run_id, attempt = environ.get("GITHUB_RUN_ID", ""), environ.get("GITHUB_RUN_ATTEMPT", "1")
    if _NUMBER.fullmatch(run_id) and _NUMBER.fullmatch(attempt):
        details["metadata"] = {"invocationId": f"{server}/{repository}/actions/runs/{run_id}/attempts/{attempt}"}
    return details


def descriptor(name: str, *, sha256: str | None = None, uri: str | None = None, digest: dict[str, str] | None = None, annotations: dict[str, Any] | None = None) -> dict[str, Any]:
    """An in-toto ResourceDescriptor (at least a URI or a digest)."""
    out: dict[str, Any] = {"name": name}
    digests = dict(digest or {})
    if sha256 is not None:
        if not is_sha256_hex(sha256):
            raise ValueError(f"not a SHA-256 for {name}: {sha256!r}")
        digests["sha256"] = sha256
    if digests:
        out["digest"] = digests
    if uri:
        out["uri"] = uri
    kept = {k: v for k, v in sorted((annotations or {}).items()) if v is not None}
    if kept:
        out["annotations"] = kept
    if "digest" not in out and "uri" not in out:
        raise ValueError(f"resource {name} has neither a digest nor a URI")
    return out


def source_descriptors(source: Mapping[str, Any], repository: str, source_tar_sha256: str | None) -> list[dict[str, Any]]:
    """The source commit, its tree (of the exported subfolder) and the `git archive` tar."""
    commit, tree = source.get("commit"), source.get("tree")
    if not is_commit_hex(commit) or not is_commit_hex(tree):
        raise InputError("the build identity names no full source commit and tree", field="source", found={"commit": commit, "tree": tree})
    uri = f"git+{repository}@{commit}"
    subdir = source.get("subdir") or None
    out = [
        descriptor("source-commit", uri=uri, digest={"gitCommit": commit}, annotations={"kind": source.get("kind")}),
        descriptor("source-tree", uri=uri + (f"#{subdir}" if subdir else ""), digest={"gitTree": tree}, annotations={"subdir": subdir}),
    ]
    if source_tar_sha256:
        out.append(descriptor("source-tar", sha256=source_tar_sha256, annotations={"format": "git archive --format=tar", "commit_time": source.get("commit_time")}))
    return out


HOST_ANNOTATIONS = ("kind", "version", "min_version", "origin", "debian_package", "debian_version", "file", "file_sha256", "license", "license_source")
# Annotations are scalars: a recorded vcpkg port and upstream release are spelled out flat (and read back by recorded_host).
_VCPKG_KEYS = ("port", "version", "port_version", "triplet")
_RELEASE_KEYS = ("project", "version", "source")


def host_annotations(entry: Mapping[str, Any]) -> dict[str, Any]:
    """A build-host dependency record (build-identity.json's `host_dependencies`) as the statement annotates it: every
    recorded field as a scalar, so `rebuild --verify` compares this host's record with the statement's key by key."""
    out = {k: entry.get(k) for k in HOST_ANNOTATIONS}
    vcpkg, release = entry.get("vcpkg") or {}, entry.get("release") or {}
    out |= {f"vcpkg_{k}": vcpkg.get(k) for k in _VCPKG_KEYS}
    out |= {f"release_{k}": release.get(k) for k in _RELEASE_KEYS}
    libraries = entry.get("libraries") or []
    out["libraries"] = ", ".join(f"{lib['file']} (soname {lib['soname']}, link interface sha256 {lib['link_sha256']})" for lib in libraries) or None
    return out


def host_descriptors(host_dependencies: list[dict[str, Any]] | None, os_release: Mapping[str, str] | None) -> list[dict[str, Any]]:
    """Each build-host dependency found by the preflight: where it came from (a Debian package or vcpkg port as a
    purl; a local build by its files' SHA-256), its version, upstream release and licence.  Never a host path."""
    from packageurl import PackageURL

    from pipeline.formats.components import host_purl

    out = []
    distribution = str((os_release or {}).get("ID") or "debian").lower()
    for entry in host_dependencies or []:
        # The purl both SBOMs give the dependency (canonical, percent-encoded), else a generic one without a namespace.
        uri = host_purl(entry, distribution) or PackageURL(type="generic", name=entry["name"], version=entry["version"]).to_string()
        annotations = host_annotations(entry)
        out.append(descriptor(f"build-host:{entry['kind']}:{entry['name']}", uri=uri, sha256=entry.get("file_sha256") if entry.get("origin") == "local" else None, annotations=annotations))
    return out


def environment_descriptors(environment: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The pinned build environment the build ran in (container by digest, Debian snapshot), where it says so."""
    from pipeline.formats.build_environment import valid_recorded

    recorded = environment.get("build_environment")
    if recorded is None:
        return []
    if not valid_recorded(recorded):
        raise InputError("the build identity's build environment is malformed", field="host_environment.build_environment", found=recorded)
    return [
        descriptor("build-environment:container", uri=f"oci://{recorded['container']}", sha256=recorded["digest"].removeprefix("sha256:"), annotations={"role": "job container of the build"}),
        descriptor("build-environment:debian-snapshot", uri=recorded["debian_archive"], annotations={"date": recorded["debian_snapshot"], "role": "the archive every host package came from"}),
    ]


def statement(
    *,
    subjects: Mapping[str, str],
    build_type: str,
    external: Mapping[str, str],
    internal: Mapping[str, Any],
    dependencies: list[dict[str, Any]],
    byproducts: list[dict[str, Any]],
    run_details: Mapping[str, Any],
) -> dict[str, Any]:
    if build_type not in BUILD_TYPES:
        raise ValueError(f"unknown build type {build_type!r}")
    if tuple(sorted(external)) != EXTERNAL_KEYS:
        raise ValueError(f"external parameters must be exactly {EXTERNAL_KEYS}, not {sorted(external)}")
    if not subjects:
        raise ValueError("a statement needs at least one subject")
    names = [d["name"] for d in dependencies]
    if len(set(names)) != len(names):
        raise ValueError(f"resolved dependencies repeat a name: {names}")
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": name, "digest": {"sha256": digest}} for name, digest in sorted(subjects.items())],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "buildDefinition": {
                "buildType": build_type,
                "externalParameters": dict(external),
                "internalParameters": dict(internal),
                "resolvedDependencies": dependencies,
            },
            "runDetails": {**run_details, "byproducts": byproducts},
        },
    }


def statement_bytes(document: dict[str, Any]) -> bytes:
    data = canonical_bytes(document, indent=2)
    read_statement(data, origin="the statement being written")  # never write what a reader would refuse
    return data


# -- reading ---------------------------------------------------------------------


@dataclass(frozen=True)
class Statement:
    data: bytes
    document: dict[str, Any]
    subjects: dict[str, str]  # name -> sha256
    build_type: str
    external: dict[str, str]
    builder_id: str

    def dependency(self, name: str) -> dict[str, Any] | None:
        for item in self.document["predicate"]["buildDefinition"]["resolvedDependencies"]:
            if item.get("name") == name:
                return item
        return None

    def dependencies(self) -> list[dict[str, Any]]:
        return list(self.document["predicate"]["buildDefinition"]["resolvedDependencies"])


def _need(condition: bool, what: str, *, origin: str, field: str, found: Any = None, expected: str | None = None) -> None:
    if not condition:
        raise InputError(what, file=origin, field=field, found=found, expected=expected or "see docs/provenance.md")


MAX_TEXT = 4096  # a name, URI, id or annotation string
_SCALAR = (str, int, float, bool, type(None))
# The annotations the pipeline reads back (archive_claim), with their types; null means absent.
_ANNOTATION_TYPES: dict[tuple[str, str], tuple[type, ...]] = {
    ("source-commit", "kind"): (str,),
    ("source-tree", "subdir"): (str,),
    ("source-tar", "commit_time"): (int,),
    ("source-tar", "format"): (str,),
}
# internalParameters the writer records (`_common`, `make_set_statement`), each with its types (null allowed).
_INTERNAL_TYPES: dict[str, tuple[type, ...]] = {
    "asset_platform": (str,),
    "build_profile": (str,),
    "build_route": (str,),
    "cut": (dict,),
    "cuda_architecture": (str, int),
    "cuda_toolkit": (str,),
    "source_date_epoch": (int,),
    "toolchain_kind": (str,),
    "host_environment": (dict,),
    "package_layout": (str,),
}


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "a number", float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _type_names(types: tuple[type, ...]) -> str:
    return " or ".join(_kind(t()) if t is not type(None) else "null" for t in types)


def _check_descriptors(items: Any, *, origin: str, where: str) -> None:
    """A list of in-toto ResourceDescriptors: every field of each type-checked, names unique."""
    _need(isinstance(items, list), "must be an array of resource descriptors", origin=origin, field=where, found=_kind(items))
    seen: set[str] = set()
    for index, item in enumerate(items):
        at = f"{where}[{index}]"
        _need(isinstance(item, dict) and set(item) <= {"name", "uri", "digest", "annotations"} and "name" in item and ("uri" in item or "digest" in item),
              "is not a resource descriptor {name, uri and/or digest, annotations}", origin=origin, field=at, found=_kind(item) if not isinstance(item, dict) else sorted(item))
        name = item["name"]
        _need(isinstance(name, str) and 0 < len(name) <= MAX_TEXT, "must be a non-empty string", origin=origin, field=f"{at}.name", found=_kind(name))
        _need(name not in seen, "names a dependency twice", origin=origin, field=f"{at}.name", found=name)
        seen.add(name)
        if "uri" in item:
            _need(isinstance(item["uri"], str) and 0 < len(item["uri"]) <= MAX_TEXT, "must be a non-empty string", origin=origin, field=f"{at}.uri", found=_kind(item["uri"]))
        if "digest" in item:
            digest = item["digest"]
            _need(isinstance(digest, dict) and bool(digest) and all(isinstance(v, str) and re.fullmatch(r"[0-9a-f]{40,64}", v) for v in digest.values()) and all(re.fullmatch(r"[A-Za-z0-9_-]{1,32}", k) for k in digest),
                  "has a malformed digest", origin=origin, field=f"{at}.digest", found=digest if not isinstance(digest, dict) else sorted(digest), expected="an object of algorithm -> lowercase hex")
        if "annotations" in item:
            annotations = item["annotations"]
            _need(isinstance(annotations, dict), "must be an object", origin=origin, field=f"{at}.annotations", found=_kind(annotations))
            for key, value in annotations.items():
                _need(isinstance(value, _SCALAR) and (not isinstance(value, str) or len(value) <= MAX_TEXT), "must be a string, number, boolean or null", origin=origin, field=f"{at}.annotations.{key}", found=_kind(value))
                types = _ANNOTATION_TYPES.get((name, key))
                if types is not None and value is not None:
                    _need(isinstance(value, types) and not (isinstance(value, bool) and bool not in types), f"must be {_type_names(types)}", origin=origin, field=f"{at}.annotations.{key}", found=_kind(value))


def _check_internal(internal: dict[str, Any], *, origin: str) -> None:
    """The internal parameters the pipeline writes, by type (null where a build had none); others are the builder's own."""
    for key, types in _INTERNAL_TYPES.items():
        value = internal.get(key)
        if value is not None:
            _need(isinstance(value, types) and not isinstance(value, bool), f"must be {_type_names(types)} or null", origin=origin, field=f"predicate.buildDefinition.internalParameters.{key}", found=_kind(value))


def read_statement(data: bytes, *, origin: str) -> Statement:
    """Parse and check a provenance statement from untrusted bytes; every defect names the field."""
    document = parse_strict(data, file=origin, max_bytes=MAX_BYTES)
    _need(isinstance(document, dict), "is not a JSON object", origin=origin, field="(document)")
    _need(set(document) == {"_type", "subject", "predicateType", "predicate"}, "has other top-level keys than an in-toto statement", origin=origin, field="(document)", found=sorted(document), expected="_type, subject, predicateType, predicate")
    _need(document["_type"] == STATEMENT_TYPE, "is not an in-toto Statement v1", origin=origin, field="_type", found=document["_type"], expected=STATEMENT_TYPE)
    _need(document["predicateType"] == PREDICATE_TYPE, "is not SLSA Provenance v1", origin=origin, field="predicateType", found=document["predicateType"], expected=PREDICATE_TYPE)
    subjects: dict[str, str] = {}
    raw_subjects = document["subject"]
    _need(isinstance(raw_subjects, list) and bool(raw_subjects), "has no subjects", origin=origin, field="subject")
    for index, item in enumerate(raw_subjects):
        where = f"subject[{index}]"
        _need(isinstance(item, dict) and set(item) == {"name", "digest"}, "is not {name, digest}", origin=origin, field=where, found=item)
        name, digest = item["name"], item["digest"]
        _need(isinstance(name, str) and 0 < len(name) <= 255 and name.isprintable() and "\\" not in name and not name.startswith("/") and ".." not in name.split("/"), "names no file or image", origin=origin, field=f"{where}.name", found=name)
        _need(isinstance(digest, dict) and set(digest) == {"sha256"} and is_sha256_hex(digest["sha256"]), "has no lowercase SHA-256 digest (and only that)", origin=origin, field=f"{where}.digest", found=digest)
        _need(name not in subjects, "names a subject twice", origin=origin, field=f"{where}.name", found=name)
        subjects[name] = digest["sha256"]
    predicate = document["predicate"]
    _need(isinstance(predicate, dict) and set(predicate) == {"buildDefinition", "runDetails"}, "is not a SLSA v1 predicate", origin=origin, field="predicate", found=sorted(predicate) if isinstance(predicate, dict) else predicate)
    definition = predicate["buildDefinition"]
    _need(isinstance(definition, dict) and set(definition) == {"buildType", "externalParameters", "internalParameters", "resolvedDependencies"}, "is not a SLSA v1 build definition", origin=origin, field="predicate.buildDefinition")
    _need(definition["buildType"] in BUILD_TYPES, "names a build type this project does not define", origin=origin, field="predicate.buildDefinition.buildType", found=definition["buildType"], expected=" or ".join(BUILD_TYPES))
    external = definition["externalParameters"]
    # SLSA: a verifier must reject unknown external parameters.
    _need(isinstance(external, dict) and tuple(sorted(external)) == EXTERNAL_KEYS and all(isinstance(v, str) for v in external.values()), "external parameters are not exactly the ones this build type defines", origin=origin, field="predicate.buildDefinition.externalParameters", found=sorted(external) if isinstance(external, dict) else external, expected=", ".join(EXTERNAL_KEYS))
    _need(is_commit_hex(external["source_commit"]), "is not a full 40-hex commit", origin=origin, field="predicate.buildDefinition.externalParameters.source_commit", found=external["source_commit"])
    _need(isinstance(definition["internalParameters"], dict), "must be an object", origin=origin, field="predicate.buildDefinition.internalParameters", found=_kind(definition["internalParameters"]))
    dependencies = definition["resolvedDependencies"]
    _check_descriptors(dependencies, origin=origin, where="predicate.buildDefinition.resolvedDependencies")
    _check_internal(definition["internalParameters"], origin=origin)
    run = predicate["runDetails"]
    _need(isinstance(run, dict) and set(run) <= {"builder", "metadata", "byproducts"} and "builder" in run, "is not SLSA v1 run details with a builder", origin=origin, field="predicate.runDetails", found=_kind(run) if not isinstance(run, dict) else sorted(run))
    builder_ = run["builder"]
    _need(isinstance(builder_, dict) and set(builder_) <= {"id", "version", "builderDependencies"}, "is not a SLSA v1 builder {id, version, builderDependencies}", origin=origin, field="predicate.runDetails.builder", found=_kind(builder_) if not isinstance(builder_, dict) else sorted(builder_))
    _need(isinstance(builder_.get("id"), str) and 0 < len(builder_["id"]) <= MAX_TEXT, "must be the builder's id (a string)", origin=origin, field="predicate.runDetails.builder.id", found=_kind(builder_.get("id")))
    if "version" in builder_:
        version = builder_["version"]
        _need(isinstance(version, dict) and all(isinstance(v, str) and len(v) <= MAX_TEXT for v in version.values()), "must be an object of strings", origin=origin, field="predicate.runDetails.builder.version", found=_kind(version))
    if "builderDependencies" in builder_:
        _check_descriptors(builder_["builderDependencies"], origin=origin, where="predicate.runDetails.builder.builderDependencies")
    metadata = run.get("metadata", {})
    _need(isinstance(metadata, dict), "must be an object", origin=origin, field="predicate.runDetails.metadata", found=_kind(metadata))
    _need(not ({"startedOn", "finishedOn"} & set(metadata)), "carries wall-clock times (this project's statements are a function of the bytes only)", origin=origin, field="predicate.runDetails.metadata", found=sorted(metadata))
    _need(set(metadata) <= {"invocationId"}, "holds other keys than invocationId", origin=origin, field="predicate.runDetails.metadata", found=sorted(metadata), expected="invocationId only")
    if "invocationId" in metadata:
        _need(isinstance(metadata["invocationId"], str) and len(metadata["invocationId"]) <= MAX_TEXT, "must be a string", origin=origin, field="predicate.runDetails.metadata.invocationId", found=_kind(metadata["invocationId"]))
    if "byproducts" in run:
        _check_descriptors(run["byproducts"], origin=origin, where="predicate.runDetails.byproducts")
    return Statement(data, document, subjects, definition["buildType"], dict(external), run["builder"]["id"])


def check_subjects(statement_: Statement, expected: Mapping[str, str], *, origin: str, what: str = "the bound assets") -> None:
    """The statement's subjects must be exactly `expected` (name -> sha256)."""
    missing = sorted(set(expected) - set(statement_.subjects))
    extra = sorted(set(statement_.subjects) - set(expected))
    if missing or extra:
        raise IntegrityError(
            f"the provenance subjects are not exactly {what}",
            file=origin,
            field="subject",
            found=f"not a subject: {missing}; not bound: {extra}",
            expected=sorted(expected),
            why="a statement must describe every published file of the set and nothing else",
        )
    for name in sorted(expected):
        if statement_.subjects[name] != expected[name]:
            raise IntegrityError(
                f"the provenance names other bytes for {name}",
                file=origin,
                field=f"subject {name}",
                found=statement_.subjects[name],
                expected=expected[name],
                why="the file was changed after the statement was made, or the statement belongs to another build",
            )


def check_parameters(statement_: Statement, *, lane: str, tag: str, source_commit: str | None, origin: str) -> None:
    """The statement's external parameters name this lane, this cut and (where known) this source commit."""
    where = "predicate.buildDefinition.externalParameters"
    for key, expected in (("lane", lane), ("component_tag", tag), ("source_commit", source_commit)):
        found = statement_.external.get(key)
        if expected is not None and found != expected:
            raise IntegrityError(
                f"the statement names another {key.replace('_', ' ')} than the bound evidence",
                file=origin,
                field=f"{where}.{key}",
                found=found,
                expected=expected,
                why="a statement about another lane, cut or commit is no evidence for these bytes",
            )


# -- making the statements ---------------------------------------------------------

PIPELINE_REPOSITORY = "https://github.com/alphastorm/omp-ninfer.git"
LOCK_NAME = "runtime/toolchain.lock.json"
LAUNCHER_NAME = "runtime/launcher/nvcc_deterministic.py"
# The hash-locked requirements the release workflow installs the pipeline and its tools from (`nox -s lock`).
PIPELINE_LOCK_NAME = "requirements/release.txt"


def pipeline_lock_descriptor() -> dict[str, Any]:
    """The requirements lock of this checkout (or of the installed verifier, which bundles it), by SHA-256."""
    from pipeline.errors import EnvironmentProblem
    from pipeline.formats.lanes import REPO_ROOT
    from pipeline.util.hashing import sha256_file

    path = REPO_ROOT / PIPELINE_LOCK_NAME
    if not path.is_file():
        raise EnvironmentProblem(f"the pipeline's requirements lock {PIPELINE_LOCK_NAME} is missing", file=path,
                                 why="the provenance names the exact requirements the pipeline that made it was installed from",
                                 fix="run from a checkout of the pipeline (or its verifier wheel), which carries it; refresh it with nox -s lock")
    return descriptor(PIPELINE_LOCK_NAME, sha256=sha256_file(path), annotations={"role": "pipeline-requirements-lock"})


def source_repository(source: Mapping[str, Any], lane) -> str:
    """Where the source commit lives: the remote URL, this repository for the embedded sample,
    else the lane's source repository (a local checkout is taken as a clone of it; the commit binds)."""
    kind = source.get("kind")
    if kind == "remote" and isinstance(source.get("location"), str):
        return source["location"]
    if kind == "embedded-sample":
        return PIPELINE_REPOSITORY
    return lane.source_repository


def toolchain_descriptors(identity: Mapping[str, Any], lane) -> list[dict[str, Any]]:
    """Every wheel of the pinned toolchain the build used, with the URL and SHA-256 the lock pins."""
    from pipeline.formats.toolchain_lock import toolchain_spec

    toolchain = identity.get("toolchain") or {}
    kind = toolchain.get("kind")
    if kind == "pinned":
        spec = toolchain_spec(toolchain.get("toolkit") or lane.cuda_toolkit, lane.build_host)
        if spec.digest != toolchain.get("lock_entry_sha256"):
            raise IntegrityError(
                "the toolchain lock no longer pins the toolchain this build used",
                file=LOCK_NAME,
                field=f"toolkits.{spec.toolkit}.platforms.{lane.build_host}",
                found=spec.digest,
                expected=f"{toolchain.get('lock_entry_sha256')} (build-identity.json toolchain.lock_entry_sha256)",
                fix="state provenance from the checkout the build ran in, or build again",
            )
        recorded = {(w["distribution"], w["version"], w["sha256"]) for w in toolchain.get("wheels", [])}
        out = []
        for wheel in spec.wheels:
            if (wheel.distribution, wheel.version, wheel.sha256) not in recorded:
                raise IntegrityError("the build identity does not record a wheel the lock pins", field="toolchain.wheels", found=sorted(recorded), expected=wheel.filename)
            out.append(descriptor(f"toolchain:{wheel.distribution}", uri=wheel.url, sha256=wheel.sha256, annotations={"version": wheel.version, "filename": wheel.filename, "size": wheel.size}))
        return out
    if kind == "system":
        return [descriptor("toolchain:system-nvcc", uri=f"pkg:generic/cuda-nvcc@{toolchain.get('cuda_version')}", annotations={"path": toolchain.get("nvcc"), "note": "a system toolkit, not the pinned release toolchain"})]
    return prebuilt_descriptors(identity)


def prebuilt_descriptors(identity: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A set packaged from binaries built elsewhere (--prebuilt): each binary, bundled library and licence text given, by
    SHA-256 (the build identity's record of the files it was handed), and the toolchain the binaries' own
    identity names (its compilers and CUDA toolkit: observed in the binaries, no digest of it exists here)."""
    from pipeline.formats.components import purl

    out = [
        descriptor(f"prebuilt:{name}", sha256=digest, annotations={"role": role})
        for key, role in (("binaries", "binary"), ("runtime_dependencies", "runtime-library"), ("redistributable_licences", "licence-text"))
        for name, digest in sorted((identity.get(key) or {}).items())
    ]
    toolkit = identity.get("cuda_toolkit")
    if not toolkit:  # the identity names no toolchain: none is claimed (a descriptor needs a URI or a digest)
        return out
    out.append(descriptor(
        "toolchain:prebuilt",
        uri=purl("generic", "cuda-toolkit", toolkit),
        annotations={
            "cuda_toolkit": toolkit,
            "cuda_compiler": identity.get("cuda_compiler"),
            "cxx_compiler": identity.get("cxx_compiler"),
            "build_type": identity.get("build_type"),
            "note": "binaries built outside this run (--prebuilt); the toolchain is the one their embedded identity names",
        },
    ))
    return out


def _common(identity: Mapping[str, Any], lane) -> tuple[dict[str, str], dict[str, Any], list[dict[str, Any]]]:
    source = identity.get("source") or {}
    repository = source_repository(source, lane)
    external = {
        "lane": lane.id,
        "component_tag": identity["component_tag"],
        "source_repository": repository,
        "source_commit": source.get("commit"),
    }
    environment = identity.get("host_environment") or {}
    internal = {
        "asset_platform": lane.asset_platform,
        "build_profile": identity.get("build_profile"),
        "build_route": identity.get("build_route"),
        # {n, tag, commit, rehearsal}: the cut the build was, or whose names a rehearsal carries (rebuild --verify builds as it).
        "cut": identity.get("cut"),
        "cuda_architecture": identity.get("cuda_architecture"),
        "cuda_toolkit": identity.get("cuda_toolkit"),
        "source_date_epoch": identity.get("source_date_epoch"),
        "toolchain_kind": (identity.get("toolchain") or {}).get("kind"),
        "host_environment": environment or None,
    }
    dependencies = source_descriptors(source, repository, identity.get("source_tar_sha256"))
    dependencies += toolchain_descriptors(identity, lane)
    launcher = (identity.get("toolchain") or {}).get("launcher_sha256")
    if launcher:
        dependencies.append(descriptor(LAUNCHER_NAME, sha256=launcher))
    dependencies.append(descriptor(f"runtime/lanes/{lane.id}.toml", sha256=identity.get("lane_file_sha256") or lane.file_sha256))
    if identity.get("toolchain_lock_sha256"):
        dependencies.append(descriptor(LOCK_NAME, sha256=identity["toolchain_lock_sha256"]))
    dependencies += host_descriptors(identity.get("host_dependencies"), environment.get("os_release"))
    dependencies += environment_descriptors(environment)
    dependencies.append(pipeline_lock_descriptor())
    return external, internal, dependencies


def make_set_statement(
    *,
    lane,
    identity: Mapping[str, Any],
    files: Mapping[str, str],
    byproducts: Mapping[str, str],
    environ: Mapping[str, str] = os.environ,
) -> bytes:
    """The statement of one closed asset set: `files` (name -> sha256) are its subjects."""
    external, internal, dependencies = _common(identity, lane)
    internal["package_layout"] = lane.package_layout
    document = statement(
        subjects=files,
        build_type=BUILD_TYPE_SET,
        external=external,
        internal=internal,
        dependencies=dependencies,
        byproducts=[descriptor(name, sha256=digest) for name, digest in sorted(byproducts.items())],
        run_details=builder(environ),
    )
    return statement_bytes(document)


def make_image_statement(
    *,
    lane,
    identity: Mapping[str, Any],
    subject_name: str,
    manifest_digest: str,
    base_reference: str,
    base_manifest_digest: str,
    archive_name: str,
    archive_sha256: str,
    definition_name: str,
    definition_sha256: str,
    byproducts: Mapping[str, str],
    environ: Mapping[str, str] = os.environ,
    package_lock: tuple[str, str] | None = None,
) -> bytes:
    """The statement of the OCI image: its manifest is the subject; the base image (or, for a base of
    distribution packages, the package lock that pins every .deb: `package_lock` = (repository path, sha256))
    and the archive are inputs."""
    external, internal, dependencies = _common(identity, lane)
    dependencies += [
        descriptor(package_lock[0], sha256=package_lock[1], annotations={"role": "package-lock"}) if package_lock is not None
        else descriptor("base-image", uri=f"oci://{base_reference}", sha256=base_manifest_digest.removeprefix("sha256:")),
        descriptor(archive_name, sha256=archive_sha256, annotations={"role": "binary-archive"}),
        descriptor(definition_name, sha256=definition_sha256, annotations={"role": "image-definition"}),
    ]
    document = statement(
        subjects={subject_name: manifest_digest.removeprefix("sha256:")},
        build_type=BUILD_TYPE_IMAGE,
        external=external,
        internal=internal,
        dependencies=dependencies,
        byproducts=[descriptor(name, sha256=digest.removeprefix("sha256:")) for name, digest in sorted(byproducts.items())],
        run_details=builder(environ),
    )
    return statement_bytes(document)


@dataclass(frozen=True)
class ArchiveClaim:
    """What a source archive must be, from its provenance: the tar's SHA-256, the commit and its tree,
    and the labels the original build recorded for it (kind, location, subdir)."""

    tar_sha256: str
    commit: str
    tree: str
    recorded: tuple[tuple[str, object], ...]  # the original build identity's `source` block
    strict: bool = True  # refuse a mismatch (build); `rebuild --verify` records it and builds anyway

    @property
    def recorded_dict(self) -> dict[str, object]:
        return dict(self.recorded)



def archive_claim(statement_: Statement, *, origin: str, strict: bool = True) -> ArchiveClaim:
    """What a source archive must be to be this statement's source (for a build from the archive)."""
    commit_item, tree_item, tar_item = (statement_.dependency(n) for n in ("source-commit", "source-tree", "source-tar"))
    for name, item, key in (("source-commit", commit_item, "gitCommit"), ("source-tree", tree_item, "gitTree"), ("source-tar", tar_item, "sha256")):
        if item is None or not isinstance(item.get("digest"), dict) or key not in item["digest"]:
            raise InputError(f"names no {name} {key} digest", file=origin, field="predicate.buildDefinition.resolvedDependencies", expected=f"an entry named {name} with digest.{key}")
    assert commit_item is not None and tree_item is not None and tar_item is not None
    commit = commit_item["digest"]["gitCommit"]
    if commit != statement_.external["source_commit"]:
        raise InputError("the source-commit dependency differs from externalParameters.source_commit", file=origin, found=commit, expected=statement_.external["source_commit"])
    kind = (commit_item.get("annotations") or {}).get("kind")
    recorded = {
        "kind": kind,
        "location": statement_.external["source_repository"] if kind == "remote" else None,
        "subdir": (tree_item.get("annotations") or {}).get("subdir") or "",
        "commit_time": (tar_item.get("annotations") or {}).get("commit_time"),
    }
    return ArchiveClaim(
        tar_sha256=tar_item["digest"]["sha256"],
        commit=commit,
        tree=tree_item["digest"]["gitTree"],
        recorded=tuple(sorted(recorded.items())),
        strict=strict,
    )


# -- this host against the one the provenance records ----------------------------------------------------------


MAX_HOST_DEPENDENCIES = 64


def recorded_host(statement_: Statement, origin: str = "provenance statement") -> list[dict[str, Any]]:
    """The build-host dependencies a statement records (`build-host:<kind>:<name>`), as {name, kind, annotations}."""
    out = []
    for item in statement_.document["predicate"]["buildDefinition"]["resolvedDependencies"]:
        name = item.get("name") if isinstance(item, dict) else None
        if isinstance(name, str) and name.startswith("build-host:") and name.count(":") >= 2:
            _, kind, module = name.split(":", 2)
            # The rebuild looks each one up on this host and runs it (`<tool> --version`, pkg-config <module>):
            # a path or an option here would run what the statement names.
            if kind not in HOST_DEPENDENCY_KINDS or not re.fullmatch(HOST_DEPENDENCY_NAME, module):
                raise InputError("records a build-host dependency that is not a module or tool name", file=origin, field="predicate.buildDefinition.resolvedDependencies[].name",
                                 found=name[:200], expected=f"build-host:<{'|'.join(HOST_DEPENDENCY_KINDS)}>:<name matching {HOST_DEPENDENCY_NAME}>")
            annotations = item.get("annotations") if isinstance(item.get("annotations"), dict) else {}
            entry = {"name": module, "kind": kind, **{k: annotations.get(k) for k in HOST_ANNOTATIONS if k != "kind"}}
            vcpkg = {k: annotations.get(f"vcpkg_{k}") for k in _VCPKG_KEYS}
            release = {k: annotations.get(f"release_{k}") for k in _RELEASE_KEYS}
            entry["vcpkg"] = vcpkg if vcpkg["port"] else None
            entry["release"] = release if release["version"] else None
            # Every field as recorded (what the payload's build-identity.json and the SBOMs carry): compared in full.
            entry["annotations"] = {k: annotations.get(k) for k in host_annotations({})}
            _check_install_words(entry, origin=origin, name=name)
            if any((e["kind"], e["name"]) == (kind, module) for e in out) or len(out) >= MAX_HOST_DEPENDENCIES:
                # Each is probed on this host (processes, each with a timeout): a statement sets no unbounded work.
                raise InputError("records a build-host dependency twice or more of them than a build declares", file=origin,
                                 field="predicate.buildDefinition.resolvedDependencies[].name", found=name[:200],
                                 expected=f"each build-host dependency once, at most {MAX_HOST_DEPENDENCIES}")
            out.append(entry)
    return out




def _check_install_words(entry: Mapping[str, Any], *, origin: str, name: str) -> None:
    """The recorded words that become part of an install command shown to the user are package-name and version
    words: a statement's `foo; curl … | sh` is refused, never printed as a fix to paste."""
    words = {k: entry.get(k) for k in ("version", "debian_package", "debian_version")}
    words |= {f"vcpkg_{k}": v for k, v in (entry.get("vcpkg") or {}).items()} | {f"release_{k}": v for k, v in (entry.get("release") or {}).items() if k != "source"}
    for key, value in words.items():
        if value is not None and not is_version_word(value):  # package names fit the same words
            raise InputError(f"records a build-host dependency {key} that is not a package or version word", file=origin,
                             field=f"predicate.buildDefinition.resolvedDependencies[{name}].annotations.{key}", found=str(value)[:200], expected=f"text matching {VERSION_WORD.pattern}")
