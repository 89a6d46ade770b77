"""``tile_kernels.torch.mhc`` (the peer's module path) holds every mHC reference of the peer's, same signatures."""
import importlib.util
import inspect

from kernelkiln.torch import mhc as ours


def test_the_peers_mhc_reference_module_path(peer_wheel):
    path = peer_wheel("2.1.0") / "tile_kernels" / "torch" / "mhc.py"
    spec = importlib.util.spec_from_file_location("peer_mhc_refs_path", path)
    peer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(peer)  # imports torch only
    public = [n for n, v in vars(peer).items() if inspect.isfunction(v) and not n.startswith("_")
              and v.__module__ == peer.__name__]
    assert len(public) >= 8
    for name in public:
        assert name in ours.__all__, name
        assert list(inspect.signature(getattr(ours, name)).parameters) == \
            list(inspect.signature(getattr(peer, name)).parameters), name
