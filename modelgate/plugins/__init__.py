"""The model API's plugin chain. The order of the chain is this list, and only this list."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from modelgate.config import Config
from modelgate.config.loader import disableable_plugin
from modelgate.domain.accounts import Accounts
from modelgate.domain.audit_writer import AuditWriter
from modelgate.domain.counters import Counters
from modelgate.domain.ledger import LedgerWriter
from modelgate.domain.overruns import OverrunReport
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
from modelgate.plugins.overload import Overload
from modelgate.plugins.policy import Policy
from modelgate.plugins.provider_filter import ProviderFilter
from modelgate.plugins.rate_limits import RateLimits
from modelgate.plugins.realtime_cap import RealtimeCap
from modelgate.plugins.realtime_credentials import RealtimeCredentials
from modelgate.plugins.request_id import InFlightIds, RequestId, SharedRequestId
from modelgate.plugins.request_validation import RequestValidation
from modelgate.plugins.route_support import RouteSupport
from modelgate.plugins.service_tiers import ServiceTiers
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
    overruns: OverrunReport | None = None  # one per process (its log throttle); None: one per chain


@dataclass(frozen=True, slots=True)
class ChainStep:
    """One step of the chain: its plugin class (whose `name` and `essential` the config's plugins.disabled
    is checked against) and how it is built from the services."""

    plugin: type[Plugin]
    build: Callable[[ChainServices], Plugin]


def _request_id(services: ChainServices) -> Plugin:
    # 409 request_in_progress on a double submit; across processes when Redis is configured
    if services.in_flight.redis:
        return SharedRequestId(services.in_flight, services.counters)
    return RequestId(services.in_flight)


# The chain, in order, and only here: each step with the status it can return.
CHAIN: tuple[ChainStep, ...] = (
    # a span per request when [tracing] is on; first, to see it all
    ChainStep(RequestTracing, lambda s: RequestTracing(s.tracer)),
    ChainStep(RouteSupport, lambda s: RouteSupport(s.routes)),  # 404 route not supported; envelope A or B
    # 503 + retry-after at once past server.max_open_requests
    ChainStep(Overload, lambda s: Overload(s.config, s.metrics)),
    ChainStep(Auth, lambda s: Auth(s.keys)),  # 401
    ChainStep(RequestId, _request_id),  # 409 request_in_progress (SharedRequestId with Redis)
    # 413 while reading; JSON parsed once; multipart heads only (the rest streams)
    ChainStep(BodyLimits, lambda s: BodyLimits()),
    # 404 invalid_realtime_credential, 409 race
    ChainStep(RealtimeCredentials, lambda s: RealtimeCredentials(s.realtime_secrets)),
    ChainStep(RequestValidation, lambda s: RequestValidation()),  # 400 on the gateway's own parameter rules
    ChainStep(ModelRouting, lambda s: ModelRouting(s.catalog)),  # 404 model_not_found; candidate rows
    ChainStep(ProviderFilter, lambda s: ProviderFilter(s.catalog)),  # 400 on the provider object
    # 400 when thinking, caching or token counting has no native row left
    ChainStep(NativeFeatures, lambda s: NativeFeatures()),
    # 400 on a service_tier the model's price sheet does not price
    ChainStep(ServiceTiers, lambda s: ServiceTiers()),
    # follow-ups reach their row
    ChainStep(ObjectBindingPlugin, lambda s: ObjectBindingPlugin(s.objects, s.catalog)),
    ChainStep(Policy, lambda s: Policy(s.policies)),  # 403 denied model, 404 model not enabled for the key
    ChainStep(PromptPolicy, lambda s: PromptPolicy()),  # 403 a content rule blocks the prompt; redacts it
    ChainStep(OutputCaps, lambda s: OutputCaps()),  # 400 on a cap above the model's context; fills one in
    ChainStep(RateLimits, lambda s: RateLimits(s.config, s.counters)),  # 429 RPM/TPM per key and organization
    ChainStep(RealtimeCap, lambda s: RealtimeCap(s.config, s.counters)),  # 429 realtime sessions over the cap
    # 402 unpaid invoice, balance or budget (recorded for admission)
    ChainStep(BillingGate, lambda s: BillingGate(s.accounts)),
    # claim, windows and reservations at once (what each budget was asked noted for the cabinet's meters)
    ChainStep(Admission, lambda s: Admission(s.counters, s.accounts.budget_asks)),
    # usage from answers; a ledger row per request (a background response's once its usage is known);
    # overruns counted, audited, logged
    ChainStep(
        UsageMetering,
        lambda s: UsageMetering(
            s.ledger,
            s.counters,
            s.overruns or OverrunReport(s.audit, s.metrics.count_overrun),
            s.background,
        ),
    ),
    ChainStep(Metrics, lambda s: Metrics(s.metrics)),  # Prometheus (after metering: tokens known)
    ChainStep(
        AccessLog, lambda s: AccessLog(s.config.logging.log_prompts)
    ),  # one structured line per request
    # The answer's own steps, after every step that reads it as the provider wrote it:
    ChainStep(
        Translation, lambda s: Translation()
    ),  # the route's wire format (502 if it cannot be), model name
    ChainStep(UsageFilter, lambda s: UsageFilter()),  # usage the client did not ask for, providers' prices
    # content rules on the answer as the client gets it: 403 for a whole one, an error event ends a stream
    ChainStep(AnswerPolicy, lambda s: AnswerPolicy(s.audit, s.metrics)),
    # a stream the provider broke off ends with an error event in the route's format
    ChainStep(StreamErrors, lambda s: StreamErrors()),
)
CHAIN_PLUGINS: tuple[type[Plugin], ...] = tuple(step.plugin for step in CHAIN)


def chain_plugins() -> tuple[tuple[str, bool], ...]:
    """(name, essential) of every plugin of the chain, in order, read from the plugin classes: what
    `load_config(..., chain=...)` checks `plugins.disabled` against. The essential ones keep the model API
    correct, safe and visible and are always on."""
    return tuple((plugin.name, plugin.essential) for plugin in CHAIN_PLUGINS)


class PluginConfigError(ValueError):
    """The config disables a plugin that is not in the chain or cannot be switched off."""


def default_chain(services: ChainServices, disabled: tuple[str, ...] = ()) -> PluginChain:
    """The request chain in order (`CHAIN`): each step may stop the request with a typed gateway error."""
    known = chain_plugins()
    problems = [problem for name in disabled if (problem := disableable_plugin(known, name))]
    if problems:
        raise PluginConfigError("plugins.disabled: " + "; ".join(problems))
    return PluginChain([step.build(services) for step in CHAIN if step.plugin.name not in disabled])


__all__ = [
    "CHAIN",
    "CHAIN_PLUGINS",
    "ChainServices",
    "ChainStep",
    "Plugin",
    "PluginChain",
    "PluginConfigError",
    "chain_plugins",
    "default_chain",
]
