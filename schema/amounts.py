"""Money parsing: the one place that decides whether a string is an acceptable amount.

Amounts travel as JSON strings and live as NUMERIC(38,18). A JSON number is refused
(a float has already lost money: Decimal(50.1) is 50.0999999999999943...). Python's
Decimal is too lenient on its own (it accepts "+1", "1_000", " 1", non-ASCII digits,
"NaN", "Infinity"), so the text is matched against an ASCII pattern first.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation, localcontext

AMOUNT_PATTERN = re.compile(r"[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?")
MAX_SCALE = 18  # digits after the point that NUMERIC(38,18) keeps
UPPER_BOUND = Decimal(10) ** 20  # NUMERIC(38,18) holds 20 integer digits
MAX_TEXT_LENGTH = 100  # refuse absurd strings before Decimal sees them


class AmountError(ValueError):
    """An amount that breaks a money rule; the message is the reason shown to clients."""


def parse_amount(value: object) -> Decimal:
    """Parse a wire amount into an exact Decimal or raise AmountError with the reason."""
    if isinstance(value, bool) or not isinstance(value, str):
        kind = "a JSON number" if isinstance(value, int | float) else type(value).__name__
        raise AmountError(f"amount must be a JSON string, got {kind}")
    if len(value) > MAX_TEXT_LENGTH:
        raise AmountError(f"amount is longer than {MAX_TEXT_LENGTH} characters")
    if AMOUNT_PATTERN.fullmatch(value) is None:
        raise AmountError(
            "amount must be ASCII digits with an optional fraction and exponent "
            f"(no sign, spaces or separators), got {value!r}"
        )
    with localcontext() as ctx:
        # Enough precision that nothing is rounded while we inspect the value.
        ctx.prec = 200
        try:
            amount = Decimal(value)
        except InvalidOperation as exc:  # pragma: no cover - the pattern prevents it
            raise AmountError(f"amount is not a number: {value!r}") from exc
        if not amount.is_finite():  # pragma: no cover - the pattern prevents it
            raise AmountError("amount must be finite")
        if amount <= 0:
            raise AmountError("amount must be strictly positive")
        if amount >= UPPER_BOUND:
            raise AmountError("amount must be below 10^20 (NUMERIC(38,18) capacity)")
        normalized = amount.normalize()
        if -normalized.as_tuple().exponent > MAX_SCALE:
            raise AmountError(f"amount has more than {MAX_SCALE} decimal places")
    return _plain(normalized)


def from_base_units(raw: int, decimals: int) -> Decimal:
    """An on-chain integer amount scaled by 10^decimals, exactly (no float, no rounding)."""
    if raw <= 0:
        raise AmountError("on-chain amount must be strictly positive")
    if not 0 <= decimals <= 255:
        raise AmountError(f"token decimals out of range: {decimals}")
    amount = Decimal(raw).scaleb(-decimals)
    return parse_amount(format_amount(amount))


def format_amount(amount: Decimal) -> str:
    """The canonical wire text of an amount: plain notation, no exponent, no trailing zeros."""
    return format(_plain(amount.normalize()), "f")


def _plain(amount: Decimal) -> Decimal:
    # normalize() turns 100 into 1E+2; quantize back to an integer exponent for display.
    if amount.as_tuple().exponent > 0:
        return amount.quantize(Decimal(1))
    return amount
