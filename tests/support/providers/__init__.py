"""Webhook providers declared in tests alone, found as the product's are
(ingest/registry.py): `IngestSettings.from_env(env, also=("tests.support.providers",))`
serves them beside the product's; the product never sees them.

  second_gateway.py   a second Standard Webhooks gateway, at /webhooks/gateway-two
"""
