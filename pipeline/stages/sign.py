"""Sigstore signatures of a release: keyless signing in CI, offline verification everywhere.

`python -m pipeline sign [--release vX.Y.Z]` runs in the release workflow on
GitHub Actions.  It signs, with the job's ambient OIDC identity (the workflow
needs `permissions: id-token: write`), the release manifest and every asset
set's outer `SHA256SUMS`, writing `<file>.sigstore.json` beside each file:
the release tree's manifest, the checked-in `qualification/*.SHA256SUMS`
copies and the sets under `--dist`.  Like CPython's release tooling it signs
only what is unsigned and then verifies *every* bundle against the release
tree's expected signer (the release workflow's certificate identity and
issuer), so a re-run is idempotent and a wrong identity can never slip out.
Outside GitHub Actions it refuses (exit 7): a release is never published
unsigned, and nobody signs a release from a laptop.

Provenance statements (pipeline/formats/provenance.py) of the sets and the
image the release ships are signed too, as DSSE envelopes (sigstore-python's
`Signer.sign_dsse`, payload type `application/vnd.in-toto+json`), with the
bundle `<statement>.sigstore.json` beside each; `verify_dsse_bundle` checks one
offline and requires the envelope to carry the statement's exact bytes.

`verify_bundle` is the one verification routine (`verify --require-ready`,
`audit`, and the check after signing): offline, against a pinned trust
configuration vendored under `pipeline/data/sigstore/` (no TUF refresh), for
a file, its bytes, or only its SHA-256 (`Sha256Digest`, so `audit` can check a
signature of a multi-GiB file it hashed while downloading).  It returns what
was verified or raises `SignatureError` naming the reason.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.errors import EnvironmentProblem, InputError, IntegrityError, RefusedError, register_secret
from pipeline.runcontext import current
from pipeline.util import ui
from pipeline.util.fs import atomic_write_bytes
from pipeline.util.hashing import is_sha256_hex, sha256_bytes, sha256_file
from pipeline.util.jsonio import loads_object, read_json_object
from pipeline.util.safepath import safe_relpath

BUNDLE_SUFFIX = ".sigstore.json"
TRUST_CONFIG_DIR = Path(__file__).resolve().parents[1] / "data" / "sigstore"
TRUST_CONFIGS = {
    "production": TRUST_CONFIG_DIR / "production-trust-config.json",
    "staging": TRUST_CONFIG_DIR / "staging-trust-config.json",
}
GITHUB_ACTIONS_ISSUER = "https://token.actions.githubusercontent.com"
RELEASE_WORKFLOW = ".github/workflows/release.yml"
MANIFEST_NAME = "manifest.json"
OUTER_SUMS_SUFFIX = "SHA256SUMS"
DEFAULT_MANIFESTS = Path("manifests")

_REPOSITORY = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")
_RELEASE = re.compile(r"v[0-9]+\.[0-9]+\.[0-9]+(-[A-Za-z0-9.]+)?")


# -- identities and trust --------------------------------------------------------


@dataclass(frozen=True)
class SignerIdentity:
    """Who must have signed: the certificate SAN and OIDC issuer, plus GitHub claims."""

    identity: str
    issuer: str
    repository: str | None = None
    ref: str | None = None
    trust_config: str = "production"

    def describe(self) -> str:
        return f"{self.identity} (issuer {self.issuer})"

    def to_json(self) -> dict[str, Any]:
        return {
            "identity": self.identity,
            "issuer": self.issuer,
            "repository": self.repository,
            "ref": self.ref,
            "trust_config": self.trust_config,
        }


def normalize_repository(repository: str) -> str:
    """'https://github.com/owner/repo(.git)' or 'owner/repo' -> 'owner/repo'."""
    text = repository.strip()
    for prefix in ("https://github.com/", "http://github.com/", "github.com/"):
        if text.startswith(prefix):
            text = text[len(prefix):]
    text = text.removesuffix(".git").strip("/")
    if not _REPOSITORY.fullmatch(text):
        raise InputError(
            "is not a GitHub repository",
            field="repository",
            found=repository,
            expected="'owner/repo' or 'https://github.com/owner/repo'",
        )
    return text


def release_signer(repository: str, tag: str, *, trust_config: str = "production") -> SignerIdentity:
    """The identity a tag-triggered run of this project's release workflow signs with."""
    repo = normalize_repository(repository)
    ref = f"refs/tags/{tag}"
    return SignerIdentity(
        identity=f"https://github.com/{repo}/{RELEASE_WORKFLOW}@{ref}",
        issuer=GITHUB_ACTIONS_ISSUER,
        repository=repo,
        ref=ref,
        trust_config=trust_config,
    )


def github_claims(identity: str) -> tuple[str | None, str | None]:
    """('owner/repo', 'refs/...') of a GitHub Actions workflow certificate identity, else (None, None)."""
    match = re.fullmatch(r"https://github\.com/([A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)/\.github/workflows/[^@/]+@(refs/\S+)", identity)
    return (match.group(1), match.group(2)) if match else (None, None)


def signer_from_manifest(manifest: dict[str, Any], *, file: str | os.PathLike[str] | None = None) -> SignerIdentity:
    """The expected signer a release tree declares, per docs/release-tree.md.

    `signing` {`certificate_identity`, `certificate_oidc_issuer`, optional
    `trust_config` (`production`/`staging`)}; the GitHub repository and ref the
    policy also checks are read from the identity.  A manifest without a
    `signing` block gets the release workflow of `product.repository` at the
    `release` tag.
    """
    block = manifest.get("signing")
    release = manifest.get("release")
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
    product = manifest.get("product") if isinstance(manifest.get("product"), dict) else {}
    repository = product.get("repository")
    if not isinstance(repository, str) or not isinstance(release, str):
        raise InputError(
            "declares no expected signer",
            file=file,
            field="signing",
            expected="a 'signing' block {certificate_identity, certificate_oidc_issuer, signed_files} or product.repository and release",
            fix="compose the release tree again; it writes the release workflow's identity",
        )
    return release_signer(repository, release)


def trust_config_path(spec: str | os.PathLike[str]) -> Path:
    if isinstance(spec, str) and spec in TRUST_CONFIGS:
        return TRUST_CONFIGS[spec]
    path = Path(spec)
    if not path.is_file():
        raise InputError(
            "Sigstore trust configuration does not exist",
            file=path,
            expected="'production', 'staging' or a ClientTrustConfig JSON file",
        )
    return path




def load_trust_config(spec: Any = "production"):
    """A `ClientTrustConfig` from a name (`production`/`staging`), a path, or one passed through."""
    from sigstore.models import ClientTrustConfig

    if isinstance(spec, ClientTrustConfig):
        return spec
    path = trust_config_path(spec)
    data = path.read_bytes()
    key = (str(path), sha256_bytes(data))
    if key not in current().trust_roots:
        try:
            current().trust_roots[key] = ClientTrustConfig.from_json(data.decode("utf-8"))
        except Exception as exc:  # sigstore raises several types for a bad document
            raise InputError(f"is not a Sigstore ClientTrustConfig: {exc}", file=path) from None
    return current().trust_roots[key]


# -- verification ----------------------------------------------------------------


@dataclass(frozen=True)
class Sha256Digest:
    """An artefact known only by its SHA-256 (verified by digest, never re-read)."""

    hexdigest: str

    def __post_init__(self) -> None:
        if not is_sha256_hex(self.hexdigest):
            raise ValueError(f"not a lowercase SHA-256: {self.hexdigest!r}")


@dataclass(frozen=True)
class VerifiedSignature:
    artifact: str
    sha256: str
    identity: str
    issuer: str
    log_index: int | None
    integrated_time: int | None

    def to_json(self) -> dict[str, Any]:
        return {
            "artifact": self.artifact,
            "sha256": self.sha256,
            "identity": self.identity,
            "issuer": self.issuer,
            "log_index": self.log_index,
            "integrated_time": self.integrated_time,
        }


class SignatureError(IntegrityError):
    """A Sigstore bundle that does not prove what it must; `reason` is the short cause."""

    label = "signature"

    def __init__(self, what: str, *, reason: str, **kwargs: Any) -> None:
        self.reason = reason
        super().__init__(what, **kwargs)


def _why(exc: Exception, trust: str) -> tuple[str, str]:
    """(why, fix) for a sigstore failure, in the words an auditor needs."""
    text = str(exc)
    kind = type(exc).__name__
    if "digest mismatch" in text:
        return (
            "the bundle signs other bytes than this file: the file was changed after it was signed, or the bundle belongs to another file",
            "download the file and its bundle again from the release; if it still fails, do not trust the file",
        )
    if kind == "CertValidationError" or "certificate chain" in text:
        return (
            f"the signing certificate does not chain to the pinned {trust} trust root: a bundle from another Sigstore instance (staging vs production) or a forged certificate",
            "verify against the trust configuration of the instance that signed it",
        )
    if "does not match" in text or "do not match" in text:
        return (
            "the signature was made by another identity than the release tree declares as its signer",
            "check that the release was signed by this project's release workflow at the release tag",
        )
    if kind in ("InvalidBundle", "IncompatibleEntry"):
        return ("the bundle is malformed or lacks required material (certificate, log entry)", "re-download the bundle; a bundle that stays malformed is not a signature")
    if "log entry" in text or "inclusion" in text or "transparency" in text:
        return (
            "the transparency-log evidence does not belong to this signature, or is missing",
            "do not trust the file; a signature without a valid log entry proves nothing",
        )
    return ("Sigstore verification failed", "check the bundle, the file and the expected signer")


def _read_bundle(bundle: Path | bytes | str) -> tuple[bytes, str]:
    if isinstance(bundle, bytes):
        return bundle, "bundle"
    path = Path(bundle)
    try:
        return path.read_bytes(), str(path)
    except FileNotFoundError:
        raise SignatureError(
            "Sigstore bundle is missing",
            reason=f"no bundle {path.name}",
            file=path,
            why="every signed file has its bundle beside it as <file>.sigstore.json",
            fix="run the release workflow's sign job, or download the bundle from the release",
        ) from None


def _certificate_identity(certificate) -> tuple[str, str]:
    from cryptography.x509 import (
        ObjectIdentifier,
        OtherName,
        RFC822Name,
        SubjectAlternativeName,
        UniformResourceIdentifier,
    )

    sans: list[str] = []
    try:
        ext = certificate.extensions.get_extension_for_class(SubjectAlternativeName).value
        sans += ext.get_values_for_type(UniformResourceIdentifier)
        sans += ext.get_values_for_type(RFC822Name)
        sans += [n.value.decode("utf-8", "replace") for n in ext.get_values_for_type(OtherName)]
    except Exception:  # a certificate without SAN cannot have passed the policy anyway
        pass
    issuer = ""
    for oid in ("1.3.6.1.4.1.57264.1.8", "1.3.6.1.4.1.57264.1.1"):
        try:
            raw = certificate.extensions.get_extension_for_oid(ObjectIdentifier(oid)).value.value
        except Exception:
            continue
        issuer = raw[2:].decode("utf-8", "replace") if oid.endswith(".8") and raw[:1] == b"\x0c" else raw.decode("utf-8", "replace")
        break
    return (sans[0] if sans else ""), issuer


def verify_bundle(
    artifact: str | os.PathLike[str] | bytes | Sha256Digest,
    bundle_path: str | os.PathLike[str] | bytes,
    *,
    identity: str,
    issuer: str,
    trust_config: Any = "production",
    repository: str | None = None,
    ref: str | None = None,
) -> VerifiedSignature:
    """Verify a Sigstore bundle offline; return what it proves or raise `SignatureError`.

    `artifact` is a file path, the file's bytes, or its `Sha256Digest`.  The
    policy is the certificate identity (SAN) and OIDC issuer, plus the GitHub
    workflow repository ('owner/repo') and ref ('refs/tags/v1') — given, or read
    from a GitHub Actions workflow identity.
    """
    from sigstore.errors import Error as SigstoreError
    from sigstore.hashes import Hashed
    from sigstore.models import Bundle
    from sigstore.verify import Verifier, policy
    from sigstore_models.common.v1 import HashAlgorithm

    if isinstance(artifact, Sha256Digest):
        name, digest = f"sha256:{artifact.hexdigest}", artifact.hexdigest
        material: Any = Hashed(algorithm=HashAlgorithm.SHA2_256, digest=bytes.fromhex(digest))
    elif isinstance(artifact, bytes):
        name, digest, material = "bytes", sha256_bytes(artifact), artifact
    else:
        path = Path(artifact)
        if not path.is_file():
            raise InputError("signed file does not exist", file=path)
        name, digest = str(path), sha256_file(path)
        material = Hashed(algorithm=HashAlgorithm.SHA2_256, digest=bytes.fromhex(digest))
    raw, bundle_name = _read_bundle(bundle_path if isinstance(bundle_path, bytes) else Path(bundle_path))
    trust_name = trust_config if isinstance(trust_config, str) else getattr(trust_config, "name", "pinned")
    trust = load_trust_config(trust_config)
    if repository is None and ref is None and issuer == GITHUB_ACTIONS_ISSUER:
        # A workflow identity names its repository and ref: check Fulcio's claims for them too.
        repository, ref = github_claims(identity)
    checks: list[Any] = [policy.Identity(identity=identity, issuer=issuer)]
    if repository:
        checks.append(policy.GitHubWorkflowRepository(normalize_repository(repository)))
    if ref:
        checks.append(policy.GitHubWorkflowRef(ref))
    try:
        bundle = Bundle.from_json(raw)
        verifier = Verifier(trusted_root=trust.trusted_root)
        verifier.verify_artifact(material, bundle, policy.AllOf(checks))
    except (SigstoreError, ValueError) as exc:
        reason = str(exc).strip() or type(exc).__name__
        why, fix = _why(exc, str(trust_name))
        raise SignatureError(
            f"Sigstore bundle does not verify: {reason}",
            reason=reason,
            file=bundle_name,
            field=None if name == "bytes" else f"signs {Path(name).name if not name.startswith('sha256:') else name}",
            why=why,
            fix=fix,
        ) from None
    san, cert_issuer = _certificate_identity(bundle.signing_certificate)
    entry = getattr(bundle.log_entry, "_inner", None)
    log_index = getattr(entry, "log_index", None)
    integrated = getattr(entry, "integrated_time", None)
    return VerifiedSignature(
        artifact=name,
        sha256=digest,
        identity=san or identity,
        issuer=cert_issuer or issuer,
        log_index=int(log_index) if log_index not in (None, "") else None,
        integrated_time=int(integrated) if integrated not in (None, "") else None,
    )


IN_TOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json"


def verify_dsse_bundle(
    statement: bytes,
    bundle_path: str | os.PathLike[str] | bytes,
    *,
    identity: str,
    issuer: str,
    trust_config: Any = "production",
    repository: str | None = None,
    ref: str | None = None,
    name: str = "statement",
) -> VerifiedSignature:
    """Verify a DSSE bundle offline: the signer's policy, the envelope signature, its log entry,
    and that the envelope carries exactly `statement` (an in-toto statement, byte for byte)."""
    from sigstore.errors import Error as SigstoreError
    from sigstore.models import Bundle
    from sigstore.verify import Verifier, policy

    raw, bundle_name = _read_bundle(bundle_path if isinstance(bundle_path, bytes) else Path(bundle_path))
    trust_name = trust_config if isinstance(trust_config, str) else getattr(trust_config, "name", "pinned")
    trust = load_trust_config(trust_config)
    if repository is None and ref is None and issuer == GITHUB_ACTIONS_ISSUER:
        repository, ref = github_claims(identity)
    checks: list[Any] = [policy.Identity(identity=identity, issuer=issuer)]
    if repository:
        checks.append(policy.GitHubWorkflowRepository(normalize_repository(repository)))
    if ref:
        checks.append(policy.GitHubWorkflowRef(ref))
    try:
        bundle = Bundle.from_json(raw)
        payload_type, payload = Verifier(trusted_root=trust.trusted_root).verify_dsse(bundle, policy.AllOf(checks))
    except (SigstoreError, ValueError) as exc:
        reason = str(exc).strip() or type(exc).__name__
        why, fix = _why(exc, str(trust_name))
        raise SignatureError(f"DSSE bundle does not verify: {reason}", reason=reason, file=bundle_name, field=f"signs {name}", why=why, fix=fix) from None
    if payload_type != IN_TOTO_PAYLOAD_TYPE:
        raise SignatureError("the DSSE envelope does not carry an in-toto statement", reason=f"payload type {payload_type!r}", file=bundle_name, found=payload_type, expected=IN_TOTO_PAYLOAD_TYPE)
    if payload != statement:
        raise SignatureError(
            "the DSSE envelope carries another statement than this file",
            reason="DSSE payload differs from the statement",
            file=bundle_name,
            field=f"signs {name}",
            found=f"payload sha256 {sha256_bytes(payload)}",
            expected=f"sha256 {sha256_bytes(statement)}",
            why="the statement was changed after it was signed, or the bundle belongs to another statement",
            fix="download the statement and its bundle again; if it still fails, do not trust the statement",
        )
    san, cert_issuer = _certificate_identity(bundle.signing_certificate)
    entry = getattr(bundle.log_entry, "_inner", None)
    log_index = getattr(entry, "log_index", None)
    integrated = getattr(entry, "integrated_time", None)
    return VerifiedSignature(
        artifact=name,
        sha256=sha256_bytes(statement),
        identity=san or identity,
        issuer=cert_issuer or issuer,
        log_index=int(log_index) if log_index not in (None, "") else None,
        integrated_time=int(integrated) if integrated not in (None, "") else None,
    )


def bundle_path_for(path: Path) -> Path:
    return path.with_name(path.name + BUNDLE_SUFFIX)


# -- signing ---------------------------------------------------------------------


@dataclass
class SigningTarget:
    """One distinct content to sign and every file that carries it (one bundle, many copies)."""

    sha256: str
    data: bytes
    files: list[Path] = field(default_factory=list)
    dsse: bool = False  # an in-toto statement: signed as a DSSE envelope, not as a blob

    @property
    def label(self) -> str:
        return self.files[0].name if len(self.files) == 1 else f"{self.files[0].name} (+{len(self.files) - 1} copies)"


def find_release_dir(manifests: Path, release: str | None) -> Path:
    if release is not None:
        if not _RELEASE.fullmatch(release):
            raise InputError("is not a release name", field="--release", found=release, expected="'vX.Y.Z', e.g. v0.13.1")
        directory = manifests / release
        if not (directory / MANIFEST_NAME).is_file():
            raise InputError("release tree has no manifest", file=directory / MANIFEST_NAME, fix="run compose for this release first")
        return _real_tree(directory, manifests)
    candidates = [p.parent for p in manifests.glob(f"v*/{MANIFEST_NAME}") if _RELEASE.fullmatch(p.parent.name)]
    if not candidates:
        raise InputError("no release tree found", file=manifests, expected=f"{manifests}/vX.Y.Z/{MANIFEST_NAME}", fix="pass --release, or run compose first")

    def key(path: Path) -> tuple:
        core, _, pre = path.name[1:].partition("-")
        return (tuple(int(part) for part in core.split(".")), pre == "", pre)

    return _real_tree(max(candidates, key=key), manifests)


def _real_tree(directory: Path, manifests: Path) -> Path:
    """A release tree is a real folder of manifests/: a linked one holds someone else's files, never signed."""
    if directory.is_symlink() or directory.resolve().parent != manifests.resolve():
        raise InputError(
            "the release tree is a symbolic link",
            file=directory,
            found=str(directory.resolve()),
            expected=f"a real folder {directory.name}/ under {manifests}",
            why="the workflow signs the files the repository holds; a linked tree is someone else's",
            fix=f"replace the link with the tree itself (git checkout -- {directory.name})",
        )
    return directory


def signed_files(manifest: dict[str, Any], release_dir: Path, *, file: Path) -> list[Path]:
    """The files `signing.signed_files` names (repository-relative), each inside the release tree."""
    block = manifest.get("signing") if isinstance(manifest.get("signing"), dict) else {}
    listed = block.get("signed_files")
    if listed is None:  # a tree without the list: the manifest and the checked-in outer sums
        return [release_dir / MANIFEST_NAME, *sorted(p for p in release_dir.rglob(f"*{OUTER_SUMS_SUFFIX}") if p.is_file())]
    if not isinstance(listed, list) or not all(isinstance(item, str) for item in listed):
        raise InputError("must be a list of repository-relative paths", file=file, field="signing.signed_files", found=listed)
    root = release_dir.resolve().parents[1]
    tree = release_dir.resolve()
    paths = []
    for index, relative in enumerate(listed):
        safe_relpath(relative, file=file, field=f"signing.signed_files[{index}]")
        path = (root / relative).resolve()
        if tree not in path.parents and path != tree:
            raise InputError("names a file outside the release tree", file=file, field=f"signing.signed_files[{index}]", found=relative, expected=f"a path under {release_dir.as_posix()}/")
        if not path.is_file():
            raise InputError("names a file that does not exist", file=file, field=f"signing.signed_files[{index}]", found=relative, fix="compose the release tree again")
        paths.append(path)
    if (release_dir / MANIFEST_NAME).resolve() not in paths:
        raise InputError("does not list the manifest itself", file=file, field="signing.signed_files", found=listed, expected=f"{release_dir.as_posix()}/{MANIFEST_NAME} among them")
    return paths


def collect_targets(release_dir: Path, dist: Path | None, manifest: dict[str, Any] | None = None) -> list[SigningTarget]:
    """The release tree's signed files, one target per content; identical outer SHA256SUMS under dist join their target."""
    manifest_file = release_dir / MANIFEST_NAME
    if manifest is None:
        manifest = read_json_object(manifest_file)
    targets: dict[str, SigningTarget] = {}
    for path in signed_files(manifest, release_dir, file=manifest_file):
        data = path.read_bytes()
        digest = sha256_bytes(data)
        target = targets.setdefault(digest, SigningTarget(digest, data))
        if path not in target.files:
            target.files.append(path)
    if dist is not None and (dist / "register.json").is_file():
        from pipeline.register import Register

        register = Register(dist)
        for artifact in register.query("outer-checksums"):
            path = register.verified_path(artifact).resolve()
            target = targets.get(artifact.sha256)
            if target is None:
                # Only what the release tree lists is signed: a set the release does not ship stays unsigned.
                ui.warn(f"{path}: not among the release tree's signed files (a lane this release does not ship); not signed")
                continue
            if path not in target.files:
                target.files.append(path)  # the same bytes: the bundle is copied beside it for upload
        shipped_image = dig_manifest_digest(manifest)
        for artifact in register.query("provenance"):
            path = register.verified_path(artifact).resolve()
            target = statement_target(path, targets, shipped_image)
            if target is None:
                ui.warn(f"{path}: the statement describes a set or image this release does not ship; not signed")
                continue
            targets.setdefault(f"dsse:{target.sha256}", target)
    return list(targets.values())


def dig_manifest_digest(manifest: dict[str, Any]) -> str | None:
    """The container lane's image manifest digest a release binds (components.ninfer.oci_manifest_digest)."""
    components = manifest.get("components") if isinstance(manifest.get("components"), dict) else {}
    row = components.get("ninfer") if isinstance(components.get("ninfer"), dict) else {}
    digest = row.get("oci_manifest_digest")
    return digest.removeprefix("sha256:") if isinstance(digest, str) else None


def statement_target(path: Path, targets: dict[str, SigningTarget], shipped_image: str | None) -> SigningTarget | None:
    """A provenance statement to sign as DSSE, when its set's outer SHA256SUMS (or its image) is what the release ships."""
    from pipeline.formats.provenance import read_statement

    data = path.read_bytes()
    statement = read_statement(data, origin=str(path))
    sums = statement.subjects.get(OUTER_SUMS_SUFFIX)
    shipped = (sums is not None and sums in targets) or (shipped_image is not None and shipped_image in statement.subjects.values())
    return SigningTarget(sha256_bytes(data), data, [path], dsse=True) if shipped else None


def refuse_outside_ci(environ: dict[str, str] | os._Environ = os.environ) -> None:
    if environ.get("GITHUB_ACTIONS") != "true":
        raise RefusedError(
            "sign runs only in the release workflow on GitHub Actions",
            why="keyless Sigstore signing binds the signature to the release workflow's OIDC identity, which exists only inside that job; "
            "a release is never published unsigned, and a signature made anywhere else would not match the release tree's expected signer",
            fix="push the release tag (or dispatch .github/workflows/release.yml on it); to see what would be signed, run 'python -m pipeline sign --dry-run'",
        )
    if not environ.get("ACTIONS_ID_TOKEN_REQUEST_URL") or not environ.get("ACTIONS_ID_TOKEN_REQUEST_TOKEN"):
        raise RefusedError(
            "this GitHub Actions job cannot request an OIDC identity token",
            why="the job lacks 'permissions: id-token: write' (or runs for a pull request from a fork, which never gets one)",
            fix="give only the signing job 'permissions: {id-token: write, contents: read}'",
        )


def ambient_identity_token():
    """The job's OIDC token for audience 'sigstore', as a sigstore IdentityToken."""
    from sigstore.oidc import IdentityError, IdentityToken, detect_credential

    try:
        raw = detect_credential()
    except IdentityError as exc:
        raise RefusedError(f"ambient OIDC credential detection failed: {exc}", fix="give the signing job 'permissions: id-token: write'") from None
    if not raw:
        raise RefusedError("no ambient OIDC credential was found", fix="run sign in the release workflow's signing job, which has 'id-token: write'")
    register_secret(raw)
    try:
        return IdentityToken(raw)
    except IdentityError as exc:
        raise RefusedError(f"the ambient OIDC token is unusable: {exc}") from None


def _token_identity(token) -> str:
    """The certificate SAN Fulcio will issue for this token.

    For GitHub Actions that is `https://github.com/<job_workflow_ref>` (the
    token's `sub` is `repo:<owner>/<repo>:ref:<ref>`, not the SAN).  The claims
    are read without a signature check: this only refuses early; the offline
    verification of the written bundle is what decides.
    """
    claims: dict[str, Any] = {}
    try:
        payload = str(token).split(".")[1]
        claims = loads_object(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)), source="the OIDC token's claims", max_bytes=64 * 1024)
    except (IndexError, ValueError, TypeError, InputError):
        claims = {}
    if claims.get("iss") == GITHUB_ACTIONS_ISSUER and isinstance(claims.get("job_workflow_ref"), str):
        return f"https://github.com/{claims['job_workflow_ref']}"
    return str(getattr(token, "identity", "") or "")


def _write_bundle(target: SigningTarget, bundle_json: bytes) -> list[Path]:
    written = []
    for path in target.files:
        out = bundle_path_for(path)
        atomic_write_bytes(out, bundle_json)
        written.append(out)
    return written


@dataclass
class SignReport:
    signer: SignerIdentity
    signed: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    verified: list[dict[str, Any]] = field(default_factory=list)
    bundles: list[Path] = field(default_factory=list)


def sign_targets(
    targets: Iterable[SigningTarget],
    signer: SignerIdentity,
    *,
    context_factory: Callable[[Any], Any] | None = None,
    token_provider: Callable[[], Any] | None = None,
    overwrite: bool = False,
) -> SignReport:
    """Sign every target without a valid bundle, then verify every bundle against `signer`.

    `context_factory(trust_config)` returns an object with sigstore's
    `SigningContext.signer(token, cache=True)` interface (default:
    `SigningContext.from_trust_config`); `token_provider()` returns the identity
    token (default: the ambient GitHub Actions credential).
    """
    targets = list(targets)
    report = SignReport(signer)
    trust = load_trust_config(signer.trust_config)

    def check(target: SigningTarget, bundle_file: Path) -> VerifiedSignature:
        if target.dsse:
            return verify_dsse_bundle(
                target.data,
                bundle_file,
                identity=signer.identity,
                issuer=signer.issuer,
                trust_config=trust,
                repository=signer.repository,
                ref=signer.ref,
                name=target.files[0].name,
            )
        return verify_bundle(
            Sha256Digest(target.sha256),
            bundle_file,
            identity=signer.identity,
            issuer=signer.issuer,
            trust_config=trust,
            repository=signer.repository,
            ref=signer.ref,
        )

    pending: list[SigningTarget] = []
    for target in targets:
        existing = [bundle_path_for(p) for p in target.files if bundle_path_for(p).exists()]
        valid = None
        for bundle_file in existing:
            try:
                check(target, bundle_file)
                valid = bundle_file
                break
            except SignatureError as error:
                if not overwrite:
                    raise RefusedError(
                        f"an existing bundle does not verify: {error.reason}",
                        file=bundle_file,
                        why="sign keeps valid bundles and refuses to replace invalid ones silently",
                        fix="inspect it, then re-run with --overwrite to replace it",
                    ) from None
        if valid is not None:
            bundle_json = valid.read_bytes()
            report.bundles += _write_bundle(target, bundle_json)
            report.kept.append(target.label)
        else:
            pending.append(target)

    if pending:
        if token_provider is None:
            token_provider = ambient_identity_token
        if context_factory is None:
            from sigstore.sign import SigningContext

            context_factory = SigningContext.from_trust_config
        token = token_provider()
        actual = _token_identity(token)
        if actual and actual != signer.identity:
            raise RefusedError(
                "the workflow's identity is not the release tree's expected signer",
                found=actual,
                expected=signer.identity,
                why="the signature would name another workflow or ref than auditors are told to trust (a branch run, a renamed workflow, or the wrong tag)",
                fix="run the release workflow on the release tag, or compose the release tree for this tag",
            )
        context = context_factory(trust)
        with context.signer(token, cache=True) as handle:
            for target in pending:
                ui.info(f"signing {target.label} (sha256 {target.sha256[:12]}{', DSSE' if target.dsse else ''}) as {signer.identity}")
                if target.dsse:
                    from sigstore.dsse import Statement

                    bundle = handle.sign_dsse(Statement(target.data))  # the envelope carries these exact bytes
                else:
                    bundle = handle.sign_artifact(target.data)
                text = bundle.to_json()
                report.bundles += _write_bundle(target, text.encode("utf-8") if isinstance(text, str) else text)
                report.signed.append(target.label)

    for target in targets:
        bundle_file = bundle_path_for(target.files[0])
        try:
            verified = check(target, bundle_file)
        except SignatureError as error:
            for path in target.files:  # never leave a bundle that does not verify
                bundle_path_for(path).unlink(missing_ok=True)
            raise SignatureError(
                f"the bundle just written for {target.label} does not verify against the expected signer",
                reason=error.reason,
                file=bundle_file,
                why=error.why,
                fix="check the pinned trust configuration (pipeline/data/sigstore/README.md) and the expected signer in the release tree",
            ) from None
        report.verified.append({**verified.to_json(), "files": [str(p) for p in target.files]})
    return report


# -- command line ----------------------------------------------------------------


def _register_bundles(dist: Path, report: SignReport) -> None:
    if not (dist / "register.json").is_file():
        return
    from pipeline.register import Register

    register = Register(dist)
    outputs = []
    root = dist.resolve()
    for path in report.bundles:
        try:
            path.resolve().relative_to(root)
        except ValueError:
            continue
        outputs.append(register.make("signature-bundle", path, stage="sign", lane=None, signed_name=path.name.removesuffix(BUNDLE_SUFFIX)))
    if outputs:
        register.record_stage("sign", sha256_bytes(json.dumps(sorted(a.sha256 for a in outputs)).encode()), outputs)


def run_sign(args: argparse.Namespace) -> int:
    if not args.dry_run:
        refuse_outside_ci()
    release_dir = find_release_dir(args.manifests, args.release)
    manifest_file = release_dir / MANIFEST_NAME
    manifest = read_json_object(manifest_file)
    signer = signer_from_manifest(manifest, file=manifest_file)
    if args.trust_config:
        signer = SignerIdentity(signer.identity, signer.issuer, signer.repository, signer.ref, args.trust_config)
    targets = collect_targets(release_dir, args.dist, manifest)
    ui.step("sign", f"{release_dir.name}: {len(targets)} distinct files, expected signer {signer.describe()}")
    if args.dry_run:
        plan = {
            "release": release_dir.name,
            "signer": signer.to_json(),
            "targets": [{"sha256": t.sha256, "dsse": t.dsse, "files": [str(p) for p in t.files], "bundle": [str(bundle_path_for(p)) for p in t.files]} for t in targets],
        }
        print(json.dumps(plan, indent=2, sort_keys=True))
        return 0
    try:
        import sigstore  # noqa: F401
    except ImportError:  # pragma: no cover - the dependency is in pyproject
        raise EnvironmentProblem("the sigstore library is not installed", fix="pip install 'sigstore>=4.5,<5'") from None
    report = sign_targets(targets, signer, overwrite=args.overwrite)
    _register_bundles(args.dist, report)
    for entry in report.verified:
        for name in entry["files"]:
            print(f"OK: {name}: signed by {entry['identity']} (log index {entry['log_index']})")
    ui.step("sign", f"{len(report.signed)} signed, {len(report.kept)} already signed and verified, {len(report.bundles)} bundles")
    return 0


def register_cli(sub) -> None:
    parser = sub.add_parser(
        "sign",
        help="keyless Sigstore signing of the release manifest and outer SHA256SUMS (GitHub Actions only)",
        description=(
            "Sign the release manifest and every asset set's outer SHA256SUMS with the release workflow's "
            "ambient OIDC identity (Sigstore keyless), writing <file>.sigstore.json beside each, then verify every "
            "bundle offline against the release tree's expected signer. Refuses outside GitHub Actions (exit 7)."
        ),
    )
    parser.add_argument("--release", default=None, help="release to sign (default: the newest tree under --manifests)")
    parser.add_argument("--manifests", type=Path, default=DEFAULT_MANIFESTS, help="folder of release trees (default: manifests)")
    parser.add_argument("--dist", type=Path, default=Path("dist"), help="output folder whose register lists the asset sets (default: dist)")
    parser.add_argument("--trust-config", default=None, help="'production' (default), 'staging' or a ClientTrustConfig file")
    parser.add_argument("--overwrite", action="store_true", help="replace existing bundles that do not verify")
    parser.add_argument("--dry-run", action="store_true", help="print what would be signed and the expected signer; sign nothing (works anywhere)")
    parser.add_argument("--quiet", action="store_true", help="print only errors and results")
    parser.set_defaults(func=run_sign)


__all__ = [
    "BUNDLE_SUFFIX",
    "GITHUB_ACTIONS_ISSUER",
    "TRUST_CONFIGS",
    "SignatureError",
    "SignerIdentity",
    "Sha256Digest",
    "VerifiedSignature",
    "bundle_path_for",
    "load_trust_config",
    "release_signer",
    "sign_targets",
    "signer_from_manifest",
    "verify_bundle",
    "verify_dsse_bundle",
]
