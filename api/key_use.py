"""When each API key was last used (api_keys.last_used_at), to within a minute: a request
only notes its key in memory; a thread writes the notes every `flush_s` in one
statement. A write per request would put a row lock and WAL on every read the API
answers (the balances read is one round trip: api/reads.py)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime

import structlog

from paystream.schema.db import Connection

log = structlog.get_logger("paystream.api.key_use")


class KeyUse:
    def __init__(self, connect: Callable[[], Connection], flush_s: float) -> None:
        self._connect = connect
        self._flush_s = flush_s
        self._seen: dict[str, datetime] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def seen(self, key_id: str) -> None:
        """Note a request of `key_id` now (starts the writer on the first note)."""
        with self._lock:
            self._seen[key_id] = datetime.now(UTC)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="api-key-use",
                                                daemon=True)
                self._thread.start()

    def _run(self) -> None:
        conn: Connection | None = None
        while not self._stop.wait(self._flush_s):
            conn = self.flush(conn)
        conn = self.flush(conn)
        if conn is not None:
            conn.close()

    def flush(self, conn: Connection | None) -> Connection | None:
        """Write the notes taken since the last flush; the connection to use next time
        (None after a failure: the notes are kept and tried again)."""
        with self._lock:
            seen, self._seen = self._seen, {}
        if not seen:
            return conn
        try:
            conn = conn or self._connect()
            with conn, conn.cursor() as cur:
                # greatest(): another worker process may have written a later time.
                cur.execute("UPDATE api_keys k SET last_used_at = greatest(k.last_used_at,"
                            " u.at) FROM unnest(%s::text[], %s::timestamptz[]) AS u(id, at)"
                            " WHERE k.key_id = u.id", (list(seen), list(seen.values())))
            return conn
        except Exception as exc:
            log.warning("key_use_not_written", keys=len(seen), error=str(exc)[:200])
            with self._lock:
                for key_id, at in seen.items():
                    self._seen.setdefault(key_id, at)
            if conn is not None:
                conn.close()
            return None

    def close(self) -> None:
        """Write what is left and stop the writer."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
