"""Chain-deposit finality: a deposit seen in a block is credited only once that block is
final, and never if a reorg removed it.

  rpc.py       web3 client per network: timeouts, breaker, finalized-block cache
  breaker.py   the circuit breaker state machine
  evidence.py  receipts / transactions / block refs as plain values
  verify.py    one deposit + evidence → a FinalityVerdict: FINAL / REORGED(reason) /
               NOT_YET (pure); the deposit itself is schema.chain.ExpectedDeposit
  planner.py   group due deposits by block: a tick costs 1 + distinct blocks calls
  watcher.py   the tick loop, with the DB side behind PendingStore / OutcomeSink
  store.py     that DB side on Postgres: chain_deposits due / suspects / settlements
               (one transaction: rows marked through schema.chain_deposits +
               settlement event into the outbox)
  service.py   `paystream consume finality`: a watcher thread per network
  events.py    the finalisation / reorg event ids and payloads for the outbox
  metrics.py   every finality metric, declared once
  settings.py  per-network settings from the environment
  chain_reconcile.py  `paystream reconcile --chain`: each deposit address's balance on
               chain against the custody the books posted for it; its metrics
  chain_reconcile_cli.py  running it once, or on a schedule (`--loop`)

scanner/     the chain scanner, a package of its own: deposits read from the chain
               itself, for those no webhook brought (it shares rpc.py and settings.py)
"""
