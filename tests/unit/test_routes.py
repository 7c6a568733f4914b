"""The strict fence scanner of route documents (pipeline/formats/routes.py) and the real documents."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from repokit import ROOT

from pipeline.errors import InputError
from pipeline.formats.routes import scan

GOOD = """# Guide

Intro prose with `inline code`.

```parameters
# a comment
GREETING: text = hello
NEEDED: release
[OPTIONAL]: path
```

## Before you start

```sh example
git clone https://example.invalid/repo.git
```

## Route `linux-one`: the first route

Prose between steps.

```sh
echo "$GREETING"
X=1
```

```text
hello
```

```
untyped output
```

```sh example
rm -rf "$HOME"
```

````sh requires=gpu,oci-engine
cat <<'EOF'
```
EOF
````

### A sub-heading inside the route

```sh
echo last
```

## Notes

```sh example
echo not a step
```

## Route `win`: a PowerShell route

```parameters
LANE: lane = rtx4090-windows-native
```

```powershell
Write-Output 'one'
```
"""


def test_a_document_scans_into_routes_steps_exact_bytes_and_lines():
    data = GOOD.encode()
    doc = scan(data, "docs/GUIDE.md")
    assert list(doc.routes) == ["linux-one", "win"]
    assert doc.sha256 == hashlib.sha256(data).hexdigest() and doc.bytes == len(data)
    one = doc.routes["linux-one"]
    assert (one.title, one.shell, one.examples) == ("the first route", "sh", 1)
    assert [s.text for s in one.steps] == ['echo "$GREETING"\nX=1\n', "cat <<'EOF'\n```\nEOF\n", "echo last\n"]
    assert [s.requires for s in one.steps] == [(), ("gpu", "oci-engine"), ()]
    lines = data.decode().split("\n")
    for step in one.steps:
        assert step.sha256 == hashlib.sha256(step.text.encode()).hexdigest() and step.bytes == len(step.text.encode())
        # the recorded line range is exactly the block's content in the document
        assert "\n".join(lines[step.line_start - 1: step.line_end]) + "\n" == step.text
    assert [s.index for s in one.steps] == [1, 2, 3]
    # document-level parameters apply to every route, route-level ones add to them
    params = {p.name: (p.kind, p.default, p.required) for p in doc.parameters_of("win")}
    assert params == {"GREETING": ("text", "hello", False), "NEEDED": ("release", None, True), "OPTIONAL": ("path", None, False), "LANE": ("lane", "rtx4090-windows-native", False)}
    assert {p.name for p in doc.parameters_of("linux-one")} == {"GREETING", "NEEDED", "OPTIONAL"}
    assert doc.routes["win"].shell == "powershell" and doc.routes["win"].steps[0].text == "Write-Output 'one'\n"


def _route(body: str) -> bytes:
    return f"# Doc\n\n## Route `r`: a route\n\n{body}".encode()


REFUSED = [
    (b"\xef\xbb\xbf# Doc\n", None, "byte-order mark"),
    (b"# Doc\r\n", "line 1", "carriage return"),
    (b"# Doc\n\n## Route `r`: x\n\n```sh\necho", None, "newline"),
    (_route("```sh\necho one\n"), "line 5", "never closed"),
    (_route("- item\n\n  ```sh\n  echo indented\n  ```\n"), "line 7", "indented fence"),
    (_route("> ```sh\n> echo quoted\n> ```\n"), "line 5", "blockquote"),
    (_route("<!--\n```sh\necho hidden\n```\n-->\n"), "line 6", "HTML comment"),
    # the second comment on the line stays open over the fence: a browser hides it
    (_route("<!-- a --> <!--\n```sh\necho hidden\n```\n-->\n"), "line 6", "HTML comment"),
    (_route("<!--\nx\n--> <!-- again\n```sh\necho hidden\n```\n-->\n"), "line 8", "HTML comment"),
    (_route("```sh\necho\n```\n<!-- a --> <!--\n"), "line 8", "never closed"),
    (_route("Setext\n------\n\n```sh\necho\n```\n"), "line 6", "setext"),
    (b"# Doc\n\n## Route r: no backticks\n\n```sh\necho\n```\n", "line 3", "starts like a route heading"),
    (b"# Doc\n\n## Route `r`: one\n\n```sh\necho\n```\n\n## Route `r`: two\n\n```sh\necho\n```\n", "line 9", "repeats a route id"),
    (b"# Doc\n\n```sh\necho outside\n```\n\n## Route `r`: x\n\n```sh\necho\n```\n", "line 3", "outside any route"),
    (_route("```sh\n\n```\n"), "line 5", "empty step"),
    (b"# Doc\n\n## Route `r`: x\n\nno steps\n\n## Route `s`: y\n\n```sh\necho\n```\n", "line 3", "has no steps"),
    (_route("```sh\necho\n```\n\n```powershell\nWrite-Output 1\n```\n"), "line 3", "mixes shells"),
    (_route("```bash\necho\n```\n"), "line 5", "other than sh or powershell"),
    (_route("```pwsh\nWrite-Output 1\n```\n"), "line 5", "other than sh or powershell"),
    (_route("```ps1\nWrite-Output 1\n```\n"), "line 5", "other than sh or powershell"),
    (_route("```sh run-me\necho\n```\n"), "line 5", "unknown marker"),
    (_route("```sh requires=quantum\necho\n```\n"), "line 5", "unknown capability"),
    (_route("```sh requires=gpu,gpu\necho\n```\n"), "line 5", "repeats a capability"),
    (_route("```sh example requires=gpu\necho\n```\n"), "line 5", "cannot require"),
    (_route("```parameters\nHOME: path = /tmp\n```\n```sh\necho\n```\n"), "line 6", "runner sets itself or bash sets or reads itself"),
    (_route("```parameters\n[PWD]: path\n```\n```sh\necho\n```\n"), "line 6", "runner sets itself or bash sets or reads itself"),
    (_route("```parameters\n[systemroot]: path\n```\n```sh\necho\n```\n"), "line 6", "not a parameter line"),
    (_route("```parameters\nA: text = 1\nA: text = 2\n```\n```sh\necho\n```\n"), "line 7", "twice"),
    (_route("```parameters\nlower: text = 1\n```\n```sh\necho\n```\n"), "line 6", "not a parameter line"),
    # the declaration states the grammar of the value: the old forms without a kind are refused
    (_route("```parameters\nGREETING=hello\n```\n```sh\necho\n```\n"), "line 6", "not a parameter line"),
    (_route("```parameters\n[OPTIONAL]\n```\n```sh\necho\n```\n"), "line 6", "not a parameter line"),
    (_route("```parameters\nPORT: number = 1\n```\n```sh\necho\n```\n"), "line 6", "unknown kind"),
    (_route("```parameters\n[PORT]: port = 80\n```\n```sh\necho\n```\n"), "line 6", "gives the optional parameter PORT a default"),
    (_route("```parameters\nPORT: port = 0\n```\n```sh\necho\n```\n"), "line 6", "default of PORT outside its grammar"),
    (_route("```parameters\nDEF: path = ../outside\n```\n```sh\necho\n```\n"), "line 6", "default of DEF outside its grammar"),
    # what a reviewer sees must be what bash runs: hidden characters in a step, named by code point
    (_route("```sh\necho ok\necho 'safe'\u202e ;rm -rf ~\n```\n"), "line 7", "step 1 of route r holds U+202E RIGHT-TO-LEFT OVERRIDE at line 7, column 12"),
    (_route("```sh\necho\n```\n\n```sh\ncurl\u00a0-o x\n```\n"), "line 10", "step 2 of route r holds U+00A0 NO-BREAK SPACE at line 10, column 5"),
    (_route("```parameters\n# a \u2066comment\n```\n```sh\necho\n```\n"), "line 6", "the parameters block holds U+2066 LEFT-TO-RIGHT ISOLATE at line 6, column 5"),
    (b"# Doc\n\nNo routes at all.\n", None, "holds no route"),
]


@pytest.mark.parametrize(("data", "field", "words"), REFUSED, ids=[w for _d, _f, w in REFUSED])
def test_the_scanner_refuses_what_a_reader_could_misread(data, field, words):
    with pytest.raises(InputError) as caught:
        scan(data, "docs/X.md")
    assert words in caught.value.render()
    assert caught.value.file == "docs/X.md"
    if field is not None:
        assert caught.value.field == field


def test_a_parameter_name_is_refused_only_where_the_runner_or_the_shell_owns_it():
    """No deny list: a run takes only the names its document declares; a declaration may not name a variable
    the runner builds itself (routes.RUNNER_ENVIRONMENT, Windows names in any case) or bash's own (bash(1))."""
    from pipeline.formats.routes import RUNNER_ENVIRONMENT, parameter_name_problem

    for name in ("GREETING", "OMP_NINFER_MIRROR", "CONTAINERS_CONF", "GIT_AUTHOR_NAME", "LANE", "ENVIRONMENT", "PATHS_FILE"):
        assert parameter_name_problem(name) is None, name
    for name in (*RUNNER_ENVIRONMENT, "SYSTEMROOT", "COMSPEC", "PWD", "OLDPWD", "SHLVL", "IFS", "CDPATH", "BASH_ENV", "ENV", "SHELLOPTS", "PS4", "lower", "1X", "A-B"):
        assert parameter_name_problem(name) is not None, name


HIDDEN = [
    ("\u202a", "U+202A LEFT-TO-RIGHT EMBEDDING"), ("\u202b", "U+202B"), ("\u202c", "U+202C"), ("\u202d", "U+202D"), ("\u202e", "U+202E RIGHT-TO-LEFT OVERRIDE"),
    ("\u2066", "U+2066"), ("\u2067", "U+2067"), ("\u2068", "U+2068"), ("\u2069", "U+2069 POP DIRECTIONAL ISOLATE"),
    ("\u200b", "U+200B ZERO WIDTH SPACE"), ("\u200c", "U+200C"), ("\u200d", "U+200D"), ("\u2060", "U+2060 WORD JOINER"), ("\ufeff", "U+FEFF"),
    ("\u00a0", "U+00A0 NO-BREAK SPACE"), ("\u2003", "U+2003 EM SPACE"), ("\u3000", "U+3000 IDEOGRAPHIC SPACE"), ("\u202f", "U+202F"),
    ("\u2028", "U+2028 LINE SEPARATOR"), ("\u2029", "U+2029 PARAGRAPH SEPARATOR"), ("\x85", "U+0085 NEXT LINE (NEL)"),
    ("\x1b", "U+001B ESCAPE"), ("\x07", "U+0007"), ("\x08", "U+0008"), ("\x0b", "U+000B"), ("\x0c", "U+000C"), ("\x7f", "U+007F DELETE"), ("\x9b", "U+009B"),
]


@pytest.mark.parametrize(("char", "named"), HIDDEN, ids=[n.split(" ", 1)[0] for _c, n in HIDDEN])
def test_a_step_with_a_character_that_shows_other_than_bash_reads_it_is_refused(char, named):
    data = _route(f"Prose may hold it: a{char}b.\n\n```sh\necho one\n```\n\n```sh requires=gpu\necho two\nprintf '%s' 'x{char}y'\n```\n")
    with pytest.raises(InputError) as caught:
        scan(data, "docs/X.md")
    text = caught.value.render()
    assert caught.value.field == "line 13" and "step 2 of route r holds " + named in text and "at line 13, column 15" in text, text
    assert "\\x1b" not in text or char == "\x1b"  # shown escaped, never raw
    assert char not in text


def test_tab_and_plain_unicode_stay_allowed_in_a_step():
    (step,) = scan(_route("```sh\nprintf '%s\\t%s\\n' caf\u00e9 \u00fcber\n\tindented\n```\n"), "d.md").routes["r"].steps
    assert "\t" in step.text and "\u00e9" in step.text


KINDS = {
    "text": (["Release Maintainer", "a-b c"], ["", "x" * 257, "--checkpoint-action=exec=sh", "-v", "tab\there", "nbsp\u00a0x", "nul\0x", "esc\x1b[2K"]),
    "email": (["maintainer@example.invalid"], ["no-at", "a b@c", "a@b\n"]),
    "release": (["v0.13.2", "v1.0.0-beta.3"], ["0.13.2", "v1.0", "v1.0.0-rc.1", "v1.0.0\n"]),
    "lane": (["rtx4090-windows-native"], ["RTX", "-x", "a/b", "a b"]),
    "lanes": (["rtx5090-container rtx4090-windows-native", "one"], ["a  b", " a", "a;b"]),
    "sha256": (["a" * 64], ["A" * 64, "a" * 63]),
    "digest": (["sha256:" + "0" * 64], ["0" * 64, "sha512:" + "0" * 64]),
    "commit": (["1" * 40], ["1" * 39, "HEAD"]),
    "port": (["1", "8080", "65535"], ["0", "65536", "080", "-1", "80 "]),
    "url": (["https://example.org/x", "http://127.0.0.1:8000/github.com/"], ["http://example.org/", "file:///etc/passwd", "https://a b/"]),
    "mirrors": (["https://github.com/=http://127.0.0.1:9/github.com/ https://huggingface.co/=https://m.example/hf/"], ["https://github.com/", "https://a/=http://evil.example/", "x=y"]),
    "clone-path": (["containers/ninfer-runtime.toml"], ["/etc/passwd", "../x", "a/../b", "-rf", "./x"]),
    "path": (["containers/x.toml", "/home/me/accept.env", "/home/José/my files/a.conf"], ["../x", "/a/../b", "--registries-conf=/x", "a\x1bb", "/tmp/$(touch x)", "/tmp/a;b", "/tmp/`id`", "/tmp/'q'", "/tmp/a\nb"]),
    "source": (["https://github.com/alphastorm/ninfer.git@" + "a" * 40, "/src/ninfer", "/src/ninfer@" + "b" * 40], ["git@github.com:x/y", "ssh://host/x", "-x"]),
    "registry": (["127.0.0.1:5000/alphastorm/ninfer-runtime", "ghcr.io/alphastorm/ninfer"], ["ghcr.io", "ghcr.io/UPPER", "a/b c", "a/b;x"]),
    "audit-options": (["--skip-larger-than 4G", "--jobs 2 --connections 4"], ["--cache /tmp", "--skip-larger-than", "--jobs x", "--dist /", "--skip-larger-than 4G --mirror https://x/=https://y/"]),
    "accept-run-options": (["--parameters /home/me/accept.env --deny oci-engine", "--grant network --step-timeout 900"], ["--path /tmp/evil", "--set TAR_OPTIONS=x", "--grant gpu", "--work /"]),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_parameter_kind_is_a_grammar_that_refuses_what_is_not_its_form(kind):
    from pipeline.formats.routes import PARAMETER_KINDS, parameter_value_problem

    good, bad = KINDS[kind]
    for value in good:
        assert parameter_value_problem(kind, value) is None, (kind, value)
    for value in bad:
        assert parameter_value_problem(kind, value) == PARAMETER_KINDS[kind].grammar, (kind, value)
    assert set(KINDS) == set(PARAMETER_KINDS)


def test_a_longer_fence_holds_a_shorter_one_and_prose_fences_are_not_steps():
    doc = scan(_route("````sh\nprintf '```\\n'\n````\n\n```console\n$ echo prompt\n```\n\n~~~\ntilde output\n~~~\n"), "d.md")
    (step,) = doc.routes["r"].steps
    assert step.text == "printf '```\\n'\n"


# -- the real documents --------------------------------------------------------------------------


def quickstart():
    path = ROOT / "docs" / "QUICKSTART.md"
    return scan(path.read_bytes(), "docs/QUICKSTART.md")


def test_the_quickstart_holds_one_route_per_lane_and_host_and_the_verifiers_routes():
    doc = quickstart()
    assert list(doc.routes) == ["verify", "audit", "rtx5090-linux", "rtx5090-wsl2", "rtx4090-windows", "rtx3090-windows"]
    shells = {route.id: route.shell for route in doc.routes.values()}
    assert shells == {"verify": "sh", "audit": "sh", "rtx5090-linux": "sh", "rtx5090-wsl2": "powershell", "rtx4090-windows": "powershell", "rtx3090-windows": "powershell"}
    # the GPU steps are host-only, the image identity checks are not
    linux = doc.routes["rtx5090-linux"]
    assert [s.requires for s in linux.steps].count(()) >= 5
    assert any("gpu" in s.requires for s in linux.steps) and any(s.requires == ("oci-engine",) for s in linux.steps)


def test_every_powershell_step_of_the_quickstart_is_windows_powershell_51():
    from pipeline.stages.accept import static_findings

    doc = quickstart()
    for route in doc.routes.values():
        findings, fields = static_findings(doc, route.id, manifest=None, release=None)
        assert findings == [], (route.id, findings)
        assert fields or route.id == "audit"


def test_every_field_the_quickstart_reads_exists_in_a_real_manifest_and_a_draft_is_refused_for_its_nulls():
    """v0.13.1 (a draft with unbound native package hashes) has every field; bundling it must refuse the nulls."""
    from pipeline.formats.acceptance import is_missing, resolve_field
    from pipeline.stages.accept import static_findings

    manifest = json.loads((ROOT / "manifests" / "v0.13.1" / "manifest.json").read_bytes())
    doc = quickstart()
    for route in doc.routes.values():
        findings, fields = static_findings(doc, route.id, manifest=manifest, release="v0.13.1")
        assert all(not is_missing(resolve_field(manifest, f)) for f in fields), route.id
        assert [f for f in findings if "null" not in f[1]] == [], (route.id, findings)
    nulls, _ = static_findings(doc, "rtx4090-windows", manifest=manifest, release="v0.13.1")
    assert ("components.ninfer_variants[rtx4090-windows-native].package_sha256" in {f[2] for f in nulls})


def test_the_runbook_scans_and_marks_every_github_step_host_only():
    doc = scan((ROOT / "docs" / "RELEASING.md").read_bytes(), "docs/RELEASING.md")
    assert list(doc.routes) == ["lane-native", "lane-container", "release"]
    for route in doc.routes.values():
        for step in route.steps:
            calls_github = any(word in step.text for word in ("pipeline cut ", "pipeline publish ", "git push"))
            assert calls_github == ("github" in step.requires), (route.id, step.index)


def test_the_scanner_reads_exact_bytes_of_the_document_on_disk(tmp_path):
    """Bytes, not text: a step's hash is over the file's own bytes between its fences."""
    data = _route("```sh\necho 'caf\xc3\xa9'\n```\n".encode("latin-1").decode("utf-8"))
    path = tmp_path / "d.md"
    path.write_bytes(data)
    (step,) = scan(path.read_bytes(), "d.md").routes["r"].steps
    start = data.index(b"echo")
    assert step.sha256 == hashlib.sha256(data[start: data.index(b"```", start)]).hexdigest()
    assert Path(path).read_bytes() == data
