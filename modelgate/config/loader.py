"""Read a TOML file, interpolate ${ENV} references, validate every key and build a Config."""

from __future__ import annotations

import importlib.util
import ipaddress
import os
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

from .catalogue import CatalogueEntry, CatalogueError, find_in_catalogue, read_catalogue
from .dialects import default_base_url, read_options
from .payment import payment_link_template, payment_text_template
from .price_sheet import read_prices
from .reader import (
    ABSENT,
    Absent,
    ReadContext,
    Table,
    above,
    at_least,
    between,
    currency,
    given,
    header_name,
    header_value,
    http_url,
    membership,
    non_empty,
    secret,
    slug,
    url_prefix,
)
from .schema import (
    ABANDONED_CALL_POLICIES,
    EMAIL_SECURITY,
    HOST_DIALECTS,
    LOG_LEVELS,
    PROVIDER_KINDS,
    REGISTRATION_MODES,
    REQUEST_KINDS,
    SPOOL_FSYNC_POLICIES,
    BillingConfig,
    CabinetConfig,
    Config,
    EmailConfig,
    HostConfig,
    LoggingConfig,
    ModelConfig,
    PlanConfig,
    PluginsConfig,
    ProviderConfig,
    RedisConfig,
    RoutingConfig,
    RowConfig,
    ServerConfig,
    SsoConfig,
    StorageConfig,
    TracingConfig,
    dns_server_address,
)

DEFAULT_CONFIG_PATH = Path(__file__).with_name("defaults.toml")
EMBEDDED_SOURCE = "<embedded defaults>"
OUTAGE_MODES = ("refuse", "degraded", "open")  # `[redis] outage`


T = TypeVar("T")


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
    context = ReadContext(source, os.environ if env is None else env, tuple(chain))
    config = _build(Table(context, "", data))
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


def _build(root: Table) -> Config:
    server = _server(root.table("server"))
    storage = _storage(root.table("storage"))
    redis = _redis(root.table("redis"))
    cabinet = _cabinet(root.table("cabinet"))
    sso = _sso(root.table("sso"))
    email = _email(root.table("email")) if root.has("email") else None
    routing = _routing(root.table("routing"))
    billing = _billing(root.table("billing"))
    logging = _logging(root.table("logging"))
    tracing = _tracing(root.table("tracing"))
    plugins = _plugins(root.table("plugins"))
    providers = _unique(root.tables("providers"), _provider, "name", "provider name")
    by_name = {provider.name: provider for provider in providers}
    model_tables = root.tables("models", required="at least one model is required ([[models]])")
    extra = _operator_catalogue(root, billing.price_catalogue)
    models = _unique(model_tables, lambda t: _model(t, by_name, extra), "name", "model name")
    plan_tables = root.tables("plans", required="at least one plan is required ([[plans]])")
    plans = _unique(plan_tables, _plan, "code", "plan code")
    root.finish()
    return Config(
        server=server,
        storage=storage,
        redis=redis,
        cabinet=cabinet,
        sso=sso,
        email=email,
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


def _unique(tables: list[Table], build: Callable[[Table], T | None], key: str, noun: str) -> tuple[T, ...]:
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


def _server(t: Table) -> ServerConfig:
    values = given(
        host=t.string("host", check=non_empty),
        port=t.integer("port", check=between(1, 65535)),
        workers=t.integer("workers", check=at_least(1)),
        shutdown_grace_seconds=t.number("shutdown_grace_seconds", check=at_least(0)),
        drain_seconds=t.number("drain_seconds", check=at_least(0)),
        public_url=t.string("public_url", check=lambda v: http_url(v) if v else None),
        operator_token=t.string("operator_token", check=secret),
        metrics_token=t.string("metrics_token", check=secret),
        trusted_proxies=t.strings("trusted_proxies", check=_ip_network),
        header_timeout_seconds=t.number("header_timeout_seconds", check=above(0)),
        body_idle_timeout_seconds=t.number("body_idle_timeout_seconds", check=above(0)),
        keepalive_timeout_seconds=t.number("keepalive_timeout_seconds", check=above(0)),
        max_connections=t.integer("max_connections", check=at_least(1)),
        max_open_requests=t.integer("max_open_requests", check=at_least(0)),
        max_event_loop_lag_seconds=t.number("max_event_loop_lag_seconds", check=above(0)),
        model_api_front=t.boolean("model_api_front"),
        expose_provider_header=t.boolean("expose_provider_header"),
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


def _storage(t: Table) -> StorageConfig:
    values = given(
        url=t.string("url", check=url_prefix("sqlite:///", "postgresql://", "postgres://")),
        pool_size=t.integer("pool_size", check=at_least(1)),
        serve_cached_during_outage=t.boolean("serve_cached_during_outage"),
    )
    t.finish()
    return StorageConfig(**values)


def _redis(t: Table) -> RedisConfig:
    values = given(
        url=t.string("url", check=url_prefix("redis://", "rediss://", "unix://")),
        fail_open=t.boolean("fail_open"),
        outage=t.choice("outage", OUTAGE_MODES, "Redis outage mode"),
        sentinels=t.strings("sentinels", check=_sentinel_address),
        sentinel_master=t.string("sentinel_master", check=non_empty),
        sentinel_password=t.string("sentinel_password", check=non_empty),
        cluster_nodes=t.strings("cluster_nodes", check=_node_address),
    )
    if values.get("fail_open") and values.get("outage", "open") != "open":
        t.report("outage", '`fail_open = true` means outage = "open": set one of them, not both')
    if values.get("cluster_nodes"):
        _check_cluster(t, values)
    elif "sentinel_password" in values and not values.get("sentinels"):
        t.report("sentinel_password", "`sentinel_password` is the sentinels' own: set `sentinels` too")
    elif bool(values.get("sentinels")) != ("sentinel_master" in values):
        t.report("sentinel_master", "Redis Sentinel needs both `sentinels` and `sentinel_master`")
    elif values.get("sentinels") and not str(values.get("url", "redis://")).startswith("redis://"):
        t.report("url", "with Redis Sentinel the master is reached over plain TCP: a redis:// URL, or none")
    t.finish()
    return RedisConfig(**values)


def _check_cluster(t: Table, values: dict) -> None:
    if values.get("sentinels") or "sentinel_master" in values or "sentinel_password" in values:
        t.report(
            "cluster_nodes", "a Redis Cluster has no sentinels: set `cluster_nodes` or `sentinels`, not both"
        )
    url = str(values.get("url", "redis://"))
    if not url.startswith("redis://"):
        t.report("url", "with Redis Cluster the nodes are reached over plain TCP: a redis:// URL, or none")
    elif urlsplit(url).path.strip("/") not in ("", "0"):
        t.report("url", "a Redis Cluster has database 0 only")


def _node_address(value: str) -> str | None:
    try:
        sentinel_address(value)
    except ValueError:
        return f"expected a cluster node's host:port such as 10.0.0.7:6379 or [::1]:6379, got {value!r}"
    return None


def _sentinel_address(value: str) -> str | None:
    try:
        sentinel_address(value)
    except ValueError:
        return f"expected a sentinel's host:port such as 10.0.0.7:26379 or [::1]:26379, got {value!r}"
    return None


def sentinel_address(value: str) -> tuple[str, int]:
    """A sentinel's or a cluster node's `host:port` (an IPv6 host in brackets) as (host, port)."""
    host, colon, port = value.rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(value)
    if host.startswith("["):
        if not host.endswith("]"):
            raise ValueError(value)
        host = host[1:-1]
    return host, int(port)


def _cabinet(t: Table) -> CabinetConfig:
    values = given(
        session_ttl_seconds=t.integer("session_ttl_seconds", check=at_least(60)),
        login_max_failures=t.integer("login_max_failures", check=at_least(1)),
        login_first_delay_seconds=t.number("login_first_delay_seconds", check=above(0)),
        login_lockout_seconds=t.integer("login_lockout_seconds", check=at_least(1)),
        invitation_ttl_seconds=t.integer("invitation_ttl_seconds", check=at_least(60)),
        registration=t.choice("registration", REGISTRATION_MODES, "registration mode"),
        invitation_webhook_url=t.string("invitation_webhook_url", check=http_url),
        cabinet_url=t.string("cabinet_url", check=http_url),
        password_reset_ttl_seconds=t.integer("password_reset_ttl_seconds", check=at_least(60)),
        email_link_ttl_seconds=t.integer("email_link_ttl_seconds", check=at_least(60)),
        email_links_per_hour=t.integer("email_links_per_hour", check=at_least(1)),
    )
    t.finish()
    return CabinetConfig(**values)


def _sso(t: Table) -> SsoConfig:
    values = given(
        dns_resolvers=t.strings("dns_resolvers", check=_resolver_address),
        dns_timeout_seconds=t.number("dns_timeout_seconds", check=above(0)),
    )
    t.finish()
    return SsoConfig(**values)


def _resolver_address(value: str) -> str | None:
    try:
        dns_server_address(value)
    except ValueError:
        return f"expected a DNS server address such as 10.0.0.53, 10.0.0.53:5353 or [::1]:5353, got {value!r}"
    return None


def _email(t: Table) -> EmailConfig | None:
    values = given(
        host=t.string("host", required=True, check=non_empty),
        port=t.integer("port", check=between(1, 65535)),
        security=t.choice("security", EMAIL_SECURITY, "e-mail security"),
        username=t.string("username", check=non_empty),
        timeout_seconds=t.number("timeout_seconds", check=above(0)),
        retry_first_delay_seconds=t.number("retry_first_delay_seconds", check=above(0)),
        from_address=t.string("from_address", required=True, check=_mail_address),
        ca_file=t.string("ca_file", check=non_empty),
    )
    password_env = t.string("password_env", check=non_empty)
    t.finish()
    if isinstance(password_env, str):
        password = t.context.env.get(password_env)
        if not password:
            t.report("password_env", f"environment variable {password_env!r} is not set")
        values["password"] = password
    if "host" not in values or "from_address" not in values:
        return None
    return EmailConfig(**values)


def _mail_address(value: str) -> str | None:
    local, at, domain = value.rpartition("<")[2].rstrip(">").partition("@")
    return None if at and local and "." in domain else f"expected an e-mail address, got {value!r}"


def _routing(t: Table) -> RoutingConfig:
    values = given(
        cooldown_seconds=t.number("cooldown_seconds", check=at_least(0)),
        failure_threshold=t.integer("failure_threshold", check=at_least(1)),
    )
    t.finish()
    return RoutingConfig(**values)


def _billing(t: Table) -> BillingConfig:
    values = given(
        ledger_flush_interval_seconds=t.number("ledger_flush_interval_seconds", check=above(0)),
        ledger_batch_size=t.integer("ledger_batch_size", check=at_least(1)),
        ledger_max_queue=t.integer("ledger_max_queue", check=at_least(1)),
        spool_dir=t.string("spool_dir"),
        spool_fsync=t.choice("spool_fsync", SPOOL_FSYNC_POLICIES, "spool fsync policy"),
        spool_fsync_interval_seconds=t.number("spool_fsync_interval_seconds", check=above(0)),
        currency=t.string("currency", check=currency),
        price_catalogue=t.string("price_catalogue", check=non_empty),
        abandoned_calls=t.choice("abandoned_calls", ABANDONED_CALL_POLICIES, "abandoned call policy"),
        background_poll_seconds=t.number("background_poll_seconds", check=above(0)),
        background_poll_max_seconds=t.number("background_poll_max_seconds", check=above(0)),
        background_follow_seconds=t.number("background_follow_seconds", check=above(0)),
        background_lease_seconds=t.number("background_lease_seconds", check=above(0)),
        payment_link=t.string("payment_link", check=payment_link_template),
        payment_instructions=t.string("payment_instructions", check=payment_text_template),
        alert_check_seconds=t.number("alert_check_seconds", check=above(0)),
        alert_retry_first_delay_seconds=t.number("alert_retry_first_delay_seconds", check=above(0)),
    )
    t.finish()
    return BillingConfig(**values)


def _logging(t: Table) -> LoggingConfig:
    values = given(
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


def _tracing(t: Table) -> TracingConfig:
    values = given(
        enabled=t.boolean("enabled"),
        service_name=t.string("service_name", check=non_empty),
    )
    if values.get("enabled") and not _opentelemetry_installed():
        t.report(
            "enabled",
            "tracing needs OpenTelemetry, which is not installed: pip install 'modelgate[otel]' "
            "(opentelemetry-sdk and opentelemetry-exporter-otlp-proto-http), or set enabled = false",
        )
    t.finish()
    return TracingConfig(**values)


def _plugins(t: Table) -> PluginsConfig:
    chain = t.context.chain
    values = given(
        disabled=t.strings("disabled", check=partial(disableable_plugin, chain) if chain else None)
    )
    t.finish()
    return PluginsConfig(**values)


def _provider(t: Table) -> ProviderConfig | None:
    name = t.string("name", required=True, check=slug)
    kind = t.choice("kind", PROVIDER_KINDS, "provider kind", required=True)
    base_url = t.string("base_url", check=http_url)
    values = given(
        api_key=t.string("api_key", check=secret),
        api_keys=_keys(t),
        key_cooldown_seconds=t.number("key_cooldown_seconds", check=at_least(0)),
        connect_timeout=t.number("connect_timeout", check=above(0)),
        first_byte_timeout=t.number("first_byte_timeout", check=above(0)),
        read_timeout=t.number("read_timeout", check=above(0)),
        pool_size=t.integer("pool_size", check=at_least(0)),
        pool_wait_timeout=t.number("pool_wait_timeout", check=above(0)),
        native_messages=t.boolean("native_messages"),
        anthropic_version=t.string("anthropic_version", check=non_empty),
        headers=t.string_pairs("headers", check_name=header_name, check_value=header_value),
    )
    host_tables = t.tables("hosts")
    hosts = _unique(host_tables, partial(_host, provider_kind=kind), "name", "host name")
    if host_tables and t.has("base_url"):
        t.report("base_url", "give either base_url or [[providers.hosts]], not both")
    elif not host_tables and not t.has("base_url") and kind not in (ABSENT, "mock"):
        t.report(
            "base_url", "missing required key (only kind 'mock' may omit it, or give [[providers.hosts]])"
        )
    if host_tables and kind == "mock":
        t.report("hosts", "the mock provider has no hosts")
    t.finish()
    if name is ABSENT:
        return None
    if base_url is not ABSENT:
        values["base_url"] = base_url.rstrip("/")
    # A missing kind was reported above; the placeholder never leaves the loader.
    return ProviderConfig(name=name, kind="" if kind is ABSENT else kind, hosts=hosts, **values)


def _keys(t: Table) -> tuple[str, ...] | Absent:
    """`api_keys`: a non-empty list of keys (the reader refuses one listed twice), not beside `api_key`."""
    keys = t.strings("api_keys", check=secret)
    if keys is ABSENT:
        return ABSENT
    if t.has("api_key"):
        t.report("api_keys", "give either api_key or api_keys, not both")
    if not keys:
        t.report("api_keys", "must list at least one key")
    return tuple(keys)


def _host(t: Table, provider_kind: str | Absent) -> HostConfig | None:
    name = t.string("name", required=True, check=slug)
    base_url = t.string("base_url", check=http_url)
    dialect = t.choice("dialect", HOST_DIALECTS, "host dialect")
    values = given(
        api_key=t.string("api_key", check=secret),
        api_keys=_keys(t),
        headers=t.string_pairs("headers", check_name=header_name, check_value=header_value),
    )
    speaks = dialect if dialect is not ABSENT else provider_kind
    options = read_options(t, speaks) if isinstance(speaks, str) else {}
    if base_url is ABSENT and isinstance(speaks, str):
        base_url = default_base_url(speaks, options) or ABSENT
        if base_url is ABSENT and speaks not in (
            "bedrock",
            "vertex",
        ):  # theirs: a region, reported if missing
            t.report("base_url", f"missing required key (dialect {speaks!r} has no default URL)")
    t.finish()
    if name is ABSENT or base_url is ABSENT:
        return None
    return HostConfig(
        name=name,
        base_url=base_url.rstrip("/"),
        dialect=None if dialect is ABSENT else dialect,
        options=tuple(options.items()),
        **values,
    )


def _operator_catalogue(root: Table, path: str) -> dict[str, CatalogueEntry]:
    """The entries of `[billing] price_catalogue` (relative to the config file); its problems are the
    config's."""
    if not path:
        return {}
    source = root.context.source
    file = Path(path) if source == EMBEDDED_SOURCE else Path(source).parent / path
    try:
        return read_catalogue(tomllib.loads(file.read_text("utf-8")), str(file))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, CatalogueError) as exc:
        root.report("billing.price_catalogue", f"cannot use {str(file)!r}: {exc}")
        return {}


def _model(
    t: Table, providers: Mapping[str, ProviderConfig], extra: Mapping[str, CatalogueEntry] | None = None
) -> ModelConfig | None:
    name = t.string("name", required=True, check=non_empty)
    kinds = t.strings(
        "kinds",
        required="at least one request kind is required",
        check=lambda v: membership("request kind", v, REQUEST_KINDS),
    )
    row_tables = t.tables("rows", required="at least one row is required ([[models.rows]])")
    model_name = "" if name is ABSENT else name
    rows = tuple(row for rt in row_tables if (row := _row(rt, model_name, providers)) is not None)
    priced = t.has("prices")
    prices = read_prices(t.table("prices"), "config" if priced else "")
    values = given(
        default_max_tokens=t.integer("default_max_tokens", check=at_least(1)),
        max_context_tokens=t.integer("max_context_tokens", check=at_least(1)),
        max_audio_seconds=t.number("max_audio_seconds", check=above(0)),
        image_base_tokens=t.integer("image_base_tokens", check=at_least(0)),
        image_tile_tokens=t.integer("image_tile_tokens", check=at_least(0)),
    )
    t.finish()
    if name is ABSENT:
        return None
    if not priced:
        # Not priced here: the catalogue's sheet for what the first row calls the model (config wins); a
        # row on an OpenAI-compatible preset's host looks for that service's own entry first.
        entry = find_in_catalogue(*_catalogue_names(rows[0], providers) if rows else (), name, extra=extra)
        if entry is not None:
            prices = entry.prices
            if entry.context_window:
                values.setdefault("max_context_tokens", entry.context_window)
    claude = any(
        providers[row.provider].kind == "anthropic" or "claude" in row.upstream_model.lower()
        for row in rows
        if row.provider in providers
    )
    model = ModelConfig(
        name=name,
        kinds=() if kinds is ABSENT else kinds,
        rows=rows,
        prices=prices,
        claude_images=claude,
        **values,
    )
    if model.default_max_tokens > model.max_context_tokens:
        limit, value = model.max_context_tokens, model.default_max_tokens
        t.report("default_max_tokens", f"must not exceed max_context_tokens ({limit}), got {value}")
    return model


def _catalogue_names(row: RowConfig, providers: Mapping[str, ProviderConfig]) -> tuple[str, ...]:
    """The names a row's model has in the price catalogue: "<preset>/<upstream model>" when the row's host
    names a preset (groq, fireworks, ...), then the upstream model name."""
    provider = providers.get(row.provider)
    if provider is None:
        return (row.upstream_model,)
    host = row.host or (provider.hosts[0].name if provider.hosts else "")
    preset = provider.served_from(host).option("preset")
    return (f"{preset}/{row.upstream_model}", row.upstream_model) if preset else (row.upstream_model,)


def _row(t: Table, model_name: str, providers: Mapping[str, ProviderConfig]) -> RowConfig | None:
    provider_name = t.string("provider", required=True, check=lambda v: membership("provider", v, providers))
    upstream_model = t.string("upstream_model", check=non_empty)
    host = t.string("host", check=non_empty)
    values = given(weight=t.number("weight", check=above(0)), priority=t.integer("priority"))
    t.finish()
    if provider_name is ABSENT:
        return None
    provider = providers.get(provider_name)
    if provider is not None and provider.hosts:
        noun = f"host of provider {provider_name}:"
        if host is not ABSENT and (problem := membership(noun, host, provider.host_names)):
            t.report("host", problem)
        if host is ABSENT:
            host = None  # one row per host of the provider
    elif host is ABSENT:
        host = provider.host if provider else None
    upstream_model = model_name if upstream_model is ABSENT else upstream_model
    return RowConfig(provider=provider_name, upstream_model=upstream_model, host=host, **values)


def _plan(t: Table) -> PlanConfig | None:
    code = t.string("code", required=True, check=non_empty)
    values = given(
        name=t.string("name", check=non_empty),
        monthly_fee=t.number("monthly_fee", check=at_least(0)),
        credit_limit=t.number("credit_limit", check=at_least(0)),
        rpm=t.integer("rpm", check=at_least(0)),
        tpm=t.integer("tpm", check=at_least(0)),
        realtime_concurrency=t.integer("realtime_concurrency", check=at_least(0)),
        monthly_allowance=t.number("monthly_allowance", check=at_least(0)),
        self_service=t.boolean("self_service"),
    )
    t.finish()
    return None if code is ABSENT else PlanConfig(code=code, **values)


def disableable_plugin(plugins: Sequence[tuple[str, bool]], value: str) -> str | None:
    """The problem with naming `value` in `plugins.disabled`, given the chain's (name, essential) pairs."""
    optional = [name for name, essential in plugins if not essential]
    if (value, True) in plugins:
        return f"plugin {value!r} cannot be disabled; only these can: {', '.join(optional)}"
    return membership("plugin", value, optional)
