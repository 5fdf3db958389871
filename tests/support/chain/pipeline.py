"""The whole chain-deposit path on the REAL stack, for the e2e tests and the benchmark.

    anvil (own port, persisted state) ── real txs ──▶ receipts ──▶ signed Alchemy payload
      ──POST──▶ `paystream ingest` (subprocess) ──▶ payment_events + outbox
      ──Debezium──▶ Kafka ──▶ `paystream consume ledger` (subprocess, own group at the
      topic end) ──▶ balances.pending + chain_deposits
    `paystream consume finality` (subprocess, own network name, pointed at the anvil)
      ──▶ settlement event through the outbox ──▶ … ──▶ ledger credits / releases

Each Pipeline uses a network name of its own (ANVIL_E2E_<hex>), so its watcher only
sees its own deposits on a shared database. Nothing is mocked; a missing service fails
with the command that starts it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import psycopg2

from paystream.chaos import alchemy
from paystream.kafka_nodes import kafka_bootstrap
from paystream.launch import free_port, paystream_argv
from paystream.ops import users as admin
from paystream.schema.db import connect, database_url, where
from paystream.schema.events import PAYMENTS_TOPIC
from paystream.stack import anvil, kafka
from paystream.stack.settings import StackSettings
from tests.support.chain.deposits import activities
from tests.support.chain.node import AnvilUnavailableError, Chain, Token
from tests.support.ingest import ALCHEMY_KEY, ingest_server
from tests.support.waiting import wait_for


@contextmanager
def persisted_anvil(port: int, *, slots_in_an_epoch: int = 1) -> Iterator[Chain]:
    """An anvil whose chain survives stop + start (its state file is dumped on
    SIGTERM), so an RPC outage test can bring the SAME chain back."""
    s = StackSettings.from_env()
    cfg = anvil.AnvilConfig(port=port, name=f"anvil-e2e-{port}",
                            slots_in_an_epoch=slots_in_an_epoch, persist=True)
    for folder in (s.state_dir, s.run_dir, s.logs_dir):
        folder.mkdir(parents=True, exist_ok=True)
    try:
        anvil.ensure_installed(s)
        anvil.stop(s, cfg)
        anvil.state_file(s, cfg).unlink(missing_ok=True)  # a fresh chain per run
        anvil.start(s, cfg)
    except Exception as exc:
        raise AnvilUnavailableError(f"anvil could not be started on {port}: {exc}") from exc
    try:
        yield Chain(cfg.rpc_url, cfg.finality_depth, settings=s, config=cfg)
    finally:
        anvil.stop(s, cfg)
        anvil.state_file(s, cfg).unlink(missing_ok=True)


@dataclass
class Deposit:
    event_id: str
    tx_hash: str
    amount: Decimal
    asset: str
    block_number: int


class Pipeline:
    """ingest + ledger + finality watcher as real subprocesses, on one anvil."""

    def __init__(self, chain: Chain, *, tick_seconds: float = 0.5, grace_blocks: int = 0,
                 breaker: str = "3/30/2", log_dir: Path | None = None,
                 credit_depth: int | None = None) -> None:
        self.chain = chain
        self.network = "ANVIL_E2E_" + uuid.uuid4().hex[:8].upper()
        self.group = "e2e-ledger-" + uuid.uuid4().hex[:8]
        self.tick_seconds = tick_seconds
        self.grace_blocks = grace_blocks
        self.breaker = breaker
        self.credit_depth = credit_depth  # None: credit on finality only
        self.metrics_port = free_port()
        self.log_dir = log_dir or Path(f"/tmp/paystream-finality-e2e-{self.network}")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._stack = ExitStack()
        self.ingest_url = ""
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    # --- lifecycle --------------------------------------------------------------------

    def __enter__(self) -> Pipeline:
        try:
            connect(database_url("owner")).close()
        except psycopg2.OperationalError as exc:
            raise AssertionError(f"Postgres is not reachable at "
                                 f"{where(database_url('owner'))} ({exc}); "
                                 "run `paystream stack up` (make test does)") from exc
        try:
            kafka.start_group_at_end(self.group, PAYMENTS_TOPIC)
        except Exception as exc:  # any client error here means "no broker"
            raise AssertionError(f"Kafka is not reachable at {kafka_bootstrap()} ({exc}); "
                                 "run `paystream stack up` (make test does)") from exc
        server = self._stack.enter_context(ingest_server(
            log_path=self.log_dir / "paystream.ingest.log"))
        self.ingest_url = server.url
        self.start("ledger", ["consume", "ledger", "--group", self.group,
                              "--metrics-port", "0", "--batch-timeout", "0.05"])
        self.start("finality", ["consume", "finality", "--network", self.network,
                                "--metrics-port", str(self.metrics_port)],
                   {"ETH_RPC_URL": self.chain.url,
                    "PAYSTREAM_FINALITY_TICK_SECONDS": str(self.tick_seconds),
                    "PAYSTREAM_FINALITY_RPC_TIMEOUT": "1",
                    "PAYSTREAM_FINALITY_BREAKER": self.breaker,
                    "PAYSTREAM_FINALITY_REORG_GRACE_BLOCKS": str(self.grace_blocks),
                    **({f"PAYSTREAM_FINALITY_CREDIT_DEPTH_{self.network}":
                        str(self.credit_depth)} if self.credit_depth else {})})
        wait_for("the finality watcher's metrics", self._metrics_text, timeout=30)
        return self

    def start(self, name: str, args: Sequence[str], env: dict[str, str] | None = None
              ) -> None:
        log = (self.log_dir / f"{name}.log").open("ab")
        self.processes[name] = subprocess.Popen(paystream_argv(*args),
                                                env={**os.environ, **(env or {})},
                                                stdout=log, stderr=subprocess.STDOUT)
        log.close()

    def __exit__(self, *exc: object) -> None:
        for proc in self.processes.values():
            proc.terminate()
        for proc in self.processes.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._stack.close()
        if exc[0] is None:
            shutil.rmtree(self.log_dir, ignore_errors=True)

    def check_alive(self) -> None:
        for name, proc in self.processes.items():
            if proc.poll() is not None:
                tail = (self.log_dir / f"{name}.log").read_text()[-3000:]
                raise AssertionError(f"{name} exited with {proc.returncode}:\n{tail}")

    # --- users and deposits -----------------------------------------------------------

    def new_user(self) -> tuple[str, str]:
        """A user with a fresh deposit address on this pipeline's network."""
        user = "e2e-" + uuid.uuid4().hex[:12]
        address = self.chain.new_address()
        conn = connect(database_url("owner"))
        try:
            admin.add_user(conn, user)
            admin.add_address(conn, self.network, address, user)
        finally:
            conn.close()
        return user, address

    def post(self, acts: list[dict[str, Any]]) -> dict[str, Any]:
        """Sign an Alchemy payload as Alchemy does and POST it to the real ingest."""
        body, headers = alchemy.signed(alchemy.payload(acts, network=self.network),
                                       ALCHEMY_KEY.encode())
        resp = httpx.post(self.ingest_url + "/webhooks/alchemy", content=body,
                          headers=headers, timeout=10)
        assert resp.status_code == 200, resp.text
        return resp.json()

    def deliver(self, tx_hashes: Sequence[str], address: str, tokens: Sequence[Token] = ()
                ) -> list[dict[str, Any]]:
        """Payload from the REAL receipts of `tx_hashes`, posted; returns the activities."""
        acts = activities(self.chain, tx_hashes, {address}, tokens)
        assert acts, "no activity for the watched address"
        self.post(acts)
        return acts

    # --- observing the ledger ---------------------------------------------------------

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        conn = connect(database_url("owner"))
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(sql, params)
                return cur.fetchall()
        finally:
            conn.close()

    def deposits(self, user: str) -> dict[str, dict[str, Any]]:
        rows = self.query(
            "SELECT event_id, state, tx_hash, block_number, final_block_number,"
            " final_block_hash, final_log_index, verdict_reason, suspect_reason, amount"
            " FROM chain_deposits WHERE user_id = %s", (user,))
        keys = ("event_id", "state", "tx_hash", "block_number", "final_block_number",
                "final_block_hash", "final_log_index", "verdict_reason", "suspect_reason",
                "amount")
        return {r[0]: dict(zip(keys, r, strict=True)) for r in rows}

    def balances(self, user: str) -> dict[str, tuple[Decimal, Decimal]]:
        """asset -> (available, pending)."""
        return {a: (b, p) for a, b, p in self.query(
            "SELECT asset, balance, pending FROM balances WHERE user_id = %s", (user,))}

    def states(self, user: str) -> dict[str, str]:
        return {k: v["state"] for k, v in self.deposits(user).items()}

    def wait_states(self, user: str, expected: dict[str, str] | Callable[[dict], bool],
                    timeout: float = 30.0) -> dict[str, str]:
        def probe() -> dict[str, str] | None:
            self.check_alive()
            now = self.states(user)
            ok = expected(now) if callable(expected) else now == expected
            return now if ok else None
        return wait_for(f"chain deposits of {user} to reach {expected}", probe, timeout)

    # --- the watcher's metrics --------------------------------------------------------

    def _metrics_text(self) -> str | None:
        try:
            return httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics",
                             timeout=2).text
        except httpx.HTTPError:
            return None

    def metric(self, name: str, **labels: str) -> float | None:
        text = self._metrics_text() or ""
        want = {"network": self.network, **labels}
        for line in text.splitlines():
            if not line.startswith(name + "{"):
                continue
            head, _, value = line.rpartition(" ")
            found = dict(part.split("=", 1) for part in
                         head[len(name) + 1:-1].split(",") if "=" in part)
            found = {k: json.loads(v) for k, v in found.items()}
            if all(found.get(k) == v for k, v in want.items()):
                return float(value)
        return None
