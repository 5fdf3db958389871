"""Settlement statements: finance closes the month against what the gateway says it
settled, and takes the books out for its spreadsheets (docs/statements.md).

  settings.py   the tolerances and the contract's fee (PAYSTREAM_STATEMENTS_*)
  layout.py     the CSV layout and its strict parser (pure): a malformed line names its
                line number
  importer.py   a file imported whole in one transaction (COPY into a temporary table),
                once per file hash; matched before it commits
  matching.py   every line against payment_events, set-based in SQL: by reference, then
                by amount, currency and time; payouts against their lines
  decisions.py  the operator's decisions on a difference (an event the webhook should
                have been, a fee adjustment after an approval, a revert, an
                acknowledgement), each recorded
  reads.py      statements, their summaries and their open differences
  export.py     postings, transfers, invoices and statements as CSV or Parquet, streamed
                from one snapshot
  cli.py        `paystream statements ...` and `paystream export ...`
  console_routes.py  the console's pages: the statements, one statement's lines beside
                our events by result, approve a proposed fee adjustment; templates/

Only the operator (paystream_ops) reads and writes its tables; the ledger never imports
this package (.importlinter).
"""
