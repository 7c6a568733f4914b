"""Windows PowerShell 5.1 check of the four native lifecycle scripts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import tree_sitter_powershell
from tree_sitter import Language, Parser

from pipeline.errors import InputError
from pipeline.formats.lanes import REPO_ROOT, load_lanes
from pipeline.infra.powershell import assert_powershell51, check_powershell51, check_powershell51_source

WINDOWS = REPO_ROOT / "packaging" / "windows"
SCRIPTS = ["Install-Release.ps1", "Control-Release.ps1", "Control-GpuOwner.ps1", "Protect-StateRoot.ps1"]


def write(tmp_path: Path, text: str | bytes, name: str = "snippet.ps1") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    return path


def problems_of(tmp_path: Path, text: str | bytes) -> list[str]:
    return check_powershell51(write(tmp_path, text))


# --- the grammar facts the checker relies on (verified by parsing, not assumed) --------


def _types(source: str) -> list[tuple[str, str]]:
    tree = Parser(Language(tree_sitter_powershell.language())).parse(source.encode())
    found = []
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        found.append((node.type, node.text.decode().strip() if node.child_count == 0 else ""))
        stack.extend(node.children)
    return found


def test_grammar_gives_pipeline_chains_their_own_node():
    assert any(kind == "pipeline_chain_tail" for kind, _ in _types("git fetch && git status\n"))
    assert any(kind == "pipeline_chain_tail" for kind, _ in _types("git fetch || exit 1\n"))


@pytest.mark.parametrize("source,token", [("$a = $b ?? 1\n", "??"), ("$a ??= 1\n", "??"), ("$x = $a ? 1 : 2\n", "?"), ("${a}?.b\n", "?"), ("${a}?[0]\n", "?")])
def test_grammar_has_no_node_for_null_operators_or_ternary(source, token):
    types = _types(source)
    assert ("ERROR", token) in types
    assert not any("ternary" in kind or "coalesc" in kind or "conditional" in kind for kind, _ in types)


def test_grammar_parses_parallel_as_a_command_parameter():
    assert ("command_parameter", "-Parallel") in _types("1..3 | ForEach-Object -Parallel { $_ }\n")


# --- the shipped scripts ------------------------------------------------------------------


@pytest.mark.parametrize("name", SCRIPTS)
def test_shipped_script_is_clean_windows_powershell_51(name):
    path = WINDOWS / name
    assert check_powershell51(path) == []


def test_assert_accepts_the_shipped_scripts():
    assert_powershell51([WINDOWS / name for name in SCRIPTS])


def test_lanes_ship_exactly_these_scripts():
    for lane in load_lanes().values():
        if lane.kind == "windows-native":
            assert sorted(Path(p).name for p in lane.support_scripts) == sorted(SCRIPTS)
            for script in lane.support_scripts:
                assert (REPO_ROOT / script).is_file()


@pytest.mark.parametrize("name", SCRIPTS)
def test_shipped_script_structure(name):
    data = (WINDOWS / name).read_bytes()
    text = data.decode("ascii")
    assert not data.startswith(b"\xef\xbb\xbf") and b"\r" not in data and data.endswith(b"\n")
    assert text.startswith("<#\n.SYNOPSIS\n")
    for section in (".DESCRIPTION", ".PARAMETER", ".EXAMPLE"):
        assert section in text.split("#>", 1)[0]
    header = text.split("#>", 1)[1]
    assert header.lstrip().startswith("[CmdletBinding(")
    assert "\nSet-StrictMode -Version Latest\n" in text
    assert "\n$ErrorActionPreference = 'Stop'\n" in text
    # Every parameter the help documents exists, and the reverse.
    documented = set(re.findall(r"^\.PARAMETER (\w+)$", text, re.MULTILINE))
    param_block = header.split("\n)\n", 1)[0]
    declared = set(re.findall(r"\]\s*\$(\w+)", param_block))
    assert documented == declared


def test_controller_never_passes_the_key_on_the_command_line():
    text = (WINDOWS / "Control-Release.ps1").read_text()
    assert "'--api-key'" not in text
    assert "'--api-key-file'" in text
    # The key is read only to send it as a header; no output path prints it.
    assert not re.search(r"Write-(Output|Host|Verbose|Warning)[^\n]*\$key\b", text)


def test_installer_and_controller_use_the_contract_names():
    install = (WINDOWS / "Install-Release.ps1").read_text()
    control = (WINDOWS / "Control-Release.ps1").read_text()
    gpu = (WINDOWS / "Control-GpuOwner.ps1").read_text()
    protect = (WINDOWS / "Protect-StateRoot.ps1").read_text()
    for pointer in ("prepared_release", "active_release", "previous_release"):
        assert f"'{pointer}'" in install
    assert "[System.IO.File]::Replace(" in install and "Get-FileHash" in install
    assert "'^([0-9a-f]{64})  (\\S.*)$'" in install
    assert "-RepairInterruptedInstall" in install and "[switch]$Rollback" in install
    assert "ReparsePoint" in install and "ReparsePoint" in protect
    assert "'Global\\NInfer-' + $releaseId + '-stop'" in control
    assert "System.Threading.EventWaitHandle" in control and "graceful_stop_timeout_seconds" in control
    assert "--query-gpu=$query" in gpu and "power.limit" in gpu and "'-pl'" in gpu
    assert "SetAccessRuleProtection($true, $false)" in protect and "NULL DACL" in protect


# --- each PowerShell 7-only construct, in a small snippet --------------------------------


@pytest.mark.parametrize(
    "snippet,position,text",
    [
        ("$a = $b ?? 3\n", "1:9", "null-coalescing operator '??'"),
        ("$x = 1\n$a ??= 3\n", "2:4", "null-coalescing assignment operator '??='"),
        ("$x = $a ? 1 : 2\n", "1:9", "ternary operator '? :'"),
        ("$n = ${a}?.Name\n", "1:10", "null-conditional member access '?.'"),
        ("$n = ${a}?[0]\n", "1:10", "null-conditional index '?[]'"),
        ("git fetch && git status\n", "1:11", "pipeline chain operator '&&'"),
        ("git fetch || exit 1\n", "1:11", "pipeline chain operator '||'"),
        ("1..3 | ForEach-Object -Parallel { $_ }\n", "1:23", "parameter '-Parallel' of foreach-object"),
        ("1..3 | % -Parallel { $_ } -ThrottleLimit 4\n", "1:10", "parameter '-Parallel' of foreach-object"),
        ("1..3 | foreach -Para { $_ }\n", "1:16", "parameter '-Para' of foreach-object"),
        ("$o = Get-Content x -Raw | ConvertFrom-Json -AsHashtable\n", "1:44", "parameter '-AsHashtable' of convertfrom-json"),
        ("$o = '{}' | ConvertFrom-Json -Depth 5\n", "1:30", "parameter '-Depth' of convertfrom-json"),
        ("$b = Get-Content x -AsByteStream\n", "1:20", "parameter '-AsByteStream' of get-content"),
        ("Set-Content x -Value 1 -Encoding utf8NoBOM\n", "1:34", "-Encoding utf8NoBOM"),
        ("Invoke-RestMethod -Uri $u -SkipCertificateCheck\n", "1:27", "parameter '-SkipCertificateCheck' of invoke-restmethod"),
        ("$p = Join-Path $a 'b' 'c'\n", "1:6", "Join-Path with more than one child path"),
        ("$j = Test-Json -Json $t\n", "1:6", "cmdlet 'test-json' exists only in PowerShell 6+/7"),
        ("if ($IsWindows) { 1 }\n", "1:5", "automatic variable $IsWindows"),
        ('$e = "`e[31m"\n', "1:7", "escape '`e'"),
        ('$s = "`u{2713}"\n', "1:7", "escape '`u{...}'"),
        ("$s = 'abc' -replace 'b', { $_.Value.ToUpper() }\n", "1:26", "-replace with a script-block substitution"),
        ("$h = [System.Convert]::ToHexString($b)\n", "1:24", "[convert]::ToHexString needs .NET 5"),
        ("$h = [Security.Cryptography.SHA256]::HashData($b)\n", "1:38", "::HashData needs .NET 5"),
        ("[IO.File]::Move($a, $b, $true)\n", "1:12", "with 3 arguments needs .NET Core 3.0"),
        ("$r = [System.IO.Path]::GetRelativePath($a, $b)\n", "1:24", "::GetRelativePath needs .NET Core 2.0"),
        ("$t = (Get-Item $p).LinkTarget\n", "1:20", ".NET 6 FileSystemInfo.LinkTarget"),
        ("$d = [System.Text.Json.JsonDocument]::Parse($s)\n", "1:6", "System.Text.Json"),
        ("function f {\n  begin { 1 }\n  clean { 2 }\n}\n", "3:3", "'clean' block"),
        ("Start-Sleep 5 &\n", "1:15", "background operator '&'"),
        ("#requires -Version 7.2\n$x = 1\n", "1:1", "'#requires -Version 7' refuses to run"),
        ("#requires -PSEdition Core\n$x = 1\n", "1:1", "-PSEdition Core"),
        ("$n = 1uy\n", "1:6", "numeric literal suffix"),
    ],
)
def test_each_powershell7_construct_is_reported(tmp_path, snippet, position, text):
    problems = problems_of(tmp_path, snippet)
    hits = [p for p in problems if text in p]
    assert hits, problems
    assert any(f"snippet.ps1:{position}: " in p for p in hits), hits


@pytest.mark.parametrize(
    "snippet",
    [
        "$x = if ($a) { 1 } else { 2 }\n",
        "$v = $null\nif ($null -eq $v) { $v = 3 }\n",
        "Get-Process | ? { $_.Id -gt 4 } | % { $_.Name }\n",
        "$s = 'a ?? b ? c : d && e || f'\n",
        '$s = "ternary ? in : text"\n',
        "# a ?? comment && with || operators ? :\n$x = 1\n",
        "1..3 | ForEach-Object -Process { $_ }\n",
        "$o = Get-Content x -Raw | ConvertFrom-Json\n",
        "[IO.File]::Move($a, $b)\n",
        "$p = Join-Path (Join-Path $a 'b') 'c'\n",
        "$p = Join-Path -Path $a -ChildPath 'b'\n",
        "Set-Content x -Value 1 -Encoding UTF8\n",
        '$e = "$([char]27)[31m"\n',
        '$t = "``e is not an escape"\n',
        "$s = 'abc' -replace 'b', 'c'\n",
        "$h = [System.BitConverter]::ToString($b)\n",
        "try { [IO.File]::Open($p, 'Open') } catch [System.IO.IOException] { throw } finally { }\n",
        "$ok = ($LASTEXITCODE -eq 0) -and (Test-Path $p)\n",
        "$t = (Get-Item $p).Target\n",
        "$w = [System.Threading.EventWaitHandle]::new($false, 'ManualReset', 'Global\\x')\n",
        "$o = '{}' | ConvertFrom-Json -Debug\n",
        "$r = Invoke-WebRequest -Uri $u -MaximumRedirection 0 -ContentType 'application/json' -UseBasicParsing\n",
        "$s = 'ConvertFrom-Json -AsHashtable ?? ForEach-Object -Parallel'\n",
        "$d = Get-Date -UFormat '%s'\n",
    ],
)
def test_windows_powershell_51_snippets_pass(tmp_path, snippet):
    assert problems_of(tmp_path, snippet) == []


# --- syntax errors, bytes, hooks ----------------------------------------------------------


def test_reports_error_node_with_position(tmp_path):
    problems = problems_of(tmp_path, "$x = 1\nif ($x) {\n  Write-Output 'open'\n")
    assert any("syntax error" in p and re.search(r"snippet\.ps1:\d+:\d+: ", p) for p in problems), problems


def test_reports_missing_node_with_position(tmp_path):
    problems = problems_of(tmp_path, "$x = 1\nFoo -Sha256 x\n")
    assert any("missing" in p and "MISSING node" in p and "snippet.ps1:2:" in p for p in problems), problems


def test_reports_crlf_script(tmp_path):
    problems = problems_of(tmp_path, b"$x = 1\r\n$y = 2\r\n")
    assert problems == ["%s:1:7: contains a carriage return (CR) byte (2 in all); the scripts are hashed with LF line endings" % (tmp_path / "snippet.ps1")]


def test_reports_bom(tmp_path):
    problems = problems_of(tmp_path, b"\xef\xbb\xbf$x = 1\n")
    assert len(problems) == 1 and ":1:1: starts with a UTF-8 byte-order mark" in problems[0]


def test_reports_non_ascii(tmp_path):
    problems = problems_of(tmp_path, "$x = 'caf\u00e9'\n# \u2014 dash\n")
    assert [p.split(": ", 1)[0].rsplit(":", 2)[1:] for p in problems] == [["1", "10"], ["2", "3"]]
    assert all("non-ASCII character" in p and "ANSI code page" in p for p in problems)


def test_reports_invalid_utf8(tmp_path):
    problems = problems_of(tmp_path, b"$x = '\xff'\n")
    assert len(problems) == 1 and "is not valid UTF-8" in problems[0]


@pytest.mark.parametrize(
    "snippet,literal",
    [
        ("if ($env:NINFER_TEST_SKIP_ACL) { return }\n", "NINFER_TEST_SKIP_ACL"),
        ("$x = 1 # FaultInjectAfterPointer\n", "FaultInjectAfterPointer"),
        ("param([switch]$TestMode)\n$x = 1\n", "TestMode"),
        ("$h = 'Test-Hook'\n", "Test-Hook"),
        ("$v = $env:NINFER_FAULT_STAGE\n", "NINFER_FAULT_STAGE"),
    ],
)
def test_reports_test_and_fault_hooks(tmp_path, snippet, literal):
    problems = problems_of(tmp_path, snippet)
    assert any(f"hook literal {literal!r}" in p for p in problems), problems


def test_check_source_names_the_given_name():
    assert check_powershell51_source(b"git a && git b\n", "Install-Release.ps1") == [
        "Install-Release.ps1:1:7: PowerShell 7-only pipeline chain operator '&&' (use 'if ($LASTEXITCODE -eq 0)' in 5.1)"
    ]


def test_assert_names_the_file_and_first_problems(tmp_path):
    good = write(tmp_path, "$x = 1\n", "Good.ps1")
    bad = write(tmp_path, "$a = $b ?? 1\ngit a && git b\n", "Bad.ps1")
    with pytest.raises(InputError) as caught:
        assert_powershell51([good, bad])
    error = caught.value
    assert error.file == str(bad)
    message = str(error)
    assert "is not a clean Windows PowerShell 5.1 script" in message
    assert "Bad.ps1:1:9: PowerShell 7-only null-coalescing operator '??'" in message
    assert "Bad.ps1:2:7: PowerShell 7-only pipeline chain operator '&&'" in message
    assert "Fix:" in message


def test_assert_refuses_missing_script(tmp_path):
    with pytest.raises(InputError, match="script does not exist"):
        assert_powershell51([tmp_path / "Missing.ps1"])


def test_a_seeded_copy_of_a_shipped_script_fails(tmp_path):
    # The shipped scripts pass because they are clean, not because the checker is blind:
    # one PS7 line appended to a real script is found at its exact line.
    source = (WINDOWS / "Control-GpuOwner.ps1").read_bytes()
    lines = source.count(b"\n")
    problems = problems_of(tmp_path, source + b"$limit = $lease ?? 300\n")
    assert any(f":{lines + 1}:" in p and "'??'" in p for p in problems), problems


def test_controller_and_owner_actions():
    control = (WINDOWS / "Control-Release.ps1").read_text()
    owner = (WINDOWS / "Control-GpuOwner.ps1").read_text()
    assert "[ValidateSet('Start', 'Stop', 'Status', 'Restart', 'Serve')]" in control
    assert "[ValidateSet('Acquire', 'Release', 'Status')]" in owner
    assert "-ge $limitMib" in owner  # another process holding >= the limit (1 GiB) is refused
