"""Finance closes the month: a statement built from a run's own traffic with injected
differences (a missing webhook, a wrong fee, an unknown refund, a payout that does not
sum) is reconciled with exactly those differences found and nothing else, and resolving
them leaves `paystream reconcile` clean.

The traffic is written by the ingest's own write (ingest/payments.py: parse_payment,
PaymentWrite) and applied by the real ledger handler (tests/support/ledger.py), as the
ledger would apply the outbox's records; so are the events `resolve` writes. The asset
is the test's own, so other tests' events in the shared stack are not this
statement's. The CLI runs in-process (paystream.cli.main): no interpreter start-ups.
"""

from __future__ import annotations

import csv
import json
import re
import uuid
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import pytest

from paystream.cli import main
from paystream.consumers.connection import Database
from paystream.ingest.payments import PaymentWrite, parse_payment
from paystream.schema.db import Connection
from paystream.schema.events import PaymentEvent, parse_wire
from tests.support.console import csrf_of, start_console
from tests.support.consumers import record_of, wire_message
from tests.support.ids import unique
from tests.support.ingest import known_user
from tests.support.ledger import ledger_apply

HEADER = ["id", "type", "amount", "fee", "net", "currency", "created", "available_on",
          "payout_id", "reference", "user_id", "reverses", "note"]


def deliver(db: Connection, ledger_db: Database, bodies: list[dict[str, str]],
            asset: str) -> None:
    """Webhook bodies written as the ingest writes them, then applied by the ledger."""
    events = [parse_payment(body, default_asset=asset) for body in bodies]
    with db.cursor() as cur:
        cur.execute("BEGIN")
        for event in events:
            assert PaymentWrite(event, uuid.uuid4().hex).write(cur).refused is None
        cur.execute("COMMIT")
    apply(ledger_db, events)


def apply(ledger_db: Database, events: list[PaymentEvent]) -> None:
    records = [record_of(wire_message(e), offset=i) for i, e in enumerate(events)]
    result = ledger_apply(ledger_db.connection(), records)
    assert result.outcomes.get("applied") == len(events), result


def stored(db: Connection, event_ids: list[str]) -> list[PaymentEvent]:
    with db.cursor() as cur:
        cur.execute("SELECT payload FROM payment_events WHERE event_id = ANY(%s)"
                    " ORDER BY received_at", (event_ids,))
        return [parse_wire(row[0]) for row in cur.fetchall()]


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out + out.err


def line(line_id: str, kind: str, amount: str, fee: str, asset: str, created: str,
         payout: str, reference: str = "", user: str = "", reverses: str = "",
         note: str = "") -> list[str]:
    net = Decimal(amount) - Decimal(fee)
    return [line_id, kind, amount, fee, str(net), asset, created, "", payout, reference,
            user, reverses, note]


def test_a_statement_with_injected_differences_finds_them_and_resolving_them_is_clean(
        db: Connection, ledger_db: Database, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    asset = "ST" + uuid.uuid4().hex[:8].upper()
    alice, bob = known_user("stmt-a"), known_user("stmt-b")
    ids = {k: unique(f"stmt-{k}") for k in ("d1", "d2", "d3", "d4", "r1", "r2")}
    # The run's traffic: d4's webhook never arrives; r2 is a refund we never hear of.
    deliver(db, ledger_db, [
        {"event_id": ids["d1"], "event_type": "deposit", "user_id": alice, "amount": "100"},
        {"event_id": ids["d2"], "event_type": "deposit", "user_id": alice, "amount": "40"},
        {"event_id": ids["d3"], "event_type": "deposit", "user_id": bob, "amount": "25"}],
        asset)
    deliver(db, ledger_db, [{"event_id": ids["r1"], "event_type": "refund",
                             "user_id": alice, "amount": "10", "reverses": ids["d2"]}], asset)
    with db.cursor() as cur:
        cur.execute("SELECT event_id, received_at FROM payment_events WHERE event_id = ANY(%s)",
                    (list(ids.values()),))
        at = {k: v.isoformat() for k, v in cur.fetchall()}
    later = max(at.values())
    tag = uuid.uuid4().hex[:8]  # line ids are the provider's: unique across statements

    def n(name: str) -> str:
        return f"{name}_{tag}"

    rows = [
        line(n("txn_d1"), "payment", "100", "3.20", asset, at[ids["d1"]], n("po_a"), ids["d1"],
             note='a "quoted", note'),
        line(n("txn_d2"), "payment", "40", "1.46", asset, at[ids["d2"]], n("po_a"), ids["d2"]),
        line(n("txn_r1"), "refund", "-10", "0", asset, at[ids["r1"]], n("po_a"), ids["r1"]),
        line(n("po_a"), "payout", "-125.34", "0", asset, later, n("po_a")),
        # The wrong fee: the contract's is 2.9 % + 0.30 = 1.025.
        line(n("txn_d3"), "payment", "25", "5.00", asset, at[ids["d3"]], n("po_b"), ids["d3"]),
        line(n("txn_d4"), "payment", "60", "2.04", asset, later, n("po_b"), ids["d4"], user=bob),
        line(n("txn_r2"), "refund", "-5", "0", asset, later, n("po_b"), ids["r2"],
             reverses=ids["d1"]),
        # Lines net 20 + 57.96 - 5 = 72.96; it pays 0.50 less.
        line(n("po_b"), "payout", "-72.46", "0", asset, later, n("po_b")),
    ]
    path = tmp_path / "statement.csv"
    with path.open("w", newline="") as f:
        csv.writer(f).writerows([HEADER, *rows])

    before = unresolved_in_health(capsys)
    code, out = cli(capsys, "statements", "import", "--provider", "payments", str(path))
    assert code == 0, out
    assert unresolved_in_health(capsys) == before + 4  # the health check counts them
    statement_id = re.search(r"statements import: statement (\d+),", out)[1]  # type: ignore[index]
    code, out = cli(capsys, "statements", "show", statement_id)
    assert code == 1, out
    cells = [text.split() for text in out.splitlines()]
    found = {c[0]: c[1] for c in cells if c and c[0] in {r[0] for r in rows}}
    assert found == {n("txn_d3"): "fee_mismatch", n("txn_d4"): "missing_in_books",
                     n("txn_r2"): "missing_in_books", n("po_b"): "amount_mismatch"}, out
    assert "4 matched" in out and "missing_at_provider" not in out, out
    with db.cursor() as cur:
        cur.execute("SELECT extra->>'note' FROM statement_lines WHERE statement_id = %s"
                    " AND line_id = %s", (int(statement_id), n("txn_d1")))
        assert cur.fetchone() == ('a "quoted", note',)  # extra columns kept as they were

    # A malformed line is named, and nothing of its file is imported.
    bad = tmp_path / "bad.csv"
    bad.write_text(path.read_text().replace(",-10,0,-10,", ",-10,0,-1O,"))
    code, out = cli(capsys, "statements", "import", "--provider", "payments", str(bad))
    assert code == 2 and "line 4: net '-1O' is not a decimal amount" in out, out
    with db.cursor() as cur:
        cur.execute("SELECT count(*) FROM statements WHERE file_name = 'bad.csv'")
        assert cur.fetchone() == (0,)
    # The same file again changes nothing.
    code, out = cli(capsys, "statements", "import", "--provider", "payments", str(path))
    assert code == 0 and f"is statement {statement_id} already" in out, out

    resolve(db, ledger_db, capsys, statement_id, ids, n)
    code, out = cli(capsys, "statements", "show", statement_id)
    assert code == 0 and "0 unresolved" in out, out
    assert unresolved_in_health(capsys) == before
    exported(capsys, tmp_path, {r[0] for r in rows}, ids["d1"], n)
    code, out = cli(capsys, "reconcile", "--user", alice, "--user", bob)
    assert code == 0 and out.startswith("reconcile: ok"), out
    with db.cursor() as cur:
        cur.execute("SELECT user_id, balance FROM balances WHERE asset = %s ORDER BY user_id",
                    (asset,))
        # alice 100 + 40 - 10 - 5; bob 25 + 60 - (5.00 - 1.025) charged back to him.
        assert dict(cur.fetchall()) == {alice: Decimal(125), bob: Decimal("81.025")}


def resolve(db: Connection, ledger_db: Database, capsys: pytest.CaptureFixture[str],
            statement_id: str, ids: dict[str, str], n: Callable[[str], str]) -> None:
    """Each difference resolved as docs/statements.md says; the events applied."""
    for target in (n("txn_d4"), n("txn_r2")):
        code, out = cli(capsys, "statements", "resolve", statement_id, target,
                        "--reason", "settled by the provider, webhook lost", "--actor", "ana")
        assert code == 0 and "record_event done" in out, out
    apply(ledger_db, stored(db, [ids["d4"], ids["r2"]]))
    code, out = cli(capsys, "statements", "resolve", statement_id, n("po_b"), "--reason",
                    "claim 0.50 opened with the provider", "--actor", "ana")
    assert code == 0 and "acknowledge done" in out, out
    code, out = cli(capsys, "statements", "resolve", statement_id, n("txn_d3"), "--reason",
                    "fee above contract, passed on", "--actor", "ana")
    assert code == 0 and "adjust_fee proposed" in out, out
    decision = re.search(r"decision (\d+): adjust_fee proposed", out)[1]  # type: ignore[index]
    code, out = cli(capsys, "statements", "approve", decision, "--reason", "ok",
                    "--actor", "ana")
    assert code == 1 and "another person approves" in out, out  # four eyes
    approve_in_console(statement_id, decision)
    with db.cursor() as cur:
        cur.execute("SELECT event_id, event_type, amount FROM payment_events WHERE event_id"
                    " = %s", (f"op:adjust:statement-fee:{statement_id}:{n('txn_d3')}",))
        adjustment = cur.fetchone()
    assert adjustment is not None and adjustment[1:] == ("adjustment_debit", Decimal("3.975"))
    apply(ledger_db, stored(db, [adjustment[0]]))
    with db.cursor() as cur:
        cur.execute("SELECT d.action, d.state, d.actor FROM statement_decisions d"
                    " JOIN statement_matches k USING (match_id) WHERE k.statement_id = %s"
                    " ORDER BY d.decision_id", (int(statement_id),))
        decided = cur.fetchall()
    assert decided[:4] == [("record_event", "done", "ana"), ("record_event", "done", "ana"),
                           ("acknowledge", "done", "ana"), ("adjust_fee", "proposed", "ana")]
    # The approver is the console's key (its id and name), never the proposer.
    assert decided[4][:2] == ("adjust_fee", "done") and "(stmt-approver)" in decided[4][2]


def unresolved_in_health(capsys: pytest.CaptureFixture[str]) -> int:
    """The unresolved differences `paystream health --check statements` counts."""
    _, out = cli(capsys, "health", "--check", "statements", "--json")  # warns past a day
    (check,) = json.loads(out)
    return int(re.search(r"\((\d+) unresolved\)", check["value"])[1])  # type: ignore[index]


def exported(capsys: pytest.CaptureFixture[str], tmp_path: Path, line_ids: set[str],
             first: str, n: Callable[[str], str]) -> None:
    """`paystream export statements` as Parquet: every line, typed, with its result and
    the event it matched (a line matched by its reference has no result row)."""
    import pyarrow.parquet as pq

    out = tmp_path / "lines.parquet"
    code, text = cli(capsys, "export", "statements", "--from", "2000-01-01", "--to",
                     "2100-01-01", "--format", "parquet", "--output", str(out))
    assert code == 0, text
    table = pq.read_table(out)
    ours = {r["line_id"]: r for r in table.to_pylist() if r["line_id"] in line_ids}
    assert set(ours) == line_ids
    assert ours[n("txn_d1")]["amount"] == Decimal("100") and ours[n("txn_d1")][
        "event_id"] == first and ours[n("txn_d1")]["result"] == "matched"
    assert ours[n("txn_d3")]["result"] == "fee_mismatch"
    assert ours[n("txn_r1")]["net"] == Decimal("-10")


def approve_in_console(statement_id: str, decision: str) -> None:
    """The proposed fee adjustment approved on the statement's console page."""
    server = start_console("stmt-approver")
    try:
        http = server.login()
        page = http.get(f"{server.url}/statements/{statement_id}", timeout=10)
        action = f"/statements/{statement_id}/decisions/{decision}/approve"
        assert page.status_code == 200 and action in page.text, page.text[-2000:]
        done = http.post(server.url + action, data={"csrf": csrf_of(page.text),
                                                    "reason": "contract checked"}, timeout=10)
        assert done.status_code == 200 and "approved: adjustment op:adjust:" in done.text
    finally:
        server.stop()
