"""Provenance statements and their DSSE bundles, the set's SHA256SUMS signature: the evidence gates a
publication checks before it writes."""

from __future__ import annotations

from pathlib import Path

from pipeline.errors import PipelineError
from pipeline.formats.release.signer import release_signer
from pipeline.infra.github import repository_of
from pipeline.infra.sigstore import Sha256Digest, effective_trust_config, verify_bundle, verify_dsse_bundle
from pipeline.register import Artifact
from pipeline.stages.publish.target import refuse
from pipeline.util.hashing import sha256_file


def statement_bundle(register, statement_sha256: str) -> Artifact | None:
    """The `signature-bundle` entry `sign` recorded for a statement's exact bytes (its `release` names the signing workflow's tag)."""
    for entry in register.query("signature-bundle"):
        if entry.attrs.get("signed_sha256") == statement_sha256 and isinstance(entry.attrs.get("release"), str):
            return entry
    return None


def _release_workflow_signer(release: str):
    """The product release workflow's identity at `release`, verified with the trust config in force (the test seam's under it)."""
    from dataclasses import replace

    from pipeline.formats.release.names import PRODUCT_REPOSITORY
    signer = release_signer(repository_of(PRODUCT_REPOSITORY), release)
    return replace(signer, trust_config=effective_trust_config(signer.trust_config))


def check_evidence(statement: Path, bundle: Path | None, release: str, *, what: str, fix: str) -> str:
    """A statement ships only with a DSSE bundle that verifies, offline, against the release workflow that signed it."""
    if bundle is None:
        raise refuse(f"{what} has no DSSE bundle in the register", file=statement, field="signature-bundle",
                      why="auditors check every published statement against its Sigstore bundle; a statement without one cannot be checked", fix=fix)
    signer = _release_workflow_signer(release)
    try:
        verified = verify_dsse_bundle(statement.read_bytes(), bundle, identity=signer.identity, issuer=signer.issuer, trust_config=signer.trust_config,
                                           repository=signer.repository, ref=signer.ref, name=statement.name)
    except PipelineError as exc:
        raise refuse(f"the DSSE bundle of {what} does not verify: {exc.what}", file=bundle, fix=fix) from None
    return f"{statement.name} and its DSSE bundle (signed by {verified.identity}, log index {verified.log_index})"


def check_sums_signature(register, sums: Path, bundle: Artifact | None, *, fix: str) -> str:
    """The set's SHA256SUMS ships with the Sigstore bundle of the release workflow that signed it (its tree copy)."""
    if bundle is None:
        raise refuse(f"the set's {sums.name} has no Sigstore bundle in the register", file=sums, field="signature-bundle",
                      why="the SHA256SUMS is what the product release signs for this set; the component release carries that signature", fix=fix)
    signer = _release_workflow_signer(bundle.attrs["release"])
    try:
        verified = verify_bundle(Sha256Digest(sha256_file(sums)), register.verified_path(bundle), identity=signer.identity, issuer=signer.issuer,
                                      trust_config=signer.trust_config, repository=signer.repository, ref=signer.ref)
    except PipelineError as exc:
        raise refuse(f"the Sigstore bundle of the set's {sums.name} does not verify: {exc.what}", file=register.path_of(bundle), fix=fix) from None
    return f"{sums.name} signed by {verified.identity}"
