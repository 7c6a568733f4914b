"""Windows PowerShell 5.1 compatibility check for the shipped lifecycle scripts.

The native lanes install and run through four PowerShell scripts
(Install-Release, Control-Release, Control-GpuOwner, Protect-StateRoot) that
must run on the Windows PowerShell 5.1 every Windows 10/11 host has, not only
on PowerShell 7.  This module parses each script with tree-sitter's PowerShell
grammar and reports, as ``<file>:<line>:<column>: <problem>`` strings:

* every ERROR and MISSING node of the syntax tree (the script does not parse);
* PowerShell 7-only syntax.  What the grammar (tree-sitter-powershell 0.26)
  produces was verified by parsing snippets:

  - ``a && b`` / ``a || b`` (pipeline chain operators) parse as a
    ``pipeline_chain_tail`` node;
  - ``??``, ``??=``, ``?.``, ``?[]`` and the ternary ``a ? b : c`` have no
    node type: the grammar produces an ERROR node around a ``?`` or ``??``
    token.  Those tokens are classified by the byte that follows them
    (``=`` -> ``??=``, ``.`` -> ``?.``, ``[`` -> ``?[]``, otherwise ternary);
  - a ``clean { }`` block (7.3) is an ERROR node holding the name ``clean``;
  - a trailing background operator ``cmd &`` is an ERROR whose last token is ``&``;
  - ``ForEach-Object -Parallel`` and other 6+/7-only parameters are
    ``command_parameter`` nodes under a ``command`` whose ``command_name`` is
    the cmdlet (or one of its aliases); parameter prefixes are resolved the way
    PowerShell resolves them, down to a minimum unambiguous prefix;
* token-level checks where the grammar has no node for the construct:
  PowerShell 6+ escapes (`` `e ``, `` `u{...} ``) inside expandable strings,
  the ``-replace`` operator with a script-block substitution, PowerShell 6+
  cmdlets, automatic variables that do not exist in 5.1 (``$IsWindows`` ...),
  ``-Encoding utf8NoBOM``, ``Join-Path`` with more than one child path,
  ``#requires -Version 6+`` / ``-PSEdition Core``, and .NET Core / .NET 5+
  members that .NET Framework 4.x does not have (``[Convert]::ToHexString``,
  ``[IO.File]::Move`` with an overwrite argument, ...);
* byte hygiene: a UTF-8 BOM, any CR byte, invalid UTF-8, and any non-ASCII
  byte (Windows PowerShell 5.1 reads a BOM-less script in the ANSI code page,
  so a non-ASCII character in a UTF-8-without-BOM script is silently changed);
* test and fault-injection hook literals (``NINFER_TEST_``, ``FaultInject``,
  ...) anywhere in the text, comments included: published scripts carry none.

Known grammar gap: tree-sitter-powershell 0.26 ends a command parameter name at
its first digit (``-Sha256`` parses as ``-Sha`` followed by a MISSING
redirection), so such a line is reported as a syntax error although Windows
PowerShell accepts it; the shipped scripts avoid digits in parameter names.

The check is static.  It cannot prove that a script runs on 5.1 (a cmdlet
called through a variable or splatted parameters are not resolved), only that
none of the known 7-only constructs is present and that the script parses.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from functools import lru_cache
from pathlib import Path

from pipeline.errors import InputError

# Literals that only test harnesses or fault injection use.  A shipped script
# must not carry a switch that weakens it, even in a comment.
HOOK_LITERALS = re.compile(
    r"NINFER_(?:TEST|FAULT|MOCK|INJECT|BYPASS|SIMULAT)[A-Z0-9_]*"
    r"|Fault[-_]?Inject\w*|Inject[-_]?Fault\w*|Test[-_]?Hook\w*|TestMode\b|Test[-_]?Bypass\w*",
    re.IGNORECASE,
)

# cmdlet (lower case) -> {7-only parameter (lower case): minimum prefix length that
# PowerShell would resolve to it}.  Only parameters that do not exist in 5.1; each
# minimum is long enough not to be a prefix of a 5.1 parameter of the same cmdlet
# or of a common parameter (-Debug, -ErrorAction, ...).
_PS7_PARAMETERS: dict[str, dict[str, int]] = {
    "foreach-object": {"parallel": 2, "throttlelimit": 2, "timeoutseconds": 2, "asjob": 2, "usenewrunspace": 2},
    "convertfrom-json": {"ashashtable": 2, "depth": 3, "noenumerate": 1, "datekind": 2},
    "convertto-json": {"asarray": 2, "enumsasstrings": 2, "escapehandling": 2},
    "get-content": {"asbytestream": 3},
    "set-content": {"asbytestream": 3},
    "add-content": {"asbytestream": 3},
    "split-path": {"leafbase": 5, "extension": 2},
    "join-path": {"additionalchildpath": 1},
    "invoke-webrequest": {
        "skipcertificatecheck": 5, "skiphttperrorcheck": 5, "skipheadervalidation": 5,
        "statuscodevariable": 2, "responseheadersvariable": 4, "resume": 4, "authentication": 2,
        "token": 2, "allowunencryptedauthentication": 6, "sslprotocol": 2, "maximumretrycount": 10,
        "retryintervalsec": 4, "form": 2, "custommethod": 2, "noproxy": 3,
        "connectiontimeoutseconds": 4, "operationtimeoutseconds": 2, "httpversion": 2,
        "preserveauthorizationonredirect": 9, "allowinsecureredirect": 6, "preservehttpmethodonredirect": 9,
    },
    "get-date": {"asutc": 3, "unixtimeseconds": 2},
    "select-string": {"raw": 2, "noemphasis": 3, "culture": 2},
    "start-process": {"environment": 2},
    "test-connection": {"tcpport": 2},
    "sort-object": {"top": 2, "bottom": 2},
    "get-random": {"shuffle": 2},
    "export-csv": {"usequotes": 4, "quotefields": 1},
}
_PS7_PARAMETERS["invoke-restmethod"] = dict(_PS7_PARAMETERS["invoke-webrequest"])

_ALIASES = {
    "%": "foreach-object",
    "foreach": "foreach-object",
    "gc": "get-content",
    "cat": "get-content",
    "type": "get-content",
    "sc": "set-content",
    "ac": "add-content",
    "iwr": "invoke-webrequest",
    "curl": "invoke-webrequest",
    "wget": "invoke-webrequest",
    "irm": "invoke-restmethod",
    "sls": "select-string",
    "start": "start-process",
    "saps": "start-process",
    "sort": "sort-object",
    "epcsv": "export-csv",
}

# Cmdlets that Windows PowerShell 5.1 does not ship.
_PS7_CMDLETS = {
    "test-json", "join-string", "get-error", "convertfrom-markdown", "show-markdown",
    "get-markdownoption", "set-markdownoption", "remove-alias", "remove-service", "get-uptime",
    "convertto-clixml", "convertfrom-clixml", "get-securerandom", "get-pssubsystem",
    "enable-experimentalfeature", "disable-experimentalfeature", "get-experimentalfeature",
    "start-threadjob", "enable-pssessionconfiguration7",
}

# Automatic or preference variables that only exist in PowerShell 6+/7.  Reading one
# under Set-StrictMode -Version Latest on 5.1 is an error; setting one does nothing.
_PS7_VARIABLES = {
    "iswindows", "islinux", "ismacos", "iscoreclr", "psstyle", "enabledexperimentalfeatures",
    "psnativecommanduseerroractionpreference", "psnativecommandargumentpassing",
}

# .NET members that .NET Framework 4.x (the runtime of Windows PowerShell 5.1) lacks.
# Key: type name without a leading "System." (lower case); value: static members.
_NETCORE_STATIC_MEMBERS: dict[str, dict[str, str]] = {
    "convert": {"tohexstring": ".NET 5", "fromhexstring": ".NET 5", "tohexstringlower": ".NET 9"},
    "security.cryptography.sha256": {"hashdata": ".NET 5", "hashdataasync": ".NET 7"},
    "security.cryptography.sha1": {"hashdata": ".NET 5"},
    "security.cryptography.sha384": {"hashdata": ".NET 5"},
    "security.cryptography.sha512": {"hashdata": ".NET 5"},
    "security.cryptography.md5": {"hashdata": ".NET 5"},
    "security.cryptography.randomnumbergenerator": {"fill": ".NET Core 2.1", "getint32": ".NET Core 3.0", "getbytes": ".NET 6", "gethexstring": ".NET 8", "getstring": ".NET 8"},
    "io.path": {
        "getrelativepath": ".NET Core 2.0", "join": ".NET Core 3.0", "trimendingdirectoryseparator": ".NET Core 3.0",
        "endsindirectoryseparator": ".NET Core 3.0", "exists": ".NET 7", "ispathfullyqualified": ".NET Core 2.1",
    },
    "io.file": {
        "readalltextasync": ".NET Core 2.0", "readallbytesasync": ".NET Core 2.0", "readalllinesasync": ".NET Core 2.0",
        "writealltextasync": ".NET Core 2.0", "writeallbytesasync": ".NET Core 2.0", "writealllinesasync": ".NET Core 2.0",
        "appendalltextasync": ".NET Core 2.0", "createsymboliclink": ".NET 6", "resolvelinktarget": ".NET 6",
        "getunixfilemode": ".NET 7", "setunixfilemode": ".NET 7",
    },
    "io.directory": {"createsymboliclink": ".NET 6", "resolvelinktarget": ".NET 6", "createtempsubdirectory": ".NET 7"},
    "environment": {"processpath": ".NET 6", "processid": ".NET 5", "isprivilegedprocess": ".NET 8"},
    "operatingsystem": {"iswindows": ".NET 5", "islinux": ".NET 5", "ismacos": ".NET 5", "iswindowsversionatleast": ".NET 5"},
    "random": {"shared": ".NET 6"},
    "string": {"create": ".NET Core 2.1"},
    "math": {"clamp": ".NET Core 2.0"},
    "threading.tasks.task": {"waitasync": ".NET 6"},
    "guid": {"createversion7": ".NET 9"},
}
# (type, member) -> the argument count from which the overload is .NET Core-only.
_NETCORE_OVERLOADS = {
    ("io.file", "move"): (3, ".NET Core 3.0 (the overwrite overload)"),
    ("io.directory", "move"): (3, ".NET Core 3.0"),
}
_NETCORE_TYPES = {
    "text.json": ".NET Core 3.0 (System.Text.Json)",
    "hashcode": ".NET Core 2.1",
    "range": ".NET Core 3.0",
    "index": ".NET Core 3.0",
    "half": ".NET 5",
    "dateonly": ".NET 6",
    "timeonly": ".NET 6",
    "int128": ".NET 7",
    "uint128": ".NET 7",
    "management.automation.psstyle": "PowerShell 7.2",
}
# Instance members that exist only on .NET 6+ objects or PowerShell 7's extended types.
_NETCORE_INSTANCE_MEMBERS = {
    "linktarget": ".NET 6 FileSystemInfo.LinkTarget (use .Target in 5.1)",
    "resolvedtarget": "PowerShell 7.1",
    "unixfilemode": ".NET 7",
    "unixmode": "PowerShell 7.1",
}

# Common switch parameters (take no value) for counting positional arguments.
_SWITCHES = {"resolve", "force", "recurse", "raw", "passthru", "whatif", "confirm", "verbose", "debug", "wait", "asplaintext"}
_EXPANDABLE_STRINGS = {"expandable_string_literal", "expandable_here_string_literal"}
_REPLACE_OPERATORS = {"-replace", "-ireplace", "-creplace"}
_NUMBER_SUFFIX = re.compile(r"(?i)(?:0x[0-9a-f]+|[0-9]+)(?:uy|us|ul|u|y|s|n)(?:kb|mb|gb|tb|pb)?")


@lru_cache(maxsize=1)
def _parser():
    try:
        import tree_sitter_powershell
        from tree_sitter import Language, Parser
    except ImportError as exc:  # pragma: no cover - the project venv has both
        from pipeline.errors import EnvironmentProblem

        raise EnvironmentProblem(
            f"the PowerShell grammar is not installed ({exc})",
            fix="install the project's dependencies: pip install -e . (tree-sitter and tree-sitter-powershell)",
        ) from None
    return Parser(Language(tree_sitter_powershell.language()))


def _walk(node) -> Iterator:
    cursor = node.walk()
    visited_children = False
    while True:
        if not visited_children:
            yield cursor.node
            if cursor.goto_first_child():
                continue
        if cursor.goto_next_sibling():
            visited_children = False
            continue
        if not cursor.goto_parent():
            return
        visited_children = True


def _position(node) -> tuple[int, int]:
    row, column = node.start_point
    return row + 1, column + 1


def _text(node) -> str:
    return node.text.decode("utf-8", errors="replace") if node.text is not None else ""


def _byte_position(data: bytes, offset: int) -> tuple[int, int]:
    line = data.count(b"\n", 0, offset) + 1
    column = offset - (data.rfind(b"\n", 0, offset) + 1) + 1
    return line, column


class _Report:
    def __init__(self, name: str) -> None:
        self.name = name
        self.source = b""
        self.items: list[tuple[int, int, str]] = []
        self._seen: set[tuple[int, int, str]] = set()

    def add(self, line: int, column: int, message: str) -> None:
        key = (line, column, message)
        if key not in self._seen:
            self._seen.add(key)
            self.items.append(key)

    def at(self, node, message: str) -> None:
        # Some tokens carry the whitespace before them; point at the token itself.
        raw = node.text or b""
        lead = len(raw) - len(raw.lstrip())
        if lead and self.source:
            line, column = _byte_position(self.source, node.start_byte + lead)
        else:
            line, column = _position(node)
        self.add(line, column, message)

    def render(self) -> list[str]:
        return [f"{self.name}:{line}:{column}: {message}" for line, column, message in sorted(self.items)]


def _check_bytes(data: bytes, report: _Report) -> str | None:
    if data.startswith(b"\xef\xbb\xbf"):
        report.add(1, 1, "starts with a UTF-8 byte-order mark; ship UTF-8 without BOM (and ASCII only, see below)")
    if b"\r" in data:
        offset = data.index(b"\r")
        line, column = _byte_position(data, offset)
        count = data.count(b"\r")
        report.add(line, column, f"contains a carriage return (CR) byte ({count} in all); the scripts are hashed with LF line endings")
    body = data[3:] if data.startswith(b"\xef\xbb\xbf") else data
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        line, column = _byte_position(data, exc.start + (len(data) - len(body)))
        report.add(line, column, f"is not valid UTF-8 ({exc.reason})")
        return None
    for match in re.finditer(rb"[^\x00-\x7f]+", body):
        line, column = _byte_position(data, match.start() + (len(data) - len(body)))
        report.add(
            line,
            column,
            "non-ASCII character "
            + repr(match.group().decode("utf-8", errors="replace"))
            + ": Windows PowerShell 5.1 reads a BOM-less script in the ANSI code page and would change it",
        )
    for match in HOOK_LITERALS.finditer(text):
        line, column = _byte_position(body, len(text[: match.start()].encode("utf-8")))
        report.add(line, column, f"test or fault-injection hook literal {match.group()!r} in a published script")
    return text


def _classify_question_token(node, source: bytes, report: _Report) -> bool:
    """A '?' or '??' token inside an ERROR: name the PowerShell 7 operator it starts."""
    raw = _text(node)
    token = raw.strip()
    if token not in ("?", "??"):
        return False
    # The token text may carry leading whitespace; position on the '?' itself.
    start = node.start_byte + (len(raw) - len(raw.lstrip()))
    end = start + len(token)
    following = source[end : end + 1]
    line, column = _byte_position(source, start)
    if token == "??":
        if following == b"=":
            report.add(line, column, "PowerShell 7-only null-coalescing assignment operator '??=' (not in Windows PowerShell 5.1)")
        else:
            report.add(line, column, "PowerShell 7-only null-coalescing operator '??' (not in Windows PowerShell 5.1)")
    elif following == b".":
        report.add(line, column, "PowerShell 7-only null-conditional member access '?.' (not in Windows PowerShell 5.1)")
    elif following == b"[":
        report.add(line, column, "PowerShell 7-only null-conditional index '?[]' (not in Windows PowerShell 5.1)")
    else:
        report.add(line, column, "PowerShell 7-only ternary operator '? :' (not in Windows PowerShell 5.1)")
    return True


def _inspect_error(node, source: bytes, report: _Report) -> None:
    report.at(node, f"syntax error (tree-sitter ERROR node) at {_text(node).strip()[:40]!r}")
    leaves = [n for n in _walk(node) if n.child_count == 0]
    for leaf in leaves:
        _classify_question_token(leaf, source, report)
    names = [n for n in _walk(node) if n.type == "simple_name" and _text(n).strip().lower() == "clean"]
    for name in names:
        report.at(name, "PowerShell 7.3-only 'clean' block (not in Windows PowerShell 5.1)")
    tokens = [leaf for leaf in leaves if _text(leaf).strip()]
    if tokens and tokens[-1].type == "&":
        report.at(tokens[-1], "PowerShell 7-only background operator '&' at the end of a pipeline (use Start-Job in 5.1)")


def _command_parts(command) -> tuple[str, list]:
    name_node = next((c for c in command.children if c.type == "command_name"), None)
    name = _text(name_node).strip().lower() if name_node is not None else ""
    elements = next((c for c in command.children if c.type == "command_elements"), None)
    parts = [c for c in elements.children if c.type != "command_argument_sep"] if elements is not None else []
    return name, parts


def _match_parameter(written: str, table: dict[str, int]) -> str | None:
    for parameter, minimum in table.items():
        if len(written) >= minimum and parameter.startswith(written):
            return parameter
    return None


def _inspect_command(command, report: _Report) -> None:
    name, parts = _command_parts(command)
    if not name:
        return
    canonical = _ALIASES.get(name, name)
    if canonical in _PS7_CMDLETS:
        report.at(command, f"cmdlet '{canonical}' exists only in PowerShell 6+/7 (not in Windows PowerShell 5.1)")
    table = _PS7_PARAMETERS.get(canonical, {})
    named = 0
    positional = 0
    takes_value = False
    for index, part in enumerate(parts):
        if part.type == "command_parameter":
            named += 1
            written = _text(part).strip().lstrip("-").rstrip(":").lower()
            parameter = _match_parameter(written, table)
            if parameter is not None:
                report.at(
                    part,
                    f"parameter '-{_text(part).strip().lstrip('-').rstrip(':')}' of {canonical} exists only in "
                    "PowerShell 6+/7 (not in Windows PowerShell 5.1)",
                )
            # '-Name:value' keeps the value inside the separator node; '-Name value' does not.
            takes_value = written not in _SWITCHES
            if written == "encoding" and index + 1 < len(parts):
                value = parts[index + 1]
                if _text(value).strip().strip("'\"").lower() in ("utf8nobom", "utf8bom", "ansi"):
                    report.at(value, f"-Encoding {_text(value).strip()} exists only in PowerShell 6+/7 (5.1 knows UTF8, with BOM)")
            continue
        if takes_value:
            takes_value = False
            continue
        positional += 1
    if canonical == "join-path" and named == 0 and positional > 2:
        report.at(command, "Join-Path with more than one child path exists only in PowerShell 6+ (nest Join-Path in 5.1)")


def _type_name(type_literal) -> str:
    spec = next((c for c in type_literal.children if c.type == "type_spec"), None)
    text = _text(spec if spec is not None else type_literal).strip().strip("[]").lower().replace(" ", "")
    return text[len("system.") :] if text.startswith("system.") else text


def _inspect_type_literal(node, report: _Report) -> None:
    name = _type_name(node)
    for prefix, version in _NETCORE_TYPES.items():
        if name == prefix or name.startswith(prefix + "."):
            report.at(node, f"type [{_text(node).strip('[] ')}] needs {version}; Windows PowerShell 5.1 runs on .NET Framework 4.x")
            return


def _inspect_static_member(node, report: _Report) -> None:
    children = node.children
    type_literal = next((c for c in children if c.type == "type_literal"), None)
    member = next((c for c in children if c.type == "member_name"), None)
    if type_literal is None or member is None or not any(c.type == "::" for c in children):
        return
    type_name = _type_name(type_literal)
    member_name = _text(member).strip().lower()
    version = _NETCORE_STATIC_MEMBERS.get(type_name, {}).get(member_name)
    if version is not None:
        report.at(member, f"[{type_name}]::{_text(member).strip()} needs {version}; Windows PowerShell 5.1 runs on .NET Framework 4.x")
        return
    overload = _NETCORE_OVERLOADS.get((type_name, member_name))
    arguments = next((c for c in children if c.type == "argument_list"), None)
    if overload is not None and arguments is not None:
        expression_list = next((c for c in arguments.children if c.type == "argument_expression_list"), None)
        count = sum(1 for c in expression_list.children if c.type == "argument_expression") if expression_list else 0
        if count >= overload[0]:
            report.at(member, f"[{type_name}]::{_text(member).strip()} with {count} arguments needs {overload[1]}; .NET Framework 4.x has no such overload")


def _inspect_replace(operator, report: _Report) -> None:
    if _text(operator).strip().lower() not in _REPLACE_OPERATORS:
        return
    operand = operator.next_named_sibling
    if operand is None:
        return
    # Descend through the expression chain to the right operand's list elements; a
    # script block as a list element is the 6.1+ substitution form.
    stack = [operand]
    while stack:
        current = stack.pop()
        if current.type == "script_block_expression":
            report.at(current, "-replace with a script-block substitution exists only in PowerShell 6.1+ (5.1 turns the block into text)")
            return
        if current.type in ("parenthesized_expression", "sub_expression", "argument_list", "command", "array_expression"):
            continue
        stack.extend(current.children)


def _inspect_expandable(node, report: _Report) -> None:
    text = _text(node)
    index = 0
    while index < len(text) - 1:
        if text[index] == "`":
            following = text[index + 1]
            if following == "e":
                report.add(*_offset_in(node, text, index), "escape '`e' exists only in PowerShell 6+ (5.1 prints a plain 'e'); use [char]27")
            elif following == "u" and text[index + 2 : index + 3] == "{":
                report.add(*_offset_in(node, text, index), "escape '`u{...}' exists only in PowerShell 6+; use [char]0x.... in 5.1")
            index += 2
            continue
        index += 1


def _offset_in(node, text: str, index: int) -> tuple[int, int]:
    row, column = node.start_point
    before = text[:index]
    newlines = before.count("\n")
    if newlines:
        return row + 1 + newlines, len(before) - before.rfind("\n")
    return row + 1, column + 1 + len(before.encode("utf-8"))


def _inspect_comment(node, report: _Report) -> None:
    text = _text(node)
    match = re.match(r"#requires\s+(.*)", text, re.IGNORECASE)
    if not match:
        return
    directive = match.group(1)
    version = re.search(r"-version\s+([0-9]+)", directive, re.IGNORECASE)
    if version and int(version.group(1)) >= 6:
        report.at(node, f"'#requires -Version {version.group(1)}' refuses to run on Windows PowerShell 5.1")
    if re.search(r"-psedition\s+core", directive, re.IGNORECASE):
        report.at(node, "'#requires -PSEdition Core' refuses to run on Windows PowerShell 5.1")


def check_powershell51_source(data: bytes, name: str = "<script>") -> list[str]:
    """Problems of one script given as bytes (see the module docstring)."""
    report = _Report(name)
    text = _check_bytes(data, report)
    if text is None:
        return report.render()
    source = data[3:] if data.startswith(b"\xef\xbb\xbf") else data
    report.source = source
    tree = _parser().parse(source)
    for node in _walk(tree.root_node):
        if node.is_missing:
            line, column = _position(node)
            report.add(line, column, f"syntax error: missing {node.type!r} (tree-sitter MISSING node)")
            continue
        if node.is_error:
            parent = node.parent
            inside_error = False
            while parent is not None:
                if parent.is_error:
                    inside_error = True
                    break
                parent = parent.parent
            if not inside_error:
                _inspect_error(node, source, report)
            continue
        kind = node.type
        if kind == "pipeline_chain_tail":
            operator = _text(node).strip()
            report.at(node, f"PowerShell 7-only pipeline chain operator '{operator}' (use 'if ($LASTEXITCODE -eq 0)' in 5.1)")
        elif kind == "command":
            _inspect_command(node, report)
            name, _parts = _command_parts(node)
            if _NUMBER_SUFFIX.fullmatch(name):
                report.at(node, f"numeric literal suffix in {name!r} exists only in PowerShell 6.2+/7")
        elif kind == "variable":
            variable = _text(node).strip().lstrip("$").strip("{}").lower()
            for prefix in ("global:", "script:", "local:", "private:", "env:"):
                if variable.startswith(prefix) and prefix != "env:":
                    variable = variable[len(prefix) :]
            if variable in _PS7_VARIABLES:
                report.at(node, f"automatic variable ${_text(node).strip().lstrip('$')} does not exist in Windows PowerShell 5.1")
        elif kind == "type_literal":
            _inspect_type_literal(node, report)
        elif kind in ("invokation_expression", "member_access"):
            _inspect_static_member(node, report)
            if kind == "member_access" and not any(c.type == "::" for c in node.children):
                member = next((c for c in node.children if c.type == "member_name"), None)
                if member is not None:
                    note = _NETCORE_INSTANCE_MEMBERS.get(_text(member).strip().lower())
                    if note is not None:
                        report.at(member, f"member .{_text(member).strip()} needs {note}")
        elif kind == "comparison_operator":
            _inspect_replace(node, report)
        elif kind in _EXPANDABLE_STRINGS:
            _inspect_expandable(node, report)
        elif kind == "comment":
            _inspect_comment(node, report)
        elif kind == "decimal_integer_literal" and _NUMBER_SUFFIX.fullmatch(_text(node).strip()):
            report.at(node, f"numeric literal suffix in {_text(node).strip()!r} exists only in PowerShell 6.2+/7")
    return report.render()


def check_powershell51(path: str | os.PathLike[str]) -> list[str]:
    """Problems that keep `path` from being a Windows PowerShell 5.1 script; empty when fine."""
    target = Path(path)
    try:
        data = target.read_bytes()
    except FileNotFoundError:
        raise InputError("script does not exist", file=target) from None
    return check_powershell51_source(data, str(target))


def assert_powershell51(paths: Iterable[str | os.PathLike[str]], *, show: int = 5) -> None:
    """Raise InputError naming the first script with problems and its first `show` problems."""
    for path in paths:
        problems = check_powershell51(path)
        if problems:
            shown = "; ".join(problems[:show])
            more = f" (and {len(problems) - show} more)" if len(problems) > show else ""
            raise InputError(
                f"is not a clean Windows PowerShell 5.1 script: {len(problems)} problem(s): {shown}{more}",
                file=path,
                expected="a script that parses, uses no PowerShell 7-only syntax, cmdlets or .NET 5+ APIs, "
                "is ASCII with LF line endings and no BOM, and carries no test or fault hooks",
                fix="rewrite the reported constructs in Windows PowerShell 5.1 syntax and run "
                "'python -c \"from pipeline.infra.powershell import check_powershell51 as c; print(c(PATH))\"' again",
            )
