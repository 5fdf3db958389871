"""Prometheus: Debian's server (package `prometheus`, which also ships promtool), started
by `paystream stack up` when asked (`--prometheus` or PAYSTREAM_PROMETHEUS=1), scraping
every paystream process (stack/targets.py) with the shipped alert rules loaded.

Bound to 127.0.0.1; its data, its generated configuration and its log live under the
state dir. The configuration is JSON (which is YAML): no YAML library needed. Rules
files dropped into <state_dir>/prometheus/rules.d/ are loaded too, after a reload
(`reload`, SIGHUP); the alert tests put a time-compressed copy of the shipped rules
there (tests/support/prometheus.py), and never touch ops/prometheus/alerts.yml.

Its variables are PrometheusConfig's fields.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path
from typing import Any

import httpx
from pydantic import Field

from paystream.env import EnvSettings, OptIn
from paystream.stack import alertmanager, ports
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
from paystream.stack.targets import metrics_targets

COMPONENT = "prometheus"
# The shipped rules, where setuptools puts ops/ next to stack/ (a checkout or an install).
SHIPPED_RULES = Path(__file__).resolve().parents[1] / "ops" / "prometheus" / "alerts.yml"
# A local stack's history: enough to look at yesterday's run, bounded on a laptop disk.
RETENTION = "3d"


class PrometheusConfig(EnvSettings):
    """Read by `paystream stack …`, which runs Prometheus when asked, and by `paystream
    run`, which starts each process on the port Prometheus scrapes
    ([operations](operations.md#prometheus)). The ingest's and the merchant API's admin
    ports (`PAYSTREAM_INGEST_ADMIN_PORT`, `PAYSTREAM_API_ADMIN_PORT`, below) are their
    scrape targets."""

    doc_section = "Prometheus and the metrics ports"

    enabled: OptIn = Field(False, alias="PAYSTREAM_PROMETHEUS", description=(
        "`1`: `paystream stack up` starts Prometheus (as `--prometheus` does); `make run` "
        "and `make test` set it"))
    port: int = Field(9090, alias="PAYSTREAM_PROMETHEUS_PORT", ge=1,
                      description="its HTTP port (UI and API), on 127.0.0.1")
    scrape_interval_s: float = Field(
        15.0, alias="PAYSTREAM_PROMETHEUS_SCRAPE_INTERVAL_S", ge=0.5, le=300,
        description="scrape and rule evaluation interval; the test stack uses 1")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def home(s: StackSettings) -> Path:
    return s.state_dir / "prometheus"


def config_file(s: StackSettings) -> Path:
    return home(s) / "prometheus.yml"


def rules_dir(s: StackSettings) -> Path:
    return home(s) / "rules.d"


def data_dir(s: StackSettings) -> Path:
    return home(s) / "data"


def pid_file(s: StackSettings) -> Path:
    return s.run_dir / "prometheus.pid"


def log_file(s: StackSettings) -> Path:
    return s.logs_dir / "prometheus.log"


def _duration(seconds: float) -> str:
    return f"{round(seconds * 1000)}ms"


def config(s: StackSettings, cfg: PrometheusConfig) -> dict[str, Any]:
    """The scrape configuration: one job per paystream process, Prometheus itself, the
    shipped rules and whatever rules.d holds."""
    interval = _duration(cfg.scrape_interval_s)
    # A scrape must end before the next one starts; the health exporter runs its checks
    # (Postgres, Kafka, Connect) inside the scrape, so give it all of the interval.
    jobs = [{"job_name": "prometheus",
             "static_configs": [{"targets": [f"127.0.0.1:{cfg.port}"]}]}]
    jobs += [{"job_name": t.job, "static_configs": [{"targets": [t.address]}]}
             for t in metrics_targets()]
    return {
        "global": {"scrape_interval": interval, "scrape_timeout": interval,
                   "evaluation_interval": interval,
                   "external_labels": {"stack": str(s.state_dir)}},
        "rule_files": [str(SHIPPED_RULES), str(rules_dir(s) / "*.yml")],
        "scrape_configs": jobs,
        # Every alert goes to the stack's Alertmanager (stack/alertmanager.py).
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [
            f"127.0.0.1:{alertmanager.AlertmanagerConfig.from_env().port}"]}]}]},
    }


def write_config(s: StackSettings, cfg: PrometheusConfig) -> bool:
    """Write the configuration (checked by promtool first); True if it changed."""
    rules_dir(s).mkdir(parents=True, exist_ok=True)
    data_dir(s).mkdir(parents=True, exist_ok=True)
    text = json.dumps(config(s, cfg), indent=2) + "\n"
    path = config_file(s)
    if path.exists() and path.read_text() == text:
        return False
    candidate = path.with_suffix(".new.yml")
    candidate.write_text(text)
    run(["promtool", "check", "config", str(candidate)], COMPONENT)
    candidate.replace(path)
    return True


def command(s: StackSettings, cfg: PrometheusConfig) -> list[str]:
    interval = _duration(cfg.scrape_interval_s)
    return [_binary(), f"--config.file={config_file(s)}",
            f"--storage.tsdb.path={data_dir(s)}",
            f"--storage.tsdb.retention.time={RETENTION}",
            f"--web.listen-address=127.0.0.1:{cfg.port}",
            # A firing alert is sent again at every evaluation, so Alertmanager holds it
            # 4 intervals after the last (Prometheus's default: 4 minutes): a stopped
            # Prometheus ends the Watchdog within a minute, in seconds on the test stack.
            f"--rules.alert.resend-delay={interval}",
            # The UI's links must not point at a hostname nobody can resolve.
            f"--web.external-url={cfg.url}"]


def _binary() -> str:
    found = shutil.which("prometheus")
    if found is None:
        raise StackError(COMPONENT, "the prometheus binary is missing "
                         "(Debian package `prometheus`; `paystream stack up` installs it)")
    return found


def api(cfg: PrometheusConfig, path: str, params: dict[str, str] | None = None,
        timeout: float = 5.0) -> Any:
    """One GET on Prometheus's HTTP API; its `data`, or RuntimeError with its error."""
    resp = httpx.get(f"{cfg.url}{path}", params=params, timeout=timeout)
    body = resp.json()
    if body.get("status") != "success":
        raise RuntimeError(f"{path}: {body.get('errorType')}: {body.get('error')}")
    return body["data"]


def healthy(s: StackSettings, cfg: PrometheusConfig | None = None) -> bool:
    """Ready, and ours: running with this stack's configuration file (another stack's
    Prometheus, or Debian's own service, may hold the port)."""
    c = cfg or PrometheusConfig.from_env()
    try:
        ready = httpx.get(f"{c.url}/-/ready", timeout=3).status_code == 200
        return ready and api(c, "/api/v1/status/flags").get("config.file") == str(
            config_file(s))
    except (httpx.HTTPError, ValueError, RuntimeError):
        return False


def start(s: StackSettings, cfg: PrometheusConfig) -> str | bool:
    """Write the configuration and start Prometheus, or reload a running one whose
    configuration changed; wait until it is ready. True if started."""
    changed = write_config(s, cfg)
    pid = read_pid(pid_file(s))
    if pid is not None and not started_with(pid, command(s, cfg)):
        stop(s)  # started with other flags (an older paystream's): start it again
        pid = None
    if pid is not None:
        if changed:
            reload(s, cfg)
            return "configuration reloaded"
        return False
    # Another stack's Prometheus, Debian's prometheus service or anything else: named.
    ports.ensure_free(COMPONENT, cfg.port, "PAYSTREAM_PROMETHEUS_PORT")
    start_detached(command(s, cfg), pid_file=pid_file(s), out_file=log_file(s),
                   cwd=home(s))
    wait_until(COMPONENT, "ready", lambda: healthy(s, cfg), timeout=60, log=log_file(s),
               pid_file=pid_file(s), interval=0.2)
    return True


def reload(s: StackSettings, cfg: PrometheusConfig) -> None:
    """Re-read the configuration and every rules file (SIGHUP), and wait until the
    rules in rules.d are loaded: Prometheus answers SIGHUP asynchronously."""
    pid = read_pid(pid_file(s))
    if pid is None:
        raise StackError(COMPONENT, "not running (paystream stack up --prometheus)",
                         log_file(s))
    wanted = {p.name for p in rules_dir(s).glob("*.yml")} | {SHIPPED_RULES.name}
    os.kill(pid, signal.SIGHUP)

    def loaded() -> bool:
        groups = api(cfg, "/api/v1/rules")["groups"]
        return {Path(g["file"]).name for g in groups} == wanted
    wait_until(COMPONENT, "reloaded with every rules file", loaded, timeout=30,
               log=log_file(s), pid_file=pid_file(s), interval=0.2)


def stop(s: StackSettings) -> bool:
    return stop_pid(pid_file(s), timeout=30)


def version(s: StackSettings, cfg: PrometheusConfig) -> str:
    try:
        return str(api(cfg, "/api/v1/status/buildinfo")["version"])
    except (httpx.HTTPError, ValueError, RuntimeError, KeyError):
        return "-"
