"""What an event type is: its declaration, and the registry of the declared ones.

An EventType is its wire name (a `str`, as the enum it replaces was) carrying everything
the other parts need to know about it, fixed when it is declared:

  shape            what the ledger does with it (Shape: the ledger plans and posts by
                   shape, never by name)
  counter          the platform's side of a credit or a debit (Counter: the gateway's
                   settlement account, fees, adjustments)
  gateway          whether a payment gateway may send it (the rest come from the
                   operator, the API and the expiry scheduler)
  intents          the notification intent (its wire name) each outcome that moved
                   money raises; `rejected_intent` the one any rejection raises
  hold_state       the state a hold's close leaves the hold in
  reverses         what a reversal may reverse (Reach)

and what follows from the shape, precomputed as plain attributes: the ledger reads them
several times per event, and an attribute of the instance costs a third of an enum's
property or of a set membership on the enum (which hashes in Python).

`declare` is the only way to make one; `EventType("deposit")` looks a declared one up
(ValueError if none), `for t in EventType` walks them in declaration order, and
`EventType.DEPOSIT` names a declared one by its upper-cased wire name.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from paystream.schema.accounts import PLATFORM, AccountKind, AccountRef
from paystream.schema.holds import HoldState
from paystream.schema.processed_events import Outcome

# A wire name goes into the payment_events CHECK and into Kafka headers: keep it plain.
WIRE_NAME = re.compile(r"[a-z][a-z0-9_]{0,62}")


class Shape(StrEnum):
    """What the ledger does with an event (consumers/ledger/postings.py has the table)."""

    CREDIT = "credit"              # available +X, counter -X; always applied
    DEBIT = "debit"                # available -X, counter +X; refused when available
                                   # falls short or the user owes a shortfall
    FORCED_DEBIT = "forced_debit"  # available -T, receivable -(X-T), counter +X: never
                                   # refused, what available lacks is owed (shortfall)
    HOLD = "hold"                  # available -(X+F), held +(X+F) (F: its fee)
    HOLD_SETTLE = "hold_settle"    # the hold paid out: settlement +X, fees +F, rest back
    HOLD_RELEASE = "hold_release"  # the hold back to available, whole
    REVERSAL = "reversal"          # the original's postings, taken back (of a credit:
                                   # what available lacks is owed)


# The shapes with a counter-account of their own, which a revert may reverse.
PLAIN_SHAPES = frozenset({Shape.CREDIT, Shape.DEBIT, Shape.FORCED_DEBIT})
_HOLD_CLOSES = frozenset({Shape.HOLD_SETTLE, Shape.HOLD_RELEASE})


class Reach(StrEnum):
    """What a reversal may reverse."""

    GATEWAY_CREDITS = "gateway_credits"  # a credit a gateway sent, of the same provider
    ANY_PLAIN = "any_plain"              # any credit or debit, of any provider


@dataclass(frozen=True, slots=True)
class Counter:
    """The platform's account a credit or a debit posts against: `kind`, owned by the
    event's provider (a gateway's settlement) or by the platform (fees, adjustments)."""

    kind: AccountKind
    per_provider: bool = False

    def __post_init__(self) -> None:
        assert not self.kind.is_user, f"{self.kind} is a user's account, not a counter"

    def account(self, provider: str, asset: str) -> AccountRef:
        return AccountRef(self.kind, provider if self.per_provider else PLATFORM, asset)


SETTLEMENT = Counter(AccountKind.SETTLEMENT, per_provider=True)
FEES = Counter(AccountKind.FEES)
ADJUSTMENTS = Counter(AccountKind.ADJUSTMENTS)


# Every declared type by its wire name, in declaration order. Only declare() and
# retract() change it; the readers of wire names look types up here (a dict lookup, a
# tenth of EventType(name)'s cost), so a type declared later is found too.
BY_NAME: dict[str, EventType] = {}


class _Registry(type):
    """EventType's class: the declared types, walked in declaration order."""

    def __iter__(cls) -> Iterator[EventType]:
        return iter(list(BY_NAME.values()))

    def __len__(cls) -> int:
        return len(BY_NAME)

    if TYPE_CHECKING:  # EventType.DEPOSIT: set by declare(), unknown to a type checker
        def __getattr__(cls, name: str) -> EventType: ...


class EventType(str, metaclass=_Registry):
    """A declared event type: its wire name, and what it is (module docstring)."""

    value: str
    name: str
    shape: Shape
    counter: Counter | None
    gateway: bool
    intents: Mapping[Outcome, str]
    rejected_intent: str
    hold_state: HoldState | None
    reverses: Reach | None
    # Following from the shape:
    is_credit: bool                # adds to available without any check
    closes_hold: bool
    is_reversal: bool
    reference_field: str | None    # the wire name of the event id it must name
    carries_fee: bool              # a hold and its settlement may carry a fee
    second_phase: bool             # names a hold or an original, or may fall short
    plain: tuple[bool, Counter] | None  # (a credit?, its counter) of a credit or a debit

    def __new__(cls, value: str) -> EventType:
        """The declared type of wire name `value` (as an enum's lookup)."""
        found = BY_NAME.get(value)
        if found is None:
            raise ValueError(f"{value!r} is not a declared event type")
        return found

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"an event type is fixed where it is declared ({name})")

    def __repr__(self) -> str:
        return f"EventType({self.value!r})"

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (EventType, (self.value,))

    def may_reverse(self, original: EventType) -> bool:
        """Whether this reversal may reverse an event of type `original`."""
        if self.reverses is Reach.GATEWAY_CREDITS:
            return original.is_credit and original.gateway
        return self.reverses is Reach.ANY_PLAIN and original.shape in PLAIN_SHAPES


def declare(wire: str, shape: Shape, *, counter: Counter | None = None,
            gateway: bool = False, intents: Mapping[Outcome, str],
            rejected_intent: str = "balance.rejected", hold_state: HoldState | None = None,
            reverses: Reach | None = None) -> EventType:
    """Declare the event type `wire`: the one place that says what it is. Refuses a
    declaration that is incomplete or contradicts its shape."""
    assert WIRE_NAME.fullmatch(wire), f"event type {wire!r}: a wire name is [a-z0-9_]"
    assert wire not in BY_NAME, f"event type {wire!r} is declared twice"
    assert not hasattr(EventType, wire.upper()), f"{wire!r} shadows EventType.{wire.upper()}"
    assert (counter is not None) == (shape in PLAIN_SHAPES), (
        f"{wire}: a credit or debit names its counter-account, nothing else does")
    assert (hold_state is not None) == (shape in _HOLD_CLOSES), (
        f"{wire}: a hold's close names the state it leaves the hold in")
    assert (reverses is not None) == (shape is Shape.REVERSAL), (
        f"{wire}: a reversal says what it may reverse")
    assert not any(o.is_rejection for o in intents), f"{wire}: rejections raise rejected_intent"
    closes = shape in _HOLD_CLOSES
    event_type = str.__new__(EventType, wire)
    event_type.__dict__.update(
        value=str(wire), name=wire.upper(), shape=shape, counter=counter, gateway=gateway,
        intents=MappingProxyType(dict(intents)), rejected_intent=rejected_intent,
        hold_state=hold_state, reverses=reverses,
        is_credit=shape is Shape.CREDIT, closes_hold=closes,
        is_reversal=shape is Shape.REVERSAL,
        reference_field="hold_id" if closes else "reverses" if reverses else None,
        carries_fee=shape in (Shape.HOLD, Shape.HOLD_SETTLE),
        second_phase=shape not in (Shape.CREDIT, Shape.DEBIT),
        plain=(shape is Shape.CREDIT, counter) if shape in (Shape.CREDIT, Shape.DEBIT)
        else None)
    BY_NAME[wire] = event_type
    type.__setattr__(EventType, event_type.name, event_type)
    return event_type


def retract(event_type: EventType) -> None:
    """Forget a declared type: for a test that declares one for its own duration."""
    del BY_NAME[event_type.value]
    type.__delattr__(EventType, event_type.name)


def declared(name: str) -> EventType | None:
    """The declared type of wire name `name`, or None."""
    return BY_NAME.get(name)
