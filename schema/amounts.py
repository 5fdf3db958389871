"""Money parsing: the one place that decides whether a string is an acceptable amount.

Amounts travel as JSON strings and live as NUMERIC(38,18). A JSON number is refused
(a float has already lost money: Decimal(50.1) is 50.0999999999999943...). Python's
Decimal is too lenient on its own (it accepts "+1", "1_000", " 1", non-ASCII digits,
"NaN", "Infinity"), so the text is matched against an ASCII pattern first.

Every check below works on the digits and exponent of the exact Decimal, never through
a decimal context: context arithmetic (normalize, scaleb, quantize) rounds to the
context precision (28 digits by default) and underflows tiny exponents to zero, and a
NUMERIC(38,18) amount has up to 38 significant digits.
"""

from __future__ import annotations

import re
from decimal import Context, Decimal, InvalidOperation

AMOUNT_PATTERN = re.compile(r"[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?")
# Text that is already canonical and within NUMERIC(38,18): no exponent, no leading zero,
# no trailing fractional zero, at most 20 digits before the point and 18 after, not zero.
# Every amount paystream writes is such text (format_amount), so the consumers' hot path
# takes it straight to Decimal; anything else goes through the full checks.
CANONICAL_PATTERN = re.compile(r"[1-9][0-9]{0,19}(\.[0-9]{0,17}[1-9])?|0\.[0-9]{0,17}[1-9]")
MAX_SCALE = 18  # digits after the point that NUMERIC(38,18) keeps
MAX_INTEGER_DIGITS = 20  # NUMERIC(38,18) holds 20 digits before the point
UPPER_BOUND = Decimal(10) ** MAX_INTEGER_DIGITS
MAX_TEXT_LENGTH = 100  # refuse absurd strings before Decimal sees them
# Arithmetic on amounts (sums, a tolerance's share): exact for any sum of a few
# NUMERIC(38,18) amounts, where the default context keeps 28 digits and rounds.
EXACT_CONTEXT = Context(prec=60)


class AmountError(ValueError):
    """An amount that breaks a money rule; the message is the reason shown to clients."""


def parse_amount(value: object) -> Decimal:
    """Parse a wire amount into an exact, canonical Decimal or raise AmountError."""
    if isinstance(value, bool) or not isinstance(value, str):
        kind = "a JSON number" if isinstance(value, int | float) else type(value).__name__
        raise AmountError(f"amount must be a JSON string, got {kind}")
    if CANONICAL_PATTERN.fullmatch(value) is not None:
        return Decimal(value)  # exact, canonical and in range: _checked would return it
    if len(value) > MAX_TEXT_LENGTH:
        raise AmountError(f"amount is longer than {MAX_TEXT_LENGTH} characters")
    if AMOUNT_PATTERN.fullmatch(value) is None:
        raise AmountError(
            "amount must be ASCII digits with an optional fraction and exponent "
            f"(no sign, spaces or separators), got {value!r}"
        )
    try:
        amount = Decimal(value)  # exact: the constructor never rounds
    except InvalidOperation as exc:  # pragma: no cover - the pattern prevents it
        raise AmountError(f"amount is not a number: {value!r}") from exc
    return _checked(amount)


def from_base_units(raw: int, decimals: int) -> Decimal:
    """An on-chain integer amount scaled by 10^decimals, exactly (no float, no rounding)."""
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise AmountError("on-chain amount must be an integer")
    if raw <= 0:
        raise AmountError("on-chain amount must be strictly positive")
    if isinstance(decimals, bool) or not isinstance(decimals, int) or not 0 <= decimals <= 255:
        raise AmountError(f"token decimals out of range: {decimals}")
    if raw >= 10 ** (MAX_INTEGER_DIGITS + decimals):  # before str(): no huge conversions
        raise AmountError("amount must be below 10^20 (NUMERIC(38,18) capacity)")
    return _checked(Decimal((0, tuple(int(d) for d in str(raw)), -decimals)))


def format_amount(amount: Decimal) -> str:
    """The canonical wire text of an amount: plain notation, no exponent, no trailing zeros
    (and never "-0")."""
    # Decimal's "f" without a precision is exact (no context rounds it); trimming that
    # text costs a seventh of rebuilding the digit tuple (_canonical), and the merchant
    # API formats three amounts per balance in every answer.
    return canonical_text(format(amount, "f"))


def canonical_text(plain: str) -> str:
    """format_amount of the number `plain` spells in plain notation (format(d, "f"), or
    Postgres' NUMERIC text output, which never uses an exponent): its trailing
    fractional zeros dropped, "-0" as "0". Exact: only zeros are removed."""
    if "." in plain:
        plain = plain.rstrip("0").rstrip(".")
    return "0" if plain == "-0" else plain


def _checked(amount: Decimal) -> Decimal:
    """Apply the money rules to an exact Decimal; return its canonical form."""
    if not amount.is_finite():  # pragma: no cover - the pattern prevents it
        raise AmountError("amount must be finite")
    if amount <= 0:
        raise AmountError("amount must be strictly positive")
    # adjusted() is the exact power of ten of the leading digit; checked before
    # _canonical so "1e999999999" is refused without spelling out its zeros.
    if amount.adjusted() >= MAX_INTEGER_DIGITS:
        raise AmountError("amount must be below 10^20 (NUMERIC(38,18) capacity)")
    canonical = _canonical(amount)
    exponent = canonical.as_tuple().exponent
    # Always an int here (the amount is finite); the check tells the type checker so.
    if not isinstance(exponent, int) or -exponent > MAX_SCALE:
        raise AmountError(f"amount has more than {MAX_SCALE} decimal places")
    return canonical


def _canonical(amount: Decimal) -> Decimal:
    """Drop trailing fractional zeros and spell out positive exponents, exactly.

    50.000 -> 50, 1.50 -> 1.5, 1E+2 -> 100; built from the digit tuple, so no
    precision or exponent limit of a decimal context can round it.
    """
    sign, digits, exponent = amount.as_tuple()
    if not isinstance(exponent, int):  # NaN or infinity: the exponent is a letter
        return amount
    if not any(digits):  # zero has no sign on the wire or in a report: never "-0"
        return Decimal((0, (0,), 0))
    digit_list = list(digits)
    while exponent < 0 and digit_list[-1] == 0:
        digit_list.pop()
        exponent += 1
    if exponent > 0:
        digit_list.extend([0] * exponent)
        exponent = 0
    while len(digit_list) > 1 and digit_list[0] == 0:
        digit_list.pop(0)
    return Decimal((sign, tuple(digit_list), exponent))
