"""Loading, interpolating and validating modelgate configuration files."""

import dataclasses
import re
from pathlib import Path

import pytest

from modelgate.config import (
    DEFAULT_CONFIG_PATH,
    REQUEST_KINDS,
    BillingConfig,
    CabinetConfig,
    Config,
    ConfigError,
    EmailConfig,
    HostConfig,
    LoggingConfig,
    LongContextPriceConfig,
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
    TokenPriceConfig,
    TracingConfig,
    load_config,
)
from modelgate.config.dialects import ALL_OPTIONS
from modelgate.plugins import chain_plugins

EXAMPLE = Path(__file__).resolve().parents[2] / "modelgate" / "config" / "modelgate.example.toml"
EXAMPLE_ENV = {
    "MODELGATE_OPERATOR_TOKEN": "operator-secret",
    "MODELGATE_METRICS_TOKEN": "metrics-secret",
    "POSTGRES_PASSWORD": "pg-secret",
    "OPENAI_API_KEY": "sk-test",
    "ANTHROPIC_API_KEY": "sk-ant-test",
    "ANTHROPIC_COMPAT_API_KEY": "compat-test",
    "OPENAI_REGIONS_API_KEY": "sk-regions-test",
}

PROVIDER = """
[[providers]]
name = "openai"
kind = "openai"
base_url = "https://api.openai.com/v1/"
api_key = "${OPENAI_KEY}"
"""
MODEL = """
[[models]]
name = "gpt-4o"
kinds = ["chat"]

[[models.rows]]
provider = "openai"
"""
PLAN = """
[[plans]]
code = "free"
"""
VALID = PROVIDER + MODEL + PLAN
ENV = {"OPENAI_KEY": "sk-test"}


@pytest.fixture
def write(tmp_path, monkeypatch):
    """Write TOML to ./my.toml in a temp dir, so problems read "my.toml: ..." as a user would see them."""
    monkeypatch.chdir(tmp_path)

    def write(text: str) -> str:
        Path("my.toml").write_text(text, encoding="utf-8")
        return "my.toml"

    return write


def problems(path: str, env: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_config(path, env=ENV if env is None else env, chain=chain_plugins())
    return caught.value.problems


def test_embedded_defaults_load_with_mock_models_and_plans():
    config = load_config(None, env={})

    assert config.source == "<embedded defaults>"
    assert config.storage.url == "sqlite:///modelgate.db"
    assert config.redis.url is None
    assert config.server.operator_token is None
    assert config.provider("mock").kind == "mock"
    chat, embed = config.model("mock-chat"), config.model("mock-embed")
    assert chat.kinds == ("chat", "completions", "responses", "messages", "decisions")
    assert (chat.prices.input_per_mtok, chat.prices.output_per_mtok) == (0.5, 1.5)
    assert embed.kinds == ("embeddings",)
    assert embed.prices.input_per_mtok == 0.02
    assert [plan.code for plan in config.plans] == ["free", "pro", "enterprise"]
    assert config.plan("pro").monthly_fee == 49.0
    enterprise = config.plan("enterprise")
    assert (enterprise.credit_limit, enterprise.rpm, enterprise.tpm) == (1000.0, 6000, 10_000_000)
    assert enterprise.realtime_concurrency == 20


def test_default_config_path_is_the_embedded_defaults_file():
    assert DEFAULT_CONFIG_PATH.is_file()
    assert load_config(DEFAULT_CONFIG_PATH, env={}).models == load_config(None, env={}).models


def test_a_model_served_by_claude_bounds_its_images_by_anthropics_formula():
    config = load_config(EXAMPLE, env=EXAMPLE_ENV)
    kinds = {provider.name: provider.kind for provider in config.providers}
    claude = [m for m in config.models if any(kinds[row.provider] == "anthropic" for row in m.rows)]
    others = [
        m
        for m in config.models
        if not any(kinds[row.provider] == "anthropic" or "claude" in row.upstream_model for row in m.rows)
    ]
    assert claude and others
    assert all(m.claude_images and m.max_image_tokens >= 1600 for m in claude)
    assert not any(m.claude_images for m in others)


def test_example_file_loads_when_its_env_vars_are_set():
    config = load_config(EXAMPLE, env=EXAMPLE_ENV)

    assert config.source == str(EXAMPLE)
    assert config.provider("openai").api_key == "sk-test"
    assert config.storage.url == "postgresql://modelgate:pg-secret@127.0.0.1:5432/modelgate"
    assert {p.kind for p in config.providers} == {"openai", "anthropic", "mock"}
    assert [p.name for p in config.providers if p.native_messages] == [
        "anthropic",
        "anthropic-compat",
        "clouds",
    ]
    clouds = config.provider("clouds")
    bedrock, vertex, azure = (clouds.served_from(host) for host in ("bedrock", "vertex", "azure"))
    assert (bedrock.kind, bedrock.base_url) == (
        "anthropic",
        "https://bedrock-runtime.us-east-1.amazonaws.com",
    )
    assert (vertex.kind, vertex.base_url) == ("anthropic", "https://us-east5-aiplatform.googleapis.com")
    assert (azure.kind, azure.dialect, azure.native_messages) == ("openai", "azure_openai", False)
    assert {plan.code for plan in config.plans} == {"free", "pro", "enterprise"}
    assert len(config.models) >= 3


def test_example_file_names_each_missing_env_var():
    found = problems(str(EXAMPLE), env={})

    assert len(found) == len(EXAMPLE_ENV)
    for name in EXAMPLE_ENV:
        assert any(f"environment variable {name!r} is not set" in problem for problem in found), name


def test_example_file_documents_every_key():
    text = EXAMPLE.read_text(encoding="utf-8")
    records = (
        ServerConfig,
        StorageConfig,
        RedisConfig,
        CabinetConfig,
        EmailConfig,
        RoutingConfig,
        BillingConfig,
        LoggingConfig,
        TracingConfig,
        PluginsConfig,
        ProviderConfig,
        HostConfig,
        RowConfig,
        PriceConfig,
        TokenPriceConfig,
        LongContextPriceConfig,
        ModelConfig,
        PlanConfig,
    )
    # A host's dialect options are keys of their own in the file (modelgate/config/dialects.py), not one
    # `options` key.
    # `tokens` holds the token prices, written at the top of [models.prices]; `source` is not a key (it says
    # whether the sheet came from the file or the catalogue); `claude_images` is derived from a model's rows.
    # `password` of [email] is read from the variable `password_env` names.
    not_keys = {"options", "tokens", "source", "password", "claude_images"}
    keys = keys_of(records) - not_keys | ALL_OPTIONS | {"password_env"}

    # A key is a comment line followed by `key = ...` (itself possibly commented out), or a sub-table
    # header such as [models.prices] that the comments around it explain.
    undocumented = [
        key
        for key in keys
        if not re.search(
            rf"^#.*\n#? ?{key} = |^#? ?\[\[?(models|providers)(\.prices)?\.{key}(\.\w+)?\]\]?$",
            text,
            re.MULTILINE,
        )
    ]

    assert undocumented == []


def keys_of(records: tuple[type, ...]) -> set[str]:
    """The field names of config records."""
    return {f.name for record in records for f in dataclasses.fields(record)}


def test_email_takes_its_password_from_the_named_environment_variable(write):
    path = write(
        VALID + '[email]\nhost = "smtp.test"\nfrom_address = "gw@example.test"\npassword_env = "SMTP_PW"\n'
    )

    config = load_config(path, env={**ENV, "SMTP_PW": "from-env"}, chain=chain_plugins())

    assert config.email is not None and config.email.password == "from-env"
    assert config.email.security == "starttls" and config.email.port == 587
    assert "from-env" not in repr(config)
    assert load_config(None, env={}).email is None


def test_email_problems_are_named(write):
    path = write(VALID + '[email]\nsecurity = "ssl"\nfrom_address = "nobody"\npassword_env = "SMTP_PW"\n')

    assert problems(path) == [
        "my.toml: email.host: missing required key",
        "my.toml: email.security: unknown e-mail security 'ssl'; expected one of: starttls, tls, none",
        "my.toml: email.from_address: expected an e-mail address, got 'nobody'",
        "my.toml: email.password_env: environment variable 'SMTP_PW' is not set",
    ]


def test_misspelled_provider_missing_env_var_and_wrong_type_give_three_precise_problems(write):
    path = write('[server]\nport = "80a"\n' + PROVIDER + MODEL.replace('"openai"', '"opneai"') + PLAN)

    assert problems(path, env={}) == [
        "my.toml: server.port: expected an integer, got string '80a'",
        "my.toml: providers[0].api_key: environment variable 'OPENAI_KEY' is not set",
        "my.toml: models[0].rows[0].provider: unknown provider 'opneai'; did you mean 'openai'?",
    ]


def test_error_message_is_the_problems_one_per_line(write):
    path = write('[server]\nport = "80a"\nworkers = 0\n' + VALID)

    with pytest.raises(ConfigError) as caught:
        load_config(path, env=ENV)

    assert str(caught.value) == "\n".join(caught.value.problems)
    assert len(caught.value.problems) == 2


def test_misspelled_provider_kind_suggests_closest(write):
    path = write(VALID.replace('kind = "openai"', 'kind = "opnai"'))

    assert problems(path) == [
        "my.toml: providers[0].kind: unknown provider kind 'opnai'; did you mean 'openai'?"
    ]


def test_unknown_key_suggests_closest_known_key(write):
    path = write("[server]\nprot = 8080\n" + VALID)

    assert problems(path) == ["my.toml: server.prot: unknown key; did you mean 'port'?"]


def test_unknown_section_suggests_closest_known_section(write):
    path = write("[servr]\nport = 8080\n" + VALID)

    assert problems(path) == ["my.toml: servr: unknown key; did you mean 'server'?"]


def test_unknown_key_inside_a_row_names_its_position(write):
    path = write(
        VALID
        + '\n[[models]]\nname = "b"\nkinds = ["chat"]\n[[models.rows]]\nprovider = "openai"\nwieght = 2\n'
    )

    assert problems(path) == ["my.toml: models[1].rows[0].wieght: unknown key; did you mean 'weight'?"]


def test_invalid_toml_reports_the_parser_message(write):
    path = write("[server\nport = 8080\n")

    [problem] = problems(path)

    assert problem.startswith("my.toml: invalid TOML: ")
    assert "line 1" in problem


def test_missing_file_is_reported_as_unreadable(write):
    assert problems("nope.toml") == ["nope.toml: cannot read file: No such file or directory"]


def test_duplicate_model_name_is_reported(write):
    path = write(VALID + MODEL)

    assert problems(path) == [
        "my.toml: models[1].name: duplicate model name 'gpt-4o' (first defined in models[0])"
    ]


def test_duplicate_provider_name_and_plan_code_are_reported(write):
    path = write(VALID + PROVIDER + PLAN)

    assert problems(path) == [
        "my.toml: providers[1].name: duplicate provider name 'openai' (first defined in providers[0])",
        "my.toml: plans[1].code: duplicate plan code 'free' (first defined in plans[0])",
    ]


def test_row_on_unknown_provider_lists_the_known_ones(write):
    path = write(VALID.replace('provider = "openai"', 'provider = "vertex"'))

    assert problems(path) == [
        "my.toml: models[0].rows[0].provider: unknown provider 'vertex'; expected one of: openai"
    ]


@pytest.mark.parametrize("weight", ["0", "-1.5"])
def test_row_weight_must_be_positive(write, weight):
    path = write(VALID.replace('provider = "openai"\n', f'provider = "openai"\nweight = {weight}\n'))

    assert problems(path) == [f"my.toml: models[0].rows[0].weight: must be greater than 0, got {weight}"]


def test_double_dollar_escapes_a_literal_reference(write):
    path = write(VALID.replace("[[plans]]\n", '[[plans]]\nname = "costs $${PRICE} in ${OPENAI_KEY}"\n'))

    assert load_config(path, env=ENV).plan("free").name == "costs ${PRICE} in sk-test"


def test_several_references_in_one_string_are_all_resolved(write):
    path = write('[storage]\nurl = "postgresql://${USER}:${PASS}@db/${USER}"\n' + VALID)

    config = load_config(path, env={**ENV, "USER": "mg", "PASS": "pw"})

    assert config.storage.url == "postgresql://mg:pw@db/mg"


def test_each_missing_variable_in_a_string_is_named(write):
    path = write('[storage]\nurl = "postgresql://${USER}:${PASS}@db"\n' + VALID)

    assert problems(path) == [
        "my.toml: storage.url: environment variable 'USER' is not set",
        "my.toml: storage.url: environment variable 'PASS' is not set",
    ]


def test_unterminated_reference_is_reported(write):
    path = write('[server]\nhost = "${HOST"\n' + VALID)

    assert problems(path) == ["my.toml: server.host: unterminated '${' (write '$${' for a literal '${')"]


def test_interpolated_value_stays_a_string(write):
    path = write('[server]\nport = "${PORT}"\n' + VALID)

    assert problems(path, env={**ENV, "PORT": "8080"}) == [
        "my.toml: server.port: expected an integer, got string '8080'"
    ]


def test_boolean_is_rejected_where_an_integer_is_expected(write):
    path = write("[server]\nworkers = true\n" + VALID)

    assert problems(path) == ["my.toml: server.workers: expected an integer, got boolean true"]


def test_integer_is_accepted_where_a_number_is_expected(write):
    path = write("[server]\nshutdown_grace_seconds = 5\n" + VALID)

    grace = load_config(path, env=ENV).server.shutdown_grace_seconds

    assert grace == 5.0 and isinstance(grace, float)


def test_out_of_range_port_is_rejected(write):
    path = write("[server]\nport = 70000\n" + VALID)

    assert problems(path) == ["my.toml: server.port: must be between 1 and 65535, got 70000"]


def test_unknown_request_kind_suggests_closest(write):
    path = write(VALID.replace('kinds = ["chat"]', 'kinds = ["chat", "embedding"]'))

    assert problems(path) == [
        "my.toml: models[0].kinds[1]: unknown request kind 'embedding'; did you mean 'embeddings'?"
    ]


def test_suggestions_ignore_case(write):
    path = write('[logging]\nlevel = "INFO"\n' + VALID)

    assert problems(path) == ["my.toml: logging.level: unknown log level 'INFO'; did you mean 'info'?"]


def test_unknown_disabled_plugin_suggests_closest(write):
    path = write('[plugins]\ndisabled = ["rate_limit"]\n' + VALID)

    assert problems(path) == [
        "my.toml: plugins.disabled[0]: unknown plugin 'rate_limit'; did you mean 'rate_limits'?"
    ]


def test_at_least_one_model_and_one_plan_are_required(write):
    path = write(PROVIDER)

    assert problems(path) == [
        "my.toml: models: at least one model is required ([[models]])",
        "my.toml: plans: at least one plan is required ([[plans]])",
    ]


def test_model_needs_kinds_and_rows(write):
    path = write(PROVIDER + '[[models]]\nname = "a"\nkinds = []\n' + PLAN)

    assert problems(path) == [
        "my.toml: models[0].kinds: at least one request kind is required",
        "my.toml: models[0].rows: at least one row is required ([[models.rows]])",
    ]


def test_base_url_is_required_unless_kind_is_mock(write):
    path = write(VALID.replace('base_url = "https://api.openai.com/v1/"\n', ""))

    assert problems(path) == [
        "my.toml: providers[0].base_url: missing required key (only kind 'mock' may omit it, or give"
        " [[providers.hosts]])"
    ]


def test_storage_url_scheme_is_checked_without_echoing_the_url(write):
    path = write('[storage]\nurl = "mysql://root:hunter2@db/mg"\n' + VALID)

    [problem] = problems(path)

    assert problem.startswith("my.toml: storage.url: expected a URL starting with sqlite:///")
    assert "hunter2" not in problem


def test_cabinet_url_for_single_sign_on_is_unset_by_default_and_must_be_an_http_url(write):
    assert load_config(write(VALID), env=ENV).cabinet.cabinet_url is None
    given = load_config(write('[cabinet]\ncabinet_url = "https://app.example.com/sso"\n' + VALID), env=ENV)

    assert given.cabinet.cabinet_url == "https://app.example.com/sso"
    assert problems(write('[cabinet]\ncabinet_url = "app.example.com/sso"\n' + VALID)) == [
        "my.toml: cabinet.cabinet_url: expected an http:// or https:// URL with a host"
    ]


def test_rows_default_to_the_model_name_and_provider_host(write):
    row = load_config(write(VALID), env=ENV).model("gpt-4o").rows[0]

    assert row == RowConfig(provider="openai", upstream_model="gpt-4o", host="api.openai.com", weight=1.0)


def test_base_url_trailing_slash_is_stripped(write):
    assert load_config(write(VALID), env=ENV).provider("openai").base_url == "https://api.openai.com/v1"


def test_native_messages_defaults_to_true_only_for_anthropic():
    assert ProviderConfig("a", "anthropic", "https://api.anthropic.com").native_messages is True
    assert ProviderConfig("o", "openai", "https://api.openai.com/v1").native_messages is False
    assert ProviderConfig("m", "mock").host == "mock"


def test_plan_name_defaults_to_code(write):
    assert load_config(write(VALID), env=ENV).plan("free").name == "free"


def test_headers_keep_file_order_and_reject_line_breaks(write):
    good = VALID.replace("[[models]]", 'headers = { "X-B" = "2", "X-A" = "${OPENAI_KEY}" }\n\n[[models]]', 1)
    bad = VALID.replace("[[models]]", 'headers = { "X-A" = "a\\r\\nEvil: 1" }\n\n[[models]]', 1)

    assert load_config(write(good), env=ENV).provider("openai").headers == (("X-B", "2"), ("X-A", "sk-test"))
    assert problems(write(bad)) == [
        "my.toml: providers[0].headers.X-A: header value must not contain CR, LF or NUL"
    ]


def test_config_objects_are_frozen():
    config = load_config(None, env={})

    with pytest.raises(dataclasses.FrozenInstanceError):
        config.server.port = 1  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.models[0].rows[0].weight = 2.0  # type: ignore[misc]
    assert isinstance(config.models, tuple) and isinstance(config.models[0].rows, tuple)


def test_config_is_hashable_and_compares_by_content():
    first, second = load_config(None, env={}), load_config(None, env={})

    assert first == second and hash(first) == hash(second)


def test_lookups_return_none_for_unknown_names():
    config = load_config(None, env={})

    assert (config.provider("nope"), config.model("nope"), config.plan("nope")) == (None, None, None)


def test_hand_built_config_supports_lookups():
    row = RowConfig(provider="mock", upstream_model="m")
    config = Config(
        providers=(ProviderConfig("mock", "mock"),),
        models=(ModelConfig("m", ("chat",), (row,)),),
        plans=(PlanConfig("free"),),
    )

    assert config.model("m").rows == (row,) and config.plan("free").name == "free"


def test_secrets_stay_out_of_repr():
    config = load_config(EXAMPLE, env=EXAMPLE_ENV)

    text = repr(config)

    assert not [secret for secret in EXAMPLE_ENV.values() if secret in text]


def test_request_kinds_are_the_documented_set():
    assert "messages" in REQUEST_KINDS and "decisions" in REQUEST_KINDS and len(REQUEST_KINDS) == 13


def test_an_essential_plugin_cannot_be_disabled(write):
    path = write('[plugins]\ndisabled = ["auth"]\n' + VALID)

    assert problems(path) == [
        "my.toml: plugins.disabled[0]: plugin 'auth' cannot be disabled; only these can: "
        "policy, rate_limits, billing_gate, usage_metering"
    ]


def test_the_example_config_lists_every_plugin_of_the_chain_in_order_with_the_always_on_ones_marked():
    text = EXAMPLE.read_text()
    block = text[text.index("[plugins]\n") : text.index("\ndisabled = ")]
    listed = re.findall(r"^#   ([a-z_]+) +(always on:)?", block, flags=re.MULTILINE)

    assert [(name, bool(always_on)) for name, always_on in listed] == list(chain_plugins())


def test_the_realtime_plugins_are_known_and_cannot_be_disabled(write):
    path = write('[plugins]\ndisabled = ["realtime_cap", "realtime_credentials"]\n' + VALID)

    assert [problem.split(": ", 2)[2].split(";")[0] for problem in problems(path)] == [
        "plugin 'realtime_cap' cannot be disabled",
        "plugin 'realtime_credentials' cannot be disabled",
    ]


def test_late_usage_settings_are_checked_at_load(write):
    path = write(
        '[billing]\nabandoned_calls = "ignore"\nbackground_poll_seconds = 0\nbackground_lease_seconds = -1\n'
        + VALID
    )

    found = problems(path)
    assert found[0] == (
        "my.toml: billing.abandoned_calls: unknown abandoned call policy 'ignore';"
        " expected one of: finish, cancel"
    )
    assert [problem.split(":")[1].strip() for problem in found[1:]] == [
        "billing.background_poll_seconds",
        "billing.background_lease_seconds",
    ]


def test_redis_sentinel_settings_are_read_and_checked(write) -> None:
    sentinel = '[redis]\nsentinels = ["10.0.0.7:26379", "[::1]:26380"]\nsentinel_master = "gw"\n'
    redis = load_config(write(VALID + sentinel + 'url = "redis://:pw@/2"\n'), env=ENV).redis
    assert (redis.enabled, redis.sentinels, redis.sentinel_master, redis.sentinel_password) == (
        True,
        ("10.0.0.7:26379", "[::1]:26380"),
        "gw",
        None,
    )
    secured = load_config(write(VALID + sentinel + 'sentinel_password = "s3cret"\n'), env=ENV).redis
    assert secured.sentinel_password == "s3cret" and "s3cret" not in repr(secured)
    for bad, key in (
        ('sentinels = ["10.0.0.7:26379"]\n', "sentinel_master"),  # a master name is needed
        ('sentinel_master = "gw"\n', "sentinel_master"),  # and sentinels to ask
        ('sentinels = ["10.0.0.7"]\nsentinel_master = "gw"\n', "sentinels[0]"),  # no port
        ('sentinels = ["10.0.0.7:26379"]\nsentinel_master = "gw"\nurl = "rediss://h"\n', "url"),  # TCP only
        ('url = "redis://h"\nsentinel_password = "s"\n', "sentinel_password"),  # no sentinels to give it to
        ('cluster_nodes = ["h:7000"]\nsentinel_password = "s"\n', "cluster_nodes"),
    ):
        found = problems(write(VALID + "[redis]\n" + bad))
        assert any(f"redis.{key}" in problem for problem in found), found


def test_the_redis_outage_mode_is_read_and_fail_open_keeps_its_meaning(write) -> None:
    def mode(lines: str) -> str:
        return load_config(write(VALID + '[redis]\nurl = "redis://h"\n' + lines), env=ENV).redis.outage_mode

    assert (mode(""), mode("fail_open = true\n"), mode("fail_open = false\n")) == ("refuse", "open", "refuse")
    assert mode('outage = "degraded"\n') == "degraded"
    assert mode('outage = "open"\nfail_open = true\n') == "open"
    for bad in ('outage = "degrade"\n', 'outage = "degraded"\nfail_open = true\n', "outage = 1\n"):
        found = problems(write(VALID + "[redis]\n" + bad))
        assert any("redis.outage" in problem for problem in found), found
    assert "did you mean 'degraded'" in " ".join(problems(write(VALID + '[redis]\noutage = "degrade"\n')))


def test_redis_cluster_settings_are_read_and_bad_combinations_refused_naming_the_key(write) -> None:
    cluster = '[redis]\ncluster_nodes = ["10.0.0.7:7000", "[::1]:7001"]\n'
    redis = load_config(write(VALID + cluster + 'url = "redis://:pw@"\n'), env=ENV).redis
    assert (redis.enabled, redis.cluster_nodes, redis.sentinels) == (
        True,
        ("10.0.0.7:7000", "[::1]:7001"),
        (),
    )
    sentinel = 'sentinels = ["10.0.0.7:26379"]\nsentinel_master = "gw"\n'
    for bad, key in (
        ('cluster_nodes = ["10.0.0.7"]\n', "cluster_nodes[0]"),  # no port
        ('cluster_nodes = ["10.0.0.7:7000"]\n' + sentinel, "cluster_nodes"),  # a cluster or a Sentinel
        ('cluster_nodes = ["10.0.0.7:7000"]\nsentinel_master = "gw"\n', "cluster_nodes"),  # half a Sentinel
        ('cluster_nodes = ["10.0.0.7:7000"]\nurl = "rediss://h"\n', "url"),  # plain TCP only
        ('cluster_nodes = ["10.0.0.7:7000"]\nurl = "redis://h/2"\n', "url"),  # database 0 only
    ):
        found = problems(write(VALID + "[redis]\n" + bad))
        assert any(f"redis.{key}" in problem for problem in found), (bad, found)
