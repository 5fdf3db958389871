"""The chaos suite's short form on the real stack: faults of every kind under load, then
lost = 0 and double-applied = 0 (docs/guarantees.md#the-chaos-run), chain deposits on the
stack's anvil included (docs/finality.md): reorgs, a node restart, a watcher kill and
scanner kills among the faults, a share of their webhooks dropped on purpose (the chain
scanner alone brings those in); hostile-but-valid deliveries and forged topic records in
the traffic (only the outbox can credit), and a flood of deposits for users nobody
created; the notifier SIGKILLed at random and at its crash points, every intent delivered
to a real receiver under its one webhook-id (docs/notifications.md); gateway invoices paid
in full, over, in part or not at all by deposits naming them, each as the run's own
record of accepted payments says (docs/invoices.md)."""

from __future__ import annotations

import os
import re
import subprocess

from paystream.launch import paystream_argv
from paystream.stack import pgbouncer


def _pooled_transactions(cfg: pgbouncer.PgBouncerConfig) -> int:
    # SHOW STATS: database, total_xact_count, ...
    return sum(int(row[1]) for row in pgbouncer.show(cfg, "STATS") if row[0] == "paystream")


def test_short_chaos_run_loses_nothing_and_applies_nothing_twice():
    """Through the test stack's transaction-pooling PgBouncer
    (docs/operations.md#pgbouncer): every child the run starts (ingest, ledgers, DLQ
    mirror, finality) connects through it, and it stays up while the run restarts Postgres
    under it."""
    bouncer = pgbouncer.PgBouncerConfig.from_env()
    before = _pooled_transactions(bouncer)
    done = subprocess.run(paystream_argv("chaos", "--short"), capture_output=True, text=True,
                          timeout=900, env={**os.environ, "PAYSTREAM_DB_VIA_PGBOUNCER": "1"})
    out = done.stdout + done.stderr
    print(out)  # the report, in the test log
    assert done.returncode == 0, out[-5000:]
    assert "\nlost = 0\n" in out
    assert "\ndouble-applied = 0\n" in out
    faults = dict(re.findall(r"([a-z-]+)=(\d+)", re.search(r"faults injected: (.*)",
                                                          out).group(1)))
    faults = {k: int(v) for k, v in faults.items()}
    assert faults["consumer-sigkill"] + faults["consumer-crash-after-db-commit"] >= 3
    assert faults["consumer-crash-after-db-commit"] >= 1
    for kind in ("connect-restart", "broker-restart", "postgres-restart", "ingest-restart",
                 "anvil-restart", "finality-sigkill", "scanner-sigkill"):
        assert faults[kind] >= 1, kind
    assert faults["chain-reorg"] >= 2  # one drops its deposits, the next re-mines them
    outcomes = dict(re.findall(r"([a-z_]+)=(\d+)", re.search(r"final outcomes: (.*)",
                                                            out).group(1)))
    # Deposits credited at finality, and accepted deposits a reorg dropped: never credited.
    assert int(outcomes.get("chain_final", 0)) > 0, out
    assert int(outcomes.get("chain_reorged", 0)) > 0, out
    chain = re.search(r"chain deposits: .* (\d+) re-mined and (\d+) dropped", out)
    assert chain and int(chain.group(1)) > 0 and int(chain.group(2)) > 0, out
    # Counted from the transfers the run sent on chain: each one credited exactly once,
    # those whose webhook never came (or came after the scanner's credit) included.
    scanned = re.search(r"chain transfers on chain: (\d+) \(webhook dropped: (\d+), sent late:"
                        r" (\d+)\), credited once: (\d+), twice: (\d+), missing: (\d+); "
                        r"credited once with no webhook: (\d+), before their late webhook:"
                        r" (\d+)", out)
    assert scanned, out
    on_chain, dropped, late, once, twice, missing, dropped_once, late_once = map(
        int, scanned.groups())
    assert dropped > 0 and late > 0 and on_chain > dropped + late
    assert once == on_chain and twice == missing == 0
    assert dropped_once == dropped and late_once == late
    assert re.search(r"redelivery=\d+", out) and re.search(r"poison=\d+", out)
    # The unknown-user flood: more deposits for users nobody created, at once, than the
    # ledger's default DLQ limit (100 a minute) that such a flood once tripped; each one
    # refused 422 unknown_user or rejected unknown_user (the checker fails the run else).
    assert faults["unknown-user-flood"] >= 1
    ghosts = re.search(r"deposits for unknown users: (\d+) sent \((\d+) in the flood\), (\d+)"
                       r" refused 422 unknown_user, (\d+) accepted and rejected", out)
    assert ghosts, out
    ghost_total, flood, refused_ghosts, rejected_ghosts = map(int, ghosts.groups())
    assert flood > 100 and ghost_total > flood
    assert refused_ghosts + rejected_ghosts == ghost_total
    for kind in ("hostile", "hostile_chain"):
        assert re.search(rf"\b{kind}:200=\d+", out), kind
    assert faults["forged-records"] >= 2
    for kind in ("forged_unknown", "forged_altered", "forged_replayed"):
        assert int(outcomes.get(kind, 0)) >= 1, kind
    assert "with no fault to explain it: 0\n" in out
    for kind in ("notifier-sigkill", "notifier-crash-after-claim", "notifier-crash-after-send",
                 "notifier-crash-after-db-commit"):
        assert faults[kind] >= 1, kind
    # Every intent the run's users must get was published and delivered, each signature
    # verified, retries exercised, none under two webhook-ids (the report must say so: a
    # run that skipped the checks prints "not checked").
    notes = re.search(r"notifications: (\d+) intents published for the run's users \((\d+)"
                      r" expected .*\), (\d+) delivered; (\d+) signed requests verified, (\d+)"
                      r" refused; (\d+) answered 500 on purpose .*: (\d+); under two"
                      r" webhook-ids: (\d+)", out)
    assert notes, out
    published, expected, delivered, requests, refused, failures, _, twice = map(
        int, notes.groups())
    assert published == expected == delivered > 1000
    assert requests > delivered and failures > 0
    assert refused == 0 and twice == 0
    # Gateway invoices paid by deposits naming them, each as the run's record of accepted
    # payments says: settled, paid over, partly paid and unpaid ones all met.
    invoices = re.search(r"invoices: (\d+) created, (\d+) payments accepted; expected from the"
                         r" sender's record: settled=(\d+), settled/paid_over=(\d+),"
                         r" new/paid_partial=(\d+), new=(\d+); invoice violations = (\d+)",
                         out)
    assert invoices, out
    created, paid, settled, over, partial, unpaid, wrong = map(int, invoices.groups())
    assert created == settled + over + partial + unpaid and paid > 50
    assert min(settled, over, partial, unpaid) > 0 and wrong == 0
    assert re.search(r"\binvoice_payment:200=\d+", out)
    # The pipeline's transactions went through the bouncer (its own count, not ours).
    assert _pooled_transactions(bouncer) - before > 1000
