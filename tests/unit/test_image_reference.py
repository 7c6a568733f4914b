"""The one image-reference grammar (pipeline/infra/image_reference.py), distribution's, digest-pinned."""

from __future__ import annotations

import pytest

from pipeline.errors import InputError
from pipeline.infra.image_reference import (
    DigestReference,
    is_digest_reference,
    is_host,
    is_repository_path,
    is_tag,
    looks_like_host,
    parse_digest_reference,
    split_digest_reference,
)

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("reference", "parts"),
    [
        (f"ghcr.io/alphastorm/ninfer-runtime@{DIGEST}", ("ghcr.io", "alphastorm/ninfer-runtime", DIGEST)),
        (f"127.0.0.1:5000/alphastorm/ninfer-runtime@{DIGEST}", ("127.0.0.1:5000", "alphastorm/ninfer-runtime", DIGEST)),
        (f"[::1]:5000/a/b@{DIGEST}", ("[::1]:5000", "a/b", DIGEST)),
        (f"Registry.Example.COM/team__x/a.b-c@{DIGEST}", ("Registry.Example.COM", "team__x/a.b-c", DIGEST)),
        (f"localhost/a@{DIGEST}", ("localhost", "a", DIGEST)),
    ],
)
def test_digest_references_split_into_host_path_and_digest(reference, parts):
    parsed = parse_digest_reference(reference)
    assert tuple(parsed) == parts and str(parsed) == reference
    assert split_digest_reference(reference) == (f"{parts[0]}/{parts[1]}", DIGEST) and is_digest_reference(reference)


@pytest.mark.parametrize(
    "reference",
    [
        "ghcr.io/alphastorm/ninfer-runtime:v0.7.0",  # a tag moves
        f"ghcr.io/alphastorm/ninfer-runtime:v0.7.0@{DIGEST}",  # tag and digest: the tag would be ignored, so refused
        f"ghcr.io/Alphastorm/ninfer@{DIGEST}",  # repository paths are lowercase
        f"ghcr.io/a..b/c@{DIGEST}",
        f"ghcr.io/-a/c@{DIGEST}",
        f"-ghcr.io/a@{DIGEST}",  # a DNS label does not start with '-'
        f"ghcr.io/a@sha256:{'AB' * 32}",  # digests are lowercase hex
        f"ghcr.io/a@sha512:{'ab' * 64}",
        f"alphastorm/ninfer@{DIGEST}@{DIGEST}",
        f"ghcr.io/a@{DIGEST}\n",
        None,
        42,
    ],
)
def test_anything_but_a_digest_pinned_reference_is_refused(reference):
    assert split_digest_reference(reference) is None and not is_digest_reference(reference)
    with pytest.raises(InputError) as caught:
        parse_digest_reference(reference, field="components.ninfer.oci_reference", file="manifest.json")
    assert caught.value.field == "components.ninfer.oci_reference" and "is not a digest-pinned image reference" in str(caught.value)
    assert "never a tag" in str(caught.value)


def test_the_parts_of_the_grammar():
    assert is_tag("v0.7.0-qwen38-5090-beta.2") and is_tag("_x") and is_tag("a" * 128)
    assert not is_tag("a" * 129) and not is_tag(".x") and not is_tag("-x") and not is_tag("a/b")
    assert is_host("ghcr.io") and is_host("127.0.0.1:5000") and is_host("[::1]") and not is_host("a_b.io") and not is_host("a.io:123456")
    assert is_repository_path("library/ubuntu") and not is_repository_path("Library/ubuntu") and not is_repository_path("a//b")
    assert looks_like_host("ghcr.io") and looks_like_host("localhost") and looks_like_host("host:5000") and not looks_like_host("nvidia")
    assert DigestReference("ghcr.io", "a/b", DIGEST).repository == "ghcr.io/a/b"
