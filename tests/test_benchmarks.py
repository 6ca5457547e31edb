"""Every benchmark, example and script imports against the current package, so that a refactor
cannot silently break them (their runs are long; importing is what a fast test can do)."""

import importlib.util
import sys

import pytest

from conftest import REPO

ENTRY_POINTS = sorted(p for folder in ("benchmarks", "examples", "scripts")
                      for p in (REPO / folder).rglob("*.py") if p.name != "__init__.py")


def test_every_folder_with_code_is_covered():
    assert {p.relative_to(REPO).parts[0] for p in ENTRY_POINTS} == \
        {"benchmarks", "examples", "scripts"}
    assert not list((REPO / "benchmarks" / "results").rglob("*.py"))  # no code in results
    assert not list((REPO / "benchmarks" / "results").rglob("*.sh"))


@pytest.mark.parametrize("path", ENTRY_POINTS, ids=lambda p: str(p.relative_to(REPO)))
def test_entry_point_imports(path, monkeypatch):
    if path.parts[-3:-1] == ("examples", "knn_mt"):
        pytest.importorskip("faiss")
    if path.name == "nltk_viterbi.py":  # a side-by-side measurement, not a dependency
        pytest.importorskip("nltk")
    monkeypatch.syspath_prepend(str(path.parent))  # scripts import their neighbours
    name = f"entry_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)  # dataclasses look their module up
    spec.loader.exec_module(module)  # runs nothing: every entry point waits for __main__
    assert module.__doc__, f"{path.name} says what it does in a docstring"
