"""The built-in detectors of content rules: for each, an RE2 source and a check on what it found that
removes false positives (a Luhn or mod-97 checksum, a date's shape) or extends the match (a private key).

The regexes find candidates; `refine(text, start, end)` decides on each: the span of the match (perhaps
moved), or None when the candidate is not one. Each regex's match length is bounded (RE2 caps a repetition
at 1000); the credentials detector's check extends its matches up to PRIVATE_KEY_SPAN.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

# A match of a detector that reaches past this many characters is counted as unbounded by the matcher.
PRIVATE_KEY_SPAN = 16 * 1024

Refine = Callable[[str, int, int], "tuple[int, int] | None"]


@dataclass(frozen=True, slots=True)
class Detector:
    """One built-in detector: its RE2 source, the most characters it matches, and its check on a candidate."""

    name: str
    source: str
    longest: int
    refine: Refine


def _digits(text: str) -> str:
    return "".join(char for char in text if char.isdigit())


def luhn_valid(digits: str) -> bool:
    """True when a string of digits passes the Luhn checksum of payment card numbers."""
    total = 0
    for position, char in enumerate(reversed(digits)):
        value = ord(char) - 48
        if position % 2:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


def _is_card(text: str, start: int, end: int) -> bool:
    digits = _digits(text[start:end])
    return 13 <= len(digits) <= 19 and luhn_valid(digits)


# Each step takes a digit, after at most one separator: one way to read any text, so linear.
_DIGIT_RUN = re.compile(r"(?:[ -]?\d)*")
_DIGIT_GROUP = re.compile(r"\d+")


def _refine_card(text: str, start: int, end: int) -> tuple[int, int] | None:
    if _is_card(text, start, end):
        return start, end
    # Groups of digits around a card ("ref 1234 4111 1111 1111 1111"): the first card in them, leftmost and
    # then longest, from group to group.
    run = _DIGIT_RUN.match(text, end, min(len(text), start + 64))
    run_end = run.end() if run is not None else end
    if run_end < len(text) and text[run_end].isalnum():
        run_end = start  # the run ends inside a word: only the regex's own candidate counts
    groups = [(group.start(), group.end()) for group in _DIGIT_GROUP.finditer(text, start, max(end, run_end))]
    for first, (window_start, _) in enumerate(groups):
        for _, window_end in reversed(groups[first:]):
            if _is_card(text, window_start, window_end):
                return window_start, window_end
    return None


# Lengths of the IBANs of some countries (ISO 13616 registry); other countries are checked by mod-97 alone.
IBAN_LENGTHS = {
    "AD": 24, "AT": 20, "BE": 16, "BG": 22, "CH": 21, "CY": 28, "CZ": 24, "DE": 22, "DK": 18, "EE": 20,
    "ES": 24, "FI": 18, "FR": 27, "GB": 22, "GR": 27, "HR": 21, "HU": 28, "IE": 22, "IS": 26, "IT": 27,
    "LI": 21, "LT": 20, "LU": 20, "LV": 21, "MC": 27, "MT": 31, "NL": 18, "NO": 15, "PL": 28, "PT": 25,
    "RO": 24, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "TR": 26,
}  # fmt: skip


def iban_valid(iban: str) -> bool:
    """True when an IBAN without spaces has its country's length (where known) and a valid mod-97 check."""
    expected = IBAN_LENGTHS.get(iban[:2])
    if (expected is not None and len(iban) != expected) or not 15 <= len(iban) <= 34:
        return False
    rearranged = iban[4:] + iban[:4]
    return int("".join(str(int(char, 36)) for char in rearranged)) % 97 == 1


def _refine_iban(text: str, start: int, end: int) -> tuple[int, int] | None:
    # The regex may take an uppercase word that follows the IBAN: try each end at a group boundary, longest
    # first, so "DE89 3704 ... 00 ABCD" still finds the IBAN before "ABCD".
    compact = ""
    ends: list[tuple[int, str]] = []
    for index in range(start, end):
        char = text[index]
        if char != " ":
            compact += char
            if index + 1 == end or text[index + 1] == " ":
                ends.append((index + 1, compact))
    for candidate_end, iban in reversed(ends):
        if iban_valid(iban):
            return start, candidate_end
    return None


# A date, an IPv4 address or an amount in thousands ("10 000 000", "1.250.000") has the digits of a phone
# number but is not one. Bounded alternatives on a candidate of at most 48 characters.
_NOT_A_PHONE = re.compile(
    r"\d{4}[-./]\d{1,2}[-./]\d{1,2}|\d{1,2}[-./]\d{1,2}[-./]\d{4}|\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}"
    r"|\d{1,3}(?: \d{3}){2,4}|\d{1,3}(?:\.\d{3}){2,4}"
)


def _refine_phone(text: str, start: int, end: int) -> tuple[int, int] | None:
    candidate = text[start:end]
    digits = _digits(candidate)
    if not 7 <= len(digits) <= 15 or _NOT_A_PHONE.fullmatch(candidate):
        return None
    if not candidate.startswith("+") and len(digits) >= 13 and luhn_valid(digits):
        return None  # a card number, for the payment_card detector
    return start, end


def _keep(text: str, start: int, end: int) -> tuple[int, int] | None:
    return start, end


_PRIVATE_KEY_END = re.compile(r"-----END [A-Z0-9 ]{0,40}PRIVATE KEY-----")
_BASE64URL_RUN = re.compile(r"[A-Za-z0-9_.-]*")


def _refine_credential(text: str, start: int, end: int) -> tuple[int, int] | None:
    if text.startswith("-----BEGIN", start):
        # Through the first END line within PRIVATE_KEY_SPAN; without one, the BEGIN line alone.
        found = _PRIVATE_KEY_END.search(text, end, min(len(text), start + PRIVATE_KEY_SPAN))
        return start, found.end() if found else end
    if text.startswith("sk-", start) and not any(char.isdigit() for char in text[start:end]):
        return None  # words joined by hyphens ("sk-learn-compatible-..."), not a random key
    if text.startswith("eyJ", start):
        # A JWT's payload and signature may pass RE2's 1000-character repetition: take the rest of the token.
        rest = _BASE64URL_RUN.match(text, end, min(len(text), start + PRIVATE_KEY_SPAN))
        end = rest.end() if rest is not None else end
        while text.count(".", start, end) > 2 and text[end - 1] == ".":
            end -= 1  # the period ending a sentence, not a fourth segment
    return start, end


_EMAIL = (
    r"[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]{1,64}@"
    r"(?:[A-Za-z0-9-]{1,63}\.){1,8}[A-Za-z]{2,63}\b"
)
# International: "+" and a country code, then groups; national: groups with separators (one group may be in
# parentheses). The validator counts 7 to 15 digits (E.164) and drops dates and addresses.
_PHONE = (
    r"(?:\+[1-9]\d{0,3}(?:[ .-]?\(?\d{1,4}\)?){1,6}"
    r"|(?:\(\d{2,5}\)[ .-]?|\b\d{2,5}[ .-])\d{2,8}(?:[ .-]\d{2,8}){0,3})\b"
)
_CARD = r"\b\d(?:[ -]?\d){12,18}\b"
_IBAN = r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?\b"
_CREDENTIALS = "|".join(
    (
        r"\bsk-(?:proj-|ant-(?:api\d\d-)?)?[A-Za-z0-9_-]{20,300}",  # OpenAI, Anthropic
        r"\b(?:ghp|gho|ghs|ghu|ghr)_[A-Za-z0-9]{36}\b|\bgithub_pat_[A-Za-z0-9_]{22,255}",  # GitHub
        r"\bxox[abpors]-[A-Za-z0-9-]{10,250}",  # Slack
        r"\b(?:sk|rk)_live_[A-Za-z0-9]{16,247}",  # Stripe
        r"\bAIza[0-9A-Za-z_-]{35}",  # Google
        r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b",  # AWS access key ids
        r"-----BEGIN (?:[A-Z0-9]+ ){0,4}PRIVATE KEY-----",  # extended to its END line by the check
        r"\beyJ[A-Za-z0-9_-]{1,1000}\.eyJ[A-Za-z0-9_-]",  # a JWT's start, extended by the check
    )
)

# The credentials detector reaches PRIVATE_KEY_SPAN, which the matcher counts as unbounded.
DETECTOR_TABLE: dict[str, Detector] = {
    "email": Detector("email", _EMAIL, 64 + 1 + 8 * 64 + 63, _keep),
    "phone": Detector("phone", _PHONE, 48, _refine_phone),
    "payment_card": Detector("payment_card", _CARD, 37, _refine_card),
    "iban": Detector("iban", _IBAN, 46, _refine_iban),
    "credentials": Detector("credentials", _CREDENTIALS, PRIVATE_KEY_SPAN, _refine_credential),
}
