# `pybroker admin` commands about the name servers themselves (mqadmin's names and letters).
"""getNamesrvConfig, updateNamesrvConfig, updateKvConfig, deleteKvConfig. Each goes to every
name server of ``-n`` in turn, as mqadmin does, and fails naming the one that refused."""
from pybroker.admin.broker_commands import Command, invoke
from pybroker.config import parse_properties, properties_line
from pybroker.protocol.codes import RequestCode

__all__ = ["COMMANDS"]


def _name_servers(admin) -> list[str]:
    return list(admin.instance.namesrv_addresses)


async def get_namesrv_config(admin, args, out) -> int:
    configs = {}
    for address in _name_servers(admin):
        response = await invoke(admin, address, RequestCode.GET_NAMESRV_CONFIG)
        configs[address] = parse_properties(bytes(response.body or b"").decode("utf-8"),
                                            source=address)
    if out.json:
        out.document(configs)
        return 0
    for address, values in configs.items():
        out.line(f"============{address}============")
        for key in sorted(values):
            out.line(f"{key:<50}=  {values[key]}")
    return 0


async def update_namesrv_config(admin, args, out) -> int:
    body = properties_line(args.key, args.value).encode() + b"\n"
    servers = _name_servers(admin)
    for address in servers:
        await invoke(admin, address, RequestCode.UPDATE_NAMESRV_CONFIG, body=body)
    out.line(f"update name server config success![{', '.join(servers)}]\n"
             f"{args.key} : {args.value}")
    if out.json:
        out.document({"nameServers": servers, args.key: args.value})
    return 0


async def update_kv_config(admin, args, out) -> int:
    for address in _name_servers(admin):
        await invoke(admin, address, RequestCode.PUT_KV_CONFIG,
                     {"namespace": args.namespace, "key": args.key, "value": args.value})
    out.line("create or update kv config to namespace success.")
    return 0


async def delete_kv_config(admin, args, out) -> int:
    for address in _name_servers(admin):
        await invoke(admin, address, RequestCode.DELETE_KV_CONFIG,
                     {"namespace": args.namespace, "key": args.key})
    out.line("delete kv config from namespace success.")
    return 0


_NAMESPACE_KEY = (("-s", "namespace", {"required": True, "help": "the namespace"}),
                  ("-k", "key", {"required": True, "help": "the key name"}))
COMMANDS: dict[str, Command] = {
    "getNamesrvConfig": (get_namesrv_config, "every name server's effective settings", ()),
    "updateNamesrvConfig": (update_namesrv_config,
                            "change a name server setting at run time (live ones only)", (
                                ("-k", "key", {"required": True, "help": "config key"}),
                                ("-v", "value", {"required": True, "help": "config value"}))),
    "updateKvConfig": (update_kv_config, "create or update a KV config entry", (
        *_NAMESPACE_KEY, ("-v", "value", {"required": True, "help": "the key value"}))),
    "deleteKvConfig": (delete_kv_config, "delete a KV config entry", _NAMESPACE_KEY),
}
