"""Image references: the one grammar for registry hosts, repository paths, tags and digests.

The grammar is distribution's (github.com/distribution/reference), which
every registry and client implements: a host is DNS labels (or a bracketed
IPv6 address) with an optional port, a repository path is lowercase
components separated by '.', '_', '__' or dashes, joined by '/', a tag is at
most 128 word characters, dots and dashes.  This pipeline pins images by
digest only (`sha256:<64 hex>`): a tag can move to other bytes at any time.

Used by the registry client (`push --registry`, image definitions), the image
and push stages, audit and the release tree; nothing else spells these
patterns.  Standard library only.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from pipeline.errors import InputError

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*"
_PATH = rf"{_COMPONENT}(?:/{_COMPONENT})*"
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_HOST = rf"(?:{_LABEL}(?:\.{_LABEL})*|\[[0-9a-fA-F:]+\])(?::[0-9]{{1,5}})?"
_DIGEST = r"sha256:[0-9a-f]{64}"

HOST = re.compile(_HOST)
REPOSITORY = re.compile(_PATH)  # a repository path on its host (alphastorm/ninfer-runtime)
TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
DIGEST = re.compile(_DIGEST)
DIGEST_REFERENCE = re.compile(rf"(?P<host>{_HOST})/(?P<path>{_PATH})@(?P<digest>{_DIGEST})")

TAG_EXPECTED = "[A-Za-z0-9_][A-Za-z0-9._-]{0,127}"
DIGEST_REFERENCE_EXPECTED = "HOST/REPOSITORY@sha256:<64 hex> (never a tag)"


class DigestReference(NamedTuple):
    """`host/path@sha256:…`, split; unpacks as (host, path, digest)."""

    host: str
    path: str
    digest: str

    @property
    def repository(self) -> str:
        return f"{self.host}/{self.path}"

    def __str__(self) -> str:
        return f"{self.repository}@{self.digest}"


def looks_like_host(component: str) -> bool:
    """Whether the first '/'-component of a name is a registry host (distribution's rule), not a path."""
    return "." in component or ":" in component or component == "localhost" or component.startswith("[")


def is_host(text: object) -> bool:
    return isinstance(text, str) and HOST.fullmatch(text) is not None


def is_repository_path(text: object) -> bool:
    return isinstance(text, str) and REPOSITORY.fullmatch(text) is not None


def is_tag(text: object) -> bool:
    return isinstance(text, str) and TAG.fullmatch(text) is not None


def is_digest(text: object) -> bool:
    return isinstance(text, str) and DIGEST.fullmatch(text) is not None


def match_digest_reference(reference: object) -> DigestReference | None:
    """The parts of a digest-pinned reference, or None for anything else (a tag, a bare name, not a string)."""
    if not isinstance(reference, str):
        return None
    match = DIGEST_REFERENCE.fullmatch(reference)
    return DigestReference(match.group("host"), match.group("path"), match.group("digest")) if match else None


def is_digest_reference(reference: object) -> bool:
    """A check for schema fields: `host/path@sha256:<64 hex>`, nothing else."""
    return match_digest_reference(reference) is not None


def split_digest_reference(reference: object) -> tuple[str, str] | None:
    """(repository `host/path`, digest) of a digest-pinned reference, else None."""
    parts = match_digest_reference(reference)
    return (parts.repository, parts.digest) if parts else None


def parse_digest_reference(reference: object, *, field: str = "oci_reference", file: str | None = None) -> DigestReference:
    """A digest-pinned reference, or an InputError naming the field (a tag is refused, never resolved)."""
    parts = match_digest_reference(reference)
    if parts is None:
        raise InputError(
            "is not a digest-pinned image reference",
            file=file,
            field=field,
            found=reference,
            expected=DIGEST_REFERENCE_EXPECTED,
        )
    return parts
