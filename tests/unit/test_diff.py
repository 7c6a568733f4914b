"""`diff` on the seeded trees v0.13.0 -> v0.13.1, on a manifest URL, and its exit codes (0 same, 1 differ, 2 bad input)."""

from __future__ import annotations

import http.server
import json
import re
import shutil

import pytest
from loopback import LoopbackServer
from repokit import ROOT

from pipeline.cli import main
from pipeline.tools.diff import compare, render_markdown
from pipeline.tools.diff_sources import load_source

V0, V1 = str(ROOT / "manifests" / "v0.13.0"), str(ROOT / "manifests" / "v0.13.1")


def _changes(a=V0, b=V1):
    return compare(load_source(a), load_source(b))


def test_the_seeded_trees_differ_by_the_rebound_5090_lane_and_the_qualification_records():
    changes = _changes()
    by_section: dict[str, list] = {}
    for change in changes:
        by_section.setdefault(change.section, []).append(change)
    # the order the issue asks for: product first, then lanes, then the model, qualification, compatibility
    assert list(by_section) == ["product and channel", "lane rtx3090-windows-native", "lane rtx4090-windows-native", "lane rtx5090-container",
                                "model artefact", "qualification results and gates", "compatibility", "other manifest fields"]
    rebound = by_section["lane rtx5090-container"]
    assert [(c.group, c.path, c.change, c.old, c.new) for c in rebound] == [("component tag and cut", "rebound_from", "changed", None, "v0.13.0")]
    assert {c.change for c in by_section["lane rtx4090-windows-native"]} == {"added"}  # v0.13.0 records no native lane
    qualification = {(c.path, c.change) for c in by_section["qualification results and gates"]}
    assert ("summary.lanes.rtx5090-container.rebound_from", "changed") in qualification
    assert ("summary.lanes.rtx4090-windows-native", "added") in qualification
    blockers = [c for c in changes if c.path in ("summary.remaining_release_gates", "publication.blockers")]
    removed = [c for c in blockers if c.change == "removed" and c.old.startswith("reconstruction:")]
    # One item, not a shifted list; and listed once: the summary's remaining gates copy the manifest's blockers.
    assert [(c.section, c.path) for c in removed] == [("other manifest fields", "publication.blockers")]
    assert not [c for c in blockers if c.path == "summary.remaining_release_gates"]
    assert [c.path for c in by_section["product and channel"]] == ["predecessor", "release", "title"]


def test_identical_trees_have_no_differences_and_exit_0(capsys):
    assert _changes(V1, V1) == []
    assert main(["diff", V1, V1]) == 0
    assert capsys.readouterr().out == "no differences between v0.13.1 and v0.13.1\n"


def test_differences_exit_1_in_every_form(capsys):
    assert main(["diff", V0, V1]) == 1
    text = capsys.readouterr().out
    assert re.match(r"\d+ differences from v0\.13\.0 to v0\.13\.1\n", text) and "lane rtx5090-container\n  component tag and cut rebound_from: (none) -> v0.13.0\n" in text
    assert main(["diff", V0, V1, "--json"]) == 1
    document = json.loads(capsys.readouterr().out)
    assert document["a"] == "v0.13.0" and document["b"] == "v0.13.1" and document["identical"] is False
    assert {"section": "lane rtx5090-container", "group": "component tag and cut", "path": "rebound_from", "change": "changed", "old": None, "new": "v0.13.0"} in document["differences"]
    assert main(["diff", V0, V1, "--markdown"]) == 1
    markdown = capsys.readouterr().out
    assert markdown.startswith("## Changes since `v0.13.0`\n\n### product and channel\n")
    assert "### lane `rtx5090-container`\n\n- component tag and cut `rebound_from`: (none) -> `v0.13.0`\n" in markdown
    outputs = []
    for _ in range(2):  # the same trees give the same bytes
        main(["diff", V0, V1, "--markdown"])
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1] == markdown


def test_bad_input_exits_2_naming_it(tmp_path, capsys):
    assert main(["diff", str(tmp_path / "nowhere"), V1]) == 2
    err = capsys.readouterr().err
    assert "error[usage]" in err and "nowhere" in err and "is neither a release tree, a manifest URL nor an asset-set folder" in err
    broken = tmp_path / "v9.9.9"
    shutil.copytree(V1, broken)
    (broken / "manifest.json").write_text('{"artifact_type": "omp_ninfer_release_manifest", "artifact_type": "x"}')
    assert main(["diff", V0, str(broken)]) == 2
    assert "manifest.json" in capsys.readouterr().err
    (broken / "manifest.json").write_text(json.dumps({"artifact_type": "omp_ninfer_product_qualification"}))
    assert main(["diff", V0, str(broken)]) == 2
    assert "is not the release tree document it is named as" in capsys.readouterr().err
    (broken / "manifest.json").unlink()
    (broken / "manifest.json").symlink_to(ROOT / "manifests" / "v0.13.0" / "manifest.json")
    assert main(["diff", V0, str(broken)]) == 2  # a link is not a file of the tree
    assert "is not a plain file of the release tree" in capsys.readouterr().err


def test_hostile_text_cannot_become_markup_in_the_markdown():
    from markdown_it import MarkdownIt

    from pipeline.tools.diff import Change

    hostile = "<img src=x onerror=alert(1)> [link](http://evil) `code` @org/team #12 *em*\r# heading\u2028\x1b[31m"
    changes = [Change("product and channel", "", "title", "changed", "a", hostile),
               Change("lane x", "SBOM components", "pkg:npm/@evil/<b>x</b>`", "added", None, {"licence": "<script>"})]
    markdown = render_markdown("v1 <i>@x</i>", changes)
    html = MarkdownIt("commonmark").render(markdown)  # what a release-notes page would show
    assert "<img" not in html and "<a " not in html and "<script" not in html and "<b>" not in html and "<i>" not in html
    assert "<h1>" not in html  # a carriage return in data cannot start a block
    assert "\r" not in markdown and "\x1b" not in markdown and "\u2028" not in markdown
    # every piece of data sits inside a code span: no @mention or #reference, no emphasis
    assert "<code>&lt;img src=x onerror=alert(1)&gt; [link](http://evil) `code` @org/team #12 *em*\\x0d# heading\\u2028\\x1b[31m</code>" in html
    assert "<code>pkg:npm/@evil/&lt;b&gt;x&lt;/b&gt;`</code>" in html and "<h2>Changes since <code>v1 &lt;i&gt;@x&lt;/i&gt;</code></h2>" in html


@pytest.fixture()
def manifest_server():
    files = {f"/{name}": (ROOT / "manifests" / "v0.13.1" / name).read_bytes() for name in ("manifest.json", "qualification.json", "compatibility.json")}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            data = files.get(self.path, b"x" * (5 << 20))
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = LoopbackServer()
    server.serve(Handler)
    server.files = files
    yield server
    server.close()


def test_a_manifest_url_is_compared_like_its_tree(manifest_server, capsys):
    url = manifest_server.url("/manifest.json")
    changes = compare(load_source(url), load_source(V1))
    # the seeded manifest binds its summary and authority by path only (no URL yet): those two are absent
    assert changes and {c.section for c in changes} <= {"qualification results and gates", "compatibility"}
    assert main(["diff", manifest_server.url("/huge.json"), V1]) == 2  # bounded: a 5 MiB "manifest" is refused
    assert "error[" in capsys.readouterr().err


def test_a_published_manifest_brings_the_documents_it_binds_by_hash(manifest_server, capsys):
    from pipeline.util.hashing import sha256_bytes

    manifest = json.loads(manifest_server.files["/manifest.json"])
    manifest["qualification"]["public_url"] = manifest_server.url("/qualification.json")
    manifest["compatibility"]["public_url"] = manifest_server.url("/compatibility.json")
    assert manifest["qualification"]["summary_sha256"] == sha256_bytes(manifest_server.files["/qualification.json"])
    manifest_server.files["/published.json"] = json.dumps(manifest, sort_keys=True).encode()
    published = load_source(manifest_server.url("/published.json"))
    # the same documents as the tree's; only the URL the manifest now names differs
    assert [(c.section, c.path) for c in compare(published, load_source(V1))] == [("qualification results and gates", "manifest.public_url"),
                                                                                 ("other manifest fields", "compatibility.public_url")]
    manifest["compatibility"]["sha256"] = "0" * 64  # the authority's bytes are not the ones bound
    manifest_server.files["/tampered.json"] = json.dumps(manifest, sort_keys=True).encode()
    assert main(["diff", manifest_server.url("/tampered.json"), V1]) == 2
    assert "names a document whose bytes do not have the bound hash" in capsys.readouterr().err


@pytest.mark.parametrize("lane_id", ["../../outside", None])
def test_a_row_id_is_a_bare_name_never_a_path_out_of_the_tree(tmp_path, capsys, lane_id):
    tree = tmp_path / "tree" / "v0.13.1"
    shutil.copytree(V1, tree)
    (tree / "qualification").mkdir()
    (tmp_path / "tree" / "outside.json").write_text("not the tree's")  # v0.13.1/qualification/../../outside.json
    manifest = json.loads((tree / "manifest.json").read_text())
    manifest["components"]["ninfer"]["id"] = lane_id
    (tree / "manifest.json").write_text(json.dumps(manifest))
    assert main(["diff", V1, str(tree)]) == 2
    err = capsys.readouterr().err
    assert "has a lane row whose id" in err and "outside.json" not in err


@pytest.mark.parametrize(("document", "field"), [
    ({"components": 5}, "components"),
    ({"components": [{"name": "a", "properties": 7}]}, "components[0].properties"),
    ({"components": [{"name": "a", "licenses": 7}]}, "components[0].licenses"),
])
def test_an_sbom_of_wrong_shape_is_refused_naming_the_field(tmp_path, document, field):
    from pipeline.errors import InputError
    from pipeline.formats.sbom import cdx_components

    path = tmp_path / "set.cdx.json"
    path.write_text(json.dumps(document))
    with pytest.raises(InputError) as caught:
        cdx_components(path)
    assert caught.value.field == field


def test_an_sbom_components_odd_values_are_read_as_absent(tmp_path):
    from pipeline.formats.sbom import cdx_components

    path = tmp_path / "set.cdx.json"
    path.write_text(json.dumps({"components": [
        {"name": "zlib", "version": 1, "purl": "pkg:generic/zlib@1.3", "properties": [{"name": ["unhashable"], "value": "x"}],
         "licenses": [{"license": {"id": ["MIT"]}}, {"expression": "Zlib"}]},
    ]}))
    assert cdx_components(path) == {"pkg:generic/zlib": {"name": "zlib", "version": None, "licence": "Zlib", "purl": "pkg:generic/zlib@1.3"}}


def test_the_text_form_shows_control_characters_and_huge_values_escaped_and_cut():
    from pipeline.tools.diff import MAX_SHOWN, Change, render_text

    text = render_text("a", "b", [Change("product and channel", "", "title", "changed", "\x1b]0;pwned\x07", "y" * 10_000)])
    assert "\x1b" not in text and "\\x1b]0;pwned\\x07" in text
    assert "y" * (MAX_SHOWN - 3) + "..." in text and "y" * MAX_SHOWN not in text


@pytest.mark.parametrize(("where", "edit"), [
    ("components.omp", lambda m: m["components"]["omp"].update(version="99.0.0")),
    ("publication.blockers", lambda m: m["publication"]["blockers"].append("pins: one more")),
    ("signing", lambda m: m["signing"].update(method="none")),
    ("lane row repository", lambda m: m["components"]["ninfer"].update(repository="https://github.com/someone/else")),
])
def test_a_difference_in_any_manifest_field_is_reported(tmp_path, capsys, where, edit):
    """Fields outside the named sections (OMP, blockers, signing, a row's repository) are differences too."""
    tree = tmp_path / "v0.13.1"
    shutil.copytree(V1, tree)
    manifest = json.loads((tree / "manifest.json").read_text())
    edit(manifest)
    (tree / "manifest.json").write_text(json.dumps(manifest))
    assert main(["diff", V1, str(tree), "--json"]) == 1, where
    differences = json.loads(capsys.readouterr().out)["differences"]
    assert len(differences) == 1 and differences[0]["section"] in ("other manifest fields", "lane rtx5090-container"), differences


def test_a_repeated_item_of_a_list_is_a_difference():
    from pipeline.tools.diff_sources import _keyed

    a = {"other": _keyed({"limitations": ["one", "two"]})}
    b = {"other": _keyed({"limitations": ["one", "two", "one"]})}
    changes = compare(a, b)
    assert [(c.path, c.change, c.new) for c in changes] == [("limitations", "added", "one (#2)")]


def test_two_versions_of_one_package_in_an_sbom_are_two_components(tmp_path):
    from pipeline.formats.sbom import cdx_components

    path = tmp_path / "set.cdx.json"
    path.write_text(json.dumps({"components": [{"name": "zlib", "version": "1.2", "purl": "pkg:generic/zlib@1.2"},
                                               {"name": "zlib", "version": "1.3", "purl": "pkg:generic/zlib@1.3"},
                                               {"name": "crc", "version": "1", "purl": "pkg:generic/crc@1"}]}))
    found = cdx_components(path)
    assert sorted(found) == ["pkg:generic/crc", "pkg:generic/zlib@1.2", "pkg:generic/zlib@1.3"]


def test_every_value_from_data_is_one_whole_code_span_in_the_markdown():
    """Before: plain-looking values were left bare (`www.` became a link on GitHub, `a_b_` or `*x*` emphasis),
    values over 300 characters were cut with '...', and a backtick in data was replaced by another character."""
    from markdown_it import MarkdownIt

    from pipeline.tools.diff import Change

    long = "notes " + "z" * 5000 + " end"
    values = ["www.evil.example", "_emphasis_", "*strong*", "`edge`", "a `` b", " padded ", long, "v1.2.3"]
    changes = [Change("lane www.lane.example", "other row fields", f"field{index}", "changed", "old", value) for index, value in enumerate(values)]
    markdown = render_markdown("www.a.example", changes)
    tokens = MarkdownIt("commonmark").parse(markdown)
    spans = [child.content for token in tokens if token.type == "inline" for child in token.children or [] if child.type == "code_inline"]
    for value in values:
        assert value in spans, f"{value!r} is not one whole code span"  # in full, exactly, backticks and spaces included
    assert "..." not in markdown and long in markdown
    assert "lane www.lane.example" not in markdown and "### lane `www.lane.example`" in markdown
    # Outside the code spans only the report's own words remain: nothing a renderer could link or emphasize.
    html = MarkdownIt("commonmark").render(markdown)
    outside = re.sub(r"<code>.*?</code>", "", html, flags=re.DOTALL)
    assert "www." not in outside and "<em>" not in html and "<strong>" not in html and "<a " not in html


def test_a_tree_made_before_the_review_ledger_reads_no_reviews_toml(tmp_path, capsys):
    """v0.13.x bind no ledger (names.py PRE_REVIEW_LEDGER_RELEASES): a reviews.toml beside them, even a broken one, is not read."""
    from pipeline.formats.release.tree import read_tree

    tree = tmp_path / "v0.13.1"
    shutil.copytree(V1, tree)
    (tree / "reviews.toml").write_bytes(b"release = [not toml\n")
    documents = read_tree(tree)
    assert (documents.reviews, documents.reviews_problem) == (None, None) and "reviews.toml" not in documents.sha256
    assert main(["diff", V1, str(tree)]) == 0 and capsys.readouterr().out == "no differences between v0.13.1 and v0.13.1\n"
