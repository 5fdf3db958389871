"""The consumer groups and the runtime they run on (`paystream consume GROUP`).

The runtime (one batch loop for every group; it never imports a group):
  runtime.py      poll, apply + commit, retry: the batch loop
  commit.py       the commit protocol: the DB commit first, then the offsets
  handler.py      the one interface between the runtime and a group (BatchResult)
  records.py      a Kafka message read once into plain values
  client.py       the confluent-kafka configuration and its guard rails
  connection.py   the group's one Postgres connection, reopened when lost
  failures.py     what an error means for the batch in hand
  backoff.py      jittered exponential backoff between retries
  dead_letters/send.py  dead letters to the DLQ topic, with their cause and kind
  stops.py        consumer_stops: a group its DLQ limit stopped, until resumed
  watchdog.py     last-resort liveness check (crash-only recovery)
  metrics.py      every runtime metric, labelled by group
  settings.py     one validated settings object per consumer process
  crash_hooks.py  test-only crash points, inert unless armed

The groups:
  ledger/         group `ledger`: payment events onto the double-entry books, once
  dead_letters/   the dead-letter queue in one place: sending (send.py, the runtime's),
                  group `dlq-mirror` (mirror.py: the DLQ topic as rows of
                  dead_letter_queue), listing and replaying them (replay.py), and
                  `paystream dlq` (cli.py)
  notifier.py     group `notifier`: notification intents recorded with their delivery
                  slots (the intents, slots and sender are notify/'s)
"""
