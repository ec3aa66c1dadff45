"""Text the cabinet shows to people (aliases, e-mails, legal names, system and provider names): characters
that can disguise what a reader sees are refused, and the text is NFC-normalised so that two spellings of
the same visible name are one name (alias uniqueness).

Refused: control characters (Cc); format characters (Cf) — among them the bidirectional controls
U+202A..U+202E, U+2066..U+2069, U+200E/U+200F and U+061C, the zero-width U+200B..U+200D, U+2060 and U+FEFF,
the soft hyphen and the tag characters; line and paragraph separators (Zl, Zp); private-use, surrogate and
unassigned code points (Co, Cs, Cn); and letters that render as nothing (Hangul fillers, U+034F).
"""

from __future__ import annotations

import unicodedata

_REFUSED_CATEGORIES = frozenset({"Cf", "Zl", "Zp", "Co", "Cs", "Cn"})
# Not format characters by category, but they draw nothing and are used to fake blank or equal names.
_BLANK_LOOKING = frozenset("\u034f\u115f\u1160\u3164\uffa0")


def nfc(value: str) -> str:
    """The NFC (composed) form, so that e.g. `é` typed as one or as two code points is the same text."""
    return unicodedata.normalize("NFC", value)


def _is_control(ch: str) -> bool:
    return unicodedata.category(ch) == "Cc"


def _is_disguising(ch: str) -> bool:
    return ch in _BLANK_LOOKING or unicodedata.category(ch) in _REFUSED_CATEGORIES


def disguising_character_problem(field: str, value: str) -> str | None:
    """Why `value` would disguise what a reader sees (the first such character named), or None."""
    for ch in value:
        if _is_disguising(ch):
            return f"{field} must not contain invisible or text-direction characters (U+{ord(ch):04X})"
    return None


def display_text_problem(field: str, value: str) -> str | None:
    """Why `value` cannot be shown as `field` in the cabinet (control or disguising characters), or None
    when it can."""
    if any(_is_control(ch) for ch in value):
        return f"{field} must not contain control characters"
    return disguising_character_problem(field, value)
