"""The webhook providers the ingest serves, one module each: every module here declares
`PROVIDER = Provider(...)` (ingest/registry.py), its path, signature check, delivery,
OpenAPI and settings, and is found at start-up without a list naming it. A new provider
is a new module here (and its tests); docs/ingest.md#adding-a-provider.

  alchemy.py    Alchemy Notify Address Activity: its HMAC, ALCHEMY_SIGNING_KEY
  payments.py   the payment gateway (Standard Webhooks): PAYMENTS_WEBHOOK_SECRET and the
                assets it may credit
"""
