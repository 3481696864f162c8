# `pybroker admin <command>`: mqadmin's everyday commands with its option letters.
"""Wiring of ``pybroker admin``: one argparse sub-command per mqadmin command, each taking
``-n namesrvAddr`` (default 127.0.0.1:9876, or ``NAMESRV_ADDR`` as mqadmin reads it) and
``--json``. The commands talk RocketMQ's protocol, so they work against pybroker and Java
brokers alike (docs/admin.md)."""
import argparse
import asyncio
import sys

import yaml

from pybroker.acl.signature import Credentials
from pybroker.admin import (broker_commands, cleanup_commands, consumer_commands,
                            controller_commands, export_commands, group_commands,
                            message_commands, namesrv_commands, offset_commands, probe_commands,
                            replication_commands, topic_commands)
from pybroker.admin.output import Output
from pybroker.client.admin import Admin
from pybroker.client.errors import ClientError
from pybroker.config import TlsConfig, default_namesrv_addr
from pybroker.remoting.tls import client_context
from pybroker.tasks import within

__all__ = ["add_admin_arguments", "run_admin", "COMMANDS"]

COMMANDS = {**broker_commands.COMMANDS, **group_commands.COMMANDS,
            **controller_commands.COMMANDS, **topic_commands.COMMANDS,
            **offset_commands.COMMANDS, **message_commands.COMMANDS,
            **consumer_commands.COMMANDS, **namesrv_commands.COMMANDS,
            **export_commands.COMMANDS, **probe_commands.COMMANDS,
            **replication_commands.COMMANDS, **cleanup_commands.COMMANDS}
ADMIN_TIMEOUT_S = 120
# Commands that repeat until stopped (as mqadmin's): no overall time limit, each request
# still waits at most the client's request timeout.
REPEATING = frozenset({"clusterRT", "haStatus"})


def add_admin_arguments(parser: argparse.ArgumentParser) -> None:
    """Add every admin command as a sub-command of ``parser``."""
    commands = parser.add_subparsers(title="commands", dest="admin_command", metavar="COMMAND")
    for name, (_, help_text, options) in COMMANDS.items():
        command = commands.add_parser(name, help=help_text, description=help_text)
        command.add_argument("-n", "--namesrv-addr", dest="namesrv_addr",
                             default=default_namesrv_addr(),
                             help="name servers 'ip:port;ip:port'")
        command.add_argument("--json", action="store_true", help="one JSON document")
        command.add_argument("--acl-file", metavar="FILE", help="sign requests with the "
                             "accessKey/secretKey of FILE (YAML, as mqadmin's conf/tools.yml)")
        command.add_argument("--tls", action="store_true",
                             help="TLS to name servers and brokers (server not verified, as "
                                  "Java's default client)")
        for letter, dest, extra in options:
            command.add_argument(letter, dest=dest, **extra)


def run_admin(args: argparse.Namespace) -> int:
    """Run the chosen admin command; 0 on success, 1 on a broker or connection error."""
    if not getattr(args, "admin_command", None):
        sys.stderr.write("pybroker admin: choose a command (pybroker admin -h)\n")
        return 2
    function = COMMANDS[args.admin_command][0]
    out = Output(args.json)

    async def run() -> int:
        async with Admin(args.namesrv_addr, **_security_options(args)) as admin:
            timeout = None if args.admin_command in REPEATING else ADMIN_TIMEOUT_S
            return await within(function(admin, args, out), timeout)
    try:
        return asyncio.run(run())
    except BrokenPipeError:
        raise           # the reader of stdout left (| head): pybroker.cli ends quietly
    except KeyboardInterrupt:
        return 130      # Ctrl-C ends a repeating command (clusterRT, haStatus -i)
    except (ClientError, OSError, TimeoutError, ValueError, yaml.YAMLError) as error:
        sys.stderr.write(f"pybroker admin {args.admin_command}: {error}\n")
        return 1


def _security_options(args: argparse.Namespace) -> dict:
    """ClientInstance options for --acl-file (credentials) and --tls."""
    options: dict = {}
    if getattr(args, "acl_file", None):
        with open(args.acl_file, encoding="utf-8") as stream:
            data = yaml.safe_load(stream) or {}
        access_key, secret_key = data.get("accessKey"), data.get("secretKey")
        if not access_key or not secret_key:
            raise ValueError(f"{args.acl_file}: needs accessKey and secretKey")
        options["credentials"] = Credentials(str(access_key), str(secret_key))
    if getattr(args, "tls", False):
        options["ssl_context"] = client_context(TlsConfig())
    return options
