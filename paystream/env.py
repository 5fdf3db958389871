"""Settings from environment variables: the one reader every component uses.

The rules, the same for every variable: unset or empty means "use the default" (so
`FOO= paystream ...` does not turn a port into 0), a value that does not parse is a
SettingsError naming the variable and the value, never a traceback from int().

Each caller spells its variable's name out in full ("PAYSTREAM_INGEST_MAX_BODY_BYTES"),
never composed from a prefix, so grep finds every place a variable is read. `environ`
lets a settings object be built from a mapping in tests instead of os.environ.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TypeVar, overload

T = TypeVar("T")


class SettingsError(ValueError):
    """A configuration a process must not run with; the message says how to fix it.
    Commands print it and exit 2."""


def _raw(name: str, environ: Mapping[str, str] | None) -> str | None:
    value = (os.environ if environ is None else environ).get(name)
    return value if value and value.strip() else None


@overload
def env_str(name: str, default: str, environ: Mapping[str, str] | None = None) -> str: ...
@overload
def env_str(name: str, default: None, environ: Mapping[str, str] | None = None
            ) -> str | None: ...
def env_str(name: str, default: str | None, environ: Mapping[str, str] | None = None
            ) -> str | None:
    """The variable's text as set (not stripped), or `default` when unset or empty."""
    raw = _raw(name, environ)
    return default if raw is None else raw


@overload
def env_int(name: str, default: int, environ: Mapping[str, str] | None = None) -> int: ...
@overload
def env_int(name: str, default: None, environ: Mapping[str, str] | None = None
            ) -> int | None: ...
def env_int(name: str, default: int | None, environ: Mapping[str, str] | None = None
            ) -> int | None:
    return _parsed(name, default, environ, int, "an integer")


@overload
def env_float(name: str, default: float, environ: Mapping[str, str] | None = None
              ) -> float: ...
@overload
def env_float(name: str, default: None, environ: Mapping[str, str] | None = None
              ) -> float | None: ...
def env_float(name: str, default: float | None, environ: Mapping[str, str] | None = None
              ) -> float | None:
    return _parsed(name, default, environ, float, "a number")


def _parsed(name: str, default: T | None, environ: Mapping[str, str] | None,
            parse: Callable[[str], T], what: str) -> T | None:
    raw = _raw(name, environ)
    if raw is None:
        return default
    try:
        return parse(raw)
    except ValueError:
        raise SettingsError(f"{name} must be {what}, got {raw!r}") from None
