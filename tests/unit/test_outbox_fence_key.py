"""The outbox fence's advisory lock key is written twice, in the trigger's SQL (migration
0042) and in schema.outbox.FENCE_KEY, which the failover follower takes: were they to
differ, the fence would hold nothing back."""

from __future__ import annotations

import re
from pathlib import Path

from paystream.schema.outbox import FENCE_KEY

MIGRATION = Path(__file__).resolve().parents[2] / "schema" / "migrations" \
    / "0042_outbox_failover_fence.sql"


def test_the_trigger_takes_the_key_the_follower_holds() -> None:
    keys = re.findall(r"pg_try_advisory_xact_lock_shared\((\d+)\)", MIGRATION.read_text())
    assert keys == [str(FENCE_KEY)]
