"""The operator's checks, actions and schedulers (`paystream reconcile | health |
housekeeping | shortfalls | adjust | revert | holds | users | addresses | balances |
refusals | invoices`).

  cli.py               the commands on the books and health (parse, call)
  users_cli.py         the commands on users, addresses, balances and refusals
  users.py             creating users and addresses, reading balances
  health.py            the health checks: stuck events, slot WAL, lag, DLQ, connector,
                       stopped groups
  health_settings.py   its thresholds (PAYSTREAM_HEALTH_*, each overridden by a flag)
  health_exporter.py   `health --serve-metrics`: the checks as metrics, and the full
                       reconciliation on a schedule
  backup_metrics.py    the exporter's WAL archiving and newest-backup metrics
  reconcile.py         `paystream reconcile`'s report of the ledger's self-check
  chain_reconcile.py   `reconcile --chain`: each deposit address's balance on chain
                       against the custody the books posted for it; its metrics
  chain_reconcile_cli.py  running it once, or on a schedule (`--loop`)
  housekeeping.py      purging final outcomes and delivered notifications past a TTL
  shortfalls.py        reversed credits a balance could not cover, and their resolution
  operator_events.py   adjustments, reverts and hold expiries as events into the outbox
  hold_expiry.py       the hold expiry scheduler (`holds expire --loop`)
  prometheus/          alert rules; grafana/ the dashboards
"""
