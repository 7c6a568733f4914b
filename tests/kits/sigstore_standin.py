"""A local Sigstore stand-in: Fulcio, a CT log and Rekor on disk, for tests without network.

`SigstoreStandIn(folder).write()` makes, in `folder` (fixed file names, keys
random per instance):

| file | what |
| --- | --- |
| `fulcio-root.pem`, `fulcio-root.key.pem` | the CA root (ECDSA P-384, self-signed), like Fulcio's |
| `fulcio-intermediate.pem`, `fulcio-intermediate.key.pem` | the issuing intermediate (P-384), like `sigstore-intermediate` |
| `ctlog.key.pem` | the CT log key (ECDSA P-256); its log id is SHA-256 of its DER SubjectPublicKeyInfo |
| `rekor.key.pem` | the Rekor transparency-log key (ECDSA P-256, as rekor.sigstore.dev); log id likewise |
| `trust-config.json` | ONE `ClientTrustConfig` (`application/vnd.dev.sigstore.clienttrustconfig.v0.1+json`): the trusted root naming the CA chain, the CT log and Rekor with validity windows, and a signing config with loopback URLs (never contacted); Rekor's base URL is `https://rekor.standin.test` (a reserved name, never resolved), whose host is the checkpoint's signer name, as for rekor.sigstore.dev |
| `rekor-log.json` | the log's state: the RFC 6962 leaf hashes of every entry (a few filler entries first, so proofs have hashes) |
| `standin.json` | the description the pipeline's seam reads (`pipeline.infra.sigstore.test_standin`): artifact_type `omp_ninfer_sigstore_standin`, schema 2, `trust_config`, `files` {name: sha256} of every file above except the log state, `log_ids`, `identity`/`issuer` the stand-in's job signs as (optional), `rekor_log`, `owner` (the writing process: the seam accepts the folder only there and in the processes it starts) |

Signing does what Fulcio and Rekor v1 do, with nothing relaxed on the verifying
side (the REAL `sigstore.verify.Verifier` checks every piece):

* a short-lived (10 minute) leaf certificate for an ephemeral P-256 key: no
  subject, critical SAN URI = the identity, KeyUsage digitalSignature (critical),
  EKU codeSigning, SKI/AKI, Fulcio's OID extensions (1.3.6.1.4.1.57264.1.1 raw
  issuer, .1.8 DER UTF8String issuer, the GitHub workflow claims .1.2-.1.6 raw
  and .1.9-.1.22 DER) read from the token's claims, and ONE embedded SCT
  (1.3.6.1.4.1.11129.2.4.2).  The SCT is RFC 6962 §3.2's precert_entry: the CT
  key signs `digitally-signed(version, certificate_timestamp, timestamp,
  precert_entry, issuer_key_hash, TBSCertificate)`, where the TBSCertificate is
  the final certificate's TBS without the SCT-list extension (what a
  precertificate's TBS is once its poison extension is removed; cryptography's
  `tbs_precertificate_bytes` computes it, as the verifier does).  The kit
  issues the certificate twice with the same serial, times and extensions (a
  placeholder SCT list, then the real one) and checks that the TBS the SCT
  signs is byte for byte the final certificate's.  No separate poisoned
  precertificate is issued: the verifier never sees one.
* a hashedrekord v0.0.1 entry (artifact bytes) or a dsse v0.0.1 entry (an
  in-toto statement in a DSSE envelope, payload type
  `application/vnd.in-toto+json`): sigstore 4.x verifies DSSE bundles with a
  `dsse` 0.0.1 (Rekor v1) or `hashedrekord` 0.0.2 (Rekor v2) entry, and accepts
  the integrated time as a verified time only for dsse/hashedrekord 0.0.1, so
  this stand-in is a Rekor v1 log.  The canonicalized body is Rekor's
  (sorted keys, compact JSON): hashedrekord {data.hash, signature.content,
  signature.publicKey.content = base64 PEM certificate}; dsse {envelopeHash,
  payloadHash, signatures [{signature, verifier = base64 PEM certificate}]}.
* the entry's inclusion promise (SET): the Rekor key's signature over the RFC
  8785 JSON {body, integratedTime, logID, logIndex}; its inclusion proof: an
  RFC 6962 audit path in a real Merkle tree over the log's entries, the root
  hash and tree size, and a signed checkpoint in Rekor's signed-note format
  (`<origin>\\n<size>\\n<base64 root>\\n\\n— <name> base64(keyhint[4] || sig)\\n`), where
  origin is `<name> - <tree id>` and name is the host of the log's `baseUrl` in the trusted root, as
  Rekor derives it (sigstore-js refuses a checkpoint whose signer name the log's base URL does not match).
* a Sigstore bundle v0.3 JSON (`application/vnd.dev.sigstore.bundle.v0.3+json`).

What is NOT like the live services (none of it is checked by a verifier):
the "Fulcio" here does not verify the OIDC token's signature (there is no
OIDC provider offline: `token()` makes an unsigned JWT, `alg: none`, with the
GitHub Actions claims); there is no timestamp authority (the tlog's
integrated time is the verified time, as for every Rekor v1 bundle); the CT
log keeps no entries of its own.  Every piece the verifier checks is real:
nothing in sigstore-python is patched or weakened.

`SigstoreStandIn.load(folder)` reopens a folder written before (another
process: the `sign` stage under `PIPELINE_TEST_SIGSTORE`).  The object has the
interface `pipeline/stages/sign.py: sign_targets` expects: `context_factory`
(`kit.context_factory(trust)` -> `.signer(token, cache=True)` context manager
whose handle has `sign_artifact(bytes)` and `sign_dsse(Statement)`, returning
bundles with `.to_json()`) and `token_provider(identity)`.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import hashlib
import json
import os
import struct
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from pipeline.infra.sigstore import STANDIN_SCHEMA_VERSION as SCHEMA_VERSION
from pipeline.util.proc import process_stamp

STANDIN_TYPE = "omp_ninfer_sigstore_standin"
DESCRIPTION = "standin.json"
TRUST_CONFIG = "trust-config.json"
REKOR_LOG = "rekor-log.json"
KEY_FILES = {
    "root": ("fulcio-root.pem", "fulcio-root.key.pem"),
    "intermediate": ("fulcio-intermediate.pem", "fulcio-intermediate.key.pem"),
}
CTLOG_KEY = "ctlog.key.pem"
REKOR_KEY = "rekor.key.pem"

GITHUB_ISSUER = "https://token.actions.githubusercontent.com"
IN_TOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json"
BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
TRUST_CONFIG_MEDIA_TYPE = "application/vnd.dev.sigstore.clienttrustconfig.v0.1+json"
TRUSTED_ROOT_MEDIA_TYPE = "application/vnd.dev.sigstore.trustedroot+json;version=0.1"
SIGNING_CONFIG_MEDIA_TYPE = "application/vnd.dev.sigstore.signingconfig.v0.2+json"
LOOPBACK = "http://127.0.0.1:9"  # discard port: never contacted (verification is offline)
# The log's base URL in the trusted root.  A reserved `.test` name (RFC 2606): never resolved, never contacted.
# Rekor signs its checkpoints as the host of its base URL (rekor.sigstore.dev for https://rekor.sigstore.dev),
# and sigstore-js only takes a checkpoint signature from a log whose baseUrl matches the signer's name.
REKOR_URL = "https://rekor.standin.test"
REKOR_NAME = urllib.parse.urlsplit(REKOR_URL).hostname
LEAF_LIFETIME = dt.timedelta(minutes=10)  # Fulcio's
FILLER_ENTRIES = 5

SCT_OID = x509.ObjectIdentifier("1.3.6.1.4.1.11129.2.4.2")
FULCIO = "1.3.6.1.4.1.57264.1."


# -- small encodings ----------------------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _der_length(n: int) -> bytes:
    if n < 0x80:
        return bytes([n])
    body = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([0x80 | len(body)]) + body


def der_utf8(text: str) -> bytes:
    """A DER UTF8String (tag 0x0C), as Fulcio encodes its .1.8+ extensions."""
    raw = text.encode("utf-8")
    return b"\x0c" + _der_length(len(raw)) + raw


def _der_octets(raw: bytes) -> bytes:
    return b"\x04" + _der_length(len(raw)) + raw


def _canonical(document: Any) -> bytes:
    """Compact JSON with sorted keys: RFC 8785 for the ASCII strings and integers used here."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _spki(key) -> bytes:
    return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def log_id(key) -> bytes:
    """RFC 6962 §3.2 log id (also Rekor's): SHA-256 of the DER SubjectPublicKeyInfo."""
    return hashlib.sha256(_spki(key)).digest()


def _pem_key(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def _rfc3339(when: dt.datetime) -> str:
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- RFC 6962 Merkle tree --------------------------------------------------------------


def leaf_hash(entry: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + entry).digest()


def _node(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two smaller than n (n > 1)."""
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def merkle_root(leaves: list[bytes]) -> bytes:
    """MTH(D[n]) over leaf hashes (RFC 6962 §2.1)."""
    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return leaves[0]
    k = _split(len(leaves))
    return _node(merkle_root(leaves[:k]), merkle_root(leaves[k:]))


def audit_path(index: int, leaves: list[bytes]) -> list[bytes]:
    """PATH(m, D[n]) (RFC 6962 §2.1.1), bottom-up: what a Rekor inclusion proof lists."""
    if len(leaves) <= 1:
        return []
    k = _split(len(leaves))
    if index < k:
        return audit_path(index, leaves[:k]) + [merkle_root(leaves[k:])]
    return audit_path(index - k, leaves[k:]) + [merkle_root(leaves[:k])]


# -- tokens ------------------------------------------------------------------------------


@dataclass(frozen=True)
class StandInToken:
    """An unsigned JWT (`alg: none`) with GitHub Actions' claims; `str()` is the JWT.

    `pipeline/stages/sign.py: _token_identity` reads `iss` and `job_workflow_ref`
    from it, as from a real ambient token.
    """

    jwt: str
    claims: dict[str, Any]

    def __str__(self) -> str:
        return self.jwt

    @property
    def identity(self) -> str:
        return identity_of(self.claims)

    @property
    def issuer(self) -> str:
        return str(self.claims.get("iss", ""))

    @property
    def _unverified_claims(self) -> dict[str, Any]:  # sigstore IdentityToken's name
        return self.claims


def _jwt_part(document: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(_canonical(document)).decode("ascii").rstrip("=")


def github_claims_for(identity: str, **overrides: Any) -> dict[str, Any]:
    """GitHub Actions OIDC claims for a workflow identity `https://github.com/OWNER/REPO/<path>@<ref>`."""
    prefix = "https://github.com/"
    if not identity.startswith(prefix) or "@" not in identity:
        raise ValueError(f"not a GitHub Actions workflow identity: {identity!r}")
    job_workflow_ref = identity[len(prefix):]
    path, ref = job_workflow_ref.split("@", 1)
    owner, repo = path.split("/")[:2]
    sha = "0" * 40
    now = int(time.time())
    claims: dict[str, Any] = {
        "iss": GITHUB_ISSUER,
        "aud": "sigstore",
        "sub": f"repo:{owner}/{repo}:ref:{ref}",
        "iat": now,
        "nbf": now,
        "exp": now + 300,
        "job_workflow_ref": job_workflow_ref,
        "job_workflow_sha": sha,
        "workflow_ref": job_workflow_ref,
        "workflow_sha": sha,
        "repository": f"{owner}/{repo}",
        "repository_owner": owner,
        "repository_id": "1",
        "repository_owner_id": "1",
        "repository_visibility": "public",
        "ref": ref,
        "sha": sha,
        "event_name": "push",
        "workflow": "release",
        "runner_environment": "github-hosted",
        "run_id": "1",
        "run_attempt": "1",
    }
    claims.update(overrides)
    return claims


def identity_of(claims: dict[str, Any]) -> str:
    """The SAN Fulcio issues for these claims (GitHub Actions: the job's workflow ref; else the e-mail)."""
    if claims.get("iss") == GITHUB_ISSUER:
        return f"https://github.com/{claims['job_workflow_ref']}"
    return str(claims.get("email") or claims.get("sub") or "")


def make_token(claims: dict[str, Any]) -> StandInToken:
    return StandInToken(f"{_jwt_part({'alg': 'none', 'typ': 'JWT'})}.{_jwt_part(claims)}.", dict(claims))


def claims_of(token: Any) -> dict[str, Any]:
    """The claims of a stand-in token, a sigstore IdentityToken, or a JWT string (unverified)."""
    if isinstance(token, StandInToken):
        return token.claims
    inner = getattr(token, "_unverified_claims", None)
    if isinstance(inner, dict):
        return inner
    payload = str(token).split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


# -- bundles -------------------------------------------------------------------------------


class StandInBundle:
    """A Sigstore bundle v0.3 document; `to_json()` as sigstore's `Bundle.to_json()`."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document

    def to_json(self) -> str:
        return json.dumps(self.document, sort_keys=True)

    def to_bytes(self) -> bytes:
        return self.to_json().encode("utf-8")


def _statement_bytes(statement: Any) -> bytes:
    if isinstance(statement, bytes | bytearray):
        return bytes(statement)
    contents = getattr(statement, "_contents", None)  # sigstore.dsse.Statement keeps its exact bytes
    if not isinstance(contents, bytes):
        raise TypeError(f"not an in-toto statement: {type(statement).__name__}")
    return contents


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding."""
    return b"DSSEv1 %d %s %d %s" % (len(payload_type), payload_type.encode(), len(payload), payload)


# -- the stand-in ----------------------------------------------------------------------------


class SigstoreStandIn:
    """The CA, CT log and Rekor of one folder; `write()` makes them, `load()` reopens them."""

    def __init__(self, directory: str | os.PathLike[str], *, identity: str | None = None, issuer: str = GITHUB_ISSUER, intermediate: bool = True) -> None:
        self.directory = Path(directory)
        self.identity = identity
        self.issuer = issuer
        self.intermediate = intermediate
        self._keys: dict[str, Any] = {}
        self._certs: dict[str, x509.Certificate] = {}

    # -- paths ---------------------------------------------------------------

    @property
    def trust_config_path(self) -> Path:
        return self.directory / TRUST_CONFIG

    @property
    def description_path(self) -> Path:
        return self.directory / DESCRIPTION

    @property
    def log_path(self) -> Path:
        return self.directory / REKOR_LOG

    def trust_config(self):
        """The `ClientTrustConfig` (sigstore's own parser)."""
        from sigstore.models import ClientTrustConfig

        return ClientTrustConfig.from_json(self.trust_config_path.read_text("utf-8"))

    # -- writing -------------------------------------------------------------

    def write(self, *, not_before: dt.datetime | None = None) -> SigstoreStandIn:
        """Make the keys, the CA chain, the trust config, an empty log and the description."""
        self.directory.mkdir(parents=True, exist_ok=True)
        start = (not_before or dt.datetime.now(dt.UTC) - dt.timedelta(days=1)).replace(microsecond=0)
        end = start + dt.timedelta(days=3650)
        root_key = ec.generate_private_key(ec.SECP384R1())
        root_name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "omp-ninfer.test"), x509.NameAttribute(NameOID.COMMON_NAME, "sigstore-standin")])
        root = (
            x509.CertificateBuilder()
            .subject_name(root_name)
            .issuer_name(root_name)
            .public_key(root_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
            .add_extension(x509.BasicConstraints(ca=True, path_length=1), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(root_key.public_key()), critical=False)
            .sign(root_key, hashes.SHA384())
        )
        self._keys["root"], self._certs["root"] = root_key, root
        chain = [root]
        if self.intermediate:
            inter_key = ec.generate_private_key(ec.SECP384R1())
            inter = (
                x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "omp-ninfer.test"), x509.NameAttribute(NameOID.COMMON_NAME, "sigstore-standin-intermediate")]))
                .issuer_name(root_name)
                .public_key(inter_key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(start)
                .not_valid_after(end)
                .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), critical=False)
                .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                .add_extension(x509.SubjectKeyIdentifier.from_public_key(inter_key.public_key()), critical=False)
                .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(root_key.public_key()), critical=False)
                .sign(root_key, hashes.SHA384())
            )
            self._keys["intermediate"], self._certs["intermediate"] = inter_key, inter
            chain = [inter, root]
        self._keys["ctlog"] = ec.generate_private_key(ec.SECP256R1())
        self._keys["rekor"] = ec.generate_private_key(ec.SECP256R1())

        files: dict[str, bytes] = {}
        for role, (cert_name, key_name) in KEY_FILES.items():
            if role in self._certs:
                files[cert_name] = self._certs[role].public_bytes(serialization.Encoding.PEM)
                files[key_name] = _pem_key(self._keys[role])
        files[CTLOG_KEY] = _pem_key(self._keys["ctlog"])
        files[REKOR_KEY] = _pem_key(self._keys["rekor"])
        files[TRUST_CONFIG] = json.dumps(self._trust_config_document(chain, start), indent=2, sort_keys=True).encode("utf-8") + b"\n"
        for name, data in files.items():
            (self.directory / name).write_bytes(data)
        tree_id = int.from_bytes(os.urandom(7), "big")
        filler = [leaf_hash(f"sigstore stand-in filler entry {i}".encode()).hex() for i in range(FILLER_ENTRIES)]
        self.log_path.write_bytes(_canonical({"tree_id": tree_id, "leaves": filler}) + b"\n")
        description = {
            "artifact_type": STANDIN_TYPE,
            "schema_version": SCHEMA_VERSION,
            "trust_config": TRUST_CONFIG,
            "trust_config_sha256": _sha256(files[TRUST_CONFIG]),
            "files": {name: _sha256(data) for name, data in sorted(files.items())},
            "rekor_log": REKOR_LOG,
            "log_ids": {"rekor": log_id(self._keys["rekor"].public_key()).hex(), "ctlog": log_id(self._keys["ctlog"].public_key()).hex()},
            "identity": self.identity,
            "issuer": self.issuer,
            "kit": "tests/kits/sigstore_standin.py",
            # The seam accepts this folder only in the process that writes it and those it starts (a test
            # run's worker and its subprocesses, a rehearsal driver and its runner), never by a variable alone.
            "owner": process_stamp(),  # None where /proc cannot say (not Linux): the seam then refuses the folder
        }
        self.description_path.write_bytes(json.dumps(description, indent=2, sort_keys=True).encode("utf-8") + b"\n")
        return self

    def _trust_config_document(self, chain: list[x509.Certificate], start: dt.datetime) -> dict[str, Any]:
        valid = {"start": _rfc3339(start)}

        def log(base_url: str, key) -> dict[str, Any]:
            return {
                "baseUrl": base_url,
                "hashAlgorithm": "SHA2_256",
                "logId": {"keyId": _b64(log_id(key.public_key()))},
                "publicKey": {"keyDetails": "PKIX_ECDSA_P256_SHA_256", "rawBytes": _b64(_spki(key.public_key())), "validFor": valid},
            }

        def service(path: str) -> dict[str, Any]:
            return {"url": f"{LOOPBACK}/{path}", "majorApiVersion": 1, "operator": "standin.test", "validFor": valid}

        return {
            "mediaType": TRUST_CONFIG_MEDIA_TYPE,
            "trustedRoot": {
                "mediaType": TRUSTED_ROOT_MEDIA_TYPE,
                "certificateAuthorities": [
                    {
                        "subject": {"organization": "omp-ninfer.test", "commonName": "sigstore-standin"},
                        "uri": f"{LOOPBACK}/fulcio",
                        "certChain": {"certificates": [{"rawBytes": _b64(c.public_bytes(serialization.Encoding.DER))} for c in chain]},
                        "validFor": valid,
                    }
                ],
                "ctlogs": [log(f"{LOOPBACK}/ctfe", self._keys["ctlog"])],
                "tlogs": [log(REKOR_URL, self._keys["rekor"])],
                "timestampAuthorities": [],
            },
            "signingConfig": {
                "mediaType": SIGNING_CONFIG_MEDIA_TYPE,
                "caUrls": [service("fulcio")],
                "oidcUrls": [service("oauth2")],
                "rekorTlogUrls": [{**service("rekor"), "url": REKOR_URL}],
                "rekorTlogConfig": {"selector": "ANY"},
                "tsaUrls": [],
                "tsaConfig": {"selector": "ANY"},
            },
        }

    # -- reading -------------------------------------------------------------

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> SigstoreStandIn:
        """Reopen a folder `write()` made (its description names the identity and issuer)."""
        folder = Path(directory)
        description = json.loads((folder / DESCRIPTION).read_bytes())
        if description.get("artifact_type") != STANDIN_TYPE or description.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(f"{folder / DESCRIPTION}: not a Sigstore stand-in description")
        kit = cls(folder, identity=description.get("identity"), issuer=description.get("issuer") or GITHUB_ISSUER)
        for role, (cert_name, key_name) in KEY_FILES.items():
            if (folder / cert_name).is_file():
                kit._certs[role] = x509.load_pem_x509_certificate((folder / cert_name).read_bytes())
                kit._keys[role] = serialization.load_pem_private_key((folder / key_name).read_bytes(), None)
        kit.intermediate = "intermediate" in kit._certs
        kit._keys["ctlog"] = serialization.load_pem_private_key((folder / CTLOG_KEY).read_bytes(), None)
        kit._keys["rekor"] = serialization.load_pem_private_key((folder / REKOR_KEY).read_bytes(), None)
        return kit

    def _issuer(self) -> tuple[x509.Certificate, Any]:
        role = "intermediate" if "intermediate" in self._certs else "root"
        if role not in self._certs:
            raise RuntimeError("the stand-in has no CA: call write() or load() first")
        return self._certs[role], self._keys[role]

    # -- tokens --------------------------------------------------------------

    def token(self, identity: str | None = None, **claims: Any) -> StandInToken:
        """A stand-in OIDC token for a GitHub Actions workflow identity (default: the kit's)."""
        identity = identity or self.identity
        if not identity:
            raise ValueError("no identity: pass one, or make the kit with SigstoreStandIn(folder, identity=...)")
        return make_token(github_claims_for(identity, **claims))

    def token_provider(self, identity: str | None = None, **claims: Any):
        """A `token_provider()` for `sign_targets`: returns `token(identity, **claims)`."""
        return lambda: self.token(identity, **claims)

    # -- "Fulcio" ------------------------------------------------------------

    def issue_certificate(self, claims: dict[str, Any], public_key, *, now: dt.datetime | None = None) -> x509.Certificate:
        """A Fulcio-like leaf for `public_key` and the token's claims, with one embedded SCT."""
        issuer_cert, issuer_key = self._issuer()
        identity = identity_of(claims)
        oidc_issuer = str(claims.get("iss", ""))
        if not identity or not oidc_issuer:
            raise ValueError("the token names no identity or issuer")
        not_before = (now or dt.datetime.now(dt.UTC)).replace(microsecond=0)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([]))
            .issuer_name(issuer_cert.subject)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(not_before)
            .not_valid_after(not_before + LEAF_LIFETIME)
            .add_extension(x509.KeyUsage(True, False, False, False, False, False, False, False, False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False)
        )
        san = x509.UniformResourceIdentifier(identity) if "://" in identity else x509.RFC822Name(identity)
        builder = builder.add_extension(x509.SubjectAlternativeName([san]), critical=True)
        for number, value in self._fulcio_extensions(claims, oidc_issuer):
            builder = builder.add_extension(x509.UnrecognizedExtension(x509.ObjectIdentifier(FULCIO + str(number)), value), critical=False)
        sign_hash = hashes.SHA384() if isinstance(issuer_key.curve, ec.SECP384R1) else hashes.SHA256()
        # RFC 6962 §3.2: the SCT signs the TBSCertificate without the SCT list (the precertificate's
        # TBS once its poison is removed), bound to the issuer's key hash.
        placeholder = self._sct_list(b"\x00" * 8, not_before)
        draft = builder.add_extension(x509.UnrecognizedExtension(SCT_OID, placeholder), critical=False).sign(issuer_key, sign_hash)
        tbs = draft.tbs_precertificate_bytes
        timestamp_ms = int(not_before.timestamp()) * 1000
        issuer_key_hash = log_id(issuer_key.public_key())
        signed_entry = issuer_key_hash + struct.pack("!I", len(tbs))[1:] + tbs
        digitally_signed = struct.pack("!BBQH", 0, 0, timestamp_ms, 1) + signed_entry + struct.pack("!H", 0)
        sct_signature = self._keys["ctlog"].sign(digitally_signed, ec.ECDSA(hashes.SHA256()))
        final = builder.add_extension(x509.UnrecognizedExtension(SCT_OID, self._sct_list(sct_signature, not_before)), critical=False).sign(issuer_key, sign_hash)
        if final.tbs_precertificate_bytes != tbs:  # the SCT must sign exactly what the verifier rebuilds
            raise AssertionError("the final certificate's precertificate TBS differs from the one the SCT signed")
        return final

    def _sct_list(self, signature: bytes, when: dt.datetime) -> bytes:
        """The extnValue of the SCT list extension: OCTET STRING(TLS SignedCertificateTimestampList)."""
        sct = (
            b"\x00"  # v1
            + log_id(self._keys["ctlog"].public_key())
            + struct.pack("!Q", int(when.timestamp()) * 1000)
            + struct.pack("!H", 0)  # no CtExtensions
            + bytes([4, 3])  # sha256, ecdsa
            + struct.pack("!H", len(signature))
            + signature
        )
        serialized = struct.pack("!H", len(sct)) + sct
        return _der_octets(struct.pack("!H", len(serialized)) + serialized)

    @staticmethod
    def _fulcio_extensions(claims: dict[str, Any], oidc_issuer: str) -> list[tuple[int, bytes]]:
        """Fulcio's OID extensions (docs/oid-info.md): .1 raw issuer, .8 DER issuer, GitHub claims."""
        out: list[tuple[int, bytes]] = [(1, oidc_issuer.encode())]
        github = oidc_issuer == GITHUB_ISSUER
        if github:
            out += [
                (2, str(claims.get("event_name", "")).encode()),
                (3, str(claims.get("sha", "")).encode()),
                (4, str(claims.get("workflow", "")).encode()),
                (5, str(claims.get("repository", "")).encode()),
                (6, str(claims.get("ref", "")).encode()),
            ]
        out.append((8, der_utf8(oidc_issuer)))
        if github:
            server = "https://github.com"
            repo = claims.get("repository", "")
            run = f"{server}/{repo}/actions/runs/{claims.get('run_id', '')}/attempts/{claims.get('run_attempt', '')}"
            out += [
                (9, der_utf8(f"{server}/{claims.get('job_workflow_ref', '')}")),
                (10, der_utf8(str(claims.get("job_workflow_sha", "")))),
                (11, der_utf8(str(claims.get("runner_environment", "")))),
                (12, der_utf8(f"{server}/{repo}")),
                (13, der_utf8(str(claims.get("sha", "")))),
                (14, der_utf8(str(claims.get("ref", "")))),
                (15, der_utf8(str(claims.get("repository_id", "")))),
                (16, der_utf8(f"{server}/{claims.get('repository_owner', '')}")),
                (17, der_utf8(str(claims.get("repository_owner_id", "")))),
                (18, der_utf8(f"{server}/{claims.get('workflow_ref', '')}")),
                (19, der_utf8(str(claims.get("workflow_sha", "")))),
                (20, der_utf8(str(claims.get("event_name", "")))),
                (21, der_utf8(run)),
                (22, der_utf8(str(claims.get("repository_visibility", "")))),
            ]
        return out

    # -- "Rekor" -------------------------------------------------------------

    def _log_locked(self):
        """One appender at a time (the sign stage may run in a subprocess beside the test)."""
        from pipeline.util.fs import exclusive_lock  # flock on POSIX, msvcrt on Windows

        return exclusive_lock(self.directory / (REKOR_LOG + ".lock"))

    def log_entry(self, body: bytes, kind: str, *, integrated_time: int | None = None) -> dict[str, Any]:
        """Append `body` to the log; the bundle's tlog entry (SET, inclusion proof, signed checkpoint)."""
        rekor = self._keys["rekor"]
        key_id = log_id(rekor.public_key())
        with self._log_locked():
            state = json.loads(self.log_path.read_bytes())
            leaves = [bytes.fromhex(h) for h in state["leaves"]]
            index = len(leaves)
            leaves.append(leaf_hash(body))
            state["leaves"] = [h.hex() for h in leaves]
            tmp = self.log_path.with_suffix(".tmp")
            tmp.write_bytes(_canonical(state) + b"\n")
            os.replace(tmp, self.log_path)
        integrated = int(time.time()) if integrated_time is None else integrated_time
        root = merkle_root(leaves)
        proof = audit_path(index, leaves)
        promise = _canonical({"body": _b64(body), "integratedTime": integrated, "logID": key_id.hex(), "logIndex": index})
        set_signature = rekor.sign(promise, ec.ECDSA(hashes.SHA256()))
        note = f"{REKOR_NAME} - {state['tree_id']}\n{len(leaves)}\n{_b64(root)}\n"
        note_signature = rekor.sign(note.encode(), ec.ECDSA(hashes.SHA256()))
        checkpoint = f"{note}\n\u2014 {REKOR_NAME} {_b64(key_id[:4] + note_signature)}\n"
        return {
            "logIndex": str(index),
            "logId": {"keyId": _b64(key_id)},
            "kindVersion": {"kind": kind, "version": "0.0.1"},
            "integratedTime": str(integrated),
            "inclusionPromise": {"signedEntryTimestamp": _b64(set_signature)},
            "inclusionProof": {
                "logIndex": str(index),
                "rootHash": _b64(root),
                "treeSize": str(len(leaves)),
                "hashes": [_b64(h) for h in proof],
                "checkpoint": {"envelope": checkpoint},
            },
            "canonicalizedBody": _b64(body),
        }

    # -- signing -------------------------------------------------------------

    def _leaf(self, token: Any) -> tuple[Any, x509.Certificate, str]:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = self.issue_certificate(claims_of(token), key.public_key())
        pem_b64 = _b64(cert.public_bytes(serialization.Encoding.PEM))
        return key, cert, pem_b64

    @staticmethod
    def _bundle(cert: x509.Certificate, entry: dict[str, Any], content: dict[str, Any]) -> StandInBundle:
        return StandInBundle(
            {
                "mediaType": BUNDLE_MEDIA_TYPE,
                "verificationMaterial": {
                    "certificate": {"rawBytes": _b64(cert.public_bytes(serialization.Encoding.DER))},
                    "tlogEntries": [entry],
                    "timestampVerificationData": {},
                },
                **content,
            }
        )

    def sign_artifact(self, data: bytes, token: Any | None = None) -> StandInBundle:
        """A message-signature bundle over `data` with a hashedrekord v0.0.1 log entry."""
        token = token if token is not None else self.token()
        key, cert, pem_b64 = self._leaf(token)
        digest = hashlib.sha256(data).digest()
        signature = key.sign(data, ec.ECDSA(hashes.SHA256()))
        body = _canonical(
            {
                "apiVersion": "0.0.1",
                "kind": "hashedrekord",
                "spec": {
                    "data": {"hash": {"algorithm": "sha256", "value": digest.hex()}},
                    "signature": {"content": _b64(signature), "publicKey": {"content": pem_b64}},
                },
            }
        )
        entry = self.log_entry(body, "hashedrekord")
        return self._bundle(cert, entry, {"messageSignature": {"messageDigest": {"algorithm": "SHA2_256", "digest": _b64(digest)}, "signature": _b64(signature)}})

    def sign_dsse(self, statement: Any, token: Any | None = None, *, payload_type: str = IN_TOTO_PAYLOAD_TYPE) -> StandInBundle:
        """A DSSE bundle carrying the statement's exact bytes, with a dsse v0.0.1 log entry."""
        token = token if token is not None else self.token()
        payload = _statement_bytes(statement)
        key, cert, pem_b64 = self._leaf(token)
        signature = key.sign(pae(payload_type, payload), ec.ECDSA(hashes.SHA256()))
        envelope = {"payload": _b64(payload), "payloadType": payload_type, "signatures": [{"sig": _b64(signature)}]}
        body = _canonical(
            {
                "apiVersion": "0.0.1",
                "kind": "dsse",
                "spec": {
                    "envelopeHash": {"algorithm": "sha256", "value": _sha256(_canonical(envelope))},
                    "payloadHash": {"algorithm": "sha256", "value": _sha256(payload)},
                    "signatures": [{"signature": _b64(signature), "verifier": pem_b64}],
                },
            }
        )
        entry = self.log_entry(body, "dsse")
        return self._bundle(cert, entry, {"dsseEnvelope": envelope})

    # -- sigstore's SigningContext interface ----------------------------------

    def context_factory(self, trust: Any = None) -> StandInSigningContext:
        """`context_factory(trust)` for `sign_targets`: the trust config it gets is not consulted
        (the stand-in signs with its own CA and logs; verification uses the trust config)."""
        return StandInSigningContext(self)


class _Handle:
    def __init__(self, kit: SigstoreStandIn, token: Any) -> None:
        self.kit = kit
        self.token = token

    def sign_artifact(self, input_: bytes) -> StandInBundle:
        return self.kit.sign_artifact(input_, self.token)

    def sign_dsse(self, input_: Any) -> StandInBundle:
        return self.kit.sign_dsse(input_, self.token)


class StandInSigningContext:
    """sigstore's `SigningContext`: `signer(token, cache=True)` yields a handle that signs."""

    def __init__(self, kit: SigstoreStandIn) -> None:
        self.kit = kit

    @contextlib.contextmanager
    def signer(self, identity_token: Any, *, cache: bool = True):
        yield _Handle(self.kit, identity_token)


__all__ = [
    "DESCRIPTION",
    "GITHUB_ISSUER",
    "STANDIN_TYPE",
    "TRUST_CONFIG",
    "SigstoreStandIn",
    "StandInBundle",
    "StandInSigningContext",
    "StandInToken",
    "audit_path",
    "der_utf8",
    "github_claims_for",
    "leaf_hash",
    "log_id",
    "make_token",
    "merkle_root",
]


def record_statement_bundle(kit: SigstoreStandIn, dist: Path, statement: Path, release: str, *, repository: str = "alphastorm/omp-ninfer") -> Path:
    """What `sign` leaves for one set: the DSSE bundle of its provenance statement beside it and the bundle of its
    outer SHA256SUMS in the same attestations folder, signed as the release workflow of `release` in `repository`,
    recorded in `dist`'s register as `signature-bundle` entries (a stage key of their own per statement)."""
    from pipeline.register import Register

    identity = f"https://github.com/{repository}/.github/workflows/release.yml@refs/tags/{release}"
    data = statement.read_bytes()
    bundle = statement.with_name(statement.name + ".sigstore.json")
    bundle.write_bytes(kit.sign_dsse(data, kit.token(identity)).to_bytes())
    register = Register(dist)
    entries = [register.make("signature-bundle", bundle, stage="sign", lane=None, signed_name=statement.name, signed_sha256=hashlib.sha256(data).hexdigest(), release=release)]
    sums = statement.parent.parent / "assets" / "SHA256SUMS"
    if sums.is_file():
        sums_bundle = statement.parent / "SHA256SUMS.sigstore.json"
        sums_bundle.write_bytes(kit.sign_artifact(sums.read_bytes(), kit.token(identity)).to_bytes())
        entries.append(register.make("signature-bundle", sums_bundle, stage="sign", lane=statement.parent.parent.name, signed_name="SHA256SUMS",
                                     signed_sha256=hashlib.sha256(sums.read_bytes()).hexdigest(), release=release))
    register.record_stage(f"sign:{release}:{statement.name}", "0" * 64, entries)
    return bundle
