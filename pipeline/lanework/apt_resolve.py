"""The closure of `Pre-Depends` + `Depends` over verified `Packages` indexes, for one architecture.

What apt would install with `--no-install-recommends` on an empty system, decided by rules that
can be read in one place and that refuse rather than guess:

- **Candidates.** Per name, the highest version any source offers for the architecture or `all`
  (two sources offering the same version: the first source listed wins).
- **Roots** are the definition's package names and must be real packages; a name that is only
  virtual is refused naming its providers.
- **A dependency group** (`a | b`) is already satisfied when a selected package satisfies one of
  its alternatives (by name and version, or by `Provides`).  Otherwise the alternatives are tried
  left to right; for each, a **concrete package of that name** whose version satisfies the
  relation wins over packages that merely provide the name (rules_distroless#265 picked
  `libavcodec-extra61` over `libavcodec61` the other way round); failing that, the single
  provider is taken; **two or more providers are refused naming the candidates** (the fix is to
  name one of them in the definition: a root is selected before any dependency is walked, and a
  selected provider satisfies the group).
- **Multi-Arch.** One architecture per image: `:any` is satisfied only by a `Multi-Arch: allowed`
  package (dpkg's rule), `:native` and `:<this architecture>` like a plain name; any other
  qualifier is refused.  `Architecture: all` packages take part like the architecture's own.
- **Conflicts and Breaks** among the selected packages are refused, naming both packages.

Each selected package keeps the edge that pulled it in (`Why`), which the lock records.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from pipeline.errors import InputError
from pipeline.formats.apt_repository import BinaryPackage, Relation, compare_versions, version_satisfies


@dataclass(frozen=True)
class Why:
    package: str | None  # None: requested by the definition
    field: str  # 'Depends', 'Pre-Depends' or 'base.packages'
    relation: str  # the dependency group as written, e.g. 'libgcc-s1 (>= 3.0)'


@dataclass(frozen=True)
class Selected:
    package: BinaryPackage
    why: Why


class Universe:
    """The candidates and the providers of every virtual name."""

    def __init__(self, packages: list[BinaryPackage], architecture: str) -> None:
        self.architecture = architecture
        self.candidates: dict[str, BinaryPackage] = {}
        for package in packages:
            known = self.candidates.get(package.name)
            if known is None or compare_versions(package.version, known.version) > 0:
                self.candidates[package.name] = package
        self.providers: dict[str, list[tuple[BinaryPackage, str | None]]] = {}
        for package in self.candidates.values():
            for provided in package.provides:
                self.providers.setdefault(provided.name, []).append((package, provided.version))

    def arch_ok(self, relation: Relation, package: BinaryPackage, *, file: str, field: str) -> bool:
        if relation.arch in (None, "native", self.architecture):
            return True
        if relation.arch == "any":
            return package.multi_arch == "allowed"
        raise InputError("names an architecture qualifier this single-architecture image cannot satisfy", file=file, field=field,
                         found=str(relation), expected=f"no qualifier, ':any', ':native' or ':{self.architecture}'")

    def concrete(self, relation: Relation, *, file: str, field: str) -> BinaryPackage | None:
        package = self.candidates.get(relation.name)
        if package is None or not version_satisfies(package.version, relation.op, relation.version):
            return None
        return package if self.arch_ok(relation, package, file=file, field=field) else None

    def provided_by(self, relation: Relation) -> list[BinaryPackage]:
        """Providers of `relation.name` that satisfy it: an unversioned relation takes any, a versioned one only '(= v)' provides."""
        found = []
        for package, version in self.providers.get(relation.name, []):
            if relation.arch == "any":
                continue  # dpkg: a virtual package cannot satisfy an ':any' relation
            if relation.op is None or (version is not None and version_satisfies(version, relation.op, relation.version)):
                found.append(package)
        return sorted(found, key=lambda p: p.name)


def _satisfied_by(selected: dict[str, Selected], universe: Universe, relation: Relation) -> bool:
    chosen = selected.get(relation.name)
    if chosen is not None and version_satisfies(chosen.package.version, relation.op, relation.version):
        return True
    return any(package.name in selected for package in universe.provided_by(relation))


def _choose(universe: Universe, group: tuple[Relation, ...], *, needed_by: str, field: str, file: str) -> BinaryPackage:
    text = " | ".join(map(str, group))
    near = []
    for relation in group:
        package = universe.concrete(relation, file=file, field=f"{needed_by}.{field}")
        if package is not None:
            return package
        providers = universe.provided_by(relation)
        if len(providers) == 1:
            return providers[0]
        if len(providers) > 1:
            raise InputError(
                "needs a virtual package that several packages provide",
                file=file, field=f"{needed_by}.{field}",
                found=f"{text}: provided by " + ", ".join(f"{p.name} {p.version}" for p in providers),
                expected="exactly one candidate",
                why="picking one silently is how a resolver ends up with libavcodec-extra61 where libavcodec61 was meant",
                fix="name the one you want in the definition's base.packages",
            )
        known = universe.candidates.get(relation.name)
        if known is not None:
            near.append(f"{known.name} {known.version} ({known.architecture}, Multi-Arch: {known.multi_arch})")
    raise InputError(
        "needs a package no source offers",
        file=file, field=f"{needed_by}.{field}",
        found=text + (": the sources have " + ", ".join(near) if near else ": no source has a package or provider of that name"),
        why="the closure must be complete: a missing dependency would be a missing library in the image",
        fix="add the source (suite or component) that carries it, or check the definition's package names",
    )


def resolve(universe: Universe, requested: list[str], *, file: str) -> dict[str, Selected]:
    """The selected packages by name (see the module docstring); `file` is the definition, for messages."""
    selected: dict[str, Selected] = {}
    queue: deque[str] = deque()
    for name in sorted(set(requested)):
        package = universe.candidates.get(name)
        if package is None:
            providers = universe.provided_by(Relation(name))
            raise InputError(
                "requests a package no source offers" if not providers else "requests a virtual package",
                file=file, field="base.packages", found=name,
                expected="the name of a real package" + (": one of " + ", ".join(p.name for p in providers) if providers else ""),
                fix="name the package itself" if providers else "check the name and the sources' suites and components",
            )
        selected[name] = Selected(package, Why(None, "base.packages", name))
        queue.append(name)
    while queue:
        package = selected[queue.popleft()].package
        for field, groups in (("Pre-Depends", package.pre_depends), ("Depends", package.depends)):
            for group in groups:
                if any(_satisfied_by(selected, universe, relation) for relation in group):
                    continue
                chosen = _choose(universe, group, needed_by=package.name, field=field, file=file)
                selected[chosen.name] = Selected(chosen, Why(package.name, field, " | ".join(map(str, group))))
                queue.append(chosen.name)
    _refuse_conflicts(selected, universe, file=file)
    return selected


def _refuse_conflicts(selected: dict[str, Selected], universe: Universe, *, file: str) -> None:
    for name in sorted(selected):
        package = selected[name].package
        for field, groups in (("Conflicts", package.conflicts), ("Breaks", package.breaks)):
            for group in groups:
                for relation in group:
                    hits = []
                    other = selected.get(relation.name)
                    if other is not None and other.package.name != name and version_satisfies(other.package.version, relation.op, relation.version):
                        hits.append(other.package.name)
                    if relation.op is None:
                        hits += [p.name for p in universe.provided_by(relation) if p.name in selected and p.name != name]
                    if hits:
                        raise InputError(
                            f"selects packages that cannot be installed together ({name} {field}: {relation})",
                            file=file, field="base.packages", found=", ".join(sorted(set(hits))),
                            fix="name the alternative you want in base.packages so the resolver does not pull the other",
                        )
