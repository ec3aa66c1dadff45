"""The model API's plugin chain. The order of the chain is this list, and only this list."""

from __future__ import annotations

from dataclasses import dataclass, field

from modelgate.config import Config
from modelgate.config.loader import disableable_plugin
from modelgate.domain.accounts import Accounts
from modelgate.domain.audit_writer import AuditWriter
from modelgate.domain.counters import Counters
from modelgate.domain.ledger import LedgerWriter
from modelgate.domain.policy_decisions import PolicyDirectory
from modelgate.plugins.access_log import AccessLog
from modelgate.plugins.admission import Admission
from modelgate.plugins.auth import Auth
from modelgate.plugins.billing_gate import BillingGate
from modelgate.plugins.body_limits import BodyLimits
from modelgate.plugins.content_policy import AnswerPolicy, PromptPolicy
from modelgate.plugins.metrics import Metrics
from modelgate.plugins.model_routing import ModelRouting
from modelgate.plugins.native_features import NativeFeatures
from modelgate.plugins.object_binding import ObjectBindingPlugin
from modelgate.plugins.output_caps import OutputCaps
from modelgate.plugins.policy import Policy
from modelgate.plugins.provider_filter import ProviderFilter
from modelgate.plugins.rate_limits import RateLimits
from modelgate.plugins.realtime_cap import RealtimeCap
from modelgate.plugins.realtime_credentials import RealtimeCredentials
from modelgate.plugins.request_id import InFlightIds, RequestId, SharedRequestId
from modelgate.plugins.request_validation import RequestValidation
from modelgate.plugins.route_support import RouteSupport
from modelgate.plugins.stream_errors import StreamErrors
from modelgate.plugins.tracing import RequestTracing
from modelgate.plugins.translation import Translation
from modelgate.plugins.usage_filter import UsageFilter
from modelgate.plugins.usage_metering import UsageMetering
from modelgate.proxy.observability.metrics import GatewayMetrics
from modelgate.proxy.observability.tracing import Tracer
from modelgate.proxy.pipeline.chain import Plugin, PluginChain
from modelgate.proxy.pipeline.route_table import RouteTable
from modelgate.proxy.realtime.secrets import InProcessSecrets, RealtimeSecrets
from modelgate.proxy.state.background_follower import BackgroundFollower
from modelgate.proxy.state.keys import KeyDirectory
from modelgate.proxy.state.objects import ObjectStore
from modelgate.proxy.upstream.model_rows import ModelCatalog


@dataclass(frozen=True, slots=True)
class ChainServices:
    """What the plugins are built from (state is passed in, never global)."""

    routes: RouteTable
    keys: KeyDirectory
    catalog: ModelCatalog
    objects: ObjectStore
    in_flight: InFlightIds
    config: Config
    policies: PolicyDirectory
    counters: Counters
    accounts: Accounts
    ledger: LedgerWriter
    audit: AuditWriter
    metrics: GatewayMetrics = field(default_factory=GatewayMetrics)
    tracer: Tracer | None = None  # set when [tracing] is on
    realtime_secrets: RealtimeSecrets = field(default_factory=InProcessSecrets)
    background: BackgroundFollower | None = None  # follows background responses to their final usage


# Every plugin class of the chain, in the order default_chain runs them: their `name` and `essential` are
# what the config's plugins.disabled may name and may not switch off (`chain_plugins`).
CHAIN_PLUGINS: tuple[type[Plugin], ...] = (
    RequestTracing,
    RouteSupport,
    Auth,
    RequestId,
    BodyLimits,
    RealtimeCredentials,
    RequestValidation,
    ModelRouting,
    ProviderFilter,
    NativeFeatures,
    ObjectBindingPlugin,
    Policy,
    PromptPolicy,
    OutputCaps,
    RateLimits,
    RealtimeCap,
    BillingGate,
    Admission,
    UsageMetering,
    Metrics,
    AccessLog,
    Translation,
    UsageFilter,
    AnswerPolicy,
    StreamErrors,
)


def chain_plugins() -> tuple[tuple[str, bool], ...]:
    """(name, essential) of every plugin of the chain, in order, read from the plugin classes: what
    `load_config(..., chain=...)` checks `plugins.disabled` against. The essential ones keep the model API
    correct, safe and visible and are always on."""
    return tuple((plugin.name, plugin.essential) for plugin in CHAIN_PLUGINS)


class PluginConfigError(ValueError):
    """The config disables a plugin that is not in the chain or cannot be switched off."""


def default_chain(services: ChainServices, disabled: tuple[str, ...] = ()) -> PluginChain:
    """The request chain in order: each step may stop the request with a typed gateway error."""
    plugins: list[Plugin] = [
        RequestTracing(services.tracer),  # a span per request when [tracing] is on; first, to see it all
        RouteSupport(services.routes),  # 404 route not supported; picks envelope A or B
        Auth(services.keys),  # 401
        # 409 request_in_progress on a double submit; across processes when Redis is configured
        SharedRequestId(services.in_flight, services.counters)
        if services.in_flight.redis
        else RequestId(services.in_flight),
        BodyLimits(),  # 413 while reading; JSON parsed once; multipart heads only (the rest streams)
        RealtimeCredentials(services.realtime_secrets),  # 404 invalid_realtime_credential, 409 race
        RequestValidation(),  # 400 on the gateway's own parameter rules
        ModelRouting(services.catalog),  # 404 model_not_found; candidate rows
        ProviderFilter(services.catalog),  # 400 on the provider object; filters rows
        NativeFeatures(),  # 400 when thinking, caching or token counting has no native row left
        ObjectBindingPlugin(services.objects, services.catalog),  # follow-ups reach their row
        Policy(services.policies),  # 403 denied model, 404 model not enabled for the key
        PromptPolicy(),  # 403 a content rule blocks the prompt; redacts it before it leaves
        OutputCaps(),  # 400 on max_tokens & co. above the model's context; fills in the cap it lacks
        RateLimits(services.config, services.counters),  # 429 RPM/TPM per key and organization
        RealtimeCap(services.config, services.counters),  # 429 realtime sessions over the plan's cap
        BillingGate(services.accounts),  # 402 unpaid invoice, balance or budget (recorded for admission)
        Admission(services.counters),  # takes claim, windows and reservations at once: 409, 429, 402
        # usage from answers; a ledger row per request (a background response's once its usage is known)
        UsageMetering(services.ledger, services.counters, services.background),
        Metrics(services.metrics),  # Prometheus counters and histograms (after metering: tokens known)
        AccessLog(services.config.logging.log_prompts),  # one structured line per request, last
        # The answer's own steps, after every step that reads it as the provider wrote it:
        Translation(),  # into the route's wire format (502 when a whole answer cannot be), the client's model
        UsageFilter(),  # usage the client did not ask for, and providers' prices, kept from it
        # Content rules on the answer as the client gets it: 403 for a whole one, an error event ends a stream
        AnswerPolicy(services.audit, services.metrics),
        StreamErrors(),  # a stream the provider broke off ends with an error event in the route's format
    ]
    if [p.name for p in plugins] != [p.name for p in CHAIN_PLUGINS]:  # a step added to one list only
        raise RuntimeError("plugins.CHAIN_PLUGINS must list the chain's plugins in the chain's order")
    known = chain_plugins()
    problems = [problem for name in disabled if (problem := disableable_plugin(known, name))]
    if problems:
        raise PluginConfigError("plugins.disabled: " + "; ".join(problems))
    return PluginChain([p for p in plugins if p.name not in disabled])


__all__ = [
    "CHAIN_PLUGINS",
    "ChainServices",
    "Plugin",
    "PluginChain",
    "PluginConfigError",
    "chain_plugins",
    "default_chain",
]
