"""The one reader of environment variables: unset or empty is the default, a bad value
names its variable."""

from __future__ import annotations

import pytest

from paystream.env import SettingsError, env_float, env_int, env_str


def test_unset_or_empty_is_the_default() -> None:
    assert env_str("PAYSTREAM_X", "d", {}) == "d"
    assert env_str("PAYSTREAM_X", "d", {"PAYSTREAM_X": ""}) == "d"
    assert env_int("PAYSTREAM_X", 5, {"PAYSTREAM_X": "  "}) == 5
    assert env_float("PAYSTREAM_X", None, {}) is None


def test_values_parse_and_text_is_kept_as_set() -> None:
    assert env_int("PAYSTREAM_X", 5, {"PAYSTREAM_X": " 7 "}) == 7
    assert env_float("PAYSTREAM_X", 1.0, {"PAYSTREAM_X": "0.25"}) == 0.25
    assert env_str("PAYSTREAM_X", "d", {"PAYSTREAM_X": "a b "}) == "a b "


def test_a_value_that_does_not_parse_names_the_variable() -> None:
    with pytest.raises(SettingsError, match=r"PAYSTREAM_X must be an integer, got '1\.5'"):
        env_int("PAYSTREAM_X", 1, {"PAYSTREAM_X": "1.5"})
    with pytest.raises(SettingsError, match="PAYSTREAM_X must be a number, got 'lots'"):
        env_float("PAYSTREAM_X", 1.0, {"PAYSTREAM_X": "lots"})
