# Admin handlers (mqadmin), one module per subject; HANDLERS is all of them.
"""Handlers of the broker administration requests (protocol.md §2.10, §2.12), run in the
metadata service: :mod:`.topics`, :mod:`.groups` (subscription groups), :mod:`.connections`
(who is connected, calls forwarded to a consumer), :mod:`.offsets` (consume stats, offset
documents, reset, the consumers' own offsets), :mod:`.broker_info` (runtime figures, settings,
statistics items), :mod:`.broker_overview` (every group's consume stats, the system topic
list), :mod:`.ha_status` (replication as the control block shows it), :mod:`.store_maintenance`
(an admin's cleanup now); what they all answer with is :mod:`.answers`. A new subject is a new
module here with its own HANDLERS, added below."""
from pybroker.broker.admin import (broker_info, broker_overview, connections, groups, ha_status,
                                   offsets, store_maintenance, topics)
from pybroker.broker.context import MetadataHandler

__all__ = ["HANDLERS"]

HANDLERS: dict[int, MetadataHandler] = {**topics.HANDLERS, **groups.HANDLERS,
                                        **connections.HANDLERS, **offsets.HANDLERS,
                                        **broker_info.HANDLERS, **broker_overview.HANDLERS,
                                        **ha_status.HANDLERS, **store_maintenance.HANDLERS}
