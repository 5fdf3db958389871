"""Every amount rule of providers.md and its boundaries (schema/amounts.py)."""

from __future__ import annotations

from decimal import Context, Decimal

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from paystream.schema.amounts import (
    MAX_TEXT_LENGTH,
    AmountError,
    format_amount,
    from_base_units,
    parse_amount,
)
from paystream.schema.events import EventType, PaymentEvent


@pytest.mark.parametrize("value", [50.1, 50, 0, True, None, ["1"], {"a": "1"}])
def test_only_json_strings_are_amounts(value: object) -> None:
    with pytest.raises(AmountError, match="must be a JSON string"):
        parse_amount(value)


def test_a_float_is_refused_because_it_already_lost_money() -> None:
    as_float = 50.1
    assert Decimal(as_float) != Decimal("50.1")  # the reason for the rule
    with pytest.raises(AmountError, match="JSON number"):
        parse_amount(50.1)


@pytest.mark.parametrize("text", [" 1", "1 ", "\t1", "1\n", " 1 "])
def test_surrounding_whitespace_is_refused(text: str) -> None:
    with pytest.raises(AmountError, match="ASCII digits"):
        parse_amount(text)


@pytest.mark.parametrize("text", [
    "+50.1", "-1", "-0.5", "1_000", "1,000", "1 000", "١٢٣", "１２", "٣.٥", "0x10", ".5", "5.",
    "1e", "e5", "1e+", "1.2.3", "", "1..2", "1e5.5", "½", "²",
])
def test_text_outside_the_ascii_pattern_is_refused(text: str) -> None:
    # Python's Decimal would accept several of these ("+50.1", "1_000", "١٢٣").
    with pytest.raises(AmountError, match="ASCII digits"):
        parse_amount(text)


@pytest.mark.parametrize("text", ["NaN", "nan", "Infinity", "inf", "-Infinity", "sNaN"])
def test_non_finite_values_are_refused(text: str) -> None:
    with pytest.raises(AmountError):
        parse_amount(text)


@pytest.mark.parametrize("text", ["0", "0.0", "000", "0e10", "0E-5",
                                  "0.000000000000000000000"])
def test_zero_is_refused(text: str) -> None:
    with pytest.raises(AmountError, match="strictly positive"):
        parse_amount(text)


def test_the_smallest_positive_amount_is_one_unit_of_the_18th_decimal() -> None:
    assert parse_amount("0.000000000000000001") == Decimal("1e-18")
    assert parse_amount("1e-18") == Decimal("1e-18")
    assert parse_amount("10e-19") == Decimal("1e-18")  # 18 places once normalised


@pytest.mark.parametrize("text", ["0.0000000000000000001", "1e-19", "1.0000000000000000001",
                                  "99999999999999999999.9999999999999999999"])
def test_more_than_18_decimal_places_is_refused(text: str) -> None:
    with pytest.raises(AmountError, match="more than 18 decimal places"):
        parse_amount(text)


@pytest.mark.parametrize(("text", "canonical"), [
    ("50.0000000000000000000", "50"),          # 19 places, all zeros: fine
    ("50.000000000000000000000000000000", "50"),
    ("1.0000000000000000010", "1.000000000000000001"),
    ("1.50", "1.5"),
    ("0001.5", "1.5"),
    ("1E+2", "100"),
    ("1e2", "100"),
    ("12.5e-1", "1.25"),
])
def test_trailing_zeros_do_not_count_as_decimal_places(text: str, canonical: str) -> None:
    assert format_amount(parse_amount(text)) == canonical


def test_the_largest_amount_is_just_below_ten_to_the_twentieth() -> None:
    top = "99999999999999999999.999999999999999999"  # 38 digits: NUMERIC(38,18) is full
    assert format_amount(parse_amount(top)) == top
    assert format_amount(parse_amount("99999999999999999999")) == "99999999999999999999"
    assert format_amount(parse_amount("1E+19")) == "10000000000000000000"


@pytest.mark.parametrize("text", ["100000000000000000000", "1e20", "1E+20", "10e19",
                                  "100000000000000000000.000000000000000001", "1e999999999",
                                  "123456789012345678901234567890"])
def test_ten_to_the_twentieth_and_above_is_refused(text: str) -> None:
    with pytest.raises(AmountError, match="below 10\\^20"):
        parse_amount(text)


def test_absurdly_long_text_is_refused_before_parsing() -> None:
    assert parse_amount("1." + "0" * (MAX_TEXT_LENGTH - 2)) == Decimal(1)
    with pytest.raises(AmountError, match="longer than"):
        parse_amount("1." + "0" * (MAX_TEXT_LENGTH - 1))


def test_a_huge_negative_exponent_does_not_underflow_to_zero() -> None:
    # A context-based normalize() turns 1e-9999999 into 0, which would pass "> 0".
    with pytest.raises(AmountError, match="decimal places"):
        parse_amount("1e-9999999")


def test_38_significant_digits_are_never_rounded() -> None:
    # The default decimal context keeps 28 digits; the wire text must keep all 38.
    text = "12345678901234567890.123456789012345678"
    event = PaymentEvent("e", EventType.DEPOSIT, "u", "USD", parse_amount(text), "p")
    assert event.to_wire()["amount"] == text


@pytest.mark.parametrize(("raw", "decimals", "expected"), [
    (1_500_000, 6, "1.5"),                       # USDC
    (1, 18, "0.000000000000000001"),             # one wei
    (10**18, 18, "1"),                           # one ether
    (123456789012345678901234567890123, 18, "123456789012345.678901234567890123"),
    (10**38 - 1, 18, "99999999999999999999.999999999999999999"),
    (10, 19, "0.000000000000000001"),            # 19 decimals, exact at 18
    (5, 0, "5"),
    (12_345_678, 8, "0.12345678"),               # WBTC
])
def test_base_units_scale_exactly(raw: int, decimals: int, expected: str) -> None:
    assert format_amount(from_base_units(raw, decimals)) == expected


@pytest.mark.parametrize(("raw", "decimals", "match"), [
    (0, 18, "strictly positive"),
    (-1, 18, "strictly positive"),
    (1, 19, "decimal places"),
    (10**38, 18, "below 10\\^20"),
    (10**20, 0, "below 10\\^20"),
    (1, 256, "decimals out of range"),
    (1, -1, "decimals out of range"),
])
def test_base_units_outside_the_rules_are_refused(raw: int, decimals: int, match: str) -> None:
    with pytest.raises(AmountError, match=match):
        from_base_units(raw, decimals)


def test_a_huge_on_chain_value_is_refused_without_converting_it_to_text() -> None:
    with pytest.raises(AmountError, match="below 10\\^20"):
        from_base_units(10**5000, 3)  # str() of it would raise ValueError


# Any amount the rules allow: n units of 10^-scale with n * 10^-scale < 10^20.
def _scaled(n: int, scale: int) -> Decimal:
    return Decimal((0, tuple(int(d) for d in str(n)), -scale))


allowed_amounts = st.integers(min_value=0, max_value=18).flatmap(
    lambda scale: st.integers(min_value=1, max_value=10 ** (20 + scale) - 1).map(
        lambda n: _scaled(n, scale)))


@given(allowed_amounts)
def test_every_allowed_amount_parses_back_from_its_canonical_text(amount: Decimal) -> None:
    text = format_amount(amount)
    assert parse_amount(text) == amount
    assert format_amount(parse_amount(text)) == text


@given(allowed_amounts)
def test_scientific_notation_of_an_allowed_amount_is_the_same_amount(amount: Decimal) -> None:
    # No precision given, so the formatting is exact; "1.5e+3" matches the pattern.
    assert parse_amount(format(amount, "e")) == amount
    assert parse_amount(format(amount, "E")) == amount


# Independent of schema/amounts.py: Decimal's own normalize() in a context wide enough
# never to round (no NUMERIC(38,18) amount comes close to 200 digits).
_WIDE = Context(prec=200, Emax=10**6, Emin=-(10**6))


def _oracle_text(amount: Decimal) -> str:
    if amount.is_zero():
        return "0"
    return format(amount.normalize(_WIDE), "f")


@given(st.from_regex(r"[0-9]{1,25}(\.[0-9]{1,22})?([eE][+-]?[0-9]{1,2})?", fullmatch=True))
def test_a_canonical_looking_text_parses_as_the_full_rules_say(text: str) -> None:
    # The rules, spelled out on Decimal: positive, below 10^20, at most 18 places once
    # trailing zeros go; the result is the canonical amount (its text round-trips).
    value = Decimal(text)
    allowed = (value > 0 and value < Decimal(10) ** 20
               and -value.normalize(_WIDE).as_tuple().exponent <= 18)
    if not allowed:
        with pytest.raises(AmountError):
            parse_amount(text)
        return
    parsed = parse_amount(text)
    assert parsed == value
    assert format(parsed, "f") == _oracle_text(value)  # canonical: nothing left to strip


# Any finite Decimal as its digits spell it: trailing zeros (NUMERIC(38,18) reads back
# 18 places), zeros of either sign, positive exponents.
spelled_decimals = st.builds(lambda sign, digits, exponent: Decimal((sign, digits, exponent)),
                             st.integers(0, 1),
                             st.lists(st.integers(0, 9), min_size=1, max_size=40).map(tuple),
                             st.integers(-40, 30))


@given(spelled_decimals)
@example(Decimal("100.250000000000000000"))
@example(Decimal("0E-18"))
@example(Decimal("-0.000"))
@example(Decimal("1E+2"))
def test_canonical_text_is_the_same_number_in_its_shortest_plain_form(amount: Decimal) -> None:
    text = format_amount(amount)
    assert Decimal(text) == amount                      # exact: nothing rounded
    assert all(c in "-0123456789." for c in text)       # plain notation, no exponent
    integer, _, fraction = text.lstrip("-").partition(".")
    assert not fraction.endswith("0") and "." not in text[-1:]  # no trailing zeros
    assert integer == "0" or not integer.startswith("0")        # no leading zeros
    assert text != "-0" and not (text.startswith("-") and Decimal(text) == 0)
