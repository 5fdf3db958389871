"""The stack's Alertmanager as an operator uses it, over its API v2: the alerts it holds
(firing, silenced or inhibited), the silences, and a silence created or expired. One
module for both faces of it: `paystream alerts` (stack/alerts_cli.py) and the console's
alerts page (console/routes_alerts.py)."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from paystream.stack.alertmanager import AlertmanagerConfig

TIMEOUT_S = 10.0
# A silence matches exactly what it names: label names as Prometheus allows them.
LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
MAX_SILENCE = timedelta(days=14)


class AlertmanagerUnavailable(RuntimeError):  # noqa: N818 - a condition the caller names
    """Alertmanager did not answer, or answered an error."""


class SilenceRefused(ValueError):  # noqa: N818 - a refusal, with its reason
    """A silence that cannot be made or expired: the reason says why."""


@dataclass(frozen=True)
class Alert:
    name: str
    labels: dict[str, str]
    state: str  # active, suppressed (silenced or inhibited)
    starts_at: str
    summary: str
    runbook_url: str
    silenced_by: tuple[str, ...]
    inhibited_by: tuple[str, ...]

    @property
    def severity(self) -> str:
        return self.labels.get("severity", "")

    @property
    def group(self) -> str:
        return self.labels.get("group", "")


@dataclass(frozen=True)
class Silence:
    id: str
    state: str  # active, pending, expired
    matchers: str  # alertname="X", group="ledger"
    created_by: str
    comment: str
    starts_at: str
    ends_at: str


def _call(cfg: AlertmanagerConfig, method: str, path: str, **kwargs: Any) -> Any:
    try:
        resp = httpx.request(method, f"{cfg.url}/api/v2{path}", timeout=TIMEOUT_S, **kwargs)
    except httpx.HTTPError as exc:
        raise AlertmanagerUnavailable(
            f"Alertmanager at {cfg.url} does not answer ({type(exc).__name__}): is the "
            "stack up with --prometheus?") from None
    # 0.25 answers an unknown silence id 500 "silence not found".
    if 400 <= resp.status_code < 500 or "not found" in resp.text:
        raise SilenceRefused(resp.text.strip().strip('"') or f"HTTP {resp.status_code}")
    if resp.status_code >= 300:
        raise AlertmanagerUnavailable(f"Alertmanager answered {resp.status_code}: "
                                      f"{resp.text.strip()[:200]}")
    return resp.json() if resp.content else None


def alerts(cfg: AlertmanagerConfig) -> list[Alert]:
    """Every alert it holds, firing ones first by severity, then by name."""
    order = {"critical": 0, "warning": 1}
    found = [Alert(name=a["labels"].get("alertname", ""), labels=dict(a["labels"]),
                   state=a["status"]["state"], starts_at=a.get("startsAt", "")[:19],
                   summary=a.get("annotations", {}).get("summary", ""),
                   runbook_url=a.get("annotations", {}).get("runbook_url", ""),
                   silenced_by=tuple(a["status"].get("silencedBy") or ()),
                   inhibited_by=tuple(a["status"].get("inhibitedBy") or ()))
             for a in _call(cfg, "GET", "/alerts")]
    return sorted(found, key=lambda a: (a.state != "active", order.get(a.severity, 2),
                                        a.name, sorted(a.labels.items())))


def silences(cfg: AlertmanagerConfig, *, expired: bool = False) -> list[Silence]:
    """The silences, active and pending first (expired ones only when asked)."""
    found = []
    for s in _call(cfg, "GET", "/silences"):
        state = s["status"]["state"]
        if state == "expired" and not expired:
            continue
        matchers = ", ".join(f'{m["name"]}{"=~" if m.get("isRegex") else "="}"{m["value"]}"'
                             for m in s["matchers"])
        found.append(Silence(s["id"], state, matchers, s.get("createdBy", ""),
                             s.get("comment", ""), s["startsAt"][:19], s["endsAt"][:19]))
    return sorted(found, key=lambda s: (s.state == "expired", s.ends_at))


def silence(cfg: AlertmanagerConfig, matchers: dict[str, str], reason: str,
            duration: timedelta, created_by: str) -> str:
    """Silence the alerts whose labels equal `matchers` for `duration`; the new id."""
    reason = reason.strip()
    if not reason:
        raise SilenceRefused("say why: the reason is the silence's record")
    if not matchers or not matchers.get("alertname", "").strip():
        raise SilenceRefused("name the alert to silence (alertname)")
    bad = [k for k in matchers if not LABEL.match(k)]
    if bad:
        raise SilenceRefused(f"not a label name: {bad[0]!r}")
    if not timedelta(0) < duration <= MAX_SILENCE:
        raise SilenceRefused(f"a silence lasts more than 0 and at most {MAX_SILENCE.days} "
                             "days")
    now = datetime.now(UTC)
    body = {"matchers": [{"name": k, "value": v.strip(), "isRegex": False, "isEqual": True}
                         for k, v in matchers.items() if v.strip()],
            "startsAt": now.isoformat(), "endsAt": (now + duration).isoformat(),
            "createdBy": created_by[:200], "comment": reason[:500]}
    return str(_call(cfg, "POST", "/silences", json=body)["silenceID"])


def expire(cfg: AlertmanagerConfig, silence_id: str) -> None:
    """End the silence now (an unknown id is refused)."""
    try:
        uuid.UUID(silence_id)
    except ValueError:
        raise SilenceRefused(f"not a silence id: {silence_id!r}") from None
    _call(cfg, "DELETE", f"/silence/{silence_id}")


def parse_duration(text: str) -> timedelta:
    """`30m`, `2h`, `1d`, `90s`: a silence's length."""
    # ASCII digits, at most six: '١٢d' is not a length, and 10**25 days overflows.
    m = re.fullmatch(r"\s*([0-9]{1,6})\s*([smhd])\s*", text)
    if not m:
        raise SilenceRefused(f"not a duration: {text!r} (e.g. 30m, 2h, 1d)")
    unit = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}[m.group(2)]
    return timedelta(**{unit: int(m.group(1))})
