"""Statements as the code under test sends them, for the plan tests to run again under
EXPLAIN: a connection whose cursors are `Recording` appends each one to `SENT`."""

from __future__ import annotations

from typing import Any

import psycopg2.extensions

SENT: list[bytes] = []  # every statement a Recording cursor executed, as sent


class Recording(psycopg2.extensions.cursor):
    def execute(self, query: Any, vars: Any = None) -> None:
        super().execute(query, vars)
        assert self.query is not None
        SENT.append(self.query)
