"""The stack's generated Alertmanager configuration: accepted by `amtool check-config`,
routed as the rules' severities ask (asked of amtool's own router, not of our code),
its inhibitions naming alerts that exist, its secrets kept out of the file; and every
shipped rule says what to do: a runbook_url whose anchor is a heading of
docs/operations.md, a summary with the first command."""

from __future__ import annotations

import json
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from paystream.stack import alertmanager, prometheus
from paystream.stack.settings import StackSettings
from tests.unit.test_docs_links import anchors

ROOT = Path(__file__).resolve().parents[2]
OPERATIONS = ROOT / "docs" / "operations.md"
RULES = [r for g in yaml.safe_load(prometheus.SHIPPED_RULES.read_text())["groups"]
         for r in g["rules"]]
SECRET_VALUES = {alertmanager.PAGERDUTY_KEY: "pd-routing-key-0123456789abcdef",
                 alertmanager.SLACK_URL: "https://hooks.example/services/T0/B0/sekrit",
                 alertmanager.SMTP_PASSWORD: "smtp-pass-word",
                 alertmanager.WEBHOOK_TOKEN: "bearer-token-value"}


def amtool() -> str:
    found = shutil.which("amtool")
    assert found, "amtool is missing: Debian's prometheus-alertmanager (`stack up` installs it)"
    return found


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> StackSettings:
    secrets = tmp_path / "secrets"
    secrets.mkdir(mode=0o700)
    for name, value in SECRET_VALUES.items():
        (secrets / name).write_text(value + "\n")
    monkeypatch.setenv("PAYSTREAM_SECRETS_DIR", str(secrets))
    return StackSettings.from_env().replaced(state_dir=tmp_path / "state")


def every_receiver() -> alertmanager.AlertmanagerConfig:
    return alertmanager.AlertmanagerConfig(
        port=19_093, webhook_url="http://127.0.0.1:1/pager",
        chat_webhook_url="http://127.0.0.1:1/chat", deadman_url="http://127.0.0.1:1/ping",
        email_to="oncall@example.org", smtp_smarthost="127.0.0.1:25", smtp_username="am")


def test_amtool_accepts_the_configuration_with_every_receiver(settings: StackSettings
                                                              ) -> None:
    cfg = every_receiver()
    assert alertmanager.write_config(settings, cfg) is True
    assert alertmanager.write_config(settings, cfg) is False  # unchanged: no reload
    path = alertmanager.config_file(settings)
    done = subprocess.run([amtool(), "check-config", str(path)], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 receivers" in done.stdout and "4 inhibit rules" in done.stdout, done.stdout
    receivers = {r["name"]: r for r in json.loads(path.read_text())["receivers"]}
    assert set(receivers[alertmanager.PAGER]) == {"name", "webhook_configs", "email_configs",
                                                  "pagerduty_configs"}
    assert set(receivers[alertmanager.CHAT]) == {"name", "slack_configs", "webhook_configs"}


def test_the_configuration_names_its_secrets_and_is_readable_by_its_owner_only(
        settings: StackSettings) -> None:
    alertmanager.write_config(settings, every_receiver())
    path = alertmanager.config_file(settings)
    text = path.read_text()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    for name, value in SECRET_VALUES.items():
        assert value not in text, f"the secret of {name} is in the configuration"
        assert str(Path(settings.state_dir).parent / "secrets" / name) in text


def test_no_receiver_configured_is_still_a_valid_configuration(settings: StackSettings,
                                                               tmp_path: Path) -> None:
    for name in SECRET_VALUES:
        (tmp_path / "secrets" / name).unlink()
    alertmanager.write_config(settings, alertmanager.AlertmanagerConfig())
    receivers = json.loads(alertmanager.config_file(settings).read_text())["receivers"]
    assert receivers == [{"name": "pager"}, {"name": "chat"}, {"name": "deadman"}]


def _routed(settings: StackSettings, **labels: str) -> str:
    done = subprocess.run([amtool(), "config", "routes", "test",
                           f"--config.file={alertmanager.config_file(settings)}",
                           *(f"{k}={v}" for k, v in labels.items())],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip()


def test_every_shipped_rule_routes_by_its_severity(settings: StackSettings) -> None:
    alertmanager.write_config(settings, every_receiver())
    wanted = {"critical": "pager", "warning": "chat", "none": "deadman"}
    for rule in RULES:
        severity = rule["labels"]["severity"]
        got = _routed(settings, alertname=rule["alert"], severity=severity, group="ledger")
        assert got == wanted[severity], (rule["alert"], got)
    assert [r["alert"] for r in RULES if r["labels"]["severity"] == "none"] == ["Watchdog"]
    # WAL archiving too, and with a standby no writable primary, no synchronous standby.
    assert sum(r["labels"]["severity"] == "critical" for r in RULES) == 16


def test_timings_come_from_the_settings_and_the_defaults_page_in_time() -> None:
    cfg = alertmanager.config(alertmanager.AlertmanagerConfig(
        group_wait_s=1, group_interval_s=2, repeat_interval_s=600, watchdog_interval_s=3),
        Path("/nonexistent"))
    route = cfg["route"]
    assert (route["group_wait"], route["group_interval"], route["repeat_interval"]) == (
        "1000ms", "2000ms", "600000ms")
    assert route["group_by"] == ["alertname", "group"]
    assert route["routes"][0]["group_interval"] == "3000ms"
    assert route["routes"][0]["repeat_interval"] == "2700ms"  # every tick, not every other
    # A stopped group (PaystreamConsumerGroupStopped, no `for:`) pages within 2 minutes
    # with the defaults: a scrape, an evaluation, then the group wait.
    default = alertmanager.AlertmanagerConfig()
    scrape = prometheus.PrometheusConfig().scrape_interval_s
    assert 2 * scrape + default.group_wait_s <= 120
    assert default.repeat_interval_s == 4 * 3600


def test_inhibitions_name_alerts_that_exist() -> None:
    names = {r["alert"] for r in RULES}
    for cause, symptoms, _ in alertmanager.INHIBITIONS:
        assert cause in names
        assert set(symptoms.split("|")) <= names, symptoms
        assert cause not in symptoms.split("|")


def test_prometheus_sends_its_alerts_to_the_stacks_alertmanager(
        settings: StackSettings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAYSTREAM_ALERTMANAGER_PORT", "19193")
    cfg = prometheus.config(settings, prometheus.PrometheusConfig())
    assert cfg["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] == [
        "127.0.0.1:19193"]


def test_every_rule_links_a_runbook_section_that_exists_and_names_the_first_command(
        ) -> None:
    headings = anchors(OPERATIONS)
    for rule in RULES:
        annotations = rule["annotations"]
        url = annotations["runbook_url"]
        page, _, anchor = url.partition("#")
        assert page == "docs/operations.md", url
        assert anchor in headings, f"{rule['alert']}: no heading #{anchor} in operations.md"
        first = re.search(r"; first: (.+)$", annotations["summary"])
        assert first, f"{rule['alert']}: the summary names no first command"
        assert first.group(1).startswith("paystream ") or rule["alert"] == "Watchdog"


def test_the_default_port_is_none_of_the_local_stacks_other_ports() -> None:
    """Alertmanager's customary 9093 is the local Kafka's controller port."""
    from paystream.kafka_nodes import KafkaSettings

    kafka = KafkaSettings()
    taken = {prometheus.PrometheusConfig().port, kafka.kafka_port, kafka.controller_port}
    assert alertmanager.AlertmanagerConfig().port not in taken


@pytest.mark.parametrize("text", ["9" * 25 + "d", "١٢h", "1.5h", "h", "-1m", "1w"])
def test_a_silence_length_that_is_not_one_is_refused_not_raised(text: str) -> None:
    from paystream.stack.alerts import SilenceRefused, parse_duration

    with pytest.raises(SilenceRefused):
        parse_duration(text)
