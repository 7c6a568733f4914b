"""Nox sessions of the OMP NInfer release pipeline.

Sessions are thin: each runs `python -m pipeline <command>` (the same
functions as the CLI) in one shared environment made by pipeline/dev/env.py.
Run them in release order, e.g. `nox -s build-5090 package image push`, or
all at once with `nox -s release`; the first session that fails stops the
sessions after it (`stop_on_first_error`).  The per-lane sessions (`build-<short>`,
`package-<short>`, `qualify-<short>`, `cut-<short>`, `publish-<short>`) are
made for each lane file in runtime/lanes/, named by its `short_name`.
Options come from environment variables, because nox hands the same
`-- posargs` to every session it runs:

  PIPELINE_DIST       output folder with the artefact register (default dist)
  PIPELINE_SOURCE     PATH[@COMMIT] or URL@COMMIT (default: the embedded sample runtime)
  PIPELINE_TOOLCHAIN  pinned (default) or system
  PIPELINE_PREBUILT   folder of prebuilt binaries for the lane being built
  PIPELINE_PKG_CONFIG_PATH  extra pkg-config folders for `build` (os.pathsep-separated: ':' on Linux, ';' on Windows; never inherited as PKG_CONFIG_PATH)
  PIPELINE_REGISTRY   HOST[:PORT]/REPO for `push`
  PIPELINE_IMAGE_DEFINITION  image definition for `image` (default: the lane's package.base_image, else containers/<the lane's>.toml)
  PIPELINE_BASE_LAYOUT       local OCI layout holding the pinned base image (default: pull it by digest)
  PIPELINE_REGISTRY_USERNAME, PIPELINE_REGISTRY_PASSWORD  push credentials (else the Docker config file)
  PIPELINE_RELEASE    product release for `compose`/`verify` (e.g. v0.13.1)
  PIPELINE_MANIFEST   manifest path or URL for `audit`
  PIPELINE_ENDPOINT, PIPELINE_API_KEY_FILE, PIPELINE_RESTART_COMMAND
                      the live runtime `qualify` runs its gates against (without: hardware-pending)
  PIPELINE_IMPORT_RECEIPT  a receipt from the owner's hardware for `qualify-<short>` to bind
  (`tests` writes the test-run receipt to PIPELINE_DIST/test-run-receipt.json)
  PIPELINE_PLAN_SHA256     the reviewed plan's hash: `publish-<short>` / `publish-release` apply it
                           (without it they only write and print the plan and check the gates)
  GITHUB_TOKEN             for `cut-<short>` (numbers used on GitHub) and `publish-*`
  PIPELINE_LANES, PIPELINE_THROUGH, PIPELINE_SKIP
                      `release`: lane ids or short names (space-separated; default every lane),
                      the last stage to run, stages to skip (space-separated); with PIPELINE_SOURCE,
                      PIPELINE_TOOLCHAIN, PIPELINE_REGISTRY and PIPELINE_RELEASE as above

  PIPELINE_TEST_SUBSET   `tests`: run only the declared subset tests/subsets/<NAME>.txt (its receipt names it;
                         publish --release refuses it outside the rehearsal's stand-in world)
  PIPELINE_FUZZ_SECONDS  seconds per target for `fuzz` (default 60)
  PIPELINE_REHEARSE_JOB  `rehearse`: run this job of release.yml and what it needs (default: every job)
  PIPELINE_REHEARSE_SUPPLY  `rehearse`: folder with the Windows jobs' upload paths (the mingw --prebuilt fixture)
  PIPELINE_REHEARSE_TEST_SUBSET  `rehearse`: the `tests` job runs this declared subset (default: the whole suite)
  PIPELINE_DISPOSABLE_HOST=1  `rehearse`: this machine may be changed by a job whose container host mode drops

Posargs go to `tests`, `tests-unit` (pytest arguments, e.g. `nox -s tests -- -m "not slow"`) and
`fuzz` (tests/fuzz/run.py arguments) only.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))  # pipeline.dev.env and the lane format it reads are standard-library only
from pipeline.dev.env import (  # noqa: E402
    ensure_debian_tools,
    ensure_env,
    ensure_node_tools,
    lane_table,
    pytest_workers_args,
    refresh_release_lock,
)
from pipeline.errors import PipelineError  # noqa: E402

nox.options.sessions = ["lint", "tests"]
nox.options.default_venv_backend = "none"
# `nox -s build-4090 package qualify`: a refusal stops the road there, so its one clear error is the last
# thing printed, not hidden under the "the register holds no build" of every session after it.
nox.options.stop_on_first_error = True

try:
    LANES = lane_table()
except PipelineError as _problem:  # the other sessions (lint, tests) still work while a lane file is being fixed
    sys.stderr.write(f"warning: no per-lane sessions: error[{_problem.label}]: {_problem.render()}\n")
    LANES = []


def _pipeline(session: nox.Session, *args: str, dist: bool = True) -> None:
    python = str(ensure_env(session.log))
    extra = ["--dist", os.environ.get("PIPELINE_DIST", "dist")] if dist else []
    session.run(python, "-m", "pipeline", *args, *extra, external=True)


def _env_flags(*pairs: tuple[str, str]) -> list[str]:
    flags: list[str] = []
    for variable, flag in pairs:
        if os.environ.get(variable):
            flags += [flag, os.environ[variable]]
    return flags


def _qualify_flags() -> list[str]:
    return _env_flags(
        ("PIPELINE_ENDPOINT", "--endpoint"),
        ("PIPELINE_API_KEY_FILE", "--api-key-file"),
        ("PIPELINE_RESTART_COMMAND", "--restart-command"),
    )


def _required(session: nox.Session, variable: str, example: str) -> str:
    value = os.environ.get(variable)
    if not value:
        session.error(f"set {variable} first, e.g. {variable}={example}")
    return value


def _apply_flags() -> list[str]:
    sha = os.environ.get("PIPELINE_PLAN_SHA256")
    return ["--apply", "--plan-sha256", sha] if sha else []


for _row in LANES:
    _short, _lane = _row.short_name, _row.id

    def _cut(session: nox.Session, lane: str = _lane) -> None:
        source = _required(session, "PIPELINE_SOURCE", "https://github.com/alphastorm/ninfer.git@<40-hex commit>")
        _pipeline(session, "cut", "--lane", lane, "--source", source)

    _cut.__doc__ = f"Record the next cut (beta.N) of {_lane} from PIPELINE_SOURCE=URL_OR_PATH@COMMIT in runtime/cuts/."
    nox.session(name=f"cut-{_short}", venv_backend="none")(_cut)

    def _publish(session: nox.Session, lane: str = _lane) -> None:
        _pipeline(session, "publish", "--component", lane, *_apply_flags())

    _publish.__doc__ = f"Plan (or, with PIPELINE_PLAN_SHA256, apply) the component prerelease of {_lane}'s current cut."
    nox.session(name=f"publish-{_short}", venv_backend="none")(_publish)

    def _build(session: nox.Session, lane: str = _lane) -> None:
        flags = _env_flags(
            ("PIPELINE_SOURCE", "--source"),
            ("PIPELINE_TOOLCHAIN", "--toolchain"),
            ("PIPELINE_PREBUILT", "--prebuilt"),
            ("PIPELINE_PKG_CONFIG_PATH", "--pkg-config-path"),
        )
        _pipeline(session, "build", "--lane", lane, *flags)

    _build.__doc__ = f"Build the {_lane} runtime (the embedded sample unless PIPELINE_SOURCE / PIPELINE_PREBUILT say otherwise)."
    nox.session(name=f"build-{_short}", venv_backend="none")(_build)

    def _package(session: nox.Session, lane: str = _lane) -> None:
        _pipeline(session, "package", "--lane", lane)

    _package.__doc__ = f"Package the {_lane} build into its closed asset set."
    nox.session(name=f"package-{_short}", venv_backend="none")(_package)

    def _qualify(session: nox.Session, lane: str = _lane) -> None:
        _pipeline(session, "qualify", "--lane", lane, *_qualify_flags(), *_env_flags(("PIPELINE_IMPORT_RECEIPT", "--import")))

    _qualify.__doc__ = f"Qualify the packaged {_lane} bytes into a lane receipt (hardware-pending without a runtime endpoint)."
    nox.session(name=f"qualify-{_short}", venv_backend="none")(_qualify)


@nox.session(venv_backend="none")
def package(session: nox.Session) -> None:
    """Package every lane that the register holds a build of."""
    _pipeline(session, "package", "--all")


@nox.session(venv_backend="none")
def image(session: nox.Session) -> None:
    """Assemble each container lane's OCI image layout from its packaged binary archive."""
    containers = [row.id for row in LANES if row.kind == "container"]
    if not containers:
        session.error("no container lane in runtime/lanes/ (kind = \"container\")")
    for lane in containers:
        _pipeline(session, "image", "--lane", lane)


@nox.session(name="image-lock", venv_backend="none")
def image_lock(session: nox.Session) -> None:
    """Resolve the container lane's package base against its signed archives into containers/<definition>.lock.json (online)."""
    containers = [row.id for row in LANES if row.kind == "container"]
    if not containers:
        session.error("no container lane in runtime/lanes/ (kind = \"container\")")
    for lane in containers:
        _pipeline(session, "image", "lock", "--lane", lane, dist=False)


@nox.session(venv_backend="none")
def push(session: nox.Session) -> None:
    """Push the image by digest to PIPELINE_REGISTRY and write the publication receipt."""
    _pipeline(session, "push", "--registry", _required(session, "PIPELINE_REGISTRY", "127.0.0.1:5000/alphastorm/ninfer-runtime"))


@nox.session(venv_backend="none")
def qualify(session: nox.Session) -> None:
    """Qualify every packaged lane into lane receipts (hardware-pending without an endpoint)."""
    _pipeline(session, "qualify", "--all", *_qualify_flags())


@nox.session(venv_backend="none")
def compose(session: nox.Session) -> None:
    """Compose lane receipts and pinned components into manifests/<PIPELINE_RELEASE>/."""
    _pipeline(session, "compose", "--release", _required(session, "PIPELINE_RELEASE", "v0.13.1"))


@nox.session(venv_backend="none")
def verify(session: nox.Session) -> None:
    """Verify a release tree against the release contract (PIPELINE_RELEASE, default: the newest)."""
    _pipeline(session, "verify", *_env_flags(("PIPELINE_RELEASE", "--release")), dist=False)


@nox.session(venv_backend="none")
def audit(session: nox.Session) -> None:
    """Re-verify every hash of a published release from its public URLs (PIPELINE_MANIFEST)."""
    _pipeline(session, "audit", _required(session, "PIPELINE_MANIFEST", "manifests/v0.13.1/manifest.json"), dist=False)


@nox.session(name="publish-release", venv_backend="none")
def publish_release(session: nox.Session) -> None:
    """Plan (or, with PIPELINE_PLAN_SHA256, apply) the product release PIPELINE_RELEASE on GitHub."""
    _pipeline(session, "publish", "--release", _required(session, "PIPELINE_RELEASE", "v0.13.1"), *_apply_flags())


@nox.session(venv_backend="none")
def release(session: nox.Session) -> None:
    """Run the road: every stage in release order (run / up to date / skipped), options from PIPELINE_*."""
    flags = _env_flags(
        ("PIPELINE_THROUGH", "--through"),
        ("PIPELINE_SOURCE", "--source"),
        ("PIPELINE_TOOLCHAIN", "--toolchain"),
        ("PIPELINE_REGISTRY", "--registry"),
        ("PIPELINE_RELEASE", "--release"),
    )
    for variable, flag in (("PIPELINE_LANES", "--lane"), ("PIPELINE_SKIP", "--skip")):
        for word in os.environ.get(variable, "").split():
            flags += [flag, word]
    _pipeline(session, "release", *flags)


@nox.session(venv_backend="none")
def status(session: nox.Session) -> None:
    """Where each lane (and, with PIPELINE_RELEASE, the release) stands; never runs a stage."""
    _pipeline(session, "status", *_env_flags(("PIPELINE_RELEASE", "--release")))


@nox.session(venv_backend="none")
def bench(session: nox.Session) -> None:
    """Benchmark the hot paths (hashing, packaging, transfers) against openssl, GNU tar+gzip and curl; writes JSON."""
    ensure_debian_tools(session.log)
    _pipeline(session, "bench", dist=False)


@nox.session(venv_backend="none")
def rehearse(session: nox.Session) -> None:
    """Run .github/workflows/release.yml as committed with act (host mode) on the push of the tag PIPELINE_RELEASE
    (a local clone of HEAD, stand-ins for the pinned actions, the substitutions listed); docs/RELEASING.md."""
    flags = _env_flags(("PIPELINE_REHEARSE_JOB", "--job"), ("PIPELINE_REHEARSE_SUPPLY", "--supply"),
                       ("PIPELINE_REHEARSE_TEST_SUBSET", "--test-subset"))
    if os.environ.get("PIPELINE_DISPOSABLE_HOST") == "1":
        flags.append("--disposable-host")
    _pipeline(session, "rehearse", "--release", _required(session, "PIPELINE_RELEASE", "v0.13.1"), *flags, dist=False)


@nox.session(venv_backend="none")
def tests(session: nox.Session) -> None:
    """Run the whole test suite, slow CUDA and registry tests included, on one pytest-xdist worker per core
    (PIPELINE_TEST_WORKERS=N to choose, 0 for one process; pytest arguments after --).

    Writes the test-run receipt <PIPELINE_DIST>/test-run-receipt.json (commit, tree, dirty, counts) that the
    product publication gates on; a run that selects part of the suite writes none (tests/kits/testreceipt.py).
    PIPELINE_TEST_SUBSET=<name> runs only the declared subset tests/subsets/<name>.txt, and its receipt says so
    (the release workflow's rehearsal sets it; publish refuses such a receipt outside the rehearsal's stand-ins).
    """
    from pipeline.formats.test_subset import ENV_VAR as SUBSET_VARIABLE
    from pipeline.formats.test_subset import read_subset

    ensure_debian_tools(session.log)
    ensure_node_tools(session.log)
    python = str(ensure_env(session.log))
    receipt = Path(os.environ.get("PIPELINE_DIST", "dist")).resolve() / "test-run-receipt.json"
    selection: list[str] = []
    if os.environ.get(SUBSET_VARIABLE):
        try:
            subset = read_subset(ROOT, os.environ[SUBSET_VARIABLE])
        except PipelineError as problem:
            session.error(f"error[{problem.label}]: {problem.render()}")
        session.log(f"{SUBSET_VARIABLE}={subset.name}: the declared subset {subset.path} (sha256 {subset.sha256}), "
                    "not the whole suite; its receipt says so")
        selection = list(subset.entries)
    session.run(python, "-m", "pytest", *pytest_workers_args(), *selection, *session.posargs, external=True,
                env={"PIPELINE_TEST_RECEIPT": str(receipt)})


@nox.session(name="tests-unit", venv_backend="none")
def tests_unit(session: nox.Session) -> None:
    """The quick loop: the unit tier (tests/unit/), or, until the tiers exist, every test that is not slow
    and needs no CUDA compiler or registry (pytest arguments after --).  Writes no test-run receipt."""
    python = str(ensure_env(session.log))
    unit = ROOT / "tests" / "unit"
    if unit.is_dir():
        selection = [str(unit)]
    else:
        ensure_debian_tools(session.log)  # the untiered quick set still holds tests that use Debian and node tools
        ensure_node_tools(session.log)
        selection = ["-m", "not slow and not cuda and not registry"]
    session.run(python, "-m", "pytest", *selection, *session.posargs, external=True)


@nox.session(venv_backend="none")
def fuzz(session: nox.Session) -> None:
    """Fuzz every reader of outside bytes (tests/fuzz, atheris) for PIPELINE_FUZZ_SECONDS each (default 60).

    Arguments after -- go to tests/fuzz/run.py, e.g. `nox -s fuzz -- --seconds 300 --target tar`; new corpus
    inputs and crashing inputs are kept in .fuzz/ (replay one with `-- --replay --target NAME --input FILE`).
    """
    python = str(ensure_env(session.log))
    session.run(python, "tests/fuzz/run.py", *session.posargs, external=True)


@nox.session(venv_backend="none")
def lint(session: nox.Session) -> None:
    """Lint the pipeline, the tests and this file with ruff."""
    python = str(ensure_env(session.log))
    session.run(python, "-m", "ruff", "check", "pipeline", "tests", "noxfile.py", external=True)


@nox.session(venv_backend="none")
def lock(session: nox.Session) -> None:
    """Refresh requirements/release.txt (the release workflow installs it) and requirements/auditor.txt (the auditor's install, shipped with each release), both hash-locked (needs PyPI)."""
    refresh_release_lock(session.log)
