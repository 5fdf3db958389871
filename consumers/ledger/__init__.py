"""The ledger group: every payment event applied to the double-entry books exactly once,
on the consumer runtime (the package above this one), which it imports and which never
imports it.

  handler.py       LedgerHandler: one batch in the batch transaction the commit protocol
                   opened (read, judge, lock balances, plan, claim outcomes, post, the
                   ledger's own consequences, then the registered ones)
  consequences.py  what a feature's consequence is handed to react to a batch in its
                   transaction (invoices/ and notify/ declare theirs in their folders;
                   paystream/ledger_consequences.py finds and orders them at start-up)
  chain_consequence.py  the chain deposits a batch holds, credits and settles (a
                   consequence the ledger declares as the features do theirs)
  settlements.py   the watcher's settlements judged against their held deposits
  replays.py       events applied before whose outcome housekeeping forgot
  shortfalls.py    what a debit could not take: account_shortfalls rows, listed and
                   resolved by a person
  plan.py          pure planning: which event does what to which balance
  postings.py      pure double-entry rule: what each event posts, summing to zero
  conservation.py  the conservation checks `paystream reconcile` adds (transfers balance,
                   custody matches deposits)
  reconcile.py     the self-check: balances equal their postings, never negative (also
                   run on the hot path by the handler, over the rows it touched), and
                   the features' own checks the command hands it (FeatureCheck)
  metrics.py       the ledger's own metrics (reversals, shortfalls)

The operator's hand on the books (`paystream shortfalls | adjust | revert | holds`):
  cli.py             the commands (the console's ledger page calls the same actions)
  console_routes.py  the console's ledger page: shortfalls with resolve, holds, the
                     reconciliation; what it needs of other features the console's
                     app hands it; templates/ledger.html
  operator_events.py adjustments, reverts and hold expiries as events into the outbox,
                     applied by this group like any other
  hold_expiry.py     the hold expiry scheduler (`holds expire --loop`)
  reconcile_report.py  `paystream reconcile`'s report of the self-check (the command
                     is ops/cli.py's: it adds every feature's check and the chain's)
  settings.py      its variables: the hot-path check's pace, the withdrawal hold's TTL
"""
