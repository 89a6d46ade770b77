"""The peer's Engram references (tile_kernels 2.1.0's torch/engram.py, loaded by path: tests/conftest.py's
``peer_reference``)."""
import pytest


@pytest.fixture(scope="session")
def peer_engram(peer_reference):
    return peer_reference("torch/engram.py")
