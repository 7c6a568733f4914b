from __future__ import annotations

import pytest

from pipeline.errors import BuildFailure, InputError, IntegrityError
from pipeline.formats.identity import (
    IDENTITY_KEYS,
    MARKER,
    embedded_identity,
    parse_version_line,
    require_identical,
)

SHA_A = "a" * 40
SHA_B = "b" * 40
LINE = (
    f"ninfer-serve upstream_base_sha={SHA_A} patch_stack_sha={SHA_B} build_profile=generic build_type=Release "
    "cxx_compiler=GNU-12.2.0 cuda_compiler=NVIDIA-13.1.115 cuda_toolkit=13.1.115 cuda_architecture=120a source_dirty=false\n"
)


def test_parse_version_line():
    identity = parse_version_line(LINE, binary="ninfer-serve", origin="x")
    assert tuple(identity.values) == IDENTITY_KEYS
    assert identity.values["cuda_architecture"] == "120a"
    assert identity.text() == LINE.split(" ", 1)[1].strip()


@pytest.mark.parametrize(
    ("line", "binary", "message"),
    [
        (LINE, "ninfer", "another binary name"),
        (LINE.replace("build_type=Release ", ""), "ninfer-serve", "keys differ"),
        (LINE.replace("build_profile=generic build_type=Release", "build_type=Release build_profile=generic"), "ninfer-serve", "keys differ"),
        (LINE + LINE, "ninfer-serve", "exactly one line"),
        (LINE.replace(SHA_A, "abc"), "ninfer-serve", "not a 40-hex commit"),
        (LINE.replace("source_dirty=false", "source_dirty=maybe"), "ninfer-serve", "true or false"),
        (LINE.replace("generic", "a b"), "ninfer-serve", "key=value"),
    ],
)
def test_bad_version_lines(line, binary, message):
    with pytest.raises(InputError, match=message):
        parse_version_line(line, binary=binary, origin="x")


def test_embedded_identity_from_bytes(tmp_path):
    text = LINE.split(" ", 1)[1].strip().encode()
    path = tmp_path / "ninfer-serve.exe"
    path.write_bytes(b"MZ\x90\x00junk" + MARKER + text + b"\x00more")
    identity = embedded_identity(path)
    assert identity is not None and identity.values["patch_stack_sha"] == SHA_B
    path.write_bytes(b"no marker here")
    assert embedded_identity(path) is None
    path.write_bytes(MARKER + text + b"\x00" + MARKER + text + b"\x00")
    with pytest.raises(IntegrityError, match="more than one"):
        embedded_identity(path)


def test_identities_must_agree():
    one = parse_version_line(LINE, binary="ninfer-serve", origin="x")
    other = parse_version_line(LINE.replace("ninfer-serve", "ninfer", 1).replace("120a", "89"), binary="ninfer", origin="y")
    assert require_identical({"ninfer-serve": one, "ninfer": one}) is one
    with pytest.raises(BuildFailure, match="disagree") as info:
        require_identical({"ninfer-serve": one, "ninfer": other})
    assert info.value.field == "cuda_architecture"
