"""The operator's checks that span the parts, and what has no other home (`paystream
migrate | reconcile | health | housekeeping | users | addresses | balances | refusals`).
A feature's own commands live in its folder: the ledger's books in consumers/ledger/
(`shortfalls | adjust | revert | holds`), the dead letters in consumers/dead_letters/,
invoices/, notify/, statements/, the chain's (the scanner, `reconcile --chain`) in
finality/.

  cli.py               migrate, reconcile (the ledger's check with every feature's),
                       health, housekeeping (parse, call)
  users_cli.py         the commands on users, addresses and balances
  users.py             creating users and addresses, reading balances
  health.py            the health checks: stuck events, slot WAL, lag, DLQ, connector,
                       stopped groups
  health_settings.py   its thresholds (PAYSTREAM_HEALTH_*, each overridden by a flag)
  health_exporter.py   `health --serve-metrics`: the checks as metrics, and the full
                       reconciliation on a schedule
  backup_metrics.py    the exporter's WAL archiving and newest-backup metrics
  housekeeping.py      purging final outcomes and delivered notifications past a TTL
  prometheus/          alert rules; grafana/ the dashboards
"""
