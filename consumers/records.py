"""A Kafka message read once into plain values the handlers work with.

Header values arrive as bytes. Kafka Connect's SimpleHeaderConverter writes a string
header as its raw UTF-8 text, a JSON header converter would quote it; both are accepted
so the consumer does not depend on which converter the worker runs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from confluent_kafka import Message


@dataclass(frozen=True)
class Origin:
    """Where a message was read: what a dead letter must carry back to a person."""

    topic: str
    partition: int
    offset: int


@dataclass(frozen=True)
class Record:
    origin: Origin
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp_ms: int | None

    @property
    def key_text(self) -> str | None:
        return None if self.key is None else self.key.decode("utf-8", "replace")

    def header(self, name: str) -> str | None:
        """The last value of header `name` as text, unquoted; None if absent."""
        found: bytes | None = None
        present = False
        for key, value in self.headers:
            if key == name:
                found, present = value, True
        if not present or found is None:
            return None
        return header_text(found)

    def headers_named(self, *names: str) -> dict[str, str]:
        """The named headers that are present, as text, in one pass over the headers."""
        found: dict[str, bytes] = {}
        for key, value in self.headers:
            if key in names and value is not None:
                found[key] = value
        return {k: header_text(v) for k, v in found.items()}

    def header_map(self) -> dict[str, str]:
        """All headers as text (the last value of a repeated name wins)."""
        return {k: header_text(v) if v is not None else "" for k, v in self.headers}


def header_text(raw: bytes) -> str:
    text = raw.decode("utf-8", "backslashreplace")
    if len(text) >= 2 and text[0] == '"' and text[-1] == '"':
        try:
            decoded = json.loads(text)
        except ValueError:
            return text
        if isinstance(decoded, str):
            return decoded
    return text


def from_message(message: Message) -> Record:
    """Copy a message without error (its buffers belong to the client) into a Record."""
    ts_type, ts = message.timestamp()
    # The client's stubs allow None for topic, partition and offset (error events have
    # none) and str header values (the producer accepts them); a fetched message always
    # has all three and bytes values. Not checked per message: this is the hot path.
    return Record(
        origin=Origin(message.topic(), message.partition(), message.offset()),  # type: ignore[arg-type]
        key=message.key(),
        value=message.value(),
        headers=tuple(message.headers() or ()),  # type: ignore[arg-type]
        timestamp_ms=ts if ts_type != 0 else None,  # 0 = TIMESTAMP_NOT_AVAILABLE
    )


def printable(data: bytes | None) -> str | None:
    """Bytes as text Postgres can store: invalid UTF-8 and NUL escaped, never dropped."""
    if data is None:
        return None
    return data.decode("utf-8", "backslashreplace").replace("\x00", "\\x00")
