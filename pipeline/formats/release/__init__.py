"""The product release tree `manifests/<release>/` (docs/release-tree.md is the contract).

One module per job, so that compose (which writes a tree) and verify (which
checks one) share every rule and neither borrows from the other:

- `names`     file names, type strings of the tree's own documents, release names
              (`RELEASE_RE`), URLs and image references, the state and blocker vocabulary;
- `spec`      `release.toml`, the one hand-written input: reading, checking, writing;
- `manifest`  the release manifest: its one reader (path or URL) and one function per question
              (lane rows, sections, the published set, blockers);
- `evidence`  reading the evidence a tree binds (copied records, checksum files, pins);
- `derive`    every derived record from release.toml and the evidence (the hash chain);
- `render`    the Markdown renderings COMPATIBILITY.md and NOTES.md;
- `rules`     the state rules, the acceptance rules and JSON differences;
- `problems`  the Problem records derivation and the checks collect;
- `contract`  the checks of a whole tree against the contract (`verify_release`), and
              the verification report document.

The lane receipt and the image publication receipt copied into a tree are
owned by pipeline/formats/receipts.py, the acceptance record by
pipeline/formats/acceptance.py.
"""
