"""`paystream run`: the whole pipeline on the local stack, in the foreground.

Starts every paystream process that exists (ingest, the ledger consumer, the DLQ
mirror, the finality watcher, the merchant API, ...), restarts one that dies, prints
where each listens, and stops them all on Ctrl-C / SIGTERM. The stack itself (Postgres,
Kafka, Connect) is `paystream stack up`.
"""

from __future__ import annotations

import argparse
import base64
import importlib.util
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field

from paystream.api.settings import ApiSettings
from paystream.console_kit.settings import ConsoleSettings
from paystream.credentials import write_private
from paystream.env import EnvSettings, read_one
from paystream.launch import paystream_argv
from paystream.stack.settings import StackSettings
from paystream.stack.targets import metrics_targets, port_of

RESTART_DELAY_S = 2.0
# A child that dies again within this long of its start waits twice as long before the
# next start (up to RESTART_DELAY_MAX_S): a fatal exit (code 3: a schema the code does
# not match, a fatal client error) repeats until a person acts, and every 2 s only
# filled the logs. The DLQ limit no longer exits at all: the consumer stays up, stopped
# (consumers/stops.py), so restarts cannot loop it into the same batch.
QUICK_EXIT_S = 60.0
RESTART_DELAY_MAX_S = 60.0


class RunSettings(EnvSettings):
    """Read by `paystream run`, which starts the ingest on this port."""

    doc_section = "Ingest"

    ingest_port: int = Field(8000, alias="PORT", ge=1, description=(
        "the ingest port `paystream run` uses (the default of `--ingest-port`)"))


@dataclass
class Service:
    name: str
    module: str  # the module that registers the command
    args: list[str]
    listens: str
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    restart_delay_s: float = RESTART_DELAY_S

    def start(self, env: Mapping[str, str]) -> None:
        self.proc = subprocess.Popen(paystream_argv(*self.args), env=env)
        self.started_at = time.monotonic()

    def next_restart_delay(self) -> float:
        """The wait before restarting it now that it exited: doubled while it keeps
        dying soon after its start, back to RESTART_DELAY_S once it ran a while."""
        if time.monotonic() - self.started_at >= QUICK_EXIT_S:
            self.restart_delay_s = RESTART_DELAY_S
        delay = self.restart_delay_s
        self.restart_delay_s = min(delay * 2, RESTART_DELAY_MAX_S)
        return delay

    @property
    def process(self) -> subprocess.Popen[bytes]:
        assert self.proc is not None, f"{self.name} was never started"
        return self.proc


def services(ingest_port: int, api_port: int = 8100, console_port: int = 8102
             ) -> list[Service]:
    # The metrics ports are the ones the stack's Prometheus scrapes (stack/targets.py).
    admin, ledger, mirror, health, finality, api_admin, notifier, scanner, chain_check = (
        t.address for t in metrics_targets())
    candidates = [
        Service("ingest", "paystream.ingest.cli", ["ingest", "--port", str(ingest_port)],
                f"http://127.0.0.1:{ingest_port} (/webhooks/*, /healthz); admin "
                f"http://{admin} (/docs, /metrics, /readyz)"),
        Service("ledger", "paystream.consume",
                ["consume", "ledger", "--metrics-port", str(port_of("ledger"))],
                f"metrics http://{ledger}/metrics"),
        Service("dlq-mirror", "paystream.consume",
                ["consume", "dlq-mirror", "--metrics-port", str(port_of("dlq-mirror"))],
                f"metrics http://{mirror}/metrics"),
        Service("finality", "paystream.consume",
                ["consume", "finality", "--metrics-port", str(port_of("finality"))],
                f"metrics http://{finality}/metrics (pending deposits, RPC breaker)"),
        Service("scanner", "paystream.consume",
                ["consume", "scanner", "--metrics-port", str(port_of("scanner"))],
                f"metrics http://{scanner}/metrics (cursor, deposits found)"),
        Service("notifier", "paystream.consume",
                ["consume", "notifier", "--metrics-port", str(port_of("notifier"))],
                f"metrics http://{notifier}/metrics (webhook deliveries: `paystream "
                "endpoints add`)"),
        Service("connector-watchdog", "paystream.stack.cli", ["stack", "watchdog"],
                "restarts the Debezium connector's FAILED tasks (logs only)"),
        Service("hold-expiry", "paystream.consumers.ledger.cli", ["holds", "expire", "--loop"],
                "voids withdrawal holds past PAYSTREAM_HOLD_TTL_S (logs only)"),
        Service("invoice-expiry", "paystream.invoices.cli",
                ["invoices", "expire", "--loop"],
                "expires open invoices past their deadline, nothing pending (logs only)"),
        Service("api", "paystream.api.cli", ["api", "--port", str(api_port)],
                f"http://127.0.0.1:{api_port} (/v1/*, merchant API); admin "
                f"http://{api_admin} (/docs, /metrics, /readyz)"),
        Service("health", "paystream.ops.cli",
                ["health", "--serve-metrics", str(port_of("health")), "--bind", "127.0.0.1"],
                f"metrics http://{health}/metrics (stuck events, slot WAL, lag)"),
        Service("chain-reconcile", "paystream.ops.cli",
                ["reconcile", "--chain", "--loop", "--metrics-port",
                 str(port_of("chain-reconcile"))],
                f"metrics http://{chain_check}/metrics (custody against the chain, hourly)"),
        Service("console", "paystream.console.cli", ["console", "--port", str(console_port)],
                f"http://127.0.0.1:{console_port} (operator console; a key: `paystream "
                "console keys create --name NAME`)"),
    ]
    return [s for s in candidates if importlib.util.find_spec(s.module) is not None]


def dev_secrets(state_dir: Path) -> dict[str, str]:
    """Webhook secrets for the local run: from the environment, else generated once and
    kept under the state dir so signed test requests keep working across restarts."""
    path = state_dir / "dev-secrets.env"
    stored: dict[str, str] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            key, _, value = line.partition("=")
            stored[key] = value
    else:
        stored = {
            "ALCHEMY_SIGNING_KEY": secrets.token_hex(32),
            "PAYMENTS_WEBHOOK_SECRET": "whsec_" + base64.b64encode(
                secrets.token_bytes(32)).decode(),
        }
        # 0600 from its first byte (a write then a chmod leaves a moment it is readable).
        # The state dir keeps its mode: made 0700, the postgres user could no longer
        # reach .stack/pgdata and the next `stack up` failed (Permission denied).
        write_private(path, "".join(f"{k}={v}\n" for k, v in stored.items()),
                      private_folder=False)
    return {k: os.environ.get(k) or v for k, v in stored.items()}


def run(args: argparse.Namespace) -> int:
    settings = StackSettings.from_env()
    env = {**os.environ, **settings.service_env(), **dev_secrets(settings.state_dir)}
    ingest_port = (read_one(RunSettings, "ingest_port") if args.ingest_port is None
                   else args.ingest_port)
    api_port = read_one(ApiSettings, "port") if args.api_port is None else args.api_port
    console_port = (read_one(ConsoleSettings, "port") if args.console_port is None
                    else args.console_port)
    todo = services(ingest_port, api_port, console_port)
    if not todo:
        print("no paystream services are installed yet; the stack is up:")
        return subprocess.call(paystream_argv("stack", "status"), env=env)
    stopping = False

    def stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    for svc in todo:
        svc.start(env)
    print("paystream is running (Ctrl-C stops it; secrets in "
          f"{settings.state_dir / 'dev-secrets.env'}):")
    for svc in todo:
        print(f"  {svc.name:<11} pid {svc.process.pid:<7} {svc.listens}")
    restart_at: dict[str, float] = {}  # a dead service's name -> when to start it again
    while not stopping:
        time.sleep(0.5)
        for svc in todo:
            if stopping or svc.process.poll() is None:
                continue
            due = restart_at.get(svc.name)
            if due is None:  # the others are watched meanwhile, and Ctrl-C is not delayed
                delay = svc.next_restart_delay()
                print(f"{svc.name} exited with {svc.process.returncode}; restarting in "
                      f"{delay:.0f} s", file=sys.stderr)
                restart_at[svc.name] = time.monotonic() + delay
            elif time.monotonic() >= due:
                del restart_at[svc.name]
                svc.start(env)
    for svc in todo:
        if svc.process.poll() is None:
            svc.process.send_signal(signal.SIGTERM)
    for svc in todo:
        try:
            svc.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            svc.process.kill()
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("run", help="run ingest and the consumers on the local stack")
    # Defaults from PORT, PAYSTREAM_API_PORT and PAYSTREAM_CONSOLE_PORT, read when the
    # command runs.
    p.add_argument("--ingest-port", type=int, default=None)
    p.add_argument("--api-port", type=int, default=None)
    p.add_argument("--console-port", type=int, default=None)
    p.set_defaults(func=run)
