"""Nox sessions of the OMP NInfer release pipeline.

Sessions are thin: each runs `python -m pipeline <command>` (the same
functions as the CLI) in one shared environment made by pipeline/devenv.py.
Options for the pipeline sessions come from environment variables, because
nox hands the same `-- posargs` to every session it runs:

  PIPELINE_DIST       output folder with the artefact register (default dist)
  PIPELINE_SOURCE     PATH[@COMMIT] or URL@COMMIT (default: the embedded sample runtime)
  PIPELINE_TOOLCHAIN  pinned (default) or system
  PIPELINE_PREBUILT   folder of prebuilt binaries for the lane being built

Posargs go to `tests` (pytest arguments) only.
"""

from __future__ import annotations

import os

import nox

from pipeline.devenv import ensure_debian_tools, ensure_env

nox.options.sessions = ["lint", "tests"]
nox.options.default_venv_backend = "none"

LANES = {"5090": "rtx5090-container", "4090": "rtx4090-windows-native", "3090": "rtx3090-windows-native"}


def _pipeline(session: nox.Session, *args: str) -> None:
    python = str(ensure_env(session.log))
    dist = os.environ.get("PIPELINE_DIST", "dist")
    session.run(python, "-m", "pipeline", *args, "--dist", dist, external=True)


def _build(session: nox.Session, short: str) -> None:
    args = ["build", "--lane", LANES[short]]
    for variable, flag in (("PIPELINE_SOURCE", "--source"), ("PIPELINE_TOOLCHAIN", "--toolchain"), ("PIPELINE_PREBUILT", "--prebuilt")):
        if os.environ.get(variable):
            args += [flag, os.environ[variable]]
    _pipeline(session, *args)


for _short, _lane in LANES.items():

    def _session(session: nox.Session, short: str = _short) -> None:
        _build(session, short)

    _session.__doc__ = f"Build the {_lane} runtime (embedded sample unless PIPELINE_SOURCE/PIPELINE_PREBUILT say otherwise)."
    nox.session(name=f"build-{_short}", venv_backend="none")(_session)


@nox.session(venv_backend="none")
def tests(session: nox.Session) -> None:
    """Run the whole test suite, slow CUDA and registry tests included (pytest args after --)."""
    ensure_debian_tools(session.log)
    python = str(ensure_env(session.log))
    session.run(python, "-m", "pytest", *session.posargs, external=True)


@nox.session(venv_backend="none")
def lint(session: nox.Session) -> None:
    """Lint the pipeline and the tests with ruff."""
    python = str(ensure_env(session.log))
    session.run(python, "-m", "ruff", "check", "pipeline", "tests", "noxfile.py", external=True)
