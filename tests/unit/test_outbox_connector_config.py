"""The outbox connector must carry any JSON payload without deriving a schema from it.

With `table.expand.json.payload=true` and JsonConverter, Debezium inferred a Connect
schema from each payload, and one payload it could not type (an integer beyond 64 bits)
failed the task for good: nothing reached Kafka for any user. The integration test
tests/integration/test_cdc_hostile_payloads.py shows the behaviour on the real stack.
"""

from __future__ import annotations

from paystream.connectors.registration import connector_config


def test_the_payload_travels_as_its_json_text_not_an_inferred_struct() -> None:
    config = connector_config()
    assert config["transforms.outbox.table.expand.json.payload"] == "false"
    # A connector-level override: the record value is the jsonb text itself, not a JSON
    # string holding it (what the worker's JsonConverter would write).
    assert config["value.converter"] == "org.apache.kafka.connect.storage.StringConverter"
    assert config["key.converter"] == "org.apache.kafka.connect.storage.StringConverter"


def test_the_headers_the_ledger_checks_are_still_placed() -> None:
    placement = connector_config()["transforms.outbox.table.fields.additional.placement"]
    assert set(placement.split(",")) == {"type:header:event_type", "event_id:header:event_id",
                                         "trace_id:header:trace_id"}
