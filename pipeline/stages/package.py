"""Stage `package`: turn a lane's build into the closed asset set a maintainer publishes.

Input: the register entries the build stage wrote for the lane (binaries,
runtime libraries from `--prebuilt`, `build-identity.json`, the `git archive`
source tar, the toolchain record: the libraries the build's toolchain ships,
with hashes, licence files and wheel authors), the lane file, and for Windows lanes the serving contract
(`server-config.json`, `release-spec.json`) and the four lifecycle scripts.

Preflight refuses, before any work: a build of another cut than the lane's
current one (pipeline/stages/cut.py; the beta number is the cut's), binaries whose
bytes changed since the build, an invalid server configuration or release
spec, a script that is not Windows PowerShell 5.1, and any imported library
that is neither provided by the target nor bundleable (`pipeline.lanework.binaries`).

Run: the whole set is made twice, in two separate staging folders, from the
same inputs; every file must be byte-identical or the stage stops.  The set is
then checked with the same `check_assets` users run on a download, moved into
`dist/<lane>/assets/` in one rename, and each file is registered.  A re-run
with unchanged inputs is a no-op (the stage contract).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import string
import tempfile
import zlib
from importlib import metadata
from pathlib import Path
from typing import Any

from pipeline.codedigest import code_digest
from pipeline.errors import InputError, IntegrityError, RefusedError, UsageError
from pipeline.formats import assets, provenance, sbom
from pipeline.formats import components as bom_model
from pipeline.formats.image_definition import lane_base_inputs
from pipeline.formats.lanes import REPO_ROOT, Lane
from pipeline.formats.release.names import OIDC_ISSUER
from pipeline.formats.toolchain_record import ToolchainRecord, read_record
from pipeline.infra import archive
from pipeline.infra.safetar import SafeTar
from pipeline.lanework import binaries
from pipeline.register import Artifact
from pipeline.stage import Context, Stage
from pipeline.util import ui
from pipeline.util.fs import atomic_output_dir, atomic_write_bytes, copy_file
from pipeline.util.hashing import file_digests, sha256_bytes, sha256_file
from pipeline.util.jsonio import canonical_bytes, loads_document, read_json_object
from pipeline.util.proc import ToolRecord
from pipeline.util.safepath import safe_component, safe_relpath

TEMPLATES = REPO_ROOT / "packaging" / "templates"
INVENTORY = "third_party/inventory.json"
# Receipt keys of the three runtime binaries (anchor §8).
PROGRESS_THRESHOLD = 32 << 20
BINARY_KEYS = {"ninfer": "ninfer_sha256", "ninfer-serve": "server_sha256", "ninfer_bench": "benchmark_sha256"}


def _repo_path(value: str) -> Path:
    path = Path(value)
    return path if path.is_absolute() else REPO_ROOT / path


def _code_digest() -> str:
    # the stage's code closure and the packaging templates it renders (outside the package)
    return code_digest(__name__, *sorted(TEMPLATES.glob("*.in")))


def _tar_members(tar_bytes: bytes) -> dict[str, bytes]:
    members: dict[str, bytes] = {}
    # The runtime source is another repository's: read its `git archive` with the bounded reader.
    with SafeTar(tar_bytes, compression=None, label="the runtime source's git archive", error=InputError) as source:
        for info in source:
            if info.isreg():
                members[info.name.removeprefix("./")] = source.read_member(info, len(tar_bytes))
    return members


class PackageStage(Stage):
    name = "package"

    def __init__(
        self,
        ctx: Context,
        lane: Lane,
        *,
        source_date_epoch: int | None = None,
        jobs: int | None = None,
        level: int = archive.DEFAULT_LEVEL,
        cut=None,
    ) -> None:
        super().__init__(ctx)
        self.lane = lane
        self.beta = cut.n if cut is not None else lane.beta
        # rebuild --verify: the CutBinding the published set was made as, instead of the lane's current cut.
        self.given_cut = cut
        self.cut = None
        self.requested_epoch = source_date_epoch
        self.jobs = jobs
        self.level = level
        self.identity: dict[str, Any] = {}
        self.inputs_used: dict[str, Artifact] = {}
        self.binary_files: dict[str, Path] = {}
        self.library_files: dict[str, Path] = {}
        self.licence_files: dict[str, Path] = {}  # a redistributable's own licence text from the build (--prebuilt)
        self.source_tar = b""
        self.source_members: dict[str, bytes] = {}
        self.vendored: list[dict[str, Any]] = []
        self.resolution: binaries.Resolution | None = None
        self.config = None
        self.spec = None
        self.scripts: dict[str, Path] = {}
        self.epoch = 0
        self.patchelf: ToolRecord | None = None  # Linux lanes: the patchelf that sets RUNPATH=$ORIGIN
        self.toolchain: ToolchainRecord | None = None  # the build's toolchain record (register kind `toolchain`)
        self.toolchain_file: Path | None = None

    @property
    def key(self) -> str:
        return f"package:{self.lane.id}"

    def describe(self) -> str:
        return f"{self.lane.id} ({self.lane.tag(self.beta) if self.beta is not None else 'current cut'})"

    @property
    def out_dir(self) -> Path:
        return self.ctx.dist / self.lane.id / assets.ASSETS_DIR

    def leftovers(self) -> list[tuple[Path, tuple[str, ...]]]:
        # The names run() stages under (atomic_output_dir's .staging/.old, the second build, payloads).
        name = self.out_dir.name
        return [(self.out_dir.parent, (f".{name}.*.staging", f".{name}.*.old", ".package-b.*", ".payload.*"))]

    # -- preflight -----------------------------------------------------------
    def preflight(self) -> None:
        lane = self.lane
        register = self.ctx.register
        identity_entry = register.one("build-identity", lane=lane.id, needed_by="package", produced_by="build")
        self.identity = read_json_object(register.verified_path(identity_entry))
        self.inputs_used = {identity_entry.name: identity_entry}
        from pipeline.formats.cut_binding import check_binding_current, check_build_binding

        build_beta = lane.beta_from_tag(self.identity["component_tag"])
        recorded_cut = identity_entry.attrs.get("cut") or {}
        if self.given_cut is None:
            self.cut = check_binding_current(lane, recorded_cut, file=register.path_of(identity_entry), stage="package")
        elif recorded_cut != self.given_cut.to_json():
            raise IntegrityError(
                f"the build in the register is not a build as {self.given_cut.tag}" + (" (a rehearsal)" if self.given_cut.rehearsal else ""),
                file=register.path_of(identity_entry),
                field="attrs.cut",
                found=recorded_cut,
                expected=self.given_cut.to_json(),
                fix="build the lane again as that cut",
            )
        else:
            self.cut = self.given_cut
        if self.cut.n != build_beta or self.identity.get("cut") != self.cut.to_json() or (not self.cut.rehearsal and self.cut.commit != self.identity["source"]["commit"]):
            raise IntegrityError("build-identity.json names another cut than its register entry", file=register.path_of(identity_entry), field="component_tag", found=self.identity["component_tag"], expected=self.cut.tag)
        self.beta = build_beta
        for entry in register.query("binary", lane=lane.id):
            self.binary_files[Path(entry.path).name] = register.verified_path(entry)
            self.inputs_used[entry.name] = entry
        for binary in lane.binaries:
            if lane.binary_file(binary) not in self.binary_files:
                raise InputError(f"the register has no {lane.binary_file(binary)} for lane {lane.id}", file=register.file, fix="run the build stage again")
        recorded = self.identity.get("binaries", {})
        if recorded != {name: sha256_file(path) for name, path in self.binary_files.items()}:
            raise IntegrityError("build-identity.json does not list the registered binaries", file=register.path_of(identity_entry), field="binaries", found=sorted(recorded), expected=sorted(self.binary_files))
        for entry in register.query("runtime-library", lane=lane.id):
            self.library_files[entry.attrs["library"]] = register.verified_path(entry)
            self.inputs_used[entry.name] = entry
        for entry in register.query("licence-text", lane=lane.id):
            self.licence_files[entry.attrs["licence_file"]] = register.verified_path(entry)
            self.inputs_used[entry.name] = entry
        recorded_licences = self.identity.get("redistributable_licences") or {}
        if recorded_licences != {name: sha256_file(path) for name, path in self.licence_files.items()}:
            raise IntegrityError("build-identity.json does not list the registered licence texts", file=register.path_of(identity_entry),
                                 field="redistributable_licences", found=sorted(recorded_licences), expected=sorted(self.licence_files), fix="run the build stage again")
        # The build's toolchain as the build recorded it: its libraries, licence files and wheel authors.
        toolchain_entry = register.one("toolchain", lane=lane.id, needed_by="package", produced_by="build")
        self.toolchain_file = register.verified_path(toolchain_entry)
        self.toolchain = read_record(self.toolchain_file)
        self.inputs_used[toolchain_entry.name] = toolchain_entry
        source_entry = register.one("source-tar", lane=lane.id, needed_by="package", produced_by="build")
        self.source_tar = register.verified_path(source_entry).read_bytes()
        self.inputs_used[source_entry.name] = source_entry
        if sha256_bytes(self.source_tar) != self.identity.get("source_tar_sha256"):
            raise IntegrityError("the source tar is not the one the build recorded", file=register.path_of(source_entry), found=sha256_bytes(self.source_tar), expected=self.identity.get("source_tar_sha256"))
        self.source_members = _tar_members(self.source_tar)
        if "LICENSE" not in self.source_members:
            raise InputError("the source has no LICENSE file at its root", file=register.path_of(source_entry), why="the package ships the runtime's licence text", fix="add LICENSE to the source tree")
        self.vendored = self._vendored_inventory(register.path_of(source_entry))
        self.epoch = self._epoch()
        if lane.package_layout == "native-asset-set":
            self._check_native_contract()
        else:
            self.patchelf = binaries.patchelf_record()
            where = "the pipeline environment" if self.patchelf.origin == "pipeline-environment" else "PATH"
            ui.info(f"patchelf: {self.patchelf.path} ({self.patchelf.version}, from {where})")
        self.resolution = self._resolve()
        ui.info(f"source {self.identity['source']['commit']}, epoch {self.epoch}, {len(self.resolution.bundled())} bundled libraries, {len(self.resolution.provided())} provided by the target")
        # Last, once the lane's own content was checked (its defects are named first): the whole cut binding.
        check_build_binding(lane, self.identity, self.cut, stage="package")

    def _epoch(self) -> int:
        if self.requested_epoch is not None:
            value: int | str = self.requested_epoch
            origin = "--source-date-epoch"
        elif os.environ.get("SOURCE_DATE_EPOCH"):
            value = os.environ["SOURCE_DATE_EPOCH"]
            origin = "SOURCE_DATE_EPOCH"
        else:
            value = self.identity["source_date_epoch"]
            origin = "build-identity.json source_date_epoch"
        try:
            epoch = int(value)
        except ValueError:
            raise UsageError("the source epoch is not a whole number of seconds", field=origin, found=value) from None
        if not 0 <= epoch <= archive.MAX_EPOCH:
            raise UsageError("the source epoch does not fit 32 bits", field=origin, found=epoch, expected=f"0..{archive.MAX_EPOCH}")
        return epoch

    def _vendored_inventory(self, source_path: Path) -> list[dict[str, Any]]:
        raw = self.source_members.get(INVENTORY)
        if raw is None:
            ui.warn(f"the source has no {INVENTORY}: the CycloneDX SBOM lists no vendored components")
            return []
        where = f"{source_path}!{INVENTORY}"
        inventory = loads_document(raw, source=where)
        components = inventory.get("components") if isinstance(inventory, dict) else None
        if not isinstance(inventory, dict) or inventory.get("schema_version") != 1 or not isinstance(components, list):
            raise InputError("is not a vendored inventory of schema 1", file=where, expected="{schema_version: 1, components: [...]}")
        required = ("name", "version", "license", "purl", "supplier", "path", "license_file", "files")
        seen: dict[str, int] = {}
        for index, component in enumerate(components):
            if not isinstance(component, dict):
                raise InputError("vendored component is not an object", file=where, field=f"components[{index}]", found=type(component).__name__, expected="an object")
            for key in required:
                if key not in component:
                    raise InputError("vendored component lacks a field", file=where, field=f"components[{index}].{key}")
            # Names and paths from another repository's bytes: checked here, before any becomes a
            # path of the payload (licenses/third_party/<name>/<licence file name>).
            name = safe_component(component["name"], file=where, field=f"components[{index}].name", max_len=100, expected="a component name such as 'zlib'")
            if name.lower() in seen:
                raise InputError("two vendored components share a name", file=where, field=f"components[{index}].name", found=name,
                                 expected=f"a name not used by components[{seen[name.lower()]}]", why="each component's licence text has its own folder in the package")
            seen[name.lower()] = index
            safe_relpath(component["path"], file=where, field=f"components[{index}].path", hidden=True)
            licence = safe_relpath(component["license_file"], file=where, field=f"components[{index}].license_file", hidden=True)
            safe_component(licence.rsplit("/", 1)[-1], file=where, field=f"components[{index}].license_file", expected="a licence file with a plain name, e.g. 'third_party/zlib/LICENSE'")
            if not isinstance(component["files"], list):
                raise InputError("must be a list of {path, sha256}", file=where, field=f"components[{index}].files", found=type(component["files"]).__name__)
            for number, item in enumerate(component["files"]):
                if not isinstance(item, dict) or not isinstance(item.get("sha256"), str):
                    raise InputError("must be an object {path, sha256}", file=where, field=f"components[{index}].files[{number}]", found=item)
                safe_relpath(item.get("path"), file=where, field=f"components[{index}].files[{number}].path", hidden=True)
                data = self.source_members.get(item["path"])
                if data is None:
                    raise IntegrityError("the inventory lists a vendored file the source does not hold", file=where, field=f"components[{index}].files", found=item["path"])
                if sha256_bytes(data) != item["sha256"]:
                    raise IntegrityError(
                        f"hash mismatch: the inventory declares a SHA-256 for {item['path']} that differs from the file's bytes",
                        file=where,
                        field=f"{component['name']}: {item['path']}",
                        found=item["sha256"],
                        expected=sha256_bytes(data),
                    )
            if component["license_file"] not in self.source_members:
                raise InputError("vendored component's licence file is not in the source", file=where, field=f"components[{index}].license_file", found=component["license_file"])
            if "copyright" not in component:
                # The notice as the component's own licence file states it (SBOM copyright text).
                text = self.source_members[component["license_file"]].decode("utf-8", "replace")
                component = dict(component, copyright=bom_model.copyright_lines(text))
                components[index] = component
        return sorted(components, key=lambda c: c["name"])

    def _check_native_contract(self) -> None:
        from pipeline.formats.serverconfig import check_release_spec, load_server_config
        from pipeline.infra.powershell import assert_powershell51

        lane = self.lane
        assert lane.server_config and lane.release_spec
        config_path, spec_path = _repo_path(lane.server_config), _repo_path(lane.release_spec)
        self.config = load_server_config(config_path)
        self.spec = check_release_spec(spec_path, lane, config_path=config_path)
        if self.config.deployment_profile != lane.deployment_profile(self.beta):
            raise InputError(
                "server-config.json serves another deployment profile than this component's",
                file=config_path,
                field="deployment_profile",
                found=self.config.deployment_profile,
                expected=repr(lane.deployment_profile(self.beta)),
            )
        commit = self.identity["source"]["commit"]
        if self.spec.source["commit"] != commit:
            raise RefusedError(
                "release-spec.json binds another source commit than the build's",
                file=spec_path,
                field="source.commit",
                found=self.spec.source["commit"],
                expected=commit,
                why="the package ships release-spec.json, which must name the commit its binaries were built from",
                fix="package the build of the lane's frozen source commit",
            )
        for script in lane.support_scripts:
            path = _repo_path(script)
            if not path.is_file():
                raise InputError("lifecycle script does not exist", file=path, field="package.support_scripts")
            self.scripts[path.name] = path
        assert_powershell51(sorted(self.scripts.values()))

    def _resolve(self) -> binaries.Resolution:
        lane = self.lane
        assert self.toolchain is not None
        libraries = binaries.recorded_libraries(self.toolchain)
        resolution = binaries.resolve_libraries(
            lane,
            self.binary_files,
            candidates=self.library_files,
            toolchain=libraries,
            toolchain_version=self.identity.get("cuda_toolkit"),
            licence_texts=self.licence_files,
        )
        self._check_licence_texts(resolution)
        bundled = {lib.path for lib in resolution.bundled()}
        for library in libraries.values():
            if library.path in bundled:  # bundle only the bytes the toolchain that built the binaries had
                binaries.check_recorded(library, record_file=self.toolchain_file)
        for name in binaries.unused_candidates(resolution, self.library_files, fold=lane.is_windows):
            ui.warn(f"{name} came with the build, but no binary imports or loads it: it is not bundled")
        return resolution

    def _check_licence_texts(self, resolution: binaries.Resolution) -> None:
        """A redistributable whose terms its own package ships (license_from_prebuilt) ships that text: the
        repository's stand-in is refused unless the cut is a rehearsal, and so is a given text that is the stand-in."""
        rehearsal = bool(self.cut and self.cut.rehearsal)
        for library in resolution.bundled():
            item = library.redistributable
            if item is None or item.license_from_prebuilt is None:
                continue
            stand_in = REPO_ROOT / item.license_file
            assert library.license_file is not None
            if not library.license_stand_in and library.license_file.read_bytes() == stand_in.read_bytes():
                raise InputError(
                    f"the licence text given for {library.name} is the repository's stand-in, not the one its package ships",
                    file=library.license_file,
                    field="redistributable_licences",
                    found=f"{item.license_from_prebuilt}: the bytes of {item.license_file}",
                    expected=f"the {item.license_from_prebuilt} of the package {library.name} comes from",
                    fix=f"copy {item.license_from_prebuilt} from the redistributable's package (not {item.license_file}) beside the DLLs and build again",
                )
            if library.license_stand_in and not rehearsal:
                raise RefusedError(
                    f"no licence text came with {library.name}: the set would ship the repository's stand-in {item.license_file}",
                    file=self.lane.file,
                    field=f"package.redistributables: {library.name}.license_from_prebuilt",
                    found=f"no {item.license_from_prebuilt} in the build's --prebuilt folder",
                    expected=f"{item.license_from_prebuilt}, the licence file the {item.origin} package ships, beside the DLLs given to build --prebuilt",
                    why="a published set carries the redistributable's own licence terms; the stand-in only names them",
                    fix=f"put the package's {item.license_from_prebuilt} beside {library.name} in the --prebuilt folder (the Windows job does) and build again",
                )
            if library.license_stand_in:
                ui.warn(f"{library.name}: a rehearsal ships the stand-in licence text {item.license_file} (a release is refused without {item.license_from_prebuilt})")

    # -- inputs ----------------------------------------------------------------
    def inputs(self) -> dict[str, Any]:
        assert self.resolution is not None
        lane = self.lane
        data: dict[str, Any] = {
            "lane": lane.id,
            "lane_file_sha256": lane.file_sha256,
            "cut": self.cut.to_json() if self.cut else None,
            "epoch": self.epoch,
            "level": self.level,
            "register": {name: entry.sha256 for name, entry in sorted(self.inputs_used.items())},
            "bundled": {lib.name: sha256_file(lib.path) for lib in self.resolution.bundled() if lib.path},
            "licence_texts": {str(p): sha256_file(p) for p in sorted({lib.license_file for lib in self.resolution.bundled() if lib.license_file})},
            "code": _code_digest(),
            "zlib": zlib.ZLIB_RUNTIME_VERSION,
            "libraries": {name: metadata.version(name) for name in ("spdx-tools", "cyclonedx-python-lib", "pefile", "pyelftools")},
            # The base libraries the resolution counts as provided are derived from the lane's package base: its definition
            # and lock take part, so a relock makes the set out of date (None on a registry base: the lane file types them).
            "base_image": lane_base_inputs(lane),
            # The provenance beside the set: who states it, and the lock its wheel URLs come from.
            "provenance": {"builder": provenance.builder(), "lock": sha256_file(REPO_ROOT / provenance.LOCK_NAME),
                           "pipeline_lock": sha256_file(REPO_ROOT / provenance.PIPELINE_LOCK_NAME)},
        }
        if lane.is_windows:
            data["contract"] = {name: sha256_file(path) for name, path in [("server-config", _repo_path(lane.server_config or "")), ("release-spec", _repo_path(lane.release_spec or ""))]}
            data["scripts"] = {name: sha256_file(path) for name, path in sorted(self.scripts.items())}
        else:
            assert self.patchelf is not None
            data["patchelf"] = self.patchelf.provenance()
        return data

    # -- run -------------------------------------------------------------------
    def run(self) -> list[Artifact]:
        lane = self.lane
        expected = assets.asset_set(lane, self.beta)
        work_parent = self.ctx.dist / lane.id
        work_parent.mkdir(parents=True, exist_ok=True)
        second = Path(tempfile.mkdtemp(prefix=".package-b.", dir=work_parent))
        try:
            with atomic_output_dir(self.out_dir) as first:
                ui.step(self.name, f"{lane.id}: making the asset set (first of two builds)")
                self._make_set(first, expected)
                ui.step(self.name, f"{lane.id}: making it again to prove it is byte-reproducible")
                self._make_set(second / "assets", expected)
                self._compare(first, second / "assets", expected)
                report = assets.check_assets(first, lane=lane, beta=self.beta)
                for line in report.checks:
                    ui.info(f"check: {line}")
                statement = self._provenance(first, expected)
                if statement != self._provenance(second / "assets", expected):
                    raise IntegrityError("the provenance is not reproducible: the two sets give different statements", file=self.provenance_path(expected), why="something time- or machine-dependent reached the statement")
        finally:
            shutil.rmtree(second, ignore_errors=True)
        atomic_write_bytes(self.provenance_path(expected), statement)
        register = self.ctx.register
        outputs = []
        for asset in expected.assets:
            outputs.append(
                register.make(
                    asset.kind,
                    self.out_dir / asset.name,
                    stage=self.name,
                    lane=lane.id,
                    name=expected.entry_name(asset.name),
                    **expected.entry_attrs(asset.name),
                    # Where the receipt's patchelf ran from: machine-local, so here and not in the hashed receipt.
                    **({"patchelf_path": self.patchelf.path} if self.patchelf is not None and asset.role == "receipt" else {}),
                    rehearsal=bool(self.cut and self.cut.rehearsal),
                )
            )
        for asset in outputs:
            ui.info(f"{Path(asset.path).name}: sha256 {asset.sha256} ({asset.size} bytes)")
        outputs.append(
            register.make(
                "provenance",
                self.provenance_path(expected),
                stage=self.name,
                lane=lane.id,
                name=f"{lane.id}/{provenance.FOLDER}/{self.provenance_path(expected).name}",
                component_tag=expected.component_tag,
                build_type=provenance.BUILD_TYPE_SET,
                subjects=len(expected.names()),
            )
        )
        ui.info(f"provenance {self.provenance_path(expected).name}: {len(expected.names())} subjects (beside the set, not part of it)")
        return outputs

    def provenance_path(self, expected: assets.AssetSet) -> Path:
        return self.ctx.dist / self.lane.id / provenance.FOLDER / provenance.set_statement_name(expected.package_root)

    def _provenance(self, asset_dir: Path, expected: assets.AssetSet) -> bytes:
        """The set's SLSA provenance: every file of the closed set a subject (formats/provenance.py)."""
        files = {name: sha256_file(asset_dir / name) for name in expected.names()}
        byproducts = {
            "build-identity.json": self._packaged_identity_sha256,
            **{expected.name_of(role): files[expected.name_of(role)] for role in ("spdx", "cdx", "inner-sums")},
        }
        return provenance.make_set_statement(lane=self.lane, identity=self.identity, files=files, byproducts=byproducts)

    def _compare(self, first: Path, second: Path, expected: assets.AssetSet) -> None:
        # The package first: a difference there is the cause, later files only inherit it.
        order = {role: index for index, role in enumerate(assets.ROLE_KINDS)}
        for name in sorted(expected.names(), key=lambda n: (order[expected.role_of(n)], n)):
            a, b = sha256_file(first / name), sha256_file(second / name)
            if a != b:
                raise IntegrityError(
                    "the package is not reproducible: two builds from the same inputs differ",
                    file=first / name,
                    found=f"first build {a}, second build {b}",
                    expected="byte-identical files",
                    why="something time-, order- or machine-dependent reached the bytes (a timestamp, a directory order, a random id)",
                    fix="report this with both files; nothing was published",
                )

    def _make_set(self, asset_dir: Path, expected: assets.AssetSet) -> None:
        asset_dir.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=".payload.", dir=asset_dir.parent))
        try:
            payload = work / expected.package_root
            self._make_payload(payload, expected)
            self._make_assets(payload, asset_dir, expected)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    # -- the payload -------------------------------------------------------------
    def _make_payload(self, payload: Path, expected: assets.AssetSet) -> None:
        assert self.resolution is not None
        lane = self.lane
        bin_dir = payload / assets.BIN_DIR
        bin_dir.mkdir(parents=True)
        packaged: dict[str, str] = {}
        for name, source in sorted(self.binary_files.items()):
            target = bin_dir / name
            copy_file(source, target, mode=0o755)
            # Checked, never rewritten: the build linked them with RUNPATH=$ORIGIN (a rewrite in place would keep the
            # host path's length and the build-id computed over it).
            binaries.require_linked_origin_runpath(target)
            packaged[name] = sha256_file(target)
        runtime: dict[str, str] = {}
        for library in self.resolution.bundled():
            assert library.path is not None
            target = bin_dir / library.name
            copy_file(library.path, target, mode=0o755)
            # A bundled library comes from the pinned toolchain's bytes (no host path): giving it RUNPATH=$ORIGIN is
            # deterministic.
            binaries.set_origin_runpath(target)
            runtime[library.name] = sha256_file(target)

        (payload / "LICENSE").write_bytes(self.source_members["LICENSE"])
        licenses = payload / assets.LICENSES_DIR
        for component in self.vendored:
            target = licenses / "third_party" / component["name"] / Path(component["license_file"]).name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(self.source_members[component["license_file"]])
        for library in self.resolution.bundled():
            if library.license_file is None:
                raise InputError(f"no licence text for the bundled library {library.name}", file=lane.file, fix="declare it as a redistributable with license_file")
            assert library.license_name is not None
            target = licenses / library.license_name
            data = library.license_file.read_bytes()
            if target.exists() and target.read_bytes() != data:
                raise InputError("two different licence texts share one file name", file=library.license_file, found=target.name)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)

        release_version = self.identity["release_version"]
        (payload / "VERSION").write_bytes(f"{release_version}\n".encode())
        if lane.is_windows:
            assert lane.server_config and lane.release_spec
            copy_file(_repo_path(lane.server_config), payload / "server-config.json", mode=0o644)
            copy_file(_repo_path(lane.release_spec), payload / "release-spec.json", mode=0o644)
            for name, path in sorted(self.scripts.items()):
                copy_file(path, payload / name, mode=0o644)

        identity = dict(self.identity)
        identity["binaries"] = packaged
        identity["runtime_dependencies"] = runtime
        identity["package"] = {"name": expected.package_root, "component_tag": expected.component_tag, "layout": lane.package_layout}
        identity["source_archive_sha256"] = None  # filled below, once the source archive exists
        if lane.is_windows:
            identity["configuration_sha256"] = sha256_file(payload / "server-config.json")
        self._payload_identity = identity
        self._render_docs(payload, expected, packaged, runtime)

    def _render_docs(self, payload: Path, expected: assets.AssetSet, packaged: dict[str, str], runtime: dict[str, str]) -> None:
        assert self.resolution is not None
        lane = self.lane
        ident = self.identity
        bundled = self.resolution.bundled()
        values = {
            "release_version": ident["release_version"],
            "lane_title": lane.title,
            "lane_id": lane.id,
            "package_root": expected.package_root,
            "component_tag": expected.component_tag,
            "component_repository": lane.component_repository,
            "source_commit": ident["source"]["commit"],
            "source_tree": ident["source"]["tree"],
            "gpu_name": lane.gpu_name,
            "cuda_architecture": lane.cuda_architecture,
            "cuda_toolkit": ident.get("cuda_toolkit", lane.cuda_toolkit),
            "runtime_license": lane.runtime_license,
            "deployment_profile": ident.get("deployment_profile", lane.deployment_profile(self.beta)),
            "upstream_base_sha": ident.get("upstream_base_sha"),
            "build_profile": ident.get("build_profile"),
            "build_type": ident.get("build_type"),
            "cxx_compiler": ident.get("cxx_compiler"),
            "cuda_compiler": ident.get("cuda_compiler"),
            "build_route": ident.get("build_route"),
            "bundled_note": (" and the app-local libraries they import: " + ", ".join(f"`{lib.name}`" for lib in bundled)) if bundled else "",
            "config_rows": (
                "| `server-config.json` | the public server configuration; its SHA-256 is the configuration identity |\n"
                "| `release-spec.json` | the lane's release contract (GPU, source, model binding, lifecycle) |\n"
                "| `*.ps1` | the Windows PowerShell 5.1 lifecycle scripts (install, control, GPU owner, state protection) |\n"
                if lane.is_windows else ""
            ),
            "run_section": (
                "Install with `Install-Release.ps1` from the same asset set; it verifies the set, installs this payload\n"
                "into a versioned root, and `Control-Release.ps1` starts and stops the server as configured."
                if lane.is_windows else
                "The binaries expect the CUDA 13 runtime and FFmpeg/libcurl of the container base image\n"
                "(the image stage builds it); `bin/ninfer-serve --help` lists the server's options."
            ),
            "binary_rows": "\n".join(f"| `bin/{name}` | `{digest}` |" for name, digest in sorted(packaged.items())),
            "library_rows": "\n".join(
                [f"| `{lib.name}` | bundled (`bin/`) | {lib.origin}{' ' + lib.version if lib.version else ''} | `{runtime[lib.name]}` |" for lib in bundled]
                + [f"| `{lib.name}` | {lib.provided_by} | not bundled | — |" for lib in self.resolution.provided()]
            ),
            # The purl as both SBOMs spell it (the one builder's canonical form: a github name lowercased).
            "vendored_rows": "\n".join(
                f"| {c['name']} | {c['version']} | {c['license']} | `{bom_model.canonical_purl(c['purl'], where='third_party/inventory.json: ' + c['name'] + '.purl')}` |"
                for c in self.vendored
            ) or "| — | | | |",
        }
        for template, name in (("README.md.in", "README.md"), ("RELEASE_NOTES.md.in", "RELEASE_NOTES.md")):
            text = string.Template((TEMPLATES / template).read_text("utf-8")).substitute(values)
            (payload / name).write_bytes(text.encode("utf-8"))

    # -- the assets --------------------------------------------------------------
    def _make_assets(self, payload: Path, asset_dir: Path, expected: assets.AssetSet) -> None:
        assert self.resolution is not None
        lane = self.lane
        source_name = expected.name_of("source")
        source = archive.write_gzip([self.source_tar], asset_dir / source_name, level=self.level, mtime=self.epoch, jobs=self.jobs)
        identity = dict(self._payload_identity)
        identity["source_archive_sha256"] = source.sha256
        atomic_write_bytes(payload / "build-identity.json", canonical_bytes(identity, indent=None))
        self._packaged_identity_sha256 = sha256_file(payload / "build-identity.json")
        files = sorted(p for p in payload.rglob("*") if p.is_file())
        digests = {p.relative_to(payload).as_posix(): file_digests(p) for p in files}
        atomic_write_bytes(payload / assets.PAYLOAD_SUMS, assets.render_sums({name: d[0] for name, d in digests.items()}, paths=True))
        digests[assets.PAYLOAD_SUMS] = file_digests(payload / assets.PAYLOAD_SUMS)
        for path in payload.rglob("*"):
            if path.is_file():
                os.chmod(path, 0o755 if path.parent.name == assets.BIN_DIR and path.parent.parent == payload else 0o644)

        package_name = expected.name_of("package")
        total = archive.tar_size(archive.collect_members(payload, expected.package_root))
        # Progress only where it helps: a sample-sized payload compresses in an instant.
        progress = ui.ByteProgress(f"compress {package_name}", total) if total >= PROGRESS_THRESHOLD else None
        package = archive.write_tar_gz(payload, asset_dir / package_name, prefix=expected.package_root, mtime=self.epoch, level=self.level, jobs=self.jobs, progress=progress)
        if progress is not None:
            progress.finish()

        inp = sbom.SbomInput(
            package_root=expected.package_root,
            package_filename=package_name,
            package_sha256=package.sha256,
            package_bytes=package.size,
            lane_id=lane.id,
            lane_title=lane.title,
            component_repository=lane.component_repository,
            component_tag=expected.component_tag,
            release_version=self.identity["release_version"],
            runtime_license=lane.runtime_license,
            epoch=self.epoch,
            identity_sha256=self._packaged_identity_sha256,
            source=self.identity["source"],
            files=[sbom.PayloadFile(name, d[0], d[1], d[2]) for name, d in sorted(digests.items())],
            binaries={name: f"{assets.BIN_DIR}/{name}" for name in sorted(self.binary_files)},
            libraries=list(self.resolution.libraries.values()),
            edges=dict(self.resolution.edges),
            fold_case=lane.is_windows,
            vendored=self.vendored,
            toolchain=self.identity.get("toolchain", {}),
            cuda_toolkit=self.identity.get("cuda_toolkit", ""),
            runtime_copyright=bom_model.copyright_lines(self.source_members["LICENSE"].decode("utf-8", "replace")),
            providers=dict(lane.providers),
            license_texts=self._license_texts(),
            toolchain_authors=self._toolchain_authors(),
            # The build host's dependencies as the build's preflight found them: both SBOMs list them.
            host_dependencies=bom_model.host_dependency_entries(self.identity),
        )
        # One component model for both documents: they cannot disagree.
        model = sbom.component_model(inp)
        sbom.write_spdx(asset_dir / expected.name_of("spdx"), inp, payload, model)
        sbom.write_cdx(asset_dir / expected.name_of("cdx"), inp, payload, model)

        hashes = {name: sha256_file(asset_dir / name) for name in (package_name, source_name, expected.name_of("spdx"), expected.name_of("cdx"))}
        inner_name = expected.name_of("inner-sums")
        atomic_write_bytes(asset_dir / inner_name, assets.render_sums({name: hashes[name] for name in expected.inner_names()}))
        for name, path in sorted(self.scripts.items()):
            copy_file(path, asset_dir / name, mode=0o644)
            hashes[name] = sha256_file(asset_dir / name)
        hashes[inner_name] = sha256_file(asset_dir / inner_name)
        receipt = self._receipt(expected, package, source, hashes, asset_dir)
        atomic_write_bytes(asset_dir / assets.RECEIPT, canonical_bytes(receipt, indent=2))
        hashes[assets.RECEIPT] = sha256_file(asset_dir / assets.RECEIPT)
        atomic_write_bytes(asset_dir / assets.OUTER_SUMS, assets.render_sums({name: hashes[name] for name in expected.outer_names()}))

    def _license_texts(self) -> dict[str, tuple[str, str]]:
        """LicenseRef-* -> (name, text) for every non-SPDX licence of what the package ships."""
        assert self.resolution is not None
        sources: list[tuple[str, bytes]] = []
        for library in self.resolution.bundled():
            if library.license and library.license_file is not None:
                sources.append((library.license, library.license_file.read_bytes()))
        for component in self.vendored:
            sources.append((component["license"], self.source_members[component["license_file"]]))
        texts: dict[str, tuple[str, str]] = {}
        for expression, data in sources:
            for license_id in sorted(set(re.findall(r"LicenseRef-[A-Za-z0-9.-]+", expression))):
                texts.setdefault(license_id, (license_id.removeprefix("LicenseRef-").replace("-", " "), data.decode("utf-8", "replace")))
        return texts

    def _toolchain_authors(self) -> dict[str, str]:
        """The author each toolchain wheel's METADATA names (its SBOM supplier), as the build recorded it."""
        assert self.toolchain is not None
        return dict(self.toolchain.wheel_authors)

    def _receipt(self, expected: assets.AssetSet, package: archive.ArchiveResult, source: archive.ArchiveResult, hashes: dict[str, str], asset_dir: Path) -> dict[str, Any]:
        assert self.resolution is not None
        lane = self.lane
        ident = self.identity
        packaged = self._payload_identity["binaries"]
        receipt: dict[str, Any] = {
            "artifact_type": assets.RECEIPT_TYPES[lane.package_layout],
            "schema_version": assets.RECEIPT_SCHEMA,
            "lane": lane.id,
            "component_tag": expected.component_tag,
            "release_id": lane.release_id(self.beta),
            "release_version": ident["release_version"],
            "deployment_profile": ident.get("deployment_profile", lane.deployment_profile(self.beta)),
            "build_profile": ident.get("build_profile"),
            "platform": lane.asset_platform,
            "package_layout": lane.package_layout,
            "upstream_base_sha": ident.get("upstream_base_sha"),
            "lineage_base_sha": None,
            "patch_stack_sha": ident.get("patch_stack_sha"),
            "runtime_source_sha": ident["source"]["commit"],
            "runtime_source_tree": ident["source"]["tree"],
            "cuda_architecture": lane.cuda_architecture,
            "cuda_toolkit": ident.get("cuda_toolkit"),
            "build_route": ident.get("build_route"),
            "binaries": {key: packaged.get(lane.binary_file(binary)) for binary, key in BINARY_KEYS.items()},
            "runtime_libraries": {
                "bundled": {lib.name: {"sha256": self._payload_identity["runtime_dependencies"][lib.name], "origin": lib.origin} for lib in self.resolution.bundled()},
                "provided_by_target": {lib.name: lib.provided_by for lib in self.resolution.provided()},
            },
            "config_sha256": self._payload_identity.get("configuration_sha256"),
            "model_sha256": self.config.model.artifact_sha256 if self.config is not None else None,
            "package": {"filename": expected.name_of("package"), "sha256": package.sha256, "bytes": package.size},
            "source_archive": {"filename": expected.name_of("source"), "sha256": source.sha256, "bytes": source.size},
            "sboms": {
                "spdx": {"filename": expected.name_of("spdx"), "sha256": hashes[expected.name_of("spdx")], "format": "SPDX-2.3"},
                "cyclonedx": {"filename": expected.name_of("cdx"), "sha256": hashes[expected.name_of("cdx")], "format": "CycloneDX-1.6"},
            },
            "inner_checksums": {"filename": expected.name_of("inner-sums"), "sha256": hashes[expected.name_of("inner-sums")], "entries": len(expected.inner_names())},
            "checksums": {"filename": assets.OUTER_SUMS, "role": "closed-outer-distribution-set", "entries": len(expected.outer_names()), "line_ending": "LF"},
            "source_date_epoch": self.epoch,
            "reproducibility": {"builds_compared": 2, "gzip_level": self.level, "gzip_block_bytes": archive.BLOCK_SIZE, "zlib": zlib.ZLIB_RUNTIME_VERSION},
            "qualification_status": "hardware-pending",
            "qualification_status_authority": "immutable-pre-hardware-package-build",
            "qualification_summary_artifact_type": assets.QUALIFICATION_SUMMARY_TYPES[lane.package_layout],
            "secret_values_recorded": 0,
        }
        if self.patchelf is not None:  # the packaged ELF bytes depend on the patchelf that rewrote them
            receipt["reproducibility"]["patchelf"] = self.patchelf.provenance()
        if expected.scripts():
            receipt["support_assets"] = {assets.SUPPORT_SCRIPT_KEYS[name]: hashes[name] for name in expected.scripts()}
        return receipt


# -- front doors (CLI and nox) ----------------------------------------------------

def package_lane(
    lane_name: str,
    *,
    dist: Path | str = "dist",
    lanes_dir: Path | None = None,
    lane: Lane | None = None,
    source_date_epoch: int | None = None,
    jobs: int | None = None,
    force: bool = False,
):
    from pipeline.formats.lanes import find_lane
    from pipeline.stage import execute

    lane = lane or find_lane(lane_name, lanes_dir)
    ctx = Context.open(dist, lanes_dir)
    stage = PackageStage(ctx, lane, source_date_epoch=source_date_epoch, jobs=jobs)
    return execute(stage, force=force)


def package_lanes(*, dist: Path | str = "dist", lanes_dir: Path | None = None, jobs: int | None = None, force: bool = False) -> list:
    from pipeline.formats.lanes import load_lanes

    ctx = Context.open(dist, lanes_dir)
    built = sorted({entry.lane for entry in ctx.register.query("build-identity") if entry.lane})
    if not built:
        raise InputError(
            "the register holds no build to package",
            file=ctx.register.file,
            fix="run the build stage first (e.g. 'nox -s build-5090'), with the same --dist",
        )
    lanes = load_lanes(lanes_dir)
    results = []
    for lane_id in built:
        if lane_id not in lanes:
            raise InputError("the register holds a build of an unknown lane", file=ctx.register.file, found=lane_id, expected="one of " + ", ".join(lanes))
        results.append(package_lane(lane_id, dist=dist, lanes_dir=lanes_dir, jobs=jobs, force=force))
    return results


def run_package(args: argparse.Namespace) -> int:
    """`package`: the command line's front door to `package_lane` / `package_lanes`."""
    if args.all:
        package_lanes(dist=args.dist, lanes_dir=args.lanes_dir, jobs=args.jobs, force=args.force)
    else:
        package_lane(args.lane, dist=args.dist, lanes_dir=args.lanes_dir, source_date_epoch=args.source_date_epoch, jobs=args.jobs, force=args.force)
    return 0


def run_check_assets(args: argparse.Namespace) -> int:
    """`check-assets`: check one downloaded asset set and print what was checked."""
    from pipeline.formats.lanes import find_lane

    lane = find_lane(args.lane, args.lanes_dir) if args.lane else None
    report = assets.check_assets(args.directory, lane=lane, beta=args.beta, lanes_dir=args.lanes_dir, deep=not args.shallow)
    if args.provenance is not None:
        report.checks += _check_provenance(args, report)
    if args.json:
        print(json.dumps(report.to_json(), indent=2, sort_keys=True))
    else:
        ui.result(f"{report.directory}: {report.component_tag} ({report.lane}) is a complete, intact asset set")
        for line in report.checks:
            ui.result(f"  ok  {line}")
    return 0


def _check_provenance(args, report: assets.AssetReport) -> list[str]:
    """The statement's subjects are exactly the checked set's files; its DSSE bundle verifies, where one is beside it."""
    from pipeline.infra.sigstore import bundle_path_for, verify_dsse_bundle

    path: Path = args.provenance
    if not path.is_file():
        raise InputError("provenance statement does not exist", file=path, field="--provenance")
    data = path.read_bytes()
    statement = provenance.read_statement(data, origin=str(path))
    provenance.check_subjects(statement, report.files, origin=str(path), what="the set's files")
    if statement.external["lane"] != report.lane or statement.external["component_tag"] != report.component_tag:
        raise IntegrityError("the statement describes another set", file=path, field="externalParameters", found=statement.external, expected=f"lane {report.lane}, component_tag {report.component_tag}")
    lines = [f"provenance: {len(statement.subjects)} subjects are exactly the set's files (source {statement.external['source_commit']}, builder {statement.builder_id})"]
    bundle = bundle_path_for(path)
    if bundle.is_file():
        if not args.certificate_identity:
            lines.append(f"provenance: {bundle.name} is present but not checked (give --certificate-identity and --certificate-oidc-issuer)")
        else:
            verified = verify_dsse_bundle(data, bundle, identity=args.certificate_identity, issuer=args.certificate_oidc_issuer, trust_config=args.trust_config, name=path.name)
            lines.append(f"provenance: DSSE bundle signed by {verified.identity} (log index {verified.log_index})")
    return lines


def register_cli(sub) -> None:
    from pipeline.cli import add_common, beta_argument

    parser = sub.add_parser("package", help="make a lane's closed asset set (package, source, SBOMs, checksums, receipt) from its build")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--lane", help="lane id or short name (see 'lanes')")
    which.add_argument("--all", action="store_true", help="package every lane the register holds a build of")
    parser.add_argument("--source-date-epoch", type=int, help="archive time in seconds (default: SOURCE_DATE_EPOCH, else the source commit time)")
    parser.add_argument("--jobs", type=int, help="compression threads (the bytes do not depend on it; default: all cores)")
    parser.add_argument("--force", action="store_true", help="package again even when inputs are unchanged")
    add_common(parser)
    parser.set_defaults(func=run_package)

    check = sub.add_parser("check-assets", help="check a downloaded asset set: closed, hashes, receipt, package payload, SPDX and CycloneDX")
    check.add_argument("directory", type=Path, help="folder holding exactly one asset set")
    check.add_argument("--lane", help="lane id or short name (default: recognised from the file names)")
    check.add_argument("--beta", type=beta_argument, help="beta number N >= 1 (default: from the names or the receipt)")
    check.add_argument("--shallow", action="store_true", help="names, checksums and receipt only; do not open the package and SBOMs")
    check.add_argument("--provenance", type=Path, help="also check this SLSA statement: its subjects must be exactly the set's files")
    check.add_argument("--certificate-identity", help="with --provenance: the signer its DSSE bundle (<statement>.sigstore.json) must carry")
    check.add_argument("--certificate-oidc-issuer", default=OIDC_ISSUER, help="with --certificate-identity (default: GitHub Actions)")
    check.add_argument("--trust-config", default="production", help="'production' (default), 'staging' or a ClientTrustConfig file")
    add_common(check, dist=False, json_output="print the report as JSON")
    check.set_defaults(func=run_check_assets)


STAGE = PackageStage


def release_plan(ctx: Context, lanes: list[Lane], options) -> list:
    """`release`: package each lane the register holds a build of."""
    from pipeline.stage import Skip

    return [
        (lane.id, (lambda lane=lane: package_lane(lane.id, dist=ctx.dist, lanes_dir=options.lanes_dir)))
        if ctx.register.query("build-identity", lane=lane.id)
        else (lane.id, Skip("no build of this lane in the register"))
        for lane in lanes
    ]
