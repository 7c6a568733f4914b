"""GitHub's own release attestation, made offline the way GitHub makes it for an immutable release.

When a release becomes immutable, GitHub signs one in-toto statement for it with its own Sigstore
instance (not the public-good one): predicate type `https://in-toto.io/attestation/release/v0.1`,
subjects the tag's commit (`{"uri": "pkg:github/OWNER/REPO@TAG", "digest": {"sha1": COMMIT}}`) and
each asset (`{"name": NAME, "digest": {"sha256": HEX}}`), predicate `{ownerId, purl, releaseId,
repository, repositoryId, tag}`, in a DSSE envelope, in a Sigstore bundle v0.3 whose only
verification material is the signing certificate and an RFC 3161 timestamp from GitHub's timestamp
authority: no transparency-log entry and no SCT (GitHub's instance has neither a log nor a CT log).
The certificate is `O=GitHub, Inc., CN=Attester` with the SAN URI `https://dotcom.releases.github.com`,
issued by `GitHub, Inc. / Fulcio Intermediate l1`; the timestamp is signed by
`GitHub, Inc. / TSA Timestamping` (EKU timeStamping, critical) under `TSA intermediate`.  (The shape
is that of the bundle in the GitHub CLI's own test data, `github_release_bundle.json`.)

`GitHubAttestationStandIn(folder).write()` makes the CA chain, the TSA chain and the attester key,
and `trusted_root.jsonl`: ONE trusted root (the form `gh attestation verify --custom-trusted-root`
reads) naming the CA and the TSA, with no logs.  `attest_release(...)` returns the bundle bytes.
The real `gh` verifies it (`tests/integration/test_release_attestations.py`); nothing in `gh` is
changed.  The timestamp token is encoded here by hand (DER, CMS SignedData over a TSTInfo), since
no library on the test path writes RFC 3161 responses.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from sigstore_standin import BUNDLE_MEDIA_TYPE, IN_TOTO_PAYLOAD_TYPE, TRUSTED_ROOT_MEDIA_TYPE, pae

RELEASE_PREDICATE_TYPE = "https://in-toto.io/attestation/release/v0.1"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
RELEASES_SAN = "https://dotcom.releases.github.com"  # GitHub's attester identity for github.com ("dotcom")
TRUSTED_ROOT = "trusted_root.jsonl"
GITHUB_ORG = "GitHub, Inc."
TSA_POLICY = "1.3.6.1.4.1.57264.2"  # the policy OID of Sigstore's (and GitHub's) timestamp authorities

OID_SIGNED_DATA = "1.2.840.113549.1.7.2"
OID_TST_INFO = "1.2.840.113549.1.9.16.1.4"
OID_CONTENT_TYPE = "1.2.840.113549.1.9.3"
OID_MESSAGE_DIGEST = "1.2.840.113549.1.9.4"
OID_SIGNING_TIME = "1.2.840.113549.1.9.5"
OID_SIGNING_CERTIFICATE_V2 = "1.2.840.113549.1.9.16.2.47"
OID_SHA256 = "2.16.840.1.101.3.4.2.1"
OID_SHA384 = "2.16.840.1.101.3.4.2.2"
OID_ECDSA_SHA384 = "1.2.840.10045.4.3.3"


# -- DER, as much as an RFC 3161 response needs -----------------------------------------------------


def _tlv(tag: int, body: bytes) -> bytes:
    n = len(body)
    length = bytes([n]) if n < 0x80 else bytes([0x80 | ((n.bit_length() + 7) // 8)]) + n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([tag]) + length + body


def _seq(*parts: bytes) -> bytes:
    return _tlv(0x30, b"".join(parts))


def _set(*parts: bytes) -> bytes:
    return _tlv(0x31, b"".join(sorted(parts)))  # DER: a SET OF in the order of its encodings


def _int(value: int) -> bytes:
    return _tlv(0x02, value.to_bytes(value.bit_length() // 8 + 1, "big", signed=False))


def _oid(dotted: str) -> bytes:
    first, second, *rest = (int(x) for x in dotted.split("."))
    body = bytearray([40 * first + second])
    for arc in rest:
        chunk = [arc & 0x7F]
        arc >>= 7
        while arc:
            chunk.append(0x80 | (arc & 0x7F))
            arc >>= 7
        body += bytes(reversed(chunk))
    return _tlv(0x06, bytes(body))


def _octets(data: bytes) -> bytes:
    return _tlv(0x04, data)


def _explicit(number: int, body: bytes) -> bytes:
    return _tlv(0xA0 | number, body)


def _algorithm(oid: str, *, null: bool = False) -> bytes:
    return _seq(_oid(oid), b"\x05\x00" if null else b"")


def _name(certificate: x509.Certificate, *, issuer: bool) -> bytes:
    return (certificate.issuer if issuer else certificate.subject).public_bytes()


# -- certificates -------------------------------------------------------------------------------------


def _x509_name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, GITHUB_ORG), x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _certificate(subject: str, key, issuer: tuple[x509.Certificate, Any] | None, start: dt.datetime, end: dt.datetime,
                 *, ca: bool, eku: x509.ObjectIdentifier | None = None, san: str | None = None) -> x509.Certificate:
    issuer_name, signing_key = (issuer[0].subject, issuer[1]) if issuer else (_x509_name(subject), key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_x509_name(subject))
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    if ca:
        builder = builder.add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
    else:
        builder = builder.add_extension(x509.KeyUsage(True, False, False, False, False, False, False, False, False), critical=True)
    if issuer:
        builder = builder.add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer[1].public_key()), critical=False)
    if eku is not None:
        # RFC 3161 §2.3: a TSA certificate has exactly one EKU, timeStamping, critical
        builder = builder.add_extension(x509.ExtendedKeyUsage([eku]), critical=eku == ExtendedKeyUsageOID.TIME_STAMPING)
    if san:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.UniformResourceIdentifier(san)]), critical=False)
    return builder.sign(signing_key, hashes.SHA384())


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _der(certificate: x509.Certificate) -> bytes:
    return certificate.public_bytes(serialization.Encoding.DER)


class GitHubAttestationStandIn:
    """GitHub's attestation CA, its attester certificate and its timestamp authority, in one folder."""

    ROLES = ("ca-root", "ca-intermediate", "attester", "tsa-root", "tsa-intermediate", "tsa")

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.keys: dict[str, Any] = {}
        self.certs: dict[str, x509.Certificate] = {}

    @property
    def trusted_root_path(self) -> Path:
        return self.directory / TRUSTED_ROOT

    def write(self, *, not_before: dt.datetime | None = None) -> GitHubAttestationStandIn:
        self.directory.mkdir(parents=True, exist_ok=True)
        start = (not_before or dt.datetime.now(dt.UTC) - dt.timedelta(days=1)).replace(microsecond=0)
        end = start + dt.timedelta(days=3650)
        for role in self.ROLES:
            self.keys[role] = ec.generate_private_key(ec.SECP256R1() if role in ("attester", "tsa") else ec.SECP384R1())
        k, c = self.keys, self.certs
        c["ca-root"] = _certificate("Internal Services Root", k["ca-root"], None, start, end, ca=True)
        c["ca-intermediate"] = _certificate("Fulcio Intermediate l1", k["ca-intermediate"], (c["ca-root"], k["ca-root"]), start, end, ca=True)
        # GitHub's attester certificate is long-lived (a year), not a 10-minute Fulcio leaf: the timestamp dates the signature
        c["attester"] = _certificate("Attester", k["attester"], (c["ca-intermediate"], k["ca-intermediate"]), start, start + dt.timedelta(days=365),
                                     ca=False, eku=ExtendedKeyUsageOID.CODE_SIGNING, san=RELEASES_SAN)
        c["tsa-root"] = _certificate("Internal Services Root", k["tsa-root"], None, start, end, ca=True)
        c["tsa-intermediate"] = _certificate("TSA intermediate", k["tsa-intermediate"], (c["tsa-root"], k["tsa-root"]), start, end, ca=True)
        c["tsa"] = _certificate("TSA Timestamping", k["tsa"], (c["tsa-intermediate"], k["tsa-intermediate"]), start, end,
                                ca=False, eku=ExtendedKeyUsageOID.TIME_STAMPING)
        for role in self.ROLES:
            (self.directory / f"{role}.pem").write_bytes(c[role].public_bytes(serialization.Encoding.PEM))
            (self.directory / f"{role}.key.pem").write_bytes(k[role].private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        self.trusted_root_path.write_bytes(json.dumps(self.trusted_root(start), sort_keys=True, separators=(",", ":")).encode() + b"\n")
        return self

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> GitHubAttestationStandIn:
        kit = cls(directory)
        for role in cls.ROLES:
            kit.certs[role] = x509.load_pem_x509_certificate((kit.directory / f"{role}.pem").read_bytes())
            kit.keys[role] = serialization.load_pem_private_key((kit.directory / f"{role}.key.pem").read_bytes(), None)
        return kit

    def trusted_root(self, start: dt.datetime) -> dict[str, Any]:
        """A Sigstore trusted root for GitHub's instance: one CA, one TSA, no transparency or CT log."""
        valid = {"start": start.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}

        def chain(*roles: str) -> dict[str, Any]:
            return {"certificates": [{"rawBytes": _b64(_der(self.certs[role]))} for role in roles]}

        return {
            "mediaType": TRUSTED_ROOT_MEDIA_TYPE,
            "tlogs": [],
            "ctlogs": [],
            "certificateAuthorities": [{"subject": {"organization": GITHUB_ORG, "commonName": "Internal Services Root"},
                                        "uri": "https://fulcio.githubapp.test", "certChain": chain("ca-intermediate", "ca-root"), "validFor": valid}],
            "timestampAuthorities": [{"subject": {"organization": GITHUB_ORG, "commonName": "Internal Services Root"},
                                      "uri": "https://timestamp.githubapp.test", "certChain": chain("tsa", "tsa-intermediate", "tsa-root"), "validFor": valid}],
        }

    # -- the timestamp authority ---------------------------------------------------------------

    def timestamp(self, signature: bytes, *, when: dt.datetime | None = None) -> bytes:
        """An RFC 3161 TimeStampResp (status granted) over SHA-256(signature), signed by the TSA (ECDSA P-256, SHA-384)."""
        when = (when or dt.datetime.now(dt.UTC)).astimezone(dt.UTC).replace(microsecond=0)
        tsa_cert, tsa_key = self.certs["tsa"], self.keys["tsa"]
        tst_info = _seq(
            _int(1),
            _oid(TSA_POLICY),
            _seq(_algorithm(OID_SHA256, null=True), _octets(hashlib.sha256(signature).digest())),
            _int(int.from_bytes(os.urandom(16), "big")),
            _tlv(0x18, when.strftime("%Y%m%d%H%M%SZ").encode()),
            _seq(_int(1)),  # accuracy: one second
            _explicit(0, _tlv(0xA4, _name(tsa_cert, issuer=False))),  # tsa: directoryName
        )
        ess_cert_id = _seq(_octets(hashlib.sha256(_der(tsa_cert)).digest()),
                           _seq(_seq(_tlv(0xA4, _name(tsa_cert, issuer=True))), _int(tsa_cert.serial_number)))
        attributes = [
            _seq(_oid(OID_CONTENT_TYPE), _set(_oid(OID_TST_INFO))),
            _seq(_oid(OID_SIGNING_TIME), _set(_tlv(0x17, when.strftime("%y%m%d%H%M%SZ").encode()))),
            _seq(_oid(OID_MESSAGE_DIGEST), _set(_octets(hashlib.sha384(tst_info).digest()))),
            _seq(_oid(OID_SIGNING_CERTIFICATE_V2), _set(_seq(_seq(ess_cert_id)))),
        ]
        signed_attributes = _set(*attributes)  # signed as a SET (tag 0x31), carried as [0] IMPLICIT
        signature_value = tsa_key.sign(signed_attributes, ec.ECDSA(hashes.SHA384()))
        signer_info = _seq(
            _int(1),
            _seq(_name(tsa_cert, issuer=True), _int(tsa_cert.serial_number)),
            _algorithm(OID_SHA384),
            b"\xa0" + signed_attributes[1:],
            _algorithm(OID_ECDSA_SHA384),
            _octets(signature_value),
        )
        signed_data = _seq(
            _int(3),
            _set(_algorithm(OID_SHA384)),
            _seq(_oid(OID_TST_INFO), _explicit(0, _octets(tst_info))),
            _set(signer_info),
        )
        token = _seq(_oid(OID_SIGNED_DATA), _explicit(0, signed_data))
        return _seq(_seq(_int(0)), token)  # TimeStampResp {status: granted, timeStampToken}

    # -- the attestation -----------------------------------------------------------------------

    def attest_release(self, *, repository: str, tag: str, commit: str, assets: dict[str, str], release_id: int = 1,
                       owner_id: int = 1, repository_id: int = 1, predicate_type: str = RELEASE_PREDICATE_TYPE) -> bytes:
        """The bundle GitHub publishes for an immutable release (`assets`: name -> SHA-256 hex)."""
        purl = f"pkg:github/{repository.lower()}@{tag}"
        statement = {
            "_type": STATEMENT_TYPE,
            "subject": [{"uri": purl, "digest": {"sha1": commit}}]
                       + [{"name": name, "digest": {"sha256": digest}} for name, digest in sorted(assets.items())],
            "predicateType": predicate_type,
            "predicate": {"ownerId": str(owner_id), "purl": purl, "releaseId": str(release_id), "repository": repository,
                          "repositoryId": str(repository_id), "tag": tag},
        }
        payload = json.dumps(statement, separators=(",", ":")).encode()
        signature = self.keys["attester"].sign(pae(IN_TOTO_PAYLOAD_TYPE, payload), ec.ECDSA(hashes.SHA256()))
        bundle = {
            "mediaType": BUNDLE_MEDIA_TYPE,
            "verificationMaterial": {
                "certificate": {"rawBytes": _b64(_der(self.certs["attester"]))},
                "timestampVerificationData": {"rfc3161Timestamps": [{"signedTimestamp": _b64(self.timestamp(signature))}]},
            },
            "dsseEnvelope": {"payload": _b64(payload), "payloadType": IN_TOTO_PAYLOAD_TYPE, "signatures": [{"sig": _b64(signature)}]},
        }
        return json.dumps(bundle, sort_keys=True).encode()


# -- GitHub's attestation API, on loopback TLS, for the real gh ---------------------------------------


class AttestationAPI:
    """The GitHub REST endpoints `gh release verify-asset` reads, on https://127.0.0.1:<port>/api/v3/ (a GitHub
    Enterprise host to gh, which uses https only: a certificate for 127.0.0.1 is made here and handed to gh through
    SSL_CERT_FILE).  Each request needs the token (401 `Bad credentials` otherwise, as GitHub answers).

    * GET /repos/{o}/{r}/git/ref/tags/{tag} (the tag's commit; 404 `Not Found`);
    * GET /repos/{o}/{r}/attestations/{alg}:{hex} (`{"attestations": [{"bundle", "bundle_url", "initiator",
      "repository_id"}]}`, the `predicate_type` query honoured; 404 when there are none);
    * GET /meta (`domains.artifact_attestations.trust_domain`: empty on github.com, which gh reads as "dotcom").

    `release(repository, tag, commit, bundle)` makes a release and files its attestation under every subject
    digest of its statement, as GitHub does; `requests` lists the paths asked for."""

    TOKEN = "standin-attestation-token"

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.tags: dict[tuple[str, str], str] = {}
        self.attestations: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self.requests: list[str] = []
        self._server = None
        self._thread = None

    def release(self, repository: str, tag: str, commit: str, bundle: bytes) -> None:
        self.tags[(repository.casefold(), tag)] = commit
        document = json.loads(bundle)
        statement = json.loads(base64.b64decode(document["dsseEnvelope"]["payload"]))
        for subject in statement["subject"]:
            for algorithm, value in subject["digest"].items():
                self.attestations.setdefault((repository.casefold(), f"{algorithm}:{value}"), []).append(document)

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self._server.server_address[1]}"

    def env(self, home: Path) -> dict[str, str]:
        """The environment gh runs in: this host, its token, its CA, and a configuration folder of its own."""
        home.mkdir(parents=True, exist_ok=True)
        return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "GH_CONFIG_DIR": str(home / "gh"),
                "GH_HOST": self.host, "GH_ENTERPRISE_TOKEN": self.TOKEN, "SSL_CERT_FILE": str(self.directory / "api-ca.pem"),
                "GH_PROMPT_DISABLED": "1", "GH_NO_UPDATE_NOTIFIER": "1", "NO_COLOR": "1", "LC_ALL": "C.UTF-8"}

    def _certificate(self) -> None:
        import ipaddress

        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
        now = dt.datetime.now(dt.UTC)
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(hours=1)).not_valid_after(now + dt.timedelta(days=1))
                .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .sign(key, hashes.SHA256()))
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / "api-ca.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        (self.directory / "api-key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))

    def _answer(self, path: str, authorization: str | None) -> tuple[int, Any]:
        import urllib.parse

        self.requests.append(path)
        if authorization not in (f"token {self.TOKEN}", f"Bearer {self.TOKEN}"):  # GitHub takes either scheme
            return 401, {"message": "Bad credentials", "documentation_url": "https://docs.github.com/rest", "status": "401"}
        url = urllib.parse.urlsplit(path)
        parts = [urllib.parse.unquote(p) for p in url.path.split("/")]
        not_found = (404, {"message": "Not Found", "documentation_url": "https://docs.github.com/rest", "status": "404"})
        if parts[:4] == ["", "api", "v3", "meta"]:
            return 200, {"domains": {"artifact_attestations": {"trust_domain": ""}}}
        if len(parts) < 7 or parts[:4] != ["", "api", "v3", "repos"]:
            return not_found
        repository = f"{parts[4]}/{parts[5]}".casefold()
        rest = "/".join(parts[6:])
        if rest.startswith("git/ref/tags/"):
            commit = self.tags.get((repository, rest.removeprefix("git/ref/tags/")))
            if commit is None:
                return not_found
            return 200, {"ref": "refs/" + rest.removeprefix("git/ref/"), "object": {"sha": commit, "type": "commit"}}
        if rest.startswith("attestations/"):
            query = urllib.parse.parse_qs(url.query)
            found = self.attestations.get((repository, rest.removeprefix("attestations/")), [])
            if query.get("predicate_type") == ["release"]:
                found = [b for b in found if json.loads(base64.b64decode(b["dsseEnvelope"]["payload"]))["predicateType"].startswith(RELEASE_PREDICATE_TYPE.rsplit("/", 1)[0])]
            if not found:
                return not_found
            return 200, {"attestations": [{"bundle": b, "bundle_url": None, "initiator": "github", "repository_id": 1} for b in found]}
        return not_found

    def __enter__(self) -> AttestationAPI:
        import http.server
        import ssl
        import threading

        self._certificate()
        api = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                status, body = api._answer(self.path, self.headers.get("Authorization"))
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.directory / "api-ca.pem", self.directory / "api-key.pem")
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
