"""`host-dependencies.toml`: a source tree's own declaration of what its build host must provide.

A lane file declares the host dependencies of its engine source in
`[[build.host_dependencies]]` (pipeline/lanes.py).  A source tree may carry
its own declaration at its root instead, in the same entry schema:

    schema_version = 1
    [[host_dependencies]]
    name = "c++"            # a pkg-config module or a tool's executable
    kind = "tool"           # "pkg-config" | "tool"
    min_version = "10"      # optional floor
    debian = "g++"          # where it comes from on Debian/Ubuntu hosts
    vcpkg = "..."           # ... and on Windows (vcpkg port)
    hosts = ["linux-x86_64"]  # optional: the host platforms it applies to

The embedded sample runtime does (it needs only a host C++ compiler); the
NInfer engine does not, so its lane file's declaration applies.  The file is
read from the exact source bytes (the commit or the source archive), so the
declaration is part of the source identity the build records.
"""

from __future__ import annotations

import tomllib
from typing import Any

from pipeline.errors import InputError
from pipeline.formats.lanes import HostDependency, parse_host_dependencies
from pipeline.util.schema import Field, read_table

FILE_NAME = "host-dependencies.toml"
MAX_BYTES = 64 << 10

_TOP = {
    "schema_version": Field(int, check=lambda v: v == 1, expected="1"),
    "host_dependencies": Field(list, items=dict),
}


def parse(data: bytes, *, origin: str, build_host: str | None = None) -> tuple[HostDependency, ...]:
    """The entries of a source's declaration; every defect names `origin` and the key.

    With the lane's `build_host`, the declaration is held to the lane file's rules for that host (each entry
    says where it comes from there; a Linux build declares its C++ compiler): it replaces the lane's."""
    if len(data) > MAX_BYTES:
        raise InputError("is too large for a host dependency declaration", file=origin, found=f"{len(data)} bytes", expected=f"at most {MAX_BYTES} bytes")
    if data.startswith(b"\xef\xbb\xbf") or b"\r" in data:
        raise InputError("must be UTF-8 without BOM and with LF line endings", file=origin)
    try:
        document: Any = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise InputError(f"is not valid UTF-8 TOML: {exc}", file=origin) from None
    top = read_table(document, _TOP, file=origin)
    return parse_host_dependencies(top["host_dependencies"], file=origin, prefix="host_dependencies", build_host=build_host)
