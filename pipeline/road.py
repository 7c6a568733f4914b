"""The road: the pipe list in release order, and every command of `python -m pipeline`.

`PIPES` is the pipeline.  Each `Pipe` names one stage: its command, the module
that holds it and a one-line summary; `Pipe.stage_class()` imports that module
and returns its `STAGE` class (or another stage class of it, by name: how a
stage that runs another finds it without importing a stage).  The references are by module name so that
`python -m pipeline --help` imports no stage and no third-party library (a
missing optional dependency then breaks only the command that needs it).  The
CLI makes one command per pipe, `release` runs the list in order, and nox
calls the same commands.  Maintainers' stages come first, in release order;
`audit` and `rebuild` are for outsiders checking a release they did not make.

Standard library only.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType


@dataclass(frozen=True)
class Pipe:
    name: str
    module: str
    summary: str
    outsider: bool = False  # for auditors re-checking a release, not part of making one

    def load(self) -> ModuleType:
        return importlib.import_module(self.module)

    def stage_class(self, name: str = "STAGE") -> type:
        """The pipe's stage class (`STAGE`), or, by its name, another stage class of the pipe's module: one job of
        a stage with several (compose's `AcceptStage`).  A stage that runs another looks it up here, never by an
        import, so that stages stay leaves (tests/unit/test_architecture.py)."""
        found = getattr(self.load(), name, None)
        if not isinstance(found, type):
            raise LookupError(f"{self.module} defines no stage class {name}")
        return found


PIPES: tuple[Pipe, ...] = (
    Pipe("cut", "pipeline.stages.cut", "record a lane's next beta.N cut (component tag) in its cut ledger"),
    Pipe("build", "pipeline.stages.build", "compile one lane's runtime from an exact commit (or import --prebuilt binaries)"),
    Pipe("package", "pipeline.stages.package", "make a lane's closed asset set (package, source, SBOMs, checksums, receipt) from its build"),
    Pipe("image", "pipeline.stages.image", "assemble the RTX 5090 OCI image layout from the packaged binary archive"),
    Pipe("push", "pipeline.stages.push", "push the image by digest, verify it, write the publication receipt, then tag"),
    Pipe("qualify", "pipeline.stages.qualify", "qualify the exact packaged bytes into a lane receipt"),
    Pipe("compose", "pipeline.stages.compose", "compose the release tree manifests/<release>/ and move it draft -> candidate -> ready"),
    Pipe("accept", "pipeline.stages.accept", "bundle, run and compose the documented install routes on the candidate"),
    Pipe("verify", "pipeline.stages.verify", "check a release tree against the release contract"),
    Pipe("sign", "pipeline.stages.sign", "keyless Sigstore bundles for the release's signed files (release workflow only)"),
    Pipe("publish", "pipeline.stages.publish", "publish a component prerelease or the product release: plan, gates, apply, resume"),
    Pipe("audit", "pipeline.stages.audit", "re-verify a published release from its public URLs", outsider=True),
    Pipe("rebuild", "pipeline.stages.rebuild", "rebuild a published lane from its source archive and compare every file bit for bit", outsider=True),
)

# Commands that are tools, not stages: name -> (module providing it, summary).
TOOLS: dict[str, tuple[str, str]] = {
    "lanes": ("pipeline.cli", "list the lanes (runtime/lanes/*.toml)"),
    "release": ("pipeline.release", "run the pipe list in order: run, up to date or skipped, per stage"),
    "toolchain": ("pipeline.cli", "show, provision or re-lock the pinned CUDA toolchains"),
    "check-assets": ("pipeline.stages.package", "check a downloaded asset set: closed, hashes, receipt, package payload, SBOMs"),
    "sbom": ("pipeline.cli", "validate SPDX / CycloneDX documents"),
    "verifier-dist": ("pipeline.stages.verifier_dist", "build this pipeline as a byte-reproducible wheel and sdist (the verifier shipped with a release)"),
    "status": ("pipeline.tools.status", "where each lane and a release stand: a lane x stage table, blockers and the commands that clear them (text, --json, --html)"),
    "diff": ("pipeline.tools.diff", "what changed between two releases (trees, manifest URLs or asset-set folders): text, --json or --markdown"),
    "bench": ("pipeline.dev.bench", "benchmark the hot paths against openssl, tar+gzip/pigz and curl; JSON"),
    "rehearse": ("pipeline.dev.rehearse", "run a workflow as committed with act (host mode) on a release tag's push; stand-ins for the pinned actions"),
}


def pipe(name: str) -> Pipe:
    for item in PIPES:
        if item.name == name:
            return item
    raise KeyError(name)


def commands() -> dict[str, tuple[str, str]]:
    """Every command in display order: the pipes in release order, then the tools."""
    table = {item.name: (item.module, item.summary) for item in PIPES}
    table.update(TOOLS)
    return table
