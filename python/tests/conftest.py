"""Fixtures: engines on the loopback plugin (found through TE_PLUGIN_PATH,
which the ctest sets; build/plugins otherwise)."""
import os
import pathlib

import pytest

ROOT = pathlib.Path(os.environ.get("TE_SOURCE_DIR",
                                   pathlib.Path(__file__).resolve().parents[2]))
os.environ.setdefault("TE_PLUGIN_PATH", str(ROOT / "build" / "plugins"))

te = pytest.importorskip("transferengine")


@pytest.fixture
def engine():
    with te.Engine() as e:
        yield e


@pytest.fixture
def pair():
    """(sender, receiver, peer of the receiver at the sender)."""
    with te.Engine() as a, te.Engine() as b:
        yield a, b, a.add_peer(b.address())


@pytest.fixture
def self_peer(engine):
    """(engine, its own peer): writes to itself."""
    return engine, engine.add_peer(engine.address())
