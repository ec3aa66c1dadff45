"""A rule's match in a text (`Hit`), and what matches make of a text: redacted, or the one that wins."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Hit:
    """A rule's match in a text, with what the rule does."""

    start: int
    end: int
    action: str  # "block" | "redact" | "flag"
    rule_id: str
    label: str  # detector name, or "phrase" / "pattern": what the audit names, never the text


Scan = Callable[[str], Sequence[Hit]]  # all hits in a text, offsets into it


def redact(text: str, hits: Sequence[Hit]) -> str:
    """`text` with each `redact` hit's span replaced by `[REDACTED:<label>]`; overlapping or adjacent spans
    merge into one replacement, named by the earliest-starting hit; block and flag hits are ignored."""
    spans = sorted((h for h in hits if h.action == "redact"), key=lambda h: h.start)
    if not spans:
        return text
    parts: list[str] = []
    done = 0  # text before this offset is already in `parts`
    label, start, end = spans[0].label, spans[0].start, spans[0].end
    for hit in spans[1:]:
        if hit.start <= end:
            end = max(end, hit.end)
            continue
        parts += (text[done:start], "[REDACTED:", label, "]")
        done = end
        label, start, end = hit.label, hit.start, hit.end
    parts += (text[done:start], "[REDACTED:", label, "]", text[end:])
    return "".join(parts)


def strongest(hits: Sequence[Hit]) -> Hit | None:
    """The first block hit, else the first redact hit, else the first flag hit (None without hits)."""
    for action in ("block", "redact", "flag"):
        for hit in hits:
            if hit.action == action:
                return hit
    return None
