"""The chaos run's fault schedule per stack: without a standby exactly the one it always
was (the seed-7 short run's below, recorded before the standby's faults existed); with
one, Postgres' restart becomes a failover and the standby is killed once a cycle."""

from __future__ import annotations

import random

import pytest

from paystream.chaos.database import PRIMARY_FAILOVER, STANDBY_KILL, DbFault, describe
from paystream.chaos.harness import CLUSTER_CYCLE, CYCLE, fault_cycle, fault_schedule

# `paystream chaos --short` (100 s, seed 7) on a one-broker stack without a standby.
SEED_7_SHORT = [
    (5.942997, "notifier-crash-after-claim"), (9.905095, "consumer-sigkill"),
    (17.905607, "chain-reorg"), (19.434618, "consumer-crash-after-db-commit"),
    (28.215292, "forged-records"), (30.194134, "notifier-sigkill"),
    (31.347994, "connect-restart"), (38.044614, "scanner-sigkill"),
    (38.224974, "finality-sigkill"), (44.601874, "unknown-user-flood"),
    (45.419133, "broker-restart"), (49.544278, "notifier-crash-after-send"),
    (54.547115, "anvil-restart"), (63.961113, "postgres-restart"),
    (66.742812, "chain-reorg"), (71.339434, "notifier-crash-after-db-commit"),
    (76.764599, "ingest-restart"), (81.686254, "scanner-sigkill"),
    (82.462618, "forged-records"), (87.380083, "consumer-sigkill"),
    (95.857531, "notifier-sigkill")]


def _schedule(cluster: bool, with_standby: bool, seed: int = 7,
              duration_s: float = 100.0) -> list[tuple[float, str]]:
    return fault_schedule(duration_s, random.Random(seed), fault_cycle(cluster, with_standby))


def test_without_a_standby_the_seed_7_schedule_is_unchanged():
    got = [(round(at, 6), kind) for at, kind in _schedule(False, False)]
    assert got == SEED_7_SHORT
    assert fault_cycle(False, False) is CYCLE
    assert fault_cycle(True, False) is CLUSTER_CYCLE


@pytest.mark.parametrize("cluster", [False, True])
def test_with_a_standby_postgres_fails_over_and_the_standby_is_killed(cluster):
    kinds = [kind for _, kind in _schedule(cluster, True, duration_s=600.0)]
    cycles = 6
    assert kinds.count(PRIMARY_FAILOVER) == kinds.count(STANDBY_KILL) == cycles
    assert "postgres-restart" not in kinds
    # The short run's one cycle: every other fault where it was, the failover where the
    # restart was (the standby's kill draws its jitter last).
    plain, standby = _schedule(cluster, False), _schedule(cluster, True)
    others = [(at, kind) for at, kind in standby if kind != STANDBY_KILL]
    renamed = [(at, PRIMARY_FAILOVER if kind == "postgres-restart" else kind)
               for at, kind in plain]
    assert others == renamed


def test_the_report_line_names_the_kill_to_applying_again_time():
    fault = DbFault(PRIMARY_FAILOVER, "node1", 5432, 0.0, new_primary="node2",
                    promoted_s=14.2, applying_s=19.66, rejoined_s=41.0)
    assert describe(fault) == (
        "database fault: primary-failover node1 :5432 killed, folder moved away; node2 "
        "promoted after 14.2 s, kill to ledger applying again 19.7 s, node1 the "
        "synchronous standby again after 41.0 s")
    gone = DbFault(STANDBY_KILL, "node2", 5438, 0.0, wait_primary_s=20.1)
    assert describe(gone) == (
        "database fault: standby-kill node2 :5438 killed; primary in wait_primary after "
        "20.1 s, kill to ledger applying again ?, node2 the synchronous standby again "
        "after ?")
