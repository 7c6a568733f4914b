"""Nox sessions of the OMP NInfer release pipeline.

Sessions are thin: each runs `python -m pipeline <command>` (the same
functions as the CLI) in one shared environment made by pipeline/devenv.py.
Run them in release order, e.g. `nox -s build-5090 package image push`.
Options come from environment variables, because nox hands the same
`-- posargs` to every session it runs:

  PIPELINE_DIST       output folder with the artefact register (default dist)
  PIPELINE_SOURCE     PATH[@COMMIT] or URL@COMMIT (default: the embedded sample runtime)
  PIPELINE_TOOLCHAIN  pinned (default) or system
  PIPELINE_PREBUILT   folder of prebuilt binaries for the lane being built
  PIPELINE_REGISTRY   HOST[:PORT]/REPO for `push`
  PIPELINE_IMAGE_DEFINITION  image definition for `image` (default: containers/<the lane's>.toml)
  PIPELINE_BASE_LAYOUT       local OCI layout holding the pinned base image (default: pull it by digest)
  PIPELINE_REGISTRY_USERNAME, PIPELINE_REGISTRY_PASSWORD  push credentials (else the Docker config file)
  PIPELINE_RELEASE    product release for `compose`/`verify` (e.g. v0.13.1)
  PIPELINE_MANIFEST   manifest path or URL for `audit`
  PIPELINE_ENDPOINT, PIPELINE_API_KEY_FILE, PIPELINE_RESTART_COMMAND
                      the live runtime `qualify` runs its gates against (without: hardware-pending)
  PIPELINE_IMPORT_RECEIPT  a receipt from the owner's hardware for `qualify-<short>` to bind
  (`tests` writes the test-run receipt to PIPELINE_DIST/test-run-receipt.json)

  PIPELINE_FUZZ_SECONDS  seconds per target for `fuzz` (default 60)

Posargs go to `tests` (pytest arguments) and `fuzz` (tests/fuzz/run.py arguments) only.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nox

sys.path.insert(0, str(Path(__file__).resolve().parent))  # pipeline.devenv is standard-library only
from pipeline.devenv import ensure_debian_tools, ensure_env, ensure_node_tools  # noqa: E402

nox.options.sessions = ["lint", "tests"]
nox.options.default_venv_backend = "none"

LANES = {"5090": "rtx5090-container", "4090": "rtx4090-windows-native", "3090": "rtx3090-windows-native"}


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


for _short, _lane in LANES.items():

    def _build(session: nox.Session, lane: str = _lane) -> None:
        flags = _env_flags(("PIPELINE_SOURCE", "--source"), ("PIPELINE_TOOLCHAIN", "--toolchain"), ("PIPELINE_PREBUILT", "--prebuilt"))
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
    """Assemble the RTX 5090 OCI image layout from the packaged binary archive."""
    _pipeline(session, "image", "--lane", LANES["5090"])


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


@nox.session(venv_backend="none")
def bench(session: nox.Session) -> None:
    """Benchmark the hot paths (hashing, packaging, transfers) against openssl, GNU tar+gzip and curl; writes JSON."""
    ensure_debian_tools(session.log)
    _pipeline(session, "bench", dist=False)


@nox.session(venv_backend="none")
def tests(session: nox.Session) -> None:
    """Run the whole test suite, slow CUDA and registry tests included (pytest arguments after --).

    Writes the test-run receipt <PIPELINE_DIST>/test-run-receipt.json (commit, tree, dirty, counts) that the
    product publication gates on; a run that selects part of the suite writes none (tests/testreceipt.py).
    """
    ensure_debian_tools(session.log)
    ensure_node_tools(session.log)
    python = str(ensure_env(session.log))
    receipt = Path(os.environ.get("PIPELINE_DIST", "dist")).resolve() / "test-run-receipt.json"
    session.run(python, "-m", "pytest", *session.posargs, external=True, env={"PIPELINE_TEST_RECEIPT": str(receipt)})


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
