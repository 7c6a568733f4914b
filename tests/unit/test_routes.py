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
GREETING=hello
EMPTY=
NEEDED
[OPTIONAL]
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
LANE=rtx4090-windows-native
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
    params = {p.name: (p.default, p.required) for p in doc.parameters_of("win")}
    assert params == {"GREETING": ("hello", False), "EMPTY": ("", False), "NEEDED": (None, True), "OPTIONAL": (None, False), "LANE": ("rtx4090-windows-native", False)}
    assert {p.name for p in doc.parameters_of("linux-one")} == {"GREETING", "EMPTY", "NEEDED", "OPTIONAL"}
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
    (_route("```parameters\nHOME=/tmp\n```\n```sh\necho\n```\n"), "line 6", "runner sets itself"),
    (_route("```parameters\nBASH_ENV=$(touch /tmp/x)\n```\n```sh\necho\n```\n"), "line 6", "BASH_ENV changes how bash starts"),
    (_route("```parameters\n[ENV]\n```\n```sh\necho\n```\n"), "line 6", "ENV changes how the shell starts"),
    (_route("```parameters\nLD_PRELOAD\n```\n```sh\necho\n```\n"), "line 6", "LD_PRELOAD changes what the dynamic loader loads"),
    (_route("```parameters\nPYTHONSTARTUP=/tmp/x.py\n```\n```sh\necho\n```\n"), "line 6", "PYTHONSTARTUP makes Python run"),
    (_route("```parameters\nGIT_SSH_COMMAND=sh\n```\n```sh\necho\n```\n"), "line 6", "can make git run another program"),
    (_route("```parameters\nIFS=x\n```\n```sh\necho\n```\n"), "line 6", "declares a parameter the runner refuses"),
    (_route("```parameters\nA=1\nA=2\n```\n```sh\necho\n```\n"), "line 7", "twice"),
    (_route("```parameters\nlower=1\n```\n```sh\necho\n```\n"), "line 6", "not a parameter line"),
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


def test_parameter_names_are_refused_by_what_they_do_not_by_a_guess():
    from pipeline.formats.routes import parameter_name_problem

    for name in ("GREETING", "OMP_NINFER_MIRROR", "CONTAINERS_CONF", "GIT_AUTHOR_NAME", "GIT_COMMITTER_EMAIL", "LANE", "ENVIRONMENT", "PATHS_FILE"):
        assert parameter_name_problem(name) is None, name
    for name in ("PATH", "HOME", "BASH_ENV", "BASHOPTS", "ENV", "IFS", "PS4", "PROMPT_COMMAND", "SHELLOPTS", "LD_LIBRARY_PATH", "DYLD_LIBRARY_PATH", "PYTHONPATH", "PYTHONHOME", "GIT_DIR", "GIT_CONFIG_GLOBAL", "LC_CTYPE", "GCONV_PATH", "COMSPEC", "lower", "1X"):
        assert parameter_name_problem(name) is not None, name


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
