"""The webhook ingest (docs/ingest.md): provider webhooks in, verified, validated and
written idempotently with their outbox rows, one group commit for many deliveries.

  app.py                the ASGI app: webhooks straight to their handler, the rest to
                        FastAPI; the public and the admin port (paystream/edge/ kit)
  providers/            the providers served, one module each: its path, signature
                        check, delivery, OpenAPI and settings (alchemy.py, payments.py)
  registry.py           what a provider declares, how they are found (no list names
                        them) and served: what the routes, dispatch and /docs read
  webhooks.py           the webhook routes as plain ASGI: the checks, in order, the
                        write, the answer and every refusal's
  routes_webhooks.py    the same routes declared to FastAPI, for /docs and OpenAPI
  api_schema.py         the OpenAPI description: what every handler answers, the
                        headers the providers share
  request_body.py       reading a body: JSON only, bounded while it streams, strict
  http_edge.py          the HTTP/1.1 connection limits uvicorn lacks (head size and
                        deadline, body deadline, connection cap)
  serve.py              `paystream ingest`'s uvicorn options (the edge protocol, proxies)
  errors.py             the ingest's refusals, with their own codes
  alchemy.py            Alchemy Notify Address Activity: payload to events and notices
  alchemy_signature.py  Alchemy's HMAC over the raw body
  payments.py           the payment gateway's body: one payment event
  standard_webhooks.py  Standard Webhooks signatures (the gateway's), refused as a 401
  refusals.py           gateway events known not to apply (422), recorded
  notices.py            deliveries recorded but never credited
  recording.py          what one delivery writes: the contract and the shared writing
  writer.py             group commit: many deliveries, one transaction, answered after it
  store.py              Postgres for the ingest: the pool and the group transaction
  metrics.py            every ingest metric, declared once
  settings.py           the ingest's settings, with its providers'; their secrets' rules
  cli.py                `paystream ingest`; `paystream refusals list`
"""
