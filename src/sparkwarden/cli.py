"""The front door: parse arguments, load config, hand over to one action.

Exit codes are a contract: 0 all well, 1 the run failed (or the lock was busy), 2 bad config or
usage. Actions are imported lazily so ``sparkwarden status`` over SSH stays quick.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sparkwarden.config.schema import Config

from sparkwarden.base.exits import Exit
from sparkwarden.base.version import version

EXIT_OK, EXIT_FAILED, EXIT_USAGE = Exit.OK, Exit.FAILED, Exit.USAGE


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        print(f"sparkwarden: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be 1 or more")
    return value


def _reason(text: str) -> str:
    """Why, for the journal: plain text like ``hold --reason`` (spaces too), kept short."""
    if not 1 <= len(text) <= 64 or re.search(r"[\x00-\x1f\x7f-\x9f]", text):
        raise argparse.ArgumentTypeError(f"{text!r}: up to 64 characters, no control characters")
    return text


def _note(text: str) -> str:
    """A hold reason: shown in status on root's terminal, so plain text only."""
    from pydantic import ValidationError

    from sparkwarden.surfaces.control_schema import parse_request

    try:
        parse_request({"cmd": "hold", "seconds": 1, "reason": text})
    except ValidationError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: up to 200 characters, no control characters"
        ) from None
    return text


def _duration(text: str) -> float:
    from sparkwarden.config.schema import parse_duration

    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be longer than zero")
    return seconds


def build_parser() -> argparse.ArgumentParser:
    # Global options are accepted before or after the command, as operators type them both ways.
    common = _Parser(add_help=False)
    common.add_argument(
        "--config",
        metavar="PATH",
        default=argparse.SUPPRESS,
        help="config file (default: $SPARKWARDEN_CONFIG, else /etc/sparkwarden/sparkwarden.toml)",
    )
    common.add_argument(
        "--log-level",
        choices=["debug", "info", "warning", "error"],
        default=argparse.SUPPRESS,
        help="structured log level on stderr (default: info for run, warning otherwise)",
    )
    parser = _Parser(
        prog="sparkwarden",
        description="Keeps the vLLM engine of a DGX Spark serving: safe restarts, supervision.",
        parents=[common],
    )
    parser.add_argument(
        "--version", action="version", version=f"sparkwarden {version()}", help="and exit"
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help_text, parents=[common])

    restart = command("restart", "run the safe restart sequence now, in the foreground")
    restart.add_argument(
        "--reason", default="manual", type=_reason, help="why, for the journal (default manual)"
    )
    restart.add_argument("--dry-run", action="store_true", help="print the plan, touch nothing")

    history = command("history", "list past runs, newest first")
    history.add_argument("--json", action="store_true", help="machine-readable output")
    history.add_argument("--limit", type=_positive_int, default=20, help="how many runs (20)")

    why = command("why", "the story of a run: what fired, the gates, each step, the end")
    why.add_argument(
        "run", nargs="?", type=_positive_int, help="its number (default: the newest automatic)"
    )

    command("check-config", "validate the config and print the effective values")

    notify = command("notify", "notifications: --test sends a test event to every target")
    notify.add_argument(
        "--test", action="store_true", required=True, help="send the test event now"
    )

    command("run", "the supervisor daemon, in the foreground (what systemd starts)")

    status = command("status", "what the daemon sees and does; works without it too")
    status.add_argument("--json", action="store_true", help="machine-readable output")

    hold = command("hold", "no automatic restart for DURATION (a maintenance window)")
    hold.add_argument("duration", type=_duration, help="e.g. 2h, 90m")
    hold.add_argument("--reason", default="", type=_note, help="shown in status")
    command("release", "end a hold now")
    command("reset", "clear the restart budget and a 'gave up' state")

    record = command("record", "scrape the engine's /metrics into a trace, for replay")
    record.add_argument("--out", type=Path, required=True, help="JSON-lines file (appended)")
    record.add_argument("--interval", type=_duration, default=30.0, help="default 30s")
    record.add_argument("--duration", type=_duration, help="stop after this long")
    replay = command("replay", "run a recorded trace through the acceptance trigger")
    replay.add_argument("trace", type=Path, help="a file written by 'sparkwarden record'")
    replay.add_argument("--json", action="store_true", help="machine-readable output")

    cluster = command("cluster", "several Sparks as one engine, driven from the head")
    verbs = cluster.add_subparsers(dest="cluster_verb", required=True, parser_class=_Parser)
    c_restart = verbs.add_parser(
        "restart", help="restart every node's engine as one unit", parents=[common]
    )
    c_restart.add_argument(
        "--reason", default="manual", type=_reason, help="why, for the journal (default manual)"
    )
    for verb, text in (
        ("status", "every node's engine, memory and reachability; exit 0 only when serving"),
        ("preflight", "what a restart checks first, touching nothing"),
    ):
        verbs.add_parser(verb, help=text, parents=[common]).add_argument(
            "--json", action="store_true", help="machine-readable output"
        )

    node = command("node", "one of this node's own steps, for a cluster's head or a replica (JSON)")
    node.add_argument("verb", choices=NODE_VERBS)
    node.add_argument("--engine", action="append", default=[], help="an engine container")
    node.add_argument("--voice", action="append", default=[], help="a voice container")
    node.add_argument("--timeout", type=_duration, default=120.0, help="stop: docker stop's")
    node.add_argument("--gate-gib", type=float, default=60.0, help="drop: GiB to wait for")
    node.add_argument("--wait", type=_duration, default=180.0, help="drop: for at most")
    node.add_argument("--interval", type=_duration, default=5.0, help="drop: between drops")
    node.add_argument(
        "--engine-process",
        action="store_true",
        help="inspect: a running engine container with no vLLM process in it is idle",
    )
    node.add_argument("--action", choices=TURN_ACTIONS, default="", help="turn: what")
    node.add_argument("--holder", default="", help="turn: the replica asking")
    node.add_argument("--ttl", type=_duration, default=0.0, help="turn: how long it lasts")
    node.add_argument("--json", action="store_true", help="one JSON line (always)")

    doctor = command("doctor", "check the host and the containers for known traps")
    doctor.add_argument("--json", action="store_true", help="machine-readable output")

    install = command("install-service", "install, enable and start the systemd unit (root)")
    install.add_argument("--no-start", action="store_true", help="enable only; do not start")
    install.add_argument("--root", type=Path, help="install under this directory, not systemd")
    uninstall = command("uninstall-service", "stop, disable and remove the systemd unit (root)")
    uninstall.add_argument("--purge", action="store_true", help="also config, state and group")
    uninstall.add_argument("--root", type=Path, help="remove from under this directory")
    return parser


#: ``cluster/node.py``'s VERBS and ``restart/turn.py``'s ACTIONS, spelt out: importing those
#: would bring ``dataclasses`` into every command (``status`` stays lean); a test compares them.
NODE_VERBS = ["inspect", "pause", "resume", "stop", "drop", "start", "serving", "turn"]
TURN_ACTIONS = ["take", "renew", "release", "read"]


#: The exit status of a command whose reader quit (``| head -1``): a shell's 128 + SIGPIPE.
EXIT_READER_GONE = Exit.READER_GONE


def main(argv: Sequence[str] | None = None) -> int:
    """Every command; one whose output's reader quits ends quietly, as a filter does (a run's
    own output is sturdier: ``foreground.say`` goes on without its reader)."""
    try:
        code = _command(argv)
        sys.stdout.flush()  # here, not at exit: where a reader gone is still caught
        return code
    except BrokenPipeError:
        from sparkwarden.base.streams import to_nowhere

        to_nowhere(sys.stdout.fileno())  # what Python flushes at exit goes nowhere, quietly
        return EXIT_READER_GONE


def _command(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    args.config = getattr(args, "config", None)
    args.log_level = getattr(args, "log_level", None)
    if args.command == "status":
        return _status(args)
    if args.command == "restart" and (light := _restart(args)) is not None:
        return light
    if args.command == "node":  # the head passes all it needs: no config, schema nor logger
        from sparkwarden.actions import node as node_action

        return node_action.node(args)
    from sparkwarden.base import logs

    logs.setup(args.log_level or ("info" if args.command == "run" else "warning"))
    from sparkwarden.base.errors import ConfigError, SparkwardenError
    from sparkwarden.config import schema as config_mod
    from sparkwarden.config import secrets

    if args.command in ("install-service", "uninstall-service"):  # before any config exists
        from sparkwarden.actions import install

        if args.command == "install-service" and args.config is not None:
            return _refuse(
                SparkwardenError(
                    f"install-service takes no --config ({args.config}): the unit reads "
                    "/etc/sparkwarden/sparkwarden.toml, which it writes if missing; edit that"
                ),
                EXIT_USAGE,
            )
        try:
            if args.command == "install-service":
                return install.install(args.root, start=not args.no_start)
            return install.uninstall(args.root, purge=args.purge, config_path=args.config)
        except SparkwardenError as exc:
            return _refuse(exc, EXIT_FAILED)
    try:
        config = config_mod.load(args.config)
    except ConfigError as exc:
        return _refuse(exc, EXIT_USAGE)
    source = config_mod.resolve_path(args.config)
    try:
        if args.command == "check-config":
            from sparkwarden.actions import check_config

            return check_config.run(config, source)
        if args.command in ("run", "record"):  # they read the secrets; status and history do not
            secrets.require_secrets(config, source, notify=args.command == "run")
        if args.command == "restart":
            from sparkwarden.actions import restart

            return restart.run(config, source, reason=args.reason, dry_run=args.dry_run)
        if args.command == "history":
            from sparkwarden.actions import history

            return history.run(config, as_json=args.json, limit=args.limit)
        if args.command == "notify":
            from sparkwarden.actions import notify as notify_action

            secrets.require_secrets(config, source, keys=False)
            return notify_action.run(config)
        if args.command == "why":
            from sparkwarden.actions import why
            from sparkwarden.config.locate import places

            return why.run(places(args.config), args.run)
        if args.command == "run":
            from sparkwarden.actions import run as run_action

            return run_action.run(config, config_mod.resolve_path(args.config))
        if args.command == "record":
            from sparkwarden.actions import record as record_action

            return record_action.run(config, args.out, args.interval, args.duration)
        if args.command == "replay":
            from sparkwarden.actions import replay as replay_action

            return replay_action.run(config, args.trace, as_json=args.json)
        if args.command == "cluster":
            from sparkwarden.actions import cluster as cluster_action

            if args.cluster_verb == "restart":
                return cluster_action.restart(config, args.reason)
            if args.cluster_verb == "status":
                return cluster_action.status(config, as_json=args.json)
            return cluster_action.preflight(config, as_json=args.json)
        if args.command == "doctor":
            from sparkwarden.actions import doctor as doctor_action

            return doctor_action.run(config, as_json=args.json)
        if args.command in ("hold", "release", "reset"):
            from sparkwarden.actions import admin

            request: dict[str, object] = {"cmd": args.command}
            if args.command == "hold":
                request.update(seconds=args.duration, reason=args.reason)
            return admin.run(config, request)
    except ConfigError as exc:  # a secret the command needs is missing: nothing was touched
        return _refuse(exc, EXIT_USAGE)
    except SparkwardenError as exc:
        return _refuse(exc, EXIT_FAILED)
    raise AssertionError(f"unhandled command {args.command}")


def _refuse(exc: Exception, code: int) -> int:
    """One line, never wrapped: it names paths of any length, and operators grep for it."""
    print(f"sparkwarden: {exc}", file=sys.stderr)
    return code


def _restart(args: argparse.Namespace) -> int | None:
    """``restart`` and ``restart --dry-run`` through the daemon, as quick as ``status``: the
    socket from locate.py, no schema, logger or Docker SDK (through_daemon.py). None when no
    daemon answers, or the file's ``[state]``/``[control]`` are wrong: the full path then loads
    the config (naming what is wrong, exit 2) and runs the restart or makes the plan itself."""
    from sparkwarden.actions import through_daemon
    from sparkwarden.base.errors import ConfigError, SparkwardenError
    from sparkwarden.config import locate
    from sparkwarden.surfaces.control import DaemonUnavailable

    try:
        where = locate.places(args.config)
    except ConfigError:
        return None
    try:
        if args.dry_run:
            return through_daemon.dry_run(where.socket, args.reason)
        return through_daemon.restart(where.socket, args.reason)
    except DaemonUnavailable:
        return None
    except SparkwardenError as exc:
        return _refuse(exc, EXIT_FAILED)


def _status(args: argparse.Namespace) -> int:
    """``status`` finds the state dir and socket only: no schema, no logger (see locate.py)."""
    from sparkwarden.actions import status
    from sparkwarden.base.errors import ConfigError, SparkwardenError
    from sparkwarden.config import locate

    try:
        where = locate.places(args.config)
        # Only a cluster's head pays for the schema: it needs the nodes, and SSH costs more.
        config: Config | None = None
        if where.cluster:
            from sparkwarden.config import schema as config_mod

            config = config_mod.load(args.config)
    except ConfigError as exc:
        return _refuse(exc, EXIT_USAGE)
    try:
        return status.run(where, as_json=args.json, config=config)
    except SparkwardenError as exc:
        return _refuse(exc, EXIT_FAILED)


if __name__ == "__main__":
    raise SystemExit(main())
