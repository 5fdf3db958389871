"""Notifications: what a user or merchant is told, recorded in the transaction that
caused it and delivered as Standard-Webhooks-signed POSTs (docs/notifications.md).

  intents.py      the intent: vocabulary, ids and wire form (the ledger, the API and
                  the operator write intents through it, in their own transactions)
  ledger_consequence.py  the intents of a ledger batch, the consequence the ledger
                  runs last in its transaction (declared so; paystream/consume.py finds it)
  seal.py         the seal on a record of intents: made by every producer with a key
                  of the secrets folder, checked by the notifier before it records
  republish.py    after a failover: intents the notifier has not recorded, again
  slots.py        the one writer of intents and their delivery slots (the notifier
                  group, consumers/notifier.py, and the reminders record through it)
  delivery.py     the sender: claims due slots with a lease, signs, POSTs, records
  store.py        the sender's statements on the delivery slots
  schedule.py     what an answer means and when the next attempt is due (pure)
  reminders.py    scheduled reminders, claimed before they are sent
  endpoints.py    the operator's endpoints: add, list, disable, enable, rotate a secret
  merchant_endpoints.py  a merchant's own endpoints, as the merchant API's role (the
                  tenancy policies admit only its own): create, change, delete, the
                  secret, the delivery log, redeliver, recover, test; every action
                  recorded, once per Idempotency-Key
  address_guard.py  the SSRF guard: where a POST may go, at creation and at send time
  operator.py     the operator's view of deliveries: list, show, redeliver, recover
  cli.py          `paystream endpoints | notifications | notify`
  console_routes.py  the console's pages: deliveries, attempts, redeliver, recover;
                  endpoints, disable, enable (the commands' own functions); templates/
  metrics.py      every sender metric, declared once
  settings.py     the sender's and the reminders' settings
  crash_hooks.py  test-only crash points of the sender

Signing is the Standard Webhooks scheme of paystream/standard_webhooks.py, the one the
ingest verifies gateways' webhooks with.
"""
