"""Immutable, typed records describing a validated modelgate configuration."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from urllib.parse import urlsplit

REQUEST_KINDS = (
    "chat",
    "completions",
    "responses",
    "embeddings",
    "messages",
    "images",
    "image_edits",
    "audio_transcriptions",
    "audio_translations",
    "audio_speech",
    "videos",
    "realtime",
    "decisions",
)
PROVIDER_KINDS = ("openai", "anthropic", "mock")
# The wire dialects a host may speak (the mock provider is in-process, never a host).
HOST_DIALECTS = ("openai", "anthropic", "azure_openai", "bedrock", "vertex", "gemini")


def dialect_family(dialect: str, provider_kind: str) -> str:
    """The wire family (`openai` or `anthropic`) the gateway speaks with a host of this dialect.

    Azure and Gemini serve OpenAI-style chat; Bedrock and Vertex serve both families, chosen by the
    provider's kind: an `anthropic` provider's models go through Bedrock's InvokeModel / Vertex's rawPredict
    in the Anthropic Messages format, an `openai` provider's through Bedrock's Converse / Vertex's Gemini API.
    """
    if dialect in ("azure_openai", "gemini"):
        return "openai"
    if dialect in ("bedrock", "vertex"):
        return provider_kind if provider_kind in ("openai", "anthropic") else "openai"
    return dialect


# Anthropic's image cost: width x height / 750 tokens, images scaled to at most ~1.15 megapixels (1568 px on
# the long edge): about 1,600 tokens at most (docs.anthropic.com, vision: "Calculate image costs").
CLAUDE_MAX_IMAGE_TOKENS = 1600

LOG_LEVELS = ("debug", "info", "warning", "error")
# When the ledger spool fsyncs: after every row, every `spool_fsync_interval_seconds`, or never.
SPOOL_FSYNC_POLICIES = ("always", "interval", "never")
# What happens to a non-streamed call whose client leaves once it was sent: "finish" reads the provider's
# answer to its end (within the provider's timeouts) and charges its usage; "cancel" lets go of the provider
# at once and charges the estimate of what it billed (the prompt), marked estimated.
ABANDONED_CALL_POLICIES = ("finish", "cancel")
# Who may register an organization: anyone, holders of an operator's registration invitation, or nobody.
REGISTRATION_MODES = ("open", "invite_only", "closed")
EMAIL_SECURITY = ("starttls", "tls", "none")


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """Where the gateway listens and how it shuts down."""

    host: str = "127.0.0.1"
    port: int = 8080
    workers: int = 1
    shutdown_grace_seconds: float = 30.0
    # After SIGTERM, keep serving this long with /readyz answering 503, so load balancers stop sending.
    drain_seconds: float = 0.0
    public_url: str = ""
    # Secrets stay out of repr so logging a config object never leaks them.
    operator_token: str | None = field(default=None, repr=False)
    metrics_token: str | None = field(default=None, repr=False)
    # Addresses/networks of load balancers whose X-Forwarded-For names the real client (login
    # throttling, audit). Empty: forwarded headers are ignored, the peer address is the client.
    trusted_proxies: tuple[str, ...] = ()
    # What a client connection may cost (modelgate/proxy/http/connection_guard.py): the whole request head
    # must arrive within header_timeout_seconds, a body may pause at most body_idle_timeout_seconds between
    # bytes, an idle keep-alive connection is closed after keepalive_timeout_seconds, and at most
    # max_connections are open at once (clamped to the open-files limit less a reserve for upstreams, storage
    # and logs).
    header_timeout_seconds: float = 10.0
    body_idle_timeout_seconds: float = 30.0
    keepalive_timeout_seconds: float = 75.0
    max_connections: int = 16384
    # Model API requests (streams included) one process keeps open at once; past it a new one is answered
    # 503 with retry-after at once (modelgate/plugins/overload.py) and /readyz answers 503. 0: no cap.
    max_open_requests: int = 10000
    # /readyz answers 503 while the event loop runs this late (a CPU-bound process: send traffic elsewhere).
    max_event_loop_lag_seconds: float = 0.5
    # Plain model API requests are served by the gateway's own HTTP/1.1 front (modelgate/proxy/http/front.py);
    # false sends every connection through aiohttp, as before it existed (about 10 % more CPU per request).
    model_api_front: bool = True
    # Name the row's provider in an `x-modelgate-provider` answer header. Off by default: which provider
    # serves a model is the operator's business, not the tenant's (useful when debugging routing).
    expose_provider_header: bool = False


@dataclass(frozen=True, slots=True)
class StorageConfig:
    """The SQL database holding accounts, keys and the ledger."""

    url: str = field(default="sqlite:///modelgate.db", repr=False)  # may embed a password
    pool_size: int = 10
    # PostgreSQL without Redis: a process that cannot read the database (an outage, or cut off from it alone)
    # keeps serving the keys and policies it knew when its lease lapsed (true), or refuses every request
    # until it reads the database again (false: a key revoked meanwhile through another process is never
    # served). docs/operations.md, "Revocation without Redis".
    serve_cached_during_outage: bool = True


@dataclass(frozen=True, slots=True)
class RedisConfig:
    """Optional shared state for rate limits and cooldowns across workers."""

    url: str | None = field(default=None, repr=False)  # may embed a password
    fail_open: bool = False
    # While Redis cannot be reached: "refuse" model requests (503), serve them "open" (no limit, no balance
    # bound), or "degraded": each process admits against its own share of every organization's last known
    # headroom and limits (domain.local_shares). None: "open" when fail_open, else "refuse".
    outage: str | None = None
    # Redis Sentinel: the sentinels' `host:port` addresses and the name of the master they watch. The master
    # is the one they name, asked again after every lost connection (a failover); `url`, optional then,
    # gives only the credentials and the database (its host is not used).
    sentinels: tuple[str, ...] = ()
    sentinel_master: str | None = None
    # The sentinels' own password (their `requirepass`), when they ask for one; the master's is in `url`.
    sentinel_password: str | None = field(default=None, repr=False)
    # Redis Cluster: `host:port` of some of its nodes (the rest are found from them). Counters are sharded by
    # organization; `url`, optional then, gives only the credentials (a cluster has database 0 only).
    cluster_nodes: tuple[str, ...] = ()

    @property
    def enabled(self) -> bool:
        return bool(self.url or self.sentinels or self.cluster_nodes)

    @property
    def outage_mode(self) -> str:
        """What a Redis outage does: `outage`, or what `fail_open` has always meant."""
        return self.outage or ("open" if self.fail_open else "refuse")


@dataclass(frozen=True, slots=True)
class CabinetConfig:
    """Sessions, login throttling, invitations and single sign-on of the management cabinet."""

    session_ttl_seconds: int = 43200
    # Login throttling (modelgate/cabinet/throttle.py): failures of one account from one address before each
    # next attempt waits login_first_delay_seconds, doubling with every further failure up to
    # login_lockout_seconds (the longest wait).
    login_max_failures: int = 5
    login_first_delay_seconds: float = 1.0
    login_lockout_seconds: int = 900
    invitation_ttl_seconds: int = 604800
    registration: str = "open"  # one of REGISTRATION_MODES
    invitation_webhook_url: str | None = field(default=None, repr=False)  # webhook URLs often carry a token
    # Where single sign-on sends the browser back to, with ?code= (or ?error=); None answers in JSON.
    cabinet_url: str | None = None
    # Links sent to an address (modelgate/cabinet/email_links.py): a password reset works once within
    # password_reset_ttl_seconds; an address verification or change within email_link_ttl_seconds. At most
    # email_links_per_hour links are sent to one address, and requested from one client address, per hour.
    password_reset_ttl_seconds: int = 1800
    email_link_ttl_seconds: int = 86400
    email_links_per_hour: int = 5


@dataclass(frozen=True, slots=True)
class EmailConfig:
    """Outgoing mail over SMTP (modelgate/cabinet/mail_sender.py): invitations, verification, password reset.

    Without an `[email]` table the links go to the operator (`modelgate mail pending`) instead.
    """

    host: str
    from_address: str
    port: int = 587
    security: str = "starttls"  # one of EMAIL_SECURITY
    username: str | None = None
    # Read from the environment variable named by `password_env`: the secret is never in the file.
    password: str | None = field(default=None, repr=False)
    timeout_seconds: float = 10.0
    # A failed message is tried again after this delay, doubling with each failure up to an hour.
    retry_first_delay_seconds: float = 30.0
    # Certificate checks of "tls" / "starttls": a CA bundle to trust instead of the system's.
    ca_file: str | None = None


@dataclass(frozen=True, slots=True)
class SsoConfig:
    """How single sign-on domains are proven (docs/cabinet.md, "Single sign-on domains")."""

    # DNS servers asked for the verification TXT records, as `address` or `address:port` (`[v6]:port`);
    # empty: the system's resolvers (/etc/resolv.conf).
    dns_resolvers: tuple[str, ...] = ()
    dns_timeout_seconds: float = 5.0


def dns_server_address(entry: str) -> tuple[str, int]:
    """(address, port) of a `[sso] dns_resolvers` entry: `10.0.0.53`, `10.0.0.53:5353`, `::1` or
    `[::1]:5353`; ValueError for anything else."""
    host, port = entry, "53"
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        if rest and not rest.startswith(":"):
            raise ValueError(f"expected [address]:port, got {entry!r}")
        port = rest[1:] or "53"
    elif entry.count(":") == 1:
        host, _, port = entry.partition(":")
    ipaddress.ip_address(host)
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected a port from 1 to 65535 in {entry!r}")
    return host, int(port)


@dataclass(frozen=True, slots=True)
class RoutingConfig:
    """When a failing row is taken out of rotation and for how long."""

    cooldown_seconds: float = 30.0
    failure_threshold: int = 3


@dataclass(frozen=True, slots=True)
class BillingConfig:
    """How usage reaches the ledger."""

    ledger_flush_interval_seconds: float = 1.0
    ledger_batch_size: int = 500
    ledger_max_queue: int = 100000  # rows kept in memory; past it they are read back from the spool
    # The write-ahead spool; empty: `modelgate-spool` next to the SQLite file, or in the working directory.
    spool_dir: str = ""
    spool_fsync: str = "interval"  # one of SPOOL_FSYNC_POLICIES
    spool_fsync_interval_seconds: float = 1.0
    currency: str = "USD"
    # A price catalogue file of the operator's (the shipped one's format, e.g. from `modelgate prices
    # import-litellm`), relative to the config file: its entries win over the shipped catalogue's.
    price_catalogue: str = ""
    abandoned_calls: str = "finish"  # one of ABANDONED_CALL_POLICIES
    # Background responses are polled after this, then twice as long each time up to the most, for at most
    # background_follow_seconds; a process's follows are adopted by another once its lease has run out.
    background_poll_seconds: float = 1.0
    background_poll_max_seconds: float = 60.0
    background_follow_seconds: float = 86400.0
    background_lease_seconds: float = 30.0
    # How an open invoice is paid, shown on it in the cabinet: a link made from this template (placeholders
    # in config.payment.PAYMENT_PLACEHOLDERS) and/or a text; neither: "as agreed with the operator".
    payment_link: str = ""
    payment_instructions: str = ""
    # Spend alerts: how often the cabinet checks thresholds and delivers webhooks, and the first retry delay.
    alert_check_seconds: float = 30.0
    alert_retry_first_delay_seconds: float = 5.0


@dataclass(frozen=True, slots=True)
class LoggingConfig:
    """Log verbosity and format."""

    level: str = "info"
    json: bool = True
    log_prompts: bool = False


@dataclass(frozen=True, slots=True)
class TracingConfig:
    """Optional OpenTelemetry tracing (needs the `otel` extra)."""

    enabled: bool = False
    service_name: str = "modelgate"


@dataclass(frozen=True, slots=True)
class PluginsConfig:
    """Which request plugins are switched off."""

    disabled: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ProviderConfig:
    """One upstream API account the gateway forwards requests to."""

    name: str
    kind: str
    base_url: str = ""
    api_key: str | None = field(default=None, repr=False)
    # Several keys used in turn (instead of api_key); one refused or throttled rests on its own.
    api_keys: tuple[str, ...] = field(default=(), repr=False)
    key_cooldown_seconds: float = 60.0
    connect_timeout: float = 5.0
    first_byte_timeout: float = 60.0
    read_timeout: float = 60.0
    # Connections to the provider a worker may hold open at once; 0: no cap (LLM streams hold one each for
    # seconds to minutes; the open-files limit bounds them). Over a cap a request waits at most
    # pool_wait_timeout for a connection, then fails over to the next row (docs/deploy.md, sizing).
    pool_size: int = 0
    pool_wait_timeout: float = 1.0
    # None means "decide from kind", so hand-built records get the same default as loaded ones.
    native_messages: bool | None = None
    anthropic_version: str = "2023-06-01"
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # often carries credentials
    # Its hosts (`[[providers.hosts]]`); empty: the provider is served from `base_url` alone.
    hosts: tuple[HostConfig, ...] = ()
    # How it is reached (one of HOST_DIALECTS; empty: its kind) and that dialect's options
    # (modelgate/config/dialects.py).
    # Set on the record `served_from` makes for one host; `kind` is then the dialect's wire family.
    dialect: str = ""
    options: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # may carry credentials

    def __post_init__(self) -> None:
        if self.native_messages is None:
            object.__setattr__(self, "native_messages", self.kind == "anthropic")

    @property
    def host(self) -> str:
        """Its first host's name: the hostname of base_url, or "mock" for the in-process mock provider."""
        if self.hosts:
            return self.hosts[0].name
        if self.kind == "mock":
            return "mock"
        return urlsplit(self.base_url).hostname or ""

    def option(self, name: str, default: str | None = None) -> str | None:
        """One of its dialect's options (`[[providers.hosts]]`), or default."""
        return next((value for key, value in self.options if key == name), default)

    @property
    def credentials(self) -> tuple[str, ...]:
        """The keys sent upstream, in turn: api_keys, else api_key, else none."""
        return self.api_keys or ((self.api_key,) if self.api_key else ())

    @property
    def host_names(self) -> tuple[str, ...]:
        return tuple(h.name for h in self.hosts) if self.hosts else (self.host,)

    def served_from(self, host: str) -> ProviderConfig:
        """This provider as one of its hosts serves it: the host's URL, dialect, key and headers over the
        provider's defaults (itself when it has no hosts)."""
        found = next((h for h in self.hosts if h.name == host), None)
        if found is None:
            return self
        own_keys = found.api_key is not None or bool(found.api_keys)  # a host's keys replace the provider's
        dialect = found.dialect or self.kind
        kind = dialect_family(dialect, self.kind)
        return ProviderConfig(
            name=self.name,
            kind=kind,
            base_url=found.base_url,
            api_key=found.api_key if own_keys else self.api_key,
            api_keys=found.api_keys if own_keys else self.api_keys,
            key_cooldown_seconds=self.key_cooldown_seconds,
            connect_timeout=self.connect_timeout,
            first_byte_timeout=self.first_byte_timeout,
            read_timeout=self.read_timeout,
            pool_size=self.pool_size,
            pool_wait_timeout=self.pool_wait_timeout,
            native_messages=self.native_messages if self.kind == kind else None,
            anthropic_version=self.anthropic_version,
            headers=self.headers + found.headers,
            dialect=dialect,
            options=found.options,
        )


@dataclass(frozen=True, slots=True)
class HostConfig:
    """One place a provider is served from: its own URL, wire dialect and credentials (`[[providers.hosts]]`).

    Unset fields (None, empty) take the provider's: a provider's `base_url`, `kind` and `api_key` are the
    defaults of its hosts, and a provider with only a `base_url` is one host named by that URL's hostname."""

    name: str
    base_url: str
    dialect: str | None = None  # the wire format it speaks; None: the provider's kind
    api_key: str | None = field(default=None, repr=False)
    api_keys: tuple[str, ...] = field(default=(), repr=False)
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # added to the provider's
    # Its dialect's options (modelgate/config/dialects.py): region, project, api_version, preset, credentials…
    options: tuple[tuple[str, str], ...] = field(default=(), repr=False)


@dataclass(frozen=True, slots=True)
class RowConfig:
    """One way to serve a model: a provider plus the model name it knows upstream."""

    provider: str
    upstream_model: str
    host: str | None = None  # the loader fills in the provider's host
    weight: float = 1.0
    priority: int = 0


# Service tier names that mean the default tier (requests' `auto` / `default`, Anthropic's `standard`,
# Bedrock's `on_demand`): charged at the sheet's own rates.
DEFAULT_SERVICE_TIERS = frozenset({"", "auto", "default", "standard", "standard_only", "on_demand"})


@dataclass(frozen=True, slots=True)
class TokenPriceConfig:
    """Token prices in USD per million tokens; None: not named (derived, see modelgate/domain/prices.py)."""

    input_per_mtok: float | None = None
    cached_input_per_mtok: float | None = None
    cache_write_5m_per_mtok: float | None = None
    cache_write_1h_per_mtok: float | None = None
    input_audio_per_mtok: float | None = None
    input_image_per_mtok: float | None = None
    output_per_mtok: float | None = None
    reasoning_per_mtok: float | None = None
    output_audio_per_mtok: float | None = None
    output_image_per_mtok: float | None = None


@dataclass(frozen=True, slots=True)
class LongContextPriceConfig:
    """Above `above_input_tokens` prompt tokens the whole request is charged at these token prices."""

    above_input_tokens: int
    tokens: TokenPriceConfig


@dataclass(frozen=True, slots=True)
class PriceConfig:
    """What a model costs, in USD; token prices are per million tokens, the rest per unit."""

    tokens: TokenPriceConfig = field(default_factory=TokenPriceConfig)
    per_request: float = 0.0
    per_image: float = 0.0
    per_audio_second: float = 0.0
    per_video_second: float = 0.0
    per_web_search_call: float = 0.0
    per_file_search_call: float = 0.0
    per_code_interpreter_call: float = 0.0
    per_image_by: tuple[tuple[str, float], ...] = ()  # ("1024x1024/high", 0.167), ("1024x1024", 0.04)
    long_context: tuple[LongContextPriceConfig, ...] = ()  # ascending thresholds
    service_tiers: tuple[tuple[str, TokenPriceConfig], ...] = ()  # ("priority", prices), ...
    # Where the sheet came from: "config", "catalogue: <model> <provider> <date> <source URL>", or "" (no
    # prices: the model is free, which check-config warns about).
    source: str = ""

    @property
    def input_per_mtok(self) -> float:
        return self.tokens.input_per_mtok or 0.0

    @property
    def output_per_mtok(self) -> float:
        return self.tokens.output_per_mtok or 0.0


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """A model name clients may request, the request kinds it serves and the rows that serve it."""

    name: str
    kinds: tuple[str, ...]
    rows: tuple[RowConfig, ...]
    prices: PriceConfig = field(default_factory=PriceConfig)
    default_max_tokens: int = 4096
    max_context_tokens: int = 128000
    # The longest audio a transcription may bill for: reserved before (its duration is unknown until then).
    max_audio_seconds: float = 1500.0
    # An image the body only names (a URL, a file id) reserves by OpenAI's tile formula: `image_base_tokens`
    # at detail "low", else the base plus 8 tiles of `image_tile_tokens` (the most a 2048 x 768 image takes).
    image_base_tokens: int = 85
    image_tile_tokens: int = 170
    # Derived by the loader, not a key: a row reaches Claude (an `anthropic` provider, or an upstream model
    # named claude), whose images are bounded by Anthropic's formula (~1,600 tokens, whatever the detail).
    claude_images: bool = False

    @property
    def max_image_tokens(self) -> int:
        """The most prompt tokens one image can cost (detail high or unknown): 8 tiles and the base; for
        Claude, at least Anthropic's bound (domain.hidden_input.CLAUDE_MAX_IMAGE_TOKENS)."""
        tiles = self.image_base_tokens + 8 * self.image_tile_tokens
        if self.claude_images and tiles < CLAUDE_MAX_IMAGE_TOKENS:
            return CLAUDE_MAX_IMAGE_TOKENS
        return tiles


@dataclass(frozen=True, slots=True)
class PlanConfig:
    """A subscription plan: its fee, credit and rate limits (0 means unlimited)."""

    code: str
    name: str = ""  # empty means "same as code"
    monthly_fee: float = 0.0
    credit_limit: float = 0.0
    rpm: int = 60
    tpm: int = 100000
    realtime_concurrency: int = 2
    # Credited at activation and every month after (it rolls over); lets a free tier really be used.
    monthly_allowance: float = 0.0
    # Whether self-registration may choose the plan; None means "only without a credit limit".
    self_service: bool | None = None

    def __post_init__(self) -> None:
        if not self.name:
            object.__setattr__(self, "name", self.code)
        if self.self_service is None:
            # A plan with credit spends before paying: the operator assigns it, nobody picks it alone.
            object.__setattr__(self, "self_service", self.credit_limit == 0)


@dataclass(frozen=True, slots=True)
class Config:
    """The whole gateway configuration, with O(1) lookups of providers, models and plans."""

    server: ServerConfig = field(default_factory=ServerConfig)
    storage: StorageConfig = field(default_factory=StorageConfig)
    redis: RedisConfig = field(default_factory=RedisConfig)
    cabinet: CabinetConfig = field(default_factory=CabinetConfig)
    sso: SsoConfig = field(default_factory=SsoConfig)
    email: EmailConfig | None = None
    routing: RoutingConfig = field(default_factory=RoutingConfig)
    billing: BillingConfig = field(default_factory=BillingConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    tracing: TracingConfig = field(default_factory=TracingConfig)
    plugins: PluginsConfig = field(default_factory=PluginsConfig)
    providers: tuple[ProviderConfig, ...] = ()
    models: tuple[ModelConfig, ...] = ()
    plans: tuple[PlanConfig, ...] = ()
    source: str = "<constructed>"
    # Derived indexes: excluded from eq/hash so Config stays hashable and compares by content.
    _providers_by_name: dict[str, ProviderConfig] = field(init=False, repr=False, compare=False)
    _models_by_name: dict[str, ModelConfig] = field(init=False, repr=False, compare=False)
    _plans_by_code: dict[str, PlanConfig] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_providers_by_name", {p.name: p for p in self.providers})
        object.__setattr__(self, "_models_by_name", {m.name: m for m in self.models})
        object.__setattr__(self, "_plans_by_code", {p.code: p for p in self.plans})

    def provider(self, name: str) -> ProviderConfig | None:
        """The provider called name, if any."""
        return self._providers_by_name.get(name)

    def model(self, name: str) -> ModelConfig | None:
        """The model called name, if any."""
        return self._models_by_name.get(name)

    def plan(self, code: str) -> PlanConfig | None:
        """The plan with this code, if any."""
        return self._plans_by_code.get(code)
