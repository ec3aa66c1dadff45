"""The `modelgate` command: serve, check-config, migrate, billing."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path

from modelgate.config import Config, ConfigError, load_config
from modelgate.config.schema import PriceConfig

EXIT_CONFIG = 2
EXIT_LISTEN = 1


def _load(path: str | None) -> Config | None:
    try:
        from modelgate.plugins import chain_plugins  # late: `--version` and `--help` need none of the gateway

        return load_config(path, chain=chain_plugins())
    except ConfigError as error:
        for problem in error.problems:
            print(problem, file=sys.stderr)
        return None


def cmd_serve(args: argparse.Namespace) -> int:
    config = _load(args.config)
    if config is None:
        print("modelgate: refusing to start on an invalid config", file=sys.stderr)
        return EXIT_CONFIG
    from modelgate.proxy.http.listen import ListenError
    from modelgate.proxy.observability.logs import configure_logging
    from modelgate.server import run

    host = args.host or config.server.host
    port = args.port if args.port is not None else config.server.port
    workers = args.workers if args.workers is not None else config.server.workers
    if port == 0 and workers > 1:
        print(
            "modelgate: --port 0 (any free port) needs --workers 1: workers share one port", file=sys.stderr
        )
        return EXIT_CONFIG
    configure_logging(config.logging)
    try:
        return run(config, host=host, port=port, workers=workers)
    except ListenError as exc:
        print(f"modelgate: {exc}", file=sys.stderr)
        return EXIT_LISTEN


def _whole_number(noun: str, rule: str, allowed: Callable[[int], bool]) -> Callable[[str], int]:
    """An argparse type: an integer that `allowed` accepts, else a usage error stating `rule`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {noun}, got {text!r}") from None
        if not allowed(value):
            raise argparse.ArgumentTypeError(f"{rule}, got {value}")
        return value

    return parse


# A TCP port: 1..65535, or 0 for any free one (the log line then names the port it got).
_port = _whole_number(
    "a port number", "must be between 1 and 65535 (or 0 for any free port)", lambda port: 0 <= port <= 65535
)
_workers = _whole_number("a number of processes", "must be at least 1", lambda workers: workers >= 1)


def cmd_check_config(args: argparse.Namespace) -> int:
    config = _load(args.file)
    if config is None:
        return EXIT_CONFIG
    print(
        f"{config.source}: OK ({len(config.providers)} providers, {len(config.models)} models, "
        f"{len(config.plans)} plans)"
    )
    for model in config.models:
        if not model.prices.source:
            print(
                f"warning: model {model.name!r} has no prices (no [models.prices], and the price catalogue"
                " does not list its upstream model): its requests are charged nothing",
                file=sys.stderr,
            )
    return 0


def cmd_prices_show(args: argparse.Namespace) -> int:
    """Print the price sheet a model is charged by, and where it came from; a name the config does not
    serve is looked up in the shipped catalogue (by upstream model name)."""
    from modelgate.config.catalogue import find_in_catalogue

    config = _load(args.config)
    if config is None:
        return EXIT_CONFIG
    model = next((m for m in config.models if m.name == args.model), None)
    if model is not None:
        print(f"model {model.name}: prices from {model.prices.source or 'nowhere (charged nothing)'}")
        print(f"  context window: {model.max_context_tokens} tokens")
        _print_sheet(model.prices)
        return 0
    entry = find_in_catalogue(args.model)
    if entry is None:
        print(f"no model {args.model!r} in {config.source}, nor in the price catalogue", file=sys.stderr)
        return EXIT_CONFIG
    print(f"upstream model {args.model} (not served by {config.source}): prices from {entry.prices.source}")
    if entry.context_window:
        print(f"  context window: {entry.context_window} tokens")
    if entry.max_output_tokens:
        print(f"  max output: {entry.max_output_tokens} tokens")
    _print_sheet(entry.prices)
    return 0


def _print_sheet(prices: PriceConfig) -> None:
    for name, value in _sheet_lines(prices.tokens):
        print(f"  {name} = {value}")
    for name in ("per_request", "per_image", "per_audio_second", "per_video_second", "per_web_search_call",
                 "per_file_search_call", "per_code_interpreter_call"):  # fmt: skip
        if value := getattr(prices, name):
            print(f"  {name} = {value}")
    for variant, price in prices.per_image_by:
        print(f"  per image {variant} = {price}")
    for tier in prices.long_context:
        print(f"  above {tier.above_input_tokens} prompt tokens:")
        for name, value in _sheet_lines(tier.tokens, "    "):
            print(f"    {name} = {value}")
    for tier_name, tokens in prices.service_tiers:
        print(f"  service tier {tier_name}:")
        for name, value in _sheet_lines(tokens, "    "):
            print(f"    {name} = {value}")


def cmd_prices_import_litellm(args: argparse.Namespace) -> int:
    """Write LiteLLM's price file as a catalogue for `[billing] price_catalogue` (checked before written)."""
    import datetime
    import json
    import tomllib

    from modelgate.config.catalogue import CatalogueError, read_catalogue
    from modelgate.config.litellm_import import catalogue_from_litellm

    try:
        data = json.loads(Path(args.file).read_text("utf-8"))
        text, count = catalogue_from_litellm(data, datetime.date.today().isoformat(), Path(args.file).name)
        read_catalogue(tomllib.loads(text), "the imported catalogue")
    except (OSError, ValueError, CatalogueError) as exc:
        print(f"{args.file}: cannot import: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    if args.output:
        Path(args.output).write_text(text, "utf-8")
    else:
        sys.stdout.write(text)
    print(f"{count} models imported from {args.file}", file=sys.stderr)
    return 0


def _sheet_lines(tokens: object, indent: str = "  ") -> list[tuple[str, str]]:
    """(key, value) of each token price named; those left out say what they default to."""
    from dataclasses import fields

    lines = []
    for field in fields(tokens):  # type: ignore[arg-type]
        value = getattr(tokens, field.name)
        lines.append((field.name, "(derived: see docs/prices.md)" if value is None else str(value)))
    return lines


def cmd_migrate(args: argparse.Namespace) -> int:
    config = _load(args.config)
    if config is None:
        return EXIT_CONFIG
    from modelgate.storage import apply_migrations, open_database
    from modelgate.storage.migrations import current_version

    async def migrate() -> tuple[list[int], int]:
        db = await open_database(config.storage.url)
        try:
            applied = await apply_migrations(db)
            return applied, await current_version(db)
        finally:
            await db.close()

    applied, version = asyncio.run(migrate())
    print(f"applied {len(applied)} migration(s); schema version is {version}")
    return 0


def cmd_billing(args: argparse.Namespace) -> int:
    from modelgate.cabinet.billing_commands import run_billing_command

    config = None
    if args.url is None:
        config = _load(args.config)
        if config is None:
            return EXIT_CONFIG
    token = args.operator_token or os.environ.get("MODELGATE_OPERATOR_TOKEN")
    return asyncio.run(
        run_billing_command(
            args.billing_command,
            config=config,
            url=args.url,
            token=token,
            invoice_id=getattr(args, "invoice_id", ""),
            organization_id=getattr(args, "organization_id", ""),
            amount=getattr(args, "amount", ""),
            kind=getattr(args, "kind", ""),
            reason=getattr(args, "reason", ""),
            plan_code=getattr(args, "plan_code", ""),
            email=getattr(args, "email", ""),
        )
    )


def _add_billing_commands(commands: argparse._SubParsersAction) -> None:
    billing = commands.add_parser(
        "billing",
        help="operator billing: pay invoices, top up and adjust balances, assign plans, invite organizations",
        description="Act on the configured storage and notify running gateways (PostgreSQL NOTIFY, the"
        " channel file beside a SQLite database, Redis when configured), or with --url through the operator"
        " API of a running gateway.",
    )
    actions = billing.add_subparsers(dest="billing_command", required=True)
    where = argparse.ArgumentParser(add_help=False)
    target = where.add_mutually_exclusive_group()
    target.add_argument("--config", help="TOML config file whose storage to use (default: embedded defaults)")
    target.add_argument("--url", help="base URL of a running gateway, e.g. http://127.0.0.1:8080")
    where.add_argument(
        "--operator-token", help="operator token for --url (default: $MODELGATE_OPERATOR_TOKEN)"
    )

    paid = actions.add_parser("mark-paid", parents=[where], help="mark an open invoice paid")
    paid.add_argument("invoice_id", metavar="INVOICE_ID")
    top_up = actions.add_parser("top-up", parents=[where], help="credit an organization's balance")
    top_up.add_argument("organization_id", metavar="ORG_ID")
    top_up.add_argument("amount", metavar="AMOUNT_USD", help="amount in the configured currency, e.g. 25.50")
    adjust = actions.add_parser(
        "adjust",
        parents=[where],
        help="credit, debit or set an organization's balance (refund, correction, chargeback)",
    )
    adjust.add_argument("organization_id", metavar="ORG_ID")
    adjust.add_argument("kind", choices=("credit", "debit", "set"), help="set: the balance to reach")
    adjust.add_argument("amount", metavar="AMOUNT", help="amount in the configured currency, e.g. 25.50")
    adjust.add_argument("--reason", required=True, help="why (recorded in the audit log), at most 500 chars")
    plan = actions.add_parser("set-plan", parents=[where], help="move an organization to another plan")
    plan.add_argument("organization_id", metavar="ORG_ID")
    plan.add_argument("plan_code", metavar="PLAN")
    invite = actions.add_parser(
        "invite-org", parents=[where], help="invite an e-mail to register an organization on a plan"
    )
    invite.add_argument("email", metavar="EMAIL")
    invite.add_argument("plan_code", metavar="PLAN")
    listing = actions.add_parser("invoices", parents=[where], help="an organization's balance and invoices")
    listing.add_argument("organization_id", metavar="ORG_ID")
    billing.set_defaults(func=cmd_billing)
    _add_sso_commands(commands, where)


def cmd_sso(args: argparse.Namespace) -> int:
    from modelgate.cabinet.sso_domain_commands import run_sso_command

    config = None
    if args.url is None:
        config = _load(args.config)
        if config is None:
            return EXIT_CONFIG
    return asyncio.run(
        run_sso_command(
            args.sso_command,
            config=config,
            url=args.url,
            token=args.operator_token or os.environ.get("MODELGATE_OPERATOR_TOKEN"),
            organization_id=getattr(args, "organization_id", ""),
            domain=args.domain,
        )
    )


def _add_sso_commands(commands: argparse._SubParsersAction, where: argparse.ArgumentParser) -> None:
    sso = commands.add_parser(
        "sso",
        help="operator single sign-on domains: approve a domain for an organization, release one",
        description="Act on the configured storage, or with --url through the operator API of a running"
        " gateway. An approved domain is verified at once, without its DNS record.",
    )
    actions = sso.add_subparsers(dest="sso_command", required=True)
    approve = actions.add_parser(
        "approve-domain", parents=[where], help="verify an e-mail domain for an organization"
    )
    approve.add_argument("organization_id", metavar="ORG_ID")
    approve.add_argument("domain", metavar="DOMAIN")
    release = actions.add_parser(
        "release-domain", parents=[where], help="release a verified domain from the organization holding it"
    )
    release.add_argument("domain", metavar="DOMAIN")
    sso.set_defaults(func=cmd_sso)


def _installed_version() -> str:
    """The version of the installed distribution ("unknown" when run from a tree that is not installed)."""
    try:
        return metadata.version("modelgate")
    except metadata.PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="modelgate", description="modelgate LLM gateway")
    parser.add_argument("--version", action="version", version=f"modelgate {_installed_version()}")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the gateway (embedded defaults when no --config)")
    serve.add_argument("--config", help="TOML config file (default: embedded defaults)")
    serve.add_argument("--host", help="listen address (default: server.host)")
    serve.add_argument(
        "--port", type=_port, help="listen port, 1-65535; 0: any free port (default: server.port)"
    )
    serve.add_argument(
        "--workers", type=_workers, help="processes sharing the port (default: server.workers)"
    )
    serve.set_defaults(func=cmd_serve)

    check = commands.add_parser("check-config", help="validate a config file and print every problem")
    check.add_argument("file")
    check.set_defaults(func=cmd_check_config)

    migrate = commands.add_parser("migrate", help="apply pending storage migrations")
    migrate.add_argument("--config", help="TOML config file (default: embedded defaults)")
    migrate.set_defaults(func=cmd_migrate)

    prices = commands.add_parser("prices", help="price sheets: what a model is charged by")
    price_actions = prices.add_subparsers(dest="prices_command", required=True)
    show = price_actions.add_parser(
        "show", help="print the price sheet a model is charged by, with its source"
    )
    show.add_argument("model", help="a served model, else an upstream model name the price catalogue lists")
    show.add_argument("--config", help="TOML config file (default: embedded defaults)")
    show.set_defaults(func=cmd_prices_show)
    imported = price_actions.add_parser(
        "import-litellm", help="turn LiteLLM's model_prices_and_context_window.json into a price catalogue"
    )
    imported.add_argument("file")
    imported.add_argument("--output", help="write the catalogue here (default: standard output)")
    imported.set_defaults(func=cmd_prices_import_litellm)

    _add_billing_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
