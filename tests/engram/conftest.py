"""The peer's Engram references (tile_kernels 2.1.0's torch/engram.py, loaded by path from its wheel, never
installed): the module imports ``tile_kernels.config.is_ascend`` only, which a stand-in answers with False (the
CUDA branches, the ones our kernels follow)."""
import importlib.util
import sys
import types

import pytest


@pytest.fixture(scope="session")
def peer_engram(peer_wheel):
    path = peer_wheel("2.1.0") / "tile_kernels" / "torch" / "engram.py"
    saved = {k: sys.modules.get(k) for k in ("tile_kernels", "tile_kernels.config")}
    package, config = types.ModuleType("tile_kernels"), types.ModuleType("tile_kernels.config")
    config.is_ascend = lambda: False
    sys.modules.update({"tile_kernels": package, "tile_kernels.config": config})
    try:
        spec = importlib.util.spec_from_file_location("peer_engram_refs", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    return mod
