"""``tile_kernels.torch.mhc`` (the peer's module path) holds every mHC reference of the peer's, same signatures."""
import inspect

from kernelkiln.torch import mhc as ours


def test_the_peers_mhc_reference_module_path(peer_reference):
    peer = peer_reference("torch/mhc.py")
    public = [n for n, v in vars(peer).items() if inspect.isfunction(v) and not n.startswith("_")
              and v.__module__ == peer.__name__]
    assert len(public) >= 8
    for name in public:
        assert name in ours.__all__, name
        assert list(inspect.signature(getattr(ours, name)).parameters) == \
            list(inspect.signature(getattr(peer, name)).parameters), name
