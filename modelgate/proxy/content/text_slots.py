"""Where a text lives in a parsed JSON body: a container and a key, so a redaction can be written back.

The collectors add a slot only for a value that is a string: any other JSON shape is skipped, never refused
(the request validator or the upstream answers for wrong types). None of them recurses: the API's shapes have
a fixed depth, and `collect_strings` walks free-form JSON with a stack of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class TextSlot:
    """One text the model sees (or the client reads), and where it lives, so a redaction can write it back."""

    container: dict | list
    key: str | int

    @property
    def text(self) -> str:
        return self.container[self.key]  # type: ignore[index]

    def replace(self, text: str) -> None:
        """Write `text` in place of the slot's text (the body must then be re-encoded)."""
        self.container[self.key] = text  # type: ignore[index]


def dicts(value: Any) -> Iterator[dict]:
    """The objects of a JSON array; nothing for anything else, and the array's other items skipped."""
    if isinstance(value, list):
        for item in value:
            if isinstance(item, dict):
                yield item


def collect_text(slots: list[TextSlot], container: dict, key: str) -> None:
    """`container[key]` when it is a string."""
    if isinstance(container.get(key), str):
        slots.append(TextSlot(container, key))


def collect_strings(slots: list[TextSlot], container: dict | list, key: str | int) -> None:
    """Every string at or under `container[key]`, in document order, at any depth (keys are not texts)."""
    stack: list[tuple[Any, Any]] = [(container, key)]
    while stack:
        parent, at = stack.pop()
        value = parent[at]
        if isinstance(value, str):
            slots.append(TextSlot(parent, at))
        elif isinstance(value, dict):
            stack.extend((value, name) for name in reversed(list(value)))
        elif isinstance(value, list):
            stack.extend((value, index) for index in range(len(value) - 1, -1, -1))


def collect_parts(slots: list[TextSlot], container: dict, key: str, parts: Mapping[str, str]) -> None:
    """`container[key]` as a string, or a list of typed parts: `parts` maps a part's type to its text key."""
    value = container.get(key)
    if isinstance(value, str):
        slots.append(TextSlot(container, key))
        return
    for part in dicts(value):
        kind = part.get("type")
        field = parts.get(kind) if isinstance(kind, str) else None  # a list or object type is no key
        if field is not None:
            collect_text(slots, part, field)


Collector = Callable[[list[TextSlot], dict], None]  # adds the slots of one route's body


def slots_of(collectors: Mapping[str, Collector], route_name: str, body: Any) -> list[TextSlot]:
    """The slots `collectors[route_name]` finds in `body`; [] for a route without one or a body that is no
    object."""
    collect = collectors.get(route_name)
    if collect is None or not isinstance(body, dict):
        return []
    slots: list[TextSlot] = []
    collect(slots, body)
    return slots
