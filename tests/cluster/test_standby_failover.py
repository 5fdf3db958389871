"""Failover under fire (docs/operations.md#a-standby-and-failover): on the
cluster stack brought up with `--standby`, signed deposits and withdrawals go through a
real ingest and ledger while the primary's postmaster that `paystream db status --json`
names is SIGKILLed with its children and its data directory moved away.

pg_auto_failover promotes the synchronous standby; the failover follower creates the
slot there, publishes the `received` events again and re-points Debezium. Measured and
asserted: the pipeline applies an event accepted after the kill within 30 s of the kill;
the ingest answered only 2xx or a retryable 503 (the sender retries as a provider does);
every accepted event applied exactly once; every balance equals the oracle computed from
the accepted events; every event's notification intent recorded by the notifier;
`paystream reconcile` clean; the old node rejoins as the standby. Then the same again
with the roles swapped: the new primary killed, the pipeline fails back to the first
node and passes the same checks (on the books of both rounds). Between the rounds,
`pgbackrest check` on the node the first promoted: WAL archived from it.

Runs last in tests/cluster (its file name sorts last): the nodes' roles are swapped
afterwards, which the other tests do not care about but a reader of the logs should know.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

import httpx
import pytest

from paystream.backups import BackupSettings
from paystream.env import read_one
from paystream.launch import paystream_argv
from paystream.notify import intents
from paystream.schema.db import connect, database_url
from paystream.stack import backup, standby
from paystream.stack.process import pid_alive, read_pid
from paystream.stack.settings import StackSettings
from paystream.stack.targets import MetricsPortSettings
from tests.support.ids import unique
from tests.support.ingest import create_users, ingest_server, payment_body, payment_headers
from tests.support.waiting import wait_for

USERS = 20
PREFUND = Decimal(100000)
SENDERS = 4
RATE_PER_SENDER = 40  # requests a second each: ~160/s in all on a 2-core machine
RECOVERY_LIMIT_S = 30
# Traffic before each kill (the pipeline busy when it dies) and after the recovery
# (accepted on the new primary): short, the test runs in CI's budget.
TRAFFIC_BEFORE_KILL_S = 5
TRAFFIC_AFTER_RECOVERY_S = 3
RETRY_BUDGET_S = 120


@dataclass
class Sent:
    event_id: str
    user: str
    event_type: str
    amount: Decimal
    statuses: list[int | str] = field(default_factory=list)
    accepted_at: float | None = None


@dataclass
class Traffic:
    url: str
    users: list[str]
    stop: threading.Event = field(default_factory=threading.Event)
    sent: list[Sent] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def send(self, event_type: str, user: str, amount: Decimal, client: httpx.Client) -> Sent:
        """One event, retried as a provider does (same event id) until a 2xx."""
        one = Sent(unique("fo"), user, event_type, amount)
        with self.lock:
            self.sent.append(one)
        body = payment_body(one.event_id, user, str(amount), event_type)
        deadline = time.monotonic() + RETRY_BUDGET_S
        while time.monotonic() < deadline:
            try:
                code: int | str = client.post(self.url + "/webhooks/payments", content=body,
                                              headers=payment_headers(body), timeout=10
                                              ).status_code
            except httpx.HTTPError as exc:
                code = type(exc).__name__
            one.statuses.append(code)
            if isinstance(code, int) and 200 <= code < 300:
                one.accepted_at = time.monotonic()
                return one
            if isinstance(code, int) and code < 500:
                return one  # a refusal: asserted against below
            time.sleep(0.2)
        return one

    def run(self, seed: int) -> None:
        rng = random.Random(seed)
        with httpx.Client() as client:
            while not self.stop.is_set():
                started = time.monotonic()
                kind = "deposit" if rng.random() < 0.6 else "withdrawal"
                self.send(kind, rng.choice(self.users), Decimal(rng.randint(1, 9)), client)
                time.sleep(max(0.0, 1 / RATE_PER_SENDER - (time.monotonic() - started)))


def _db_status() -> dict[str, object]:
    done = subprocess.run(paystream_argv("db", "status", "--json"), capture_output=True,
                          text=True, timeout=60)
    status: dict[str, object] = json.loads(done.stdout)
    return status


def _primary_node() -> dict[str, object]:
    nodes = _db_status()["nodes"]
    assert isinstance(nodes, list)
    primaries = [n for n in nodes if n["role"] == "primary"]
    assert len(primaries) == 1, nodes
    primary: dict[str, object] = primaries[0]
    return primary


def _kill_postmaster(pid: int) -> None:
    """SIGKILL the postmaster and its children, as a crashed host leaves them."""
    children = [int(p) for p in os.listdir("/proc") if p.isdigit() and _ppid(int(p)) == pid]
    for victim in [pid, *children]:
        with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
            os.kill(victim, signal.SIGKILL)
    wait_for("the postmaster gone", lambda: not pid_alive(pid), timeout=10, interval=0.05)


def _kill_tree(root: int | None) -> None:
    """SIGKILL a process and every descendant."""
    assert root is not None, "the keeper is not running"
    tree, grown = {root}, True
    while grown:
        more = {int(p) for p in os.listdir("/proc") if p.isdigit() and _ppid(int(p)) in tree}
        grown = not more <= tree
        tree |= more
    for pid in tree:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _ppid(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def _statuses(event_ids: list[str]) -> dict[str, str]:
    conn = connect(database_url("ops"), connect_timeout=2)
    try:
        with conn, conn.cursor() as cur:
            cur.execute("SELECT event_id, status FROM event_status WHERE event_id = ANY(%s)",
                        (event_ids,))
            return dict(cur.fetchall())
    finally:
        conn.close()


def _applied(event_ids: list[str]) -> bool:
    try:
        found = _statuses(event_ids)
    except Exception:  # the database is failing over: not yet
        return False
    return len(found) == len(event_ids) and set(found.values()) == {"applied"}


@pytest.fixture
def standby_stack() -> StackSettings:
    s = StackSettings.from_env()
    if not s.standby:
        pytest.fail(f"the stack in {s.state_dir} has no standby: run `make test-cluster` "
                    "(its stack comes up with `paystream stack up --standby`)")
    cfg = standby.StandbySettings.from_env()
    wait_for("a primary with its synchronous standby", lambda: standby.settled(s, cfg),
             timeout=120, interval=0.5)
    return s


def test_primary_killed_under_traffic_fails_over_and_back(standby_stack):
    """Two rounds on the same traffic and books: the primary killed, the standby
    promoted, the old node rebuilt as the standby; then that new primary killed in turn,
    so the pipeline fails back to the first node. Every check after each round."""
    s = standby_stack
    users = [unique("fo-user") for _ in range(USERS)]
    create_users(users)
    ledger, notifier = (subprocess.Popen(paystream_argv("consume", group, "--metrics-port",
                                                        "0"), stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL)
                        for group in ("ledger", "notifier"))
    moved: list[Path] = []
    try:
        with ingest_server() as server:
            traffic = Traffic(server.url, users)
            with httpx.Client() as client:
                funded = [traffic.send("deposit", u, PREFUND, client) for u in users]
            wait_for("the prefunding applied", lambda: _applied([f.event_id for f in funded]),
                     timeout=120, interval=0.5)
            first = _fail_over_under_traffic(s, traffic, moved, "over")
            _archiving_from_the_new_primary()
            second = _fail_over_under_traffic(s, traffic, moved, "back")
        # Back where it began: the node killed first is the primary again.
        assert second["new"] == first["old"] != first["new"]
    finally:
        for process in (ledger, notifier):
            process.terminate()
            process.wait(timeout=30)
        for folder in moved:
            shutil.rmtree(folder, ignore_errors=True)


def _fail_over_under_traffic(s: StackSettings, traffic: Traffic, moved: list[Path],
                             label: str) -> dict[str, str]:
    """One round: signed traffic, the primary killed and its folder moved away, applying
    again within the limit, the books checked (everything sent so far), and the killed
    node back as the synchronous standby. The old and new primaries' names."""
    round_started = time.monotonic()
    traffic.stop = threading.Event()
    first_of_round = len(traffic.sent)
    threads = [threading.Thread(target=traffic.run, args=(n + first_of_round,))
               for n in range(SENDERS)]
    for t in threads:
        t.start()
    try:
        time.sleep(TRAFFIC_BEFORE_KILL_S)
        primary = _primary_node()
        killed_at = time.monotonic()
        _kill_postmaster(int(primary["pid"]))  # type: ignore[call-overload]
        folder = Path(f"{primary['data_dir']}.lost-{int(time.time())}")
        os.rename(str(primary["data_dir"]), folder)
        moved.append(folder)
        recovery_s = _wait_applying_again(traffic, killed_at)
        print(f"fail {label}: primary {primary['name']} :{primary['port']} killed; an "
              f"event accepted after the kill applied {recovery_s:.1f} s after it")
        time.sleep(TRAFFIC_AFTER_RECOVERY_S)
    finally:
        traffic.stop.set()
        for t in threads:
            t.join(timeout=RETRY_BUDGET_S + 30)
    checked_at = time.monotonic()
    _check_books(traffic, first_of_round)
    assert recovery_s <= RECOVERY_LIMIT_S
    new_primary = _primary_node()
    assert new_primary["name"] != primary["name"]
    _wait_rejoined(s)
    print(f"fail {label}: the round took {time.monotonic() - round_started:.1f} s, "
          f"{time.monotonic() - checked_at:.1f} s of it the checks and the rejoin")
    return {"old": str(primary["name"]), "new": str(new_primary["name"])}


def _archiving_from_the_new_primary() -> None:
    """pgBackRest after a failover: `check` finds the primary among the stanza's two
    nodes, switches its WAL and waits until the segment is in the repository, pushed by
    the new primary's archive_command (what a backup needs; 1-2 s, a backup ~15)."""
    started = time.monotonic()
    backup.pgbackrest(BackupSettings.from_env(), "check", timeout=120)
    print(f"pgbackrest check on the new primary: {time.monotonic() - started:.1f} s")


def _wait_applying_again(traffic: Traffic, killed_at: float) -> float:
    """Seconds from the kill until an event accepted after it is applied."""
    deadline = killed_at + 120
    while time.monotonic() < deadline:
        with traffic.lock:
            after = [x.event_id for x in traffic.sent
                     if x.accepted_at is not None and x.accepted_at > killed_at]
        if after and _applied(after[:1]):
            return time.monotonic() - killed_at
        time.sleep(0.2)
    raise AssertionError("nothing accepted after the kill was applied within 120 s")


def _check_books(traffic: Traffic, first_of_round: int) -> None:
    """Everything sent so far (every round); the 503s of this round's kill."""
    sent = traffic.sent
    refused = [(x.event_id, x.statuses) for x in sent
               if any(isinstance(c, int) and c < 500 and not 200 <= c < 300
                      for c in x.statuses)]
    assert refused == [], refused[:5]
    other_5xx = sorted({c for x in sent for c in x.statuses
                        if isinstance(c, int) and c >= 500 and c != 503})
    assert other_5xx == [], other_5xx
    unanswered = [x.event_id for x in sent if x.accepted_at is None]
    assert unanswered == [], f"{len(unanswered)} events never accepted"
    retried = sum(1 for x in sent[first_of_round:] if 503 in x.statuses)
    print(f"sent {len(sent) - first_of_round} events this round, {retried} answered 503 "
          "at least once, all accepted")
    assert retried > 0, "the kill made no request wait: no failover was under traffic"
    accepted = [x.event_id for x in sent]
    wait_for("every accepted event applied", lambda: _applied(accepted), timeout=120,
             interval=1)
    conn = connect(database_url("ops"))
    try:
        with conn, conn.cursor() as cur:
            cur.execute("SELECT source_event_id, count(*) FROM transfers"
                        " WHERE source_event_id = ANY(%s) GROUP BY 1", (accepted,))
            postings = dict(cur.fetchall())
            cur.execute("SELECT user_id, balance FROM balances WHERE user_id = ANY(%s)"
                        " AND asset = 'USD'", (traffic.users,))
            balances = dict(cur.fetchall())
    finally:
        conn.close()
    assert {e: n for e, n in postings.items() if n != 1} == {}
    assert set(postings) == set(accepted)
    oracle = {u: Decimal(0) for u in traffic.users}
    for x in sent:
        oracle[x.user] += x.amount if x.event_type == "deposit" else -x.amount
    assert {u: Decimal(b) for u, b in balances.items()} == oracle
    # The intents of the events the ledger applied, whichever side of the failover:
    # each recorded by the notifier (once: the intent id is its key).
    wanted = {intents.intent_id(x.event_id, _INTENT_OF[x.event_type]) for x in sent}
    wait_for("every intent recorded by the notifier",
             lambda: not wanted - _recorded_intents(list(wanted)), timeout=120, interval=1)
    done = subprocess.run(paystream_argv("reconcile"), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


_INTENT_OF = {"deposit": intents.IntentType.DEPOSIT_CREDITED,
              "withdrawal": intents.IntentType.WITHDRAWAL_APPLIED}


def _recorded_intents(intent_ids: list[str]) -> set[str]:
    conn = connect(database_url("ops"))
    try:
        with conn, conn.cursor() as cur:
            cur.execute("SELECT intent_id FROM notification_intents"
                        " WHERE intent_id = ANY(%s)", (intent_ids,))
            return {row[0] for row in cur.fetchall()}
    finally:
        conn.close()


def _wait_rejoined(s: StackSettings) -> None:
    """The old node is rebuilt by its keeper (pg_basebackup from the new primary) and
    streams again as the synchronous standby."""
    cfg = standby.StandbySettings.from_env()
    started = time.monotonic()
    wait_for("the old node back as the synchronous standby",
             lambda: standby.settled(s, cfg), timeout=180, interval=1)
    print(f"old node rejoined as the standby in {time.monotonic() - started:.1f} s")


def test_standby_killed_writes_go_on_and_it_comes_back(standby_stack):
    """The synchronous standby's postmaster SIGKILLed: pg_auto_failover drops the
    primary to asynchronous (wait_primary), so commits go on, on one disk, after a
    stall that is measured; the follower's gauge says no synchronous standby
    (PaystreamSyncStandbyMissing); the keeper restarts it and it catches up."""
    s = standby_stack
    users = [unique("sb-user") for _ in range(4)]
    create_users(users)
    with ingest_server() as server:
        traffic = Traffic(server.url, users)
        thread = threading.Thread(target=_deposits_only, args=(traffic,))
        thread.start()
        try:
            time.sleep(3)
            victim = _node_in_role("standby")
            name = str(victim["name"])
            killed_at = time.monotonic()
            # The host gone: its keeper with it (a keeper alone restarts its Postgres
            # in a second, before the monitor sees anything).
            _kill_tree(read_pid(standby.pid_file(s, name)))
            _kill_postmaster(int(victim["pid"]))  # type: ignore[call-overload]
            wait_for("no synchronous standby on the follower's gauge",
                     lambda: _gauge("paystream_pg_sync_standby_up") == 0, timeout=60,
                     interval=0.5)
            wait_for("writes accepted again", lambda: _accepted_after(traffic, killed_at),
                     timeout=60, interval=0.2)
            time.sleep(3)
            # It returns: its keeper started as `stack up` does.
            standby.ensure_keeper(s, standby.StandbySettings.from_env(),
                                  dict((n.name, n) for n in standby.nodes(s))[name])
        finally:
            traffic.stop.set()
            thread.join(timeout=RETRY_BUDGET_S + 30)
    stall = _longest_stall(traffic, killed_at)
    print(f"standby {victim['name']} killed: the longest wait between two accepted "
          f"commits after it was {stall:.1f} s; {len(traffic.sent)} events sent")
    assert [x.event_id for x in traffic.sent if x.accepted_at is None] == []
    accepted = [x.event_id for x in traffic.sent]
    assert len(_statuses(accepted)) == len(accepted)  # every accepted event stored
    assert stall < RECOVERY_LIMIT_S
    _wait_rejoined(s)
    wait_for("the follower's gauge back to 1",
             lambda: _gauge("paystream_pg_sync_standby_up") == 1, timeout=10, interval=0.5)


def _deposits_only(traffic: Traffic) -> None:
    with httpx.Client() as client:
        while not traffic.stop.is_set():
            traffic.send("deposit", random.choice(traffic.users), Decimal(1), client)
            time.sleep(1 / RATE_PER_SENDER)


def _node_in_role(role: str) -> dict[str, object]:
    nodes = _db_status()["nodes"]
    assert isinstance(nodes, list)
    found: list[dict[str, object]] = [n for n in nodes if n["role"] == role]
    assert len(found) == 1, nodes
    return found[0]


def _gauge(name: str) -> float | None:
    port = read_one(MetricsPortSettings, "failover")
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    except httpx.HTTPError:
        return None
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def _accepted_after(traffic: Traffic, moment: float) -> bool:
    with traffic.lock:
        return any(x.accepted_at is not None and x.accepted_at > moment for x in traffic.sent)


def _longest_stall(traffic: Traffic, since: float) -> float:
    """The longest time without an accepted event, from `since` to the last one."""
    times = sorted([since, *(x.accepted_at for x in traffic.sent
                             if x.accepted_at is not None and x.accepted_at > since)])
    return max(b - a for a, b in itertools.pairwise(times)) if len(times) > 1 \
        else float("inf")
