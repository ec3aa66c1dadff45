"""How an open invoice is paid: the operator's `[billing] payment_link` template and `payment_instructions`
text, checked when the config loads and filled per invoice by the cabinet."""

from __future__ import annotations

import string
from collections.abc import Mapping
from urllib.parse import quote, urlsplit

# What a payment template may name, with the sample the load-time check fills in.
PAYMENT_PLACEHOLDERS: Mapping[str, str] = {
    "invoice_id": "inv_0123456789abcdef",
    "amount": "49.00",
    "amount_micros": "49000000",
    "currency": "USD",
    "organization_id": "org_0123456789abcdef",
}
MAX_PAYMENT_TEXT = 2000


def _placeholders(template: str) -> list[str] | str:
    """The field names of a `{name}` template, or why it cannot be parsed."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        return f"is not a valid template ({exc}); write a literal brace as {{{{ or }}}}"
    return [field for _, field, _, _ in parsed if field is not None]


def _template_problem(template: str) -> str | None:
    fields = _placeholders(template)
    if isinstance(fields, str):
        return fields
    for field in fields:
        if field not in PAYMENT_PLACEHOLDERS:
            known = ", ".join("{" + name + "}" for name in PAYMENT_PLACEHOLDERS)
            return f"names an unknown placeholder {{{field}}}; known: {known}"
    return None


def payment_link_template(value: str) -> str | None:
    """A config check: a URL template whose placeholders are known and which fills to an http(s) URL."""
    if problem := _template_problem(value):
        return problem
    parts = urlsplit(fill_payment_template(value, PAYMENT_PLACEHOLDERS, url=True))
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "expected an http:// or https:// URL template with a host"
    return None


def payment_text_template(value: str) -> str | None:
    """A config check: a non-empty text of at most MAX_PAYMENT_TEXT characters with known placeholders."""
    if not value.strip():
        return "must not be empty (remove the key to leave it unset)"
    if len(value) > MAX_PAYMENT_TEXT:
        return f"must be at most {MAX_PAYMENT_TEXT} characters"
    return _template_problem(value)


def fill_payment_template(template: str, values: Mapping[str, str], *, url: bool = False) -> str:
    """The template with its placeholders replaced (percent-encoded in a URL, so a value cannot change the
    link's host or path)."""
    encoded = {name: quote(value, safe="") if url else value for name, value in values.items()}
    return template.format_map(encoded)
