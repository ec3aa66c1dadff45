"""Read a TOML file, interpolate ${ENV} references, validate every key and build a Config."""

from __future__ import annotations

import difflib
import enum
import importlib.util
import ipaddress
import math
import os
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from functools import partial
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

from .schema import (
    LOG_LEVELS,
    PROVIDER_KINDS,
    REGISTRATION_MODES,
    REQUEST_KINDS,
    SPOOL_FSYNC_POLICIES,
    BillingConfig,
    CabinetConfig,
    Config,
    LoggingConfig,
    ModelConfig,
    PlanConfig,
    PluginsConfig,
    PriceConfig,
    ProviderConfig,
    RedisConfig,
    RoutingConfig,
    RowConfig,
    ServerConfig,
    StorageConfig,
    TracingConfig,
)

DEFAULT_CONFIG_PATH = Path(__file__).with_name("defaults.toml")
EMBEDDED_SOURCE = "<embedded defaults>"

_REFERENCE = re.compile(r"\$\$\{|\$\{([^}]*)(\}?)")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SLUG = re.compile(r"[a-z0-9_-]+")
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_CURRENCY = re.compile(r"[A-Z]{3}")
_CLIP = 60

T = TypeVar("T")
Check = Callable[[Any], str | None]


class ConfigError(Exception):
    """Everything wrong with a configuration, one "{file}: {key path}: {reason}" line per problem."""

    def __init__(self, problems: Iterable[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


def load_config(
    path: str | os.PathLike[str] | None,
    env: Mapping[str, str] | None = None,
    *,
    chain: Sequence[tuple[str, bool]] = (),
) -> Config:
    """Load and validate path (the embedded defaults when None); raise ConfigError listing every problem.

    `chain` is (name, essential) of every plugin of the model API's chain (`modelgate.plugins.chain_plugins`,
    read from the plugin classes, which sit above this layer): `plugins.disabled` is checked against it.
    Without it that check is left to the chain's build, which refuses the same names at start.
    """
    if path is None:
        source, file = EMBEDDED_SOURCE, DEFAULT_CONFIG_PATH
    else:
        source, file = os.fspath(path), Path(path)
    data = _read_toml(file, source)
    context = _Context(source, os.environ if env is None else env, tuple(chain))
    config = _build(_Table(context, "", data))
    if context.problems:
        raise ConfigError(context.problems)
    return config


def _read_toml(file: Path, source: str) -> dict[str, Any]:
    try:
        raw = file.read_bytes()
    except OSError as exc:
        raise ConfigError([f"{source}: cannot read file: {exc.strerror or exc}"]) from exc
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError([f"{source}: invalid TOML: not UTF-8 (byte {exc.start})"]) from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([f"{source}: invalid TOML: {exc}"]) from exc


class _Absent(enum.Enum):
    """Marks a key that is missing, or whose value was unusable and already reported."""

    ABSENT = enum.auto()


_ABSENT = _Absent.ABSENT


@dataclass(slots=True)
class _Context:
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
        return _ABSENT if broken else text


class _Table:
    """One TOML table being read: typed getters that report problems and remember the keys they know."""

    def __init__(self, context: _Context, path: str, data: dict[str, Any]) -> None:
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

    def string(self, key: str, *, required: bool = False, check: Check | None = None) -> str | _Absent:
        return self._scalar(key, required, check, "a string", lambda v: isinstance(v, str))

    def integer(self, key: str, *, check: Check | None = None) -> int | _Absent:
        return self._scalar(key, False, check, "an integer", _is_int)

    def number(self, key: str, *, check: Check | None = None) -> float | _Absent:
        value = self._scalar(key, False, None, "a number", lambda v: _is_int(v) or isinstance(v, float))
        if value is _ABSENT:
            return _ABSENT
        if not math.isfinite(value):
            self.report(key, f"must be a finite number, got {value}")
        elif check and (reason := check(value)):
            self.report(key, reason)
        return float(value)

    def boolean(self, key: str) -> bool | _Absent:
        return self._scalar(key, False, None, "a boolean", lambda v: isinstance(v, bool))

    def choice(self, key: str, options: Sequence[str], noun: str, *, required: bool = False) -> str | _Absent:
        return self.string(key, required=required, check=lambda v: _membership(noun, v, options))

    def strings(
        self, key: str, *, required: str | None = None, check: Check | None = None
    ) -> tuple[str, ...] | _Absent:
        """An array of strings; required is the problem to report when it is missing or empty."""
        value = self._value(key)
        if value is _ABSENT or not self._expect(key, value, "an array of strings", list):
            if value is _ABSENT and required:
                self.report(key, required)
            return _ABSENT
        if not value and required:
            self.report(key, required)
        items: list[str] = []
        for index, raw in enumerate(value):
            path = f"{self.key_path(key)}[{index}]"
            item = self.context.resolve(raw, path)
            if item is _ABSENT:
                continue
            if not isinstance(item, str):
                self.context.report(path, f"expected a string, got {_describe(item)}")
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
        if value is _ABSENT or not self._expect(key, value, "a table of strings", dict):
            return ()
        pairs: list[tuple[str, str]] = []
        for name, raw in value.items():
            path = f"{self.key_path(key)}.{name}"
            item = self.context.resolve(raw, path)
            if item is _ABSENT:
                continue
            if not isinstance(item, str):
                self.context.report(path, f"expected a string, got {_describe(item)}")
            elif reason := check_name(name) or check_value(item):
                self.context.report(path, reason)
            else:
                pairs.append((name, item))
        return tuple(pairs)

    def table(self, key: str) -> _Table:
        """A sub-table; a missing one reads as empty so every key takes its default."""
        value = self._value(key)
        if value is _ABSENT or not self._expect(key, value, "a table", dict):
            value = {}
        return _Table(self.context, self.key_path(key), value)

    def tables(self, key: str, *, required: str | None = None) -> list[_Table]:
        """An array of tables; required is the problem to report when it is missing or empty."""
        value = self._value(key)
        if value is _ABSENT or not self._expect(key, value, "an array of tables", list):
            if value is _ABSENT and required:
                self.report(key, required)
            return []
        if not value and required:
            self.report(key, required)
        tables = []
        for index, item in enumerate(value):
            path = f"{self.key_path(key)}[{index}]"
            if isinstance(item, dict):
                tables.append(_Table(self.context, path, item))
            else:
                self.context.report(path, f"expected a table, got {_describe(item)}")
        return tables

    def finish(self) -> None:
        """Report every key that no getter asked for; call after reading all known keys."""
        for key in self._data:
            if key not in self._known:
                self.report(key, _unknown_key(key, self._known))

    def _value(self, key: str, required: bool = False) -> Any:
        self._known.append(key)
        if key not in self._data:
            if required:
                self.report(key, "missing required key")
            return _ABSENT
        return self.context.resolve(self._data[key], self.key_path(key))

    def _expect(self, key: str, value: Any, expected: str, accept: type | Callable[[Any], bool]) -> bool:
        ok = isinstance(value, accept) if isinstance(accept, type) else accept(value)
        if not ok:
            self.report(key, f"expected {expected}, got {_describe(value)}")
        return ok

    def _scalar(
        self, key: str, required: bool, check: Check | None, expected: str, accept: Callable[[Any], bool]
    ) -> Any:
        value = self._value(key, required)
        if value is _ABSENT or not self._expect(key, value, expected, accept):
            return _ABSENT
        # A value that fails its check is still returned: the load fails anyway, and keeping it
        # (a misspelled name, say) avoids follow-on "unknown provider" noise elsewhere.
        if check and (reason := check(value)):
            self.report(key, reason)
        return value


def _build(root: _Table) -> Config:
    server = _server(root.table("server"))
    storage = _storage(root.table("storage"))
    redis = _redis(root.table("redis"))
    cabinet = _cabinet(root.table("cabinet"))
    routing = _routing(root.table("routing"))
    billing = _billing(root.table("billing"))
    logging = _logging(root.table("logging"))
    tracing = _tracing(root.table("tracing"))
    plugins = _plugins(root.table("plugins"))
    providers = _unique(root.tables("providers"), _provider, "name", "provider name")
    by_name = {provider.name: provider for provider in providers}
    model_tables = root.tables("models", required="at least one model is required ([[models]])")
    models = _unique(model_tables, lambda t: _model(t, by_name), "name", "model name")
    plan_tables = root.tables("plans", required="at least one plan is required ([[plans]])")
    plans = _unique(plan_tables, _plan, "code", "plan code")
    root.finish()
    return Config(
        server=server,
        storage=storage,
        redis=redis,
        cabinet=cabinet,
        routing=routing,
        billing=billing,
        logging=logging,
        tracing=tracing,
        plugins=plugins,
        providers=providers,
        models=models,
        plans=plans,
        source=root.context.source,
    )


def _unique(tables: list[_Table], build: Callable[[_Table], T | None], key: str, noun: str) -> tuple[T, ...]:
    """Build one record per table, reporting records whose key repeats an earlier one."""
    records: list[T] = []
    first_seen: dict[str, str] = {}
    for table in tables:
        record = build(table)
        if record is None:
            continue
        value = getattr(record, key)
        if value in first_seen:
            table.report(key, f"duplicate {noun} {value!r} (first defined in {first_seen[value]})")
        else:
            first_seen[value] = table.path
        records.append(record)
    return tuple(records)


def _server(t: _Table) -> ServerConfig:
    values = _given(
        host=t.string("host", check=_non_empty),
        port=t.integer("port", check=_between(1, 65535)),
        workers=t.integer("workers", check=_at_least(1)),
        shutdown_grace_seconds=t.number("shutdown_grace_seconds", check=_at_least(0)),
        drain_seconds=t.number("drain_seconds", check=_at_least(0)),
        public_url=t.string("public_url", check=lambda v: _http_url(v) if v else None),
        operator_token=t.string("operator_token", check=_secret),
        metrics_token=t.string("metrics_token", check=_secret),
        trusted_proxies=t.strings("trusted_proxies", check=_ip_network),
        header_timeout_seconds=t.number("header_timeout_seconds", check=_above(0)),
        body_idle_timeout_seconds=t.number("body_idle_timeout_seconds", check=_above(0)),
        keepalive_timeout_seconds=t.number("keepalive_timeout_seconds", check=_above(0)),
        max_connections=t.integer("max_connections", check=_at_least(1)),
    )
    t.finish()
    if "public_url" in values:
        values["public_url"] = values["public_url"].rstrip("/")
    return ServerConfig(**values)


def _ip_network(value: str) -> str | None:
    try:
        ipaddress.ip_network(value, strict=False)
    except ValueError:
        return f"expected an IP address or network such as 10.0.0.0/8, got {value!r}"
    return None


def _storage(t: _Table) -> StorageConfig:
    values = _given(
        url=t.string("url", check=_url_prefix("sqlite:///", "postgresql://", "postgres://")),
        pool_size=t.integer("pool_size", check=_at_least(1)),
    )
    t.finish()
    return StorageConfig(**values)


def _redis(t: _Table) -> RedisConfig:
    values = _given(
        url=t.string("url", check=_url_prefix("redis://", "rediss://", "unix://")),
        fail_open=t.boolean("fail_open"),
    )
    t.finish()
    return RedisConfig(**values)


def _cabinet(t: _Table) -> CabinetConfig:
    values = _given(
        session_ttl_seconds=t.integer("session_ttl_seconds", check=_at_least(60)),
        login_max_failures=t.integer("login_max_failures", check=_at_least(1)),
        login_first_delay_seconds=t.number("login_first_delay_seconds", check=_above(0)),
        login_lockout_seconds=t.integer("login_lockout_seconds", check=_at_least(1)),
        invitation_ttl_seconds=t.integer("invitation_ttl_seconds", check=_at_least(60)),
        registration=t.choice("registration", REGISTRATION_MODES, "registration mode"),
        invitation_webhook_url=t.string("invitation_webhook_url", check=_http_url),
        cabinet_url=t.string("cabinet_url", check=_http_url),
    )
    t.finish()
    return CabinetConfig(**values)


def _routing(t: _Table) -> RoutingConfig:
    values = _given(
        cooldown_seconds=t.number("cooldown_seconds", check=_at_least(0)),
        failure_threshold=t.integer("failure_threshold", check=_at_least(1)),
    )
    t.finish()
    return RoutingConfig(**values)


def _billing(t: _Table) -> BillingConfig:
    values = _given(
        ledger_flush_interval_seconds=t.number("ledger_flush_interval_seconds", check=_above(0)),
        ledger_batch_size=t.integer("ledger_batch_size", check=_at_least(1)),
        ledger_max_queue=t.integer("ledger_max_queue", check=_at_least(1)),
        spool_dir=t.string("spool_dir"),
        spool_fsync=t.choice("spool_fsync", SPOOL_FSYNC_POLICIES, "spool fsync policy"),
        spool_fsync_interval_seconds=t.number("spool_fsync_interval_seconds", check=_above(0)),
        currency=t.string("currency", check=_currency),
    )
    t.finish()
    return BillingConfig(**values)


def _logging(t: _Table) -> LoggingConfig:
    values = _given(
        level=t.choice("level", LOG_LEVELS, "log level"),
        json=t.boolean("json"),
        log_prompts=t.boolean("log_prompts"),
    )
    t.finish()
    return LoggingConfig(**values)


# What `[tracing] enabled = true` imports: the `otel` extra.
_OPENTELEMETRY_MODULES = ("opentelemetry.sdk.trace", "opentelemetry.exporter.otlp.proto.http.trace_exporter")


def _opentelemetry_installed() -> bool:
    try:
        return all(importlib.util.find_spec(name) is not None for name in _OPENTELEMETRY_MODULES)
    except (ImportError, ValueError):  # a parent package is missing or broken
        return False


def _tracing(t: _Table) -> TracingConfig:
    values = _given(
        enabled=t.boolean("enabled"),
        service_name=t.string("service_name", check=_non_empty),
    )
    if values.get("enabled") and not _opentelemetry_installed():
        t.report(
            "enabled",
            "tracing needs OpenTelemetry, which is not installed: pip install 'modelgate[otel]' "
            "(opentelemetry-sdk and opentelemetry-exporter-otlp-proto-http), or set enabled = false",
        )
    t.finish()
    return TracingConfig(**values)


def _plugins(t: _Table) -> PluginsConfig:
    chain = t.context.chain
    values = _given(
        disabled=t.strings("disabled", check=partial(disableable_plugin, chain) if chain else None)
    )
    t.finish()
    return PluginsConfig(**values)


def _provider(t: _Table) -> ProviderConfig | None:
    name = t.string("name", required=True, check=_slug)
    kind = t.choice("kind", PROVIDER_KINDS, "provider kind", required=True)
    base_url = t.string("base_url", check=_http_url)
    values = _given(
        api_key=t.string("api_key", check=_secret),
        connect_timeout=t.number("connect_timeout", check=_above(0)),
        first_byte_timeout=t.number("first_byte_timeout", check=_above(0)),
        read_timeout=t.number("read_timeout", check=_above(0)),
        pool_size=t.integer("pool_size", check=_at_least(1)),
        native_messages=t.boolean("native_messages"),
        anthropic_version=t.string("anthropic_version", check=_non_empty),
        headers=t.string_pairs("headers", check_name=_header_name, check_value=_header_value),
    )
    if not t.has("base_url") and kind not in (_ABSENT, "mock"):
        t.report("base_url", "missing required key (only kind 'mock' may omit it)")
    t.finish()
    if name is _ABSENT:
        return None
    if base_url is not _ABSENT:
        values["base_url"] = base_url.rstrip("/")
    # A missing kind was reported above; the placeholder never leaves the loader.
    return ProviderConfig(name=name, kind="" if kind is _ABSENT else kind, **values)


def _model(t: _Table, providers: Mapping[str, ProviderConfig]) -> ModelConfig | None:
    name = t.string("name", required=True, check=_non_empty)
    kinds = t.strings(
        "kinds",
        required="at least one request kind is required",
        check=lambda v: _membership("request kind", v, REQUEST_KINDS),
    )
    row_tables = t.tables("rows", required="at least one row is required ([[models.rows]])")
    model_name = "" if name is _ABSENT else name
    rows = tuple(row for rt in row_tables if (row := _row(rt, model_name, providers)) is not None)
    prices = _prices(t.table("prices"))
    values = _given(
        default_max_tokens=t.integer("default_max_tokens", check=_at_least(1)),
        max_context_tokens=t.integer("max_context_tokens", check=_at_least(1)),
        max_audio_seconds=t.number("max_audio_seconds", check=_above(0)),
    )
    t.finish()
    if name is _ABSENT:
        return None
    model = ModelConfig(
        name=name, kinds=() if kinds is _ABSENT else kinds, rows=rows, prices=prices, **values
    )
    if model.default_max_tokens > model.max_context_tokens:
        limit, value = model.max_context_tokens, model.default_max_tokens
        t.report("default_max_tokens", f"must not exceed max_context_tokens ({limit}), got {value}")
    return model


def _row(t: _Table, model_name: str, providers: Mapping[str, ProviderConfig]) -> RowConfig | None:
    provider_name = t.string("provider", required=True, check=lambda v: _membership("provider", v, providers))
    upstream_model = t.string("upstream_model", check=_non_empty)
    host = t.string("host", check=_non_empty)
    values = _given(weight=t.number("weight", check=_above(0)), priority=t.integer("priority"))
    t.finish()
    if provider_name is _ABSENT:
        return None
    provider = providers.get(provider_name)
    if host is _ABSENT:
        host = provider.host if provider else None
    upstream_model = model_name if upstream_model is _ABSENT else upstream_model
    return RowConfig(provider=provider_name, upstream_model=upstream_model, host=host, **values)


def _prices(t: _Table) -> PriceConfig:
    values = _given(**{f.name: t.number(f.name, check=_at_least(0)) for f in fields(PriceConfig)})
    t.finish()
    return PriceConfig(**values)


def _plan(t: _Table) -> PlanConfig | None:
    code = t.string("code", required=True, check=_non_empty)
    values = _given(
        name=t.string("name", check=_non_empty),
        monthly_fee=t.number("monthly_fee", check=_at_least(0)),
        credit_limit=t.number("credit_limit", check=_at_least(0)),
        rpm=t.integer("rpm", check=_at_least(0)),
        tpm=t.integer("tpm", check=_at_least(0)),
        realtime_concurrency=t.integer("realtime_concurrency", check=_at_least(0)),
        monthly_allowance=t.number("monthly_allowance", check=_at_least(0)),
        self_service=t.boolean("self_service"),
    )
    t.finish()
    return None if code is _ABSENT else PlanConfig(code=code, **values)


def _given(**values: Any) -> dict[str, Any]:
    """Keep only the keys the file supplied, so the dataclass defaults apply to the rest."""
    return {key: value for key, value in values.items() if value is not _ABSENT}


def _is_int(value: Any) -> bool:
    # bool is an int subclass, but `workers = true` is a mistake, not 1.
    return isinstance(value, int) and not isinstance(value, bool)


def _describe(value: Any) -> str:
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, int):
        return f"integer {value}"
    if isinstance(value, float):
        return f"float {value}"
    if isinstance(value, str):
        return f"string {_clip(value)!r}"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    return f"{type(value).__name__} {value}"  # TOML dates and times


def _clip(text: str) -> str:
    return text if len(text) <= _CLIP else text[:_CLIP] + "..."


def _suggest(value: str, options: Sequence[str]) -> str | None:
    # Case is compared loosely so "INFO" still suggests "info".
    for candidate in (value, value.lower()):
        if matches := difflib.get_close_matches(candidate, options, n=1):
            return matches[0]
    return None


def _unknown_key(key: str, known: Sequence[str]) -> str:
    if match := _suggest(key, known):
        return f"unknown key; did you mean {match!r}?"
    return f"unknown key; expected one of: {', '.join(known)}" if known else "unknown key"


def disableable_plugin(plugins: Sequence[tuple[str, bool]], value: str) -> str | None:
    """The problem with naming `value` in `plugins.disabled`, given the chain's (name, essential) pairs."""
    optional = [name for name, essential in plugins if not essential]
    if (value, True) in plugins:
        return f"plugin {value!r} cannot be disabled; only these can: {', '.join(optional)}"
    return _membership("plugin", value, optional)


def _membership(noun: str, value: str, options: Iterable[str]) -> str | None:
    options = list(options)
    if value in options:
        return None
    reason = f"unknown {noun} {value!r}"
    if match := _suggest(value, options):
        return f"{reason}; did you mean {match!r}?"
    if not options:
        return f"{reason} (none are defined)"
    return f"{reason}; expected one of: {', '.join(options)}"


def _at_least(minimum: float) -> Check:
    return lambda v: None if v >= minimum else f"must be at least {minimum}, got {v}"


def _above(bound: float) -> Check:
    return lambda v: None if v > bound else f"must be greater than {bound}, got {v}"


def _between(low: int, high: int) -> Check:
    return lambda v: None if low <= v <= high else f"must be between {low} and {high}, got {v}"


def _non_empty(value: str) -> str | None:
    return None if value.strip() else "must not be empty"


def _secret(value: str) -> str | None:
    # An empty token or key would silently mean "anyone" or "no auth" downstream.
    return None if value.strip() else "must not be empty (remove the key to leave it unset)"


def _slug(value: str) -> str | None:
    if _SLUG.fullmatch(value):
        return None
    return f"must contain only lowercase letters, digits, '_' and '-', got {_clip(value)!r}"


def _currency(value: str) -> str | None:
    return (
        None if _CURRENCY.fullmatch(value) else f"expected a 3-letter ISO 4217 code like 'USD', got {value!r}"
    )


def _http_url(value: str) -> str | None:
    # URLs are never echoed back: they may carry credentials.
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "expected an http:// or https:// URL with a host"
    return None


def _url_prefix(*prefixes: str) -> Check:
    def check(value: str) -> str | None:
        if value.startswith(prefixes):
            return None
        return f"expected a URL starting with {' or '.join(prefixes)}"

    return check


def _header_name(name: str) -> str | None:
    return None if _HEADER_NAME.fullmatch(name) else "not a valid HTTP header name"


def _header_value(value: str) -> str | None:
    # CR/LF would let a header value smuggle extra headers into upstream requests.
    return "header value must not contain CR, LF or NUL" if re.search(r"[\r\n\0]", value) else None
