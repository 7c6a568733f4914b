"""The expected signer of a release: the one signer policy sign, publish and audit check bundles against.

`release_signer` is the identity a tag-triggered run of the product's release
workflow signs with; `signer_from_manifest` is the signer a release tree
declares in its `signing` block (docs/release-tree.md), or, for a tree without
one, the release workflow of `product.repository` at the `release` tag.  The
result is one `SignerIdentity` value (pipeline/infra/sigstore.py), built here
once and handed to the verifier whole.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from pipeline.errors import InputError
from pipeline.formats.release.names import OIDC_ISSUER, RELEASE_WORKFLOW
from pipeline.infra.sigstore import (
    TRUST_CONFIGS,
    SignerIdentity,
    github_claims,
    normalize_repository,
)

if TYPE_CHECKING:
    from pipeline.formats.release.manifest import ReleaseManifest


def release_signer(repository: str, tag: str, *, trust_config: str = "production") -> SignerIdentity:
    """The identity a tag-triggered run of this project's release workflow signs with."""
    repo = normalize_repository(repository)
    ref = f"refs/tags/{tag}"
    return SignerIdentity(
        identity=f"https://github.com/{repo}/{RELEASE_WORKFLOW}@{ref}",
        issuer=OIDC_ISSUER,
        repository=repo,
        ref=ref,
        trust_config=trust_config,
    )


def signer_from_manifest(manifest: ReleaseManifest, *, file: str | os.PathLike[str] | None = None) -> SignerIdentity:
    """The expected signer a release tree declares, per docs/release-tree.md.

    `signing` {`certificate_identity`, `certificate_oidc_issuer`, optional
    `trust_config` (`production`/`staging`)}; the GitHub repository and ref the
    policy also checks are read from the identity.  A manifest without a
    `signing` block gets the release workflow of `product.repository` at the
    `release` tag.
    """
    block = manifest.value("signing")
    release = manifest.release
    if isinstance(block, dict):
        for name in ("certificate_identity", "certificate_oidc_issuer"):
            if not isinstance(block.get(name), str) or not block.get(name):
                raise InputError(
                    "the expected signer lacks a value",
                    file=file,
                    field=f"signing.{name}",
                    found=block.get(name),
                    expected="the release workflow's certificate identity and OIDC issuer",
                )
        trust = block.get("trust_config", "production")
        if trust not in TRUST_CONFIGS:
            raise InputError("names an unknown Sigstore instance", file=file, field="signing.trust_config", found=trust, expected=" or ".join(TRUST_CONFIGS))
        identity = block["certificate_identity"]
        repository, ref = github_claims(identity)
        return SignerIdentity(identity=identity, issuer=block["certificate_oidc_issuer"], repository=repository, ref=ref, trust_config=trust)
    repository = manifest.section("product").get("repository")
    if not isinstance(repository, str) or not isinstance(release, str):
        raise InputError(
            "declares no expected signer",
            file=file,
            field="signing",
            expected="a 'signing' block {certificate_identity, certificate_oidc_issuer, signed_files} or product.repository and release",
            fix="compose the release tree again; it writes the release workflow's identity",
        )
    return release_signer(repository, release)
