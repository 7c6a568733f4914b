"""Route documents (docs/QUICKSTART.md, docs/RELEASING.md): the strict fence scanner.

A route document is Markdown in which the documented install and release routes
are the executable truth.  The rules (docs/release-tree.md, "Route documents"):

* A **route** is a level-2 heading ``## Route `<id>`: <title>``.  It runs to the next
  level-1 or level-2 heading.  Any other level-2 heading is prose; a level-2 heading
  that starts with "Route" but does not have this form is an error.
* A **step** is a fenced block at the left margin inside a route whose info string
  starts with the shell: ``sh`` (bash) or ``powershell`` (Windows PowerShell 5.1).
  A route's steps share one shell (they run in one shell session, in order).
* Markers after the shell word: ``example`` (shown to the reader, never run: not a
  step) and ``requires=CAP[,CAP]`` (a **host-only** step: it needs a capability of
  the host, e.g. ``oci-engine`` or ``gpu``; the runner runs it only where the host has
  it and records it as not run otherwise).  Any other marker is an error.
* A fence whose info string names no shell (``text``, ``console``, ``json``, none) is
  prose or example output, never a step.  Shell names other than ``sh`` and
  ``powershell`` (``bash``, ``pwsh``, ``ps1`` ...) are refused: they are ambiguous.
* A ``parameters`` fence declares the variables the steps expect from the reader, each
  with the grammar of its value (`PARAMETER_KINDS`): ``NAME: KIND = default`` (the runner
  sets the default unless ``--set NAME=VALUE``), ``NAME: KIND`` (required) or
  ``[NAME]: KIND`` (optional: unset unless given).  Before the first route it applies to
  every route.  The declarations are the only names a run takes (an allow list: ``--set``
  of any other name is refused, whatever it is), and every value, a default included,
  must match its kind's grammar.  A name the runner sets itself (`RUNNER_ENVIRONMENT`) or
  bash sets or reads itself (`SHELL_VARIABLES`) cannot be declared.
* A step's text holds no character that shows other than bash reads it
  (`hidden_character`): bidi overrides and isolates, zero-width characters, non-ASCII
  spaces, line and paragraph separators, NEL, ESC and every other C0/C1 control but TAB
  (LF ends lines); the refusal names the route, step, line, column and code point.
* Strictness: UTF-8 without BOM, LF only, no tab or indented fences, no fence inside
  a blockquote or an HTML comment, no setext headings, no unclosed fence, no shell
  step outside a route, no empty step, no route without steps.

Each step keeps its exact bytes (the lines between the fences, each with its LF),
their SHA-256 and its 1-based line range.  Only the standard library is used: the
acceptance runner (`pipeline.stages.accept run`) runs from a plain clone.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field

from pipeline.errors import InputError
from pipeline.util.safepath import relpath_problem

SHELLS = {"sh": "bash", "powershell": "Windows PowerShell 5.1"}
# Names a reader might use for a shell block; refused so that nothing is run by accident or skipped by accident.
AMBIGUOUS_SHELLS = frozenset({"bash", "shell", "zsh", "ksh", "dash", "ps1", "ps", "pwsh", "posh", "cmd", "bat", "batch", "shell-session"})
CAPABILITIES = {
    "oci-engine": "an OCI engine (podman or docker) that runs containers",
    "gpu": "an NVIDIA GPU with its driver (nvidia-smi lists it)",
    "network": "public network access (PyPI, GitHub, Hugging Face), granted by the operator",
    "github": "GitHub API access with the maintainer's credentials, granted by the operator",
}
# Capabilities the runner cannot probe: the operator grants them (accept run --grant).
GRANTABLE = ("network", "github")
PARAMETERS_INFO = "parameters"
MAX_DOCUMENT_BYTES = 1 << 20
MAX_STEP_BYTES = 64 * 1024

ROUTE_HEADING = re.compile(r"## Route `(?P<id>[a-z0-9][a-z0-9-]{0,62})`: (?P<title>\S.*\S|\S)")
ATX_HEADING = re.compile(r"(?P<hashes>#{1,6})(?:[ \t]+(?P<text>.*?))?[ \t]*#*[ \t]*")
FENCE = re.compile(r"(?P<fence>`{3,}|~{3,})(?P<info>.*)")
INDENTED_FENCE = re.compile(r"[ \t]+(`{3,}|~{3,})")
QUOTED_FENCE = re.compile(r"[ \t]*>[ \t>]*(`{3,}|~{3,})")
SETEXT_UNDERLINE = re.compile(r"(=+|-+)[ \t]*")
PARAMETER_NAME_RE = re.compile(r"[A-Z][A-Z0-9_]{0,63}")
PARAMETER_LINE = re.compile(r"(?:\[(?P<optional>[A-Z][A-Z0-9_]{0,63})\]|(?P<name>[A-Z][A-Z0-9_]{0,63})): (?P<kind>[a-z][a-z0-9-]{0,31})(?: = (?P<value>.*))?")
PARAMETER_LINE_FORM = "NAME: KIND = default, NAME: KIND (required) or [NAME]: KIND (optional, unset unless given); NAME in capitals"

# The one list of what the runner itself puts in a route's environment, and why: a route starts from
# these and its declared parameters, never from the runner's own environment (docs/release-tree.md).
WINDOWS_SYSTEM_VARIABLES = ("SystemRoot", "SystemDrive", "windir", "ComSpec", "PATHEXT", "ProgramData", "ProgramFiles", "ProgramFiles(x86)", "CommonProgramFiles", "NUMBER_OF_PROCESSORS", "PROCESSOR_ARCHITECTURE", "OS")
RUNNER_ENVIRONMENT: dict[str, str] = {
    "HOME": "a fresh folder inside the run's work folder: no configuration of the host's user (git, pip, podman ...) is read",
    "TMPDIR": "a fresh folder inside the run's work folder",
    "PATH": "the bin folder of the Python that runs the runner (its virtual environment), then the system folders",
    "LANG": "C.UTF-8: the same messages and collation on every host",
    "LC_ALL": "C.UTF-8: overrides every other LC_* variable",
    "TZ": "UTC: the same times on every host",
    "TERM": "dumb: no terminal escape sequences in a step's output",
    "OMP_NINFER_RELEASE": "the bundle's release (release routes): the steps read the manifest of that release",
    **dict.fromkeys(("USERPROFILE", "TEMP", "TMP", "APPDATA", "LOCALAPPDATA"), "Windows: fresh folders inside the run's work folder, as HOME and TMPDIR"),
    **dict.fromkeys(WINDOWS_SYSTEM_VARIABLES, "Windows: PowerShell and .NET need it to start; a host fact, not a secret, copied from the runner's environment"),
}
# The shell's own variables (bash(1), "Shell Variables": those the Bourne shell and bash set or read
# themselves).  Not a guess at what is dangerous: the steps run in bash, and a parameter of one of
# these names would change how bash reads the documented text (IFS, CDPATH, BASH_ENV ...).
SHELL_VARIABLES = frozenset({
    "CDPATH", "IFS", "MAIL", "MAILPATH", "OPTARG", "OPTIND", "PS1", "PS2",  # Bourne shell
    "BASH", "BASHOPTS", "BASHPID", "BASH_ALIASES", "BASH_ARGC", "BASH_ARGV", "BASH_ARGV0", "BASH_CMDS", "BASH_COMMAND", "BASH_COMPAT",
    "BASH_ENV", "BASH_EXECUTION_STRING", "BASH_LINENO", "BASH_LOADABLES_PATH", "BASH_MONOSECONDS", "BASH_REMATCH", "BASH_SOURCE",
    "BASH_SUBSHELL", "BASH_TRAPSIG", "BASH_VERSINFO", "BASH_VERSION", "BASH_XTRACEFD", "CHILD_MAX", "COLUMNS", "COMP_CWORD", "COMP_KEY",
    "COMP_LINE", "COMP_POINT", "COMP_TYPE", "COMP_WORDBREAKS", "COMP_WORDS", "COMPREPLY", "COPROC", "DIRSTACK", "EMACS", "ENV",
    "EPOCHREALTIME", "EPOCHSECONDS", "EUID", "EXECIGNORE", "FCEDIT", "FIGNORE", "FUNCNAME", "FUNCNEST", "GLOBIGNORE", "GLOBSORT", "GROUPS",
    "HISTCMD", "HISTCONTROL", "HISTFILE", "HISTFILESIZE", "HISTIGNORE", "HISTSIZE", "HISTTIMEFORMAT", "HOSTFILE", "HOSTNAME", "HOSTTYPE",
    "IGNOREEOF", "INPUTRC", "INSIDE_EMACS", "LINENO", "LINES", "MACHTYPE", "MAILCHECK", "MAPFILE", "OLDPWD", "OPTERR", "OSTYPE",
    "PIPESTATUS", "POSIXLY_CORRECT", "PPID", "PROMPT_COMMAND", "PROMPT_DIRTRIM", "PS0", "PS3", "PS4", "PWD", "RANDOM", "READLINE_ARGUMENT",
    "READLINE_LINE", "READLINE_MARK", "READLINE_POINT", "REPLY", "SECONDS", "SHELL", "SHELLOPTS", "SHLVL", "SRANDOM", "TIMEFORMAT", "TMOUT",
    "UID", "_",
})
_OWNED = {name.upper() for name in (*RUNNER_ENVIRONMENT, *SHELL_VARIABLES)}  # Windows names ignore case
OWNED_FIX = "rename the parameter (e.g. OMP_NINFER_<NAME>) and read it in the block; the runner sets the shell's environment itself"


def parameter_name_problem(name: object) -> str | None:
    """Why `name` cannot be declared as a route parameter (not a name, or one the runner or the shell sets), or None.

    This is not the gate of a run: a run takes only the names its route declares (an allow list)."""
    if not isinstance(name, str) or not PARAMETER_NAME_RE.fullmatch(name):
        return "is not a parameter name (capitals, digits and '_', starting with a capital)"
    if name.upper() in _OWNED:
        return "is a variable the runner sets itself or bash sets or reads itself (bash(1), Shell Variables)"
    return None


# -- characters a reader does not see as bash reads them -----------------------------------------

# Unicode categories refused in step text and parameter values: controls (Cc; TAB and LF are the
# only ones allowed, and only in step text), format characters (Cf: bidi embeddings, overrides and
# isolates, zero-width characters, the BOM), spaces other than U+0020 (Zs: NBSP ...), line and
# paragraph separators (Zl, Zp), private use (Co) and surrogates (Cs).
HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zs", "Zl", "Zp", "Co", "Cs"})


def hidden_character(text: str, *, allowed: str = "\t\n") -> tuple[int, str] | None:
    """(0-based index, character) of the first character of `text` that does not show as what it is, or None."""
    for index, char in enumerate(text):
        if char in allowed or char == " ":
            continue
        if unicodedata.category(char) in HIDDEN_CATEGORIES:
            return index, char
    return None


def code_point(char: str) -> str:
    """'U+202E RIGHT-TO-LEFT OVERRIDE': a character named so that a reader can find it."""
    name = unicodedata.name(char, "") or {"\x1b": "ESCAPE", "\x00": "NULL", "\x7f": "DELETE", "\x85": "NEXT LINE (NEL)"}.get(char, "a control character")
    return f"U+{ord(char):04X} {name}"


# -- value grammars of parameters ----------------------------------------------------------------

# URLs of parameters: no quote, '$', ';', '&', '=', '?', '#' or space (a mirror pair splits on '=').
_URL_PATH = r"(/[A-Za-z0-9._~%+,:@/-]*)?"
_LOOPBACK_HTTP = re.compile(r"http://(127\.0\.0\.1|localhost|\[::1\])(:[0-9]{1,5})?" + _URL_PATH)
_HTTPS_URL = re.compile(r"https://[A-Za-z0-9.-]+(:[0-9]{1,5})?" + _URL_PATH)
_LANE = r"[a-z0-9][a-z0-9-]{0,62}"
_COUNT = re.compile(r"[1-9][0-9]{0,3}")
_SIZE = re.compile(r"[1-9][0-9]{0,12}[KMGT]?")
_SECONDS = re.compile(r"[1-9][0-9]{0,5}")
_REGISTRY = re.compile(r"(?:[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?|\[::1\])(?::[1-9][0-9]{0,4})?(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*){1,8}")


def is_mirror_url(url: str) -> bool:
    """A mirror prefix (OMP_NINFER_MIRROR, pinned --mirrored): HTTPS, or plain HTTP on this host's loopback."""
    return bool(_HTTPS_URL.fullmatch(url) or _LOOPBACK_HTTP.fullmatch(url))


# Besides letters and digits (any script): no quote, '$', '`', ';', '|', '&', '<', '>', '*', '?', '[', '\\' ...,
# so that a path means the same to a step that forgets to quote it.
_PATH_PUNCTUATION = frozenset("._+@=,:~/ -")


def _is_path(value: str, *, absolute: bool) -> bool:
    """A relative path inside the clone (no '..', no '.', no empty segment); with `absolute`, also an absolute POSIX path
    without '..' segments.  Never an option ('-...'), never a hidden character."""
    if not value or value.startswith("-") or len(value) > 4096 or not all(char.isalnum() or char in _PATH_PUNCTUATION for char in value):
        return False
    if value.startswith("/"):
        return absolute and ".." not in value.split("/")
    return relpath_problem(value, portable=False) is None


def _options(value: str, grammar: dict[str, Callable[[str], object]]) -> bool:
    """Words separated by single spaces: each an option of `grammar` followed by one value its check accepts."""
    words = value.split(" ")
    if not value or len(words) % 2:
        return False
    return all(option in grammar and bool(grammar[option](word)) for option, word in zip(words[::2], words[1::2], strict=True))


def _mirrors(value: str) -> bool:
    pairs = value.split(" ")
    return bool(value) and all(len(pair.split("=")) == 2 and all(is_mirror_url(url) for url in pair.split("=")) for pair in pairs)


def _source(value: str) -> bool:
    base, at, commit = value.rpartition("@")
    if at and re.fullmatch(r"[0-9a-f]{40}", commit):
        value = base
    return bool(_HTTPS_URL.fullmatch(value)) or _is_path(value, absolute=True)


def _release(value: str) -> bool:
    # The one release-name grammar, imported when used: the runner stays light.
    from pipeline.formats.release.names import RELEASE_RE

    return bool(RELEASE_RE.fullmatch(value))


def _port(value: str) -> bool:
    return bool(re.fullmatch(r"[1-9][0-9]{0,4}", value)) and int(value) <= 65535


def _text(value: str) -> bool:
    # Never option-like: options have kinds of their own that name each option they allow.
    return 0 < len(value) <= 256 and not value.startswith("-") and hidden_character(value, allowed="") is None


@dataclass(frozen=True)
class ParameterKind:
    id: str
    grammar: str  # what a refusal and docs/release-tree.md name
    matches: Callable[[str], bool]


PARAMETER_KINDS: dict[str, ParameterKind] = {
    kind.id: kind
    for kind in (
        ParameterKind("text", "printable text on one line, 1 to 256 characters, not starting with '-', without control, format or non-ASCII space characters", _text),
        ParameterKind("email", "an e-mail address NAME@DOMAIN (letters, digits, '.', '_', '%', '+', '-')", lambda v: len(v) <= 254 and bool(re.fullmatch(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+", v))),
        ParameterKind("release", "a product release name: vX.Y.Z or vX.Y.Z-beta.N", _release),
        ParameterKind("lane", "a lane id: lower-case letters, digits and '-', e.g. rtx4090-windows-native", lambda v: bool(re.fullmatch(_LANE, v))),
        ParameterKind("lanes", "lane ids separated by single spaces", lambda v: bool(re.fullmatch(f"{_LANE}(?: {_LANE})*", v))),
        ParameterKind("sha256", "a SHA-256: 64 lower-case hex digits", lambda v: bool(re.fullmatch(r"[0-9a-f]{64}", v))),
        ParameterKind("digest", "a digest sha256:<64 lower-case hex digits>", lambda v: bool(re.fullmatch(r"sha256:[0-9a-f]{64}", v))),
        ParameterKind("commit", "a full commit: 40 lower-case hex digits", lambda v: bool(re.fullmatch(r"[0-9a-f]{40}", v))),
        ParameterKind("port", "a TCP port: 1 to 65535 in decimal", _port),
        ParameterKind("url", "an https:// URL, or an http:// URL on the loopback (127.0.0.1, localhost, [::1])", is_mirror_url),
        ParameterKind("mirrors", "URL_PREFIX=MIRROR_PREFIX pairs separated by single spaces, each prefix an https:// URL or an http:// URL on the loopback", _mirrors),
        ParameterKind("clone-path", "a relative path inside the clone: no '..', '.' or empty segment, not starting with '-', of letters, digits, spaces and ._+@=,:~/-", lambda v: _is_path(v, absolute=False)),
        ParameterKind("path", "a relative path inside the clone, or an absolute path: no '..' segment, not starting with '-', of letters, digits, spaces and ._+@=,:~/-", lambda v: _is_path(v, absolute=True)),
        ParameterKind("source", "URL@COMMIT (an https:// URL and a 40-hex commit) or a path (relative inside the clone, or absolute) with an optional @COMMIT", _source),
        ParameterKind("registry", "HOST[:PORT]/REPOSITORY (lower-case repository path components)", lambda v: bool(_REGISTRY.fullmatch(v))),
        ParameterKind("audit-options", "options of 'audit' separated by single spaces, only: --skip-larger-than SIZE (e.g. 4G), --jobs N, --connections N", lambda v: _options(v, {"--skip-larger-than": _SIZE.fullmatch, "--jobs": _COUNT.fullmatch, "--connections": _COUNT.fullmatch})),
        ParameterKind(
            "accept-run-options", "options of 'accept run' separated by single spaces, only: --parameters PATH, --grant network|github, --deny CAPABILITY, --step-timeout SECONDS",
            lambda v: _options(v, {"--parameters": lambda w: _is_path(w, absolute=True), "--grant": GRANTABLE.__contains__, "--deny": CAPABILITIES.__contains__, "--step-timeout": _SECONDS.fullmatch}),
        ),
    )
}


def parameter_value_problem(kind: str, value: object) -> str | None:
    """Why `value` is not a value of the parameter kind `kind` (its grammar, to be named in the refusal), or None."""
    grammar = PARAMETER_KINDS.get(kind)
    if grammar is None:
        return "has no known kind (one of " + ", ".join(PARAMETER_KINDS) + ")"
    if not isinstance(value, str) or not grammar.matches(value):
        return grammar.grammar
    return None


@dataclass(frozen=True)
class Parameter:
    name: str
    default: str | None  # the value the runner sets unless --set NAME=VALUE; None: unset
    line: int
    kind: str  # PARAMETER_KINDS: the grammar every value (a default included) must match
    required: bool = False  # NAME: KIND alone: the runner refuses to start without --set NAME=VALUE


@dataclass(frozen=True)
class Step:
    route: str
    index: int  # 1-based, in document order within the route
    shell: str
    requires: tuple[str, ...]
    text: str  # the exact lines between the fences, each ending in LF
    sha256: str
    bytes: int
    line_start: int  # first line of the block's content (1-based)
    line_end: int  # last line of the block's content
    info: str


@dataclass(frozen=True)
class Route:
    id: str
    title: str
    heading_line: int
    end_line: int
    shell: str
    steps: tuple[Step, ...]
    parameters: tuple[Parameter, ...]
    examples: int  # `sh example` / `powershell example` blocks (shown, not run)


@dataclass(frozen=True)
class Document:
    path: str
    sha256: str
    bytes: int
    routes: dict[str, Route] = field(default_factory=dict)
    parameters: tuple[Parameter, ...] = ()

    def route(self, route_id: str) -> Route:
        if route_id not in self.routes:
            raise InputError(
                "has no such route",
                file=self.path,
                field=f"route {route_id}",
                found=route_id,
                expected="one of " + ", ".join(self.routes) if self.routes else "a '## Route `<id>`: <title>' heading",
                fix="name a route of the document (python -m pipeline accept routes DOCUMENT lists them)",
            )
        return self.routes[route_id]

    def parameters_of(self, route_id: str) -> tuple[Parameter, ...]:
        return self.parameters + self.route(route_id).parameters


def _error(path: str, line: int, what: str, *, found: object = None, expected: str | None = None, fix: str | None = None) -> InputError:
    kwargs: dict = {"file": path, "field": f"line {line}"}
    if found is not None:
        kwargs["found"] = found
    if expected is not None:
        kwargs["expected"] = expected
    return InputError(what, why="route documents are run exactly as written, so the scanner is strict", fix=fix, **kwargs)


def _check_bytes(path: str, data: bytes) -> str:
    if len(data) > MAX_DOCUMENT_BYTES:
        raise InputError("is too large for a route document", file=path, found=f"{len(data)} bytes", expected=f"at most {MAX_DOCUMENT_BYTES} bytes")
    if data.startswith(b"\xef\xbb\xbf"):
        raise InputError("starts with a UTF-8 byte-order mark", file=path, fix="save the document as UTF-8 without BOM")
    if b"\r" in data:
        line = data[: data.index(b"\r")].count(b"\n") + 1
        raise _error(path, line, "contains a carriage return", fix="use LF line endings (git config core.autocrlf false)")
    if b"\x00" in data:
        raise _error(path, data[: data.index(b"\x00")].count(b"\n") + 1, "contains a NUL byte")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _error(path, data[: exc.start].count(b"\n") + 1, f"is not valid UTF-8 ({exc.reason})") from None
    if text and not text.endswith("\n"):
        raise _error(path, text.count("\n") + 1, "does not end with a newline")
    return text


def _markers(path: str, line: int, shell: str, tokens: list[str]) -> tuple[bool, tuple[str, ...]]:
    example = False
    requires: list[str] = []
    seen: set[str] = set()
    for token in tokens:
        key = token.split("=", 1)[0]
        if key in seen:
            raise _error(path, line, f"repeats the marker {key!r}", found=token)
        seen.add(key)
        if token == "example":
            example = True
        elif token.startswith("requires="):
            caps = token[len("requires="):].split(",")
            for cap in caps:
                if cap not in CAPABILITIES:
                    raise _error(path, line, "names an unknown capability", found=cap, expected="one of " + ", ".join(sorted(CAPABILITIES)))
            if len(set(caps)) != len(caps):
                raise _error(path, line, "repeats a capability", found=token)
            requires = sorted(caps)
        else:
            raise _error(path, line, f"has an unknown marker after {shell!r}", found=token, expected="'example' or 'requires=CAP[,CAP]'")
    if example and requires:
        raise _error(path, line, "an example is never run, so it cannot require a capability", found=" ".join(tokens))
    return example, tuple(requires)


def _refuse_hidden(path: str, first_line: int, lines: list[str], where: str, *, allowed: str) -> None:
    """Refuse a block whose text holds a character that shows other than the shell reads it (hidden_character)."""
    for offset, line in enumerate(lines):
        found = hidden_character(line, allowed=allowed)
        if found is not None:
            column, char = found
            raise _error(
                path, first_line + offset, f"{where} holds {code_point(char)} at line {first_line + offset}, column {column + 1}",
                found=line, expected="printable characters, spaces (U+0020)" + (" and tabs" if "\t" in allowed else "") + " only",
                fix="delete the character or write it visibly (bash: $'\\uXXXX'); what a reviewer sees must be what the shell runs",
            )


def _parameters(path: str, start: int, lines: list[str]) -> list[Parameter]:
    _refuse_hidden(path, start, lines, "the parameters block", allowed="")
    out: list[Parameter] = []
    for offset, raw in enumerate(lines):
        number = start + offset
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        match = PARAMETER_LINE.fullmatch(raw)
        if not match:
            raise _error(path, number, "is not a parameter line", found=raw, expected=PARAMETER_LINE_FORM + "; KIND one of " + ", ".join(PARAMETER_KINDS))
        name = match.group("name") or match.group("optional")
        problem = parameter_name_problem(name)
        if problem is not None:
            raise _error(path, number, f"declares a parameter the runner refuses ({name} {problem})", found=name, expected="another name", fix=OWNED_FIX)
        if name in {p.name for p in out}:
            raise _error(path, number, "declares a parameter twice", found=name)
        kind, default = match.group("kind"), match.group("value")
        if kind not in PARAMETER_KINDS:
            raise _error(path, number, f"declares {name} of an unknown kind", found=kind, expected="one of " + ", ".join(PARAMETER_KINDS))
        if default is not None and match.group("optional"):
            raise _error(path, number, f"gives the optional parameter {name} a default", found=raw, expected=f"[{name}]: {kind} (unset unless given) or {name}: {kind} = DEFAULT")
        if default is not None and (problem := parameter_value_problem(kind, default)) is not None:
            raise _error(path, number, f"declares a default of {name} outside its grammar", found=default, expected=problem)
        out.append(Parameter(name, default, number, kind, required=match.group("name") is not None and default is None))
    return out


def _leaves_comment_open(line: str, *, opened: bool) -> bool:
    """Whether an HTML comment is open after this line, reading every `<!--` and `-->` in order.

    `<!-- a --> <!--` closes one comment and opens another, which a browser keeps open over the fences
    after it: they would run without being seen.  (An unclosed `<!--` in paragraph text renders as text
    in CommonMark; treating it as a comment only refuses more documents, never fewer.)
    """
    position = 0
    while True:
        marker = line.find("-->" if opened else "<!--", position)
        if marker < 0:
            return opened
        position = marker + (3 if opened else 4)
        opened = not opened


def scan(data: bytes, path: str) -> Document:
    """Parse a route document; raises InputError naming the line of the first problem."""
    text = _check_bytes(path, data)
    lines = text.split("\n")[:-1] if text else []
    routes: dict[str, Route] = {}
    doc_parameters: list[Parameter] = []
    current: dict | None = None  # the route being read
    in_comment = False
    previous_text = False  # the previous line was paragraph text (a setext underline would make it a heading)
    number = 0

    def close_route(end_line: int) -> None:
        nonlocal current
        if current is None:
            return
        if not current["steps"]:
            raise _error(path, current["line"], f"route {current['id']!r} has no steps", expected="at least one fenced block whose info string names its shell (sh or powershell)")
        shells = {s.shell for s in current["steps"]}
        if len(shells) != 1:
            raise _error(path, current["line"], f"route {current['id']!r} mixes shells", found=sorted(shells), expected="one shell per route (a route runs in one shell session)")
        routes[current["id"]] = Route(
            id=current["id"],
            title=current["title"],
            heading_line=current["line"],
            end_line=end_line,
            shell=next(iter(shells)),
            steps=tuple(current["steps"]),
            parameters=tuple(current["parameters"]),
            examples=current["examples"],
        )
        current = None

    index = 0
    while index < len(lines):
        line = lines[index]
        number = index + 1
        if in_comment:
            if FENCE.match(line) or INDENTED_FENCE.match(line):
                raise _error(path, number, "a fence inside an HTML comment is hidden from readers", fix="move the block out of the comment or delete it")
            in_comment = _leaves_comment_open(line, opened=True)
            index += 1
            continue
        if INDENTED_FENCE.match(line):
            raise _error(path, number, "is an indented fence", found=line.strip(), expected="fences at the left margin (column 1)", fix="un-indent the block; lists may not hold steps")
        if QUOTED_FENCE.match(line):
            raise _error(path, number, "is a fence inside a blockquote", found=line.strip(), fix="move the block out of the quote")
        fence = FENCE.fullmatch(line)
        if fence:
            marker = fence.group("fence")
            info = fence.group("info").strip()
            if marker[0] == "`" and "`" in info:
                raise _error(path, number, "has a backtick in a backtick fence's info string", found=line)
            body: list[str] = []
            close = re.compile(re.escape(marker[0]) + "{" + str(len(marker)) + r",}[ \t]*")
            end = index + 1
            while end < len(lines) and not close.fullmatch(lines[end]):
                body.append(lines[end])
                end += 1
            if end >= len(lines):
                raise _error(path, number, "opens a fence that is never closed", found=line)
            tokens = info.split()
            language = tokens[0] if tokens else ""
            if language in AMBIGUOUS_SHELLS:
                raise _error(
                    path, number, "names a shell other than sh or powershell", found=language,
                    expected="'sh' (bash) or 'powershell' (Windows PowerShell 5.1) for a step; 'text' or 'console' for output",
                    fix="rename the info string; add 'example' after the shell for a block that must not run",
                )
            if language == PARAMETERS_INFO:
                declared = _parameters(path, number + 1, body)
                target = current["parameters"] if current is not None else doc_parameters
                known = {p.name for p in doc_parameters} | ({p.name for p in current["parameters"]} if current is not None else set())
                if current is None:  # a document-wide block after a route applies to the routes read before it too
                    known |= {p.name for route in routes.values() for p in route.parameters}
                clash = {p.name for p in declared} & known
                if clash:
                    raise _error(path, number, "declares a parameter that is already declared", found=sorted(clash))
                target.extend(declared)
            elif language in SHELLS:
                example, requires = _markers(path, number, language, tokens[1:])
                if example:
                    if current is not None:
                        current["examples"] += 1
                else:
                    if current is None:
                        raise _error(path, number, "is a shell step outside any route", found=line, expected="inside a '## Route `<id>`: <title>' section", fix="move it into a route, or mark it 'example' if it must not run")
                    if not body or not "".join(body).strip():
                        raise _error(path, number, "is an empty step", fix="write the commands, or remove the block")
                    _refuse_hidden(path, number + 1, body, f"step {len(current['steps']) + 1} of route {current['id']}", allowed="\t")
                    step_text = "".join(item + "\n" for item in body)
                    encoded = step_text.encode("utf-8")
                    if len(encoded) > MAX_STEP_BYTES:
                        raise _error(path, number, "is too large for one step", found=f"{len(encoded)} bytes", expected=f"at most {MAX_STEP_BYTES}")
                    current["steps"].append(
                        Step(
                            route=current["id"],
                            index=len(current["steps"]) + 1,
                            shell=language,
                            requires=requires,
                            text=step_text,
                            sha256=hashlib.sha256(encoded).hexdigest(),
                            bytes=len(encoded),
                            line_start=number + 1,
                            line_end=end,
                            info=info,
                        )
                    )
            index = end + 1
            previous_text = False
            continue
        if previous_text and SETEXT_UNDERLINE.fullmatch(line):
            raise _error(path, number, "underlines the previous line into a setext heading", found=line, expected="an ATX heading ('## ...') or a blank line before a rule")
        heading = ATX_HEADING.fullmatch(line)
        if heading and line.startswith("#"):
            level = len(heading.group("hashes"))
            title = heading.group("text") or ""
            if level <= 2:
                close_route(number - 1)
            if level == 2 and title.startswith("Route"):
                match = ROUTE_HEADING.fullmatch(line.rstrip())
                if not match:
                    raise _error(path, number, "starts like a route heading but is not one", found=line, expected="## Route `<id>`: <title> (id: lower-case letters, digits, '-')")
                if match.group("id") in routes:
                    raise _error(path, number, "repeats a route id", found=match.group("id"))
                current = {"id": match.group("id"), "title": match.group("title"), "line": number, "steps": [], "parameters": [], "examples": 0}
            previous_text = False
            index += 1
            continue
        in_comment = _leaves_comment_open(line, opened=False)
        previous_text = bool(line.strip()) and not line.lstrip().startswith(("|", "-", "*", "+", ">")) and not re.match(r"\s*[0-9]+[.)]\s", line)
        index += 1
    if in_comment:
        raise _error(path, number, "an HTML comment is never closed")
    close_route(len(lines))
    if not routes:
        raise InputError("holds no route", file=path, expected="at least one '## Route `<id>`: <title>' section with steps")
    return Document(path=path, sha256=hashlib.sha256(data).hexdigest(), bytes=len(data), routes=routes, parameters=tuple(doc_parameters))
