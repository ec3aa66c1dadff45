"""The shape of a field matrix entry and the check that applies a matrix to a request.

Every documented request field of a client API has, on each translated route, one entry: forwarded as is,
translated (to what), refused (when), used by the gateway itself, or not sent (only an end-user hint the
answer does not depend on, where the provider has no field for it: refusing it would break every client
that always sends one). A request holding a field the route's
matrix refuses, or a field it does not list at all, is the client's 400 naming the field; the forwarder adds
the row's provider (`FieldRefused.for_provider`). Nothing is dropped without an entry saying so.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from modelgate.domain.errors import InvalidRequest

FORWARDED = "forwarded"
TRANSLATED = "translated"
REFUSED = "refused"
GATEWAY = "gateway"  # read by the gateway itself, not sent as a field
NOT_SENT = "not sent"  # a hint the answer does not depend on, which the provider has no field for


@dataclass(frozen=True, slots=True)
class Condition:
    """When a value is refused: `text` for the docs, `holds` for the check."""

    text: str
    holds: Callable[[Any], bool]


@dataclass(frozen=True, slots=True)
class FieldEntry:
    """What one route does with one request field."""

    handling: str  # FORWARDED, TRANSLATED, REFUSED or GATEWAY
    detail: str  # to what it is translated, or why it is refused
    refused_when: Condition | None = None  # which values are refused (None: none is)
    because: str = ""  # why those values are refused (a translated field's detail says what it becomes)


class FieldRefused(InvalidRequest):
    """400: a request field this row's wire format cannot carry."""

    def __init__(self, field: str, why: str, provider: str = "") -> None:
        where = f"provider {provider!r}" if provider else "this model's provider"
        super().__init__(f"'{field}' cannot be sent to {where}: {why}")
        self.field = field
        self.why = why

    def for_provider(self, provider: str) -> FieldRefused:
        """The same refusal naming the provider of the row that could not carry it."""
        return FieldRefused(self.field, self.why, provider)


def _is_set(value: Any) -> bool:
    return value is not None


def _is_true(value: Any) -> bool:
    return value is True


def _not_empty(value: Any) -> bool:
    return value is not None and value != {} and value != [] and value != ""


def _not_zero(value: Any) -> bool:
    return value is not None and value != 0


def _above_one(value: Any) -> bool:
    return isinstance(value, int) and value > 1


def _false(value: Any) -> bool:
    return value is False


def _not_text_only(value: Any) -> bool:
    return value is not None and value != ["text"]


SET = Condition("set", _is_set)
TRUE = Condition("true", _is_true)
FALSE = Condition("false", _false)
NOT_EMPTY = Condition("not empty", _not_empty)
NOT_ZERO = Condition("not 0", _not_zero)
ABOVE_ONE = Condition("greater than 1", _above_one)
NOT_TEXT_ONLY = Condition('anything but ["text"]', _not_text_only)
THINKING_ON = Condition(
    "enabled or adaptive",
    lambda value: value is not None and not (isinstance(value, dict) and value.get("type") == "disabled"),
)


def one_of(*allowed: Any) -> Condition:
    """Refused unless the value is None or one of `allowed`."""
    listed = ", ".join(f"`{value}`" for value in allowed)
    return Condition(f"anything but {listed}", lambda value: value is not None and value not in allowed)


def forwarded(detail: str = "as is") -> FieldEntry:
    return FieldEntry(FORWARDED, detail)


def translated(detail: str, refused_when: Condition | None = None, because: str = "") -> FieldEntry:
    return FieldEntry(TRANSLATED, detail, refused_when, because)


def refused(detail: str, when: Condition = SET) -> FieldEntry:
    return FieldEntry(REFUSED, detail, when)


def gateway(detail: str) -> FieldEntry:
    return FieldEntry(GATEWAY, detail)


def not_sent(detail: str) -> FieldEntry:
    return FieldEntry(NOT_SENT, detail)


def check_fields(payload: Mapping[str, Any], matrix: Mapping[str, FieldEntry]) -> None:
    """Refuse (FieldRefused) the first field of `payload` that `matrix` refuses or does not list."""
    for name, value in payload.items():
        entry = matrix.get(name)
        if entry is None:
            raise FieldRefused(name, "unknown field")
        condition = entry.refused_when
        if condition is not None and condition.holds(value):
            raise FieldRefused(name, f"{entry.because or entry.detail} (refused when {condition.text})")
