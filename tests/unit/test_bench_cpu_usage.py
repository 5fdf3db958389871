"""bench/cpu_usage.role_of: which Postgres processes count as what in the ledger bench's
split of the database's CPU (titles as Postgres 15 sets them)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from cpu_usage import role_of


@pytest.mark.parametrize(("title", "role"), [
    ("postgres: walsender paystream_cdc 127.0.0.1(58048) START_REPLICATION", "walsender"),
    ("postgres: paystream_ledger paystream 127.0.0.1(40112) idle in transaction", "backends"),
    ("postgres: paystream_ledger paystream 127.0.0.1(40112) COPY", "backends"),
    ("postgres: parallel worker for PID 1234", "backends"),
    ("postgres: checkpointer ", "background"),
    ("postgres: background writer ", "background"),
    ("postgres: walwriter ", "background"),
    ("postgres: autovacuum launcher ", "background"),
    ("postgres: autovacuum worker paystream", "background"),
    ("postgres: logical replication launcher ", "background"),
])
def test_role_of(title: str, role: str) -> None:
    assert role_of(title) == role
