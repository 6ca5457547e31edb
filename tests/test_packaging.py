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


def imported_top_level_modules(package: Path) -> set[str]:
    names = set()
    for path in package.rglob("*.py"):
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


def test_every_imported_package_is_a_declared_dependency():
    declared = {canonical(re.split(r"[<>=!~\[; ]", spec, maxsplit=1)[0])
                for spec in tomllib.loads((ROOT / "pyproject.toml").read_text())
                ["project"]["dependencies"]}
    distributions = packages_distributions()
    modules = imported_top_level_modules(ROOT / "src" / "transformer_mt")
    assert {"torch", "sacrebleu", "sacremoses", "tqdm", "matplotlib", "tensorboard"} <= modules
    missing = {module for module in modules
               if not {canonical(d) for d in distributions.get(module, [module])} & declared}
    assert not missing, f"imported but not in pyproject.toml's dependencies: {sorted(missing)}"
