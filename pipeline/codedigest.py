"""The digest of a module's code and of every pipeline module it imports.

A stage's fingerprint covers its code automatically: the bytes of the stage's
module and of each `pipeline.*` module it imports, directly or through
others, found by reading the import statements (static, so the answer does
not depend on what happened to be imported first).  Changing a format owner
that a stage uses re-runs the stage; changing an unrelated stage does not.
"""

from __future__ import annotations

import ast
import functools
import hashlib
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent
PACKAGE = "pipeline"


def _file_of(module: str) -> Path | None:
    parts = module.split(".")
    if parts[0] != PACKAGE:
        return None
    base = PACKAGE_ROOT.joinpath(*parts[1:])
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imports(module: str, path: Path) -> set[str]:
    tree = ast.parse(path.read_bytes(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith(PACKAGE + "."))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            if base != PACKAGE and not base.startswith(PACKAGE + "."):
                continue
            found.add(base)
            # `from pipeline.formats import lanes`: the names may be modules themselves
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


@functools.cache
def code_closure(module: str) -> tuple[tuple[str, Path], ...]:
    """(module, file) of `module` and every pipeline module it imports, transitively, sorted."""
    seen: dict[str, Path] = {}
    todo = [module]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        path = _file_of(name)
        if path is None:
            continue
        seen[name] = path
        todo.extend(_imports(name, path) - set(seen))
        # a package's __init__ runs before any of its modules
        parent = name.rpartition(".")[0]
        if parent and parent not in seen:
            todo.append(parent)
    return tuple(sorted(seen.items()))


Modules = str | tuple[str, ...]  # one module, or several whose code counts as one (a stage and the stages it runs)


def _code_bytes(modules: Modules, extra_files: tuple[Path, ...]):
    """(name, bytes) of every file in the modules' code closure (its path under the package) and of `extra_files`."""
    closure = dict(item for module in ((modules,) if isinstance(modules, str) else modules) for item in code_closure(module))
    for _name, path in sorted(closure.items()):
        yield path.relative_to(PACKAGE_ROOT).as_posix(), path.read_bytes()
    for path in extra_files:
        yield path.name, path.read_bytes()


def code_digest(module: Modules, *extra_files: Path) -> str:
    """SHA-256 over the relative path and bytes of every file in the module's code closure (and `extra_files`)."""
    digest = hashlib.sha256()
    for name, data in _code_bytes(module, extra_files):
        digest.update(name.encode() + b"\0" + data + b"\0")
    return digest.hexdigest()


def code_files(module: Modules, *extra_files: Path) -> dict[str, str]:
    """The SHA-256 of each file of the module's code closure (and `extra_files`), by its path under the
    package: recorded with a stage's run so `status` can name the file whose change makes it stale."""
    return dict(sorted((name, hashlib.sha256(data).hexdigest()) for name, data in _code_bytes(module, extra_files)))
