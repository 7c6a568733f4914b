"""Job: the expected signer (the auditor's, checked against what the manifest declares) and the Sigstore
bundle of every signed file."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from pipeline.errors import PipelineError
from pipeline.formats.release.manifest import ReleaseManifest
from pipeline.infra import net
from pipeline.stages.audit.model import MAX_BUNDLE_BYTES, MAX_SIGNED_FILE_BYTES, Item
from pipeline.stages.audit.session import AuditSession
from pipeline.util.hashing import sha256_bytes


def check_signer(auditor: AuditSession, manifest: ReleaseManifest) -> bool:
    """The expected signer, from the auditor (or this tool's default), checked against what the manifest declares.

    Default: `https://github.com/<repository>/.github/workflows/release.yml@refs/tags/<release>`
    from GitHub Actions' issuer, on the production Sigstore instance, with <repository> the
    product repository (`--repository`, default alphastorm/omp-ninfer); `--certificate-identity`
    and `--certificate-oidc-issuer` replace it (sigstore-python's and cosign's flags).  The
    manifest must declare exactly that signer, a product repository of that name, and no other
    Sigstore instance than the one the auditor chose; otherwise nothing it binds is fetched.
    """
    from pipeline.formats.release.names import OIDC_ISSUER, PRODUCT_REPO_SLUG
    from pipeline.formats.release.signer import release_signer
    from pipeline.infra import sigstore

    release = manifest.release
    trust = auditor.trust_config or "production"
    if auditor.certificate_identity:
        identity = auditor.certificate_identity
        issuer = auditor.certificate_oidc_issuer or OIDC_ISSUER
        source = "--certificate-identity"
    else:
        repository = auditor.repository or PRODUCT_REPO_SLUG
        identity = release_signer(repository, release, trust_config=trust).identity  # the one rule sign and publish use
        issuer = auditor.certificate_oidc_issuer or OIDC_ISSUER
        source = "--repository" if auditor.repository else f"the default repository {PRODUCT_REPO_SLUG}"
    claimed_repository, ref = sigstore.github_claims(identity)
    auditor.expected_signer = sigstore.SignerIdentity(identity, issuer, claimed_repository, ref, trust)
    label = "signer"
    problems: list[str] = []
    signing = manifest.section("signing")
    declared = (signing.get("certificate_identity"), signing.get("certificate_oidc_issuer"))
    if signing and declared != (identity, issuer):
        problems.append(f"the manifest declares the signer {declared[0]!r} (issuer {declared[1]!r}), but this audit expects {identity!r} (issuer {issuer!r}, from {source}); pass --repository OWNER/NAME or --certificate-identity to audit a release of another repository")
    declared_trust = signing.get("trust_config", "production")
    if auditor.trust_config is None and declared_trust != "production":
        problems.append(f"the manifest asks for the {declared_trust!r} Sigstore instance; signatures are checked on production unless you pass --trust-config {declared_trust}")
    product = manifest.product_repository()
    parts = urlsplit(product) if product else None
    product_path = parts.path.strip("/").removesuffix(".git") if parts else ""
    # GitHub itself, or a loopback server (tests, a local copy): never another host, which would
    # then serve the raw records and the release's bundles.
    on_github = parts is not None and parts.scheme == "https" and (parts.hostname or "").lower() == "github.com" and parts.port is None
    on_loopback = parts is not None and net.is_loopback(parts.hostname)
    wrong_repository = product_path.lower() != str(claimed_repository).lower() or not (on_github or on_loopback)
    if wrong_repository and not auditor.certificate_identity:  # an explicit identity is the auditor's own call
        problems.append(f"product.repository {product!r} is not the signer's repository https://github.com/{claimed_repository}")
    if problems:
        auditor.add(Item(label, False, "; ".join(problems), "signature", {"expected": auditor.expected_signer.to_json()}))
        return False
    auditor.add(Item(label, True, f"{identity} (issuer {issuer}, {trust} Sigstore; from {source})", "signature", {"expected": auditor.expected_signer.to_json()}))
    return True


def audit_signatures(auditor: AuditSession, manifest: ReleaseManifest) -> None:
    from pipeline.infra import sigstore

    signing = manifest.section("signing")
    release = manifest.release
    if not isinstance(manifest.value("signing"), dict):
        auditor.add(Item("signatures", None if auditor.allow_unsigned else False, "the manifest declares no signing block (expected signer and signed files)", "signature"))
        return
    files = signing.get("signed_files")
    suffix = manifest.bundle_suffix()
    if not isinstance(files, list) or not files:
        auditor.add(Item("signatures", False, "signing block lists no signed_files", "signature"))
        return
    if f"manifests/{release}/manifest.json" not in files:
        # The manifest binds every other hash: unsigned, it authenticates nothing, whatever else is signed.
        auditor.add(Item("signatures", False, f"signing.signed_files does not list manifests/{release}/manifest.json: the manifest itself must be signed", "signature"))
        return
    expected = auditor.expected_signer
    assert expected is not None  # signatures.check_signer ran first
    identity, issuer, repository, ref, trust = expected.identity, expected.issuer, expected.repository, expected.ref, expected.trust_config
    cache = auditor.cache_dir(release) / "signatures"
    for relative in files:
        label = f"signature {relative}"
        if not isinstance(relative, str) or not relative.startswith(f"manifests/{release}/") or ".." in relative.split("/"):
            auditor.add(Item(label, False, f"signed file {relative!r} is outside the release tree manifests/{release}/", "signature"))
            continue
        location, is_url = auditor.signed_source(release, relative)
        try:
            if relative == f"manifests/{release}/manifest.json":
                data = manifest.data  # the bytes this audit hashed and parsed
            else:
                data = auditor.fetch_small(location, is_url, cache / relative, cap=MAX_SIGNED_FILE_BYTES)
        except (PipelineError, OSError) as error:
            auditor.add(Item(label, False, f"cannot fetch the signed file: {getattr(error, 'what', error)}", "signature"))
            continue
        candidates = [location + suffix]
        on_release = auditor.product_release_url(Path(relative).name + suffix)
        if is_url and on_release:
            candidates.append(on_release)
        bundle, tried, late = None, [], None
        for candidate in candidates:
            tried.append(candidate)
            try:
                bundle = auditor.fetch_small(candidate, is_url, cache / (relative + suffix), cap=MAX_BUNDLE_BYTES)
                break
            except net.DeadlinePassed as error:
                late = error
                break
            except (PipelineError, OSError):
                continue
        if bundle is None and late is not None:  # not looked for: never a SKIP, even with --allow-unsigned
            auditor.add(Item(label, False, f"cannot fetch the Sigstore bundle: {late.what}", "signature"))
            continue
        if bundle is None:
            auditor.add(Item(label, None if auditor.allow_unsigned else False, "no Sigstore bundle at " + " or ".join(tried), "signature"))
            continue
        try:
            verified = sigstore.verify_bundle(sigstore.Sha256Digest(sha256_bytes(data)), bundle, identity=identity, issuer=issuer, trust_config=trust, repository=repository, ref=ref)
        except sigstore.SignatureError as error:
            auditor.add(Item(label, False, error.reason, "signature", {"identity": identity}))
            continue
        except PipelineError as error:
            auditor.add(Item(label, False, error.render(), "signature"))
            continue
        auditor.add(Item(label, True, f"signed by {verified.identity}, log index {verified.log_index}", "signature", verified.to_json()))
