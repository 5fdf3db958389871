"""The database roles (docs/configuration.md#database-roles): the grants as the database
itself reports them, and real connections as each role refused what it must not do.

The matrix below is the whole truth for every login role: each (table, privilege) a role
holds, by column where a grant is column-level. Every other combination must be denied,
so a grant added in a migration without this table fails here, and so does one lost.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator

import psycopg2
import psycopg2.errors
import pytest

from paystream.launch import paystream_argv
from paystream.schema.db import ROLE_NAMES, Connection, DbRole, connect, database_url
from tests.support.consumers import create_topic, produce
from tests.support.ingest import ingest_server

ALL = "*"  # every column
NOTIFY_TABLES = ("notification_endpoints", "notification_intents", "notification_deliveries",
                 "notification_attempts", "notification_reminders")
STATEMENT_TABLES = ("statements", "statement_lines", "statement_matches", "statement_decisions")
LOGIN_ROLES: tuple[DbRole, ...] = ("ingest", "ledger", "mirror", "finality", "ops", "cdc",
                                   "api", "notifier")
TABLES = ("users", "balances", "deposit_addresses", "payment_events", "event_status", "outbox",
          "processed_events", "accounts", "transfers", "postings", "user_entries",
          "dead_letter_queue", "debezium_heartbeat", "ingest_notices", "chain_deposits",
          "account_shortfalls", "holds", "event_reversals", "schema_migrations",
          "api_keys", "api_withdrawals", "api_idempotency", *NOTIFY_TABLES,
          "refused_deliveries", "consumer_stops", "chain_scan_cursors",
          "chain_scan_backfills", "console_keys", "console_sessions", "operator_actions",
          *STATEMENT_TABLES, "merchants", "endpoint_actions")
COLUMN_PRIVILEGES = ("SELECT", "INSERT", "UPDATE")
TABLE_PRIVILEGES = ("DELETE", "TRUNCATE", "REFERENCES", "TRIGGER")

# role -> table -> privilege -> columns (ALL, or the column names of a column grant)
Grants = dict[str, dict[str, object]]
EXPECTED: dict[DbRole, Grants] = {
    "ingest": {
        "payment_events": {"SELECT": ALL, "INSERT": ALL},
        "event_status": {"INSERT": ALL},  # an event's `received` row, with the event (0030)
        "ingest_notices": {"SELECT": ALL, "INSERT": ALL},
        "deposit_addresses": {"SELECT": ALL},
        "outbox": {"SELECT": ALL, "INSERT": ALL, "DELETE": ALL},
        # Refused at the door (0021): whether the user exists, and the refusal's record.
        "users": {"SELECT": {"user_id"}},
        "refused_deliveries": {"SELECT": ALL, "INSERT": ALL,
                               "UPDATE": {"user_id", "detail", "trace_id", "event",
                                          "last_refused_at", "attempts"}},
    },
    "ledger": {
        "users": {"SELECT": ALL},
        "balances": {"SELECT": ALL, "INSERT": {"user_id", "asset"},
                     "UPDATE": {"balance", "pending", "held", "updated_at"}},
        # payment_events is insert-only: the status moved to event_status (0030).
        "payment_events": {"SELECT": ALL},
        "event_status": {"SELECT": ALL, "UPDATE": {"status", "status_changed_at"}},
        "accounts": {"SELECT": ALL, "INSERT": {"kind", "owner", "asset"}},
        "transfers": {"SELECT": ALL, "INSERT": ALL},
        "postings": {"SELECT": ALL, "INSERT": ALL},
        "processed_events": {"SELECT": ALL, "INSERT": ALL, "UPDATE": {"outcome"}},
        "chain_deposits": {"SELECT": ALL, "INSERT": ALL,
                           "UPDATE": {"state", "credited_at", "settled_at",
                                      "final_block_number", "final_block_hash",
                                      "final_log_index", "verdict_reason"}},
        "account_shortfalls": {"SELECT": ALL, "INSERT": ALL},
        "holds": {"SELECT": ALL, "INSERT": ALL,
                  "UPDATE": {"state", "closed_by", "settled_amount", "settled_fee",
                             "closed_at"}},
        "event_reversals": {"SELECT": ALL, "INSERT": ALL},
        "outbox": {"SELECT": ALL, "INSERT": ALL, "DELETE": ALL},
        "consumer_stops": {"SELECT": ALL, "INSERT": ALL},  # its group's stop (0022)
    },
    "mirror": {
        "consumer_stops": {"SELECT": ALL, "INSERT": ALL},
        "dead_letter_queue": {"SELECT": ALL, "INSERT": ALL,
                              "UPDATE": {"attempts", "error_reason", "error_detail",
                                         "last_seen_at", "provider"}},
        "payment_events": {"SELECT": ALL},
        "event_status": {"SELECT": ALL, "UPDATE": {"status", "status_changed_at"}},
    },
    "finality": {
        "chain_deposits": {"SELECT": ALL,
                           "UPDATE": {"state", "decided_at", "transfer_key", "verdict_reason",
                                      "final_block_number", "final_block_hash",
                                      "final_log_index", "missing_since_block",
                                      "suspect_reason", "settlement"}},
        "ingest_notices": {"SELECT": ALL},
        "outbox": {"SELECT": ALL, "INSERT": ALL, "DELETE": ALL},
        # The chain scanner (0023): records deposits as the ingest does, moves its cursor.
        "payment_events": {"SELECT": ALL, "INSERT": ALL},
        "event_status": {"INSERT": ALL},
        "deposit_addresses": {"SELECT": ALL},
        "chain_scan_cursors": {"SELECT": ALL, "INSERT": ALL,
                               "UPDATE": {"block_number", "block_hash", "updated_at"}},
        # ... and works the backfills the operator and the API request (0024).
        "chain_scan_backfills": {"SELECT": ALL,
                                 "UPDATE": {"up_to_block", "next_block", "done_at"}},
    },
    "notifier": {
        "consumer_stops": {"SELECT": ALL, "INSERT": ALL},
        "notification_endpoints": {"SELECT": ALL,
                                   "UPDATE": {"failing_since", "disabled_at",
                                              "disabled_reason"}},
        "notification_intents": {"SELECT": ALL, "INSERT": ALL},
        "notification_deliveries": {"SELECT": ALL, "INSERT": ALL,
                                    "UPDATE": {"state", "attempts", "next_attempt_at",
                                               "claimed_until", "claim_id", "last_status",
                                               "last_error", "delivered_at"}},
        "notification_attempts": {"SELECT": ALL, "INSERT": ALL},
        "notification_reminders": {"SELECT": ALL, "INSERT": ALL},
        # A merchant's endpoints hear of its own users only (0033); one disabled for
        # failing is recorded (0035).
        "users": {"SELECT": {"user_id", "merchant_id"}},
        "endpoint_actions": {"SELECT": ALL, "INSERT": ALL},
        "account_shortfalls": {"SELECT": {"id", "user_id", "asset", "source_event_id",
                                          "amount", "created_at", "resolved_at"}},
        "chain_deposits": {"SELECT": {"event_id", "network", "user_id", "asset", "amount",
                                      "state", "recorded_at"}},
        "holds": {"SELECT": {"hold_id", "user_id", "asset", "amount", "state",
                             "expires_at"}},
    },
    "ops": {
        **{t: {"SELECT": ALL} for t in TABLES},
        # Never the secrets: written on add (rotation goes through the owner's
        # rotate_notification_secret), never read back.
        "notification_endpoints": {
            "SELECT": {"endpoint_id", "url", "user_id", "event_types",
                       "previous_secret_until", "created_at", "failing_since", "disabled_at",
                       "disabled_reason", "merchant_id", "description", "deleted_at"},
            "INSERT": {"endpoint_id", "url", "user_id", "event_types", "secret",
                       "merchant_id"},
            "UPDATE": {"failing_since", "disabled_at", "disabled_reason"}},
        # notifications redeliver / recover; housekeeping forgets what is done (0015).
        "notification_deliveries": {"SELECT": ALL, "INSERT": {"intent_id", "endpoint_id"},
                                    "UPDATE": {"state", "attempts", "next_attempt_at"},
                                    "DELETE": ALL},
        "notification_intents": {"SELECT": ALL, "DELETE": ALL},
        "notification_attempts": {"SELECT": ALL, "DELETE": ALL},
        "users": {"SELECT": ALL, "INSERT": ALL},
        "merchants": {"SELECT": ALL, "INSERT": ALL},  # paystream merchants add (0033)
        "endpoint_actions": {"SELECT": ALL, "INSERT": ALL},  # what an operator did (0035)
        "deposit_addresses": {"SELECT": ALL, "INSERT": ALL},
        "processed_events": {"SELECT": ALL, "DELETE": ALL, "UPDATE": {"processed_at"}},
        # replay, and discard with its reason (0029).
        "dead_letter_queue": {"SELECT": ALL,
                              "UPDATE": {"status", "last_seen_at", "discard_reason"}},
        "consumer_stops": {"SELECT": ALL, "DELETE": ALL},  # consume resume GROUP
        # housekeeping forgets refusals not retried within its TTL (0031); `statements
        # resolve` writes through the ingest's own write, which records a refusal (0032).
        "refused_deliveries": {"SELECT": ALL, "DELETE": ALL, "INSERT": ALL,
                               "UPDATE": {"attempts", "last_refused_at", "user_id",
                                          "detail", "trace_id", "event"}},
        # Statements: imported, matched (a re-match replaces undecided results) and
        # decided by the operator (0032).
        **{t: {"SELECT": ALL, "INSERT": ALL} for t in STATEMENT_TABLES},
        "statement_matches": {"SELECT": ALL, "INSERT": ALL, "DELETE": ALL},
        # The operator's adjust / revert and the hold expiry scheduler record events.
        "payment_events": {"SELECT": ALL, "INSERT": ALL},
        # ... and a DLQ replay moves the event's status back to received.
        "event_status": {"SELECT": ALL, "INSERT": ALL,
                         "UPDATE": {"status", "status_changed_at"}},
        "outbox": {"SELECT": ALL, "INSERT": ALL, "DELETE": ALL},
        "account_shortfalls": {"SELECT": ALL, "UPDATE": {"resolved_at", "resolution"}},
        "holds": {"SELECT": ALL, "UPDATE": {"state"}},
        # `paystream apikeys create / list / revoke`.
        "api_keys": {"SELECT": ALL, "INSERT": ALL, "UPDATE": {"revoked_at"}},
        # `addresses add --scan-from` (0024).
        "chain_scan_backfills": {"SELECT": ALL, "INSERT": ALL},
        # The operator console (0029): its keys and sessions, the audit record (inserted
        # only: nobody rewrites what an operator did).
        "console_keys": {"SELECT": ALL, "INSERT": ALL, "UPDATE": {"revoked_at"}},
        "console_sessions": {"SELECT": ALL, "INSERT": ALL, "UPDATE": {"ended_at"}},
        "operator_actions": {"SELECT": ALL, "INSERT": ALL},
    },
    # The merchant API (migration 0010): reads what it reports, creates users and
    # addresses, requests withdrawals through the outbox with its own two tables.
    "api": {
        **{t: {"SELECT": ALL} for t in (
            "balances", "processed_events", "holds", "accounts", "transfers", "postings",
            "user_entries", "merchants")},
        # Each key's last use, written once a minute (api/key_use.py, 0033).
        "api_keys": {"SELECT": ALL, "UPDATE": {"last_used_at"}},
        # The merchant's own endpoints, their log, redeliveries and tests (0035).
        "notification_endpoints": {
            "SELECT": ALL,
            "INSERT": {"endpoint_id", "url", "event_types", "secret", "merchant_id",
                       "description"},
            "UPDATE": {"url", "event_types", "description", "disabled_at",
                       "disabled_reason", "failing_since", "deleted_at"}},
        "notification_intents": {"SELECT": ALL, "INSERT": ALL},
        "notification_deliveries": {"SELECT": ALL, "INSERT": {"intent_id", "endpoint_id"},
                                    "UPDATE": {"state", "attempts", "next_attempt_at"}},
        "notification_attempts": {"SELECT": ALL},
        "endpoint_actions": {"SELECT": ALL, "INSERT": ALL},
        "users": {"SELECT": ALL, "INSERT": ALL},
        "deposit_addresses": {"SELECT": ALL, "INSERT": ALL},
        "chain_scan_backfills": {"SELECT": ALL, "INSERT": ALL},  # scan_from_block (0024)
        "payment_events": {"SELECT": ALL, "INSERT": ALL},
        "event_status": {"SELECT": ALL, "INSERT": ALL},
        "outbox": {"SELECT": ALL, "INSERT": ALL, "DELETE": ALL},
        "api_withdrawals": {"SELECT": ALL, "INSERT": ALL},
        "api_idempotency": {"SELECT": ALL, "INSERT": ALL},
    },
    "cdc": {
        "outbox": {"SELECT": ALL},
        "debezium_heartbeat": {"SELECT": ALL, "INSERT": ALL, "UPDATE": {"last_beat"}},
    },
}
SEQUENCES = ("transfers_transfer_id_seq", "accounts_account_id_seq",
             "dead_letter_queue_id_seq", "account_shortfalls_id_seq",
             "chain_scan_backfills_backfill_id_seq", "notification_attempts_row_id_seq")
EXPECTED_SEQUENCES: dict[DbRole, set[str]] = {
    # accounts' ids are an identity column: inserting needs no right on its sequence.
    "ledger": {"transfers_transfer_id_seq", "account_shortfalls_id_seq"},
    "mirror": {"dead_letter_queue_id_seq"},
    # notification_attempts' ids since it is partitioned (0039): a default, not identity.
    "notifier": {"notification_attempts_row_id_seq"},
    "ops": {"chain_scan_backfills_backfill_id_seq"},
    "api": {"chain_scan_backfills_backfill_id_seq"},
}


def _columns(db: Connection, table: str) -> list[str]:
    with db.cursor() as cur:
        cur.execute("SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass"
                    " AND attnum > 0 AND NOT attisdropped ORDER BY attnum", (table,))
        return [row[0] for row in cur.fetchall()]


def _expected(role: DbRole, table: str, privilege: str, column: str | None) -> bool:
    held = EXPECTED.get(role, {}).get(table, {})
    assert isinstance(held, dict)
    columns = held.get(privilege)
    if columns is None:
        return False
    return columns == ALL or (column is not None and column in columns)  # type: ignore


def test_every_login_role_holds_exactly_its_grants(db: Connection) -> None:
    wrong: list[str] = []
    with db.cursor() as cur:
        for role in LOGIN_ROLES:
            name = ROLE_NAMES[role]
            for table in TABLES:
                for column in _columns(db, table):
                    for privilege in COLUMN_PRIVILEGES:
                        cur.execute("SELECT has_column_privilege(%s, %s, %s, %s)",
                                    (name, table, column, privilege))
                        actual = cur.fetchone()[0]
                        if actual != _expected(role, table, privilege, column):
                            wrong.append(f"{name} {privilege} {table}.{column}: {actual}")
                for privilege in TABLE_PRIVILEGES:
                    cur.execute("SELECT has_table_privilege(%s, %s, %s)",
                                (name, table, privilege))
                    actual = cur.fetchone()[0]
                    if actual != _expected(role, table, privilege, None):
                        wrong.append(f"{name} {privilege} {table}: {actual}")
            for sequence in SEQUENCES:
                cur.execute("SELECT has_sequence_privilege(%s, %s, 'USAGE'),"
                            " has_sequence_privilege(%s, %s, 'UPDATE')",
                            (name, sequence, name, sequence))
                usage, update = cur.fetchone()
                if usage != (sequence in EXPECTED_SEQUENCES.get(role, set())) or update:
                    wrong.append(f"{name} sequence {sequence}: usage {usage} update {update}")
            cur.execute("SELECT has_database_privilege(%s, current_database(), 'CONNECT'),"
                        " has_database_privilege(%s, current_database(), 'TEMPORARY'),"
                        " has_database_privilege(%s, current_database(), 'CREATE'),"
                        " has_schema_privilege(%s, 'public', 'CREATE')",
                        (name, name, name, name))
            can_connect, temporary, create, create_in_public = cur.fetchone()
            # Only the operator's statement import stages in a temporary table (0032).
            if (not can_connect or temporary != (role == "ops") or create
                    or create_in_public):
                wrong.append(f"{name} database: connect {can_connect} temporary {temporary}"
                             f" create {create} create in public {create_in_public}")
    assert not wrong, "grants differ from the matrix:\n" + "\n".join(wrong)


def test_role_attributes_only_cdc_replicates_and_none_is_superuser(db: Connection) -> None:
    with db.cursor() as cur:
        cur.execute("SELECT rolname, rolsuper, rolcreatedb, rolcreaterole, rolreplication,"
                    " rolcanlogin, rolbypassrls FROM pg_roles WHERE rolname = ANY(%s)",
                    (list(ROLE_NAMES.values()),))
        roles = {row[0]: row[1:] for row in cur.fetchall()}
        assert set(roles) == set(ROLE_NAMES.values())
        for role, name in ROLE_NAMES.items():
            assert roles[name] == (False, False, False, role == "cdc", True, False), name
        # Nobody else with a login may replicate or is superuser, but the cluster's own.
        cur.execute("SELECT rolname FROM pg_roles WHERE rolcanlogin"
                    " AND (rolsuper OR rolreplication) AND rolname <> 'postgres'")
        assert [row[0] for row in cur.fetchall()] == [ROLE_NAMES["cdc"]]
        # The owner owns the database and every table.
        cur.execute("SELECT pg_get_userbyid(datdba) FROM pg_database"
                    " WHERE datname = current_database()")
        assert cur.fetchone()[0] == ROLE_NAMES["owner"]
        cur.execute("SELECT DISTINCT tableowner FROM pg_tables WHERE schemaname = 'public'")
        assert [row[0] for row in cur.fetchall()] == [ROLE_NAMES["owner"]]


@pytest.fixture
def as_role() -> Iterator[object]:
    opened: list[Connection] = []

    def open_as(role: DbRole) -> Connection:
        conn = connect(database_url(role), application_name=f"paystream-test-{role}")
        opened.append(conn)
        return conn

    yield open_as
    for conn in opened:
        conn.close()


REFUSED = [
    ("ingest", "UPDATE balances SET balance = balance + 1"),
    ("ingest", "SELECT pg_drop_replication_slot('paystream_no_such_slot')"),
    ("ingest", "SELECT * FROM balances"),
    ("ingest", "UPDATE event_status SET status = 'applied' WHERE false"),
    ("ingest", "SELECT * FROM event_status"),
    # Nobody updates payment_events: its status is event_status's (0030).
    *((role, "UPDATE payment_events SET trace_id = 'x' WHERE false")
      for role in ("ledger", "mirror", "ops", "ingest", "api", "finality")),
    ("ledger", "INSERT INTO event_status (event_id) VALUES ('x')"),
    ("finality", "UPDATE event_status SET status = 'applied' WHERE false"),
    ("cdc", "SELECT * FROM balances"),
    ("cdc", "SELECT * FROM payment_events"),
    ("cdc", "INSERT INTO outbox (id, aggregatetype, aggregateid, type, event_id, payload,"
            " trace_id) VALUES (gen_random_uuid(), 'a', 'a', 'a', 'a', '{}', 'a')"),
    ("ops", "INSERT INTO postings (transfer_id, account_id, asset, amount)"
            " VALUES (1, 1, 'USD', 1)"),
    ("ops", "INSERT INTO accounts (kind, owner, asset) VALUES ('fees', 'platform', 'X')"),
    ("ops", "UPDATE balances SET balance = 0 WHERE false"),
    ("ops", "DELETE FROM dead_letter_queue WHERE false"),
    # The console's audit record is never rewritten, not even by the operator.
    ("ops", "UPDATE operator_actions SET detail = '' WHERE false"),
    ("ops", "DELETE FROM operator_actions WHERE false"),
    ("api", "SELECT * FROM console_keys"),
    ("mirror", "UPDATE balances SET balance = 0 WHERE false"),
    ("finality", "INSERT INTO chain_deposits (event_id) VALUES ('x')"),
    ("finality", "UPDATE chain_deposits SET amount = 1 WHERE false"),
    ("ledger", "DELETE FROM processed_events WHERE false"),
    ("ledger", "DELETE FROM postings WHERE false"),
    ("ledger", "UPDATE postings SET amount = 1 WHERE false"),
    ("ledger", "UPDATE accounts SET owner = 'x' WHERE false"),
    ("ledger", "TRUNCATE dead_letter_queue"),
    ("ledger", "CREATE TABLE paystream_test_not_allowed (x int)"),
    ("ledger", "DROP TABLE balances"),
    ("api", "UPDATE balances SET balance = balance + 1 WHERE false"),
    ("api", "INSERT INTO postings (transfer_id, account_id, asset, amount)"
            " VALUES (1, 1, 'USD', 1)"),
    ("api", "UPDATE event_status SET status = 'applied' WHERE false"),
    ("api", "UPDATE api_keys SET revoked_at = NULL WHERE false"),
    ("api", "INSERT INTO api_keys (key_id, name, key_hash, scopes) VALUES"
            " ('ak_0000000000000000', 'x', repeat('0', 64), '{read}')"),
    ("api", "UPDATE api_idempotency SET response = '{}' WHERE false"),
    ("api", "SELECT * FROM dead_letter_queue"),
    ("api", "SELECT * FROM chain_deposits"),
    # The signing keys: only the notifier reads them; nobody else reads them either.
    ("ops", "SELECT secret FROM notification_endpoints"),
    ("ops", "SELECT previous_secret FROM notification_endpoints"),
    ("ops", "UPDATE notification_endpoints SET url = 'http://x' WHERE false"),
    ("ledger", "SELECT * FROM notification_endpoints"),
    ("ingest", "SELECT * FROM notification_endpoints"),
    ("notifier", "UPDATE notification_endpoints SET secret = 'x' WHERE false"),
    ("notifier", "SELECT * FROM balances"),
    ("notifier", "DELETE FROM notification_deliveries WHERE false"),
    ("notifier", "UPDATE notification_intents SET data = '{}' WHERE false"),
    ("mirror", "SELECT rotate_notification_secret('ep_x', 'x', '1 hour')"),
    # Creating and dropping attempts' partitions: the operator's housekeeping only (0039).
    ("notifier", "SELECT notification_attempts_partitions(0, NULL)"),
    ("api", "SELECT notification_attempts_partitions(0, NULL)"),
]


def test_only_the_api_may_call_its_key_lookup_and_balances_read(db: Connection) -> None:
    # Migration 0012's functions; SECURITY INVOKER besides, so a role that could call
    # one still could not read api_keys through it.
    with db.cursor() as cur:
        for role in LOGIN_ROLES:
            for function in ("api_live_key(text)", "api_balances(text, text)"):
                cur.execute("SELECT has_function_privilege(%s, %s, 'EXECUTE')",
                            (ROLE_NAMES[role], function))
                assert cur.fetchone()[0] == (role == "api"), (role, function)
        cur.execute("SELECT bool_or(prosecdef) FROM pg_proc"
                    " WHERE proname IN ('api_live_key', 'api_balances')")
        assert cur.fetchone()[0] is False


@pytest.mark.parametrize(("role", "sql"), REFUSED)
def test_a_role_is_refused_what_it_was_not_granted(as_role, role: DbRole, sql: str) -> None:
    conn = as_role(role)
    with conn.cursor() as cur:
        cur.execute("SELECT current_user")
        assert cur.fetchone()[0] == ROLE_NAMES[role]
        with pytest.raises(psycopg2.errors.InsufficientPrivilege):
            cur.execute(sql)
    conn.rollback()


def test_no_role_but_the_operator_may_create_a_temporary_table(as_role) -> None:
    # The operator's statement import COPYs into one first (statements/importer.py).
    for role in ("ledger", "ingest", "api", "notifier"):
        conn = as_role(role)
        with conn.cursor() as cur, pytest.raises(psycopg2.errors.InsufficientPrivilege):
            cur.execute("CREATE TEMPORARY TABLE paystream_test_staging (x int)")
        conn.rollback()


def test_dsns_carry_no_password_and_each_role_logs_in_with_the_passfile() -> None:
    for role in (*LOGIN_ROLES, "owner"):
        dsn = database_url(role)
        assert "passfile=" in dsn and ":" not in dsn.split("//", 1)[1].split("@", 1)[0]
        conn = connect(dsn)
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT current_user")
                assert cur.fetchone()[0] == ROLE_NAMES[role]
        finally:
            conn.close()


def _users_of(db: Connection, application_name: str) -> set[str]:
    with db.cursor() as cur:
        cur.execute("SELECT DISTINCT usename FROM pg_stat_activity"
                    " WHERE application_name = %s", (application_name,))
        return {row[0] for row in cur.fetchall()}


def test_components_started_as_in_production_log_in_as_their_own_roles(db, tmp_path) -> None:
    with ingest_server() as srv:
        import httpx
        assert httpx.get(srv.admin_url + "/readyz").status_code == 200
        assert _users_of(db, "paystream-ingest") == {"paystream_ingest"}
    for kind, role in (("ledger", "paystream_ledger"), ("dlq-mirror", "paystream_mirror"),
                       ("notifier", "paystream_notifier")):
        # Fresh topics with one record that is not an event: the ledger dead-letters it,
        # the mirror stores it; either way the consumer opens its database connection.
        run = f"roles-test-{kind}-{time.monotonic_ns()}"
        topic, dlq_topic = run, run + ".dlq"
        create_topic(topic, partitions=1)
        create_topic(dlq_topic, partitions=1)
        produce(topic, [(b"k", b"not an event", [])])
        log_path = tmp_path / f"{kind}.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(paystream_argv(
                "consume", kind, "--group", run, "--topic", topic, "--dlq-topic", dlq_topic,
                "--metrics-port", "0"), stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 60
            while not _users_of(db, f"paystream-{run}") and time.monotonic() < deadline:
                assert proc.poll() is None, log_path.read_text()
                time.sleep(0.5)
            assert _users_of(db, f"paystream-{run}") == {role}, log_path.read_text()
        finally:
            proc.terminate()
            proc.wait(30)
    with db.cursor() as cur:
        # Debezium reads the slot as the CDC role (the walsender holding the slot).
        cur.execute("SELECT a.usename FROM pg_replication_slots s"
                    " JOIN pg_stat_activity a ON a.pid = s.active_pid"
                    " WHERE s.slot_name = 'paystream_outbox'")
        assert [row[0] for row in cur.fetchall()] == ["paystream_cdc"]


def test_the_operator_commands_make_their_writes_as_the_ops_role(db: Connection) -> None:
    """users add / addresses add / balances run as paystream_ops (INSERT users and
    deposit addresses, read balances), the writes it was granted."""
    user = f"roles-ops-{time.monotonic_ns()}"
    address = "0x" + f"{time.monotonic_ns():040x}"[-40:]

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(paystream_argv(*args), capture_output=True, text=True,
                              timeout=60)

    added = cli("users", "add", user)
    assert added.returncode == 0 and "created" in added.stdout, added.stderr
    assigned = cli("addresses", "add", "--network", "ETH_MAINNET", "--address", address,
                   "--user", user)
    assert assigned.returncode == 0 and "added" in assigned.stdout, assigned.stderr
    assert cli("balances", "--user", user).returncode == 0
    with db.cursor() as cur:
        cur.execute("SELECT user_id FROM deposit_addresses WHERE network = 'ETH_MAINNET'"
                    " AND address = %s", (address,))
        assert cur.fetchall() == [(user,)]
