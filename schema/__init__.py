"""The contract every part shares: the database (migrations, tables and the one writer of
each), the payment event, money, and the outbox. Nothing here runs on its own.

  migrations/         numbered SQL, applied once each (migrate.py); roles and grants
  migrate.py          applying them, recorded in schema_migrations; then the CHECKs
                      that list declared values (event types, account kinds) synced
  db.py               where Postgres is, per role, and the connection factory
  events.py           the payment event: the ingest writes it, the consumers read it
  event_types/        each event type declared once: its shape, counter-account, intents
  amounts.py          money parsing and formatting: Decimal, never float
  outbox.py           the transactional outbox write: how events enter the pipeline
  republish.py        after a failover: received events and settlements through the outbox
  stored_events.py    the stored event a topic record is checked against
  visibility.py       waiting for a row a record names to become visible
  status.py           the event status transitions
  idempotency.py      the ledger's idempotency key
  processed_events.py each event's outcome, written once
  users.py            users and their deposit addresses
  merchants.py        merchants (tenants): made, listed; the default one
  scan_backfills.py   a deposit address's past, scanned on request (the chain scanner's)
  balances.py         balance rows and their reads
  accounts.py         the double-entry accounts, and their kinds, each declared once
  transfers.py        transfers and their postings: the journal
  holds.py            withdrawals in flight
  reversals.py        what refunds, chargebacks and reverts took back
  chain.py            a chain deposit's on-chain identity
  chain_deposits.py   a chain deposit's way from held to settled
  pgcopy.py           bulk rows with COPY (the ledger's writes)
  pgarray.py          text[] parameters as one literal
"""
