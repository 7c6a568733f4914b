"""verifier-dist: the pipeline itself as a wheel and an sdist, byte-reproducibly, to ship with the release.

An auditor should install the exact tool a release was verified with, so the
product publication attaches this wheel and sdist (and their SHA-256) to the
product release.  Both are made with PyPA `build` from one exact commit of
this repository, never from the working tree:

- the commit is exported with `git archive` into a fresh folder (modes 0644,
  or 0755 where git records the executable bit; every mtime the commit time);
- `SOURCE_DATE_EPOCH` is the commit time (`git log -1 --format=%ct`), the
  umask 022, `TZ=UTC`, `LC_ALL=C.UTF-8`; the backend is the setuptools that
  pyproject.toml's `[build-system]` pins exactly, already installed here
  (`--no-isolation`: an isolated build would resolve whatever PyPI has today);
- `build --sdist`, then the sdist is rewritten deterministically (setuptools
  stamps its own files with the clock and the archive with the builder's
  uid/gid and umask): members sorted, PAX format, uid/gid 0 with no names,
  modes 0644/0755, mtime = the commit time, gzip header with that time and no
  name;
- the wheel is built from that sdist, as `build` does by default, so the sdist
  is known to build the wheel that ships beside it; setuptools' bdist_wheel
  already dates every entry at `SOURCE_DATE_EPOCH` and sorts them, and the
  normalised modes make the rest fixed.

The whole thing is done twice, in two folders of different names, and the
bytes must be identical before anything reaches `<dist>/verifier/`.  The wheel
is then checked against the commit: every tracked module of `pipeline/`, the
pinned Sigstore trust roots and the lane files with their cut ledgers and the
licence texts they name (bundled under pipeline/data/repo/ by setup.py, because
`audit` loads the lanes) must be in it, and nothing outside `pipeline/` and its dist-info.

The auditor installs the wheel's dependencies from the hash-locked
`requirements/auditor.txt` of the same commit (written by `nox -s lock` with the
release lock's tool and versions), shipped as `<name>-<version>.auditor-requirements.txt`
(`verifier-requirements`). It is checked like the wheel before it is shipped
(`check_auditor_lock`): every entry pinned with `==` and its SHA-256 hashes, each
version the one `requirements/release.txt` pins (the release was verified with
those), every dependency the wheel declares present, and none of the
distributions only the `rebuild` and `maintainer` extras name.
Outputs: the wheel (`verifier-wheel`), the sdist (`verifier-sdist`), the auditor's lock
(`verifier-requirements`) and `<name>-<version>.SHA256SUMS` listing all three
(`verifier-checksums`).
"""

from __future__ import annotations

import argparse
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
import zipfile
import zlib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path, PurePosixPath

from pipeline.errors import BuildFailure, EnvironmentProblem, InputError, IntegrityError, UsageError
from pipeline.formats.assets import render_sums
from pipeline.register import Artifact
from pipeline.stage import Context, Stage, StageResult, execute
from pipeline.util import ui
from pipeline.util.fs import atomic_output_dir, atomic_write_bytes
from pipeline.util.hashing import is_commit_hex, sha256_file
from pipeline.util.proc import run

NAME = "verifier-dist"  # the command, the stage name and its register entries' stage
OUT_DIR = "verifier"
# Bumped when this module changes the bytes it makes for the same commit and tools.
FORMAT = 2  # 2: the auditor's requirements lock ships beside the wheel
CHECKOUT = Path(__file__).resolve().parents[2]  # the checkout this pipeline runs from (its default source)
# What the installed verifier must carry besides the modules (setup.py bundles the repository files, those
# outside pipeline/): pattern -> whether the commit must have at least one such file (the cut ledgers come
# with the cut stage).
REQUIRED_DATA = {"pipeline/data/sigstore/*.json": True, "runtime/lanes/*.toml": True, "packaging/licenses/*.txt": True,
                 "runtime/cuts/*.json": False,
                 # rebuild --verify: what build and package read (setup.py's BUNDLED)
                 "runtime/toolchain.lock.json": True, "requirements/release.txt": True, "runtime/launcher/*.py": True, "packaging/templates/*.in": True,
                 "packaging/windows/*.ps1": True, "packaging/windows/lanes/*/*.json": True,
                 # a lane's package base (package.base_image): its definition, lock and pinned keyrings
                 # (not required of a commit: one before the package base had none)
                 "containers/*/*.toml": False, "containers/*/*.lock.json": False, "containers/keys/*.gpg": False}
BUNDLE_PREFIX = "pipeline/data/repo/"
AUDITOR_LOCK = "requirements/auditor.txt"
RELEASE_LOCK = "requirements/release.txt"
# pyproject.toml's extras an auditor does not install: no distribution only they name may be in the auditor's lock.
NOT_FOR_AUDITORS = ("rebuild", "maintainer")
BUILD_TIMEOUT = 600


@dataclass(frozen=True)
class VerifierSource:
    root: Path
    commit: str
    tree: str
    epoch: int
    name: str  # the distribution's file-name stem, e.g. omp_ninfer_pipeline
    version: str
    setuptools: str  # the exact version pyproject.toml's [build-system] pins
    files: tuple[str, ...]  # every path tracked at the commit


def _git(root: Path, *args: str, what: str) -> str:
    return run(["git", "-C", root, *args], what=what, failure=InputError, timeout=120).stdout.decode("utf-8", "replace")


def parse_source(value: str | None) -> tuple[Path, str | None]:
    """`PATH[@COMMIT]` of a checkout of this repository (default: the one this pipeline runs from)."""
    if not value:
        return CHECKOUT, None
    path, _, commit = value.rpartition("@") if "@" in value else (value, "", "")
    if commit and not is_commit_hex(commit):
        raise UsageError("the verifier is built from a full commit", field="--source", found=commit,
                         expected="40 lowercase hex digits (branches, tags and short hashes move)",
                         fix="pass PATH@$(git rev-parse HEAD)")
    return Path(path), commit or None


def resolve_source(root: Path, commit: str | None = None) -> VerifierSource:
    root = Path(root)
    if not (root / ".git").exists():
        raise InputError("is not a git checkout of the pipeline", file=root,
                         why="the verifier is built from one exact commit, exported with git archive",
                         fix="run it in a clone of the repository, or pass --source PATH[@COMMIT]")
    if commit is None:
        changed = _git(root, "status", "--porcelain=v1", "--untracked-files=no", what="check the checkout for changes")
        if changed.strip():
            first = changed.splitlines()[0][3:]
            raise InputError("the checkout has uncommitted changes to tracked files", file=root / first,
                             why="the verifier is built from the commit alone; these changes would not be in it",
                             fix="commit or stash them, or pass --source PATH@COMMIT explicitly")
        commit = "HEAD"
    resolved = _git(root, "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}", what=f"find commit {commit}").strip()
    tree = _git(root, "rev-parse", "--verify", f"{resolved}^{{tree}}", what="read the commit's tree").strip()
    epoch = int(_git(root, "log", "-1", "--format=%ct", resolved, what="read the commit time").strip())
    files = tuple(_git(root, "ls-tree", "-r", "--name-only", "-z", resolved, what="list the commit").split("\0")[:-1])
    pyproject = run(["git", "-C", root, "show", f"{resolved}:pyproject.toml"], what="read pyproject.toml",
                    failure=InputError).stdout
    name, version, pin = _project_facts(pyproject, f"{resolved}:pyproject.toml")
    return VerifierSource(root, resolved, tree, epoch, name, version, pin, files)


def _project_facts(data: bytes, file: str) -> tuple[str, str, str]:
    try:
        document = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise InputError(f"is not valid TOML: {exc}", file=file) from None
    project = document.get("project") or {}
    name, version = project.get("name"), project.get("version")
    if not isinstance(name, str) or not isinstance(version, str):
        raise InputError("names no static project name and version", file=file, field="project.version")
    requires = (document.get("build-system") or {}).get("requires") or []
    pins = [m.group(1) for r in requires if (m := re.fullmatch(r"\s*setuptools\s*==\s*([0-9][0-9A-Za-z.]*)\s*", str(r)))]
    if len(pins) != 1 or len(requires) != 1:
        raise InputError("the build backend is not pinned exactly", file=file, field="build-system.requires",
                         found=requires, expected="['setuptools==X.Y.Z'] and nothing else",
                         why="the wheel's bytes depend on the setuptools that builds it")
    return re.sub(r"[-_.]+", "_", name).lower(), version, pins[0]


def _installed(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


# -- the deterministic steps -------------------------------------------------------


def _mode(mode: int, is_dir: bool) -> int:
    return 0o755 if is_dir or mode & 0o100 else 0o644


def _safe_name(name: str, file: str) -> PurePosixPath:
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or not path.parts:
        raise IntegrityError("an archive member points outside its folder", file=file, found=name)
    return path


def _extract(data: bytes, destination: Path, epoch: int, *, file: str) -> None:
    """Unpack a tar with normalised modes and times (regular files and folders only)."""
    destination.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as archive:
        members = archive.getmembers()
        for member in members:
            target = destination.joinpath(*_safe_name(member.name, file).parts)
            if member.isdir():
                target.mkdir(parents=True, exist_ok=True)
            elif member.isfile():
                target.parent.mkdir(parents=True, exist_ok=True)
                handle = archive.extractfile(member)
                assert handle is not None
                target.write_bytes(handle.read())
                os.chmod(target, _mode(member.mode, False))
            elif member.type == tarfile.XGLTYPE or member.name == "pax_global_header":
                continue  # git archive's comment header
            else:
                raise IntegrityError("holds a link or special file; the verifier is built from plain files only",
                                     file=file, found=member.name, fix="replace the link by the file in the repository")
        for path in sorted(destination.rglob("*"), reverse=True):
            if path.is_dir():
                os.chmod(path, 0o755)
            os.utime(path, (epoch, epoch))
        os.utime(destination, (epoch, epoch))


def normalise_sdist(data: bytes, epoch: int, *, file: str) -> bytes:
    """The sdist with sorted PAX members, uid/gid 0 without names, modes 0644/0755, times = the commit."""
    from pipeline.infra.archive import gzip_bytes

    entries: list[tuple[str, bool, int, bytes]] = []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        for member in archive.getmembers():
            name = _safe_name(member.name, file).as_posix()
            if member.isdir():
                entries.append((name, True, 0o755, b""))
            elif member.isfile():
                handle = archive.extractfile(member)
                assert handle is not None
                entries.append((name, False, _mode(member.mode, False), handle.read()))
            else:
                raise IntegrityError("the sdist holds a link or special file", file=file, found=member.name)
    names = [entry[0] for entry in entries]
    if len(set(names)) != len(names):
        raise IntegrityError("the sdist names a member twice", file=file)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as out:
        for name, is_dir, mode, content in sorted(entries):
            info = tarfile.TarInfo(name)
            info.type = tarfile.DIRTYPE if is_dir else tarfile.REGTYPE
            info.mode, info.mtime, info.uid, info.gid, info.uname, info.gname = mode, epoch, 0, 0, "", ""
            info.size = len(content)
            out.addfile(info, io.BytesIO(content) if not is_dir else None)
    return gzip_bytes(buffer.getvalue(), mtime=epoch)


def _build_env(epoch: int) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PIP_", "SETUPTOOLS_", "DISTUTILS_"))}
    env.update(SOURCE_DATE_EPOCH=str(epoch), TZ="UTC", LC_ALL="C.UTF-8", PYTHONHASHSEED="0",
               PYTHONDONTWRITEBYTECODE="1")
    return env


def _pyproject_build(source: Path, out: Path, kind: str, epoch: int) -> Path:
    command = [sys.executable, "-m", "build", f"--{kind}", "--no-isolation", "--outdir", str(out), str(source)]
    try:
        result = subprocess.run(command, cwd=source, env=_build_env(epoch), capture_output=True, timeout=BUILD_TIMEOUT,
                                umask=0o022, check=False)
    except subprocess.TimeoutExpired:
        raise BuildFailure(f"python -m build --{kind} did not finish within {BUILD_TIMEOUT} s", file=source) from None
    if result.returncode != 0:
        tail = "\n".join(result.stdout.decode("utf-8", "replace").strip().splitlines()[-15:]
                         + result.stderr.decode("utf-8", "replace").strip().splitlines()[-15:])
        raise BuildFailure(f"python -m build --{kind} failed with status {result.returncode}", file=source,
                           why=f"its last output was:\n{tail}\n")
    made = sorted(out.glob("*.whl" if kind == "wheel" else "*.tar.gz"))
    if len(made) != 1:
        raise BuildFailure(f"python -m build --{kind} left {len(made)} files instead of one", file=out,
                           found=[p.name for p in made])
    return made[0]


@dataclass(frozen=True)
class Built:
    wheel: Path
    sdist: Path


def build_once(source: VerifierSource, work: Path) -> Built:
    """Export the commit into `work`, build and normalise the sdist, then build the wheel from it."""
    export = work / "export"
    archive = run(["git", "-C", source.root, "archive", "--format=tar", source.commit],
                  what="export the commit", failure=InputError).stdout
    _extract(archive, export, source.epoch, file=f"git archive {source.commit}")
    raw = _pyproject_build(export, work / "raw", "sdist", source.epoch)
    out = work / "out"
    out.mkdir()
    sdist = out / raw.name
    sdist.write_bytes(normalise_sdist(raw.read_bytes(), source.epoch, file=str(raw)))
    unpacked = work / "sdist"
    _extract(sdist.read_bytes(), unpacked, source.epoch, file=str(sdist))
    tops = [p for p in unpacked.iterdir()]
    if len(tops) != 1 or not (tops[0] / "pyproject.toml").is_file():
        raise IntegrityError("the sdist does not hold one project folder with pyproject.toml", file=sdist,
                             found=sorted(p.name for p in tops))
    wheel = _pyproject_build(tops[0], out, "wheel", source.epoch)
    return Built(wheel, sdist)


def _matches(path: str, pattern: str) -> bool:
    return PurePosixPath(path).match(pattern) and path.count("/") == pattern.count("/")


def check_wheel(wheel: Path, source: VerifierSource) -> int:
    """The wheel holds what the installed verifier needs, dated at the commit, with fixed modes; returns its entry count."""
    with zipfile.ZipFile(wheel) as archive:
        infos = archive.infolist()
    names = [info.filename for info in infos]
    dist_info = f"{source.name}-{source.version}.dist-info/"
    # ZIP dates in 2-second steps (MS-DOS time): an entry made at an odd second is stored one second earlier.
    epoch = max(source.epoch, 315532800)  # zip cannot date before 1980
    stamp = time.gmtime(epoch - epoch % 2)[:6]
    for info in infos:
        if info.date_time != stamp:
            raise IntegrityError("a wheel entry is not dated at the commit", file=wheel, field=info.filename,
                                 found=info.date_time, expected=f"{stamp} (SOURCE_DATE_EPOCH {source.epoch})")
        mode = info.external_attr >> 16
        # bdist_wheel writes RECORD with a fixed 0664 of its own; everything else comes from the normalised files.
        if mode not in (0o100644, 0o100755) and not (mode == 0o100664 and info.filename == dist_info + "RECORD"):
            raise IntegrityError("a wheel entry has an unexpected mode", file=wheel, field=info.filename,
                                 found=oct(mode), expected="0o100644 or 0o100755")
        if not (info.filename.startswith(("pipeline/", dist_info))):
            raise IntegrityError("the wheel holds a file outside the pipeline package", file=wheel,
                                 found=info.filename, expected="pipeline/... or " + dist_info)
    required = [f for f in source.files if f.startswith("pipeline/") and f.endswith(".py")]
    for pattern, must_exist in REQUIRED_DATA.items():
        found = [f for f in source.files if _matches(f, pattern)]
        if must_exist and not found:
            raise IntegrityError("the commit has no file the verifier needs", field=pattern, file=source.commit)
        required += [f if f.startswith("pipeline/") else BUNDLE_PREFIX + f for f in found]
    present = set(names)
    missing = sorted(set(required) - present)
    if missing:
        raise IntegrityError(f"the wheel lacks {len(missing)} files the installed verifier needs", file=wheel,
                             found=missing[:5], expected="every module of pipeline/, the Sigstore trust roots, the lane files and licence texts",
                             fix="a new package folder needs its __init__.py; data files belong in pyproject package-data or setup.py BUNDLED")
    for required_file in (dist_info + "METADATA", dist_info + "RECORD", dist_info + "entry_points.txt"):
        if required_file not in present:
            raise IntegrityError("the wheel lacks its metadata", file=wheel, field=required_file)
    return len(infos)


def _wheel_requirements(wheel: Path) -> tuple[set[str], set[str]]:
    """The wheel's Requires-Dist names: (those it always needs, those only the NOT_FOR_AUDITORS extras add)."""
    from email.parser import BytesHeaderParser

    from pipeline.formats.requirements_lock import normalise_name

    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        headers = BytesHeaderParser().parsebytes(archive.read(name))
    always: set[str] = set()
    extras: set[str] = set()
    for requirement in headers.get_all("Requires-Dist") or []:
        found = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
        extra = re.search(r"""extra\s*==\s*["']([^"']+)["']""", requirement)
        if found is None:
            raise IntegrityError("the wheel names a dependency it does not spell", file=wheel, field="Requires-Dist", found=requirement)
        if extra is None:
            always.add(normalise_name(found.group(1)))
        elif extra.group(1) in NOT_FOR_AUDITORS:
            extras.add(normalise_name(found.group(1)))
    return always, extras - always


def check_auditor_lock(lock: bytes, release_lock: bytes, wheel: Path, source: VerifierSource) -> int:
    """The auditor's lock installs what the wheel needs, at the release lock's versions, hashed, without the
    maintainers' distributions; returns its entry count."""
    from pipeline.formats.requirements_lock import parse_lock

    where = f"{source.commit}:{AUDITOR_LOCK}"
    auditor = parse_lock(lock, file=where)
    release = parse_lock(release_lock, file=f"{source.commit}:{RELEASE_LOCK}")
    for entry in auditor.entries.values():
        pinned = release.entries.get(entry.name)
        if pinned is None or pinned.version != entry.version:
            raise IntegrityError("the auditor's lock pins another version than the release lock", file=where, field=entry.name,
                                 found=entry.version, expected=pinned.version if pinned else f"no {entry.name} (the release lock lacks it)",
                                 why="auditors must install the versions the release was built and verified with",
                                 fix="refresh both locks together with 'nox -s lock'")
        # The same files (a hash of other bytes is other bytes) for the same environments (a marker no platform
        # matches would leave a dependency out of the install while the entry looks present).
        for field, found, expected in (("hashes", sorted(entry.sha256), sorted(pinned.sha256)), ("marker", entry.marker, pinned.marker)):
            if found != expected:
                raise IntegrityError(f"the auditor's lock gives {entry.name} other {field} than the release lock", file=where,
                                     field=f"{entry.name}.{field}", found=found, expected=expected,
                                     why="auditors must install the very files the release lock pins, where it installs them",
                                     fix="refresh both locks together with 'nox -s lock'")
    always, maintainers_only = _wheel_requirements(wheel)
    missing = sorted(always - set(auditor.entries))
    if missing:
        raise IntegrityError(f"the auditor's lock lacks {len(missing)} dependencies the wheel declares", file=where, found=missing,
                             fix="a dependency added to pyproject.toml needs 'nox -s lock'")
    stray = sorted(maintainers_only & set(auditor.entries))
    if stray:
        raise IntegrityError("the auditor's lock holds distributions only maintainers need", file=where, found=stray,
                             expected=f"none of what the {' and '.join(NOT_FOR_AUDITORS)} extras name",
                             fix="keep them in those extras of pyproject.toml and run 'nox -s lock'")
    return len(auditor.entries)


def _commit_file(source: VerifierSource, path: str) -> bytes:
    if path not in source.files:
        raise IntegrityError("the commit has no file the verifier ships", file=source.commit, field=path,
                             fix="write it with 'nox -s lock' and commit it")
    return run(["git", "-C", source.root, "show", f"{source.commit}:{path}"], what=f"read {path}", failure=InputError).stdout


def _first_difference(one: bytes, two: bytes) -> int:
    return next((i for i, (a, b) in enumerate(zip(one, two, strict=False)) if a != b), min(len(one), len(two)))


# -- the stage ---------------------------------------------------------------------


class VerifierDistStage(Stage):
    name = NAME

    def __init__(self, ctx: Context, source: VerifierSource) -> None:
        super().__init__(ctx)
        self.source = source

    def describe(self) -> str:
        return f"verifier {self.source.name}-{self.source.version} at {self.source.commit[:12]}"

    def preflight(self) -> None:
        if _installed("build") is None:
            raise EnvironmentProblem("PyPA build is not installed", why="the verifier wheel and sdist are made with it",
                                     fix=f"run '{sys.executable} -m pip install build'")
        have = _installed("setuptools")
        if have != self.source.setuptools:
            raise EnvironmentProblem(
                "the installed setuptools is not the one pyproject.toml pins",
                field="build-system.requires", found=have, expected=self.source.setuptools,
                why="the build runs without isolation so that its backend is exactly the pinned one",
                fix=f"run '{sys.executable} -m pip install setuptools=={self.source.setuptools}'",
            )

    def inputs(self) -> dict[str, object]:
        return {
            "format": FORMAT,
            "commit": self.source.commit,
            "tree": self.source.tree,
            "source_date_epoch": self.source.epoch,
            "setuptools": _installed("setuptools"),
            "build": _installed("build"),
            "python": f"{sys.version_info.major}.{sys.version_info.minor}",
            "zlib": zlib.ZLIB_RUNTIME_VERSION,
        }

    def run(self) -> list[Artifact]:
        source = self.source
        with tempfile.TemporaryDirectory(prefix="omp-ninfer-verifier-") as scratch:
            builds = []
            for label in ("first", "second"):  # two folders of different names: no path may leak into the bytes
                ui.step(NAME, f"building the sdist and the wheel of {source.commit[:12]} ({label} of two)")
                builds.append(build_once(source, Path(scratch) / f"{label}-build-{source.commit[:8]}"))
            one, two = builds
            for kind in ("sdist", "wheel"):
                a, b = getattr(one, kind).read_bytes(), getattr(two, kind).read_bytes()
                if a != b:
                    raise IntegrityError(
                        f"the verifier {kind} is not reproducible: two builds of the same commit differ",
                        file=getattr(one, kind).name, found=f"first difference at byte {_first_difference(a, b)}",
                        why="a timestamp, path, order or mode from the build machine reached the archive",
                        fix="compare the two archives (diffoscope) and normalise what differs in pipeline/stages/verifier_dist.py",
                    )
            entries = check_wheel(one.wheel, source)
            ui.step(NAME, f"both builds are byte-identical; the wheel holds {entries} entries")
            lock = _commit_file(source, AUDITOR_LOCK)
            pinned = check_auditor_lock(lock, _commit_file(source, RELEASE_LOCK), one.wheel, source)
            ui.step(NAME, f"{AUDITOR_LOCK} pins {pinned} distributions by SHA-256, at the release lock's versions")
            sums_name = f"{source.name}-{source.version}.SHA256SUMS"
            lock_name = f"{source.name}-{source.version}.auditor-requirements.txt"
            target = self.ctx.dist / OUT_DIR
            with atomic_output_dir(target) as staging:
                os.chmod(staging, 0o755)  # mkdtemp makes it 0700
                for path in (one.wheel, one.sdist):
                    shutil.copyfile(path, staging / path.name)
                atomic_write_bytes(staging / lock_name, lock)
                for name in (one.wheel.name, one.sdist.name, lock_name):
                    os.chmod(staging / name, 0o644)
                    os.utime(staging / name, (source.epoch, source.epoch))
                sums = render_sums({n: sha256_file(staging / n) for n in (one.wheel.name, one.sdist.name, lock_name)})
                atomic_write_bytes(staging / sums_name, sums)
            wheel_name, sdist_name = one.wheel.name, one.sdist.name
        attrs = {
            "commit": source.commit,
            "version": source.version,
            "source_date_epoch": source.epoch,
            "setuptools": _installed("setuptools"),
            "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        }
        register = self.ctx.register
        return [
            register.make("verifier-wheel", target / wheel_name, stage=NAME, lane=None, **attrs),
            register.make("verifier-sdist", target / sdist_name, stage=NAME, lane=None, **attrs),
            register.make("verifier-requirements", target / lock_name, stage=NAME, lane=None, **attrs),
            register.make("verifier-checksums", target / sums_name, stage=NAME, lane=None, **attrs),
        ]


STAGE = VerifierDistStage


def build_verifier_dist(*, dist: Path | str | None = None, source: str | None = None, force: bool = False) -> StageResult:
    """Build the verifier wheel and sdist of one commit into <dist>/verifier/ and record them."""
    root, commit = parse_source(source)
    resolved = resolve_source(root, commit)
    return execute(VerifierDistStage(Context.open(dist), resolved), force=force)


def run_verifier_dist(args: argparse.Namespace) -> int:
    """`verifier-dist`: the command line's front door to `build_verifier_dist`; one OK line per file."""
    result = build_verifier_dist(dist=args.dist, source=args.source, force=args.force)
    for artifact in result.outputs:
        ui.result(f"OK: {artifact.kind} {artifact.path} sha256 {artifact.sha256} ({artifact.size} bytes)")
    return 0


def register_cli(sub) -> None:
    from pipeline.cli import add_common

    parser = sub.add_parser(
        "verifier-dist",
        help="build this pipeline as a byte-reproducible wheel and sdist to ship with the product release",
        description=(
            "Exports one commit of this repository, builds its sdist and, from that, its wheel with PyPA build "
            "(SOURCE_DATE_EPOCH = the commit time, the exactly pinned setuptools), twice, and refuses unless both "
            "builds are byte-identical. Writes <dist>/verifier/: the wheel, the sdist, the commit's hash-locked "
            "requirements/auditor.txt as <name>-<version>.auditor-requirements.txt (checked against the wheel and the "
            "release lock) and <name>-<version>.SHA256SUMS, recorded in the register as verifier-wheel, verifier-sdist, "
            "verifier-requirements and verifier-checksums. An auditor installs the lock with --require-hashes, then the "
            "wheel with --no-deps, and runs 'python -m pipeline audit MANIFEST_URL'."
        ),
    )
    parser.add_argument("--source", metavar="PATH[@COMMIT]",
                        help="checkout of this repository and, optionally, the full commit (default: this checkout's HEAD, which must have no uncommitted changes)")
    parser.add_argument("--force", action="store_true", help="build again even when the commit and tools are unchanged")
    add_common(parser)
    parser.set_defaults(func=run_verifier_dist)
