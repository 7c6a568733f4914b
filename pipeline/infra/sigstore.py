"""Sigstore verification: offline, against pinned trust roots (used by verify, audit, publish and sign).

`verify_bundle` is the one verification routine: a bundle is checked offline
against a pinned trust configuration vendored under `pipeline/data/sigstore/`
(no TUF refresh), for a file, its bytes, or only its SHA-256
(`Sha256Digest`, so `audit` can check a signature of a multi-GiB file it
hashed while downloading).  The policy is the certificate identity (SAN) and
OIDC issuer, plus, for a GitHub Actions workflow identity, the workflow's
repository and ref.  It returns what was verified or raises `SignatureError`
naming the reason in an auditor's words.

Parsed trust roots are cached in the run context
(`pipeline.runcontext.current().trust_roots`), keyed by file and content
hash, so one run parses each root once and no run inherits another's.
The sigstore library is imported only when a bundle is verified.

The test seam: `PIPELINE_TEST_SIGSTORE=<folder>` names a folder written by the
test kit `tests/kits/sigstore_standin.py` (a local CA, CT log and Rekor whose
bundles the real verifier accepts).  `test_standin()` resolves it (refused
unless the process that wrote the folder started this one; the folder's files are hashed before
anything is parsed, and a trust configuration that is, or shares keys with,
the pinned production or staging one is refused); `effective_trust_config(name)`
is the kit's trust configuration under the seam and `name` otherwise.  The
`sign` stage signs with the kit under the seam; every other stage that verifies
bundles against an expected signer's trust configuration calls
`effective_trust_config` too.  The kit module is loaded (by path, from this
checkout's tests/kits/) only under the seam.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.errors import EnvironmentProblem, InputError, IntegrityError, RefusedError
from pipeline.runcontext import current
from pipeline.util.hashing import is_sha256_hex, sha256_bytes, sha256_file

# Sigstore's own names, spelled once here: the release tree (formats/release/names.py), the provenance statements and
# GitHub's attestations take them from this module.
BUNDLE_SUFFIX = ".sigstore.json"  # a bundle lies beside what it signs, under the signed file's name plus this
OIDC_ISSUER = "https://token.actions.githubusercontent.com"  # GitHub Actions' token issuer: the release workflow's identity
IN_TOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json"  # a DSSE envelope's payload type for an in-toto statement

TRUST_CONFIG_DIR = Path(__file__).resolve().parents[1] / "data" / "sigstore"
TRUST_CONFIGS = {
    "production": TRUST_CONFIG_DIR / "production-trust-config.json",
    "staging": TRUST_CONFIG_DIR / "staging-trust-config.json",
}

_REPOSITORY = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")


# -- identities --------------------------------------------------------------------


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


def github_claims(identity: str) -> tuple[str | None, str | None]:
    """('owner/repo', 'refs/...') of a GitHub Actions workflow certificate identity, else (None, None)."""
    match = re.fullmatch(r"https://github\.com/([A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)/\.github/workflows/[^@/]+@(refs/\S+)", identity)
    return (match.group(1), match.group(2)) if match else (None, None)


# -- trust roots -----------------------------------------------------------------


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


# -- the test stand-in (PIPELINE_TEST_SIGSTORE) -----------------------------------

TEST_STANDIN_ENV = "PIPELINE_TEST_SIGSTORE"
STANDIN_DESCRIPTION = "standin.json"
STANDIN_TYPE = "omp_ninfer_sigstore_standin"
STANDIN_SCHEMA_VERSION = 2  # 2: the owner process (`owner`), without which the seam is refused
STANDIN_KIT = Path(__file__).resolve().parents[2] / "tests" / "kits" / "sigstore_standin.py"
_STANDIN_MAX_FILE = 1024 * 1024


@dataclass(frozen=True)
class StandInKit:
    """A validated stand-in folder: its trust configuration, the identity its job signs as, and the kit."""

    directory: Path
    trust_config: Path
    identity: str | None
    issuer: str
    description: dict[str, Any]

    def warning(self) -> str:
        return (
            f"TEST STAND-IN SIGSTORE ({TEST_STANDIN_ENV}={self.directory}): signing and verifying with a local test CA and "
            "transparency log, NOT the public-good Sigstore instance; these signatures prove nothing outside this test"
        )

    def warn(self) -> None:
        """The loud line every use under the seam prints (not silenced by --quiet)."""
        import sys

        sys.stderr.write(f"WARNING: {self.warning()}\n")
        sys.stderr.flush()

    def kit(self):
        """The kit's `SigstoreStandIn` for this folder (the module loaded lazily from tests/kits/)."""
        return _kit_module().SigstoreStandIn.load(self.directory)

    def context_factory(self, trust: Any = None):
        """`sign_targets`' `context_factory(trust)`: the kit's `SigningContext` stand-in."""
        return self.kit().context_factory(trust)

    def token_provider(self, identity: str):
        """`sign_targets`' `token_provider()`: a token for the description's identity, else for `identity`."""
        return self.kit().token_provider(self.identity or identity)


def _kit_module():
    import importlib.util
    import sys

    loaded = sys.modules.get("sigstore_standin")
    if loaded is not None and Path(getattr(loaded, "__file__", "") or "").resolve() == STANDIN_KIT:
        return loaded
    if not STANDIN_KIT.is_file():
        raise EnvironmentProblem(
            "the Sigstore test stand-in kit is not in this checkout",
            file=STANDIN_KIT,
            why=f"{TEST_STANDIN_ENV} works only from a source checkout that has tests/kits/",
            fix=f"unset {TEST_STANDIN_ENV}",
        )
    spec = importlib.util.spec_from_file_location("sigstore_standin", STANDIN_KIT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["sigstore_standin"] = module
    spec.loader.exec_module(module)
    return module


def _pinned_material() -> set[str]:
    """Every key id, public key and CA certificate of the pinned production and staging trust configurations."""
    from pipeline.util.jsonio import loads_object

    found: set[str] = set()
    for path in TRUST_CONFIGS.values():
        found |= _trust_material(loads_object(path.read_bytes(), source=path))
    return found


def _trust_material(document: dict[str, Any]) -> set[str]:
    root = document.get("trustedRoot") if isinstance(document.get("trustedRoot"), dict) else {}
    found: set[str] = set()
    for group in ("tlogs", "ctlogs"):
        for log in root.get(group) or []:
            if isinstance(log, dict):
                found.add(str((log.get("logId") or {}).get("keyId")))
                found.add(str((log.get("publicKey") or {}).get("rawBytes")))
    for group in ("certificateAuthorities", "timestampAuthorities"):
        for authority in root.get(group) or []:
            if isinstance(authority, dict):
                for cert in (authority.get("certChain") or {}).get("certificates") or []:
                    if isinstance(cert, dict):
                        found.add(str(cert.get("rawBytes")))
    found.discard("None")
    return found


def _require_owner_lineage(description: dict[str, Any], description_file: Path) -> None:
    """Refuse a stand-in whose owner process did not start this one.

    The kit records the process that writes the folder (`util.proc.process_stamp`); the seam accepts the folder
    only in that process and the processes it starts, directly or not: a pytest worker and its subprocesses,
    a rehearsal driver and the Actions runner it starts.  An environment variable alone (a workflow step's
    `env:`, an inherited shell, `PYTEST_CURRENT_TEST`) can never switch the seam on; where /proc cannot name
    processes (not Linux) the seam is always refused."""
    from pipeline.util.proc import is_ancestor_or_self

    owner = description.get("owner")
    if not is_ancestor_or_self(owner):
        raise RefusedError(
            f"{TEST_STANDIN_ENV} names a Sigstore test stand-in that this process's own test run did not make",
            file=description_file,
            field="owner",
            found=owner if isinstance(owner, dict) else repr(owner)[:80],
            expected="the process that wrote the stand-in (a test run or a rehearsal), or one it started",
            why=(
                "the stand-in signs with a local test CA; it is accepted only inside the process tree that made it, so no "
                "environment (a workflow step's env:, an inherited shell) can make sign or publish trust it"
            ),
            fix=f"unset {TEST_STANDIN_ENV}",
        )


def test_standin(environ: Any = None) -> StandInKit | None:
    """The Sigstore test stand-in `PIPELINE_TEST_SIGSTORE` names, validated; None when it is not set.

    Refused (RefusedError, exit 7) unless the folder's owner process (`owner`) is this
    process or one that started it: the test run or rehearsal that wrote it, never an
    environment variable alone.  The folder's `standin.json` is read strictly; every file it lists
    is hashed against it before anything else is parsed; its trust
    configuration must be a ClientTrustConfig that is neither the pinned
    production nor staging file and shares no key or certificate with them.
    """
    from pipeline.util.fs import read_bytes_bounded
    from pipeline.util.jsonio import expect_document_type, loads_object
    from pipeline.util.safepath import safe_component

    env = os.environ if environ is None else environ
    value = env.get(TEST_STANDIN_ENV)
    if not value:
        return None
    directory = Path(value).resolve()
    description_file = directory / STANDIN_DESCRIPTION
    if not directory.is_dir() or not description_file.is_file():
        raise InputError("is not a Sigstore test stand-in folder", file=directory, field=TEST_STANDIN_ENV, expected=f"a folder with {STANDIN_DESCRIPTION}, written by tests/kits/sigstore_standin.py")
    description = loads_object(read_bytes_bounded(description_file, 64 * 1024, what="stand-in description"), source=description_file, strict_bytes=True)
    expect_document_type(description, STANDIN_TYPE, STANDIN_SCHEMA_VERSION, source=description_file, what="a Sigstore test stand-in description")
    _require_owner_lineage(description, description_file)
    files = description.get("files")
    trust_name = description.get("trust_config")
    if not isinstance(files, dict) or not files or not isinstance(trust_name, str) or trust_name not in files:
        raise InputError("lacks its file list or trust configuration", file=description_file, field="files", expected="files {name: sha256} naming trust_config")
    data: dict[str, bytes] = {}
    for name, digest in files.items():
        safe_component(name, file=description_file, field=f"files.{name}")
        path = directory / name
        if path.is_symlink() or not path.is_file():
            raise InputError("names a file the stand-in folder lacks (or a link)", file=path, field=f"files.{name}")
        raw = read_bytes_bounded(path, _STANDIN_MAX_FILE, what="stand-in file")
        if not isinstance(digest, str) or sha256_bytes(raw) != digest:
            raise IntegrityError("differs from the stand-in's description", file=path, found=sha256_bytes(raw), expected=digest, fix="write the kit again (SigstoreStandIn(folder).write())")
        data[name] = raw
    trust_bytes = data[trust_name]
    trust_file = directory / trust_name
    if description.get("trust_config_sha256") not in (None, sha256_bytes(trust_bytes)):
        raise IntegrityError("differs from the stand-in's description", file=trust_file, field="trust_config_sha256")
    pinned = {sha256_file(path) for path in TRUST_CONFIGS.values()}
    document = loads_object(trust_bytes, source=trust_file)
    shared = _trust_material(document) & _pinned_material()
    if sha256_bytes(trust_bytes) in pinned or shared:
        raise RefusedError(
            "the stand-in's trust configuration is (or shares keys with) a pinned public Sigstore one",
            file=trust_file,
            why="under the test seam every signature is checked against the stand-in's own test roots; a public root there would let test material pass for real",
            fix="write the kit again (SigstoreStandIn(folder).write())",
        )
    if document.get("mediaType") != "application/vnd.dev.sigstore.clienttrustconfig.v0.1+json":
        raise InputError("is not a Sigstore ClientTrustConfig", file=trust_file, field="mediaType", found=document.get("mediaType"))
    identity = description.get("identity")
    issuer = description.get("issuer") or OIDC_ISSUER
    if identity is not None and not isinstance(identity, str):
        raise InputError("must be a certificate identity or null", file=description_file, field="identity", found=identity)
    return StandInKit(directory, trust_file, identity, str(issuer), description)


test_standin.__test__ = False  # type: ignore[attr-defined]  # a pytest that imports this name must not collect it


def effective_trust_config(name: Any, environ: Any = None) -> Any:
    """The trust configuration to verify an expected signer with: the stand-in's under the seam, else `name`."""
    standin = test_standin(environ)
    return str(standin.trust_config) if standin is not None else name


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
    from sigstore.verify import Verifier
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
    checks = _signer_policy(identity, issuer, repository, ref)
    try:
        bundle = Bundle.from_json(raw)
        verifier = Verifier(trusted_root=trust.trusted_root)
        verifier.verify_artifact(material, bundle, checks)
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
    return _verified(bundle, name, digest, identity, issuer)


def _signer_policy(identity: str, issuer: str, repository: str | None, ref: str | None):
    """The verification policy for one expected signer: identity and issuer, plus the GitHub claims."""
    from sigstore.verify import policy

    if repository is None and ref is None and issuer == OIDC_ISSUER:
        # A workflow identity names its repository and ref: check Fulcio's claims for them too.
        repository, ref = github_claims(identity)
    checks: list[Any] = [policy.Identity(identity=identity, issuer=issuer)]
    if repository:
        checks.append(policy.GitHubWorkflowRepository(normalize_repository(repository)))
    if ref:
        checks.append(policy.GitHubWorkflowRef(ref))
    return policy.AllOf(checks)


def _verified(bundle, name: str, digest: str, identity: str, issuer: str) -> VerifiedSignature:
    """What a verified bundle says: the certificate's signer and its transparency-log entry."""
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


def bundle_path_for(path: Path) -> Path:
    return path.with_name(path.name + BUNDLE_SUFFIX)




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
    from sigstore.verify import Verifier

    raw, bundle_name = _read_bundle(bundle_path if isinstance(bundle_path, bytes) else Path(bundle_path))
    trust_name = trust_config if isinstance(trust_config, str) else getattr(trust_config, "name", "pinned")
    trust = load_trust_config(trust_config)
    checks = _signer_policy(identity, issuer, repository, ref)
    try:
        bundle = Bundle.from_json(raw)
        payload_type, payload = Verifier(trusted_root=trust.trusted_root).verify_dsse(bundle, checks)
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
    return _verified(bundle, name, sha256_bytes(statement), identity, issuer)
