"""The layering the architecture promises, checked on the sources: the ops never import the references they are
tested against, the loader knows nothing of ops, the contracts import neither torch nor TileLang, and no module
outside build time imports tilelang or tvm."""
import ast
from pathlib import Path

PYTHON = Path(__file__).resolve().parents[2] / "python"
PKG = PYTHON / "kernelkiln"


def _imports(path):
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names |= {f"{node.module}.{a.name}" for a in node.names}
    return names


def _modules(root):
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def test_ops_never_import_the_references():
    for path in _modules(PKG):
        if path.is_relative_to(PKG / "torch"):
            continue
        bad = {n for n in _imports(path) if n == "kernelkiln.torch" or n.startswith("kernelkiln.torch.")}
        assert not bad, f"{path.relative_to(PYTHON)} imports the references: {sorted(bad)}"


def test_the_loader_knows_no_ops():
    for path in _modules(PKG / "_runtime"):
        bad = {n for n in _imports(path) if n.split(".")[:2] in (["kernelkiln", "quant"], ["kernelkiln", "moe"],
                                                                  ["kernelkiln", "transpose"], ["kernelkiln", "_ops"])}
        assert not bad, f"{path.relative_to(PYTHON)} imports op code: {sorted(bad)}"


def test_contracts_import_neither_torch_nor_tilelang():
    for path in _modules(PYTHON / "kernelkiln_contract"):
        bad = {n for n in _imports(path) if n.split(".")[0] in ("torch", "tilelang", "tvm", "kernels", "kernelkiln")}
        assert not bad, f"{path.relative_to(PYTHON)} imports {sorted(bad)}"


def test_the_runtime_never_imports_the_build_toolchain():
    for path in _modules(PKG):
        bad = {n for n in _imports(path) if n.split(".")[0] in ("tilelang", "tvm", "build_tools", "kernels")}
        assert not bad, f"{path.relative_to(PYTHON)} imports {sorted(bad)}"
