"""Every third-party module the package imports is a declared dependency: a machine that
installs only pyproject.toml's requirements runs every command (the development machines had
sacremoses, tqdm, TensorBoard and matplotlib from elsewhere, and a fresh install failed)."""

import ast
import re
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[1]


def imported_top_level_modules(package: Path, *, skip: tuple[str, ...] = ()) -> set[str]:
    """Third-party modules imported below `package` (not below its subpackages `skip`)."""
    names = set()
    for path in package.rglob("*.py"):
        if path.relative_to(package).parts[0] in skip:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
                if node.module.startswith("torch.utils.tensorboard"):
                    names.add("tensorboard")  # torch's writer needs the tensorboard package
    return names - set(sys.stdlib_module_names) - {"__future__", "transformer_mt"}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared(specs: list[str]) -> set[str]:
    return {canonical(re.split(r"[<>=!~\[; ]", spec, maxsplit=1)[0]) for spec in specs}


def undeclared(modules: set[str], names: set[str]) -> set[str]:
    distributions = packages_distributions()
    return {module for module in modules
            if not {canonical(d) for d in distributions.get(module, [module])} & names}


def test_every_imported_package_is_a_declared_dependency():
    """The core imports its dependencies only; serving/ also the `serve` extra's, interop/
    (lazily, where a conversion needs it) the `interop` extra's."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = declared(project["dependencies"])
    package = ROOT / "src" / "transformer_mt"
    modules = imported_top_level_modules(package, skip=("serving", "interop"))
    assert {"torch", "sacrebleu", "sacremoses", "tqdm", "matplotlib", "tensorboard"} <= modules
    missing = undeclared(modules, core)
    assert not missing, f"imported but not in pyproject.toml's dependencies: {sorted(missing)}"
    serving = imported_top_level_modules(package / "serving")
    assert {"fastapi", "uvicorn", "prometheus_client"} <= serving
    missing = undeclared(serving, core | declared(project["optional-dependencies"]["serve"]))
    assert not missing, f"serving/ imports what the serve extra lacks: {sorted(missing)}"
    interop = imported_top_level_modules(package / "interop")
    assert "ctranslate2" in interop
    missing = undeclared(interop, core | declared(project["optional-dependencies"]["interop"]))
    assert not missing, f"interop/ imports what the interop extra lacks: {sorted(missing)}"
