"""Chain deposits in a chaos run, on the stack's own anvil.

A ChainDriver plays the chain's depositors and the provider at once: it sends real native
transfers to the run's deposit addresses, builds the Alchemy payload from the real
receipt, signs it as Alchemy does and POSTs it to the run's ingest (retrying 5xx, 429 and
transport errors, as Alchemy does), and now and then delivers a payload twice.

A share of the deposits (by the seed) gets no webhook: DROPPED ones never, LATE ones only
after the run's drain, once the chain scanner has credited them (answered duplicate).
Only the scanner, reading the chain's final blocks, can bring those in.

Its faults are the chain's own:
  reorg         anvil_reorg of the last 1-3 blocks, never a finalized one. The transfers
                in them are either dropped, or re-mined in the new blocks (same tx hash,
                another block), and then the provider's new payload is posted.
  node-restart  anvil stopped (SIGTERM, so it dumps its state) and started again: an RPC
                outage for the finality watcher, which must only delay finality.
After the traffic, settle() mines past finality and the watcher's reorg grace, so every
deposit gets its verdict.

All anvil calls hold one lock. A reorg runs on the driver's own thread, between two
deposits, so the blocks it replaces hold deposits the ingest has already accepted (the
interesting case: a credit that must not happen); reorgs alternate between dropping and
re-mining, so a run with two of them has both.
"""

from __future__ import annotations

import queue
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import CancelledError, Future
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import httpx

from paystream.chaos import alchemy
from paystream.chaos.processes import bounce
from paystream.schema.chain import deposit_event_id
from paystream.stack import anvil
from paystream.stack.settings import StackSettings

RETRY_BUDGET_S = 240.0
BACKOFF_S = (0.25, 0.5, 1.0, 2.0)
REORG_GRACE_BLOCKS = 4  # the run's finality watcher: PAYSTREAM_FINALITY_REORG_GRACE_BLOCKS
SENDER_ACCOUNT = 9  # a dev account nothing else on the stack's anvil spends from
DROPPED_SHARE = 0.25  # deposits whose webhook is never sent
LATE_SHARE = 0.1      # deposits whose webhook is sent after the scanner credited them
SENT, DROPPED, LATE = "sent", "dropped", "late"  # ChainDeposit.webhook


def landed(receipt: dict[str, Any] | None) -> bool:
    """Is this receipt (None: not mined now) a transfer that moved the money?"""
    return receipt is not None and int(receipt["status"], 16) == 1


@dataclass
class ChainDeposit:
    """One real transfer to a deposit address, and what the ingest answered for it."""

    tx_hash: str
    user_id: str
    address: str
    wei: int
    block_number: int
    # Its on-chain identity (schema.chain.deposit_event_id), as the webhook and the
    # scanner both name it; `answered_id` is what the ingest answered, if it was asked.
    event_id: str | None = None
    answered_id: str | None = None
    webhook: str = SENT  # SENT, DROPPED (never) or LATE (after the scanner's credit)
    late_answer: str | None = None  # "<status>:<answer status>" of the late delivery
    status: int | None = None    # the first delivery's final HTTP answer
    deliveries: int = 0
    redelivered_as: list[str] = field(default_factory=list)  # answers to later deliveries
    remined: bool = False
    dropped: bool = False

    @property
    def amount(self) -> Decimal:
        return Decimal(self.wei).scaleb(-18)

    @property
    def accepted(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


class ChainDriver:
    def __init__(self, settings: StackSettings, ingest_url: str, signing_key: str,
                 network: str, users: list[str], rng: random.Random, rate: float) -> None:
        self.s = settings
        self.cfg = anvil.AnvilConfig.from_env()
        self.url = ingest_url + "/webhooks/alchemy"
        self.key = signing_key.encode()
        self.network = network
        self.users = users
        self.rng = rng
        self.rate = rate
        self.addresses: dict[str, str] = {}  # user -> deposit address
        self.deposits: list[ChainDeposit] = []
        self.retries: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.sender = ""
        self.reorgs = 0
        self.error: str | None = None  # why run() stopped early, if it did
        # A restarted anvil has no state for the blocks it loaded (anvil_reorg answers
        # "Required data unavailable"): a reorg's fork point must be above this block.
        self.floor = 0
        self._jobs: queue.Queue[Future[str]] = queue.Queue()

    # --- JSON-RPC ---------------------------------------------------------------------

    def rpc(self, method: str, *params: Any) -> Any:
        return anvil.rpc(self.cfg.rpc_url, method, list(params), timeout=10)

    def head(self) -> int:
        return int(self.rpc("eth_blockNumber"), 16)

    def finalized(self) -> int:
        return int(self.rpc("eth_getBlockByNumber", "finalized", False)["number"], 16)

    def receipt(self, tx_hash: str) -> dict[str, Any] | None:
        found = self.rpc("eth_getTransactionReceipt", tx_hash)
        return found if isinstance(found, dict) else None  # null: not (or no longer) mined

    # --- set-up -----------------------------------------------------------------------

    def prepare(self, add_address: Callable[[str, str, str], object]) -> None:
        """A fresh deposit address per user (registered through `add_address(network,
        address, user)`), and the dev account the transfers are sent from."""
        if not anvil.healthy(self.s, self.cfg):
            raise RuntimeError(f"anvil is not answering on {self.cfg.rpc_url}: "
                               "run `paystream stack up`")
        self.sender = self.rpc("eth_accounts")[SENDER_ACCOUNT].lower()
        for user in self.users:
            address = "0x" + self.rng.randbytes(20).hex()
            add_address(self.network, address, user)
            self.addresses[user] = address

    # --- traffic ----------------------------------------------------------------------

    def run(self, duration_s: float, stop: threading.Event,
            faults_pending: threading.Event | None = None) -> None:
        """Send a deposit every 1/rate seconds for `duration_s` (and while
        `faults_pending` is set: a reorg asked for later needs deposits to replace), and
        deliver each one. Whatever stops it early is kept in `self.error`: the run then
        fails."""
        try:
            self._run(duration_s, stop, faults_pending)
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            while not self._jobs.empty():  # nobody will run them now
                self._jobs.get_nowait().cancel()

    def _run(self, duration_s: float, stop: threading.Event,
             faults_pending: threading.Event | None) -> None:
        interval = 1.0 / self.rate
        started = time.monotonic()
        n = 0
        with httpx.Client(timeout=10) as client:
            while ((time.monotonic() - started < duration_s
                    or (faults_pending is not None and faults_pending.is_set()))
                   and not stop.is_set()):
                delay = started + n * interval - time.monotonic()
                if delay > 0:
                    stop.wait(delay)
                n += 1
                deposit = self._transfer()
                if deposit is None:
                    continue
                if deposit.webhook != SENT:
                    self._run_jobs(client)
                    continue
                deposit.status = self._deliver(client, deposit)
                if deposit.accepted and self.rng.random() < 0.1:
                    # A provider retry of a delivery that did arrive: answered duplicate.
                    self._redeliver(client, deposit)
                self._run_jobs(client)

    def _run_jobs(self, client: httpx.Client) -> None:
        """Run the reorgs asked for, once there are blocks to replace (after a node
        restart, wait for a few deposits)."""
        while not self._jobs.empty():
            with self.lock:
                room = self._reorg_room()
            if room < self._min_depth():
                return
            job = self._jobs.get_nowait()
            if not job.set_running_or_notify_cancel():
                continue  # its caller gave up waiting
            try:
                job.set_result(self._reorg(client, room))
            except Exception as exc:  # reported to the fault's caller
                job.set_exception(exc)

    def _reorg_room(self) -> int:
        """How many blocks a reorg may replace now: none finalized, none loaded."""
        head = self.head()
        return min(head - self.finalized(), head - self.floor) - 1

    def _transfer(self) -> ChainDeposit | None:
        user = self.rng.choice(self.users)
        wei = self.rng.randint(1, 5_000) * 10**14  # 0.0001 .. 0.5 ETH
        with self.lock:
            try:
                tx_hash = self.rpc("eth_sendTransaction", {
                    "from": self.sender, "to": self.addresses[user], "value": hex(wei)})
                receipt = self._mined(tx_hash)
            except (httpx.HTTPError, RuntimeError) as exc:
                self.retries[f"rpc:{type(exc).__name__}"] += 1
                return None
        draw = self.rng.random()
        webhook = (DROPPED if draw < DROPPED_SHARE
                   else LATE if draw < DROPPED_SHARE + LATE_SHARE else SENT)
        if not self._jobs.empty():
            # A reorg is due after this deposit: the block it replaces must hold one the
            # ingest accepted (the credit that must not happen), so this one is sent.
            webhook = SENT
        deposit = ChainDeposit(tx_hash.lower(), user, self.addresses[user], wei,
                               int(receipt["blockNumber"], 16),
                               event_id=deposit_event_id(self.network, tx_hash),
                               webhook=webhook)
        self.deposits.append(deposit)
        return deposit

    def _mined(self, tx_hash: str, timeout_s: float = 10.0) -> dict[str, Any]:
        """The receipt of a transaction just sent: automine answers the send before the
        block is always readable on a loaded machine (measured), so poll briefly."""
        deadline = time.monotonic() + timeout_s
        while (receipt := self.receipt(tx_hash)) is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{tx_hash} not mined after {timeout_s:.0f} s")
            time.sleep(0.02)
        return receipt

    def _payload(self, deposit: ChainDeposit) -> tuple[bytes, dict[str, str]] | None:
        with self.lock:
            tx = self.rpc("eth_getTransactionByHash", deposit.tx_hash)
            receipt = self.receipt(deposit.tx_hash)
        if tx is None or receipt is None:
            return None  # reorged out before the provider saw it: nothing to deliver
        activity = alchemy.external_activity(tx, receipt)
        return alchemy.signed(alchemy.payload([activity], network=self.network), self.key)

    def _post(self, client: httpx.Client, deposit: ChainDeposit
              ) -> tuple[int | None, dict[str, Any]]:
        """POST until a 2xx or 4xx answer (a fresh payload each attempt, as the block may
        have moved) or the retry budget ends."""
        deadline = time.monotonic() + RETRY_BUDGET_S
        attempt = 0
        while True:
            attempt += 1
            try:
                signed = self._payload(deposit)
                if signed is None:
                    return None, {}
                body, headers = signed
                resp = client.post(self.url, content=body, headers=headers)
            except (httpx.HTTPError, RuntimeError) as exc:
                reason = type(exc).__name__
            else:
                if resp.status_code < 500 and resp.status_code != 429:
                    deposit.deliveries += 1
                    try:
                        return resp.status_code, resp.json()
                    except ValueError:
                        return resp.status_code, {}
                reason = str(resp.status_code)
            self.retries[reason] += 1
            if time.monotonic() > deadline:
                return None, {}
            time.sleep(BACKOFF_S[min(attempt - 1, len(BACKOFF_S) - 1)])

    def _deliver(self, client: httpx.Client, deposit: ChainDeposit) -> int | None:
        status, answer = self._post(client, deposit)
        events = answer.get("events") or []
        if events:
            deposit.answered_id = events[0].get("event_id")
        return status

    def deliver_late(self) -> None:
        """Send the LATE deposits' webhooks now (after the drain: the scanner has
        credited every transfer on the chain); a transfer no longer mined has none."""
        with httpx.Client(timeout=10) as client:
            for deposit in self.deposits:
                if deposit.webhook == LATE and landed(self.receipt(deposit.tx_hash)):
                    status, answer = self._post(client, deposit)
                    deposit.late_answer = f"{status}:{answer.get('status')}"

    def _redeliver(self, client: httpx.Client, deposit: ChainDeposit) -> None:
        status, answer = self._post(client, deposit)
        deposit.redelivered_as.append(f"{status}:{answer.get('status')}")

    # --- faults -----------------------------------------------------------------------

    def reorg(self, timeout: float = 60.0) -> str:
        """Ask the driver's thread for a reorg at its next pause; wait for the result."""
        if self.error:
            raise RuntimeError(f"the chain driver has stopped ({self.error})")
        job: Future[str] = Future()
        self._jobs.put(job)
        try:
            return job.result(timeout=timeout)
        except (TimeoutError, CancelledError):
            job.cancel()
            raise RuntimeError(f"the chain driver did not run the reorg within "
                               f"{timeout:.0f} s ({self.error or 'still busy'})") from None

    def _remine_next(self) -> bool:
        return self.reorgs % 2 == 1

    def _min_depth(self) -> int:
        """A re-mining reorg replaces two blocks at least. Its transfers go into the last
        new block, so at depth 1 the new block holds the same transfer on the same
        parent, and after an anvil restart anvil mines it identical: the same hash, no
        reorg (measured: 3 of 3 after a restart, 0 of 6 without one; depth 2 always
        changed the block). The run failed on it just after anvil restarts, when few
        blocks had been mined since and the room often left depth 1 only."""
        return 2 if self._remine_next() else 1

    def _reorg(self, client: httpx.Client, room: int) -> str:
        """Replace the last 1-3 unfinalized blocks; drop or re-mine their transfers."""
        remine = self._remine_next()
        min_depth = self._min_depth()
        self.reorgs += 1
        with self.lock:
            head = self.head()
            depth = min(self.rng.randint(min_depth, 3), room)
            hashes = [tx.lower() for n in range(head - depth + 1, head + 1)
                      for tx in self.rpc("eth_getBlockByNumber", hex(n), False)
                      ["transactions"]]
            raws = ([self.rpc("eth_getRawTransactionByHash", h) for h in hashes]
                    if remine else [])
            fork = head - depth + 1
            replaced = self.rpc("eth_getBlockByNumber", hex(fork), False)["hash"]
            # All re-mined transfers go into the last new block: another block, same tx.
            self.rpc("anvil_reorg", depth, [[raw, depth - 1] for raw in raws])
            now = self.rpc("eth_getBlockByNumber", hex(fork), False)["hash"]
        if now == replaced:  # the fault did not happen: the run must not count it
            raise RuntimeError(f"anvil_reorg left block {fork} as it was ({now})")
        ours = {d.tx_hash: d for d in self.deposits}
        moved = [ours[h] for h in hashes if h in ours]
        for deposit in moved:
            deposit.remined, deposit.dropped = remine, not remine
        for deposit in moved:
            if remine and deposit.accepted:  # the provider tells us about the new block
                self._redeliver(client, deposit)
        return (f"depth {depth}, {len(moved)} deposit(s) "
                f"{'re-mined' if remine else 'dropped'}")

    def restart_node(self, pause: float) -> str:
        with self.lock:
            done = bounce("anvil", self.cfg.port, lambda: anvil.pid(self.s, self.cfg),
                          lambda: anvil.stop(self.s, self.cfg),
                          lambda: anvil.start(self.s, self.cfg), pause)
            self.floor = self.head()
        return done

    def settle(self) -> None:
        """Mine past finality and the reorg grace: every deposit can now be judged."""
        with self.lock:
            self.rpc("anvil_mine", hex(self.cfg.finality_depth + REORG_GRACE_BLOCKS + 2))
