"""The local stack, no Docker (`paystream stack up | down | status | logs`): real
PostgreSQL, PgBouncer, Prometheus, Alertmanager and kcat from Debian's packages, Kafka
(KRaft) and Kafka Connect with Debezium from Maven Central jars, anvil from npm.

  stack.py        up / down / status / logs of the whole stack, in order
  cli.py          `paystream stack ...`
  settings.py     where each service listens and keeps its state
  packages.py     Debian packages installed when missing
  process.py      starting, watching and stopping long-running processes
  ports.py        who holds a port `stack up` needs
  postgres.py     the PostgreSQL cluster; huge_pages.py its shared memory
  standby.py      `stack up --standby`: pg_auto_failover's monitor and keepers
  failover_follower.py  after a failover: the slot, the republish, the connector
  backup.py       pgBackRest: WAL archiving, the stanza, backups, the repository's WAL
  db_cli.py       `paystream db ...`; db_status.py its nodes, archiving, newest backup
  scratch.py      a scratch cluster restored from the repository (never the live one)
  restore_drill.py  `db verify-restore`: the restored copy against the live books
  pgbouncer.py    PgBouncer in transaction pooling mode
  kafka.py        the KRaft nodes; quorum.py a running cluster's state
  connect.py      the Kafka Connect worker and the Debezium plugin
  anvil.py        the local Ethereum node
  prometheus.py   Prometheus with the alert rules; targets.py what it scrapes
  alertmanager.py Alertmanager: routes, receivers, inhibitions, from the settings
  alerts.py       its API v2 for an operator: alerts, silences; alerts_cli.py
                  `paystream alerts`
  compose.py      the credentials docker-compose's `secrets` job writes
"""
