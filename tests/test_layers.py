"""Imports run one way, in the order of the pipeline: a module imports only
from its own layer or the layers below it (function-level imports too)."""

import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "tpuperf_cli"

# bottom to top
LAYERS = [
    ("tpuperf_cli", "tpuperf_cli.errors", "tpuperf_cli.records", "tpuperf_cli.stream"),
    ("tpuperf_cli.hlo",),
    ("tpuperf_cli.features",),
    ("tpuperf_cli.generate",),          # makes kernels from hlo, ops from features' table
    ("tpuperf_cli.measure",),
    ("tpuperf_cli.metrics", "tpuperf_cli.split"),
    ("tpuperf_cli.model",),
    ("tpuperf_cli.eval", "tpuperf_cli.score", "tpuperf_cli.calibrate"),
    ("tpuperf_cli.tile",),
    ("tpuperf_cli.api",),
    ("tpuperf_cli.commands", "tpuperf_cli.cli", "tpuperf_cli.__main__"),
]


def _group(module):
    """(layer, group) of a module: the longest LAYERS entry it falls under."""
    best = None
    for layer, names in enumerate(LAYERS):
        for name in names:
            if module == name or module.startswith(name + "."):
                if best is None or len(name) > len(best[1]):
                    best = (layer, name)
    return best


def _module_name(path):
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path, module):
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module
            yield node.lineno, name
            for alias in node.names:     # `from tpuperf_cli import metrics`
                yield node.lineno, f"{name}.{alias.name}"


def test_imports_run_down_the_pipeline():
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        own = _group(module)
        assert own is not None, f"{module} is in no layer of {__file__}"
        for line, name in _imports(path, module):
            if not name.startswith("tpuperf_cli"):
                continue
            target = _group(name)
            if target is None or target[1] == own[1] or target[0] < own[0]:
                continue
            if target[0] == own[0] in (0, len(LAYERS) - 1):
                continue          # the contract at the bottom, the command line on top
            if module == "tpuperf_cli" and target[1] == "tpuperf_cli.api":
                continue          # `tp.estimate`: the package hands out the API on first use
            wrong.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {module} imports {name}")
    assert not wrong, "imports against the pipeline order:\n" + "\n".join(wrong)
