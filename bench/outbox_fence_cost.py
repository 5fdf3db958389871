"""What the outbox's failover fence (migration 0042) costs the ingest's write, in one
run: the ingest's group write (`schema.outbox.write_events`: the events, their status
rows and their outbox messages in three statements) of `--group` deposits, timed with
the fence's trigger (as shipped) and without it (disabled in the same transaction),
rounds interleaved so both see the same machine. Each round's transaction is rolled
back: nothing reaches Kafka, and both arms skip the same COMMIT, so what differs is the
trigger alone (a PL/pgSQL call and one uncontended advisory lock per outbox statement).

Prints the median time per group and per event of each arm and the difference. Run with
`make bench-fence` (the stack must be up; it takes ACCESS EXCLUSIVE on the empty outbox
for a moment each round, so run it on a stack with no traffic).
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from decimal import Decimal

from paystream.schema.db import Cursor, connect, database_url
from paystream.schema.events import EventType, PaymentEvent
from paystream.schema.outbox import write_events


def _round(cur: Cursor, fenced: bool, groups: int, size: int) -> list[float]:
    """One rolled-back transaction of `groups` group writes; the seconds of each."""
    run = uuid.uuid4().hex[:8]
    user = f"bench-fence-{run}"
    cur.execute("INSERT INTO users (user_id) VALUES (%s)", (user,))
    if not fenced:
        cur.execute("ALTER TABLE outbox DISABLE TRIGGER outbox_fence")
    took = []
    for g in range(groups):
        events = [(PaymentEvent(f"bench-fence-{run}-{g}-{i}", EventType.DEPOSIT, user, "USD",
                                Decimal("1.5"), "bench"), f"trace-{run}") for i in range(size)]
        started = time.perf_counter()
        write_events(cur, events)
        took.append(time.perf_counter() - started)
    cur.connection.rollback()
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10, help="rounds of each arm")
    parser.add_argument("--groups", type=int, default=200, help="group writes per round")
    parser.add_argument("--group", type=int, default=20, help="events per group write")
    args = parser.parse_args()
    conn = connect(database_url("owner"), application_name="bench-outbox-fence")
    times: dict[bool, list[float]] = {True: [], False: []}
    try:
        with conn.cursor() as cur:
            _round(cur, True, 20, args.group)  # warm-up: plans and caches
            for _ in range(args.rounds):
                for fenced in (True, False):
                    times[fenced] += _round(cur, fenced, args.groups, args.group)
    finally:
        conn.rollback()
        conn.close()
    with_fence, without = (statistics.median(times[f]) * 1e6 for f in (True, False))
    print(f"outbox fence: {args.rounds} rounds x {args.groups} group writes of "
          f"{args.group} deposits per arm, interleaved, rolled back")
    print(f"  without the fence (baseline): {without:8.1f} us per group, "
          f"{without / args.group:6.2f} us per event")
    print(f"  with the fence:               {with_fence:8.1f} us per group, "
          f"{with_fence / args.group:6.2f} us per event")
    print(f"  the fence costs {with_fence - without:+.1f} us per group "
          f"({(with_fence / without - 1) * 100:+.1f} %)")


if __name__ == "__main__":
    main()
