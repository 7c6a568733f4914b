"""Print the packages that provide a lane's build-host dependencies (used by release.yml).

`python .github/scripts/host_packages.py <lane-id> debian` prints the Debian/Ubuntu
packages of the lane file's [[build.host_dependencies]] that apply to linux-x86_64,
`... vcpkg` the vcpkg ports of those that apply to windows-x86_64, space-separated on
one line. Standard library only (it runs before the pipeline is installed); the
pipeline's build preflight checks the same entries (pipeline/lanes.py), so a name
that is malformed here stops the job instead of reaching the package manager.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

HOSTS = {"debian": "linux-x86_64", "vcpkg": "windows-x86_64"}
NAMES = {"debian": re.compile(r"[a-z0-9][a-z0-9+.-]+"), "vcpkg": re.compile(r"[a-z0-9][a-z0-9-]*(\[[a-z0-9,-]+\])?")}


def main(lane: str, manager: str) -> int:
    if manager not in HOSTS or not re.fullmatch(r"rtx[0-9]{4}-[a-z-]+", lane):
        print("usage: host_packages.py <lane-id> debian|vcpkg", file=sys.stderr)
        return 2
    path = Path("runtime/lanes") / f"{lane}.toml"
    entries = tomllib.loads(path.read_text(encoding="utf-8")).get("build", {}).get("host_dependencies", [])
    packages: list[str] = []
    for index, entry in enumerate(entries):
        if HOSTS[manager] not in entry.get("hosts", list(HOSTS.values())):
            continue
        name = entry.get(manager)
        if not isinstance(name, str) or not NAMES[manager].fullmatch(name):
            print(f"::error file={path}::build.host_dependencies[{index}].{manager}: {name!r} is not a {manager} package name", file=sys.stderr)
            return 1
        if name not in packages:
            packages.append(name)
    print(" ".join(sorted(packages)))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]) if len(sys.argv) == 3 else main("", ""))
