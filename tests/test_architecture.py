"""The package's layers import downwards only (docs/architecture.md), the model is torch and the
config alone, and the research extras in examples/ are not imported by the core."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "transformer_mt"
# lowest first: a module may import its own layer and the layers before it
LAYERS = ["config", "hardware", "model", "storage", "data", "evaluation", "inference", "interop",
          "training", "serving", "research", "cli"]


def layer_of(module: str) -> str:
    """'transformer_mt.training.loop' -> 'training'; the top-level config module is its own."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imports(path: Path, root: Path = PACKAGE) -> list[str]:
    """The transformer_mt modules `path` imports, absolute (relative imports resolved)."""
    package = ["transformer_mt", *path.relative_to(root).parent.parts]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [f"{target}.{a.name}" for a in node.names] if not node.module else [target]
            found += names
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names]
    return [m for m in found if m.split(".")[0] == "transformer_mt"]


def upward_imports(root: Path) -> list[str]:
    """Each import of a module below `root` from a layer above its own."""
    upward = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if len(rel.parts) == 1 and rel.name != "config.py":
            continue  # the package's __init__ and __main__ sit above every layer
        own = "config" if len(rel.parts) == 1 else rel.parts[0]
        for target in imports(path, root):
            layer = layer_of(target)
            if layer not in LAYERS:
                upward.append(f"{rel} imports {target}, which is in no layer")
            elif LAYERS.index(layer) > LAYERS.index(own):
                upward.append(f"{rel} ({own}) imports {target} ({layer})")
    return upward


def test_layers_import_downwards_only():
    assert sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and
                  (p / "__init__.py").exists()) == sorted(LAYERS[1:])
    assert upward_imports(PACKAGE) == []


def test_the_model_is_torch_and_the_config_only():
    for path in (PACKAGE / "model").glob("*.py"):
        assert {layer_of(t) for t in imports(path)} <= {"config", "model"}, path.name


def test_the_core_imports_no_research_extra():
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
                 for a in n.names}
        names |= {(n.module or "").split(".")[0] for n in ast.walk(tree)
                  if isinstance(n, ast.ImportFrom) and not n.level}
        assert not names & {"faiss", "knn_mt", "rerank", "examples"}, path.name


def test_the_checker_sees_an_upward_import(tmp_path):
    """A model module importing the training loop, or the package root, is reported."""
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "bad.py").write_text("from ..training.loop import train\n"
                                               "from .. import Translator\n"
                                               "from .attention import attention\n")
    assert upward_imports(tmp_path) == [
        "model/bad.py (model) imports transformer_mt.training.loop (training)",
        "model/bad.py imports transformer_mt.Translator, which is in no layer"]


def test_the_architecture_doc_names_every_layer_in_order_and_every_command():
    """docs/architecture.md against the code: its layer list is LAYERS (which the import test
    enforces), and its cli paragraph names every command the parser offers."""
    import re

    from transformer_mt.cli.main import build_parser

    doc = (PACKAGE.parents[1] / "docs" / "architecture.md").read_text(encoding="utf-8")
    layers = re.search(r"The layers, lowest first: (.*?)\. A module", doc, re.S).group(1)
    assert re.findall(r"`(\w+)`", layers) == LAYERS
    cli = re.search(r"\n7\. `cli/`(.*?)\n\d+\. ", doc, re.S).group(1)
    commands = build_parser()._subparsers._group_actions[0].choices
    assert {"train", "translate", "import", "export", "serve"} <= set(commands)
    assert sorted(c for c in commands if f"`{c}`" not in cli) == []
