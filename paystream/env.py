"""Settings from environment variables: the one way every component declares and reads them.

A component declares its variables once, as the fields of a frozen `EnvSettings` class:
each field's alias is the variable's name spelled out in full ("PAYSTREAM_API_PORT"),
never composed from a prefix, so grep finds every variable; its default, its bounds
(ge/gt/le) and its description sit beside it, and docs/configuration.md is generated
from these declarations (paystream/config_doc.py). A default the page cannot print as a
value (computed, or a file in the secrets dir) says what it is with
`json_schema_extra={"shown": "..."}`; a field without an alias is not a variable (a value
from_env builds from other settings, or a flag's).

The rules, the same for every variable: unset or empty means "use the default" (so
`FOO= paystream ...` does not turn a port into 0), and a value that does not parse or is
out of bounds is a SettingsError naming the variable and the value, never a traceback.
`from_env(env)` reads a mapping instead of os.environ (tests), and command-line flags
reach a settings object as `overrides`, never by writing os.environ.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Self

import pydantic_settings
from pydantic import BeforeValidator, TypeAdapter, ValidationError
from pydantic_core import ErrorDetails, PydanticUndefinedType
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)


class SettingsError(ValueError):
    """A configuration a process must not run with; the message says how to fix it.
    Commands print it and exit 2."""


class UnshownValueError(ValueError):
    """A validator's refusal of a value it must not print (a secret): the message is the
    variable's name and this one's, never the value."""


def words(text: str) -> tuple[str, ...]:
    """"USD,EUR", "a b" or "a, b" as ("USD", "EUR"), ...: a list variable's text, split
    on commas and white space."""
    return tuple(part for part in re.split(r"[\s,]+", text.strip()) if part)


def split_words(value: object) -> object:
    # A list variable's text is split; a tuple given in code is kept.
    return words(value) if isinstance(value, str) else value


def split_seconds(value: object) -> object:
    """"5,300,1800" as (5.0, 300.0, 1800.0)."""
    if not isinstance(value, str):
        return value
    try:
        return tuple(float(part) for part in value.split(",") if part.strip())
    except ValueError:
        raise ValueError("must be seconds separated by commas") from None


# A list variable: its text is split, not decoded as JSON (pydantic-settings' default
# for a tuple), so the values people already set ("USD,EUR") keep their meaning.
Words = Annotated[tuple[str, ...], NoDecode, BeforeValidator(split_words)]
SecondsList = Annotated[tuple[float, ...], NoDecode, BeforeValidator(split_seconds)]


def _on_when_1(value: object) -> object:
    return value == "1" if isinstance(value, str) else value


def _off_when_0(value: object) -> object:
    return value != "0" if isinstance(value, str) else value


# Switches as they always read: "1" turns an opt-in on (anything else leaves it off), "0"
# turns an opt-out off (anything else leaves it on).
OptIn = Annotated[bool, BeforeValidator(_on_when_1)]
OptOut = Annotated[bool, BeforeValidator(_off_when_0)]


@dataclass(frozen=True)
class Documented:
    """A variable read outside a settings field (a family named per network, or one read
    by another program), listed on the configuration page with the rest."""

    name: str
    type: str
    default: str
    doc: str


class EnvSettings(BaseSettings):
    """The base of every component's settings: frozen, validated, one error type."""

    model_config = SettingsConfigDict(frozen=True, case_sensitive=True,
                                      env_ignore_empty=True, populate_by_name=True,
                                      extra="ignore")
    # The configuration page's section for this class (its docstring introduces it).
    doc_section: ClassVar[str] = ""
    doc_extra: ClassVar[tuple[Documented, ...]] = ()

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise settings_error(type(self), exc) from None

    def __setattr__(self, name: str, value: object) -> None:
        # A settings object is shared by threads: it never changes once built.
        raise AttributeError(f"{type(self).__name__} is frozen: {name} cannot be set")

    def replaced(self, **changes: object) -> Self:
        """A copy with `changes` (field name -> value), validated like the original."""
        return type(self)(**{**dict(self), **changes})

    @classmethod
    def settings_customise_sources(
            cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # from_env reads the environment (or the mapping it is given) itself: a plain
        # constructor call takes its arguments and the declared defaults, nothing else.
        return (init_settings,)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None,
                 overrides: Mapping[str, object] | None = None) -> Self:
        """The settings from `env` (default: os.environ); `overrides` (field name ->
        value, a command-line flag's) win over the environment."""
        source = os.environ if env is None else env
        values = read_variables(cls, source)
        for field, value in (overrides or {}).items():
            values[variable_name(cls, field)] = value
        return cls(**values)


def read_one(cls: type[EnvSettings], field: str,
             env: Mapping[str, str] | None = None) -> Any:
    """One field of `cls`, from its variable alone (validated as declared, default when
    unset): for a reader that needs one value of a component whose other settings it must
    not require, such as the stack's scrape table reading the ingest's admin port."""
    info = cls.model_fields[field]
    raw = read_variables(cls, os.environ if env is None else env).get(variable_name(cls, field))
    if raw is None:
        return info.get_default(call_default_factory=True, validated_data={})
    try:
        kind: Any = (Annotated[info.annotation, *info.metadata] if info.metadata
                     else info.annotation)
        return TypeAdapter(kind).validate_python(raw)
    except ValidationError as exc:
        error = exc.errors()[0]
        raise SettingsError(_sentence(cls, {**error, "loc": (field,)})) from None


def read_variables(cls: type[BaseSettings], env: Mapping[str, str]) -> dict[str, Any]:
    """The declared variables of `cls` set in `env` (empty or blank ones left out: the
    default applies), by variable name, split or parsed as their fields say."""
    present = {name: value for name, value in env.items() if value and value.strip()}
    source = EnvSettingsSource(cls, case_sensitive=True, env_ignore_empty=True)
    source.env_vars = present
    try:
        return dict(source())
    except pydantic_settings.SettingsError as exc:  # its decoding error, should one slip by
        raise SettingsError(str(exc)) from None


def variable_name(cls: type[BaseSettings], field: str) -> str:
    alias = cls.model_fields[field].alias
    return alias if alias is not None else field


def settings_error(cls: type[BaseSettings], exc: ValidationError) -> SettingsError:
    """The first of pydantic's complaints as one sentence naming the variable and the
    value: `PAYSTREAM_API_DB_POOL_SIZE must be at least 1, got '0'`."""
    return SettingsError(_sentence(cls, exc.errors()[0]))


def _sentence(cls: type[BaseSettings], error: ErrorDetails) -> str:
    ctx = error.get("ctx") or {}
    cause = ctx.get("error")
    if isinstance(cause, SettingsError):  # a validator's own sentence
        return str(cause)
    loc = error["loc"]
    field = str(loc[0]) if loc else ""
    name = (variable_name(cls, field) if field in cls.model_fields else field) or cls.__name__
    if isinstance(cause, UnshownValueError):
        return f"{name} {cause}"
    kind = error["type"]
    if kind == "greater_than_equal":
        rule = f"must be at least {_number(ctx['ge'])}"
    elif kind == "greater_than":
        rule = "must be positive" if ctx["gt"] == 0 else f"must be above {_number(ctx['gt'])}"
    elif kind == "less_than_equal":
        rule = f"must be at most {_number(ctx['le'])}"
    elif kind == "less_than":
        rule = f"must be below {_number(ctx['lt'])}"
    elif kind.startswith("int_"):
        rule = "must be an integer"
    elif kind.startswith("float_"):
        rule = "must be a number"
    elif kind == "missing":
        return f"{name} is required"
    elif isinstance(cause, ValueError):
        rule = str(cause)
    else:
        rule = error["msg"]
    return f"{name} {rule}, got {error['input']!r}"


def _number(bound: object) -> str:
    # A float reads as it was written: "at most 1000", not "1000.0".
    if isinstance(bound, float) and bound.is_integer():
        return str(int(bound))
    return str(bound)


def default_text(cls: type[BaseSettings], field: str) -> str | None:
    """A field's declared default as a user would set it ("86400", "USD,EUR", "1"), or
    None when it has none (unset, computed, or empty): what help texts and the
    configuration page show."""
    value = cls.model_fields[field].default
    if value is None or value == "" or value == () or isinstance(value, PydanticUndefinedType):
        return None
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, tuple):
        return ",".join(_number(v) for v in value)
    return _number(value)

