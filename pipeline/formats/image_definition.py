"""The image definition, `containers/<name>.toml`: what the `image` stage builds (its owner: this module).

Data, checked key by key (unknown keys refused): the image's name, lane, production repository and
platform; the base image by repository, digest (a tag alone is refused) and, for people, the tag
the digest was resolved from, and the base's licence (`base.license`, an SPDX expression or a
`LicenseRef-*` whose text is `base.license_file` in the repository: the image SBOM records it on
the base package); the layers we add as copy rules from the binary archive; entrypoint, cmd, env,
port, user and the labels a person writes.  The labels the stage computes (created, source,
revision, version, base, ref name, licences) may not be set here.

The file is read once, bounded, and hashed before it is parsed (`ImageDefinition.file_sha256`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from pipeline.errors import InputError, IntegrityError
from pipeline.formats import apt_lock
from pipeline.formats.components import is_licence_ref, licence_refs
from pipeline.formats.lanes import REPO_ROOT, Lane
from pipeline.infra import oci
from pipeline.infra.image_reference import is_tag
from pipeline.infra.registry import Repository, parse_repository
from pipeline.infra.rootfs import library_folders
from pipeline.util.fs import read_bytes_bounded
from pipeline.util.hashing import sha256_bytes, sha256_file
from pipeline.util.jsonio import MAX_TOML_BYTES, loads_toml
from pipeline.util.safepath import relpath_problem
from pipeline.util.schema import Field, matches, one_of, read_table

DEFINITIONS_DIR = REPO_ROOT / "containers"
_SNAPSHOT_URI = re.compile(r"https://snapshot\.debian\.org/archive/[a-z-]+/([0-9]{8}T[0-9]{6}Z)/?")
# Only these suites carry the release's own builds (security fixes, stable updates); -backports (newer upstream
# versions) and -proposed-updates (a point release not yet accepted) are other sonames and builds for the drift check.
# A codename has no '-' ('trixie-proposed-updates' is not trixie's '-updates').
_SAME_RELEASE_SUITE = re.compile(r"([a-z0-9][a-z0-9.]*)-(security|updates)")
MAX_LICENSE_TEXT = 1 << 20

# Labels the stage computes; a definition may not set them.
OCI_PREFIX = "org.opencontainers.image."
COMPUTED_LABELS = tuple(
    OCI_PREFIX + key for key in ("created", "source", "revision", "version", "base.name", "base.digest", "ref.name", "licenses")
)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


_TOP = {
    "schema_version": Field(int, check=lambda v: v == 1, expected="1"),
    "name": Field(str, check=matches(r"[a-z0-9][a-z0-9._-]*"), expected="a lowercase image name, e.g. 'ninfer-runtime'"),
    "lane": Field(str),
    "title": Field(str),
    "repository": Field(str, expected="the production repository, e.g. 'ghcr.io/alphastorm/ninfer-runtime'"),
    "platform": Field(str, check=matches(r"linux/[a-z0-9]+(/[a-z0-9]+)?"), expected="os/architecture, e.g. 'linux/amd64'"),
    "layer_compression": Field(str, check=one_of("gzip", "none"), expected="'gzip' or 'none'"),
    "gzip_level": Field(int, required=False, default=9, check=lambda v: 1 <= v <= 9, expected="1..9"),
    "label_namespace": Field(str, check=matches(r"[a-z0-9]+(\.[a-z0-9-]+)+"), expected="a reverse-DNS prefix, e.g. 'io.github.alphastorm.ninfer'"),
    "archive_ignore": Field(list, items=str, required=False, default=[]),
    "base": Field(dict),
    "config": Field(dict),
    "labels": Field(dict, required=False, default={}),
    "layer": Field(list, items=dict, expected="one [[layer]] table per layer, in order"),
}
_KINDS = ("registry", "packages")
_BASE = {
    "kind": Field(str, required=False, default="registry", check=one_of(*_KINDS), expected="'registry' (an image pinned by digest) or 'packages' (Debian packages from a lock)"),
    "repository": Field(str),
    "tag": Field(str, required=False, expected="the tag the digest was resolved from (for people; never used to pull)"),
    "digest": Field(str, expected="'sha256:' + 64 hex digits"),
    "note": Field(str, required=False),
    "license": Field(str, required=False, expected="the base image's terms as an SPDX expression, e.g. 'LicenseRef-NVIDIA-CUDA-EULA'"),
    "license_file": Field(str, required=False, expected="the text of a LicenseRef-* licence, a path in the repository such as 'packaging/licenses/LicenseRef-NVIDIA-CUDA-EULA.txt'"),
}
_PACKAGE_BASE = {
    "kind": Field(str, check=one_of("packages"), expected="'packages'"),
    "packages": Field(list, items=str, expected="the package names the image needs, e.g. ['libc6', 'libstdc++6']; their Pre-Depends and Depends are added"),
    "source": Field(list, items=dict, expected="one [[base.source]] table per archive suite"),
    "script": Field(list, items=dict, required=False, default=[], expected="one [[base.script]] table per reviewed maintainer script"),
    "wheel_file": Field(list, items=dict, required=False, default=[], expected="one [[base.wheel_file]] table per file taken from a wheel of the toolchain lock"),
    "note": Field(str, required=False),
}
_SCRIPT = {
    "package": Field(str, check=matches(r"[a-z0-9][a-z0-9+.-]+"), expected="the package whose script this is"),
    "script": Field(str, check=one_of("preinst", "postinst"), expected="'preinst' or 'postinst'"),
    "sha256": Field(str, check=matches(r"[0-9a-f]{64}"), expected="the SHA-256 of the script as the package ships it (image says it when it refuses)"),
    "stand_in": Field(str, expected="what replaces running the script, for the reviewer (e.g. 'nothing: it only restarts services on upgrade')"),
    "links": Field(dict, required=False, default={}, expected="absolute path = \"target\" symbolic links made in its place (e.g. what update-alternatives would make)"),
}
_SOURCE = {
    "uri": Field(str, check=matches(r"https://[A-Za-z0-9.-]+(:[0-9]+)?(/[A-Za-z0-9._~+-]+)*/?|http://(127\.0\.0\.1|localhost)(:[0-9]+)?(/[A-Za-z0-9._~+-]+)*/?"),
                 expected="the archive's HTTPS URL, e.g. 'https://deb.debian.org/debian' (plain HTTP only to a loopback test server)"),
    "suite": Field(str, check=matches(r"[a-z0-9][a-z0-9.-]*"), expected="a suite or codename, e.g. 'trixie'"),
    "components": Field(list, items=str, expected="e.g. ['main']"),
    "keyring": Field(str, expected="a binary OpenPGP keyring in the repository, e.g. 'containers/keys/debian-archive-trixie-automatic.gpg'"),
    "keyring_sha256": Field(str, check=matches(r"[0-9a-f]{64}"), expected="the keyring file's SHA-256 (64 lowercase hex digits)"),
    "fingerprints": Field(list, items=str, expected="the primary key fingerprints whose signatures are trusted (40 hex digits each)"),
}
_WHEEL_FILE = {
    "distribution": Field(str, check=matches(r"[a-z0-9][a-z0-9._-]*"), expected="a wheel the toolchain lock pins for the lane's toolkit, e.g. 'nvidia-cuda-runtime'"),
    "member": Field(str, expected="the file's path inside the wheel, e.g. 'nvidia/cu13/lib/libcudart.so.13'"),
    "to": Field(str, expected="its absolute path in the image, e.g. '/usr/lib/x86_64-linux-gnu/libcudart.so.13'"),
    "license": Field(str, expected="the terms it comes under, e.g. 'LicenseRef-NVIDIA-CUDA-EULA'"),
    "license_file": Field(str, required=False, expected="the text of a LicenseRef-* licence, a path in the repository"),
}
MAX_KEYRING_BYTES = 1 << 20
_CONFIG = {
    "entrypoint": Field(list, items=str),
    "cmd": Field(list, items=str, required=False, default=[]),
    "working_dir": Field(str, required=False, default="/"),
    "user": Field(str, check=matches(r"[0-9]+(:[0-9]+)?"), expected="a numeric 'uid[:gid]' (names would need the base's /etc/passwd)"),
    "exposed_ports": Field(list, items=str, required=False, default=[]),
    "stop_signal": Field(str, required=False, check=matches(r"SIG[A-Z0-9]+"), expected="a signal name such as 'SIGTERM'"),
    "env": Field(dict, required=False, default={}),
}
_LAYER = {
    "name": Field(str, check=matches(r"[a-z0-9][a-z0-9-]*"), expected="a short lowercase name"),
    "comment": Field(str, required=False, default=""),
    "copy": Field(list, items=dict),
}
_COPY = {
    "from": Field(str, expected="a path inside the archive's top folder; a trailing '/' copies a folder"),
    "to": Field(str, expected="an absolute path in the image; ends with '/' when 'from' is a folder"),
    "optional": Field(bool, required=False, default=False),
}


@dataclass(frozen=True)
class CopyRule:
    source: str  # relative to the archive's top folder; "bin/" means the folder's files
    target: str  # absolute in the image
    optional: bool

    @property
    def is_folder(self) -> bool:
        return self.source.endswith("/")


@dataclass(frozen=True)
class LayerSpec:
    name: str
    comment: str
    rules: tuple[CopyRule, ...]


@dataclass(frozen=True)
class BaseSpec:
    repository: Repository
    repository_text: str
    tag: str | None
    digest: str
    license: str | None = None  # the base's terms as the definition states them (SPDX expression)
    license_name: str | None = None  # the LicenseRef-* among them whose text comes with it
    license_text: str | None = None

    @property
    def reference(self) -> str:
        return self.repository.at(self.digest)

    @property
    def tagged_reference(self) -> str:
        """`<repository>:<tag>@sha256:…` (the digest pulls; the tag says what it was resolved from), as
        docs/provenance.md states the base-image dependency URI."""
        return f"{self.repository.name}:{self.tag}@{self.digest}" if self.tag else self.reference

    @property
    def display_name(self) -> str:
        return f"{self.repository.name}:{self.tag}" if self.tag else self.repository.name


@dataclass(frozen=True)
class PackageSource:
    """One archive suite of a package base, with the keys trusted to sign it."""

    uri: str
    suite: str
    components: tuple[str, ...]
    keyring: str  # repository path
    keyring_sha256: str
    fingerprints: tuple[str, ...]
    keyring_bytes: bytes

    def request(self) -> dict[str, object]:
        return {"uri": self.uri, "suite": self.suite, "components": list(self.components), "keyring_sha256": self.keyring_sha256,
                "fingerprints": sorted(self.fingerprints)}


@dataclass(frozen=True)
class ScriptStandIn:
    """A maintainer script that is not run, reviewed: bound to its bytes by SHA-256, with what stands in for it."""

    package: str
    script: str
    sha256: str
    stand_in: str
    links: tuple[tuple[str, str], ...] = ()  # (absolute path, target) made in its place


@dataclass(frozen=True)
class WheelFile:
    """A file of a wheel the toolchain lock pins (libcudart.so.13 from the CUDA runtime wheel), placed in the package layer."""

    distribution: str
    member: str
    target: str
    license: str
    license_name: str | None
    license_text: str | None


@dataclass(frozen=True)
class PackageBase:
    """`[base] kind = "packages"`: the image's base is made of distribution packages, resolved into a lock."""

    packages: tuple[str, ...]
    sources: tuple[PackageSource, ...]
    note: str | None = None
    scripts: tuple[ScriptStandIn, ...] = ()
    wheel_files: tuple[WheelFile, ...] = ()

    def stand_ins(self) -> dict[tuple[str, str], ScriptStandIn]:
        return {(item.package, item.script): item for item in self.scripts}

    def releases(self) -> set[tuple[str, str | None]]:
        """(distribution release, snapshot timestamp or None) of each source: 'trixie-security' and 'trixie-updates' are release
        trixie ('trixie-backports' and 'trixie-proposed-updates' are not), and a snapshot.debian.org URI (…/archive/<archive>/<timestamp>) names its snapshot; any other archive moves."""
        found = set()
        for source in self.sources:
            snapshot = _SNAPSHOT_URI.fullmatch(source.uri)
            same_release = _SAME_RELEASE_SUITE.fullmatch(source.suite)
            found.add((same_release.group(1) if same_release else source.suite, snapshot.group(1) if snapshot else None))
        return found

    def request(self, architecture: str) -> dict[str, object]:
        """What the lock is bound to (formats/apt_lock.py: request_digest)."""
        return {"architecture": architecture, "packages": sorted(self.packages), "sources": [source.request() for source in self.sources]}


@dataclass(frozen=True)
class ImageDefinition:
    file: Path
    file_sha256: str
    name: str
    lane: str
    title: str
    repository: str
    platform: str
    compression: str
    gzip_level: int
    label_namespace: str
    archive_ignore: tuple[str, ...]
    base: BaseSpec | None  # a registry base pinned by digest; None for a package base
    entrypoint: tuple[str, ...]
    cmd: tuple[str, ...]
    working_dir: str
    user: str
    exposed_ports: tuple[str, ...]
    stop_signal: str | None
    env: tuple[tuple[str, str], ...]
    labels: tuple[tuple[str, str], ...]
    layers: tuple[LayerSpec, ...]
    package_base: PackageBase | None = None

    @property
    def os(self) -> str:
        return self.platform.split("/")[0]

    @property
    def architecture(self) -> str:
        return self.platform.split("/")[1]


def _relative_archive_path(value: str, *, file: str, field_name: str) -> str:
    path = PurePosixPath(value.rstrip("/"))
    if not value or value.startswith("/") or any(p in ("..", ".") for p in path.parts) or "\\" in value or "//" in value \
            or relpath_problem(value.removesuffix("/"), hidden=True, portable=False) is not None:  # the one gate of util/safepath
        raise InputError(
            "is not a clean path inside the archive's top folder",
            file=file,
            field=field_name,
            found=value,
            expected="a relative path such as 'bin/' or 'LICENSE'",
        )
    return value


def _base_license(base: dict, *, file: str, where: str = "base") -> tuple[str | None, str | None, str | None]:
    """(expression, LicenseRef name, its text) of the base image: a LicenseRef-* comes with its text from the repository."""
    from license_expression import get_spdx_licensing

    expression, text_file = base.get("license"), base.get("license_file")
    if expression is None:
        if text_file is not None:
            raise InputError("names a licence text but no licence", file=file, field=f"{where}.license_file", fix="add base.license with the LicenseRef-* the text is")
        return None, None, None
    info = get_spdx_licensing().validate(expression)
    unknown = [symbol for symbol in info.invalid_symbols if not is_licence_ref(str(symbol))]
    if unknown or (info.errors and not info.invalid_symbols):
        raise InputError("is not an SPDX licence expression", file=file, field=f"{where}.license", found=expression, why="; ".join(info.errors),
                         expected="SPDX licence identifiers and LicenseRef-* names joined by AND / OR")
    refs = sorted(licence_refs(expression))
    if not refs:
        return expression, None, None
    if len(refs) > 1 or text_file is None:
        raise InputError("a LicenseRef-* licence needs its text (one per base)", file=file, field=f"{where}.license_file", found=expression,
                         fix="add base.license_file = \"packaging/licenses/<LicenseRef-...>.txt\"")
    problem = relpath_problem(text_file, hidden=True, portable=True)
    if problem is not None:
        raise InputError(f"is not a path inside the repository ({problem})", file=file, field=f"{where}.license_file", found=text_file)
    raw = read_bytes_bounded(REPO_ROOT / text_file, MAX_LICENSE_TEXT, what="licence text")
    try:
        return expression, refs[0], raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError("is not UTF-8 text", file=text_file, found=f"byte {exc.start}", expected="the licence text as UTF-8 (it goes into the image SPDX)") from None


def _registry_base(raw: dict, *, file: str) -> BaseSpec:
    """`[base]` of kind 'registry': an image by repository and digest, with the terms it comes under."""
    base = read_table(raw, _BASE, file=file, prefix="base")

    base_repository = parse_repository(base["repository"], origin=file, field_name="base.repository")
    if "@" in base["repository"] or ":" in base["repository"].split("/")[-1]:
        raise InputError("names a tag or digest inside the repository", file=file, field="base.repository", found=base["repository"], expected="the repository alone; the digest goes into base.digest")
    digest = base["digest"]
    if not oci.is_digest(digest):
        tag_note = f" (tag {base['tag']!r})" if base.get("tag") else ""
        raise InputError(
            f"the base image is not pinned by digest{tag_note}" if not digest else "base.digest is not a sha256 digest",
            file=file,
            field="base.digest",
            found=digest,
            expected="'sha256:' + 64 lowercase hex digits",
            why="a tag can be moved to other bytes at any time; the image must say exactly which base it was built on, so a base given by tag alone is refused",
            fix=(
                f"resolve the tag once and pin the answer, e.g. 'skopeo inspect --format {{{{.Digest}}}} "
                f"docker://{base['repository']}:{base.get('tag') or '<tag>'}', and write it into base.digest"
            ),
        )
    if base.get("tag") is not None and not is_tag(base["tag"]):
        raise InputError("is not a valid tag", file=file, field="base.tag", found=base["tag"])
    license_expression, license_name, license_text = _base_license(base, file=file)
    return BaseSpec(base_repository, base["repository"], base.get("tag"), digest, license_expression, license_name, license_text)


def _package_source(raw: dict, index: int, *, file: str) -> PackageSource:
    where = f"base.source[{index}]"
    source = read_table(raw, _SOURCE, file=file, prefix=where)
    if not source["components"] or any(not re.fullmatch(r"[a-z0-9][a-z0-9-]*", c) for c in source["components"]):
        raise InputError("names no component, or one that is not a plain name", file=file, field=f"{where}.components", found=source["components"], expected="e.g. ['main']")
    fingerprints = tuple(f.replace(" ", "").upper() for f in source["fingerprints"])
    if not fingerprints or any(not re.fullmatch(r"[0-9A-F]{40}|[0-9A-F]{64}", f) for f in fingerprints):
        raise InputError("must list the full fingerprints of the trusted keys", file=file, field=f"{where}.fingerprints", found=source["fingerprints"],
                         expected="40 (v4) or 64 (v6) hex digits each; key ids are too short to name a key",
                         fix="list them with 'gpg --show-keys --with-colons KEYRING' (the fpr lines of the primary keys)")
    problem = relpath_problem(source["keyring"], hidden=True, portable=True)
    if problem is not None:
        raise InputError(f"is not a path inside the repository ({problem})", file=file, field=f"{where}.keyring", found=source["keyring"])
    keyring = read_bytes_bounded(REPO_ROOT / source["keyring"], MAX_KEYRING_BYTES, what="OpenPGP keyring")
    if sha256_bytes(keyring) != source["keyring_sha256"]:
        raise IntegrityError("the keyring file does not have the SHA-256 the definition pins", file=source["keyring"], field=f"{where}.keyring_sha256",
                             found=sha256_bytes(keyring), expected=source["keyring_sha256"],
                             why="the keys that sign the archive are trusted only as the reviewed definition pins them",
                             fix="restore the keyring file, or (after checking the new keys out of band) pin its new SHA-256")
    return PackageSource(source["uri"].rstrip("/"), source["suite"], tuple(source["components"]), source["keyring"], source["keyring_sha256"], fingerprints, keyring)


def _package_base(raw: dict, *, file: str) -> PackageBase:
    """`[base]` of kind 'packages': Debian packages named by the definition, resolved and pinned by `image lock`."""
    base = read_table(raw, _PACKAGE_BASE, file=file, prefix="base")
    names = base["packages"]
    bad = [name for name in names if not re.fullmatch(r"[a-z0-9][a-z0-9+.-]+", name)]
    if not names or bad or len(set(names)) != len(names):
        raise InputError("must list package names, each once", file=file, field="base.packages", found=bad or names, expected="e.g. ['libc6', 'libstdc++6']")
    if not base["source"]:
        raise InputError("names no package source", file=file, field="base.source", expected="at least one [[base.source]]")
    sources = tuple(_package_source(item, index, file=file) for index, item in enumerate(base["source"]))
    scripts = []
    for index, item in enumerate(base["script"]):
        script = read_table(item, _SCRIPT, file=file, prefix=f"base.script[{index}]")
        for path, target in script["links"].items():
            oci.image_path(path, origin=file, field_name=f"base.script[{index}].links")
            if not isinstance(target, str) or not target or "\0" in target:
                raise InputError("a link needs a target", file=file, field=f"base.script[{index}].links.{path}", found=target)
        if (script["package"], script["script"]) in {(s.package, s.script) for s in scripts}:
            raise InputError("lists one script twice", file=file, field=f"base.script[{index}]", found=f"{script['package']} {script['script']}")
        scripts.append(ScriptStandIn(script["package"], script["script"], script["sha256"], script["stand_in"], tuple(sorted(script["links"].items()))))
    wheel_files = []
    for index, item in enumerate(base["wheel_file"]):
        where = f"base.wheel_file[{index}]"
        entry = read_table(item, _WHEEL_FILE, file=file, prefix=where)
        _relative_archive_path(entry["member"], file=file, field_name=f"{where}.member")
        oci.image_path(entry["to"], origin=file, field_name=f"{where}.to")
        expression, name, text = _base_license(entry, file=file, where=where)
        wheel_files.append(WheelFile(entry["distribution"], entry["member"], entry["to"], expression or "", name, text))
    return PackageBase(tuple(names), sources, base.get("note"), tuple(scripts), tuple(wheel_files))


def load_definition(path: Path) -> ImageDefinition:
    file = str(path)
    definition_bytes = read_bytes_bounded(path, MAX_TOML_BYTES, what="image definition")
    data = loads_toml(definition_bytes, source=path)  # the bytes hashed below are the bytes parsed
    top = read_table(data, _TOP, file=file)
    config = read_table(top["config"], _CONFIG, file=file, prefix="config")
    kind = top["base"].get("kind", "registry") if isinstance(top["base"], dict) else None
    registry_base = package_base = None
    if kind == "packages":
        package_base = _package_base(top["base"], file=file)
    else:
        registry_base = _registry_base(top["base"], file=file)

    platform_arch = top["platform"].split("/")[1]
    if platform_arch not in ("amd64", "arm64"):
        raise InputError("platform architecture is not supported", file=file, field="platform", found=top["platform"], expected="linux/amd64 or linux/arm64")

    for index, arg in enumerate(config["entrypoint"]):
        if not arg:
            raise InputError("entrypoint arguments must not be empty", file=file, field=f"config.entrypoint[{index}]")
    if not config["entrypoint"]:
        raise InputError("entrypoint must name the program to run", file=file, field="config.entrypoint", expected="e.g. ['/opt/ninfer/bin/ninfer-serve']")
    oci.image_path(config["working_dir"], origin=file, field_name="config.working_dir")
    for index, port in enumerate(config["exposed_ports"]):
        if not re.fullmatch(r"[0-9]{1,5}/(tcp|udp)", port) or not 0 < int(port.split("/")[0]) < 65536:
            raise InputError("is not a port", file=file, field=f"config.exposed_ports[{index}]", found=port, expected="'<1-65535>/tcp' or '/udp'")
    env: list[tuple[str, str]] = []
    for name, value in config["env"].items():
        if not _ENV_NAME.fullmatch(name) or not isinstance(value, str):
            raise InputError("environment entries are NAME = \"value\" strings", file=file, field=f"config.env.{name}", found=value)
        env.append((name, value))
    labels: list[tuple[str, str]] = []
    for name, value in top["labels"].items():
        if not isinstance(value, str):
            raise InputError("label values must be strings", file=file, field=f"labels.{name}", found=value)
        if name in COMPUTED_LABELS or name.startswith(top["label_namespace"] + "."):
            raise InputError(
                "sets a label the pipeline computes",
                file=file,
                field=f"labels.{name}",
                why="source, revision, version, created, base and lane labels come from the build identity and the base digest, so they cannot disagree with the bytes",
                fix="remove the label",
            )
        labels.append((name, value))

    layers: list[LayerSpec] = []
    names: set[str] = set()
    for index, raw in enumerate(top["layer"]):
        spec = read_table(raw, _LAYER, file=file, prefix=f"layer[{index}]")
        if spec["name"] in names:
            raise InputError("two layers share one name", file=file, field=f"layer[{index}].name", found=spec["name"])
        names.add(spec["name"])
        rules = []
        for number, item in enumerate(spec["copy"]):
            where = f"layer[{index}].copy[{number}]"
            rule = read_table(item, _COPY, file=file, prefix=where)
            source = _relative_archive_path(rule["from"], file=file, field_name=f"{where}.from")
            oci.image_path(rule["to"].rstrip("/") or "/", origin=file, field_name=f"{where}.to")
            if source.endswith("/") != rule["to"].endswith("/"):
                raise InputError(
                    "a folder must be copied to a folder and a file to a file path",
                    file=file,
                    field=f"{where}.to",
                    found=f"from {source!r} to {rule['to']!r}",
                    expected="both ending with '/' (folder) or neither (file)",
                )
            rules.append(CopyRule(source, rule["to"], rule["optional"]))
        if not rules:
            raise InputError("a layer needs at least one copy rule", file=file, field=f"layer[{index}].copy")
        layers.append(LayerSpec(spec["name"], spec["comment"], tuple(rules)))
    if not layers:
        raise InputError("the image adds no layer", file=file, field="layer", expected="at least one [[layer]]")
    for index, item in enumerate(top["archive_ignore"]):
        _relative_archive_path(item, file=file, field_name=f"archive_ignore[{index}]")

    return ImageDefinition(
        file=path,
        file_sha256=sha256_bytes(definition_bytes),
        name=top["name"],
        lane=top["lane"],
        title=top["title"],
        repository=top["repository"],
        platform=top["platform"],
        compression=top["layer_compression"],
        gzip_level=top["gzip_level"],
        label_namespace=top["label_namespace"],
        archive_ignore=tuple(top["archive_ignore"]),
        base=registry_base,
        package_base=package_base,
        entrypoint=tuple(config["entrypoint"]),
        cmd=tuple(config["cmd"]),
        working_dir=config["working_dir"],
        user=config["user"],
        exposed_ports=tuple(config["exposed_ports"]),
        stop_signal=config.get("stop_signal"),
        env=tuple(env),
        labels=tuple(labels),
        layers=tuple(layers),
    )


def definition_for_lane(lane: Lane, definition: Path | None = None) -> ImageDefinition:
    """The image definition `image` (and `image lock`, `image --verify`) uses for the lane.

    A lane that names its package base (`package.base_image`) has that one: its lock is what the lane's base
    libraries are derived from and its [package.base_image_provider] what the SBOMs credit, so an image on any other
    definition would be described by the wrong base; another --definition is refused, naming both.  Otherwise the
    one containers/*.toml of the lane, or --definition."""
    if lane.base_image is not None:
        named = lane_base_path(lane)
        if definition is not None and Path(definition).resolve() != named.resolve():
            raise InputError(
                "is not the image definition the lane names",
                file=definition, field="--definition", found=str(definition),
                expected=f"{lane.base_image} (the lane's package.base_image, {lane.file})",
                why="the lane's base libraries are derived from that definition's lock and its package.base_image_provider names that "
                "base's supplier: an image on another definition would ship a base the build, package and SBOMs do not describe",
                fix=f"leave --definition (and PIPELINE_IMAGE_DEFINITION) out: {lane.base_image} is the default; or make the lane name this "
                "definition (package.base_image, with its base_image_provider) and package again",
            )
        loaded = lane_base_definition(lane)
        assert loaded is not None
        return loaded
    if definition is not None:
        loaded = load_definition(definition)
        if loaded.lane != lane.id:
            raise InputError("image definition belongs to another lane", file=definition, field="lane", found=loaded.lane, expected=repr(lane.id))
        return loaded
    found = []
    for path in sorted(DEFINITIONS_DIR.glob("*.toml")):
        loaded = load_definition(path)
        if loaded.lane == lane.id:
            found.append(loaded)
    if len(found) != 1:
        raise InputError(
            f"found {len(found)} image definitions for lane {lane.id}",
            file=DEFINITIONS_DIR,
            expected="exactly one containers/*.toml with lane = " + repr(lane.id),
            fix="pass --definition FILE",
        )
    return found[0]


def read_package_lock(definition: ImageDefinition) -> apt_lock.AptLock:
    """The definition's package lock, refused when it was made for another request (a stale lock)."""
    assert definition.package_base is not None
    path = apt_lock.lock_path(definition.file)
    lock = apt_lock.read_lock(path)
    expected = apt_lock.request_digest(definition.package_base.request(definition.architecture))
    if lock.request_sha256 != expected or lock.architecture != definition.architecture:
        raise InputError(
            "the package lock was made for another package request than the definition's",
            file=path, field="request_sha256", found=lock.request_sha256, expected=expected,
            why="base.packages, base.source or the platform changed since the lock was written, so the lock no longer says what the definition asks for",
            fix="run 'python -m pipeline image lock' (nox -s image-lock), review the lock's difference and commit it",
        )
    return lock


def repository_name(path: Path) -> str:
    """A definition's or lock's path as the repository names it ('containers/trixie/ninfer-runtime.toml'), for messages,
    the register and provenance; a file outside the repository by its name alone (a path of this machine would make
    the provenance of one image differ between clones)."""
    try:
        return Path(path).resolve().relative_to(REPO_ROOT.resolve()).as_posix()
    except ValueError:
        return Path(path).name


def lane_base_path(lane: Lane) -> Path:
    """The file `package.base_image` names, in the repository the definitions (and their keyrings) are read from."""
    assert lane.base_image is not None
    return REPO_ROOT / lane.base_image


def lane_base_inputs(lane: Lane) -> dict[str, str] | None:
    """What the lane's derived base libraries are read from, by SHA-256 (a stage's fingerprint): the package-base
    definition and its lock, so a relock or an edited definition makes such a stage out of date.  None on a registry base."""
    definition = lane_base_definition(lane)
    if definition is None:
        return None
    return {"definition": lane.base_image or "", "definition_sha256": definition.file_sha256,
            "lock_sha256": sha256_file(apt_lock.lock_path(definition.file))}


def lane_base_definition(lane: Lane) -> ImageDefinition | None:
    """The package-base definition the lane names in `package.base_image`, checked to be this lane's and of kind packages."""
    if lane.base_image is None:
        return None
    definition = load_definition(lane_base_path(lane))
    if definition.lane != lane.id or definition.package_base is None:
        raise InputError(
            "package.base_image must name a package-base image definition of this lane",
            file=lane.file, field="package.base_image", found=f"{lane.base_image}: lane {definition.lane!r}, base kind "
            + ("'packages'" if definition.package_base is not None else "'registry'"),
            expected=f"lane {lane.id!r} and [base] kind = 'packages'",
            fix="name the containers/**.toml whose package lock the image is made from, or type package.base_image_libraries for a registry base",
        )
    return definition


def lane_base_libraries(lane: Lane) -> dict[str, str]:
    """The libraries the lane's image base provides: library file name -> who ships it ('<package>' or 'wheel:<distribution>').

    Derived, for a lane naming a package base (`package.base_image`): every library its lock's packages place in
    the loader's default folders, plus the [[base.wheel_file]] files placed there (libcudart from the CUDA wheel).
    A lane on a registry base types them (`package.base_image_libraries`): nothing can be read from a base not
    pulled yet."""
    definition = lane_base_definition(lane)
    if definition is None:
        return {name: "base-image" for name in lane.base_image_libraries}
    assert definition.package_base is not None
    found = read_package_lock(definition).libraries()
    folders = library_folders(definition.architecture)
    for item in definition.package_base.wheel_files:
        target = PurePosixPath(item.target)
        if str(target.parent).strip("/") in folders and ".so" in target.name:
            found.setdefault(target.name, f"wheel:{item.distribution}")
    return dict(sorted(found.items()))


def archive_prefix(definition: ImageDefinition) -> str:
    """The common folder our layers put the archive's files under (e.g. /opt/ninfer)."""
    targets = [rule.target for layer in definition.layers for rule in layer.rules]
    prefix = os.path.commonpath(targets) if targets else "/"
    return prefix if prefix.startswith("/") else "/" + prefix
