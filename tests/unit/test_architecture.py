"""The house rules of docs/architecture.md, read from the source itself: no function over 150 lines, no
import circle, no arrow from a lower layer up, no stage importing another stage, and `pipeline/util/` on the
standard library alone.  Every import counts, module-level or inside a function: a lazy import is still an edge."""

from __future__ import annotations

import ast
import fnmatch
import re
import sys

import pytest
from repokit import ROOT

PACKAGE = ROOT / "pipeline"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
MAX_FUNCTION_LINES = 150
# Which top-level folders of the package each layer may not import (module-level or inside a function).
# The top-level modules (stage, register, errors, ...) sit beside these layers; the rules here are the arrows
# the map forbids: nothing below a stage imports one, nothing below the tools reaches up into tools or dev.
# From the bottom: util, then infra (plumbing: knows no document of the pipeline's own), then formats (the owners,
# which may use plumbing), then lanework (lane- and format-aware work), then the stages and tools.
FORBIDDEN = {
    "util": {"infra", "formats", "lanework", "stages", "tools", "dev", "harness"},
    "infra": {"formats", "lanework", "stages", "tools", "dev", "harness"},
    "formats": {"lanework", "stages", "tools", "dev", "harness"},
    "lanework": {"stages", "tools", "dev", "harness"},
    "harness": {"stages", "tools", "dev"},
    "tools": {"stages", "dev"},
    "stages": {"tools", "dev"},
}


def _modules() -> dict[str, ast.Module]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = ast.parse(path.read_bytes(), filename=str(path))
    return found


def _imports(module_name: str, tree: ast.Module, *, top_level_only: bool) -> set[str]:
    """The pipeline modules (and outside top-level names) one module imports."""
    names: set[str] = set()
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    for node in nodes:
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the importing package
                base = module_name.split(".")[: -node.level] if not module_name.endswith("__init__") else module_name.split(".")
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            names.add(prefix)
            names.update(f"{prefix}.{alias.name}" for alias in node.names)
    return names


def test_no_function_is_longer_than_150_lines():
    long = []
    for name, tree in _modules().items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{name}.{node.name}: {lines} lines")
    assert not long, "split by job: " + "; ".join(long)


def test_util_needs_only_the_standard_library():
    outside = []
    for name, tree in _modules().items():
        if not name.startswith(("pipeline.util", "pipeline.errors", "pipeline.runcontext")):
            continue
        for imported in _imports(name, tree, top_level_only=False):
            top = imported.split(".")[0]
            if top in ("", "__future__") or top in sys.stdlib_module_names:
                continue
            # the package's errors (and the run context they read) are standard-library modules themselves
            if top == "pipeline" and (imported in ("pipeline", "pipeline.errors", "pipeline.runcontext") or imported.startswith(("pipeline.util", "pipeline.errors.", "pipeline.runcontext."))):
                continue
            outside.append(f"{name} imports {imported}")
    assert not outside, outside


def _upward_arrows(modules: dict[str, ast.Module]) -> list[str]:
    """Every import (module-level or inside a function) of a layer that FORBIDDEN keeps it from."""
    arrows = set()
    for name, tree in modules.items():
        parts = name.split(".")
        layer = parts[1] if len(parts) > 2 or (len(parts) == 2 and (PACKAGE / parts[1]).is_dir()) else None
        forbidden = FORBIDDEN.get(layer or "", set())
        for imported in _imports(name, tree, top_level_only=False):
            target = imported.split(".")
            if target[0] == "pipeline" and len(target) > 1 and target[1] in forbidden:
                arrows.add(f"{name} imports {imported}")
    return sorted(arrows)


def test_no_arrow_from_a_lower_layer_up():
    arrows = _upward_arrows(_modules())
    assert not arrows, arrows


def test_every_layer_folder_has_its_rule():
    """A new folder of code under pipeline/ is placed in the layer table, so no layer escapes the arrows above."""
    folders = {path.parent.name for path in PACKAGE.glob("*/__init__.py")}
    assert folders - {"dev"} == set(FORBIDDEN), "add the folder to FORBIDDEN (and docs/architecture.md's layout)"


# The layers that hold no command code: a command's parser and handler live beside the CLI (pipeline/cli.py) or in
# its stage module, never in a document's owner or in plumbing.
NO_COMMAND_CODE = ("util", "infra", "formats", "lanework")


def _command_code(modules: dict[str, ast.Module]) -> list[str]:
    """Modules of NO_COMMAND_CODE layers that import argparse or define a command (`register_cli`, `run_*(args)`)."""
    found = []
    for name, tree in modules.items():
        if name.split(".")[1:2] and name.split(".")[1] in NO_COMMAND_CODE:
            if any(imported.split(".")[0] == "argparse" for imported in _imports(name, tree, top_level_only=False)):
                found.append(f"{name} imports argparse")
            for node in ast.walk(tree):
                if isinstance(node, ast.FunctionDef) and (node.name == "register_cli" or (node.name.startswith("run_") and [a.arg for a in node.args.args] == ["args"])):
                    found.append(f"{name} defines {node.name}")
    return found


def test_no_command_code_in_formats_or_plumbing():
    found = _command_code(_modules())
    assert not found, found


def _import_graph(modules: dict[str, ast.Module], *, top_level_only: bool) -> dict[str, set[str]]:
    """Module -> the pipeline modules it imports (a package's own __init__ importing its children is no edge back)."""
    graph = {name: {m for m in _imports(name, tree, top_level_only=top_level_only) if m in modules and m != name} for name, tree in modules.items()}
    return {name: {m for m in targets if not name.startswith(m + ".")} for name, targets in graph.items()}


def _circles(graph: dict[str, set[str]]) -> list[str]:
    state: dict[str, int] = {}
    stack: list[str] = []
    circles: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                circles.append(" -> ".join(stack[stack.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return circles


STAGES = "pipeline.stages."


def _stage_of(module: str) -> str | None:
    """The stage a module belongs to: `pipeline.stages.<name>` itself, or any job module of the package
    `pipeline/stages/<name>/` (a stage with several jobs keeps one module per job, as goreleaser's sub-pipes)."""
    return module.split(".")[2] if module.startswith(STAGES) else None


def _stage_edges(graph: dict[str, set[str]]) -> list[str]:
    """Stage -> stage imports: a stage that needs another's rule finds it below the stages, and one that runs
    another finds it through the road (`Stage.inner_stage_class`).  The job modules of one stage package may
    import each other; none imports another stage's module."""
    return sorted(f"{name} imports {target}" for name, targets in graph.items() if _stage_of(name)
                  for target in targets if _stage_of(target) and _stage_of(target) != _stage_of(name))


def test_no_import_circle():
    """No circle among all imports, those inside functions included."""
    circles = _circles(_import_graph(_modules(), top_level_only=False))
    assert not circles, circles


def test_no_stage_imports_another_stage():
    edges = _stage_edges(_import_graph(_modules(), top_level_only=False))
    assert not edges, edges


def test_a_job_module_may_import_its_own_stage_but_no_other():
    """The rule reads stage packages too: a job module importing a sibling is no edge, one importing another
    stage (or another stage's job module) is."""
    graph = {
        "pipeline.stages.publish.apply": {"pipeline.stages.publish.target", "pipeline.formats.lanes"},
        "pipeline.stages.publish.product": {"pipeline.stages.audit.report"},
        "pipeline.stages.accept": {"pipeline.stages.accept.session"},
        "pipeline.stages.cut": {"pipeline.stages.publish"},
    }
    assert _stage_edges(graph) == ["pipeline.stages.cut imports pipeline.stages.publish",
                                   "pipeline.stages.publish.product imports pipeline.stages.audit.report"]


def _stage_packages() -> list[str]:
    return sorted(path.parent.name for path in (PACKAGE / "stages").glob("*/__init__.py"))


def test_a_stage_fingerprint_covers_every_job_module_of_its_package():
    """A stage's code fingerprint (`pipeline.codedigest`) is its module's import closure: a stage package's
    `__init__` must import every job module, or changing that job would not re-run the stage."""
    from pipeline.codedigest import code_closure
    from pipeline.road import PIPES
    from pipeline.stage import code_modules

    by_module = {item.module: item for item in PIPES}
    for name in _stage_packages():
        module = f"pipeline.stages.{name}"
        stage_class = by_module[module].stage_class()
        covered = {path for modules in code_modules(stage_class.__new__(stage_class)) for _name, path in code_closure(modules)}
        # `__main__` only calls the package's CLI (`python3 -m pipeline.stages.accept`); the stage never runs it
        files = {path for path in (PACKAGE / "stages" / name).rglob("*.py") if path.name != "__main__.py"}
        assert files <= covered, f"{module}: the fingerprint misses {sorted(p.name for p in files - covered)}"


def test_every_stage_module_binds_its_stage_class():
    """`STAGE` is the stage's class in every stage module (the road's `stage_class()` returns it), never a name."""
    from pipeline.road import PIPES
    from pipeline.stage import Stage

    wrong = []
    for name, tree in _modules().items():
        if name.startswith(STAGES):
            bound = [node.value for node in tree.body if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "STAGE" for t in node.targets)]
            if name.count(".") > 2:  # a job module of a stage package: the package's __init__ binds STAGE
                if bound:
                    wrong.append(f"{name}: a job module binds STAGE {[ast.unparse(v) for v in bound]}")
            elif len(bound) != 1 or not isinstance(bound[0], ast.Name):
                wrong.append(f"{name}: {[ast.unparse(v) for v in bound]}")
    assert not wrong, wrong
    for item in PIPES:  # the name resolves to a Stage class, not a string or another value
        found = item.stage_class()
        assert issubclass(found, Stage), f"{item.module}.STAGE is {found!r}"


def test_every_stage_package_is_a_pipe_and_audits_fingerprint_covers_its_download_cache():
    """Each stage package is a pipe of the road (its job modules are checked above); the plumbing a job uses is
    in the fingerprint too: changing audit's download cache re-runs the audit."""
    from pipeline.codedigest import code_files
    from pipeline.road import PIPES
    from pipeline.stages.audit import AuditStage

    packages = set(_stage_packages())
    assert {"audit", "publish", "accept"} <= packages and packages <= {item.name for item in PIPES}
    assert AuditStage.__module__ == "pipeline.stages.audit"
    assert "infra/download_cache.py" in code_files("pipeline.stages.audit")


def test_a_stage_runs_another_only_through_runs_pipes():
    """A stage that runs another names it in `runs_pipes` (its fingerprint covers that code) and gets it through
    `inner_stage_class`, never through `road.pipe` directly; every name in `runs_pipes` is a pipe of the road."""
    from pipeline.road import PIPES, pipe

    direct = []
    for name, tree in _modules().items():
        if name.startswith("pipeline.stages."):
            direct += [f"{name}:{node.lineno}" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module == "pipeline.road"]
    assert not direct, f"stages import the road themselves: {direct}"
    for item in PIPES:
        for inner in item.stage_class().runs_pipes:
            assert pipe(inner).name == inner and inner != item.name, (item.name, inner)


def test_inner_stage_class_refuses_a_pipe_not_named_in_runs_pipes():
    from pipeline.road import pipe

    rebuild = pipe("rebuild").stage_class()
    assert rebuild.runs_pipes == ("build", "package")
    stage = rebuild.__new__(rebuild)
    assert stage.inner_stage_class("build") is pipe("build").stage_class()
    with pytest.raises(LookupError, match="without naming it in runs_pipes"):
        stage.inner_stage_class("compose")


# A document's type string as the formats declare it: a module-level constant whose name says TYPE, holding
# this project's `ninfer_…`/`omp_ninfer_…` names or a SLSA predicate type.
TYPE_STRING = re.compile(r"(?:omp_)?ninfer_[a-z0-9_]+|https://slsa\.dev/[a-z_]+/v[0-9]+")


def _owner_section() -> str:
    """docs/architecture.md's "Formats: one owner per document": the owner table and the release tree's modules."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    start = text.index("## Formats: one owner per document")
    return text[start:text.index("\n## ", start + 1)]


def _type_strings(tree: ast.Module) -> set[str]:
    found = set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) and node.value else []
        if any(isinstance(t, ast.Name) and "TYPE" in t.id for t in targets):
            found.update(c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant) and isinstance(c.value, str) and TYPE_STRING.fullmatch(c.value))
    return found


def _not_in_table(names: set[str], section: str) -> list[str]:
    """The names no backticked word of the owner section spells (a word with `*` matches as a pattern)."""
    words = set(re.findall(r"`([^`]+)`", section))
    return sorted(n for n in names if n not in words and not any("*" in w and fnmatch.fnmatchcase(n, w) for w in words))


def test_every_formats_module_is_in_the_owner_table():
    section = _owner_section()
    modules = {path.relative_to(PACKAGE).as_posix() for path in (PACKAGE / "formats").rglob("*.py") if path.name != "__init__.py"}
    missing = sorted(m for m in modules if f"`{m}`" not in section and f"`{m}:" not in section)
    assert not missing, f"add an owner-table row (docs/architecture.md) for {missing}"


def test_every_type_string_of_the_formats_is_in_the_owner_table():
    names = set()
    for name, tree in _modules().items():
        if name.startswith("pipeline.formats."):
            names |= _type_strings(tree)
    assert len(names) > 20  # the scan finds the formats' declarations (a broken pattern would find none)
    missing = _not_in_table(names, _owner_section())
    assert not missing, f"name these type strings in docs/architecture.md's owner table: {missing}"


def test_the_rules_can_fail():
    """The checks above see what they claim to: a long function and an upward import in a parsed module."""
    body = "def f():\n" + "    x = 1\n" * 151
    tree = ast.parse(body)
    [function] = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    assert function.end_lineno - function.lineno + 1 > MAX_FUNCTION_LINES
    upward = ast.parse("from pipeline.stages import build\n")
    assert "pipeline.stages.build" in _imports("pipeline.formats.x", upward, top_level_only=True)
    lazy = ast.parse("def g():\n    from pipeline.tools import status\n")
    assert "pipeline.tools.status" in _imports("pipeline.infra.y", lazy, top_level_only=False)
    assert "pipeline.tools.status" not in _imports("pipeline.infra.y", lazy, top_level_only=True)
    # plumbing that reads a document of the pipeline's own, or an owner that reaches up into the lane-aware work
    layered = {
        "pipeline.infra.y": ast.parse("def h():\n    from pipeline.formats.ci_checks import CiState\n"),
        "pipeline.formats.z": ast.parse("from pipeline.lanework import toolchain\n"),
        "pipeline.lanework.w": ast.parse("from pipeline.formats import lanes\nfrom pipeline.infra import net\n"),
    }
    assert _upward_arrows(layered) == [
        "pipeline.formats.z imports pipeline.lanework",
        "pipeline.formats.z imports pipeline.lanework.toolchain",
        "pipeline.infra.y imports pipeline.formats.ci_checks",
        "pipeline.infra.y imports pipeline.formats.ci_checks.CiState",
    ]
    commands = {
        "pipeline.formats.s": ast.parse("def run_s_validate(args):\n    import argparse\n"),
        "pipeline.lanework.t": ast.parse("def register_cli(sub):\n    pass\n"),
        "pipeline.stages.u": ast.parse("import argparse\ndef register_cli(sub):\n    pass\n"),
    }
    assert _command_code(commands) == ["pipeline.formats.s imports argparse", "pipeline.formats.s defines run_s_validate", "pipeline.lanework.t defines register_cli"]
    # a circle closed by a function-level import, and a stage that imports another inside a method
    lazy_circle = {
        "pipeline.formats.a": ast.parse("from pipeline.formats import b\n"),
        "pipeline.formats.b": ast.parse("def f():\n    from pipeline.formats.a import X\n"),
        "pipeline.stages.one": ast.parse("class S:\n    def run(self):\n        from pipeline.stages import two\n"),
        "pipeline.stages.two": ast.parse("from pipeline.formats import a\n"),
        # the jobs of one stage package import each other; a job that imports another stage is an edge
        "pipeline.stages.three": ast.parse("from pipeline.stages.three import job\n"),
        "pipeline.stages.three.job": ast.parse("from pipeline.stages.three import model\n"),
        "pipeline.stages.three.model": ast.parse("def f():\n    from pipeline.stages.two import X\n"),
    }
    assert _circles(_import_graph(lazy_circle, top_level_only=False)) == ["pipeline.formats.a -> pipeline.formats.b -> pipeline.formats.a"]
    assert not _circles(_import_graph(lazy_circle, top_level_only=True))
    assert _stage_edges(_import_graph(lazy_circle, top_level_only=False)) == [
        "pipeline.stages.one imports pipeline.stages.two", "pipeline.stages.three.model imports pipeline.stages.two"]
    # a type string declared in a dict under a TYPE name is found, and one the table does not name is reported
    declared = _type_strings(ast.parse('KINDS_TYPES = {"a": "omp_ninfer_new_thing"}\nOTHER = "omp_ninfer_not_a_type"\n'))
    assert declared == {"omp_ninfer_new_thing"}
    assert _not_in_table(declared | {"ninfer_x_package_build_receipt"}, "| `ninfer_*_package_build_receipt` |") == ["omp_ninfer_new_thing"]
