"""The chain scanner: deposits read from the chain itself, for those no webhook brought
(docs/finality.md#the-chain-scanner). It reads the chain through the finality watcher's
RPC client (finality/rpc.py) and the networks of its settings.

  blocks.py     blocks and Transfer logs -> the deposits into our addresses, named as
                the webhook names them (pure); the range sizing
  store.py      the cursor per network (locked per pass) and the deposits written
                through the outbox, in one transaction
  service.py    `paystream consume scanner`: a pass loop per network, reorgs below the
                cursor rescanned; the rescan of a range
  cli.py        `paystream chain scan --network N --from B [--to B]`
  settings.py   its settings from the environment (poll, range, rewind)
  metrics.py    every scanner metric, declared once
"""
