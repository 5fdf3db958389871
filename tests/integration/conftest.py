"""Fixtures shared by the integration tests."""

from __future__ import annotations

import pytest

from tests.support.consumers import ProcessPool


@pytest.fixture
def pool(tmp_path):
    """Consumer processes started by a test; all killed when it ends."""
    p = ProcessPool(tmp_path)
    yield p
    p.kill_all()
