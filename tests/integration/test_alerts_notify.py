"""Alerts reach a person: the test stack's Alertmanager (`stack up --prometheus`) sends
what its Prometheus fires to receivers of this test's own, and what the test asserts is
what reached them: an HTTP server (the pager's and the chat's generic webhooks,
PagerDuty's Events v2 endpoint, a Slack-compatible webhook, the dead man's switch) and
an SMTP server (aiosmtpd).

One Alertmanager, one set of receivers and one ledger group for the module: its
configuration is rewritten for the receivers (and short timings: group wait 1 s,
group interval 2 s, Watchdog every 2 s, cooldown 1 h) and reloaded, and restored at the
end. Prometheus evaluates the shipped rules compressed 20 times in time
(tests/support/prometheus.py), as test_alerts_fire.py does.

1. the ledger stopped while events arrive -> exactly one page (webhook, PagerDuty,
   email), resolved after the restart
2. Postgres stopped -> the database page; the symptoms it inhibits reach nobody
3. a silence made in the console -> no page while it holds; the page once expired;
   `paystream alerts` silences and expires from a shell; a warning goes to the chat
4. the Watchdog reaches the dead man's switch at every repeat; Prometheus stopped, it
   stops
"""

from __future__ import annotations

import itertools
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import httpx
import pytest
import requests

from paystream import credentials
from paystream.connectors.endpoint import rest_auth
from paystream.launch import paystream_argv
from paystream.schema.db import connect, database_url
from paystream.stack import alertmanager, alerts, postgres, prometheus
from paystream.stack import connect as stack_connect
from paystream.stack.settings import StackSettings
from tests.support.alert_receivers import HttpReceiver, Post, SmtpSink
from tests.support.console import ConsoleServer, csrf_of, start_console
from tests.support.consumers import drained
from tests.support.ids import unique
from tests.support.observed import Observed, Trickle
from tests.support.prometheus import ACCELERATED, FACTOR, LABEL, LivePrometheus
from tests.support.waiting import wait_for

PAGER, CHAT, PAGERDUTY, SLACK, DEADMAN = "/pager", "/chat", "/pagerduty", "/slack", "/ping"
ONCALL = "oncall@paystream.test"
ROUTING_KEY = "test-routing-key-0123456789abcdef"
TIMINGS = {"group_wait_s": 1.0, "group_interval_s": 2.0, "repeat_interval_s": 3600.0,
           "watchdog_interval_s": 2.0}
# A page for a stopped ledger is due within 2 minutes of the stop (the bound).
PAGE_WITHIN_S = 120
SLACK_S = 30


@dataclass
class Alerting:
    """The module's receivers, Alertmanager, Prometheus and ledger group."""

    observed: Observed
    http: HttpReceiver
    smtp: SmtpSink
    settings: StackSettings
    am: alertmanager.AlertmanagerConfig

    @property
    def live(self) -> LivePrometheus:
        return self.observed.live

    @property
    def group(self) -> str:
        return self.observed.group

    def notified(self, path: str, name: str, status: str = "firing", since: float = 0.0,
                 **labels: str) -> list[Post]:
        """The webhook POSTs at `path` telling of accelerated alert `name` (of this
        module's ledger group unless labels say otherwise) in `status`."""
        want = {"alertname": name, LABEL: ACCELERATED, "group": self.group, **labels}
        return [p for p in self.http.posts(path, since)
                if p.body.get("status") == status
                and any(all(a["labels"].get(k) == v for k, v in want.items() if v)
                        and a["status"] == status for a in p.alerts())]

    def held(self, name: str, **labels: str) -> list[alerts.Alert]:
        """The accelerated alert `name` of this group as Alertmanager holds it."""
        want = {LABEL: ACCELERATED, "group": self.group, **labels}
        return [a for a in alerts.alerts(self.am) if a.name == name
                and all(a.labels.get(k) == v for k, v in want.items() if v)]


def _report(what: str, seconds: float) -> None:
    print(f"{what}: {seconds:.1f} s (rules ÷{FACTOR}, group wait "
          f"{TIMINGS['group_wait_s']:g} s)")


@pytest.fixture(scope="module")
def alerting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Alerting]:
    live = LivePrometheus.of_this_stack()
    s = StackSettings.from_env()
    shipped = alertmanager.AlertmanagerConfig.from_env()
    assert alertmanager.healthy(s, shipped), (
        f"no Alertmanager of this stack at {shipped.url}: run `paystream stack up "
        "--prometheus` with the same variables (make test starts the test stack's)")
    http, smtp = HttpReceiver(), SmtpSink()
    secrets = credentials.secrets_dir()
    written = {secrets / alertmanager.PAGERDUTY_KEY: ROUTING_KEY,
               secrets / alertmanager.SLACK_URL: http.url(SLACK)}
    for path, value in written.items():
        credentials.write_private(path, value + "\n")
    am = shipped.replaced(webhook_url=http.url(PAGER), chat_webhook_url=http.url(CHAT),
                          deadman_url=http.url(DEADMAN), pagerduty_url=http.url(PAGERDUTY),
                          email_to=ONCALL, smtp_smarthost=smtp.smarthost,
                          smtp_require_tls=False, **TIMINGS)
    observed = Observed(live, tmp_path_factory.mktemp("alerts-notify"))
    observed.setup()
    try:
        alertmanager.start(s, am)
        live.accelerate_rules()
        observed.start_ledger()
        observed.start_health()
        yield Alerting(observed, http, smtp, s, am)
    finally:
        observed.stop_all()
        for path in written:
            path.unlink(missing_ok=True)
        alertmanager.start(s, shipped)
        if prometheus.healthy(s, live.cfg):
            live.restore_rules()
        http.close()
        smtp.close()


def test_a_stopped_ledger_pages_once_by_every_channel_and_resolves_after_the_restart(
        alerting: Alerting) -> None:
    name, group = "PaystreamConsumerStalled", alerting.group
    with Trickle(alerting.observed, per_second=5):
        time.sleep(2)
        alerting.observed.stop("ledger")
        stopped = time.monotonic()
        page = wait_for(f"the pager's webhook paged {name}",
                        lambda: alerting.notified(PAGER, name), PAGE_WITHIN_S, 0.2)[0]
        paged = page.at - stopped
        _report(f"{name} paged after the ledger stopped", paged)
        assert paged <= PAGE_WITHIN_S
        # Not before the rule's `for: 5m` (compressed) had passed since the ledger
        # stopped: the page is the alert firing, the fire tests' check of the same rule.
        assert paged >= 300 / FACTOR, "paged before its for: had passed"
        alert = next(a for a in page.alerts() if a["labels"]["alertname"] == name)
        assert alert["labels"]["severity"] == "critical"
        assert alert["annotations"]["runbook_url"] == \
            "docs/operations.md#paystreamconsumerstalled"
        assert f"Consumer group {group}" in alert["annotations"]["summary"]
        assert "first: paystream health" in alert["annotations"]["summary"]
        # The same page by PagerDuty's Events v2 and by email.
        duty = wait_for("the PagerDuty event", lambda: [
            p for p in alerting.http.posts(PAGERDUTY, stopped)
            if p.body.get("event_action") == "trigger" and name in str(p.body)
            and group in str(p.body)], 30, 0.2)
        assert duty[0].body["routing_key"] == ROUTING_KEY
        assert duty[0].body["links"][0]["href"] == alert["annotations"]["runbook_url"]
        mail = wait_for("the page's email", lambda: [
            m for m in alerting.smtp.mails(stopped)
            if name in m.subject and group in m.subject], 30, 0.2)
        assert mail[0].to == (ONCALL,)
        assert "docs/operations.md#paystreamconsumerstalled" in mail[0].text
        _report("the email reached the SMTP sink after the ledger stopped",
                mail[0].at - stopped)
        # Still firing several group intervals later: still one page (the cooldown).
        time.sleep(5 * TIMINGS["group_interval_s"])
        assert len(alerting.notified(PAGER, name)) == 1
        assert not alerting.notified(CHAT, name), "a critical alert went to the chat"
        alerting.observed.start_ledger()
        restarted = time.monotonic()
        wait_for(f"the pager's webhook told {name} resolved",
                 lambda: alerting.notified(PAGER, name, "resolved"), SLACK_S, 0.2)
        _report(f"{name} resolved at the pager after the ledger restarted",
                time.monotonic() - restarted)
    wait_for("the ledger catching up",
             lambda: drained(group, alerting.observed.topic), 60)
    assert len(alerting.notified(PAGER, name)) == 1


def _restore_postgres(s: StackSettings) -> None:
    """Postgres back and answering, and Debezium's task running again if the outage
    failed it: the rest of the suite uses both."""
    postgres.start(s)
    wait_for("Postgres healthy", lambda: postgres.healthy(s), 60, 0.2)
    st = stack_connect.status(s)
    if st is not None and any(t.state == "FAILED" for t in st.tasks):
        httpx.post(f"{s.connect_url}/connectors/{s.connector_name}/restart"
                   "?includeTasks=true&onlyFailed=true", timeout=30, auth=rest_auth())
    stack_connect.wait_running(s, timeout=60)


def test_postgres_down_pages_the_database_and_none_of_its_symptoms(
        alerting: Alerting) -> None:
    """Postgres stopped while records arrive: the ledger retries (PaystreamConsumerRetrying
    fires, as Prometheus says) and the health checks fail, but only
    PaystreamDatabaseDown reaches anybody; Alertmanager holds the symptom as inhibited."""
    s, group = alerting.settings, alerting.group
    symptom = "PaystreamConsumerRetrying"
    before = time.monotonic()
    postgres.stop(s)  # returns once it is down (a fast shutdown, a checkpoint first)
    try:
        alerting.observed.events(5, stored=False)  # the ledger must write to apply them
        page = wait_for("the database page", lambda: alerting.notified(
            PAGER, "PaystreamDatabaseDown", group=""), 60, 0.2)[0]
        _report("PaystreamDatabaseDown paged after the Postgres stop began",
                page.at - before)
        alerting.live.wait_alert("firing", symptom, 120 / FACTOR + SLACK_S, group=group)
        held = wait_for(f"Alertmanager holding {symptom} as inhibited",
                        lambda: [a for a in alerting.held(symptom) if a.inhibited_by],
                        SLACK_S, 0.2)
        assert held[0].state == "suppressed"
        # Group wait and several group intervals: nothing of it reaches anybody.
        time.sleep(TIMINGS["group_wait_s"] + 3 * TIMINGS["group_interval_s"])
        for path in (PAGER, CHAT):
            told = [a["labels"]["alertname"] for p in alerting.http.posts(path, before)
                    for a in p.alerts() if a["status"] == "firing"
                    and a["labels"].get("group") == group]
            assert told == [], f"{path} was told of symptoms: {told}"
    finally:
        _restore_postgres(s)
    wait_for("the database page resolved", lambda: alerting.notified(
        PAGER, "PaystreamDatabaseDown", "resolved", group=""), SLACK_S, 0.2)
    wait_for("the ledger catching up",
             lambda: drained(group, alerting.observed.topic), 90)


def _audit(action: str, target: str) -> list[tuple[str, str]]:
    conn = connect(database_url("owner"))
    try:
        with conn, conn.cursor() as cur:
            cur.execute("SELECT result, detail FROM operator_actions WHERE action = %s"
                        " AND target = %s ORDER BY id", (action, target))
            return [(str(r[0]), str(r[1])) for r in cur.fetchall()]
    finally:
        conn.close()


@pytest.fixture(scope="module")
def console() -> Iterator[ConsoleServer]:
    server = start_console(unique("alerts-operator"))
    try:
        yield server
    finally:
        server.stop()


def _post(http: requests.Session, console: ConsoleServer, path: str,
          fields: dict[str, str]) -> str:
    csrf = csrf_of(http.get(console.url + "/alerts", timeout=10).text)
    answer = http.post(console.url + path, data={"csrf": csrf, **fields}, timeout=30)
    assert answer.status_code == 200, answer.text[:500]
    return answer.text


def test_a_silence_made_in_the_console_holds_the_page_until_it_is_expired(
        alerting: Alerting, console: ConsoleServer) -> None:
    name, group = "PaystreamConsumerGroupStopped", alerting.group
    http = console.login()
    # The console's guards hold for the new forms: no CSRF token, no silence.
    refused = http.post(console.url + "/alerts/silence", timeout=10, data={
        "alertname": name, "group": group, "duration": "30m", "reason": "no token"})
    assert refused.status_code == 403
    assert not [s for s in alerts.silences(alerting.am, expired=True)
                if s.comment == "no token"]
    page = _post(http, console, "/alerts/silence", {
        "alertname": name, "group": group, "duration": "30m", "reason": "resuming by hand"})
    assert "refused" not in page, page[:2000]
    target = f"alertname={name}, group={group}"
    (result, detail), = _audit("alert_silence", target)
    assert result == "done" and "resuming by hand" in detail
    silence_id = detail.split()[1]
    assert any(s.id == silence_id and s.state == "active"
               for s in alerts.silences(alerting.am))
    assert silence_id in http.get(console.url + "/alerts", timeout=10).text
    conn = connect(database_url("owner"))
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute("INSERT INTO consumer_stops (group_id, reason, detail, host, pid)"
                        " VALUES (%s, 'dlq_limit_exceeded', 'test_alerts_notify', 'test', 0)",
                        (group,))
        alerting.live.wait_alert("firing", name, SLACK_S, group=group)
        wait_for("Alertmanager holding the alert as silenced", lambda: [
            a for a in alerting.held(name) if silence_id in a.silenced_by], SLACK_S, 0.2)
        listed = subprocess.run(paystream_argv("alerts", "list"), capture_output=True,
                                text=True, timeout=60)
        assert listed.returncode == 1, listed.stderr  # something fires (not the Watchdog)
        rows = [line.split() for line in listed.stdout.splitlines()]
        assert [name, "critical", group, "silenced"] in [r[:4] for r in rows], listed.stdout
        assert silence_id in listed.stdout
        time.sleep(TIMINGS["group_wait_s"] + 3 * TIMINGS["group_interval_s"])
        assert alerting.notified(PAGER, name) == [], "paged while silenced"
        _post(http, console, f"/silences/{silence_id}/expire", {})
        expired = time.monotonic()
        assert _audit("alert_silence_expire", f"silence {silence_id}")[0][0] == "done"
        wait_for("the page once the silence expired",
                 lambda: alerting.notified(PAGER, name), SLACK_S, 0.2)
        _report(f"{name} paged after the silence expired", time.monotonic() - expired)
    finally:
        with conn.cursor() as cur:
            cur.execute("DELETE FROM consumer_stops WHERE group_id = %s", (group,))
        conn.close()
    wait_for(f"{name} resolved at the pager",
             lambda: alerting.notified(PAGER, name, "resolved"), SLACK_S, 0.2)


def test_a_warning_reaches_the_chat_not_the_pager(alerting: Alerting) -> None:
    """A warning (posted to Alertmanager's API as Prometheus would: no rule of ours
    fires a warning quickly without also firing its cause) goes to the Slack-compatible
    webhook and the chat's generic webhook, and to nobody's pager."""
    name = "PaystreamTestWarning"
    labels = {"alertname": name, "severity": "warning", "group": alerting.group,
              LABEL: ACCELERATED}
    sent = time.monotonic()
    ends = (datetime.now(UTC) + timedelta(seconds=60)).isoformat()  # not 5 min of it
    answer = httpx.post(f"{alerting.am.url}/api/v2/alerts", timeout=10, json=[{
        "labels": labels, "annotations": {"summary": "a test warning; first: nothing"},
        "endsAt": ends}])
    assert answer.status_code == 200, answer.text
    slack = wait_for("the Slack-compatible webhook's message", lambda: [
        p for p in alerting.http.posts(SLACK, sent) if name in str(p.body)], SLACK_S, 0.2)
    assert slack[0].body["attachments"][0]["title"].startswith("[FIRING:1]")
    wait_for("the chat's webhook", lambda: alerting.notified(CHAT, name), SLACK_S, 0.2)
    time.sleep(2 * TIMINGS["group_interval_s"])
    assert alerting.notified(PAGER, name) == []


def test_paystream_alerts_silences_and_expires_from_a_shell(alerting: Alerting) -> None:
    """`paystream alerts silence` prints the id of a silence Alertmanager holds with the
    reason and the creator; `expire` ends it; a silence without a reason is refused."""
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(paystream_argv("alerts", *args), capture_output=True,
                              text=True, timeout=60)

    made = cli("silence", "--alert", "PaystreamConsumerLagGrowing", "--group",
               alerting.group, "--reason", "scaling out", "--for", "2h")
    assert made.returncode == 0, made.stderr
    silence_id = made.stdout.strip()
    held = {s.id: s for s in alerts.silences(alerting.am)}[silence_id]
    assert held.state == "active" and held.comment == "scaling out"
    assert held.matchers == (f'alertname="PaystreamConsumerLagGrowing", '
                             f'group="{alerting.group}"')
    assert held.created_by.endswith("(paystream alerts)")
    assert silence_id in cli("list").stdout
    assert cli("expire", silence_id).returncode == 0
    assert {s.id: s for s in alerts.silences(alerting.am, expired=True)}[
        silence_id].state == "expired"
    no_reason = cli("silence", "--alert", "PaystreamConsumerLagGrowing", "--reason", " ")
    assert no_reason.returncode == 1 and "refused: say why" in no_reason.stderr


def _watchdog_pings(alerting: Alerting, since: float) -> list[float]:
    return [p.at for p in alerting.http.posts(DEADMAN, since)
            if any(a["labels"]["alertname"] == "Watchdog" for a in p.alerts())]


def test_the_watchdog_reaches_the_dead_mans_switch_until_prometheus_stops(
        alerting: Alerting) -> None:
    """Last: it stops the stack's Prometheus (and starts it again)."""
    interval = TIMINGS["watchdog_interval_s"]
    started = time.monotonic()
    time.sleep(6 * interval)
    pings = _watchdog_pings(alerting, started)
    assert len(pings) >= 3, pings
    gaps = [b - a for a, b in itertools.pairwise(pings)]
    assert max(gaps) <= interval + 1, gaps
    print(f"Watchdog pings every {sum(gaps) / len(gaps):.1f} s (interval {interval:g} s)")
    s, cfg = alerting.settings, alerting.live.cfg
    prometheus.stop(s)
    try:
        stopped = time.monotonic()
        # Alertmanager lets the Watchdog go 4 evaluations after its last resend; then
        # the switch hears nothing.
        def quiet() -> bool:
            last = max(_watchdog_pings(alerting, stopped), default=stopped)
            return time.monotonic() - last > 3 * interval
        wait_for("the dead man's switch hearing nothing", quiet, SLACK_S, 0.2)
        last = max(_watchdog_pings(alerting, stopped), default=stopped)
        _report("the last Watchdog ping after Prometheus stopped", last - stopped)
    finally:
        prometheus.start(s, cfg)
    restarted = time.monotonic()
    wait_for("the Watchdog again once Prometheus is back",
             lambda: _watchdog_pings(alerting, restarted), SLACK_S, 0.2)
