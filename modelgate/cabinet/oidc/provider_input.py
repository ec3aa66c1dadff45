"""Reading a provider's settings from a create or update request; every problem is a 400 naming the field."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

from modelgate.cabinet.oidc.providers import PROVISIONED_ROLES, TOKEN_AUTH_METHODS, ProviderSettings
from modelgate.cabinet.oidc.urls import idp_url_problem
from modelgate.cabinet.requests import bad_request, required_choice, required_secret, required_text

DEFAULT_SCOPES = ("openid", "email", "profile")
MAX_URL_LENGTH = 500
MAX_CLIENT_ID_LENGTH = 255
MAX_SECRET_LENGTH = 1024
MAX_LIST_ITEMS = 50
# RFC 6749 section 3.3: a scope token is printable ASCII without space, `"` and `\`.
_SCOPE_TOKEN = re.compile(r"^[\x21\x23-\x5b\x5d-\x7e]{1,100}$")
_DOMAIN = re.compile(r"^(?=.{1,253}$)(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z][a-z0-9-]{0,62}$")
_FIELDS = (
    "name",
    "issuer",
    "clientId",
    "clientSecret",
    "tokenAuthMethod",
    "scopes",
    "allowedDomains",
    "defaultRole",
    "autoProvision",
    "assumePkceS256",
)


def _reject_unknown_fields(body: Mapping[str, Any]) -> None:
    # A misspelt security setting must not be silently ignored.
    unknown = sorted(set(body) - set(_FIELDS))
    if unknown:
        raise bad_request(f"unknown field: {unknown[0]} (known: {', '.join(_FIELDS)})")


def _issuer(body: Mapping[str, Any], plain_http_loopback: bool) -> str:
    issuer = required_text(body, "issuer", max_length=MAX_URL_LENGTH)
    if problem := idp_url_problem(issuer, plain_http_loopback=plain_http_loopback):
        raise bad_request(f"issuer {problem}")
    if urlsplit(issuer).query:
        raise bad_request("issuer must not contain a query")
    return issuer


def _client_secret(body: Mapping[str, Any]) -> str:
    secret = required_secret(body, "clientSecret")
    if len(secret) > MAX_SECRET_LENGTH or not secret.isprintable():
        raise bad_request(f"clientSecret must be at most {MAX_SECRET_LENGTH} printable characters")
    return secret


def _string_list(body: Mapping[str, Any], field: str) -> list[str]:
    value = body.get(field)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise bad_request(f"{field} must be a list of strings")
    if len(value) > MAX_LIST_ITEMS:
        raise bad_request(f"{field} must have at most {MAX_LIST_ITEMS} entries")
    return list(dict.fromkeys(v.strip() for v in value))


def _scopes(body: Mapping[str, Any]) -> tuple[str, ...]:
    scopes = _string_list(body, "scopes")
    if bad := [s for s in scopes if not _SCOPE_TOKEN.match(s)]:
        raise bad_request(f"scopes has an invalid scope: {bad[0]!r}")
    if "openid" not in scopes:
        raise bad_request("scopes must include openid")
    return tuple(scopes)


def _allowed_domains(body: Mapping[str, Any]) -> tuple[str, ...]:
    domains = [d.lower() for d in _string_list(body, "allowedDomains")]
    if not domains:
        # Without a domain list any account of a shared provider could join the organization.
        raise bad_request("allowedDomains must name at least one e-mail domain")
    if bad := [d for d in domains if not _DOMAIN.match(d)]:
        raise bad_request(f"allowedDomains has an invalid domain: {bad[0][:100]!r}")
    return tuple(dict.fromkeys(domains))


def _boolean(body: Mapping[str, Any], field: str) -> bool:
    value = body.get(field)
    if not isinstance(value, bool):
        raise bad_request(f"{field} must be true or false")
    return value


Parser = Callable[[Mapping[str, Any]], Any]


def _parsers(plain_http_loopback: bool) -> dict[str, tuple[str, Parser]]:
    """Each API field with the settings attribute it fills and how it is read."""
    return {
        "name": ("name", lambda b: required_text(b, "name")),
        "issuer": ("issuer", lambda b: _issuer(b, plain_http_loopback)),
        "clientId": ("client_id", lambda b: required_text(b, "clientId", max_length=MAX_CLIENT_ID_LENGTH)),
        "clientSecret": ("client_secret", _client_secret),
        "tokenAuthMethod": (
            "token_auth_method",
            lambda b: required_choice(b, "tokenAuthMethod", TOKEN_AUTH_METHODS),
        ),
        "scopes": ("scopes", _scopes),
        "allowedDomains": ("allowed_domains", _allowed_domains),
        "defaultRole": ("default_role", lambda b: required_choice(b, "defaultRole", PROVISIONED_ROLES)),
        "autoProvision": ("auto_provision", lambda b: _boolean(b, "autoProvision")),
        "assumePkceS256": ("assume_pkce_s256", lambda b: _boolean(b, "assumePkceS256")),
    }


_DEFAULTS: dict[str, Any] = {
    "tokenAuthMethod": "client_secret_basic",
    "scopes": list(DEFAULT_SCOPES),
    "defaultRole": "member",
    "autoProvision": False,
    "assumePkceS256": False,
}


def new_provider_settings(body: Mapping[str, Any], *, plain_http_loopback: bool) -> ProviderSettings:
    """The settings of a provider to create; optional fields take their defaults."""
    _reject_unknown_fields(body)
    complete = {**_DEFAULTS, **{k: v for k, v in body.items() if v is not None}}
    values = {attribute: parse(complete) for attribute, parse in _parsers(plain_http_loopback).values()}
    return ProviderSettings(**values)


def changed_settings(
    settings: ProviderSettings, body: Mapping[str, Any], *, plain_http_loopback: bool
) -> ProviderSettings:
    """`settings` with the fields present in an update request replaced."""
    _reject_unknown_fields(body)
    if not body:
        raise bad_request(f"give at least one field to change ({', '.join(_FIELDS)})")
    parsers = _parsers(plain_http_loopback)
    return replace(settings, **{parsers[field][0]: parsers[field][1](body) for field in body})
