"""The settings base every component declares its variables with: unset or empty is the
default, a bad value is one SettingsError naming the variable and the value, a flag is an
explicit override, and nothing is read from the environment behind the caller's back."""

from __future__ import annotations

import pytest
from pydantic import Field

from paystream.env import (
    EnvSettings,
    OptIn,
    OptOut,
    SecondsList,
    SettingsError,
    Words,
    default_text,
    read_one,
    variable_name,
)


class Sample(EnvSettings):
    """A component's settings, as every component declares them."""

    size: int = Field(8, alias="PAYSTREAM_X_SIZE", ge=1)
    rate: float = Field(1.0, alias="PAYSTREAM_X_RATE", gt=0)
    ratio: float = Field(0.5, alias="PAYSTREAM_X_RATIO", ge=0, le=1)
    name: str = Field("d", alias="PAYSTREAM_X_NAME")
    assets: Words = Field(("USD",), alias="PAYSTREAM_X_ASSETS")
    delays: SecondsList = Field((5.0, 300.0), alias="PAYSTREAM_X_DELAYS")
    on: OptIn = Field(False, alias="PAYSTREAM_X_ON")
    kept: OptOut = Field(True, alias="PAYSTREAM_X_KEPT")


def test_unset_empty_or_blank_is_the_default() -> None:
    for env in ({}, {"PAYSTREAM_X_SIZE": "", "PAYSTREAM_X_NAME": ""},
                {"PAYSTREAM_X_SIZE": "  ", "PAYSTREAM_X_ASSETS": " "}):
        assert Sample.from_env(env) == Sample()
    assert (Sample().size, Sample().assets, Sample().delays) == (8, ("USD",), (5.0, 300.0))


def test_values_parse_as_they_always_did(monkeypatch: pytest.MonkeyPatch) -> None:
    s = Sample.from_env({"PAYSTREAM_X_SIZE": " 7 ", "PAYSTREAM_X_RATE": "0.25",
                         "PAYSTREAM_X_NAME": "a b ", "PAYSTREAM_X_ASSETS": "USD,EUR GBP",
                         "PAYSTREAM_X_DELAYS": "0.1, 2", "PAYSTREAM_X_ON": "1",
                         "PAYSTREAM_X_KEPT": "0"})
    assert (s.size, s.rate, s.name) == (7, 0.25, "a b ")
    # Lists are split, never decoded as JSON; switches read "1" (on) and "0" (off).
    assert (s.assets, s.delays, s.on, s.kept) == (("USD", "EUR", "GBP"), (0.1, 2.0), True,
                                                  False)
    assert Sample.from_env({"PAYSTREAM_X_ON": "yes", "PAYSTREAM_X_KEPT": "no"}).on is False
    monkeypatch.setenv("PAYSTREAM_X_SIZE", "3")
    assert Sample.from_env().size == 3  # None: the process environment
    assert Sample.from_env({}).size == 8  # a mapping: that mapping alone


@pytest.mark.parametrize(("env", "message"), [
    ({"PAYSTREAM_X_SIZE": "0"}, "PAYSTREAM_X_SIZE must be at least 1, got '0'"),
    ({"PAYSTREAM_X_SIZE": "1.5"}, "PAYSTREAM_X_SIZE must be an integer, got '1.5'"),
    ({"PAYSTREAM_X_RATE": "0"}, "PAYSTREAM_X_RATE must be positive, got '0'"),
    ({"PAYSTREAM_X_RATE": "lots"}, "PAYSTREAM_X_RATE must be a number, got 'lots'"),
    ({"PAYSTREAM_X_RATIO": "2"}, "PAYSTREAM_X_RATIO must be at most 1, got '2'"),
    ({"PAYSTREAM_X_DELAYS": "5,soon"},
     "PAYSTREAM_X_DELAYS must be seconds separated by commas, got '5,soon'"),
])
def test_a_bad_value_is_one_error_naming_the_variable_and_the_value(
        env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError) as caught:
        Sample.from_env(env)
    assert str(caught.value) == message


def test_a_flag_is_an_override_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAYSTREAM_X_SIZE", "3")
    assert Sample.from_env(overrides={"size": 5}).size == 5
    with pytest.raises(SettingsError, match="PAYSTREAM_X_SIZE must be at least 1, got 0"):
        Sample.from_env(overrides={"size": 0})
    import os
    assert os.environ["PAYSTREAM_X_SIZE"] == "3"  # the environment is left as it was


def test_settings_are_frozen_and_a_copy_is_validated() -> None:
    s = Sample()
    with pytest.raises(AttributeError):
        s.size = 1  # type: ignore[misc]
    assert s.replaced(size=2).size == 2
    with pytest.raises(SettingsError, match="PAYSTREAM_X_SIZE"):
        s.replaced(size=-1)


def test_one_variable_can_be_read_alone() -> None:
    assert read_one(Sample, "size", {"PAYSTREAM_X_SIZE": "4", "PAYSTREAM_X_RATE": "x"}) == 4
    assert read_one(Sample, "assets", {}) == ("USD",)
    with pytest.raises(SettingsError, match="PAYSTREAM_X_SIZE must be at least 1, got '0'"):
        read_one(Sample, "size", {"PAYSTREAM_X_SIZE": "0"})


def test_help_texts_read_the_declared_name_and_default() -> None:
    assert variable_name(Sample, "size") == "PAYSTREAM_X_SIZE"
    assert [default_text(Sample, f) for f in ("size", "rate", "assets", "delays", "on")] == [
        "8", "1", "USD", "5,300", "0"]
