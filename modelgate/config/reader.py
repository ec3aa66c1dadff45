"""Reading a TOML document key by key: typed getters that report every problem at once (with the key's path
and a "did you mean" for a misspelt key or value), ${ENV} interpolation, and the value checks the config's
sections share. modelgate/config/loader.py builds the Config from it.
"""

from __future__ import annotations

import difflib
import enum
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

_REFERENCE = re.compile(r"\$\$\{|\$\{([^}]*)(\}?)")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SLUG = re.compile(r"[a-z0-9_-]+")
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_CURRENCY = re.compile(r"[A-Z]{3}")
_CLIP = 60

Check = Callable[[Any], str | None]


class Absent(enum.Enum):
    """Marks a key that is missing, or whose value was unusable and already reported."""

    ABSENT = enum.auto()


ABSENT = Absent.ABSENT


@dataclass(slots=True)
class ReadContext:
    """Where problems go, and the environment ${VAR} references resolve against."""

    source: str
    env: Mapping[str, str]
    chain: tuple[tuple[str, bool], ...] = ()  # the plugins of the model API's chain: (name, essential)
    problems: list[str] = field(default_factory=list)

    def report(self, path: str, reason: str) -> None:
        self.problems.append(f"{self.source}: {path}: {reason}")

    def resolve(self, value: Any, path: str) -> Any:
        """Interpolate ${VAR} in a string value; other values pass through untouched."""
        if not isinstance(value, str):
            return value
        broken = False

        def substitute(match: re.Match[str]) -> str:
            nonlocal broken
            if match.group(0) == "$${":
                return "${"
            name, closed = match.group(1), match.group(2)
            if not closed:
                self.report(path, "unterminated '${' (write '$${' for a literal '${')")
            elif not _ENV_NAME.fullmatch(name):
                self.report(path, f"invalid environment variable reference '${{{name}}}'")
            elif name not in self.env:
                self.report(path, f"environment variable {name!r} is not set")
            else:
                return self.env[name]
            broken = True
            return ""

        text = _REFERENCE.sub(substitute, value)
        return ABSENT if broken else text


class Table:
    """One TOML table being read: typed getters that report problems and remember the keys they know."""

    def __init__(self, context: ReadContext, path: str, data: dict[str, Any]) -> None:
        self.context = context
        self.path = path
        self._data = data
        self._known: list[str] = []

    def key_path(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def report(self, key: str, reason: str) -> None:
        self.context.report(self.key_path(key), reason)

    def has(self, key: str) -> bool:
        return key in self._data

    def string(self, key: str, *, required: bool = False, check: Check | None = None) -> str | Absent:
        return self._scalar(key, required, check, "a string", lambda v: isinstance(v, str))

    def integer(self, key: str, *, check: Check | None = None) -> int | Absent:
        return self._scalar(key, False, check, "an integer", is_int)

    def number(self, key: str, *, check: Check | None = None) -> float | Absent:
        value = self._scalar(key, False, None, "a number", lambda v: is_int(v) or isinstance(v, float))
        if value is ABSENT:
            return ABSENT
        if not math.isfinite(value):
            self.report(key, f"must be a finite number, got {value}")
        elif check and (reason := check(value)):
            self.report(key, reason)
        return float(value)

    def boolean(self, key: str) -> bool | Absent:
        return self._scalar(key, False, None, "a boolean", lambda v: isinstance(v, bool))

    def choice(self, key: str, options: Sequence[str], noun: str, *, required: bool = False) -> str | Absent:
        return self.string(key, required=required, check=lambda v: membership(noun, v, options))

    def strings(
        self, key: str, *, required: str | None = None, check: Check | None = None
    ) -> tuple[str, ...] | Absent:
        """An array of strings; required is the problem to report when it is missing or empty."""
        value = self._value(key)
        if value is ABSENT or not self._expect(key, value, "an array of strings", list):
            if value is ABSENT and required:
                self.report(key, required)
            return ABSENT
        if not value and required:
            self.report(key, required)
        items: list[str] = []
        for index, raw in enumerate(value):
            path = f"{self.key_path(key)}[{index}]"
            item = self.context.resolve(raw, path)
            if item is ABSENT:
                continue
            if not isinstance(item, str):
                self.context.report(path, f"expected a string, got {describe(item)}")
            elif item in items:
                self.context.report(path, f"duplicate entry {item!r}")
            elif check and (reason := check(item)):
                self.context.report(path, reason)
            else:
                items.append(item)
        return tuple(items)

    def string_pairs(self, key: str, *, check_name: Check, check_value: Check) -> tuple[tuple[str, str], ...]:
        """A table of string values, kept in file order as (name, value) pairs."""
        value = self._value(key)
        if value is ABSENT or not self._expect(key, value, "a table of strings", dict):
            return ()
        pairs: list[tuple[str, str]] = []
        for name, raw in value.items():
            path = f"{self.key_path(key)}.{name}"
            item = self.context.resolve(raw, path)
            if item is ABSENT:
                continue
            if not isinstance(item, str):
                self.context.report(path, f"expected a string, got {describe(item)}")
            elif reason := check_name(name) or check_value(item):
                self.context.report(path, reason)
            else:
                pairs.append((name, item))
        return tuple(pairs)

    def table(self, key: str) -> Table:
        """A sub-table; a missing one reads as empty so every key takes its default."""
        value = self._value(key)
        if value is ABSENT or not self._expect(key, value, "a table", dict):
            value = {}
        return Table(self.context, self.key_path(key), value)

    def tables(self, key: str, *, required: str | None = None) -> list[Table]:
        """An array of tables; required is the problem to report when it is missing or empty."""
        value = self._value(key)
        if value is ABSENT or not self._expect(key, value, "an array of tables", list):
            if value is ABSENT and required:
                self.report(key, required)
            return []
        if not value and required:
            self.report(key, required)
        tables = []
        for index, item in enumerate(value):
            path = f"{self.key_path(key)}[{index}]"
            if isinstance(item, dict):
                tables.append(Table(self.context, path, item))
            else:
                self.context.report(path, f"expected a table, got {describe(item)}")
        return tables

    def keys(self) -> list[str]:
        """The keys this table holds (for tables whose keys are names: service tiers, image variants)."""
        return list(self._data)

    def finish(self) -> None:
        """Report every key that no getter asked for; call after reading all known keys."""
        for key in self._data:
            if key not in self._known:
                self.report(key, unknown_key(key, self._known))

    def _value(self, key: str, required: bool = False) -> Any:
        self._known.append(key)
        if key not in self._data:
            if required:
                self.report(key, "missing required key")
            return ABSENT
        return self.context.resolve(self._data[key], self.key_path(key))

    def _expect(self, key: str, value: Any, expected: str, accept: type | Callable[[Any], bool]) -> bool:
        ok = isinstance(value, accept) if isinstance(accept, type) else accept(value)
        if not ok:
            self.report(key, f"expected {expected}, got {describe(value)}")
        return ok

    def _scalar(
        self, key: str, required: bool, check: Check | None, expected: str, accept: Callable[[Any], bool]
    ) -> Any:
        value = self._value(key, required)
        if value is ABSENT or not self._expect(key, value, expected, accept):
            return ABSENT
        # A value that fails its check is still returned: the load fails anyway, and keeping it
        # (a misspelled name, say) avoids follow-on "unknown provider" noise elsewhere.
        if check and (reason := check(value)):
            self.report(key, reason)
        return value


def given(**values: Any) -> dict[str, Any]:
    """Keep only the keys the file supplied, so the dataclass defaults apply to the rest."""
    return {key: value for key, value in values.items() if value is not ABSENT}


def is_int(value: Any) -> bool:
    # bool is an int subclass, but `workers = true` is a mistake, not 1.
    return isinstance(value, int) and not isinstance(value, bool)


def describe(value: Any) -> str:
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, int):
        return f"integer {value}"
    if isinstance(value, float):
        return f"float {value}"
    if isinstance(value, str):
        return f"string {clip(value)!r}"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    return f"{type(value).__name__} {value}"  # TOML dates and times


def clip(text: str) -> str:
    return text if len(text) <= _CLIP else text[:_CLIP] + "..."


def suggest(value: str, options: Sequence[str]) -> str | None:
    # Case is compared loosely so "INFO" still suggests "info".
    for candidate in (value, value.lower()):
        if matches := difflib.get_close_matches(candidate, options, n=1):
            return matches[0]
    return None


def unknown_key(key: str, known: Sequence[str]) -> str:
    if match := suggest(key, known):
        return f"unknown key; did you mean {match!r}?"
    return f"unknown key; expected one of: {', '.join(known)}" if known else "unknown key"


def membership(noun: str, value: str, options: Iterable[str]) -> str | None:
    options = list(options)
    if value in options:
        return None
    reason = f"unknown {noun} {value!r}"
    if match := suggest(value, options):
        return f"{reason}; did you mean {match!r}?"
    if not options:
        return f"{reason} (none are defined)"
    return f"{reason}; expected one of: {', '.join(options)}"


def at_least(minimum: float) -> Check:
    return lambda v: None if v >= minimum else f"must be at least {minimum}, got {v}"


def above(bound: float) -> Check:
    return lambda v: None if v > bound else f"must be greater than {bound}, got {v}"


def between(low: int, high: int) -> Check:
    return lambda v: None if low <= v <= high else f"must be between {low} and {high}, got {v}"


def non_empty(value: str) -> str | None:
    return None if value.strip() else "must not be empty"


def secret(value: str) -> str | None:
    # An empty token or key would silently mean "anyone" or "no auth" downstream.
    return None if value.strip() else "must not be empty (remove the key to leave it unset)"


def slug(value: str) -> str | None:
    if _SLUG.fullmatch(value):
        return None
    return f"must contain only lowercase letters, digits, '_' and '-', got {clip(value)!r}"


def currency(value: str) -> str | None:
    return (
        None if _CURRENCY.fullmatch(value) else f"expected a 3-letter ISO 4217 code like 'USD', got {value!r}"
    )


def http_url(value: str) -> str | None:
    # URLs are never echoed back: they may carry credentials.
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "expected an http:// or https:// URL with a host"
    return None


def url_prefix(*prefixes: str) -> Check:
    def check(value: str) -> str | None:
        if value.startswith(prefixes):
            return None
        return f"expected a URL starting with {' or '.join(prefixes)}"

    return check


def header_name(name: str) -> str | None:
    return None if _HEADER_NAME.fullmatch(name) else "not a valid HTTP header name"


def header_value(value: str) -> str | None:
    # CR/LF would let a header value smuggle extra headers into upstream requests.
    return "header value must not contain CR, LF or NUL" if re.search(r"[\r\n\0]", value) else None
