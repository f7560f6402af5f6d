"""Fixtures shared by adakit's test modules (add yours under a section header)."""

from __future__ import annotations

import pytest

# ------------------------------------------------------------------------- repository worlds


def _real_world(name: str):
    """A manifest world from the shared cache (fetched once if needed); skip if unreachable."""
    from adakit.world import WorldUnavailable, open_world

    try:
        return open_world(name, progress=False)
    except WorldUnavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def flask_world():
    """The flask world of paper Table 3 (adakit/worlds.yaml), as a read-only World."""
    return _real_world("flask")


@pytest.fixture(scope="session")
def requests_world():
    """The requests world of paper Table 3 (adakit/worlds.yaml), as a read-only World."""
    return _real_world("requests")
