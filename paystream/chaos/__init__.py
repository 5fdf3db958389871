"""`paystream chaos`: drive signed webhooks through the real pipeline while its parts are
killed, then prove that nothing accepted was lost and nothing was applied twice.

  cli.py            `paystream chaos [--short]` (needs the `chaos` extra)
  harness.py        the run: traffic, the fault schedule, the drain, the invariants, the
                    report
  traffic.py        the webhooks sent: a deterministic mix by seed
  sender.py         sends the plan at a steady rate, retrying like a provider
  alchemy.py        Alchemy payloads built from real receipts, signed as Alchemy signs
  chain.py          chain deposits on the stack's own anvil
  forgery.py        forged records on the payment topic
  invoices.py       the run's invoices: created, paid by the traffic, checked
  processes.py      the processes a run owns, and SIGKILL + restart of the stack's
  nodes.py          faults on a replicated Kafka cluster (a broker, the controller)
  database.py       faults on a stack with a standby (the primary failed over, the
                    standby killed)
  receiver.py       a real webhook receiver for the notifications
  notifications.py  what the notifications must be, from evidence the notifier lacks
  invariants.py     what must hold after the run, checked against the database
"""
