"""Claims of the documents that a newcomer or an auditor acts on, checked against the repository (#27 §6).

Each of these was false once: the auditor's walk-through named a release no tree is, the README never said
which `python` runs `python -m pipeline`, and nox's `uv binary not found.` read as a missing tool.
"""

from __future__ import annotations

import re

from repokit import ROOT

DOCUMENTS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
PLACEHOLDER = "vX.Y.Z"


def test_every_release_a_document_sets_or_opens_is_a_tree_of_this_repository():
    """`RELEASE=...` in a command and `manifests/<release>` paths name a release folder that exists (or the placeholder)."""
    named = 0
    for document in DOCUMENTS:
        text = document.read_text(encoding="utf-8")
        for release in re.findall(r"\bRELEASE=(v[0-9A-Za-z.-]+)", text) + re.findall(r"\bmanifests/(v\d+\.\d+\.\d+[0-9A-Za-z.-]*?)(?=[/\s`\"')]|$)", text):
            named += 1
            assert release == PLACEHOLDER or (ROOT / "manifests" / release).is_dir(), f"{document.name} names {release}, which no tree in manifests/ is"
    assert named >= 3  # the check reads the documents it means to


def test_the_auditors_walk_through_installs_from_the_release_and_audits_a_placeholder_release():
    text = (ROOT / "docs" / "audit-and-sign.md").read_text(encoding="utf-8")
    walk = text[text.index("### An auditor's whole run"):]
    walk = walk[: walk.index("\n### ", 1)] if "\n### " in walk[1:] else walk
    assert f"RELEASE={PLACEHOLDER}" in walk
    assert "pip install --require-hashes -r omp_ninfer_pipeline-" in walk and "pip install --no-deps ./omp_ninfer_pipeline-" in walk


def test_the_readme_says_which_python_runs_the_pipeline_and_what_nox_first_line_means():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "`.nox/pipeline-env/bin/python -m pipeline" in readme
    explained = readme[readme.index("`nox > uv binary not found.`"):][:300]
    assert "nothing is missing" in explained
