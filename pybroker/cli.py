# pybroker's command line: `pybroker <subcommand>`; the one module that writes to stdout.
"""The ``pybroker`` command.

Each subcommand is one function decorated with :func:`subcommand`: it adds its arguments to
the parser it is given and returns the function that runs it (``run(args) -> exit code``).
"""
import argparse
import logging
import os
import shlex
import sys
from typing import Callable

import pybroker
from pybroker import config as config_module
from pybroker import logs
from pybroker.errors import ConfigError

Runner = Callable[[argparse.Namespace], int]
_SUBCOMMANDS: list[tuple[str, str, Callable[[argparse.ArgumentParser], Runner]]] = []


def subcommand(name: str, help_text: str):
    """Register ``add(parser) -> runner`` as ``pybroker <name>``."""
    def register(add: Callable[[argparse.ArgumentParser], Runner]):
        _SUBCOMMANDS.append((name, help_text, add))
        return add
    return register


def _invalid_configuration(command: str, path: str | None, error: ConfigError) -> None:
    """One line per problem; a single problem on the line that names the file."""
    problems = str(error).splitlines()
    head = f"pybroker {command}: invalid configuration in {path or 'defaults'}:"
    separator = " " if len(problems) == 1 else "\n"
    sys.stderr.write(head + separator + "\n".join(problems) + "\n")


@subcommand("config", "load and validate a configuration file, print the effective settings")
def _add_config(parser: argparse.ArgumentParser) -> Runner:
    parser.add_argument("-c", "--config-file", metavar="FILE",
                        help="broker.conf (Java Properties syntax); default: built-in defaults")
    parser.add_argument("--namesrv", action="store_true",
                        help="read the file as a NameServer's configuration")
    parser.add_argument("--all", action="store_true",
                        help="print every setting, not only the important ones")
    parser.add_argument("--strict", action="store_true",
                        help="refuse unknown keys, as strictConfig=true makes the broker do")
    parser.epilog = ("exit status: 0 valid, 1 invalid (or unknown keys under --strict), "
                     "2 valid but with unknown keys, which a broker would ignore (RocketMQ "
                     "keys pybroker does not use are warned about, exit 0)")
    return _run_config


def _run_config(args: argparse.Namespace) -> int:
    load = config_module.load_namesrv_config if args.namesrv \
        else config_module.load_broker_config
    try:
        loaded = load(args.config_file, strict=True if args.strict else None)
    except ConfigError as error:
        _invalid_configuration("config", args.config_file, error)
        return 1
    except OSError as error:
        sys.stderr.write(f"pybroker config: cannot read {args.config_file}: {error}\n")
        return 1
    settings = config_module.all_settings(loaded) if args.all \
        else config_module.important_settings(loaded)
    sys.stdout.write("".join(config_module.properties_line(key, value) + "\n"
                             for key, value in settings))
    if not args.namesrv:
        # Settings honesty: what loads but changes nothing (Properties comments).
        sys.stdout.write("".join(line + "\n" for line in config_module.not_acted_on_lines()))
    misspelt = set(loaded.unknown_keys) - config_module.JAVA_KEYS_NOT_USED
    return 2 if misspelt else 0


@subcommand("admin", "mqadmin's everyday commands (clusterList, brokerStatus, topicStatus, "
                     "consumerProgress, statsAll, ...) against pybroker or Java brokers")
def _add_admin(parser: argparse.ArgumentParser) -> Runner:
    from pybroker.admin.cli import add_admin_arguments, run_admin
    add_admin_arguments(parser)
    return run_admin


@subcommand("prof", "flush and page-cache profiler: record a running broker, report, "
                    "compare recordings, top (docs/profiling.md)")
def _add_prof(parser: argparse.ArgumentParser) -> Runner:
    from pybroker.prof.cli import add_prof_arguments, run_prof
    add_prof_arguments(parser)
    return run_prof


@subcommand("store", "operator's store commands: verify [--repair-derived] STORE_PATH "
                    "(every record's CRC and layout, every consume-queue unit)")
def _add_store(parser: argparse.ArgumentParser) -> Runner:
    actions = parser.add_subparsers(title="actions", dest="action", metavar="ACTION",
                                    required=True)
    verify = actions.add_parser(
        "verify", help="verify a stopped broker's store; exit 0 clean, 1 damage found (each "
                       "damaged range listed), 2 not verified (in use, not a store)")
    verify.add_argument("store_path", metavar="STORE_PATH", help="storePathRootDir")
    verify.add_argument("--repair-derived", action="store_true",
                        help="then rebuild the consume queues and index files from the "
                             "CommitLog")
    verify.add_argument("-c", "--config-file", metavar="FILE",
                        help="broker.conf for file sizes and index settings (default: file "
                             "sizes read from the store, Java's index settings)")
    return _run_store


def _run_store(args: argparse.Namespace) -> int:
    from pybroker.store.verify import settings_for, verify_store
    base = None
    if args.config_file:
        args.namesrv_addr = None
        loaded = _load_broker("store verify", args)
        if loaded is None:
            return 2
        base = loaded.store
    settings = settings_for(os.path.abspath(args.store_path), base)

    def say(line: str) -> None:
        sys.stdout.write(line + "\n")
    return verify_store(settings, args.repair_derived, say)


@subcommand("namesrv", "run a NameServer (brokers register here, clients look routes up)")
def _add_namesrv(parser: argparse.ArgumentParser) -> Runner:
    parser.add_argument("-c", "--config-file", metavar="FILE",
                        help="namesrv.conf (listenPort, kvConfigPath, ...); default: built-in")
    parser.add_argument("--listen-address", metavar="IP", default="127.0.0.1",
                        help="address to bind (default 127.0.0.1; 0.0.0.0 for every interface)")
    return _run_namesrv


def _run_namesrv(args: argparse.Namespace) -> int:
    from pybroker.errors import StartupError, StoreCorruptError
    from pybroker.namesrv.server import run_namesrv   # only this subcommand needs the server
    from pybroker.proc.preflight import check_namesrv_start
    try:
        loaded = config_module.load_namesrv_config(args.config_file)
    except ConfigError as error:
        _invalid_configuration("namesrv", args.config_file, error)
        return 1
    except OSError as error:
        sys.stderr.write(f"pybroker namesrv: cannot read {args.config_file}: {error}\n")
        return 1
    try:
        check_namesrv_start(loaded, args.listen_address)
        return run_namesrv(loaded, args.listen_address)
    except (OSError, StoreCorruptError, ConfigError, StartupError) as error:
        # port in use, unusable kvConfigPath, TLS files that do not load
        sys.stderr.write(f"pybroker namesrv: cannot start: {error}\n")
        return 1


def _load_broker(command: str, args: argparse.Namespace, defaults: dict | None = None):
    """Load broker.conf plus ``-n``; None (after a message on stderr) when it is invalid.
    ``defaults``: values for keys the file does not set."""
    overrides = {"namesrvAddr": args.namesrv_addr} if args.namesrv_addr else {}
    try:
        if defaults:
            given = config_module.load_properties(args.config_file) if args.config_file else {}
            overrides.update({key: value for key, value in defaults.items()
                              if key not in given})
        return config_module.load_broker_config(args.config_file, overrides or None)
    except ConfigError as error:
        _invalid_configuration(command, args.config_file, error)
    except OSError as error:
        sys.stderr.write(f"pybroker {command}: cannot read {args.config_file}: {error}\n")
    return None


def _broker_arguments(parser: argparse.ArgumentParser, namesrv_default: str | None) -> None:
    parser.add_argument("-c", "--config-file", metavar="FILE",
                        help="broker.conf with Java RocketMQ's property names")
    parser.add_argument("-n", "--namesrv-addr", metavar="ADDR", default=namesrv_default,
                        help="NameServer addresses, 'ip:port;ip:port' (overrides namesrvAddr)")


@subcommand("broker", "run a broker (supervisor, remoting workers, appender, dispatcher, "
                      "flusher)")
def _add_broker(parser: argparse.ArgumentParser) -> Runner:
    _broker_arguments(parser, None)
    return _run_broker


def _run_broker(args: argparse.Namespace) -> int:
    from pybroker.proc.supervisor import run_broker   # only these subcommands fork workers
    loaded = _load_broker("broker", args)
    if loaded is None:
        return 1
    _log_important(loaded)
    return run_broker(loaded)


@subcommand("standalone", "run a NameServer and a broker under one supervisor (embedded "
                          "defaults: NameServer 127.0.0.1:9876, broker 10911)")
def _add_standalone(parser: argparse.ArgumentParser) -> Runner:
    _broker_arguments(parser, None)
    parser.add_argument("--namesrv-port", type=int, default=None,
                        help=f"port of the embedded NameServer (default: the port of the "
                             f"first 127.x address in broker.conf's namesrvAddr, else "
                             f"{_STANDALONE_NAMESRV_PORT}); the broker then registers with "
                             f"127.0.0.1:PORT")
    return _run_standalone


_STANDALONE_NAMESRV_PORT = 9876
_LOOPBACK_PREFIX = "127."


def _loopback_port(namesrv_addr: str | None) -> int | None:
    """The port of the first 127.x entry of an ``ip:port;ip:port`` list, or None."""
    for entry in (namesrv_addr or "").split(";"):
        host, _, port = entry.strip().rpartition(":")
        if (host.startswith(_LOOPBACK_PREFIX) or host == "localhost") and port.isdigit():
            return int(port)
    return None


def standalone_namesrv(namesrv_addr_option: str | None, namesrv_port_option: int | None,
                       file_namesrv_addr: str | None) -> tuple[int, str]:
    """(embedded NameServer port, namesrvAddr the broker registers with) of ``standalone``.

    ``-n`` wins for the registration list; ``--namesrv-port`` (when given) sets the embedded
    port and, without ``-n``, the list; otherwise broker.conf's namesrvAddr is honoured, its
    first loopback entry naming the embedded port, and the embedded NameServer is added to the
    list when the file names none on this machine.
    """
    file_port = _loopback_port(file_namesrv_addr)
    if namesrv_port_option is not None:
        port = namesrv_port_option
    elif file_port is not None:
        port = file_port
    else:
        port = _STANDALONE_NAMESRV_PORT
    embedded = f"127.0.0.1:{port}"
    if namesrv_addr_option:
        return port, namesrv_addr_option
    if namesrv_port_option is not None or not file_namesrv_addr:
        return port, embedded
    if file_port is None:
        return port, f"{embedded};{file_namesrv_addr}"
    return port, file_namesrv_addr


def _run_standalone(args: argparse.Namespace) -> int:
    from pybroker.proc.standalone import run_standalone
    file_namesrv_addr = None
    if args.config_file:
        try:
            file_namesrv_addr = config_module.load_properties(args.config_file).get("namesrvAddr")
        except (OSError, ConfigError):
            pass    # _load_broker reports the unreadable file
    port, args.namesrv_addr = standalone_namesrv(args.namesrv_addr, args.namesrv_port,
                                                 file_namesrv_addr)
    # A standalone broker is for clients on this machine: announce the loopback address unless
    # broker.conf names another one; it serves RocketMQ 5's gRPC SDKs too (grpcServerPort).
    loaded = _load_broker("standalone", args, {"brokerIP1": "127.0.0.1", "brokerIP2": "127.0.0.1",
                                               "grpcWorkers": "1"})
    if loaded is None:
        return 1
    _log_important(loaded)
    banner = serving_banner(loaded, port)

    def on_serving() -> None:
        sys.stdout.write(banner)
        sys.stdout.flush()
    return run_standalone(loaded, port, on_serving)


def send_test_message_command(namesrv_addr: str, topic: str = "TopicTest") -> str:
    """A shell command line that sends one message with pybroker.client and prints the
    outcome (this interpreter, so the installed pybroker is the one that runs)."""
    code = (f'from pybroker.client import Message; from pybroker.client.sync import Producer; '
            f'p = Producer("quickstart_producer", "{namesrv_addr}"); p.start(); '
            f'r = p.send(Message("{topic}", b"hello pybroker")); '
            f'print(r.status.name, r.msg_id, r.message_queue); p.shutdown()')
    return f"{shlex.quote(sys.executable)} -c {shlex.quote(code)}"


def serving_banner(loaded, namesrv_port: int) -> str:
    """What ``pybroker standalone`` prints on stdout once it serves (logs go to stderr)."""
    namesrv_addr = f"127.0.0.1:{namesrv_port}"
    bind = loaded.remoting.bind_address
    broker = loaded.broker
    return (f"pybroker {pybroker.__version__} standalone is serving (pid {os.getpid()})\n"
            f"  NameServer  {namesrv_addr} (listening on 127.0.0.1 only)\n"
            f"  broker      {loaded.derived.broker_addr} (listening on {bind}:"
            f"{broker.listen_port} and {bind}:{loaded.derived.fast_listen_port}; "
            f"bindAddress= in broker.conf binds one address)\n"
            f"{_grpc_banner_line(loaded)}"
            f"  store       {loaded.store.store_path_root_dir}\n"
            f"{_metrics_line(broker)}"
            f"  logs        stderr\n"
            f"  stop        Ctrl-C, or kill -TERM {os.getpid()}\n"
            f"Send a test message:\n  {send_test_message_command(namesrv_addr)}\n")


def _grpc_banner_line(loaded) -> str:
    grpc = loaded.grpc
    if grpc.grpc_workers == 0:
        return ""
    return (f"  gRPC        {loaded.broker.broker_ip1}:{grpc.grpc_server_port} (RocketMQ 5 SDKs; "
            f"listening on {loaded.remoting.bind_address}:{grpc.grpc_server_port})\n")


def _metrics_line(broker) -> str:
    """The banner's metrics line: the Prometheus endpoint's URL, or how to turn it on."""
    if broker.metrics_exporter_type != "PROM":
        return "  metrics     off (metricsExporterType=PROM in broker.conf serves Prometheus)\n"
    host = broker.metrics_prom_exporter_host or broker.broker_ip1
    return f"  metrics     http://{host}:{broker.metrics_prom_exporter_port}/metrics\n"


def _log_important(loaded) -> None:
    log = logging.getLogger("pybroker.config")
    for key, value in config_module.important_settings(loaded):
        log.info("%s=%s", key, value)


def build_parser() -> argparse.ArgumentParser:
    """The ``pybroker`` argument parser with every registered subcommand."""
    parser = argparse.ArgumentParser(
        prog="pybroker", description="A message broker speaking Apache RocketMQ's protocol.")
    parser.add_argument("--version", action="version",
                        version=f"pybroker {pybroker.__version__}")
    parser.add_argument("--debug", action="store_true", help=_DEBUG_HELP)
    commands = parser.add_subparsers(title="subcommands", dest="subcommand", metavar="COMMAND")
    for name, help_text, add in _SUBCOMMANDS:
        command = commands.add_parser(name, help=help_text, description=help_text)
        # Also after the subcommand (pybroker standalone --debug); SUPPRESS keeps the
        # top-level value when it is not given here.
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                             help=_DEBUG_HELP)
        command.set_defaults(run=add(command))
    return parser


_DEBUG_HELP = "log at DEBUG level and print the traceback of an unexpected error"


# The name each subcommand's process carries in log lines (pybroker/logs.py).
_PROCESS_NAMES = {"broker": "supervisor", "standalone": "supervisor", "namesrv": "namesrv"}


def main(argv: list[str] | None = None) -> int:
    """Run ``pybroker`` with ``argv`` (default: ``sys.argv[1:]``); returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "run", None) is None:
        parser.print_help(sys.stderr)
        return 2
    # Warnings (e.g. unknown broker.conf keys) reach the user on stderr, stdout stays data.
    logs.configure(level=logging.DEBUG if args.debug else logging.INFO,
                   name=_PROCESS_NAMES.get(args.subcommand, "main"))
    try:
        return args.run(args)
    except BrokenPipeError:
        # `pybroker admin statsAll | head`: the reader has gone, which is no error of ours.
        # Python would complain again when it flushes stdout at exit; point it elsewhere.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        return 130
    except Exception as error:     # noqa: BLE001 - the one place that reports the unexpected
        if args.debug:
            raise
        first_line = (str(error).splitlines() or [""])[0]
        sys.stderr.write(f"pybroker {args.subcommand}: {type(error).__name__}: {first_line} "
                         f"(run with --debug for the traceback)\n")
        return 1
