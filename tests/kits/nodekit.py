"""The pinned node tools of tools/node (package.json, package-lock.json) for the suite's cross-checks.

Node policy: in CI (`CI` set, as `.ci/run` runs) a missing node fails the test, since `.ci/run`
installs it.  Locally, a machine without node skips with the reason and the install command (node is
not a Python dependency, so a developer may lack it); a machine with node but without the pinned
package, or with another version than the lock pins, fails, naming the one command that fixes it.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest
from repokit import ROOT

NODE_TOOLS = ROOT / "tools" / "node"


def pinned_version(library: str) -> str:
    lock = json.loads((NODE_TOOLS / "package-lock.json").read_text())
    return lock["packages"][f"node_modules/{library}"]["version"]


def node_command(script: str, *libraries: str, purpose: str) -> list[str]:
    """`[node, tools/node/<script>]`, once node and each library at its locked version are there (else skip/fail as above)."""
    node = shutil.which("node")
    if node is None:
        message = f"node is not installed: {purpose} needs it (Debian: apt-get install nodejs npm; then npm ci --prefix tools/node)"
        if os.environ.get("CI"):
            pytest.fail(message + "; .ci/run installs it, so CI must have it")
        pytest.skip(message)
    for library in libraries:
        installed = NODE_TOOLS / "node_modules" / library / "package.json"
        if not installed.is_file():
            pytest.fail(f"{library} is not installed in tools/node: run 'npm ci --prefix tools/node' (nox -s tests and .ci/run do)")
        version = json.loads(installed.read_text())["version"]
        pinned = pinned_version(library)
        if version != pinned:
            pytest.fail(f"tools/node has {library} {version}, but package-lock.json pins {pinned}: run 'npm ci --prefix tools/node'")
    return [node, str(NODE_TOOLS / script)]
