"""The seal on a notification intent: who may make one, checked where it is delivered.

An intent's id is derived from its source event and type, so anyone who can produce to
paystream.notifications could send a merchant a well-formed intent with any amount: the
notifier would record it and sign it with the merchant's secret. Every producer of
intents (the ledger's consequence, invoices, the failover's republish, a resolved
shortfall) therefore seals each record's intents with HMAC-SHA256 under a key of the
secrets folder, over their canonical wire form (type, id, created_at, data of each, in
order; JSON with sorted keys, as it reads back after the outbox's jsonb), and the
notifier records a record's intents only when its seal verifies (consumers/notifier.py;
a dead letter `unsealed` or `bad_seal` otherwise). A producer of the stack holds the
key; a Kafka client alone does not. One seal a record, not one an intent: the ledger
makes an intent per event it applies, and an HMAC each was a noticeable share of its
CPU per event (the CHANGELOG has the figures).

The key file holds one or more keys, one per line: the first seals, every one verifies
(rotation: put the new key first, drop the old once the topic holds nothing it sealed).
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import orjson
from pydantic import Field

from paystream import credentials
from paystream.env import EnvSettings
from paystream.hmac_keys import keyed_sha256

SECRET_NAME = "intent-seal"
WIRE_FIELDS = ("type", "id", "created_at", "data")


class SealSettings(EnvSettings):
    """Read by every producer of notification intents (the ledger, the merchant API's
    and the CLI's invoices, the invoice expiry, a resolved shortfall, the failover
    follower) and by the notifier, which records only intents sealed with one of its
    keys ([notifications](notifications.md#sealed-intents))."""

    doc_section = "Notifications"

    key_file: Path | None = Field(
        None, alias="PAYSTREAM_INTENT_SEAL_KEY_FILE",
        json_schema_extra={"shown": "`intent-seal` in the secrets folder"},
        description="the keys that seal notification intents (one a line: the first "
                    "seals, each verifies); `paystream stack up` generates one")


def canonical(bodies: Sequence[Mapping[str, Any]]) -> bytes:
    """The bytes a seal covers: each body's wire fields, in order, keys sorted at every
    depth."""
    return orjson.dumps([{name: body.get(name) for name in WIRE_FIELDS} for body in bodies],
                        option=orjson.OPT_SORT_KEYS)


@dataclass(frozen=True)
class Sealer:
    keys: tuple[bytes, ...]

    def __post_init__(self) -> None:
        if not self.keys or not all(self.keys):
            raise ValueError("a sealer needs at least one non-empty key")

    def seal(self, bodies: Sequence[Mapping[str, Any]]) -> str:
        mac = keyed_sha256(self.keys[0])
        mac.update(canonical(bodies))
        return mac.hexdigest()

    def verifies(self, bodies: Sequence[Mapping[str, Any]], given: object) -> bool:
        if not isinstance(given, str):
            return False
        message = canonical(bodies)
        for key in self.keys:
            mac = keyed_sha256(key)
            mac.update(message)
            if hmac.compare_digest(mac.hexdigest(), given):
                return True
        return False

    @classmethod
    def from_file(cls, path: Path) -> Sealer:
        try:
            lines = path.read_text().split()
        except FileNotFoundError:
            raise credentials.MissingSecretError(
                f"the intent seal key {path} does not exist: run `paystream stack up` for "
                "this state dir, or set PAYSTREAM_INTENT_SEAL_KEY_FILE") from None
        if not lines:
            raise credentials.MissingSecretError(f"the intent seal key {path} is empty")
        return cls(tuple(line.encode() for line in lines))


@lru_cache(maxsize=1)
def process_sealer() -> Sealer:
    """This process's sealer, read once (the doors' and the processes' wiring)."""
    path = SealSettings.from_env().key_file or credentials.secrets_dir() / SECRET_NAME
    return Sealer.from_file(path)


def ensure_key() -> str:
    """`paystream stack up`'s step: the key file, generated once."""
    credentials.ensure_secret(SECRET_NAME)
    return SECRET_NAME
