"""The webhooks the chaos run sends: a deterministic mix, by seed, of the request classes
a real gateway produces (and a few it should not)."""

from __future__ import annotations

import json
import random
import uuid
from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum
from typing import Any

from paystream.chaos import alchemy
from paystream.finality.evidence import TRANSFER_TOPIC

ASSETS = ("USD", "EUR", "BTC")


class Kind(StrEnum):
    DEPOSIT = "deposit"              # a new credit
    WITHDRAWAL = "withdrawal"        # a new debit (may be rejected: insufficient funds)
    REDELIVERY = "redelivery"        # an identical retry of an accepted request
    CONFLICT = "conflict"            # an accepted event id with other content: 409
    INVALID = "invalid"              # bad signature or body: 4xx, nothing written
    POISON = "poison"                # a deposit for a user nobody created: refused
    FLOOD = "flood"                  # the same, many at once (harness: unknown-user-flood)
    HOSTILE = "hostile"              # a valid deposit in an odd form: applied exactly
    HOSTILE_CHAIN = "hostile_chain"  # a signed Alchemy delivery nothing may credit: 200
    HOLD = "hold"                    # a withdrawal_requested: available -> held (or refused)
    CLOSE = "close"                  # a settle or failure of an answered hold (maybe closed)
    REFUND = "refund"                # a refund of an answered deposit (maybe too much)
    INVOICE_PAYMENT = "invoice_payment"  # a deposit naming one of the run's invoices


# Shares of the mix; redeliveries ~10% as the issue asks. Invoice payments are deposits
# too: their share is taken from the plain deposits'.
MIX = ((Kind.DEPOSIT, 0.38), (Kind.WITHDRAWAL, 0.20), (Kind.REDELIVERY, 0.10),
       (Kind.CONFLICT, 0.03), (Kind.INVALID, 0.05), (Kind.POISON, 0.03),
       (Kind.HOSTILE, 0.04), (Kind.HOSTILE_CHAIN, 0.01), (Kind.HOLD, 0.05),
       (Kind.CLOSE, 0.04), (Kind.REFUND, 0.03), (Kind.INVOICE_PAYMENT, 0.04))
# Kinds that record a new event when accepted (and so must be accepted: 2xx).
NEW_EVENTS = (Kind.DEPOSIT, Kind.WITHDRAWAL, Kind.HOSTILE, Kind.HOLD, Kind.CLOSE,
              Kind.REFUND, Kind.INVOICE_PAYMENT)
# Deposits for users nobody created: the ingest refuses them (422 unknown_user); one it
# let in is the ledger's final rejection unknown_user. Never money, never a dead letter.
UNKNOWN_USER = (Kind.POISON, Kind.FLOOD)
UNKNOWN_USER_CODE = "unknown_user"
# Kinds whose accepted events move the sender's users' money, in the order answered.
MONEY = (Kind.DEPOSIT, Kind.WITHDRAWAL, Kind.HOSTILE, Kind.HOLD, Kind.CLOSE, Kind.REFUND,
         Kind.INVOICE_PAYMENT)
HOSTILE_FLAVOURS = ("tiny", "precision", "exponent", "escaped", "decorated")
HOSTILE_CHAIN_FLAVOURS = ("block-beyond-int64", "nft", "stranger", "removed-log")


@dataclass(frozen=True)
class InvoicePayment:
    """A payment the traffic owes one of the run's invoices (chaos/invoices.py plans
    them): a gateway deposit of `amount` by the invoice's user, naming it."""

    invoice_id: str
    user_id: str
    asset: str
    amount: str


@dataclass
class Request:
    """One webhook (first attempt and its retries share `webhook_id` and `body`)."""
    kind: Kind
    event_id: str
    event_type: str
    user_id: str
    asset: str
    amount: str
    body: bytes
    webhook_id: str
    bad_signature: bool = False
    original: Request | None = None  # what a redelivery or conflict repeats
    reference: str | None = None     # the hold a close names, the deposit a refund does
    endpoint: str = "payments"       # the webhook path: payments or alchemy
    invoice_id: str | None = None    # the invoice a deposit names (an invoice payment)
    # Filled in by the sender:
    status: int | None = None
    answer: str | None = None  # the body's "status" (accepted / duplicate) or error
    attempts: int = 0
    answered_seq: int | None = None  # the order answers came back in, run-wide
    extra: dict[str, Any] = field(default_factory=dict)


class TrafficPlan:
    def __init__(self, run_id: str, users: int, seed: int) -> None:
        self.rng = random.Random(seed)
        self.run_id = run_id
        self.users = [f"chaos-{run_id}-u{i}" for i in range(users)]
        self.seq = 0
        self.answered_ok: list[Request] = []  # accepted originals, for redeliveries
        self.answered_holds: list[Request] = []  # accepted holds, for their closes
        self.answered_deposits: list[Request] = []  # accepted deposits, for refunds
        # Set once the chain driver has registered them (hostile Alchemy deliveries).
        self.network = "ETH_MAINNET"
        self.chain_addresses: list[str] = []
        # Set once the harness has created the run's invoices: what is left to pay them.
        self.invoice_payments: list[InvoicePayment] = []

    def _event_id(self) -> str:
        self.seq += 1
        return f"chaos-{self.run_id}-e{self.seq}"

    def _amount(self, low: int, high: int) -> str:
        cents = self.rng.randint(low * 100, high * 100)
        return str(Decimal(cents).scaleb(-2))

    def next(self) -> Request:
        kind = self.rng.choices([k for k, _ in MIX], [w for _, w in MIX])[0]
        if ((kind in (Kind.REDELIVERY, Kind.CONFLICT) and not self.answered_ok)
                or (kind is Kind.CLOSE and not self.answered_holds)
                or (kind is Kind.REFUND and not self.answered_deposits)
                or (kind is Kind.INVOICE_PAYMENT and not self.invoice_payments)):
            kind = Kind.DEPOSIT
        if kind is Kind.REDELIVERY:
            orig = self.rng.choice(self.answered_ok)
            return Request(kind, orig.event_id, orig.event_type, orig.user_id, orig.asset,
                           orig.amount, orig.body, orig.webhook_id, original=orig)
        if kind is Kind.CONFLICT:
            orig = self.rng.choice(self.answered_ok)
            amount = str(Decimal(orig.amount) + Decimal("0.01"))
            return self._build(kind, orig.event_type, orig.user_id, orig.asset, amount,
                               event_id=orig.event_id, original=orig)
        if kind is Kind.CLOSE:
            # Any answered hold, closed already or not (then: hold_not_open).
            hold = self.rng.choice(self.answered_holds)
            event_type = self.rng.choice(("withdrawal_settled", "withdrawal_settled",
                                          "withdrawal_failed"))
            return self._build(kind, event_type, hold.user_id, hold.asset, hold.amount,
                               reference=hold.event_id)
        if kind is Kind.REFUND:
            # Up to the whole deposit: several refunds of one may add up to too much.
            deposit = self.rng.choice(self.answered_deposits)
            cents = int(Decimal(deposit.amount) * 100)
            amount = str(Decimal(self.rng.randint(1, max(cents, 1))).scaleb(-2))
            return self._build(kind, "refund", deposit.user_id, deposit.asset, amount,
                               reference=deposit.event_id)
        if kind is Kind.INVOICE_PAYMENT:
            # Any invoice's next payment: an invoice's two partial payments go out at
            # unrelated moments (chaos/invoices.py plans them so their order is moot).
            due = self.invoice_payments.pop(self.rng.randrange(len(self.invoice_payments)))
            return self._build(kind, "deposit", due.user_id, due.asset, due.amount,
                               invoice_id=due.invoice_id)
        user = self.rng.choice(self.users)
        asset = self.rng.choice(ASSETS)
        if kind is Kind.HOLD:
            return self._build(kind, "withdrawal_requested", user, asset,
                               self._amount(1, 300))
        if kind is Kind.WITHDRAWAL:
            event_type = self.rng.choice(("withdrawal", "withdrawal", "withdrawal_fee"))
            return self._build(kind, event_type, user, asset, self._amount(1, 400))
        if kind is Kind.HOSTILE:
            return self._hostile(user, asset)
        if kind is Kind.HOSTILE_CHAIN:
            return self._hostile_chain()
        if kind is Kind.POISON:
            return self._ghost_deposit(kind, asset)
        if kind is Kind.INVALID:
            flavour = self.rng.choice(("signature", "float", "type"))
            req = self._build(kind, "deposit", user, asset, self._amount(1, 100))
            if flavour == "signature":
                req.bad_signature = True
            else:
                body = json.loads(req.body)
                if flavour == "float":
                    body["amount"] = float(req.amount)
                else:
                    body["event_type"] = "bonus"
                req.body = json.dumps(body).encode()
            req.extra["flavour"] = flavour
            return req
        return self._build(kind, "deposit", user, asset, self._amount(1, 500))

    def _ghost_deposit(self, kind: Kind, asset: str) -> Request:
        """A properly signed deposit for a user nobody created."""
        return self._build(kind, "deposit", f"chaos-{self.run_id}-ghost{self.seq}", asset,
                           self._amount(1, 100))

    def flood(self, count: int) -> list[Request]:
        """`count` deposits from the gateway for as many users nobody created: what a
        provider sends when its idea of our users has drifted from ours (a benchmark
        against an empty database once sent 184,000)."""
        return [self._ghost_deposit(Kind.FLOOD, self.rng.choice(ASSETS))
                for _ in range(count)]

    def _build(self, kind: Kind, event_type: str, user: str, asset: str, amount: str, *,
               event_id: str | None = None, original: Request | None = None,
               reference: str | None = None, invoice_id: str | None = None) -> Request:
        event_id = event_id or self._event_id()
        if original is not None:
            reference, invoice_id = original.reference, original.invoice_id
        fields: dict[str, Any] = {"event_id": event_id, "event_type": event_type,
                                  "user_id": user, "amount": amount, "asset": asset}
        if reference is not None:
            fields["reverses" if event_type == "refund" else "hold_id"] = reference
        if invoice_id is not None:
            fields["invoice_id"] = invoice_id
        return Request(kind, event_id, event_type, user, asset, amount,
                       json.dumps(fields).encode(),
                       "msg_" + uuid.UUID(int=self.rng.getrandbits(128)).hex,
                       original=original, reference=reference, invoice_id=invoice_id)

    def _hostile(self, user: str, asset: str) -> Request:
        """A deposit the gateway may send and the ingest must accept, in a form that
        tests its parsing and the path to the ledger: the journal must hold exactly the
        amount meant."""
        flavour = self.rng.choice(HOSTILE_FLAVOURS)
        if flavour == "tiny":
            meant, wire = "0.000000000000000001", "0.000000000000000001"
        elif flavour == "precision":  # all 18 decimals
            meant = f"{self.rng.randint(0, 99)}.{self.rng.randint(1, 10**18 - 1):018d}"
            wire = meant
        elif flavour == "exponent":  # an exponent the amount rules allow
            mantissa = self.rng.randint(1, 99_999)
            meant, wire = str(Decimal(mantissa).scaleb(-3)), f"{mantissa}E-3"
        else:
            meant = wire = self._amount(1, 100)
        req = self._build(Kind.HOSTILE, "deposit", user, asset, meant)
        body: dict[str, Any] = {"event_id": req.event_id, "event_type": "deposit",
                                "user_id": user, "amount": wire, "asset": asset}
        if flavour == "escaped":  # every character of the text fields as \uXXXX
            req.body = ("{" + ",".join(f'"{k}":"{_escaped(v)}"' for k, v in body.items())
                        + "}").encode()
        elif flavour == "decorated":  # fields the gateway adds that paystream ignores
            body = {**body, "metadata": {
                "note": "💸 ünïcødé \u2028 " * 500, "empty": [], "nothing": {},
                "big": 2**64 + 5, "huge": 10**60, "tiny": 1e-300, "nested": _nested(40),
                "mixed": [1, "one", 1.5, None, True]}}
            req.body = json.dumps(body, ensure_ascii=False).encode()
        else:
            req.body = json.dumps(body).encode()
        req.extra["flavour"] = flavour
        return req

    def _hostile_chain(self) -> Request:
        """An Alchemy delivery, correctly signed, that can never credit anyone."""
        flavour = self.rng.choice(HOSTILE_CHAIN_FLAVOURS)
        tx = "0x" + uuid.UUID(int=self.rng.getrandbits(128)).hex * 2
        to = (self.rng.choice(self.chain_addresses) if self.chain_addresses
              else _address(self.rng))
        activity: dict[str, Any] = {
            "fromAddress": _address(self.rng), "toAddress": to, "blockNum": hex(1000),
            "hash": tx, "value": 0.5, "erc721TokenId": None, "erc1155Metadata": None,
            "asset": "ETH", "category": "external",
            "rawContract": {"rawValue": hex(5 * 10**17), "decimals": 18}}
        if flavour == "block-beyond-int64":
            activity["blockNum"] = hex(2**64 + 5)
        elif flavour == "nft":  # Alchemy's documented ERC-721 form: no hash, no blockNum
            activity.update(category="token", erc721TokenId="0x1", asset=None,
                            rawContract={"rawValue": "0x", "address": _address(self.rng)})
            del activity["blockNum"], activity["hash"]
        elif flavour == "stranger":  # an address nobody registered
            activity.update(toAddress=_address(self.rng), value=1e308)
        else:  # a token log the node has since removed
            contract = _address(self.rng)
            activity.update(category="token", asset="USDC", rawContract={
                "rawValue": hex(10**6), "address": contract, "decimals": 6}, log={
                "address": contract, "data": hex(10**6), "blockNumber": hex(1000),
                "transactionHash": tx, "transactionIndex": "0x0", "logIndex": "0x0",
                "blockHash": "0x" + "ab" * 32, "removed": True,
                "topics": [TRANSFER_TOPIC, "0x" + "0" * 24 + activity["fromAddress"][2:],
                           "0x" + "0" * 24 + to[2:]]})
        body = json.dumps(alchemy.payload([activity], network=self.network),
                          separators=(",", ":")).encode()
        req = Request(Kind.HOSTILE_CHAIN, tx, "deposit", "", "ETH", "0", body, "",
                      endpoint="alchemy")
        req.extra["flavour"] = flavour
        return req

    def note_answer(self, req: Request) -> None:
        if req.status is None or not 200 <= req.status < 300:
            return
        # An invoice payment is redelivered and conflicted like any deposit; it is not
        # refunded (what a refund does to an invoice is not the run's question).
        if req.kind in (Kind.DEPOSIT, Kind.WITHDRAWAL, Kind.INVOICE_PAYMENT):
            self.answered_ok.append(req)
        if req.kind is Kind.DEPOSIT:
            self.answered_deposits.append(req)
        elif req.kind is Kind.HOLD:
            self.answered_holds.append(req)


def _escaped(text: str) -> str:
    return "".join(f"\\u{ord(c):04x}" for c in text)


def _nested(depth: int) -> Any:
    value: Any = {}
    for level in range(depth - 1):
        value = [value] if level % 2 == 0 else {"k": value}
    return value


def _address(rng: random.Random) -> str:
    return "0x" + f"{rng.getrandbits(160):040x}"
