"""The chain scanner's DB side: its cursor per network, the deposit addresses, and the
deposits it found written through the outbox.

A pass is ONE transaction (`ScanStore.pass_for`): the cursor row locked FOR UPDATE
NOWAIT (a second scanner of the network finds it taken: ScannerBusyError, and skips its
pass), the deposits of the blocks read written (schema.outbox.write_event, as the ingest
writes a webhook's), the cursor moved past those blocks, then COMMIT. A crash anywhere
before the commit leaves the cursor where it was and no deposit of those blocks written;
after it, both are there. A rescan (`paystream chain scan`) writes deposits only, in a
transaction per range, and never moves the cursor. A backfill (one address's past,
requested through schema.scan_backfills) writes that address's deposits of a range and
its own progress in one transaction, under the cursor's lock.

A deposit whose event id is already recorded is left as it is: the same scan again
(DUPLICATE), or the provider's webhook first (CONFLICT: the provider's content differs
from ours in its wording, and its event is the one the ledger holds). Either way nothing
is written, and the transfer stays one event, credited once.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import psycopg2
import psycopg2.errors

from paystream.finality.evidence import BlockRef
from paystream.schema.db import Connection, Cursor, connect, database_url
from paystream.schema.events import PaymentEvent
from paystream.schema.outbox import WriteOutcome, write_event


class ScannerBusyError(RuntimeError):
    """Another scanner holds this network's cursor (a pass of it is under way)."""


@dataclass
class Written:
    """What a pass wrote: new events, and ids some report had recorded already."""

    accepted: list[str] = field(default_factory=list)
    known: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Backfill:
    """A request to scan one address's past: blocks next_block..up_to_block are left
    (up_to_block None: not started, it becomes the cursor then)."""

    backfill_id: int
    address: str
    next_block: int
    up_to_block: int | None


class ScanPass:
    """One pass's transaction: read and move the cursor, look owners up, write events."""

    def __init__(self, cur: Cursor, network: str) -> None:
        self.cur = cur
        self.network = network

    def cursor(self) -> BlockRef | None:
        """The locked cursor; None when the network has none yet."""
        try:
            self.cur.execute("SELECT block_number, block_hash FROM chain_scan_cursors"
                             " WHERE network = %s FOR UPDATE NOWAIT", (self.network,))
        except psycopg2.errors.LockNotAvailable:
            raise ScannerBusyError(f"another scanner is scanning {self.network}") from None
        row = self.cur.fetchone()
        return None if row is None else BlockRef(int(row[0]), row[1])

    def start_at(self, block: BlockRef) -> bool:
        """Create the cursor at `block` (its first pass); False if a scanner just did."""
        self.cur.execute("INSERT INTO chain_scan_cursors (network, block_number, block_hash)"
                         " VALUES (%s, %s, %s) ON CONFLICT (network) DO NOTHING"
                         " RETURNING network", (self.network, block.number, block.hash))
        return self.cur.fetchone() is not None

    def move_to(self, block: BlockRef) -> None:
        self.cur.execute("UPDATE chain_scan_cursors SET block_number = %s, block_hash = %s,"
                         " updated_at = now() WHERE network = %s",
                         (block.number, block.hash, self.network))

    def owners(self, addresses: Sequence[str]) -> dict[str, str]:
        """Lowercased deposit address -> user id, of `addresses` (those a range paid)."""
        return owners(self.cur, self.network, addresses)

    def write(self, events: Sequence[PaymentEvent], trace_id: str) -> Written:
        return write(self.cur, events, trace_id)

    def open_backfill(self) -> Backfill | None:
        """The oldest backfill of the network not done yet (schema.scan_backfills)."""
        self.cur.execute("SELECT backfill_id, address, next_block, up_to_block"
                         " FROM chain_scan_backfills WHERE network = %s AND done_at IS NULL"
                         " ORDER BY backfill_id LIMIT 1 FOR UPDATE", (self.network,))
        row = self.cur.fetchone()
        return None if row is None else Backfill(int(row[0]), row[1], int(row[2]),
                                                 None if row[3] is None else int(row[3]))

    def backfill_moved(self, backfill: Backfill, next_block: int, up_to_block: int) -> None:
        """Record a backfill's progress (done once past `up_to_block`)."""
        self.cur.execute("UPDATE chain_scan_backfills SET next_block = %s, up_to_block = %s,"
                         " done_at = CASE WHEN %s > %s THEN now() END"
                         " WHERE backfill_id = %s",
                         (next_block, up_to_block, next_block, up_to_block,
                          backfill.backfill_id))


def owners(cur: Cursor, network: str, addresses: Sequence[str]) -> dict[str, str]:
    if not addresses:
        return {}
    cur.execute("SELECT address, user_id FROM deposit_addresses"
                " WHERE network = %s AND address = ANY(%s)", (network, sorted(set(addresses))))
    return dict(cur.fetchall())


def write(cur: Cursor, events: Sequence[PaymentEvent], trace_id: str) -> Written:
    written = Written()
    for event in events:
        outcome = write_event(cur, event, trace_id)
        (written.accepted if outcome is WriteOutcome.ACCEPTED else written.known).append(
            event.event_id)
    return written


class ScanStore:
    """Transactions on one connection (one store per scanner thread), opened lazily and
    dropped after a connection error: a Postgres restart costs the failing pass only."""

    def __init__(self, connect_fn: Callable[[], Connection] | None = None) -> None:
        self._connect = connect_fn or (lambda: connect(database_url("finality"),
                                                           application_name="paystream-scanner"))
        self._conn: Connection | None = None

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Cursor]:
        """Commit on success, roll back on any error."""
        if self._conn is None or self._conn.closed:
            self._conn = self._connect()
        conn = self._conn
        try:
            with conn, conn.cursor() as cur:
                yield cur
        except (psycopg2.OperationalError, psycopg2.InterfaceError):
            self.close()
            raise

    @contextlib.contextmanager
    def pass_for(self, network: str) -> Iterator[ScanPass]:
        with self.transaction() as cur:
            yield ScanPass(cur, network)

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(psycopg2.Error):
                self._conn.close()
            self._conn = None
