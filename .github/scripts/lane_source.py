"""Print a lane's pinned source as URL@COMMIT for `build --source` (used by release.yml).

A release is built from the exact commit its lane file pins, never from the embedded
sample runtime; a lane without a pinned commit stops the job with an error annotation.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path


def main(lane: str) -> int:
    path = Path("runtime/lanes") / f"{lane}.toml"
    source = tomllib.loads(path.read_text(encoding="utf-8")).get("source", {})
    commit = source.get("commit")
    if not isinstance(commit, str) or len(commit) != 40:
        note = source.get("note", "")
        print(f"::error file={path}::lane {lane} pins no full source commit, so it cannot be built for a release. {note}", file=sys.stderr)
        return 1
    print(f"{source['repository']}@{commit}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
