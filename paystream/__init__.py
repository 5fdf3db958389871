"""paystream: the `paystream` command that ties the packages together, and the small
modules every part shares (the rooms themselves are the folders mapped in pyproject.toml:
schema/, ingest/, api/, consumers/, finality/, notify/, ops/, connectors/, stack/).

The command:
  cli.py                `paystream`: each package registers its own subcommands
  run.py                `paystream run`: every process of the pipeline, supervised
  consume.py            `paystream consume GROUP`: a consumer group, the finality watcher
  reconcile_checks.py   the features' checks every reconcile runs beside the ledger's
                        or the chain scanner
  ledger_consequences.py  how a feature declares its ledger consequence (a
                        `*_consequence` module of its folder), and how `consume ledger`
                        finds, orders and builds them without naming any
  declarations.py       finding what modules declare without a list naming them (the
                        ledger's consequences, the ingest's providers, the console's
                        pages)
  launch.py             starting `paystream` itself as a child process
  operator_cli.py       what operator commands share: exit codes, tables, a database

Shared by every part:
  env.py                settings declared once (pydantic-settings), one SettingsError
  refusals.py           the domain's refusals (invalid, not found, conflict); the doors
                        answer them (HTTP 400/404/409, a command's message)
  config_doc.py         docs/configuration.md generated from those declarations
  process_settings.py   a process's log level and metrics address
  logs.py               structlog JSON logging
  trace.py              the trace id of a request
  rate_limit.py         token buckets (429 with Retry-After)
  standard_webhooks.py  the Standard Webhooks scheme: the ingest verifies, notify signs
  hmac_keys.py          HMAC-SHA256 with the key schedule done once per key
  kafka_nodes.py        where Kafka is: bootstrap servers, the local cluster's nodes
  kafka_security.py     how a Kafka client authenticates
  credentials.py        the credentials the local stack generates
  backups.py            the backup repository: pgBackRest's configuration, the backups
  local_chain.py        the local chain (anvil) the stack runs
  edge/                 the HTTP edge kit the ingest and the merchant API are built on
  console_kit/          the console's web kit: what every console page is made with
  chaos/                `paystream chaos`: the invariants proven while parts crash
"""
