"""`rebuild --verify`: anyone reproduces a published lane from its source archive and compares bit for bit.

    python -m pipeline rebuild --verify SET_DIR_OR_MANIFEST --lane ID [--work DIR] [--summary FILE]

Input: a folder holding the lane's published closed set (or a release
manifest, path or URL, whose row for the lane names the set: then only the
lane's set is downloaded — the set's SHA256SUMS, pinned by the row, must list
exactly the set's names, any other name is refused before anything else is
fetched, and each file is fetched against its hash there and in the row, with
the row's pinned size or its role's cap) and the set's SLSA
provenance (`<package root>.provenance.intoto.json`, in the folder, in
`../attestations/`, or `--provenance`).

Preflight: the provenance is parsed strictly and must describe exactly this
lane, component tag and set; the lane file and the toolchain lock of this
checkout must be the ones the provenance names by SHA-256 (else the rebuild
would follow other instructions; check out the pipeline where they match).
This host's C++ compiler and every build-host dependency the provenance
records (`build-host:*`: version, origin, package, upstream release) must be
this host's, else it stops before compiling (exit 3) naming each difference
and what to install; `--allow-host-drift` builds anyway and the summary
records the drift (`host_drift`, and `likely_cause` on a FAILED).

The rebuild is made as the cut the set was made as, read from the
provenance (`internalParameters.cut`, the build identity's `cut`): the same
beta number N (its names are in the binaries and every file name) and the
same rehearsal flag and cut commit (they are in the packaged build identity).
Not the lane's current cut: a set of a cut superseded since is rebuilt as
that cut, and a rehearsal (the current cut's names on another commit, e.g.
the embedded sample) as that rehearsal.  A cut build must be a cut this
checkout's ledger records for the set's commit (the `cut` check); a rehearsal
binds nothing in the ledger and the summary says it is one.

Run, in a fresh work folder: the build stage compiles the published
`git archive` source tarball (no git history) — the tar's SHA-256, the commit
in its header and the git tree of its files are compared with the provenance
(a mismatch is reported and the archive is still built, so the summary shows
what it changes) — with the pinned toolchain at the canonical path; the
package stage makes the closed set again at the published epoch.  Every file
is compared with the published one, and every member of the package archive
(the binaries first).  Where Debian's diffoscope is installed, each differing
file gets a text report.  The result is a SLSA verification summary
(formats/vsa.py) with `PASSED` or `FAILED` and every per-file result, and
`OK:`/`FAIL:` lines; exit 0 when PASSED, 5 when FAILED.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
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
from pipeline.formats import assets, vsa
from pipeline.formats import provenance as slsa
from pipeline.formats.lanes import REPO_ROOT, Lane, find_lane
from pipeline.formats.release.manifest import is_url, published_set, read_manifest, section
from pipeline.register import Artifact
from pipeline.stage import Context, Stage, execute
from pipeline.util import ui
from pipeline.util.fs import atomic_write_bytes, read_bytes_bounded
from pipeline.util.hashing import is_sha256_hex, sha256_bytes, sha256_file
from pipeline.util.jsonio import parse_strict

DIFFOSCOPE_TIMEOUT = 600
DIFFOSCOPE_MAX_REPORT = 4 << 20
MAX_SMALL_DOWNLOAD = 4 << 20  # a release manifest, a set's SHA256SUMS (as audit bounds them)
MAX_SET_FILE = 2 << 30  # one file of a set: GitHub's release-asset limit (publish's asset-limits gate)


@dataclass
class Check:
    name: str
    ok: bool
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {"check": self.name, "result": "ok" if self.ok else "failed", "detail": self.detail}


@dataclass
class Outcome:
    summary_path: Path
    passed: bool
    checks: list[Check] = field(default_factory=list)
    files: list[dict[str, Any]] = field(default_factory=list)
    members: list[dict[str, Any]] = field(default_factory=list)

    @property
    def differing(self) -> list[str]:
        return [f["name"] for f in self.files if f["result"] != "same"]

    @property
    def differing_members(self) -> list[str]:
        return [m["name"] for m in self.members if m["result"] != "same"]


# -- the published set -------------------------------------------------------------


def _beta_of(directory: Path, lane: Lane) -> int:
    receipt = directory / assets.RECEIPT
    if receipt.is_file():
        document = parse_strict(read_bytes_bounded(receipt, 4 << 20, what="package build receipt"), file=receipt, max_bytes=4 << 20)
        tag = document.get("component_tag") if isinstance(document, dict) else None
        if isinstance(tag, str):
            return lane.beta_from_tag(tag)
    names = sorted(p.name for p in directory.iterdir() if p.is_file())
    _, beta = assets.identify(directory, names, {lane.id: lane})
    if beta is None:
        raise UsageError("cannot tell the set's beta number", file=directory, fix=f"the folder needs the set's {assets.RECEIPT}")
    return beta


def _find_statement(directory: Path, expected: assets.AssetSet, explicit: Path | None) -> Path:
    name = slsa.set_statement_name(expected.package_root)
    candidates = [explicit] if explicit else [directory / name, directory.parent / slsa.FOLDER / name]
    for candidate in candidates:
        if candidate is not None and candidate.is_file():
            return candidate
    raise UsageError(
        "the set's provenance statement is not there",
        file=candidates[0],
        expected=name,
        why="the provenance names the source archive, the lane file and the toolchain lock the set was made from",
        fix=f"download {name} from the release beside the set, or pass --provenance FILE",
    )


def _download_set(manifest_source: str, lane: Lane, into: Path) -> Path:
    """The lane's set named by a release manifest (path or URL), downloaded and checked against its SHA256SUMS."""
    from pipeline.infra.net import check_scheme
    from pipeline.infra.transfer import download, download_verified

    if not (is_url(manifest_source) or Path(manifest_source).is_file()):
        raise UsageError("is neither a folder holding a published set nor a release manifest", field="--verify", found=manifest_source, expected="a set folder, a manifest.json path or an https URL")
    manifest = read_manifest(manifest_source, check_type=False, max_bytes=MAX_SMALL_DOWNLOAD)
    row = manifest.lane_row(lane.id)
    if row is None:
        raise UsageError(f"the manifest has no row for lane {lane.id}", file=manifest_source, field="components")
    published = published_set(row)
    if published is None:
        raise UsageError(
            "the manifest's lane row binds no published set to rebuild",
            file=manifest_source,
            field=f"components.{lane.id}",
            found={key: row.get(key) for key in ("release_tag", "checksums_url", "checksums_sha256")},
            expected="release_tag, repository, checksums_url and checksums_sha256",
        )
    tag, sums_url, sums_sha = published.release_tag, published.checksums_url, published.checksums_sha256
    prefix = published.download_prefix
    for url in (prefix, sums_url):
        problem = check_scheme(url)
        if problem:
            raise UsageError(f"the set's URL {problem}", file=manifest_source, found=url)
    beta = lane.beta_from_tag(tag)
    expected = assets.asset_set(lane, beta)
    folder = into / "published"
    folder.mkdir(parents=True)
    download_verified(sums_url, folder / assets.OUTER_SUMS, expected_sha256=sums_sha, max_size=MAX_SMALL_DOWNLOAD, label=assets.OUTER_SUMS)
    listed = assets.parse_sums(read_bytes_bounded(folder / assets.OUTER_SUMS, MAX_SMALL_DOWNLOAD, what="SHA256SUMS"), file=sums_url)
    pins = _set_pins(lane, expected, row, listed, prefix=prefix, origin=manifest_source, sums_url=sums_url)
    for name, (digest, size, cap) in sorted(pins.items()):  # only the set's own files, each pinned: nothing else is fetched
        download_verified(prefix + name, folder / name, expected_sha256=digest, expected_size=size, max_size=cap, label=name)
    statement = slsa.set_statement_name(expected.package_root)
    attestations = into / slsa.FOLDER
    attestations.mkdir()
    statement_sha = section(row, "provenance").get("sha256")
    if is_sha256_hex(statement_sha):  # the tree copy's hash binds the published statement too
        download_verified(prefix + statement, attestations / statement, expected_sha256=statement_sha, max_size=slsa.MAX_BYTES, label=statement)
    else:
        download(prefix + statement, attestations / statement, progress=False, max_size=slsa.MAX_BYTES, resume=False)
    return folder


def _set_cap(role: str) -> int:
    """The most bytes one file of a set may have where the manifest pins no size (the pinned size wins)."""
    from pipeline.lanework.source import MAX_ARCHIVE_BYTES
    from pipeline.util.jsonio import MAX_DOCUMENT_BYTES

    if role == "package":
        return MAX_SET_FILE
    if role == "source":
        return MAX_ARCHIVE_BYTES  # what build --source-archive reads at most (the tar; its .tar.gz is smaller)
    if role in ("spdx", "cdx", "receipt"):
        return MAX_DOCUMENT_BYTES
    return MAX_SMALL_DOWNLOAD  # inner sums, support scripts


def _set_pins(lane: Lane, expected: assets.AssetSet, row: dict[str, Any], listed: dict[str, str], *, prefix: str, origin: str, sums_url: str) -> dict[str, tuple[str, int | None, int]]:
    """name -> (sha256, pinned size or None, cap) for every file of the lane's set but SHA256SUMS; anything else refused unread.

    The set's names are the lane's (formats/assets.asset_set for the row's tag); its SHA256SUMS (pinned by the row's
    checksums_sha256) must list exactly those, and every file the row binds by field (`<prefix>_sha256`, `_url`,
    `_bytes`) must be listed with that hash at that URL.
    """
    from pipeline.formats.release.names import package_prefix, role_fields, row_path

    names = set(expected.names()) - {assets.OUTER_SUMS}
    foreign, missing = sorted(set(listed) - names), sorted(names - set(listed))
    if foreign or missing:
        raise IntegrityError(
            "the set's SHA256SUMS does not list exactly the lane's set",
            file=sums_url,
            found=f"not of the set: {foreign[:10]}{' …' if len(foreign) > 10 else ''}; missing: {missing}",
            expected=", ".join(sorted(names)),
            why="rebuild --verify downloads only the files of the set the manifest names; another name could be anything of any size",
            fix="this is not the lane's published set: check the manifest row and the release",
        )
    by_role = {a.role: a.name for a in expected.assets if a.role != "support-script"}
    pins: dict[str, tuple[str, int | None, int]] = {}
    where = row_path(lane.id, lane.kind)
    for role, field_prefix in role_fields(lane.kind):
        name = role.removeprefix("script:") if role.startswith("script:") else by_role.get(role)
        if name is None or name not in names:
            continue
        bound_sha, bound_url = row.get(f"{field_prefix}_sha256"), row.get(f"{field_prefix}_url")
        if bound_sha is not None and bound_sha != listed[name]:
            raise IntegrityError(f"the manifest binds other bytes for {name} than the set's SHA256SUMS", file=origin, field=f"{where}.{field_prefix}_sha256", found=bound_sha, expected=listed[name])
        if bound_url is not None and bound_url != prefix + name:
            raise IntegrityError(f"the manifest binds {name} at another URL than the set's release", file=origin, field=f"{where}.{field_prefix}_url", found=bound_url, expected=prefix + name)
        size = row.get(f"{package_prefix(lane.kind)}_bytes") if role == "package" else None
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or not 0 < size <= MAX_SET_FILE):
            raise IntegrityError("the manifest pins an impossible size", file=origin, field=f"{where}.{package_prefix(lane.kind)}_bytes", found=size, expected=f"a whole number of bytes up to {MAX_SET_FILE}")
        pins[name] = (listed[name], size, _set_cap("support-script" if role.startswith("script:") else role))
    for name in sorted(names - set(pins)):  # a role the row has no field for: the SHA256SUMS pin alone, with the role's cap
        role = next(a.role for a in expected.assets if a.name == name)
        pins[name] = (listed[name], None, _set_cap(role))
    return pins


def _pkg_config_names(folders: tuple[str, ...]) -> dict[str, str]:
    """What a summary calls each --pkg-config-path folder and the private prefix it lies in (a compiler's message
    names the prefix's include folder): `<prefix>/lib/pkgconfig` -> <--pkg-config-path 1> and its prefix."""
    from pipeline.lanework.hostdeps import PUBLIC_ROOTS

    names = {}
    for index, folder in enumerate(folders, 1):
        path = Path(folder)
        names[str(path)] = f"<--pkg-config-path {index}>"
        prefix = path.parent.parent if path.name == "pkgconfig" and path.parent.name in ("lib", "lib64", "share") else None
        if prefix is not None and len(prefix.parts) > 1 and not (str(prefix) + "/").startswith(PUBLIC_ROOTS):
            names[str(prefix)] = f"<--pkg-config-path {index} prefix>"
    return names


def _relative_name(path: Path, work: Path) -> str | None:
    """`path` relative to the work folder (a set downloaded into it), or None when it lies elsewhere."""
    try:
        return path.relative_to(work).as_posix() or "."
    except ValueError:
        return None


# -- the stage ------------------------------------------------------------------------


class RebuildStage(Stage):
    """Rebuild one published set in a fresh work folder and compare; the output is the verification summary."""

    name = "rebuild"
    runs_pipes = ("build", "package")  # inside its run, on its own register (found through the road: stages are leaves)

    def __init__(
        self,
        ctx: Context,
        lane: Lane,
        *,
        published: Path,
        resource_uri: str | None,
        statement_path: Path | None = None,
        summary_path: Path | None = None,
        toolchain_mode: str = "pinned",
        pkg_config_path: tuple[str, ...] = (),
        use_diffoscope: bool = True,
        prebuilt: Path | None = None,
        allow_host_drift: bool = False,
    ) -> None:
        super().__init__(ctx)
        self.prebuilt = prebuilt
        self.allow_host_drift = allow_host_drift
        self.host_drift: list[dict[str, str]] = []
        self.lane = lane
        self.published = published
        self.resource_uri = resource_uri
        self.explicit_statement = statement_path
        self.summary_path = summary_path
        self.toolchain_mode = toolchain_mode
        self.pkg_config_path = pkg_config_path
        self.use_diffoscope = use_diffoscope
        self.checks: list[Check] = []
        self.outcome: Outcome | None = None

    @property
    def key(self) -> str:
        return f"rebuild:{self.lane.id}"

    def describe(self) -> str:
        return f"{self.lane.id} from {self.published}"

    # -- preflight ---------------------------------------------------------------
    def preflight(self) -> None:
        lane = self.lane
        if not self.published.is_dir():
            raise UsageError("the published set folder does not exist", file=self.published)
        self.beta = _beta_of(self.published, lane)
        self.expected = assets.asset_set(lane, self.beta)
        if self.resource_uri is None:  # a set folder: it is published in the component release
            self.resource_uri = f"{lane.component_repository}/releases/download/{self.expected.component_tag}/"
        self.statement_path = _find_statement(self.published, self.expected, self.explicit_statement)
        data = read_bytes_bounded(self.statement_path, slsa.MAX_BYTES, what="provenance statement")
        self.statement = slsa.read_statement(data, origin=str(self.statement_path))
        self.statement_sha256 = sha256_bytes(data)
        wanted = {"lane": lane.id, "component_tag": self.expected.component_tag}
        for key, value in wanted.items():
            if self.statement.external[key] != value:
                raise UsageError(
                    "the provenance describes another set",
                    file=self.statement_path,
                    field=f"predicate.buildDefinition.externalParameters.{key}",
                    found=self.statement.external[key],
                    expected=value,
                )
        if self.statement.build_type != slsa.BUILD_TYPE_SET:
            raise UsageError("the provenance is not an asset set's", file=self.statement_path, field="predicate.buildDefinition.buildType", found=self.statement.build_type, expected=slsa.BUILD_TYPE_SET)
        self._read_cut()
        self._check_build_route()
        # The instructions must be the ones the set was made with.
        for name, actual in ((f"runtime/lanes/{lane.id}.toml", lane.file_sha256), (slsa.LOCK_NAME, sha256_file(REPO_ROOT / slsa.LOCK_NAME))):
            item = self.statement.dependency(name)
            recorded = (item or {}).get("digest", {}).get("sha256")
            if name == slsa.LOCK_NAME and item is None:
                continue  # a set built without the pinned toolchain names no lock
            if recorded != actual:
                raise RefusedError(
                    f"this checkout's {name} is not the one the provenance names",
                    file=REPO_ROOT / name if name == slsa.LOCK_NAME else lane.file,
                    found=actual,
                    expected=recorded,
                    why="the rebuild would follow other instructions than the published set was made with",
                    fix=(f"check out the pipeline at the commit whose {name} has SHA-256 {recorded}, then run the rebuild again"
                         if name == slsa.LOCK_NAME else
                         f"pass --lanes-dir DIR, a folder holding the {lane.id}.toml whose SHA-256 is {recorded} (the one the set was built with; "
                         f"its cut ledger in ../cuts/ beside it), or check out the pipeline at the commit that has that lane file"),
                )
        self._check_host()
        self.published_hashes = {name: sha256_file(self.published / name) for name in self.expected.names() if (self.published / name).is_file()}
        self._check_published()
        from pipeline.lanework.source import archive_source

        source_archive = self.published / self.expected.name_of("source")
        if not source_archive.is_file():
            raise UsageError("the set has no source archive to rebuild from", file=source_archive)
        self.source_spec = archive_source(source_archive, self.statement_path, strict=False)
        ui.info(f"provenance {self.statement_path.name}: {len(self.statement.subjects)} subjects, source {self.statement.external['source_repository']}@{self.statement.external['source_commit']}")

    def _check_build_route(self) -> None:
        """A set packaged from prebuilt binaries (the Windows lanes) is rebuilt from the same binaries, given with
        --prebuilt: the rebuild then checks the source archive and the packaging bit for bit, not the compiler."""
        field = "predicate.buildDefinition.internalParameters.build_route"
        route = self.statement.document["predicate"]["buildDefinition"]["internalParameters"].get("build_route")
        if self.prebuilt is not None and route != "prebuilt":
            raise UsageError("the set was compiled from its source, not packaged from prebuilt binaries", file=self.statement_path, field=field, found=route, expected="prebuilt",
                             fix="rebuild it without --prebuilt: the rebuild compiles the source archive")
        if self.prebuilt is not None:
            self.checks.append(Check("binaries", True, f"taken from --prebuilt {self.prebuilt} (build route prebuilt): the source archive and the packaging are rebuilt, not the compilation"))

    def _check_host(self) -> None:
        """This host's compiler and libraries against the ones the provenance records, before anything is compiled:
        nvcc compiles host code with the host's g++ and the binaries link the host's libraries, so another host gives
        other bytes after minutes of compiling. Refused (exit 3) unless --allow-host-drift, which the summary records."""
        from pipeline.formats.lanes import HostDependency, current_host_platform
        from pipeline.lanework import hostdeps
        from pipeline.lanework.hostdeps import host_probe_environment

        host = current_host_platform()
        if self.prebuilt is not None or self.lane.build_host != host:
            return  # the binaries are taken, not compiled here (or the build refuses this host itself, naming the right one)
        recorded = slsa.recorded_host(self.statement, origin=str(self.statement_path))
        self._refuse_undeclared_tools(recorded)
        # A declared licence is the declaration's (bound by the lane file's or the source's digest), not the host's:
        # handed back, so that this host's record is compared on what the host itself provides.
        wanted = [
            HostDependency(str(e["name"]), str(e["kind"]), declared_at=f"build-host:{e['kind']}:{e['name']}",
                           license=str(e["license"]) if e.get("license_source") == "declared" and e.get("license") else None)
            for e in recorded if e["kind"] in ("tool", "pkg-config")
        ]
        # pkg-config itself is looked for first: the modules are probed with it.
        wanted.sort(key=lambda d: d.kind != "tool")
        path, base_env = host_probe_environment(host.startswith("windows"))
        check, missing = hostdeps.probe(wanted, host=host, declared_by="provenance", path=path, pkg_config_path=self.pkg_config_path, base_env=base_env)
        self.host_drift = hostdeps.host_drift(recorded, check, missing, annotate=slsa.host_annotations)
        if not self.host_drift:
            self.checks.append(Check("build host", True, f"the {len(recorded)} build-host dependencies the provenance records are this host's (every recorded field: version, origin, package, "
                                     "release, the SHA-256 of each .pc file, tool and library link interface)"))
            return
        listed = "; ".join(f"{d['dependency']}: recorded {d['recorded']}, this host {d['found']}" for d in self.host_drift)
        environment = self.statement.dependency("build-environment:container")
        # A fix line holds no text of the statement (only validated package and version words): its environment is
        # named by the field that records it, never by the URI it holds.
        where = (" or rebuild inside the build environment the set was made in (the uri of its build-environment:container dependency;"
                 " the podman command in docs/provenance.md: its packaged libraries give the same bytes by construction)") if environment else ""
        if not self.allow_host_drift:
            installs = list(dict.fromkeys(d["install"] for d in self.host_drift))  # one line per fix, however many libraries share it
            raise EnvironmentProblem(
                f"this host differs from the one the set was built on in {len(self.host_drift)} build-host dependenc{'y' if len(self.host_drift) == 1 else 'ies'}",
                file=self.statement_path,
                field="predicate.buildDefinition.resolvedDependencies",
                found=listed,
                expected="every field the statement records for each (name, version, origin, package, release, the SHA-256 of each .pc file, tool and library link interface)",
                why="the set's build-identity.json, both SBOMs and the statement record these fields, and the compile's bytes depend on the host's "
                "compiler and libraries: a rebuild here would run for minutes and then fail",
                fix="install what the set was built with (" + "; ".join(installs) + ")" + where + ", or pass --allow-host-drift to build anyway (the summary records the drift)",
            )
        ui.warn(f"building anyway (--allow-host-drift): {listed}")
        self.checks.append(Check("build host", True, f"differs from the recorded build host (--allow-host-drift): {listed}"))

    def _refuse_undeclared_tools(self, recorded: list[dict[str, Any]]) -> None:
        """The rebuild runs `<tool> --version` for each recorded tool: only tools this pipeline's lane file declares
        (its digest is the one the statement names), never a program a statement alone names."""
        declared = {d.name for d in self.lane.host_dependencies if d.kind == "tool"}
        strangers = [e["name"] for e in recorded if e["kind"] == "tool" and e["name"] not in declared]
        if strangers:
            raise InputError(
                f"records {len(strangers)} build-host tool{'s' if len(strangers) > 1 else ''} the lane file does not declare",
                file=self.statement_path,
                field="predicate.buildDefinition.resolvedDependencies[].name",
                found=", ".join(f"build-host:tool:{name}" for name in strangers),
                expected="tools among " + (", ".join(sorted(declared)) or "none") + f" ({self.lane.file.name}: build.host_dependencies)",
                why="each recorded tool is run on this host (`<tool> --version`): only the lane file decides which programs those are",
                fix="rebuild with the pipeline checkout whose lane file the statement names, or obtain the set's real statement",
            )

    def _read_cut(self) -> None:
        """The cut (or rehearsal) the set was built as: the rebuild builds and packages as exactly that."""
        from pipeline.formats.cut_binding import ledger_check_for_rebuild, parse_binding

        field = "predicate.buildDefinition.internalParameters.cut"
        internal = self.statement.document["predicate"]["buildDefinition"]["internalParameters"]
        self.cut = parse_binding(internal.get("cut"), self.lane, file=self.statement_path, field=field)
        source_commit = self.statement.external["source_commit"]
        if self.cut.n != self.beta:
            raise UsageError("the provenance's cut is not the set's", file=self.statement_path, field=f"{field}.n", found=self.cut.n, expected=f"{self.beta} (the set's {self.expected.component_tag})")
        if not self.cut.rehearsal and self.cut.commit != source_commit:
            raise InputError(
                "the provenance says the set is a cut build of another commit than its source",
                file=self.statement_path,
                field=f"{field}.commit",
                found=self.cut.commit,
                expected=f"{source_commit} (externalParameters.source_commit), or rehearsal true",
            )
        lane_file = (self.statement.dependency(f"runtime/lanes/{self.lane.id}.toml") or {}).get("digest", {}).get("sha256")
        ok, detail = ledger_check_for_rebuild(self.lane, self.cut, source_commit=source_commit, lane_file_sha256=lane_file)
        self.checks.append(Check("cut", ok, detail))
        ui.info(f"built as: {detail}")

    def _check_published(self) -> None:
        """The published set's own checks (closed set, sums, receipt, SBOMs) and its provenance subjects, as results."""
        with tempfile.TemporaryDirectory(prefix="omp-ninfer-published.") as scratch:
            folder = Path(scratch)
            for name in self.published_hashes:  # the set's files only: the statement may lie beside them
                try:
                    os.link(self.published / name, folder / name)
                except OSError:
                    shutil.copyfile(self.published / name, folder / name)
            try:
                report = assets.check_assets(folder, lane=self.lane, beta=self.beta)
                self.checks.append(Check("published set", True, f"{len(report.files)} files, SHA256SUMS, receipt, package and SBOMs agree"))
            except PipelineError as error:
                self.checks.append(Check("published set", False, error.render().replace(str(folder), str(self.published))))
        try:
            slsa.check_subjects(self.statement, self.published_hashes, origin=str(self.statement_path), what="the published set's files")
            self.checks.append(Check("provenance subjects", True, f"exactly the {len(self.published_hashes)} published files"))
        except PipelineError as error:
            self.checks.append(Check("provenance subjects", False, error.render()))

    def inputs(self) -> dict[str, Any]:
        return {"published": self.published_hashes, "provenance": self.statement_sha256, "lane_file_sha256": self.lane.file_sha256, "cut": self.cut.to_json()}

    # -- run ---------------------------------------------------------------------
    def run(self) -> list[Artifact]:
        BuildStage, PackageStage = self.inner_stage_class("build"), self.inner_stage_class("package")
        lane, dist = self.lane, self.ctx.dist
        work = dist.parent  # <work>/dist holds the rebuild's register, <work>/build its build tree
        rebuilt_dir = dist / lane.id / "assets"
        built = False
        try:
            build = BuildStage(self.ctx, lane, source=self.source_spec, toolchain_mode=self.toolchain_mode, work_dir=work / "build", cut=self.cut, pkg_config_path=self.pkg_config_path, prebuilt=self.prebuilt)
            execute(build, force=True)
            assert build.source is not None
            if build.source.problems:
                self.checks += [Check("source archive", False, problem) for problem in build.source.problems]
            else:
                self.checks.append(Check("source archive", True, "the tar's SHA-256, commit and git tree are the provenance's"))
            receipt_path = self.published / assets.RECEIPT
            receipt = parse_strict(read_bytes_bounded(receipt_path, 4 << 20, what="package build receipt"), file=receipt_path) if receipt_path.is_file() else {}
            epoch = receipt.get("source_date_epoch") if isinstance(receipt, dict) and isinstance(receipt.get("source_date_epoch"), int) else None
            execute(PackageStage(self.ctx, lane, cut=self.cut, source_date_epoch=epoch), force=True)
            built = True
        except PipelineError as error:
            if error.exit_code in (2, 3):  # usage or environment: this host cannot rebuild; nothing was verified
                raise
            self.checks.append(Check("rebuild", False, error.render()))
        outcome = self._compare(rebuilt_dir if built else None)
        path = self.summary_path or work / (self.expected.package_root + vsa.SUFFIX)
        passed = all(c.ok for c in self.checks) and not outcome.differing and built
        published_from = _relative_name(self.published, work)
        document = vsa.summary(
            subjects=self.published_hashes,
            resource_uri=self.resource_uri,
            provenance_name=self.statement_path.name,
            provenance_sha256=self.statement_sha256,
            passed=passed,
            rebuild={
                "lane": lane.id,
                "component_tag": self.expected.component_tag,
                "cut": self.cut.to_json(),
                **({"published_from": published_from} if published_from else {}),  # a set downloaded into the work folder
                "checks": [dict(c.to_json(), detail=self._without_local_paths(c.detail, work)) for c in self.checks],
                "files": outcome.files,
                "package_members": outcome.members,
                "diffoscope": self._diffoscope(outcome, rebuilt_dir, path.parent) if built else [],
                "host_drift": self.host_drift,
                **({"likely_cause": likely} if (likely := None if passed else self._likely_cause(outcome)) else {}),
            },
        )
        atomic_write_bytes(path, document)
        outcome.summary_path, outcome.passed, outcome.checks = path, passed, list(self.checks)
        self.outcome = outcome
        # The summary is a report of this run, not an input of anything: it lives beside the work folder's register.
        copy = dist / lane.id / "verification" / path.name
        atomic_write_bytes(copy, document)
        return [self.ctx.register.make("verification-summary", copy, stage=self.name, lane=lane.id, component_tag=self.expected.component_tag, result="PASSED" if passed else "FAILED")]

    def _likely_cause(self, outcome: Outcome) -> str | None:
        """Why a FAILED rebuild likely failed, where the differences say: a drifted build host, or differences only in
        what the compiler, a host library or a host path can reach (the binaries and the files that record their hashes)."""
        if self.host_drift:
            return "the build host differs from the recorded one: " + "; ".join(f"{d['dependency']} {d['found']} instead of {d['recorded']}" for d in self.host_drift)
        if not all(c.ok for c in self.checks) or not outcome.differing_members:
            return None
        root = self.expected.package_root + "/"
        # The payload files whose bytes follow from the binaries' hashes (they list them); everything else is the source's.
        recording = {f"{root}build-identity.json", f"{root}{assets.PAYLOAD_SUMS}"}
        binaries = [m["name"] for m in outcome.members if m["binary"] and m["result"] != "same"]
        others = [name for name in outcome.differing_members if name not in recording and name not in binaries]
        if not binaries or others:
            return None
        return ("only the binaries differ (" + ", ".join(n.removeprefix(root) for n in binaries) + ", and the files that record their hashes), and the "
                "source archive and every recorded build-host dependency are the provenance's: what reaches only the binaries is the compiler and "
                "toolchain, a host library's headers, and a path of the build host (a RUNPATH, debug or line information); compare them with the "
                "build identity's toolchain and host_environment, or rebuild in the pinned build environment the statement names")

    def _without_local_paths(self, text: str, work: Path) -> str:
        """A check's detail as the summary states it: the folders of this machine named relative to the work
        folder, or by what they are (the summary is shared; a home or work path is private and never the same twice)."""
        names = {str(work): ".", str(self.published): _relative_name(self.published, work) or "<published set>"}
        if self.prebuilt is not None:
            names[str(self.prebuilt)] = "<--prebuilt folder>"
        statement = getattr(self, "statement_path", None)  # set by the preflight
        if statement is not None and _relative_name(statement, work) is None:
            names[str(statement.parent)] = "<--provenance folder>"
        names.update(_pkg_config_names(self.pkg_config_path))
        for local, name in sorted(names.items(), key=lambda item: -len(item[0])):  # the longest first: a folder inside another
            text = text.replace(local + "/", "" if name == "." else name + "/").replace(local, name)
        home = str(Path.home())
        return text.replace(home + "/", "~/") if len(home) > 1 else text  # a home of "/" names nothing private

    def _compare(self, rebuilt_dir: Path | None) -> Outcome:
        outcome = Outcome(Path(), False)
        for name in self.expected.names():
            published = self.published_hashes.get(name)
            rebuilt = sha256_file(rebuilt_dir / name) if rebuilt_dir is not None and (rebuilt_dir / name).is_file() else None
            result = "same" if published is not None and published == rebuilt else ("missing" if published is None else "not rebuilt" if rebuilt is None else "differs")
            outcome.files.append({"name": name, "published_sha256": published, "rebuilt_sha256": rebuilt, "result": result})
        package = self.expected.name_of("package")
        if rebuilt_dir is not None and package in self.published_hashes:
            from pipeline.infra.archive import read_tar_gz

            try:
                ours = {e.name: e for e in read_tar_gz(rebuilt_dir / package) if e.kind == "file"}
                theirs = {e.name: e for e in read_tar_gz(self.published / package) if e.kind == "file"}
            except PipelineError as error:
                self.checks.append(Check("package members", False, error.render()))
                return outcome
            root = self.expected.package_root + "/"
            binaries = {f"{root}{assets.BIN_DIR}/{self.lane.binary_file(b)}" for b in (*self.lane.binaries, *self.lane.optional_binaries)}
            for name in sorted(set(ours) | set(theirs), key=lambda n: (n not in binaries, n)):
                a, b = theirs.get(name), ours.get(name)
                same = a is not None and b is not None and (a.sha256, a.mode, a.mtime) == (b.sha256, b.mode, b.mtime)
                outcome.members.append(
                    {
                        "name": name,
                        "binary": name in binaries,
                        "published_sha256": a.sha256 if a else None,
                        "rebuilt_sha256": b.sha256 if b else None,
                        "result": "same" if same else ("only published" if b is None else "only rebuilt" if a is None else "differs"),
                    }
                )
        return outcome

    def _diffoscope(self, outcome: Outcome, rebuilt_dir: Path, out: Path) -> list[dict[str, Any]]:
        differing = outcome.differing
        if not differing or not self.use_diffoscope:
            return []
        tool = shutil.which("diffoscope")
        if tool is None:
            ui.warn("diffoscope is not installed (Debian: apt-get install diffoscope-minimal): the summary lists the differing files without a report")
            return []
        reports = []
        folder = out / (self.expected.package_root + ".diffoscope")
        folder.mkdir(parents=True, exist_ok=True)
        for name in differing:
            if name not in self.published_hashes or not (rebuilt_dir / name).is_file():
                continue
            report = folder / f"{name}.txt"
            ui.step(self.name, f"diffoscope {name}")
            argv = [tool, "--no-progress", "--text", str(report), "--max-report-size", str(DIFFOSCOPE_MAX_REPORT), str(self.published / name), str(rebuilt_dir / name)]
            code, stopped = run_bounded_report(argv, report, max_bytes=DIFFOSCOPE_MAX_REPORT, timeout=DIFFOSCOPE_TIMEOUT)
            meaning = stopped or {0: "same", 1: "different", 2: "error"}.get(code, f"exit status {code}")
            entry: dict[str, Any] = {"file": name, "exit_code": code, "meaning": meaning}
            if report.is_file():
                entry["report"] = report.relative_to(out).as_posix()  # beside the summary, never an absolute path
                entry["report_sha256"] = sha256_file(report)
            reports.append(entry)
        return reports


def run_bounded_report(argv: list[str], report: Path, *, max_bytes: int, timeout: float, poll: float = 0.2) -> tuple[int | None, str | None]:
    """Run a report writer (diffoscope) with its size and time enforced here, not only asked of it: (exit status, None)
    when it finished within both, else (None, why it was stopped). Its whole process group is killed the moment the
    report passes `max_bytes` or `timeout` seconds pass; the report is then cut to `max_bytes` and says so. Its own
    output is discarded (never held in memory)."""
    started = time.monotonic()
    stopped = None
    with subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True) as process:
        while True:
            try:
                code = process.wait(timeout=poll)
                break
            except subprocess.TimeoutExpired:
                pass
            size = report.stat().st_size if report.is_file() else 0
            if size > max_bytes:
                stopped = f"stopped: its report passed {max_bytes} bytes"
            elif time.monotonic() - started > timeout:
                stopped = f"stopped: it ran past {int(timeout)} s"
            if stopped:
                with contextlib.suppress(OSError):
                    if hasattr(os, "killpg"):
                        os.killpg(process.pid, signal.SIGKILL)  # its children (the tools it runs) too
                    else:
                        process.kill()
                process.wait()
                break
    if report.is_file() and report.stat().st_size > max_bytes:
        with open(report, "r+b") as handle:
            handle.truncate(max_bytes)
            handle.seek(max_bytes)
            handle.write(f"\n[cut at {max_bytes} bytes by rebuild --verify]\n".encode())
    return (None, stopped) if stopped else (code, None)


# -- front door --------------------------------------------------------------------


def rebuild_verify(
    target: str,
    *,
    lane_name: str,
    lanes_dir: Path | None = None,
    work: Path | None = None,
    summary: Path | None = None,
    statement: Path | None = None,
    toolchain: str = "pinned",
    pkg_config_path: list[str] | None = None,
    use_diffoscope: bool = True,
    prebuilt: Path | None = None,
    allow_host_drift: bool = False,
) -> Outcome:
    from pipeline.infra import compile_cache
    from pipeline.lanework.hostdeps import parse_search_path

    if os.environ.get(compile_cache.CACHE_VARIABLE):  # before any download: every object is compiled from the published source
        raise compile_cache.refusal("rebuild --verify")
    lane = find_lane(lane_name, lanes_dir)
    if work is None:
        work = Path(tempfile.mkdtemp(prefix=f"omp-ninfer-rebuild-{lane.short_name}."))
    elif work.exists() and any(work.iterdir()):
        raise UsageError("the work folder must be new or empty (a rebuild starts from nothing)", field="--work", found=str(work))
    work = work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    is_dir = Path(target).is_dir()
    if is_dir:
        published = Path(target).resolve()
        resource = None  # the component release's download folder, once the set's tag is known
    else:
        published = _download_set(target, lane, work / "download")
        resource = target
    ctx = Context.open(work / "dist", lanes_dir)
    stage = RebuildStage(
        ctx,
        lane,
        published=published,
        resource_uri=resource,
        statement_path=statement,
        summary_path=summary.resolve() if summary else None,
        toolchain_mode=toolchain,
        pkg_config_path=parse_search_path(pkg_config_path),
        use_diffoscope=use_diffoscope,
        prebuilt=prebuilt.resolve() if prebuilt is not None else None,
        allow_host_drift=allow_host_drift,
    )
    ui.step("rebuild", f"{lane.id}: rebuilding {published} in {work}")
    execute(stage, force=True)
    assert stage.outcome is not None
    return stage.outcome


def print_outcome(outcome: Outcome) -> None:
    for check in outcome.checks:
        ui.result(f"{'OK' if check.ok else 'FAIL'}: {check.name}: {check.detail}")
    for item in outcome.files:
        if item["result"] == "same":
            ui.result(f"OK: {item['name']}: rebuilt bit for bit (sha256 {item['published_sha256']})")
        else:
            ui.result(f"FAIL: {item['name']}: {item['result']} (published {item['published_sha256']}, rebuilt {item['rebuilt_sha256']})")
    for member in outcome.members:
        if member["result"] != "same":
            ui.result(f"FAIL: package member {member['name']}{' (binary)' if member['binary'] else ''}: {member['result']}")
    same_members = sum(1 for m in outcome.members if m["result"] == "same")
    if outcome.members:
        ui.result(f"{'OK' if not outcome.differing_members else 'FAIL'}: package members: {same_members} of {len(outcome.members)} identical")
    ui.result(f"{'PASSED' if outcome.passed else 'FAILED'}: verification summary {outcome.summary_path}")


def register_cli(sub) -> None:
    from pipeline.cli import LANES_DIR_HELP

    parser = sub.add_parser(
        "rebuild",
        help="rebuild a published set from its source archive and compare every file bit for bit (SLSA verification summary)",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    parser.add_argument("--verify", required=True, metavar="SET_DIR_OR_MANIFEST", help="folder holding the published set, or a release manifest (path or URL) whose lane row names it")
    parser.add_argument("--lane", required=True, help="lane id or short name")
    parser.add_argument("--provenance", type=Path, help="the set's provenance statement (default: beside the set or in ../attestations/)")
    parser.add_argument("--work", type=Path, help="fresh work folder (default: a new temporary folder)")
    parser.add_argument("--summary", type=Path, help="where to write the verification summary (default: in the work folder)")
    parser.add_argument("--toolchain", choices=("pinned", "system"), default="pinned", help="pinned wheel toolchain (default; what releases use)")
    parser.add_argument("--pkg-config-path", action="append", metavar="DIR[:DIR]", help="folders pkg-config searches (as for build)")
    parser.add_argument("--prebuilt", type=Path, metavar="DIR", help="the binaries a set packaged from prebuilt binaries holds (its provenance says build_route prebuilt: the Windows lanes)")
    parser.add_argument("--allow-host-drift", action="store_true", help="build even where this host's compiler or libraries differ from the recorded build host (the summary records the drift as the likely cause of a FAILED)")
    parser.add_argument("--no-diffoscope", action="store_true", help="do not run diffoscope on differing files")
    parser.add_argument("--json", action="store_true", help="print the verification summary instead of OK/FAIL lines")
    parser.add_argument("--lanes-dir", type=Path, default=None, metavar="DIR", help=LANES_DIR_HELP)
    parser.add_argument("--quiet", action="store_true", help="print only errors and results")

    def run(args: argparse.Namespace) -> int:
        outcome = rebuild_verify(
            args.verify,
            lane_name=args.lane,
            lanes_dir=args.lanes_dir,
            work=args.work,
            summary=args.summary,
            statement=args.provenance,
            toolchain=args.toolchain,
            pkg_config_path=args.pkg_config_path,
            use_diffoscope=not args.no_diffoscope,
            prebuilt=args.prebuilt,
            allow_host_drift=args.allow_host_drift,
        )
        if args.json:
            print(json.dumps(json.loads(outcome.summary_path.read_bytes()), indent=2, sort_keys=True))
        else:
            print_outcome(outcome)
        return 0 if outcome.passed else 5

    parser.set_defaults(func=run)


STAGE = RebuildStage
