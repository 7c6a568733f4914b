"""Debian repository documents: the Release file (InRelease's signed text), `Packages` indexes, control stanzas.

The one owner of the deb822 text format as this pipeline reads it (Debian Policy §5.1: stanzas of
`Field: value` lines, continuation lines start with a space or a tab, stanzas separated by blank
lines), of package relations (`Depends`, `Pre-Depends`, `Provides`, `Conflicts`, `Breaks`: Policy
§7.1) and of Debian version order (Policy §5.6.12, dpkg's `verrevcmp`; the tests compare it with
`dpkg --compare-versions`).

Everything here parses bytes that were verified first: the Release text only as gpgv returned it
from a good signature (`infra/openpgp.py`), a `Packages` index only after its SHA-256 and size
matched that Release text.  Malformed input is refused naming the document and the line, never
guessed at: a field given twice, a line that is neither a field nor a continuation, a relation
that does not parse.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pipeline.errors import InputError
from pipeline.util.hashing import is_sha256_hex
from pipeline.util.safepath import relpath_problem

_FIELD = re.compile(r"([!-9;-~][!-9;-~]*):[ \t]*(.*)")  # Policy 5.1: US-ASCII without control chars, space and colon
PACKAGE_NAME = re.compile(r"[a-z0-9][a-z0-9+.-]+")
VERSION = re.compile(r"(?:[0-9]+:)?[0-9][A-Za-z0-9.+~:-]*(?<!-)")
_RELATION = re.compile(
    r"(?P<name>[a-z0-9][a-z0-9+.-]+)(?::(?P<arch>[a-z0-9-]+))?"
    r"\s*(?:\(\s*(?P<op><<|<=|=|>=|>>|<|>)\s*(?P<version>[^)\s]+)\s*\))?"
    r"(?P<rest>.*)"
)
OPERATORS = ("<<", "<=", "=", ">=", ">>")


# -- deb822 stanzas ------------------------------------------------------------------

def parse_stanzas(text: str, *, source: str) -> list[dict[str, str]]:
    """The stanzas of a deb822 document, each a dict of field -> value (continuation lines joined with '\\n')."""
    stanzas: list[dict[str, str]] = []
    current: dict[str, str] = {}
    last: str | None = None
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            if current:
                stanzas.append(current)
            current, last = {}, None
            continue
        if line[0] in " \t":
            if last is None:
                raise InputError("has a continuation line outside a field", file=source, field=f"line {number}", found=line[:80])
            current[last] += "\n" + line[1:]
            continue
        if line.startswith("#"):
            raise InputError("has a comment line, which this document may not carry", file=source, field=f"line {number}", found=line[:80])
        match = _FIELD.fullmatch(line)
        if match is None:
            raise InputError("has a line that is neither a 'Field: value' line nor a continuation", file=source, field=f"line {number}", found=line[:80])
        name = match.group(1)
        if name.lower() in (key.lower() for key in current):
            raise InputError("names a field twice in one stanza", file=source, field=f"line {number}", found=name)
        current[name] = match.group(2).rstrip()
        last = name
    if current:
        stanzas.append(current)
    return stanzas


def decode_text(data: bytes, *, source: str) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError("is not UTF-8 text", file=source, found=f"byte {exc.start}", expected="a deb822 document in UTF-8") from None
    if "\r" in text or "\x00" in text:
        raise InputError("holds a carriage return or NUL byte", file=source, expected="LF-terminated deb822 text")
    return text


# -- Release ------------------------------------------------------------------------

@dataclass(frozen=True)
class IndexEntry:
    path: str  # relative to dists/<suite>/, e.g. 'main/binary-amd64/Packages.xz'
    sha256: str
    size: int


@dataclass(frozen=True)
class Release:
    fields: dict[str, str]
    files: dict[str, IndexEntry]  # the SHA256 table

    @property
    def suite(self) -> str:
        return self.fields.get("Suite", "")

    @property
    def codename(self) -> str:
        return self.fields.get("Codename", "")

    def words(self, field: str) -> tuple[str, ...]:
        return tuple(self.fields.get(field, "").split())

    @property
    def by_hash(self) -> bool:
        return self.fields.get("Acquire-By-Hash", "").strip().lower() == "yes"


def parse_release(data: bytes, *, source: str) -> Release:
    """The Release text (only ever the verified bytes) with its SHA256 table of index files."""
    stanzas = parse_stanzas(decode_text(data, source=source), source=source)
    if len(stanzas) != 1:
        raise InputError("is not one Release stanza", file=source, found=f"{len(stanzas)} stanzas", expected="exactly one")
    fields = stanzas[0]
    table = fields.get("SHA256")
    if table is None:
        raise InputError("has no SHA256 table", file=source, field="SHA256", why="MD5 and SHA-1 are not accepted to bind index files", fix="use a repository that publishes SHA256 sums")
    files: dict[str, IndexEntry] = {}
    for line in table.split("\n"):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 3 or not is_sha256_hex(parts[0]) or not parts[1].isdigit():
            raise InputError("has a SHA256 line that is not '<sha256> <size> <path>'", file=source, field="SHA256", found=line.strip()[:120])
        if relpath_problem(parts[2], hidden=True, portable=False) is not None:
            raise InputError("lists an index path that leaves the suite folder", file=source, field="SHA256", found=parts[2])
        if parts[2] in files:
            raise InputError("lists an index file twice", file=source, field="SHA256", found=parts[2])
        files[parts[2]] = IndexEntry(parts[2], parts[0], int(parts[1]))
    return Release(fields, files)


# -- relations and versions -------------------------------------------------------------

@dataclass(frozen=True)
class Relation:
    name: str
    arch: str | None = None  # ':any', ':native' or an architecture after the name
    op: str | None = None
    version: str | None = None

    def __str__(self) -> str:
        text = self.name + (f":{self.arch}" if self.arch else "")
        return text + (f" ({self.op} {self.version})" if self.op else "")


def parse_relations(value: str, *, source: str, field: str) -> tuple[tuple[Relation, ...], ...]:
    """`a (>= 1), b | c:any` as groups of alternatives.  Architecture restrictions and build profiles are
    source-package syntax: a binary index carrying them is refused rather than half understood."""
    groups: list[tuple[Relation, ...]] = []
    flat = " ".join(value.split())
    if not flat:
        return ()
    for group_text in flat.split(","):
        alternatives = []
        for text in group_text.split("|"):
            match = _RELATION.fullmatch(text.strip())
            if match is None or match.group("rest").strip():
                raise InputError("holds a relation that does not parse", file=source, field=field, found=text.strip()[:120],
                                 expected="'name[:arch] [(op version)]' joined by ',' and '|' (Debian Policy 7.1)")
            op = {"<": "<=", ">": ">="}.get(match.group("op") or "", match.group("op"))  # the deprecated forms mean <= and >=
            version = match.group("version")
            if version is not None and not VERSION.fullmatch(version):
                raise InputError("names a version that is not a Debian version", file=source, field=field, found=version)
            alternatives.append(Relation(match.group("name"), match.group("arch"), op, version))
        groups.append(tuple(alternatives))
    return tuple(groups)


def _order(char: str) -> int:
    if char.isdigit():
        return 0
    if char.isalpha():
        return ord(char)
    if char == "~":
        return -1
    return ord(char) + 256


def _compare_part(a: str, b: str) -> int:
    """dpkg's verrevcmp: alternate non-digit runs (letters before other characters, '~' before everything,
    even the end) and digit runs compared as numbers."""
    i = j = 0
    while i < len(a) or j < len(b):
        while (i < len(a) and not a[i].isdigit()) or (j < len(b) and not b[j].isdigit()):
            ac = _order(a[i]) if i < len(a) else 0
            bc = _order(b[j]) if j < len(b) else 0
            if ac != bc:
                return -1 if ac < bc else 1
            i += 1
            j += 1
        start_i, start_j = i, j
        while i < len(a) and a[i].isdigit():
            i += 1
        while j < len(b) and b[j].isdigit():
            j += 1
        number_a, number_b = int(a[start_i:i] or "0"), int(b[start_j:j] or "0")
        if number_a != number_b:
            return -1 if number_a < number_b else 1
    return 0


def _split_version(version: str) -> tuple[int, str, str]:
    epoch, colon, rest = version.partition(":")
    if not colon:
        epoch, rest = "0", version
    upstream, dash, revision = rest.rpartition("-")
    if not dash:
        upstream, revision = rest, ""
    return int(epoch) if epoch.isdigit() else 0, upstream, revision


def compare_versions(a: str, b: str) -> int:
    """-1, 0 or 1 as Debian orders the two versions (epoch, then upstream, then revision)."""
    epoch_a, upstream_a, revision_a = _split_version(a)
    epoch_b, upstream_b, revision_b = _split_version(b)
    if epoch_a != epoch_b:
        return -1 if epoch_a < epoch_b else 1
    return _compare_part(upstream_a, upstream_b) or _compare_part(revision_a, revision_b)


def version_satisfies(version: str, op: str | None, wanted: str | None) -> bool:
    if op is None or wanted is None:
        return True
    order = compare_versions(version, wanted)
    return {"<<": order < 0, "<=": order <= 0, "=": order == 0, ">=": order >= 0, ">>": order > 0}[op]


# -- Packages -------------------------------------------------------------------------------

@dataclass(frozen=True)
class BinaryPackage:
    """One stanza of a `Packages` index, as the resolver and the lock need it."""

    name: str
    version: str
    architecture: str
    multi_arch: str  # 'no', 'same', 'foreign' or 'allowed'
    filename: str
    size: int
    sha256: str
    source: str  # the source package's name
    source_version: str
    priority: str
    pre_depends: tuple[tuple[Relation, ...], ...]
    depends: tuple[tuple[Relation, ...], ...]
    provides: tuple[Relation, ...]
    conflicts: tuple[tuple[Relation, ...], ...]
    breaks: tuple[tuple[Relation, ...], ...]
    origin: int  # which source of the definition's list served it


def _source_of(stanza: dict[str, str], name: str, version: str, *, source: str) -> tuple[str, str]:
    """Policy 5.6.1: `Source: name [(version)]`, absent when it equals the binary's name and version."""
    value = stanza.get("Source", "").strip()
    if not value:
        return name, version
    match = re.fullmatch(r"([a-z0-9][a-z0-9+.-]+)(?:\s*\(([^)\s]+)\))?", value)
    if match is None:
        raise InputError("has a Source field that does not parse", file=source, field=f"{name}.Source", found=value)
    return match.group(1), match.group(2) or version


def parse_package(stanza: dict[str, str], *, source: str, origin: int) -> BinaryPackage:
    where = stanza.get("Package", "?")
    for required in ("Package", "Version", "Architecture", "Filename", "Size", "SHA256"):
        if required not in stanza:
            raise InputError("has a package stanza without a required field", file=source, field=f"{where}.{required}", expected="Package, Version, Architecture, Filename, Size and SHA256")
    name, version = stanza["Package"], stanza["Version"]
    if not PACKAGE_NAME.fullmatch(name) or not VERSION.fullmatch(version):
        raise InputError("names a package or version that is not valid", file=source, field=f"{where}.Package", found=f"{name} {version}")
    problem = relpath_problem(stanza["Filename"], hidden=True, portable=False)
    if problem is not None or not stanza["Filename"].endswith(".deb"):
        raise InputError(f"names a file outside the repository ({problem or 'not a .deb'})", file=source, field=f"{name}.Filename", found=stanza["Filename"])
    if not stanza["Size"].isdigit() or not is_sha256_hex(stanza["SHA256"]):
        raise InputError("has a Size or SHA256 that is not a number and 64 hex digits", file=source, field=f"{name}.SHA256", found=f"{stanza['Size']} {stanza['SHA256']}")
    multi_arch = stanza.get("Multi-Arch", "no")
    if multi_arch not in ("no", "same", "foreign", "allowed"):
        raise InputError("has an unknown Multi-Arch value", file=source, field=f"{name}.Multi-Arch", found=multi_arch, expected="no, same, foreign or allowed")
    src_name, src_version = _source_of(stanza, name, version, source=source)

    def relations(field: str) -> tuple[tuple[Relation, ...], ...]:
        return parse_relations(stanza.get(field, ""), source=source, field=f"{name}.{field}")

    provides = relations("Provides")
    if any(len(group) > 1 or (group[0].op not in (None, "=")) for group in provides):
        raise InputError("has a Provides entry with alternatives or a non-'=' version", file=source, field=f"{name}.Provides", found=stanza["Provides"][:120])
    return BinaryPackage(
        name=name, version=version, architecture=stanza["Architecture"], multi_arch=multi_arch, filename=stanza["Filename"],
        size=int(stanza["Size"]), sha256=stanza["SHA256"], source=src_name, source_version=src_version, priority=stanza.get("Priority", ""),
        pre_depends=relations("Pre-Depends"), depends=relations("Depends"), provides=tuple(group[0] for group in provides),
        conflicts=relations("Conflicts"), breaks=relations("Breaks"), origin=origin,
    )


def parse_packages(data: bytes, *, source: str, origin: int, architecture: str) -> list[BinaryPackage]:
    """The packages of one (verified) index for one architecture: its own and `all`."""
    packages = []
    for stanza in parse_stanzas(decode_text(data, source=source), source=source):
        if stanza.get("Architecture") not in (architecture, "all"):
            continue
        packages.append(parse_package(stanza, source=source, origin=origin))
    return packages


# -- machine-readable copyright (DEP-5) -----------------------------------------------------------

DEP5_FORMAT = re.compile(r"https?://www\.debian\.org/doc/packaging-manuals/copyright-format/1\.0/?")
# Debian's short licence names (copyright-format 1.0, "License specification") where they differ from SPDX's.
DEBIAN_LICENCES = {
    "GPL-1": "GPL-1.0-only", "GPL-1+": "GPL-1.0-or-later", "GPL-2": "GPL-2.0-only", "GPL-2+": "GPL-2.0-or-later",
    "GPL-3": "GPL-3.0-only", "GPL-3+": "GPL-3.0-or-later", "LGPL-2": "LGPL-2.0-only", "LGPL-2+": "LGPL-2.0-or-later",
    "LGPL-2.1": "LGPL-2.1-only", "LGPL-2.1+": "LGPL-2.1-or-later", "LGPL-3": "LGPL-3.0-only", "LGPL-3+": "LGPL-3.0-or-later",
    "AGPL-3": "AGPL-3.0-only", "AGPL-3+": "AGPL-3.0-or-later", "GFDL-1.2+": "GFDL-1.2-or-later", "GFDL-1.3+": "GFDL-1.3-or-later",
    "Expat": "MIT", "BSD-2-clause": "BSD-2-Clause", "BSD-3-clause": "BSD-3-Clause", "BSD-4-clause": "BSD-4-Clause",
    "zlib": "Zlib", "Apache-2": "Apache-2.0", "MPL-1.1": "MPL-1.1", "MPL-2": "MPL-2.0", "Artistic": "Artistic-1.0-Perl",
    "GPL-3+ with GCC-exception-3.1": "GPL-3.0-or-later WITH GCC-exception-3.1",
    "GPL-3+ with GCC-Runtime-Library-exception-3.1": "GPL-3.0-or-later WITH GCC-exception-3.1",
}


def _spdx_key(name: str, known: set[str]) -> str | None:
    if name in DEBIAN_LICENCES:
        return DEBIAN_LICENCES[name]
    return name if name in known else None


def dep5_licence(data: bytes) -> tuple[str | None, str]:
    """The SPDX expression a machine-readable `debian/copyright` states (every Files paragraph's licence, joined
    with AND), or None and why not: not DEP-5, or a licence name with no SPDX identifier (never guessed)."""
    from license_expression import get_spdx_licensing

    try:
        stanzas = parse_stanzas(decode_text(data, source="copyright"), source="copyright")
    except InputError as problem:
        return None, f"not a deb822 document ({problem.what})"
    if not stanzas or not DEP5_FORMAT.fullmatch(stanzas[0].get("Format", "").strip()):
        return None, "not machine-readable (no copyright-format 1.0 header)"
    licensing = get_spdx_licensing()
    known = {symbol.key for symbol in licensing.known_symbols.values()}
    parts, unknown = [], []
    for stanza in stanzas[1:]:
        if "Files" not in stanza or "License" not in stanza:
            continue
        line = stanza["License"].split("\n", 1)[0].strip()
        alternatives = []
        for alternative in re.split(r"\s+or\s+|\s*\|\s*", line):
            conjuncts = []
            for name in re.split(r"\s+and\s+|\s*,\s*", alternative.strip()):
                key = _spdx_key(name.strip(), known)
                (conjuncts if key else unknown).append(key or name.strip())
            alternatives.append(" AND ".join(conjuncts))
        parts.append(alternatives[0] if len(alternatives) == 1 else "(" + " OR ".join(alternatives) + ")")
    if unknown:
        return None, "names licences with no SPDX identifier: " + ", ".join(sorted(set(unknown)))
    if not parts:
        return None, "states no licence in a Files paragraph"
    expression = " AND ".join(sorted(set(p if " OR " in p or " AND " not in p else f"({p})" for p in parts)))
    if licensing.validate(expression).errors:
        return None, "its licences do not form a valid SPDX expression: " + expression
    return expression, "from its machine-readable copyright file"
