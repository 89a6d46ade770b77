"""Seeding plugin: every test starts from its own reproducible seed (the peer's
``tile_kernels.testing.pytest.random``).

``--seed N`` (default 0) shifts all seeds. The autouse fixture ``seed`` returns
``N + (sha256 of the test's node id) mod 2**31`` after seeding Python's ``random`` and ``kernelkiln.rand.set_seed``
(which seeds torch's generators) with it, so a test draws the same inputs whichever other tests run, in whatever
order or worker, and ``--seed`` gives every test new ones. The numbers match the peer's for the same node id and
``--seed``: its ``rand.set_seed`` is ``torch.manual_seed`` too.
"""

import hashlib
import random

import pytest

from kernelkiln import rand

_SEED_SPACE = 2**31


def pytest_addoption(parser):
    parser.addoption(
        "--seed", type=int, default=0, help="Base seed added to each test's own seed (a hash of its node id); default 0"
    )


def _node_seed(nodeid, base):
    digest = hashlib.sha256(nodeid.encode()).hexdigest()
    return base + int(digest, 16) % _SEED_SPACE


@pytest.fixture(autouse=True)
def seed(request):
    """The test's seed, already applied to ``random`` and ``kernelkiln.rand`` (torch)."""
    value = _node_seed(request.node.nodeid, request.config.getoption("--seed"))
    random.seed(value)
    rand.set_seed(value)
    return value
