"""`packaging/linux/build-environment.toml`: the pinned build environment of the Linux lanes.

    schema_version = 1
    container = "docker.io/library/debian:bookworm-20251229-slim@sha256:<64 hex>"
    debian_snapshot = "20251229T000000Z"   # snapshot.debian.org's timestamp form
    debian_suite = "bookworm"

The release workflow's Linux build runs in `container` with its packages from the
snapshot, and says so to the build through two environment variables,
`OMP_NINFER_BUILD_CONTAINER` and `OMP_NINFER_DEBIAN_SNAPSHOT`.  `observed()`
validates them against the pin (a value that is not the pinned one is refused: the
provenance would name an environment the bytes did not come from) and returns
what the build identity records (`host_environment.build_environment`), which the
provenance lists among the resolved dependencies.  Unset, the build records
none: a build outside the pinned environment (a maintainer's machine) says nothing
it cannot know.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipeline.errors import EnvironmentProblem, InputError
from pipeline.util.fs import read_bytes_bounded
from pipeline.util.schema import Field, matches, read_table

FILE = Path(__file__).resolve().parents[2] / "packaging" / "linux" / "build-environment.toml"
MAX_BYTES = 16 << 10
CONTAINER_VARIABLE = "OMP_NINFER_BUILD_CONTAINER"
SNAPSHOT_VARIABLE = "OMP_NINFER_DEBIAN_SNAPSHOT"
CONTAINER = r"[a-z0-9]+(?:[._-][a-z0-9]+)*(?:\.[a-z0-9-]+)*(?::[0-9]+)?(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)+:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}@sha256:[0-9a-f]{64}"
SNAPSHOT = r"[0-9]{8}T[0-9]{6}Z"
SNAPSHOT_ARCHIVE = "https://snapshot.debian.org/archive/debian/{date}/"

_TOP = {
    "schema_version": Field(int, check=lambda v: v == 1, expected="1"),
    "container": Field(str, check=matches(CONTAINER), expected="registry/name:tag@sha256:<64 hex>"),
    "debian_snapshot": Field(str, check=matches(SNAPSHOT), expected="a snapshot.debian.org timestamp, e.g. 20251229T000000Z"),
    "debian_suite": Field(str, check=matches(r"[a-z]+"), expected="a Debian suite name, e.g. bookworm"),
}


def read_pin(path: Path = FILE) -> dict[str, Any]:
    data = read_bytes_bounded(path, MAX_BYTES, what="build environment pin")
    try:
        document = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise InputError(f"is not valid UTF-8 TOML: {exc}", file=path) from None
    return read_table(document, _TOP, file=str(path))


def observed(environ: Mapping[str, str] = os.environ, path: Path = FILE) -> dict[str, Any] | None:
    """{container, digest, debian_snapshot, debian_archive} of the pinned environment the build says it runs in, or None."""
    container, snapshot = environ.get(CONTAINER_VARIABLE), environ.get(SNAPSHOT_VARIABLE)
    if container is None and snapshot is None:
        return None
    pin = read_pin(path)
    for variable, value, key in ((CONTAINER_VARIABLE, container, "container"), (SNAPSHOT_VARIABLE, snapshot, "debian_snapshot")):
        if value != pin[key]:
            raise EnvironmentProblem(
                f"{variable} does not name the pinned build environment",
                file=path,
                field=key,
                found=value,
                expected=pin[key],
                why="the provenance records the container and the Debian snapshot the build ran in; another value would name an environment the bytes did not come from",
                fix=f"set both {CONTAINER_VARIABLE} and {SNAPSHOT_VARIABLE} to the pin (the release workflow does), or neither outside it",
            )
    assert container is not None and snapshot is not None
    return {
        "container": container,
        "digest": container.rsplit("@", 1)[1],
        "debian_snapshot": snapshot,
        "debian_archive": SNAPSHOT_ARCHIVE.format(date=snapshot),
    }


def valid_recorded(value: Any) -> bool:
    """Whether a build identity's `build_environment` has the shape `observed` gives (provenance reads it)."""
    return (
        isinstance(value, dict)
        and set(value) == {"container", "digest", "debian_snapshot", "debian_archive"}
        and isinstance(value["container"], str) and re.fullmatch(CONTAINER, value["container"]) is not None
        and value["digest"] == value["container"].rsplit("@", 1)[1]
        and isinstance(value["debian_snapshot"], str) and re.fullmatch(SNAPSHOT, value["debian_snapshot"]) is not None
        and value["debian_archive"] == SNAPSHOT_ARCHIVE.format(date=value["debian_snapshot"])
    )
