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
* A ``parameters`` fence declares the variables the steps expect from the reader:
  ``NAME=default`` (the runner sets the default unless ``--set NAME=VALUE``),
  ``NAME`` alone (required) or ``[NAME]`` (optional: unset unless given).  Before
  the first route it applies to every route.  A name the runner sets itself (``HOME``,
  ``PATH``, ...) or one that makes the shell, the loader or an interpreter run code of its
  own (``BASH_ENV``, ``ENV``, ``IFS``, ``LD_*``, ``PYTHON*``, ``GIT_*`` but the author's and
  committer's identity; `DENIED_NAMES`, `DENIED_PREFIXES`) is refused: a parameter's value
  is the operator's, but it can never change what the documented text does.
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
from dataclasses import dataclass, field

from pipeline.errors import InputError

SHELLS = {"sh": "bash", "powershell": "Windows PowerShell 5.1"}
# Names a reader might use for a shell block; refused so that nothing is run by accident or skipped by accident.
AMBIGUOUS_SHELLS = frozenset({"bash", "shell", "zsh", "ksh", "dash", "ps1", "ps", "pwsh", "posh", "cmd", "bat", "batch", "shell-session"})
CAPABILITIES = {
    "oci-engine": "an OCI engine (podman or docker) that runs containers",
    "gpu": "an NVIDIA GPU with its driver (nvidia-smi lists it)",
    "network": "public network access (PyPI, GitHub, Hugging Face), granted by the operator",
    "github": "GitHub API access with the maintainer's credentials, granted by the operator",
}
PARAMETERS_INFO = "parameters"
MAX_DOCUMENT_BYTES = 1 << 20
MAX_STEP_BYTES = 64 * 1024

ROUTE_HEADING = re.compile(r"## Route `(?P<id>[a-z0-9][a-z0-9-]{0,62})`: (?P<title>\S.*\S|\S)")
ATX_HEADING = re.compile(r"(?P<hashes>#{1,6})(?:[ \t]+(?P<text>.*?))?[ \t]*#*[ \t]*")
FENCE = re.compile(r"(?P<fence>`{3,}|~{3,})(?P<info>.*)")
INDENTED_FENCE = re.compile(r"[ \t]+(`{3,}|~{3,})")
QUOTED_FENCE = re.compile(r"[ \t]*>[ \t>]*(`{3,}|~{3,})")
SETEXT_UNDERLINE = re.compile(r"(=+|-+)[ \t]*")
PARAMETER_LINE = re.compile(r"\[(?P<optional>[A-Z][A-Z0-9_]{0,63})\]|(?P<name>[A-Z][A-Z0-9_]{0,63})(?:=(?P<value>.*))?")
# Set by the runner itself; a document cannot redefine them.
RESERVED_NAMES = frozenset({"HOME", "PATH", "LANG", "LC_ALL", "TZ", "TMPDIR", "TERM", "PWD", "OLDPWD", "SHELL", "OMP_NINFER_RELEASE"})
# Variables that make the shell, the loader or an interpreter run something other than the
# documented text (BASH_ENV and ENV name a file bash sources before the first step; LD_PRELOAD
# loads a library into every program; PYTHONSTARTUP, PYTHONPATH, GIT_SSH_COMMAND ... run code
# of their own).  No route may declare them and no bundle, --set or receipt may carry them:
# the values of parameters are the operator's, their names are the document's and never these.
DENIED_NAMES: dict[str, str] = {
    **dict.fromkeys(("ENV", "IFS", "SHELLOPTS", "BASHOPTS", "PS0", "PS1", "PS2", "PS3", "PS4", "PROMPT_COMMAND", "CDPATH", "GLOBIGNORE", "EXECIGNORE", "FIGNORE", "HISTFILE", "INPUTRC", "POSIXLY_CORRECT", "SHLVL", "TMOUT", "TIMEFORMAT", "OPTIND", "OPTARG", "OPTERR", "FUNCNEST", "HOSTFILE", "MAIL", "MAILPATH", "MAILCHECK", "UID", "EUID", "PPID", "GROUPS", "HOSTNAME", "HOSTTYPE", "MACHTYPE", "OSTYPE"), "changes how the shell starts or runs the steps"),
    **dict.fromkeys(("GCONV_PATH", "LOCPATH", "NLSPATH", "GLIBC_TUNABLES", "HOSTALIASES", "LOCALDOMAIN", "RES_OPTIONS"), "makes the C library load or read files of its own"),
    **dict.fromkeys(("PERL5LIB", "PERL5OPT", "PERLLIB", "PERL5DB", "RUBYOPT", "RUBYLIB", "NODE_OPTIONS", "NODE_PATH"), "makes an interpreter run code before the program it starts"),
    **dict.fromkeys(("USERPROFILE", "TEMP", "TMP", "APPDATA", "LOCALAPPDATA", "SYSTEMROOT", "SYSTEMDRIVE", "WINDIR", "COMSPEC", "PATHEXT", "PSMODULEPATH", "PSEXECUTIONPOLICYPREFERENCE", "PROGRAMDATA", "PROGRAMFILES", "COMMONPROGRAMFILES"), "is set by the runner or Windows itself (Windows names ignore case)"),
}
DENIED_PREFIXES: tuple[tuple[str, str], ...] = (
    ("BASH", "changes how bash starts or runs the steps (BASH_ENV is sourced before the first step)"),
    ("LD_", "changes what the dynamic loader loads into every program"),
    ("DYLD_", "changes what the dynamic loader loads into every program"),
    ("PYTHON", "makes Python run or import code of its own at start-up"),
    ("LC_", "is set by the runner itself (LC_ALL=C.UTF-8)"),
    ("COMP_", "changes how the shell runs the steps"),
    ("READLINE_", "changes how the shell runs the steps"),
)
# git reads these for the author's identity only; every other GIT_* variable can make git run a program or read another repository.
GIT_IDENTITY = frozenset({"GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_AUTHOR_DATE", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "GIT_COMMITTER_DATE"})
PARAMETER_NAME_RE = re.compile(r"[A-Z][A-Z0-9_]{0,63}")
DENIED_FIX = "rename the parameter (e.g. OMP_NINFER_<NAME>) and read it in the block; the runner sets the shell's environment itself"


def parameter_name_problem(name: object) -> str | None:
    """Why `name` cannot be a route parameter (a variable the runner sets, or one that runs code), or None."""
    if not isinstance(name, str) or not PARAMETER_NAME_RE.fullmatch(name):
        return "is not a parameter name (capitals, digits and '_', starting with a capital)"
    if name in RESERVED_NAMES:
        return "is a variable the runner sets itself"
    if name in DENIED_NAMES:
        return DENIED_NAMES[name]
    for prefix, why in DENIED_PREFIXES:
        if name.startswith(prefix):
            return why
    if name.startswith("GIT_") and name not in GIT_IDENTITY:
        return "can make git run another program or read another repository (only GIT_AUTHOR_* and GIT_COMMITTER_* are parameters)"
    return None


@dataclass(frozen=True)
class Parameter:
    name: str
    default: str | None  # the value the runner sets unless --set NAME=VALUE; None: unset
    line: int
    required: bool = False  # NAME alone: the runner refuses to start without --set NAME=VALUE


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


def _parameters(path: str, start: int, lines: list[str]) -> list[Parameter]:
    out: list[Parameter] = []
    for offset, raw in enumerate(lines):
        number = start + offset
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        match = PARAMETER_LINE.fullmatch(raw)
        if not match:
            raise _error(path, number, "is not a parameter line", found=raw, expected="NAME=default, NAME (required) or [NAME] (optional, unset unless given); NAME in capitals")
        name = match.group("name") or match.group("optional")
        problem = parameter_name_problem(name)
        if problem is not None:
            raise _error(path, number, f"declares a parameter the runner refuses ({name} {problem})", found=name, expected="another name", fix=DENIED_FIX)
        if name in {p.name for p in out}:
            raise _error(path, number, "declares a parameter twice", found=name)
        out.append(Parameter(name, match.group("value"), number, required=match.group("name") is not None and match.group("value") is None))
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
