"""The merchant API (docs/api.md): balances, event status and history out; users, deposit
addresses, withdrawal requests and invoices in; authenticated by API keys, each key
seeing its merchant's resources only.

  app.py                  the ASGI app: /v1 and /healthz on the public port, the rest
                          on the admin port (paystream/edge/ kit); create_app
  routes_balances.py      GET a user's balances, now or at a moment
  routes_events.py        GET an event's status, outcome and ledger entries
  routes_transactions.py  GET a user's transfers, by cursor
  routes_users.py         POST users, POST and GET their deposit addresses
  routes_withdrawals.py   POST a withdrawal request, GET its state
  routes_endpoints.py     the merchant's own webhook endpoints: create, read, change,
                          delete, the secret, the delivery log, redeliver, recover,
                          test (the rules are notify/merchant_endpoints.py's)
  models_endpoints.py     their request and answer bodies
  routes_exports.py       GET the merchant's postings, transfers or invoices as CSV
  exports.py              what those exports read, spooled from one snapshot
  routes_invoices.py      POST an invoice, GET one or pages of them, cancel one (the rules
                          are invoices/create.py's and invoices/reads.py's)
  auth.py                 the key check: the dependency per resource scope whose every
                          transaction opens with it (and sets the key's merchant for
                          the tenancy policies, migration 0033); rate limit per key
  keys.py                 API keys: a merchant's or an operator's; scopes; made,
                          listed, revoked, found by their hash
  key_use.py              when each key was last used, written once a minute
  database.py             the two kinds of transaction a request runs in
  reads.py                what the routes read, in the request's snapshot
  withdrawals.py          a withdrawal request's rules and its write, once per
                          Idempotency-Key
  models.py               request and answer bodies, path parameters, refusals (OpenAPI)
  metrics.py              every API metric, declared once
  settings.py             the API's settings
  cli.py                  `paystream api`, `paystream merchants`, `paystream apikeys`
  console_routes.py       the console's page of merchants' keys: listed by merchant,
                          revoked (as `paystream apikeys revoke`); templates/keys.html
"""
