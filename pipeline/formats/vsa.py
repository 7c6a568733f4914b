"""The verification summary `rebuild --verify` writes: in-toto Statement v1 with a SLSA VSA v1 predicate.

    _type           https://in-toto.io/Statement/v1
    subject         every file of the published set (name, SHA-256 as published)
    predicateType   https://slsa.dev/verification_summary/v1
    predicate
      verifier            {id: <docs/provenance.md#rebuild-verifier>, version}
      timeVerified        when the rebuild finished (RFC 3339, UTC): the one clock value, it is a report
      resourceUri         where the set is published (the component release's download folder)
      policy              {uri: <docs/provenance.md#rebuild-policy-v1>}: every file and every
                          package member bit for bit, the source archive equal to the provenance's
      inputAttestations   [the provenance statement, by SHA-256]
      verificationResult  PASSED | FAILED
      verifiedLevels      ["OMP_NINFER_BIT_FOR_BIT_REBUILD"] when PASSED, else ["FAILED"] (as SLSA's VSA
                          says when policy verification failed)
      slsaVersion         "1.0"
      rebuild             per-check and per-file results, differing package members, diffoscope reports;
                          no local path: folders are named relative to the work folder, or left out

docs/provenance.md describes the policy and every field.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from pipeline import __version__
from pipeline.formats.provenance import DOCS, STATEMENT_TYPE
from pipeline.util.jsonio import canonical_bytes

PREDICATE_TYPE = "https://slsa.dev/verification_summary/v1"
VERIFIER_ID = f"{DOCS}#rebuild-verifier"
POLICY_URI = f"{DOCS}#rebuild-policy-v1"
PASSED_LEVEL = "OMP_NINFER_BIT_FOR_BIT_REBUILD"
FAILED_LEVEL = "FAILED"  # SLSA VSA v1: the level a verifier states when policy verification failed
SUFFIX = ".rebuild.vsa.intoto.json"


def now_rfc3339() -> str:
    return datetime.now(UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def summary(
    *,
    subjects: Mapping[str, str],
    resource_uri: str,
    provenance_name: str,
    provenance_sha256: str,
    passed: bool,
    rebuild: dict[str, Any],
    time_verified: str | None = None,
) -> bytes:
    document = {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": name, "digest": {"sha256": digest}} for name, digest in sorted(subjects.items())],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "verifier": {"id": VERIFIER_ID, "version": {"omp-ninfer-pipeline": __version__}},
            "timeVerified": time_verified or now_rfc3339(),
            "resourceUri": resource_uri,
            "policy": {"uri": POLICY_URI},
            "inputAttestations": [{"uri": provenance_name, "digest": {"sha256": provenance_sha256}}],
            "verificationResult": "PASSED" if passed else "FAILED",
            "verifiedLevels": [PASSED_LEVEL if passed else FAILED_LEVEL],
            "slsaVersion": "1.0",
            "rebuild": rebuild,
        },
    }
    return canonical_bytes(document, indent=2)
