"""The stack's generated Prometheus configuration: valid for promtool, one job per
process `paystream run` starts, on the ports it starts them on, the shipped rules loaded."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from paystream import run
from paystream.env import SettingsError
from paystream.stack import prometheus
from paystream.stack.settings import StackSettings
from paystream.stack.targets import metrics_targets

PORT_VARS = ("PAYSTREAM_INGEST_ADMIN_PORT", "PAYSTREAM_LEDGER_METRICS_PORT",
             "PAYSTREAM_DLQ_MIRROR_METRICS_PORT", "PAYSTREAM_HEALTH_METRICS_PORT",
             "PAYSTREAM_FINALITY_METRICS_PORT", "PAYSTREAM_API_ADMIN_PORT",
             "PAYSTREAM_NOTIFIER_METRICS_PORT", "PAYSTREAM_SCANNER_METRICS_PORT",
             "PAYSTREAM_CHAIN_RECONCILE_METRICS_PORT")


@pytest.fixture
def settings(tmp_path: Path) -> StackSettings:
    return StackSettings.from_env().replaced(state_dir=tmp_path)


def _targets(cfg: dict) -> dict[str, list[str]]:
    return {job["job_name"]: [t for sc in job["static_configs"] for t in sc["targets"]]
            for job in cfg["scrape_configs"]}


def test_every_process_of_paystream_run_is_scraped_on_its_port(
        settings: StackSettings, monkeypatch: pytest.MonkeyPatch) -> None:
    for n, name in enumerate(PORT_VARS):
        monkeypatch.setenv(name, str(19_000 + n))
    cfg = prometheus.config(settings, prometheus.PrometheusConfig(port=19_090))
    targets = _targets(cfg)
    assert targets.pop("prometheus") == ["127.0.0.1:19090"]
    assert targets == {"ingest": ["127.0.0.1:19000"], "ledger": ["127.0.0.1:19001"],
                       "dlq-mirror": ["127.0.0.1:19002"], "health": ["127.0.0.1:19003"],
                       "finality": ["127.0.0.1:19004"], "api": ["127.0.0.1:19005"],
                       "notifier": ["127.0.0.1:19006"], "scanner": ["127.0.0.1:19007"],
                       "chain-reconcile": ["127.0.0.1:19008"]}
    # ... and `paystream run` starts each of them on that port.
    started = {svc.name: svc.args for svc in run.services(8000)}
    for job, port in (("ledger", 19_001), ("dlq-mirror", 19_002), ("finality", 19_004),
                      ("notifier", 19_006), ("scanner", 19_007), ("chain-reconcile", 19_008)):
        args = started[job]
        assert args[args.index("--metrics-port") + 1] == str(port), args
    assert started["health"][started["health"].index("--serve-metrics") + 1] == "19003"
    # The API serves /metrics on its admin port, which `paystream run` leaves to
    # PAYSTREAM_API_ADMIN_PORT (inherited), as the ingest's.
    assert started["api"][:2] == ["api", "--port"]
    # Those without a /metrics listener log only; the console serves pages to people.
    assert {t.job for t in metrics_targets()} == set(started) - {"connector-watchdog",
                                                                  "hold-expiry",
                                                                  "invoice-expiry",
                                                                  "console"}


def test_the_shipped_rules_and_the_rules_folder_are_loaded(settings: StackSettings) -> None:
    cfg = prometheus.config(settings, prometheus.PrometheusConfig())
    assert cfg["rule_files"][0] == str(prometheus.SHIPPED_RULES)
    assert prometheus.SHIPPED_RULES.is_file()
    assert cfg["rule_files"][1] == str(settings.state_dir / "prometheus" / "rules.d" / "*.yml")
    assert cfg["global"]["scrape_interval"] == "15000ms"


def test_promtool_accepts_the_generated_configuration(settings: StackSettings) -> None:
    assert shutil.which("promtool"), "promtool is missing: `paystream stack up` installs it"
    cfg = prometheus.PrometheusConfig(port=19_090, scrape_interval_s=2)
    assert prometheus.write_config(settings, cfg) is True
    assert prometheus.write_config(settings, cfg) is False  # unchanged: no reload needed
    path = prometheus.config_file(settings)
    json.loads(path.read_text())
    done = subprocess.run(["promtool", "check", "config", str(path)], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_scrape_interval_out_of_range_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAYSTREAM_PROMETHEUS_SCRAPE_INTERVAL_S", "0.1")
    with pytest.raises(SettingsError,
                       match=r"SCRAPE_INTERVAL_S must be at least 0\.5, got '0\.1'"):
        prometheus.PrometheusConfig.from_env()
