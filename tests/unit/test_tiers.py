"""The suite's layout (issue #10 §4): two tiers and one folder of kits, loaded one way.

* `tests/unit/`: the pipeline's Python environment and git only: no compiler, registry, network
  or GPU, and no kit that needs one.  It also runs on windows-latest (.github/workflows/ci.yml).
* `tests/integration/`: the real tools (.ci/run installs them), slow tests included.
* `tests/kits/`: the shared kits.  tests/conftest.py puts the folder on sys.path (the one place
  that does) and registers the kits with fixtures or hooks as `pytest_plugins`; tests import kits
  by name, never from conftest, and never skip when a kit or a pipeline module fails to import.
* `tests/fuzz/`: the fuzz tool (`nox -s fuzz` runs tests/fuzz/run.py), the package `fuzz`; its
  scripts put tests/ on sys.path to import themselves when run directly.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest
from repokit import KITS, ROOT, TESTS

TIERS = ("unit", "integration")
FUZZ = TESTS / "fuzz"  # a tool with its own entry points, not a kit
# Kits a unit test may use: plain Python on loopback (no compiler, registry, node, host libraries or GPU).
UNIT_KITS = {"repokit", "loopback", "hostile_http", "github_standin", "testreceipt", "sigstore_standin", "actions_env"}
# What only the integration tier may ask for: markers of real tools, and fixtures that start them.
INTEGRATION_MARKERS = ("slow", "cuda", "registry", "network", "gpu")
INTEGRATION_FIXTURES = {"registry_server", "auth_registry", "fault_proxy", "pushed_base", "local_base"}


def _python_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _imported_modules(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def _kits() -> set[str]:
    return {p.stem for p in KITS.glob("*.py")}


def test_every_test_module_is_in_a_tier_and_every_kit_in_the_kits_folder():
    tests = [p.relative_to(TESTS).as_posix() for p in TESTS.rglob("*.py") if re.fullmatch(r"test_.*\.py|.*_test\.py", p.name)]
    stray = [name for name in tests if name.split("/")[0] not in TIERS]
    assert not stray, f"test modules outside tests/unit and tests/integration: {stray}"
    assert [p.relative_to(TESTS).as_posix() for p in TESTS.rglob("conftest.py")] == ["conftest.py"], "one conftest, the loading place"
    for kit in KITS.glob("*.py"):
        assert not kit.name.startswith("test_"), f"{kit.name}: a kit must not look like a test module"
    helpers = [p.relative_to(TESTS).as_posix() for p in TESTS.glob("*.py") if p.name != "conftest.py"]
    assert not helpers, f"kits belong in tests/kits/: {helpers}"
    both = {tier: sorted(p.name for p in (TESTS / tier).glob("test_*.py")) for tier in TIERS}
    assert both["unit"] and both["integration"] and not set(both["unit"]) & set(both["integration"])


def test_the_default_run_collects_both_tiers():
    """The README's command (`nox -s tests`, pytest without paths) runs everything: testpaths holds both tiers."""
    options = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["pytest"]["ini_options"]
    roots = [ROOT / path for path in options["testpaths"]]
    for tier in TIERS:
        assert any((TESTS / tier).is_relative_to(root) for root in roots), f"testpaths {options['testpaths']} leaves out tests/{tier}"


def test_kits_are_loaded_one_way():
    kits = _kits()
    conftest = (TESTS / "conftest.py").read_text(encoding="utf-8")
    assert "pytest_plugins" in conftest and "sys.path.insert(0, str(KITS))" in conftest
    for path in _python_files(TESTS):
        tree = _tree(path)
        where = path.relative_to(TESTS).as_posix()
        assert "conftest" not in _imported_modules(tree), f"{where} imports conftest: take the helper from a kit (repokit)"
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr == "importorskip" and node.args and isinstance(node.args[0], ast.Constant):
                module = str(node.args[0].value).split(".")[0]
                assert module != "pipeline" and module not in kits, (
                    f"{where}:{node.lineno}: importorskip({node.args[0].value!r}) turns a broken import of the project into a skip")
            if (where != "conftest.py" and not path.is_relative_to(FUZZ) and isinstance(func, ast.Attribute) and func.attr in ("insert", "append")
                    and isinstance(func.value, ast.Attribute) and func.value.attr == "path"
                    and isinstance(func.value.value, ast.Name) and func.value.value.id == "sys"):
                pytest.fail(f"{where}:{node.lineno}: only tests/conftest.py puts the kits on sys.path")


@pytest.mark.parametrize("path", sorted((TESTS / "unit").glob("test_*.py")), ids=lambda p: p.name)
def test_a_unit_module_needs_no_compiler_registry_network_or_gpu(path):
    tree = _tree(path)
    text = path.read_text(encoding="utf-8")
    for marker in INTEGRATION_MARKERS:
        assert not re.search(rf"\bmark\.{marker}\b", text), f"{path.name} is marked {marker}: it belongs in tests/integration"
    # A nested pytest takes seconds and needs its own timeout: the unit tier stays under a minute without them.
    assert not re.search(r"""["']-m["'],\s*["']pytest["']|pytest\.main\(|\bpytester\b""", text), f"{path.name} runs a nested pytest: it belongs in tests/integration"
    heavy = (_imported_modules(tree) & _kits()) - UNIT_KITS
    assert not heavy, f"{path.name} uses the kits {sorted(heavy)}, which need real tools: it belongs in tests/integration"
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            asked = {arg.arg for arg in node.args.args} & INTEGRATION_FIXTURES
            assert not asked, f"{path.name}::{node.name} asks for {sorted(asked)}: it belongs in tests/integration"
