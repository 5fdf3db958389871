"""The chaos run: traffic, a fault schedule, the drain, the invariants, the report."""

from __future__ import annotations

import asyncio
import base64
import os
import random
import secrets
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from paystream.chaos import database as db_faults
from paystream.chaos import invoices as inv
from paystream.chaos import nodes
from paystream.chaos import notifications as ntf
from paystream.chaos import processes as px
from paystream.chaos import receiver as rx
from paystream.chaos.chain import (
    REORG_GRACE_BLOCKS,
    RETRY_BUDGET_S,
    ChainDeposit,
    ChainDriver,
    landed,
)
from paystream.chaos.forgery import Forgery, forge
from paystream.chaos.invariants import (
    InvariantReport,
    accepted_events,
    applied_times,
    chain_pending_count,
    chain_report_line,
    check,
    check_chain,
    due_chain,
    expected_books,
    forged_pending_count,
    pending_count,
)
from paystream.chaos.sender import Sender
from paystream.chaos.traffic import ASSETS, MIX, UNKNOWN_USER, UNKNOWN_USER_CODE, Kind, TrafficPlan
from paystream.consumers.crash_hooks import AFTER_DB_COMMIT as CRASH_AFTER_DB_COMMIT
from paystream.env import SettingsError
from paystream.launch import free_port
from paystream.notify import crash_hooks as notify_hooks
from paystream.notify import endpoints
from paystream.notify.intents import now_text
from paystream.ops import users as admin
from paystream.schema.db import connect, database_url
from paystream.schema.events import NOTIFICATIONS_TOPIC, PAYMENTS_DLQ_TOPIC, PAYMENTS_TOPIC
from paystream.stack import anvil, kafka, postgres
from paystream.stack import connect as kafka_connect
from paystream.stack.process import read_pid
from paystream.stack.settings import StackSettings

# The fault cycle, as fractions of one cycle's length; each run jitters the points.
CYCLE = (
    (0.07, "notifier-crash-after-claim"),
    (0.12, "consumer-sigkill"),
    (0.17, "chain-reorg"),
    (0.22, "consumer-crash-after-db-commit"),
    (0.28, "forged-records"),
    (0.31, "notifier-sigkill"),
    (0.34, "connect-restart"),
    (0.38, "scanner-sigkill"),
    (0.41, "finality-sigkill"),
    (0.45, "unknown-user-flood"),
    (0.48, "broker-restart"),
    (0.52, "notifier-crash-after-send"),
    (0.55, "anvil-restart"),
    (0.62, "postgres-restart"),
    (0.69, "chain-reorg"),
    (0.73, "notifier-crash-after-db-commit"),
    (0.76, "ingest-restart"),
    (0.79, "scanner-sigkill"),
    (0.82, "forged-records"),
    (0.88, "consumer-sigkill"),
    (0.93, "notifier-sigkill"),
)
# On a replicated cluster the broker's fault is a node's: a broker, then later the active
# controller, killed and kept down while the pipeline goes on (chaos/nodes.py).
CLUSTER_CYCLE = (
    *((frac, nodes.BROKER_KILL if kind == "broker-restart" else kind) for frac, kind in CYCLE),
    (0.72, nodes.CONTROLLER_KILL),
)
# With a standby (stack up --standby) Postgres' fault is a failover: the primary killed
# and its folder moved away, the standby promoted, the old node rebuilt as the standby;
# and, earlier in the cycle, the standby killed while writes go on (chaos/database.py).
# Appended last, so the points before it draw the same jitter as without a standby.
STANDBY_KILL_AT = 0.26


def fault_cycle(cluster: bool, with_standby: bool) -> tuple[tuple[float, str], ...]:
    """The fault cycle of a stack: without a standby, CYCLE or CLUSTER_CYCLE exactly as
    they are."""
    base = CLUSTER_CYCLE if cluster else CYCLE
    if not with_standby:
        return base
    return (*((frac, db_faults.PRIMARY_FAILOVER if kind == "postgres-restart" else kind)
              for frac, kind in base),
            (STANDBY_KILL_AT, db_faults.STANDBY_KILL))


def fault_schedule(duration_s: float, rng: random.Random,
                   cycle: tuple[tuple[float, str], ...]) -> list[tuple[float, str]]:
    """The run's faults, (seconds after its start, kind), sorted: one cycle per CYCLE_S
    of traffic, each point jittered by ±3 % of a cycle."""
    points = []
    cycles = max(1, round(duration_s / CYCLE_S))
    length = duration_s / cycles
    for n in range(cycles):
        for frac, kind in cycle:
            jitter = rng.uniform(-0.03, 0.03)
            points.append(((n + frac + jitter) * length, kind))
    return sorted(points)


CYCLE_S = 100.0
POISON_SHARE = dict(MIX)[Kind.POISON]
# The unknown-user flood: this many deposits more than the run's ledgers' --dlq-limit,
# so that were they dead letters, they would trip it.
FLOOD_OVER_DLQ_LIMIT = 50
CHAIN_SHARE = 0.05   # chain deposits per payments webhook
CHAIN_USERS = 20     # users that get a deposit address
# The notifier's schedule shortened to the run's length (16 attempts within two minutes,
# inside the drain); its lease at the minimum (twice the timeout), so a killed sender's
# claims lapse soon; a timeout a loaded machine's receiver meets.
NOTIFIER_ENV = {"PAYSTREAM_NOTIFY_RETRY_DELAYS_S": "0.5,1,2,4" + ",8" * 12,
                "PAYSTREAM_NOTIFY_TIMEOUT_S": "5", "PAYSTREAM_NOTIFY_LEASE_S": "10",
                "PAYSTREAM_NOTIFY_POLL_S": "0.1"}
SHAKY_SHARE = 0.05   # deliveries the receiver answers 500 on purpose (retried, same id)


@dataclass(frozen=True)
class ChaosConfig:
    rate: float
    duration_s: float
    users: int
    seed: int
    drain_timeout_s: float = 300.0
    # The Kafka nodes the run expects the stack to have (None: whatever it has).
    brokers: int | None = None


class Chaos:
    def __init__(self, cfg: ChaosConfig) -> None:
        self.cfg = cfg
        self.s = StackSettings.from_env()
        if cfg.brokers is not None and cfg.brokers != self.s.brokers:
            raise SettingsError(
                f"the run asks for {cfg.brokers} Kafka node(s) and the stack in "
                f"{self.s.state_dir} has {self.s.brokers}: bring it up with "
                f"`paystream stack up --brokers {cfg.brokers}` (another state dir), or "
                "drop --brokers")
        self.cluster = self.s.brokers > 1
        self.node_faults: list[nodes.NodeFault] = []
        self.db_faults: list[db_faults.DbFault] = []
        if self.s.standby:
            # The run's own connections (its checks, the drain) reach whichever node is
            # the primary, as its children's do (service_env); the stack keeps its
            # standby without the variable, a process's DSN needs it.
            os.environ.update({k: v for k, v in self.s.service_env().items()
                               if k in ("PAYSTREAM_STANDBY", "PAYSTREAM_PG_STANDBY_PORT")})
        self.run_id = secrets.token_hex(3)
        self.rng = random.Random(cfg.seed)
        self.log_dir = self.s.state_dir / "chaos" / self.run_id
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.secret = secrets.token_bytes(32)
        self.alchemy_key = secrets.token_hex(32)
        self.network = f"CHAOS_{self.run_id.upper()}"
        self.port = free_port()
        self.admin_port = free_port()  # the ingest's /readyz and /metrics
        self.faults: Counter[str] = Counter()
        self.fault_errors: list[str] = []
        self.unexplained_exits: list[str] = []
        self.forged: list[Forgery] = []
        self.last_fault_at = 0.0
        self.sender: Sender | None = None
        self._last_progress = 0.0
        self._define_processes(cfg)
        self.receiver: rx.Receiver  # a process of its own while the run goes (run())
        self.endpoint_ids: list[str] = []
        self.deliveries: ntf.Deliveries | None = None
        self.plan = TrafficPlan(self.run_id, cfg.users, cfg.seed)
        self.invoices = inv.plan_invoices(random.Random(cfg.seed + 2), self.plan.users,
                                          ASSETS, inv.count_for(cfg.rate, cfg.duration_s))
        self.published = ntf.Published(set(self.plan.users))
        self.topic_reader: ntf.TopicReader | None = None
        self.chain = ChainDriver(self.s, f"http://127.0.0.1:{self.port}", self.alchemy_key,
                                 self.network, self.plan.users[:CHAIN_USERS],
                                 random.Random(cfg.seed + 1), max(1.0, cfg.rate * CHAIN_SHARE))

    def _define_processes(self, cfg: ChaosConfig) -> None:
        """The pipeline's processes as the run starts, kills and restarts them."""
        env = {**os.environ, **self.s.service_env(), **rx.LOOPBACK_ENV,
               "PAYMENTS_WEBHOOK_SECRET": "whsec_" + base64.b64encode(self.secret).decode(),
               "ALCHEMY_SIGNING_KEY": self.alchemy_key,
               "PAYSTREAM_INGEST_ADMIN_PORT": str(self.admin_port),
               "PAYMENTS_ASSETS": ",".join(ASSETS),
               # The run's badly signed requests come from the same address as its valid
               # ones (two sources in production): their bucket must not block those.
               "PAYSTREAM_INGEST_AUTH_FAILURE_RATE_PER_SECOND": "1000000",
               "PAYSTREAM_INGEST_AUTH_FAILURE_BURST": "1000000"}
        group = f"chaos-ledger-{self.run_id}"
        self.mirror_group = f"chaos-dlq-{self.run_id}"
        # The run sends ~3% of its deposits for unknown users on purpose: refused by the
        # ingest, or the ledger's final rejection, never dead letters. The DLQ rate limit
        # (which stops a consumer dead-lettering a bad deploy's whole stream) is still
        # set above that rate, as it was when the ledger dead-lettered them.
        dlq_limit = max(100, int(cfg.rate * POISON_SHARE * 60 * 3))
        self.flood_size = dlq_limit + FLOOD_OVER_DLQ_LIMIT
        ledger_args = ["consume", "ledger", "--group", group, "--metrics-port", "0",
                       "--session-timeout-ms", "6000", "--max-poll-interval-ms", "30000",
                       "--dlq-limit", str(dlq_limit), "--dlq-window", "60"]
        self.ingest = px.Managed("ingest", ["ingest", "--port", str(self.port)], env,
                                 self.log_dir)
        self.ledgers = [px.Managed(f"ledger-{n}", ledger_args, env, self.log_dir)
                        for n in "ab"]
        self.mirror = px.Managed("dlq-mirror", ["consume", "dlq-mirror", "--group",
                                                self.mirror_group, "--metrics-port", "0"],
                                 env, self.log_dir)
        # The run's own network name: its watcher judges only the run's deposits.
        chain_env = {**env, "ETH_RPC_URL": anvil.AnvilConfig.from_env().rpc_url,
                     "PAYSTREAM_FINALITY_TICK_SECONDS": "0.5",
                     "PAYSTREAM_FINALITY_RPC_TIMEOUT": "1",
                     "PAYSTREAM_FINALITY_BREAKER": "3/30/2",
                     "PAYSTREAM_FINALITY_REORG_GRACE_BLOCKS": str(REORG_GRACE_BLOCKS),
                     "PAYSTREAM_SCANNER_POLL_SECONDS": "0.5"}
        self.finality = px.Managed(
            "finality", ["consume", "finality", "--network", self.network,
                         "--metrics-port", "0"], chain_env, self.log_dir)
        # The chain scanner of the same network: the only way in for the deposits whose
        # webhook the run drops on purpose (chain.py).
        self.scanner = px.Managed(
            "scanner", ["consume", "scanner", "--network", self.network,
                        "--metrics-port", "0"], chain_env, self.log_dir)
        # As `paystream run` does: Connect never restarts a FAILED connector task.
        self.watchdog = px.Managed("connector-watchdog",
                                   ["stack", "watchdog", "--interval", "2"], env, self.log_dir)
        self.group = group
        # The notifier (consumer and sender in one process, as `paystream run` starts
        # it) on a group of the run's own, delivering to a real receiver.
        self.notifier_group = f"chaos-notifier-{self.run_id}"
        # Its session as short as the ledgers': a notifier killed is replaced by one that
        # waits for the dead one's session to lapse before it gets the partitions (the
        # armed crash faults wait for that each time).
        self.notifier = px.Managed(
            "notifier", ["consume", "notifier", "--group", self.notifier_group,
                         "--metrics-port", "0", "--session-timeout-ms", "6000"],
            {**env, **NOTIFIER_ENV}, self.log_dir)

    def log(self, msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)

    def path_of(self, user: str) -> str:
        """The receiver's path of a user's endpoint (answers 500 now and then)."""
        return f"/shaky/{user}"

    # --- set-up -------------------------------------------------------------------
    def prepare(self) -> None:
        conn = connect(database_url("owner"))
        try:
            with conn, conn.cursor() as cur:
                cur.executemany("INSERT INTO users (user_id) VALUES (%s)"
                                " ON CONFLICT DO NOTHING", [(u,) for u in self.plan.users])
                # An endpoint per user, as merchants' systems would register them.
                for user in self.plan.users:
                    endpoint_id, secret = endpoints.add(
                        cur, self.receiver.url(self.path_of(user)), user, [],
                        guard=rx.LOOPBACK_GUARD)
                    self.endpoint_ids.append(endpoint_id)
                    self.receiver.add_secret(self.path_of(user), secret)
            self.chain.prepare(lambda net, address, user: admin.add_address(
                conn, net, address, user))
        finally:
            conn.close()
        self.plan.network = self.network
        self.plan.chain_addresses = list(self.chain.addresses.values())
        kafka.start_group_at_end(self.group, PAYMENTS_TOPIC, self.s.kafka_bootstrap)
        kafka.start_group_at_end(self.mirror_group, PAYMENTS_DLQ_TOPIC,
                                 self.s.kafka_bootstrap)
        # The notifier and the run's own reader of the topic start at the same offsets.
        starts = kafka.start_group_at_end(self.notifier_group, NOTIFICATIONS_TOPIC,
                                          self.s.kafka_bootstrap)
        self.topic_reader = ntf.TopicReader(self.s.kafka_bootstrap, NOTIFICATIONS_TOPIC,
                                            starts, self.published)
        # The invoices, after those offsets: their invoice.created intents are the run's.
        self._create_invoices()
        self.ingest.start()
        px.wait_http_ok(f"http://127.0.0.1:{self.admin_port}/readyz", 60)
        for c in (*self.ledgers, self.mirror, self.finality, self.scanner, self.watchdog,
                  self.notifier):
            c.start()
        self._scanner_ready(60)

    def _create_invoices(self) -> None:
        """Created in-process by the merchant API's own creation function, as the API's
        database role (the run starts no API); the traffic then owes their payments."""
        conn = connect(database_url("api"))
        try:
            with conn, conn.cursor() as cur:
                inv.create_all(cur, self.invoices, self.run_id, now_text())
        finally:
            conn.close()
        self.plan.invoice_payments = inv.due_payments(self.invoices)

    def _scanner_ready(self, timeout: float) -> None:
        """Until the scanner's cursor exists: its first pass starts at the finalized
        block, so a deposit sent before it would be history (`chain scan`'s job)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            conn = connect(database_url("owner"))
            try:
                with conn, conn.cursor() as cur:
                    cur.execute("SELECT 1 FROM chain_scan_cursors WHERE network = %s",
                                (self.network,))
                    if cur.fetchone() is not None:
                        return
            finally:
                conn.close()
            if not self.scanner.alive():
                break
            time.sleep(0.2)
        raise RuntimeError(f"the chain scanner made no cursor for {self.network} in "
                           f"{timeout:.0f} s; log {self.log_dir / 'scanner.log'}")

    # --- faults ---------------------------------------------------------------------
    def schedule(self) -> list[tuple[float, str]]:
        return fault_schedule(self.cfg.duration_s, self.rng,
                              fault_cycle(self.cluster, self.s.standby))

    def inject(self, kind: str) -> None:
        self.log(f"fault: {kind}")
        s = self.s
        actions: dict[str, Callable[[], str]] = {
            "consumer-sigkill": self._consumer_sigkill,
            "consumer-crash-after-db-commit": self._consumer_crash_after_commit,
            "connect-restart": lambda: px.bounce(
                "connect", s.connect_port, lambda: read_pid(kafka_connect.pid_file(s)),
                lambda: px.kill_connect(s), lambda: px.restart_connect(s), self._pause()),
            "broker-restart": lambda: px.bounce(
                "kafka", s.kafka_port, lambda: read_pid(kafka.pid_file(s)),
                lambda: px.kill_broker(s), lambda: px.restart_broker(s), self._pause()),
            "postgres-restart": lambda: px.bounce(
                "postgres", s.pg_port, lambda: postgres.pid(s),
                lambda: px.kill_postgres(s), lambda: px.restart_postgres(s), self._pause()),
            "ingest-restart": self._ingest_restart,
            "chain-reorg": lambda: f"reorg: {self.chain.reorg()}",
            "anvil-restart": lambda: self.chain.restart_node(self._pause()),
            "finality-sigkill": lambda: self._sigkill(self.finality),
            "scanner-sigkill": lambda: self._sigkill(self.scanner),
            "notifier-sigkill": lambda: self._sigkill(self.notifier),
            "notifier-crash-after-claim": lambda: self._armed_crash(
                self.notifier, notify_hooks.AFTER_CLAIM, self.rng.randint(1, 20)),
            "notifier-crash-after-send": lambda: self._armed_crash(
                self.notifier, notify_hooks.AFTER_SEND, self.rng.randint(1, 20)),
            "notifier-crash-after-db-commit": lambda: self._armed_crash(
                self.notifier, CRASH_AFTER_DB_COMMIT, self.rng.randint(2, 5)),
            "forged-records": self._forge,
            "unknown-user-flood": self._flood,
            nodes.BROKER_KILL: lambda: self._node_fault(nodes.BROKER_KILL),
            nodes.CONTROLLER_KILL: lambda: self._node_fault(nodes.CONTROLLER_KILL),
            db_faults.PRIMARY_FAILOVER: lambda: self._db_fault(db_faults.fail_over),
            db_faults.STANDBY_KILL: lambda: self._db_fault(db_faults.kill_standby),
        }
        for fault in self.node_faults:
            if fault.window_end is None:  # the fault before this one: its window ends
                fault.window_end = time.time()
        try:
            self.log(f"  {actions[kind]()}")
        except Exception as exc:  # a fault that could not be injected is a failed run
            self.log(f"fault {kind} failed: {exc}")
            self.fault_errors.append(f"{kind}: {exc}")
        else:
            self.faults[kind] += 1
        self.last_fault_at = time.monotonic()

    def _node_fault(self, kind: str) -> str:
        fault = nodes.kill_node(self.s, kind, self.rng, self._caught_up)
        self.node_faults.append(fault)
        return nodes.describe(fault).removeprefix("node fault: ")

    def _db_fault(self, inject: Callable[..., db_faults.DbFault]) -> str:
        fault = inject(self.s, self._caught_up, self._applying_since)
        self.db_faults.append(fault)
        return db_faults.describe(fault).removeprefix("database fault: ")

    def _applying_since(self, moment: float) -> bool:
        """Has the ledger committed one of the run's events in a transaction that began
        after `moment` (time.time())? Asked until it has: the time it first answers yes
        is when the pipeline applies again (a transaction that began before a standby's
        kill and waited for its commit does not count)."""
        conn = connect(database_url("owner"), connect_timeout=2)
        try:
            with conn, conn.cursor() as cur:
                cur.execute("SELECT 1 FROM processed_events WHERE processed_at > "
                            "to_timestamp(%s) AND event_id LIKE %s LIMIT 1",
                            (moment, f"chaos-{self.run_id}-%"))
                return cur.fetchone() is not None
        finally:
            conn.close()

    def _caught_up(self) -> bool:
        """Is the pipeline's backlog of the run's events at most two seconds of traffic?"""
        if self.sender is None:
            return True
        try:
            conn = connect(database_url("owner"))
            try:
                with conn, conn.cursor() as cur:
                    left = pending_count(cur, list(self.sender.sent))
            finally:
                conn.close()
        except Exception:  # Postgres restarting: not caught up yet
            return False
        return left <= max(20.0, 2 * self.cfg.rate)

    def _pause(self) -> float:
        return self.rng.uniform(1.0, 3.0)

    def _sigkill(self, victim: px.Managed) -> str:
        """SIGKILL a paystream process and start another one; verified by pid."""
        before = victim.proc
        if before is None or before.poll() is not None:
            raise RuntimeError(f"{victim.name} was not running before the fault")
        victim.kill()
        if before.returncode != -signal.SIGKILL:
            raise RuntimeError(f"{victim.name} ended {before.returncode}, not by SIGKILL")
        time.sleep(self.rng.uniform(0.5, 2.0))
        victim.start()
        if victim.pid == before.pid or not victim.alive():
            raise RuntimeError(f"{victim.name} did not come back as a new process")
        return f"{victim.name} pid {before.pid} -> {victim.pid}"

    def _consumer_sigkill(self) -> str:
        return self._sigkill(self.rng.choice(self.ledgers))

    def _consumer_crash_after_commit(self) -> str:
        # A fresh consumer armed to SIGKILL itself right after a batch's DB commit,
        # before the offset commit: the window the commit protocol must survive.
        return self._armed_crash(self.rng.choice(self.ledgers), CRASH_AFTER_DB_COMMIT,
                                 self.rng.randint(2, 5))

    def _armed_crash(self, victim: px.Managed, hook: str, n: int) -> str:
        """Replace `victim` by a process armed to SIGKILL itself at a crash point (`hook`
        = n: consumers/crash_hooks.py, notify/crash_hooks.py); once it did, start a
        plain one. A process that does not reach its point in 60 s fails the fault."""
        victim.kill()
        victim.start(**{hook: str(n)})
        deadline = time.monotonic() + 60
        while victim.alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        if victim.alive():
            victim.kill()
            victim.start()
            raise RuntimeError(f"the armed {victim.name} did not reach {hook}={n} in 60 s")
        armed = victim.proc
        victim.start()
        # The crash hook SIGKILLs its own process: any other end is not this fault.
        if armed is None or armed.returncode != -signal.SIGKILL:
            raise RuntimeError(f"the armed {victim.name} ended "
                               f"{armed.returncode if armed else None}, not by its hook")
        return f"{victim.name} killed itself at {hook}={n}; now pid {victim.pid}"

    def _ingest_restart(self) -> str:
        def start() -> None:
            self.ingest.start()
            px.wait_http_ok(f"http://127.0.0.1:{self.port}/healthz", 60)
        return px.bounce("ingest", self.port, lambda: self.ingest.pid, self.ingest.kill,
                         start)

    def _flood(self) -> str:
        if self.sender is None:
            raise RuntimeError("no traffic to add the flood to")
        self.sender.burst(self.plan.flood(self.flood_size))
        return (f"{self.flood_size} signed deposits for users nobody created, sent at once"
                " to the gateway's endpoint")

    def _forge(self) -> str:
        conn = connect(database_url("owner"))
        try:
            with conn, conn.cursor() as cur:
                batch = forge(cur, self.s.kafka_bootstrap, self.run_id, len(self.forged),
                              self.plan.users, self.rng)
        finally:
            conn.close()
        self.forged += batch
        return "forged " + ", ".join(f"{f.kind} {f.event_id}" for f in batch)

    def _supervise(self) -> None:
        """A process that died with no fault to explain it is a violation (a crash the
        chaos provoked by accident); it is restarted, as a process manager would."""
        for c in (self.ingest, *self.ledgers, self.mirror, self.finality, self.scanner,
                  self.watchdog, self.notifier):
            if not c.alive():
                code = c.proc.returncode if c.proc else None
                self.log(f"{c.name} exited ({code}) with no fault to explain it; restarting")
                self.unexplained_exits.append(f"{c.name} exited {code}; log "
                                              f"{self.log_dir / (c.name + '.log')}")
                c.start()

    # --- the run ---------------------------------------------------------------------
    def run(self) -> tuple[InvariantReport, dict[str, Any]]:
        with rx.in_own_process(free_port(), shaky_share=SHAKY_SHARE,
                               seed=self.cfg.seed) as self.receiver:
            try:
                self.prepare()
                return self._run()
            finally:
                for c in (*self.ledgers, self.mirror, self.finality, self.scanner,
                          self.watchdog, self.notifier, self.ingest):
                    c.stop()
                self._close_notifications()

    def _close_notifications(self) -> None:
        if self.topic_reader is not None:
            self.topic_reader.close()
        self._disable_endpoints()

    def _disable_endpoints(self) -> None:
        """The run's endpoints stay, disabled: nothing is made for them any more."""
        if not self.endpoint_ids:
            return
        conn = connect(database_url("owner"))
        try:
            with conn, conn.cursor() as cur:
                for endpoint_id in self.endpoint_ids:
                    endpoints.disable(cur, endpoint_id, f"chaos run {self.run_id} over")
        finally:
            conn.close()

    def _progress(self, sender: Sender) -> None:
        now = time.monotonic()
        if now - self._last_progress >= 15:
            self._last_progress = now
            self.log(f"progress: {len(sender.sent)} sent, {sender.answered} answered, "
                     f"{sender.in_flight} in flight")

    def _run(self) -> tuple[InvariantReport, dict[str, Any]]:
        self._last_progress = time.monotonic()
        sender = self.sender = Sender(f"http://127.0.0.1:{self.port}", self.secret,
                                      self.plan, self.alchemy_key)
        # A daemon: if the harness itself fails, the process must still exit.
        # Faults are due at fixed points of the run, but one can take half a minute on a
        # loaded machine (a broker restart) and push the rest back: the traffic goes on
        # until the last one is injected, so every fault meets a pipeline under load and
        # a reorg finds deposits to replace.
        faults_pending = threading.Event()
        faults_pending.set()
        thread = threading.Thread(
            target=lambda: asyncio.run(sender.run(self.cfg.rate, self.cfg.duration_s,
                                                  faults_pending)),
            daemon=True)
        started = time.monotonic()
        self.log(f"run {self.run_id}: {self.cfg.rate:.0f} webhooks/s for "
                 f"{self.cfg.duration_s:.0f} s, logs in {self.log_dir}")
        stop_chain = threading.Event()
        chain = threading.Thread(target=self.chain.run,
                                 args=(self.cfg.duration_s, stop_chain, faults_pending),
                                 daemon=True)
        thread.start()
        chain.start()
        # A node fault keeps its node down for a while: the faults after it move back by
        # its length, so they keep their spacing (and each node fault's stall window
        # holds that fault alone).
        shift = 0.0
        for at, kind in self.schedule():
            while time.monotonic() - started < at + shift:
                self._supervise()
                self._progress(sender)
                time.sleep(0.2)
            began = time.monotonic()
            self.inject(kind)
            if kind in nodes.NODE_FAULTS or kind in db_faults.DB_FAULTS:
                shift += time.monotonic() - began
        faults_pending.clear()
        while thread.is_alive():
            self._supervise()
            self._progress(sender)
            thread.join(0.5)
        chain.join(RETRY_BUDGET_S)  # its last deliveries may still be retrying
        stop_chain.set()
        traffic_end = time.monotonic()
        for fault in self.node_faults:
            if fault.window_end is None:
                fault.window_end = time.time()
        self.chain.settle()
        self.log(f"traffic done: {len(sender.sent)} requests, "
                 f"{len(self.chain.deposits)} chain deposits; draining")
        on_chain = {d.tx_hash for d in self.chain.deposits
                    if landed(self.chain.receipt(d.tx_hash))}
        drained_at = self._drain(sender, due_chain(self.chain.deposits, on_chain))
        # The withheld webhooks, now that the scanner credited their transfers.
        self.chain.deliver_late()
        # What the run's users must be told: from the sender's record and the chain.
        expected = ntf.expected_pairs(accepted_events(sender.sent).values(),
                                      expected_books(sender.sent).outcomes,
                                      self.chain.deposits, self.chain.receipt,
                                      self.invoices)
        if drained_at is not None:
            drained_at = self._drain_notifications(expected)
        else:
            self._read_published()
        findings = self._findings(sender, expected)
        stats = {
            "sent": sender.sent, "retries": sender.retries,
            "drain_after_last_fault_s": (drained_at - self.last_fault_at) if drained_at else None,
            "drain_after_traffic_s": (drained_at - traffic_end) if drained_at else None,
            "latencies_ms": sender.latencies_ms,
        }
        return findings, stats

    def _findings(self, sender: Sender, expected: set[ntf.Pair]) -> InvariantReport:
        """Every invariant checked once the run drained: the books, the chain, the
        invoices, the deliveries, and what went wrong with the run itself."""
        conn = connect(database_url("owner"))
        try:
            with conn, conn.cursor() as cur:
                findings = check(cur, sender.sent, self.plan.users, self.forged)
                check_chain(cur, findings, self.chain.deposits, self.chain.receipt)
                inv.check_invoices(cur, findings, self.invoices, sender.sent)
                nodes.measure_stalls(self.node_faults, applied_times(cur, sender.sent))
        finally:
            conn.close()
        self.deliveries = ntf.check_deliveries(expected, self.published, self.receiver,
                                               self.path_of)
        findings.lost += self.deliveries.lost
        findings.double_applied += self.deliveries.twice
        findings.violations += self.deliveries.violations
        findings.violations += [f"fault not injected: {e}" for e in self.fault_errors]
        findings.violations += [f"unexplained exit: {e}" for e in self.unexplained_exits]
        if self.chain.error:
            findings.violations.append(f"chain driver stopped early: {self.chain.error}")
        return findings

    def _drain(self, sender: Sender, chain_due: list[str]) -> float | None:
        deadline = time.monotonic() + self.cfg.drain_timeout_s
        while time.monotonic() < deadline:
            self._supervise()
            try:
                conn = connect(database_url("owner"))
                with conn, conn.cursor() as cur:
                    left = (pending_count(cur, sender.sent)
                            + chain_pending_count(cur, chain_due)
                            + forged_pending_count(cur, self.forged))
                conn.close()
            except Exception as exc:
                self.log(f"drain check failed: {exc}")
                left = -1
            if left == 0:
                return time.monotonic()
            time.sleep(0.5)
        self.log("drain timed out")
        return None

    def _read_published(self) -> None:
        """The notifications topic read to its end once, when the events did not drain
        (their drain's wait is then skipped): the report then counts as lost the intents
        missing from the topic, not every one the run never read."""
        assert self.topic_reader is not None
        try:
            self.topic_reader.catch_up()
        except Exception as exc:
            self.log(f"notifications not read: {exc}")

    def _drain_notifications(self, expected: set[ntf.Pair]) -> float | None:
        """Until every intent the run's users must get is on the topic and answered 2xx
        by the receiver (retries and lapsed leases included)."""
        assert self.topic_reader is not None
        deadline = time.monotonic() + self.cfg.drain_timeout_s
        while time.monotonic() < deadline:
            self._supervise()
            try:
                caught_up = self.topic_reader.catch_up()
            except Exception as exc:  # a broker hiccup: the next turn reads on
                self.log(f"notifications check failed: {exc}")
                caught_up = False
            if (caught_up and expected <= set(self.published.ids)
                    and ntf.undelivered(self.published, self.receiver, self.path_of) == 0):
                return time.monotonic()
            time.sleep(0.5)
        self.log("notifications drain timed out")
        return None


def report(cfg: ChaosConfig, chaos: Chaos, findings: InvariantReport, stats: dict[str, Any]
           ) -> str:
    sent = stats["sent"]
    by_kind = Counter(r.kind.value for r in sent)
    answers = Counter(f"{r.kind.value}:{r.status}" for r in sent)
    lat = sorted(stats["latencies_ms"])
    def pct(q: float) -> float:
        return float(lat[int(q * (len(lat) - 1))]) if lat else float("nan")
    dup = sum(1 for r in sent if r.kind is Kind.REDELIVERY and r.answer == "duplicate")
    lines = [
        "== paystream chaos report ==",
        f"run {chaos.run_id}: {cfg.rate:.0f}/s for {cfg.duration_s:.0f} s, "
        f"{cfg.users} users, seed {cfg.seed}",
        "requests sent by class: " + ", ".join(f"{k}={v}" for k, v in sorted(by_kind.items())),
        "answers: " + ", ".join(f"{k}={v}" for k, v in sorted(answers.items())),
        "sender retries (no answer / 429 / 5xx): "
        + (", ".join(f"{k}={v}" for k, v in sorted(stats["retries"].items())) or "none"),
        "faults injected: " + ", ".join(f"{k}={v}" for k, v in sorted(chaos.faults.items())),
        "final outcomes: " + ", ".join(f"{k}={v}" for k, v in sorted(findings.outcomes.items())),
        f"duplicates absorbed (identical redeliveries answered duplicate): {dup}",
        _unknown_user_line(sent, findings),
        f"forged records produced to {PAYMENTS_TOPIC}: {len(chaos.forged)}; processes "
        f"that exited with no fault to explain it: {len(chaos.unexplained_exits)}",
        _chain_line(chaos.chain.deposits, chaos.chain.retries),
        chain_report_line(findings),
        inv.report_line(findings),
        ntf.report_line(chaos.deliveries) if chaos.deliveries else "notifications: not checked",
        f"ingest latency of answered requests: p50 {pct(0.5):.1f} ms, p99 {pct(0.99):.1f} ms",
        f"kafka nodes: {chaos.s.brokers}",
        *(nodes.describe(f) for f in chaos.node_faults),
        *(("database nodes: 2 (a synchronous standby)",
           *(db_faults.describe(f) for f in chaos.db_faults)) if chaos.s.standby else ()),
        f"time to drain after the last fault: {_secs(stats['drain_after_last_fault_s'])}, "
        f"after the last request: {_secs(stats['drain_after_traffic_s'])}",
        f"lost = {len(findings.lost)}",
        f"double-applied = {len(findings.double_applied)}",
        f"other violations = {len(findings.violations)}",
    ]
    for title, items in (("LOST", findings.lost), ("DOUBLE", findings.double_applied),
                         ("VIOLATION", findings.violations)):
        lines += [f"  {title}: {item}" for item in items[:20]]
    lines.append("RESULT: " + ("PASS" if findings.passed else "FAIL"))
    return "\n".join(lines)


def _unknown_user_line(sent: list[Any], findings: InvariantReport) -> str:
    ghosts = [r for r in sent if r.kind in UNKNOWN_USER]
    refused = sum(1 for r in ghosts if r.status == 422 and r.answer == UNKNOWN_USER_CODE)
    return (f"deposits for unknown users: {len(ghosts)} sent "
            f"({sum(1 for r in ghosts if r.kind is Kind.FLOOD)} in the flood), {refused} "
            f"refused 422 {UNKNOWN_USER_CODE}, "
            f"{findings.outcomes[UNKNOWN_USER_CODE]} accepted and rejected "
            f"{UNKNOWN_USER_CODE} by the ledger")


def _chain_line(deposits: list[ChainDeposit], retries: Counter[str]) -> str:
    accepted = [d for d in deposits if d.accepted]
    return (f"chain deposits: {len(deposits)} sent on anvil, {len(accepted)} accepted "
            f"by ingest, {sum(d.remined for d in deposits)} re-mined and "
            f"{sum(d.dropped for d in deposits)} dropped by reorgs, "
            f"{sum(len(d.redelivered_as) for d in deposits)} redelivered; retries: "
            + (", ".join(f"{k}={v}" for k, v in sorted(retries.items())) or "none"))


def _secs(value: float | None) -> str:
    return "did not drain" if value is None else f"{value:.1f} s"
