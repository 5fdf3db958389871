"""Ids that keep tests apart: every test shares one stack (its database and broker)."""

from __future__ import annotations

import uuid


def unique(prefix: str) -> str:
    """An id no other test (or earlier run) uses."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"
