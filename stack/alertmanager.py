"""Alertmanager: Debian's (package `prometheus-alertmanager`, which ships amtool too),
started by `paystream stack up --prometheus` beside Prometheus, which sends it every
alert. It is what makes a firing rule a message a person receives, once, with what to
do (docs/operations.md#who-is-told).

Routing: `severity=critical` goes to the pager receiver (a generic webhook, email over
SMTP, PagerDuty Events v2: whichever are configured), `severity=warning` to the chat
receiver (a Slack-compatible incoming webhook, a generic webhook), the `Watchdog` alert
to the dead man's switch; grouped by alert name and consumer group; inhibitions mute
the symptoms of a known cause (INHIBITIONS).

Bound to 127.0.0.1, HA gossip off; its configuration (JSON, which is YAML; checked by
`amtool check-config` before use), its data (silences, notification log) and its log
live under the state dir. The configuration is written 0600: a generic webhook's URL is
inline (0.25 has no `url_file`); every other secret is a file of the secrets folder the
configuration only names (`routing_key_file`, `api_url_file`, `auth_password_file`,
`credentials_file`).

Its variables are AlertmanagerConfig's fields.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import httpx
from pydantic import Field

from paystream import credentials
from paystream.env import EnvSettings
from paystream.stack import ports
from paystream.stack.process import (
    StackError,
    read_pid,
    run,
    start_detached,
    started_with,
    stop_pid,
    wait_until,
)
from paystream.stack.settings import StackSettings

COMPONENT = "alertmanager"
BINARY = "prometheus-alertmanager"  # Debian's name for it
PAGER, CHAT, DEADMAN = "pager", "chat", "deadman"
WATCHDOG = "Watchdog"
# A page links the runbook of its group's first alert (the rules' runbook_url).
RUNBOOK_LINK = "{{ (index .Alerts 0).Annotations.runbook_url }}"
GROUP_BY = ["alertname", "group"]
# The secrets folder's files a receiver is configured from, when they exist (or the
# file its variable names).
PAGERDUTY_KEY = "alert-pagerduty-routing-key"
SLACK_URL = "alert-slack-webhook-url"
SMTP_PASSWORD = "alert-smtp-password"
WEBHOOK_TOKEN = "alert-webhook-token"
SECRET_FILES = (PAGERDUTY_KEY, SLACK_URL, SMTP_PASSWORD, WEBHOOK_TOKEN)

# Cause -> the symptoms it mutes, while it fires (same stack; `equal` adds labels both
# must share). Each cause's own page says what to do; its symptoms would only repeat it.
_CONSUMER_SYMPTOMS = ("PaystreamConsumerStalled|PaystreamConsumerRetrying|"
                      "PaystreamConsumerLagGrowing|PaystreamStuckEvents|"
                      "PaystreamChainSettlementStuck|PaystreamHealthCheckUnhealthy")
INHIBITIONS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    # Postgres down: no consumer can commit, nothing is applied, every check fails.
    ("PaystreamDatabaseDown", _CONSUMER_SYMPTOMS, ()),
    # The RPC breaker open: finality and the scanner wait for the node.
    ("PaystreamFinalityBreakerOpen", "PaystreamChainScanLagging", ("network",)),
    ("PaystreamFinalityBreakerOpen", "PaystreamChainDepositWaitingLong", ()),
    # A group stopped by its DLQ limit lags and commits nothing, by design.
    ("PaystreamConsumerGroupStopped", "PaystreamConsumerStalled|PaystreamConsumerLagGrowing",
     ("group",)),
)


class AlertmanagerConfig(EnvSettings):
    """Read by `paystream stack …`, which runs Alertmanager beside Prometheus, and by
    `paystream alerts` and the console's alerts page, which ask its API
    ([operations](operations.md#who-is-told)). A receiver with nothing configured drops
    what it is sent; its secrets are files (0600) in the secrets folder, named here or
    by default."""

    doc_section = "Alertmanager"

    # Not Alertmanager's usual 9093: the local Kafka's controller listens there.
    port: int = Field(9098, alias="PAYSTREAM_ALERTMANAGER_PORT", ge=1, description=(
        "its HTTP port (UI and API v2), on 127.0.0.1; not 9093, the KRaft controller's"))
    group_wait_s: float = Field(
        30.0, alias="PAYSTREAM_ALERT_GROUP_WAIT_S", ge=0, le=3600, description=(
            "the wait before a new group's first notification, gathering what fires "
            "with it: a stopped ledger pages within 2 minutes of the stop"))
    group_interval_s: float = Field(
        300.0, alias="PAYSTREAM_ALERT_GROUP_INTERVAL_S", gt=0, le=86400, description=(
            "the wait before telling a group's changes (a new alert in it, a resolution)"))
    repeat_interval_s: float = Field(
        4 * 3600.0, alias="PAYSTREAM_ALERT_REPEAT_INTERVAL_S", gt=0, le=7 * 86400,
        description="the cooldown: an alert still firing is sent again after this long")
    watchdog_interval_s: float = Field(
        60.0, alias="PAYSTREAM_ALERT_WATCHDOG_INTERVAL_S", gt=0, le=3600, description=(
            "how often the always-firing `Watchdog` reaches the dead man's switch"))
    webhook_url: str = Field("", alias="PAYSTREAM_ALERT_WEBHOOK_URL", description=(
        "a generic webhook (Alertmanager's JSON) of the pager receiver: critical alerts; "
        "a bearer token, if it wants one, in the secrets folder's `alert-webhook-token`"))
    chat_webhook_url: str = Field("", alias="PAYSTREAM_ALERT_CHAT_WEBHOOK_URL", description=(
        "a generic webhook of the chat receiver: warnings"))
    deadman_url: str = Field("", alias="PAYSTREAM_ALERT_DEADMAN_URL", description=(
        "the dead man's switch: a webhook the `Watchdog` reaches every "
        "`PAYSTREAM_ALERT_WATCHDOG_INTERVAL_S`; its silence means alerting is broken"))
    email_to: str = Field("", alias="PAYSTREAM_ALERT_EMAIL_TO", description=(
        "the address critical alerts are mailed to (needs `PAYSTREAM_ALERT_SMTP_SMARTHOST`)"))
    email_from: str = Field("paystream-alertmanager@localhost",
                            alias="PAYSTREAM_ALERT_EMAIL_FROM", description="their sender")
    smtp_smarthost: str = Field("", alias="PAYSTREAM_ALERT_SMTP_SMARTHOST", description=(
        "`host:port` of the SMTP server; its password, if any, in the secrets folder's "
        "`alert-smtp-password`"))
    smtp_username: str = Field("", alias="PAYSTREAM_ALERT_SMTP_USERNAME",
                               description="the SMTP login, if it wants one")
    smtp_require_tls: bool = Field(True, alias="PAYSTREAM_ALERT_SMTP_REQUIRE_TLS",
                                   description="refuse to mail without STARTTLS")
    pagerduty_url: str = Field("https://events.pagerduty.com/v2/enqueue",
                               alias="PAYSTREAM_ALERT_PAGERDUTY_URL", description=(
        "PagerDuty's Events v2 endpoint; used when the secrets folder holds "
        "`alert-pagerduty-routing-key` (the service's integration key)"))
    slack_channel: str = Field("", alias="PAYSTREAM_ALERT_SLACK_CHANNEL", description=(
        "the channel of the Slack-compatible incoming webhook (its URL in the secrets "
        "folder's `alert-slack-webhook-url`), empty for the webhook's own"))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def home(s: StackSettings) -> Path:
    return s.state_dir / "alertmanager"


def config_file(s: StackSettings) -> Path:
    return home(s) / "alertmanager.yml"


def data_dir(s: StackSettings) -> Path:
    return home(s) / "data"


def pid_file(s: StackSettings) -> Path:
    return s.run_dir / "alertmanager.pid"


def log_file(s: StackSettings) -> Path:
    return s.logs_dir / "alertmanager.log"


def _duration(seconds: float) -> str:
    return f"{round(seconds * 1000)}ms"


def _secret(name: str, secrets: Path) -> str | None:
    path = secrets / name
    return str(path) if path.is_file() else None


def receivers(cfg: AlertmanagerConfig, secrets: Path) -> list[dict[str, Any]]:
    """The three receivers, each with whatever of its channels is configured."""
    token = _secret(WEBHOOK_TOKEN, secrets)
    pager: dict[str, Any] = {"name": PAGER}
    if cfg.webhook_url:
        hook: dict[str, Any] = {"url": cfg.webhook_url, "send_resolved": True}
        if token:
            hook["http_config"] = {"authorization": {"credentials_file": token}}
        pager["webhook_configs"] = [hook]
    if cfg.email_to and cfg.smtp_smarthost:
        pager["email_configs"] = [{"to": cfg.email_to, "send_resolved": True}]
    key = _secret(PAGERDUTY_KEY, secrets)
    if key:
        pager["pagerduty_configs"] = [{"routing_key_file": key, "url": cfg.pagerduty_url,
                                       "send_resolved": True,
                                       "links": [{"href": RUNBOOK_LINK, "text": "runbook"}]}]
    chat: dict[str, Any] = {"name": CHAT}
    slack = _secret(SLACK_URL, secrets)
    if slack:
        chat["slack_configs"] = [{"api_url_file": slack, "send_resolved": True,
                                  **({"channel": cfg.slack_channel} if cfg.slack_channel
                                     else {})}]
    if cfg.chat_webhook_url:
        chat["webhook_configs"] = [{"url": cfg.chat_webhook_url, "send_resolved": True}]
    deadman: dict[str, Any] = {"name": DEADMAN}
    if cfg.deadman_url:
        deadman["webhook_configs"] = [{"url": cfg.deadman_url, "send_resolved": False}]
    return [pager, chat, deadman]


def inhibit_rules() -> list[dict[str, Any]]:
    return [{"source_matchers": [f'alertname="{cause}"'],
             "target_matchers": [f'alertname=~"{symptoms}"'],
             "equal": ["stack", *equal]} for cause, symptoms, equal in INHIBITIONS]


def config(cfg: AlertmanagerConfig, secrets: Path) -> dict[str, Any]:
    """The whole configuration: global SMTP, the routes, the receivers, the inhibitions."""
    smtp: dict[str, Any] = {}
    if cfg.smtp_smarthost:
        smtp = {"smtp_smarthost": cfg.smtp_smarthost, "smtp_from": cfg.email_from,
                "smtp_require_tls": cfg.smtp_require_tls}
        if cfg.smtp_username:
            smtp["smtp_auth_username"] = cfg.smtp_username
        password = _secret(SMTP_PASSWORD, secrets)
        if password:
            smtp["smtp_auth_password_file"] = password
    # Alertmanager repeats at a group-interval tick only when strictly more than
    # repeat_interval has passed since the last send: equal intervals would ping every
    # second tick. A repeat interval just under the tick pings at every tick.
    watchdog = _duration(cfg.watchdog_interval_s)
    watchdog_repeat = _duration(cfg.watchdog_interval_s * 0.9)
    return {
        "global": {"resolve_timeout": "5m", **smtp},
        "route": {
            "receiver": CHAT,
            "group_by": GROUP_BY,
            "group_wait": _duration(cfg.group_wait_s),
            "group_interval": _duration(cfg.group_interval_s),
            "repeat_interval": _duration(cfg.repeat_interval_s),
            "routes": [
                # The Watchdog first: it always fires, and only its absence means anything.
                {"receiver": DEADMAN, "matchers": [f'alertname="{WATCHDOG}"'],
                 "group_wait": "0s", "group_interval": watchdog,
                 "repeat_interval": watchdog_repeat},
                {"receiver": PAGER, "matchers": ['severity="critical"']},
                {"receiver": CHAT, "matchers": ['severity="warning"']},
            ],
        },
        "inhibit_rules": inhibit_rules(),
        "receivers": receivers(cfg, secrets),
    }


def check(path: Path) -> None:
    """`amtool check-config`: StackError with its words when it refuses the file."""
    run([_tool("amtool"), "check-config", str(path)], COMPONENT)


def write_config(s: StackSettings, cfg: AlertmanagerConfig) -> bool:
    """Write the configuration (0600, checked by amtool first); True if it changed."""
    data_dir(s).mkdir(parents=True, exist_ok=True)
    text = json.dumps(config(cfg, credentials.secrets_dir()), indent=2) + "\n"
    path = config_file(s)
    if path.exists() and path.read_text() == text:
        return False
    candidate = path.with_name("alertmanager.new.yml")
    credentials.write_private(candidate, text, private_folder=False)
    check(candidate)
    candidate.replace(path)
    return True


def command(s: StackSettings, cfg: AlertmanagerConfig) -> list[str]:
    return [_tool(BINARY), f"--config.file={config_file(s)}",
            f"--storage.path={data_dir(s)}",
            f"--web.listen-address=127.0.0.1:{cfg.port}",
            f"--web.external-url={cfg.url}",
            # One instance: no gossip listener (its default is 0.0.0.0:9094).
            "--cluster.listen-address="]


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise StackError(COMPONENT, f"{name} is missing (Debian package "
                         "`prometheus-alertmanager`; `paystream stack up` installs it)")
    return found


def healthy(s: StackSettings, cfg: AlertmanagerConfig | None = None) -> bool:
    """Ready, and ours: this stack's process answers on the port."""
    c = cfg or AlertmanagerConfig.from_env()
    if read_pid(pid_file(s)) is None:
        return False
    try:
        return httpx.get(f"{c.url}/-/ready", timeout=3).status_code == 200
    except httpx.HTTPError:
        return False


def start(s: StackSettings, cfg: AlertmanagerConfig) -> str | bool:
    """Write the configuration and start Alertmanager, or reload a running one whose
    configuration changed; wait until it is ready. True if started."""
    changed = write_config(s, cfg)
    pid = read_pid(pid_file(s))
    if pid is not None and not started_with(pid, command(s, cfg)):
        stop(s)  # started with other flags (an older paystream's): start it again
        pid = None
    if pid is not None:
        if changed:
            reload(cfg)
            return "configuration reloaded"
        return False
    ports.ensure_free(COMPONENT, cfg.port, "PAYSTREAM_ALERTMANAGER_PORT")
    start_detached(command(s, cfg), pid_file=pid_file(s), out_file=log_file(s),
                   cwd=home(s))
    wait_until(COMPONENT, "ready", lambda: healthy(s, cfg), timeout=60, log=log_file(s),
               pid_file=pid_file(s), interval=0.2)
    return True


def reload(cfg: AlertmanagerConfig) -> None:
    """Re-read the configuration (POST /-/reload answers once it is applied)."""
    resp = httpx.post(f"{cfg.url}/-/reload", timeout=30)
    if resp.status_code != 200:
        raise StackError(COMPONENT, f"reload refused: {resp.text.strip()}")


def stop(s: StackSettings) -> bool:
    return stop_pid(pid_file(s), timeout=30)


def version(cfg: AlertmanagerConfig) -> str:
    try:
        return str(httpx.get(f"{cfg.url}/api/v2/status", timeout=3)
                   .json()["versionInfo"]["version"])
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return "-"
