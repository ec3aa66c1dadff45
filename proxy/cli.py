"""The `modelgate` command: serve, check-config, migrate."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from config import Config, ConfigError, load_config

EXIT_CONFIG = 2


def _load(path: str | None) -> Config | None:
    try:
        return load_config(path)
    except ConfigError as error:
        for problem in error.problems:
            print(problem, file=sys.stderr)
        return None


def cmd_serve(args: argparse.Namespace) -> int:
    config = _load(args.config)
    if config is None:
        print("modelgate: refusing to start on an invalid config", file=sys.stderr)
        return EXIT_CONFIG
    from proxy.logs import configure_logging
    from proxy.server import run

    configure_logging(config.logging)
    host = args.host or config.server.host
    port = args.port if args.port is not None else config.server.port
    workers = args.workers if args.workers is not None else config.server.workers
    return run(config, host=host, port=port, workers=workers)


def cmd_check_config(args: argparse.Namespace) -> int:
    config = _load(args.file)
    if config is None:
        return EXIT_CONFIG
    print(
        f"{config.source}: OK ({len(config.providers)} providers, {len(config.models)} models, "
        f"{len(config.plans)} plans)"
    )
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    config = _load(args.config)
    if config is None:
        return EXIT_CONFIG
    from cabinet.storage import apply_migrations, open_database
    from cabinet.storage.migrations import current_version

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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="modelgate", description="modelgate LLM gateway")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the gateway (embedded defaults when no --config)")
    serve.add_argument("--config", help="TOML config file (default: embedded defaults)")
    serve.add_argument("--host", help="listen address (default: server.host)")
    serve.add_argument("--port", type=int, help="listen port (default: server.port)")
    serve.add_argument("--workers", type=int, help="processes sharing the port (default: server.workers)")
    serve.set_defaults(func=cmd_serve)

    check = commands.add_parser("check-config", help="validate a config file and print every problem")
    check.add_argument("file")
    check.set_defaults(func=cmd_check_config)

    migrate = commands.add_parser("migrate", help="apply pending storage migrations")
    migrate.add_argument("--config", help="TOML config file (default: embedded defaults)")
    migrate.set_defaults(func=cmd_migrate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
