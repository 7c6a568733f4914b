"""Print the packages that provide a lane's build-host dependencies (used by release.yml).

`python .github/scripts/host_packages.py <lane-id> debian` prints the Debian/Ubuntu
packages of the lane file's [[build.host_dependencies]] that apply to linux-x86_64,
`... vcpkg` the vcpkg ports of those that apply to windows-x86_64, space-separated on
one line. `python .github/scripts/host_packages.py vcpkg-manifest <lane-id>...` prints
the vcpkg.json (manifest mode) that installs the ports of all those lanes, features
merged per port, with packaging/windows/vcpkg.toml's pinned `builtin-baseline`;
`... vcpkg-baseline` prints that commit alone. `... build-environment` prints the Linux
build environment's pin (packaging/linux/build-environment.toml) as `key=value` lines for
`$GITHUB_OUTPUT`, checked by the pipeline's own reader (the one command here that needs the
pipeline installed). Otherwise standard library only (it runs before
the pipeline is installed); the pipeline's build preflight checks the same entries
(pipeline/lanes.py), so a name that is malformed here stops the job instead of
reaching the package manager.
"""

from __future__ import annotations

import json
import re
import sys
import tomllib
from pathlib import Path

HOSTS = {"debian": "linux-x86_64", "vcpkg": "windows-x86_64"}
VCPKG_PIN = Path("packaging/windows/vcpkg.toml")
LANE = re.compile(r"rtx[0-9]{4}-[a-z-]+")
USAGE = "usage: host_packages.py <lane-id> debian|vcpkg | vcpkg-manifest <lane-id>... | vcpkg-baseline | build-environment"
NAMES = {"debian": re.compile(r"[a-z0-9][a-z0-9+.-]+"), "vcpkg": re.compile(r"[a-z0-9][a-z0-9-]*(\[[a-z0-9,-]+\])?")}


def ports(lane: str, manager: str) -> list[str] | None:
    """The lane's packages for `manager`, sorted and unique; None (after an ::error line) when one is malformed."""
    path = Path("runtime/lanes") / f"{lane}.toml"
    entries = tomllib.loads(path.read_text(encoding="utf-8")).get("build", {}).get("host_dependencies", [])
    packages: list[str] = []
    for index, entry in enumerate(entries):
        if HOSTS[manager] not in entry.get("hosts", list(HOSTS.values())):
            continue
        name = entry.get(manager)
        if not isinstance(name, str) or not NAMES[manager].fullmatch(name):
            print(f"::error file={path}::build.host_dependencies[{index}].{manager}: {name!r} is not a {manager} package name", file=sys.stderr)
            return None
        if name not in packages:
            packages.append(name)
    return sorted(packages)


def vcpkg_pin() -> dict | None:
    pin = tomllib.loads(VCPKG_PIN.read_text(encoding="utf-8"))
    baseline = pin.get("builtin_baseline")
    if type(pin.get("schema_version")) is not int or pin["schema_version"] != 1 or not isinstance(baseline, str) or not re.fullmatch(r"[0-9a-f]{40}", baseline):
        print(f"::error file={VCPKG_PIN}::builtin_baseline: {baseline!r} is not a full 40-hex microsoft/vcpkg commit (schema_version 1)", file=sys.stderr)
        return None
    return pin


def vcpkg_manifest(lanes: list[str]) -> dict | None:
    """vcpkg.json for the lanes' ports: one dependency per port, its features merged, the pinned baseline."""
    features: dict[str, set[str]] = {}
    for lane in lanes:
        found = ports(lane, "vcpkg")
        if found is None:
            return None
        for port in found:
            name, _, listed = port.partition("[")
            features.setdefault(name, set()).update(f for f in listed.rstrip("]").split(",") if f)
    pin = vcpkg_pin()
    if pin is None:
        return None
    dependencies = []
    for name, listed in sorted(features.items()):
        entry: dict = {"name": name}
        if "core" in listed:  # `port[core,…]` on vcpkg's command line: no default features
            entry["default-features"] = False
        if listed - {"core"}:
            entry["features"] = sorted(listed - {"core"})
        dependencies.append(entry if len(entry) > 1 else name)
    return {"builtin-baseline": pin["builtin_baseline"], "dependencies": dependencies}


def main(lane: str, manager: str) -> int:
    if manager not in HOSTS or not LANE.fullmatch(lane):
        print(USAGE, file=sys.stderr)
        return 2
    packages = ports(lane, manager)
    if packages is None:
        return 1
    print(" ".join(packages))
    return 0


def build_environment() -> int:
    """The pinned container and Debian snapshot, validated by pipeline/formats/build_environment.py (one reader)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from pipeline.errors import PipelineError
    from pipeline.formats.build_environment import FILE, read_pin

    try:
        pin = read_pin()
    except PipelineError as error:
        print(f"::error file={FILE.name}::{error.render()}", file=sys.stderr)
        return 1
    for key in ("container", "debian_snapshot", "debian_suite"):
        print(f"{key}={pin[key]}")
    return 0


def cli(argv: list[str]) -> int:
    if argv == ["build-environment"]:
        return build_environment()
    if argv[:1] == ["vcpkg-baseline"] and len(argv) == 1:
        pin = vcpkg_pin()
        if pin is None:
            return 1
        print(pin["builtin_baseline"])
        return 0
    if argv[:1] == ["vcpkg-manifest"]:
        lanes = argv[1:]
        if not lanes or not all(LANE.fullmatch(lane) for lane in lanes):
            print(USAGE, file=sys.stderr)
            return 2
        manifest = vcpkg_manifest(lanes)
        if manifest is None:
            return 1
        print(json.dumps(manifest, indent=2, sort_keys=True))
        return 0
    return main(*argv) if len(argv) == 2 else main("", "")


def guarded(argv: list[str]) -> int:
    """cli(), with an unreadable or malformed lane file or pin reported as a GitHub error line, not a traceback."""
    try:
        return cli(argv)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, AttributeError, TypeError, KeyError) as exc:
        print(f"::error::host_packages.py {' '.join(argv)}: the lane files or {VCPKG_PIN} cannot be read as expected ({type(exc).__name__}: {exc})", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(guarded(sys.argv[1:]))
