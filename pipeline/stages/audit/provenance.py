"""Job: the published SLSA provenance statements of each set and of the image, and their DSSE bundles
(a rebound set's against the release that first shipped it)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipeline.errors import InputError, IntegrityError, PipelineError
from pipeline.formats.release.manifest import ReleaseManifest, parse_manifest, section
from pipeline.stages.audit.model import (
    MAX_BUNDLE_BYTES,
    MAX_RECORD_BYTES,
    MAX_RELEASE_MANIFEST_BYTES,
    Item,
    Refused,
    url_file_name,
)
from pipeline.stages.audit.session import AuditSession
from pipeline.util.hashing import is_sha256_hex, sha256_bytes
from pipeline.util.jsonio import loads_document

MAX_REBIND_CHAIN = 32  # predecessor manifests read to find the release that first shipped a rebound set


def audit_set_statement(auditor: AuditSession, lane: str, package_root: str, prefix: str, files: dict[str, str], cache: Path, row: dict[str, Any]) -> None:
    """The set's SLSA statement beside it on its component release: subjects exactly the set's files; its DSSE bundle.

    `prefix` is the row's download folder, `<repository>/releases/download/<release_tag>/`: for a
    lane rebound unchanged the component release that first shipped the set (its tag is copied).
    """
    from pipeline.formats import provenance
    from pipeline.formats.release.contract import check_set_statement

    url = prefix + provenance.set_statement_name(package_root)
    _audit_statement(
        auditor, lane, url, cache / "provenance" / lane, row, "provenance",
        lambda statement: check_set_statement(statement, files, row, origin=url, what="the set's files"),
        lambda statement: f"{len(statement.subjects)} subjects are exactly the set's files",
    )


def audit_image_statement(auditor: AuditSession, row: dict[str, Any], cache: Path) -> None:
    """The image's SLSA statement on the product release: its one subject is the image manifest digest the row binds."""
    from pipeline.formats.release.contract import check_image_statement
    from pipeline.formats.release.names import image_provenance_asset

    lane = row.get("id")
    if not isinstance(lane, str):
        return  # check_manifest_names refused an unsafe id; a row without one has no statement name
    url = auditor.product_release_url(image_provenance_asset(lane))
    if url is None:
        return  # no product repository: the signer item has failed already
    _audit_statement(
        auditor, lane, url, cache / "provenance" / lane, row, "image_provenance",
        lambda statement: check_image_statement(statement, row, origin=url),
        lambda statement: f"its subject is the image manifest {row.get('oci_manifest_digest')}",
    )


def _evidence_reason(auditor: AuditSession, row: dict[str, Any], key: str, url: str, *, product_release: bool) -> str | None:
    """Why a missing statement or bundle at `url` is SKIP, not FAIL; None when the manifest promises it (FAIL)."""
    manifest = auditor.release_manifest()
    promise = manifest.value("signing.evidence")
    if promise is None:
        return f"made before signing.evidence (the release promises no published provenance evidence); nothing at {url}"
    if not isinstance(row.get(key), dict):
        return f"the row binds no {key} record, so signing.evidence promises no statement for it; nothing at {url}"
    status = manifest.status
    if product_release and status != "ready":
        return f"status {status}: the product release is published after ready; nothing at {url} yet"
    return None


def _audit_statement(auditor: AuditSession, lane: str, url: str, folder: Path, row: dict[str, Any], key: str, check: Callable[[Any], None], note: Callable[[Any], str]) -> None:
    """One published provenance statement and its DSSE bundle (URL + bundle suffix), verified offline against the expected signer.

    Under `signing.evidence` a missing (404) statement or bundle the row binds is FAIL naming the URL
    (a bundle SKIP only with --allow-unsigned or at status candidate, as for signed files); a manifest
    made before the promise keeps SKIP.  A statement must pass `check` and be the tree copy the row binds.
    """
    from pipeline.formats import provenance
    from pipeline.infra.sigstore import SignatureError, verify_dsse_bundle

    name = url_file_name(url) or "statement"
    product_release = key == "image_provenance"
    label = f"provenance {lane} {name}"
    fetched = auditor.download(url, folder / name, sha256=None, size=None, label=name, cap=MAX_RECORD_BYTES)
    if fetched.error or fetched.path is None:
        skip = _evidence_reason(auditor, row, key, url, product_release=product_release) if "HTTP 404" in (fetched.error or "") else None
        if skip is not None:
            auditor.add(Item(label, None, skip, "provenance", {"url": url}))
        elif "HTTP 404" in (fetched.error or ""):
            auditor.add(Item(label, False, f"not published: no provenance statement at {url} (signing.evidence promises it, with its DSSE bundle beside it)", "provenance", {"url": url}))
        else:
            auditor.add(Item(label, False, fetched.error or "download failed", "provenance", {"url": url}))
        return
    data = fetched.path.read_bytes()
    record = section(row, key)
    try:
        statement = provenance.read_statement(data, origin=url)
        check(statement)
        if is_sha256_hex(record.get("sha256")) and sha256_bytes(data) != record["sha256"]:
            where = row.get("id") or "the row"
            raise IntegrityError("the published statement is not the tree copy the manifest binds", file=url, field=f"{where}.{key}.sha256", found=sha256_bytes(data), expected=record["sha256"], fix="publish the statement the release tree copies, byte for byte")
    except PipelineError as error:
        auditor.add(Item(label, False, error.render(), "provenance", {"url": url}))
        return
    auditor.add(Item(label, True, f"{note(statement)}; source {statement.external['source_commit']}, builder {statement.builder_id}", "provenance", {"sha256": sha256_bytes(data), "url": url}))
    bundle_url = url + auditor.release_manifest().bundle_suffix()
    bundle = auditor.download(bundle_url, folder / url_file_name(bundle_url), sha256=None, size=None, label=url_file_name(bundle_url), cap=MAX_BUNDLE_BYTES)
    bundle_label = f"signature {name}"
    if bundle.error or bundle.path is None:
        missing = "HTTP 404" in (bundle.error or "")
        skip = _evidence_reason(auditor, row, key, bundle_url, product_release=product_release) if missing else None
        if skip is None and missing and auditor.allow_unsigned:
            skip = f"no DSSE bundle at {bundle_url} (allowed: --allow-unsigned, or status candidate)"
        if skip is not None:
            auditor.add(Item(bundle_label, None, skip, "signature", {"url": bundle_url}))
        else:
            auditor.add(Item(bundle_label, False, f"not signed: no DSSE bundle at {bundle_url}" if missing else bundle.error or "download failed", "signature", {"url": bundle_url}))
        return
    expected = auditor.expected_signer
    assert expected is not None  # signatures.check_signer ran first
    rebound = ""
    if key == "provenance" and row.get("rebound_from") is not None:
        # The set's bundle was made by the release workflow of the release that first shipped it.
        try:
            expected, rebound = _rebound_signer(auditor, row)
        except Refused as refused:
            auditor.add(Item(bundle_label, False, f"rebound set: {refused}", "signature", {"url": bundle_url}))
            return
    identity, issuer, repository, ref, trust = expected.identity, expected.issuer, expected.repository, expected.ref, expected.trust_config
    why = f" (a rebound set: {rebound}, so its bundle must be signed by {identity})" if rebound else ""
    try:
        verified = verify_dsse_bundle(data, bundle.path.read_bytes(), identity=identity, issuer=issuer, trust_config=trust, repository=repository, ref=ref, name=name)
    except SignatureError as error:
        auditor.add(Item(bundle_label, False, error.reason + why, "signature", {"identity": identity}))
        return
    except PipelineError as error:
        auditor.add(Item(bundle_label, False, error.render() + why, "signature", {"identity": identity}))
        return
    note = f"; {rebound}" if rebound else ""
    auditor.add(Item(bundle_label, True, f"DSSE signed by {verified.identity}, log index {verified.log_index}{note}", "signature", {**verified.to_json(), "expected_identity": identity}))


def _rebound_signer(auditor: AuditSession, row: dict[str, Any]) -> tuple[Any, str]:
    """The signer a rebound row's set-statement bundle must carry, and a note naming the release it comes from.

    A lane rebound unchanged ships the bundle the release workflow of the release that first shipped
    the set made ("a rebound lane uses the bundle of the release that first shipped its set"): that
    release is found by following `rebound_from` through the predecessor manifests, each fetched beside
    this one and checked against the `predecessor.manifest_sha256` that binds it.  The identity is the
    auditor's expected signer with only its `@refs/tags/<release>` suffix replaced by that release's
    name (which passes RELEASE_RE); issuer, repository and trust configuration stay the auditor's.
    Raises Refused when the release or the identity cannot be derived.
    """
    from pipeline.infra import sigstore

    lane = str(row.get("id"))
    if lane not in auditor.rebound:
        try:
            auditor.rebound[lane] = _first_shipped(auditor, row)
        except Refused as refused:
            auditor.rebound[lane] = refused
    first = auditor.rebound[lane]
    if isinstance(first, Refused):
        raise first
    release, chain = first
    expected = auditor.expected_signer
    assert expected is not None  # signatures.check_signer ran first
    suffix = f"@refs/tags/{auditor.release_manifest().release}"
    if not expected.identity.endswith(suffix):
        raise Refused(f"the expected signer {expected.identity} does not end with {suffix}, so the signer of {release}, which first shipped the rebound set, cannot be derived from it")
    identity = expected.identity[: -len(suffix)] + f"@refs/tags/{release}"
    repository, ref = sigstore.github_claims(identity)
    signer = sigstore.SignerIdentity(identity, expected.issuer, repository if expected.repository else None, ref if expected.ref else None, expected.trust_config)
    return signer, f"{release} first shipped the set (rebound_from {' -> '.join(chain)})"


def _first_shipped(auditor: AuditSession, row: dict[str, Any]) -> tuple[str, list[str]]:
    from pipeline.formats.release.names import RELEASE_RE, sort_release_key

    manifest = auditor.release_manifest()
    release, current = str(manifest.release), row
    lane = row.get("id")
    chain: list[str] = []
    for _ in range(MAX_REBIND_CHAIN):
        rebound = current.get("rebound_from")
        if rebound is None:
            return release, chain
        where = f"the row {lane}.rebound_from of {release}"
        if not isinstance(rebound, str) or not RELEASE_RE.fullmatch(rebound):
            raise Refused(f"{where} is not a release name (found {rebound!r})")
        if sort_release_key(rebound) >= sort_release_key(release):
            raise Refused(f"{where} names {rebound}, which is not a release before {release}")
        predecessor = manifest.section("predecessor")
        if predecessor.get("release") != rebound:
            raise Refused(f"{where} names {rebound}, but the manifest of {release} has the predecessor {predecessor.get('release')!r}: a rebound row is its predecessor's row")
        digest = predecessor.get("manifest_sha256")
        if not is_sha256_hex(digest):
            raise Refused(f"the manifest of {release} binds no predecessor.manifest_sha256 (found {digest!r}), so the manifest of {rebound} cannot be checked")
        older = _predecessor_manifest(auditor, rebound, digest)
        old = older.lane_row(lane)
        if old is None:
            raise Refused(f"the manifest of {rebound} ships no row {lane}, but {where} names it")
        for key in ("repository", "release_tag", "source_commit", "checksums_sha256"):
            if old.get(key) != current.get(key):
                raise Refused(f"the row {lane} of {rebound} binds another {key} ({old.get(key)!r}) than {release}'s ({current.get(key)!r}): the set was not rebound unchanged")
        chain.append(rebound)
        manifest, release, current = older, rebound, old
    raise Refused(f"the row {lane} is rebound through more than {MAX_REBIND_CHAIN} releases; the audit does not follow it further")


def _predecessor_manifest(auditor: AuditSession, release: str, digest: str) -> ReleaseManifest:
    """The manifest of an earlier release, `manifests/<release>/manifest.json` beside this one's tree, checked against its pin."""
    current = str(auditor.release_manifest().release)
    own = f"manifests/{current}/manifest.json"
    source = auditor.source if auditor.is_url else Path(auditor.source).resolve().as_posix()
    relative = f"manifests/{release}/manifest.json"
    if not source.endswith("/" + own):
        raise Refused(f"the manifest is not read from its release tree (…/{own}), so the manifest of {release} ({relative}) cannot be found beside it")
    location, is_url = auditor.signed_source(current, relative)
    try:
        data = auditor.fetch_small(location, is_url, auditor.cache_dir(current) / "predecessors" / release / "manifest.json", cap=MAX_RELEASE_MANIFEST_BYTES)
    except (PipelineError, OSError) as error:
        raise Refused(f"cannot fetch the manifest of {release} at {location}: {getattr(error, 'what', error)}") from None
    if sha256_bytes(data) != digest:
        raise Refused(f"the manifest of {release} at {location} has sha256 {sha256_bytes(data)}, but predecessor.manifest_sha256 binds {digest}")
    try:
        document = loads_document(data, source=location, max_bytes=MAX_RELEASE_MANIFEST_BYTES)
    except InputError as error:
        raise Refused(f"the manifest of {release} at {location} is not JSON: {error.what}") from None
    if not isinstance(document, dict) or document.get("release") != release:
        raise Refused(f"the document at {location} is not the manifest of {release}")
    return parse_manifest(data, source=location, check_type=False, max_bytes=MAX_RELEASE_MANIFEST_BYTES)  # the checks above passed: it parses
