"""SQL storage: the truth about every response (request, final Response, input items, harmony messages).

Data access is plain sync functions taking a ``Session``; run them with ``Database.run`` (workers) or
``await AsyncDatabase.run`` (the API).
"""

from oss_responses.statuses import ACTIVE_STATUSES, TERMINAL_STATUSES, Status
from oss_responses.storage.api_keys import create_api_key, find_active_key, list_api_keys, revoke_api_key
from oss_responses.storage.db import AsyncDatabase, Database, async_url, sync_url
from oss_responses.storage.event_logs import (
    EventLog,
    archived_last_sequence_number,
    get_event_log,
    purge_expired_event_logs,
    save_event_log,
)
from oss_responses.storage.input_items import (
    find_input_items,
    find_referenced_items,
    find_stored_items,
    list_input_items,
)
from oss_responses.storage.migrations import migrate
from oss_responses.storage.models import ApiKeyRow, Base, EventLogRow, InputItemRow, OutputItemRow, ResponseRow
from oss_responses.storage.records import ApiKeyRecord, Order, ResponseRecord, utcnow
from oss_responses.storage.responses import (
    ConversationLocked,
    InFlightLimitReached,
    active_among,
    cancel_queued,
    count_in_flight,
    delete_response,
    get_chain,
    get_owned_response,
    get_response,
    insert_accepted,
    insert_response,
    list_in_progress_ids,
    list_stale_queued,
    save_turn,
    transition,
    warm_statements,
)

__all__ = [
    "ACTIVE_STATUSES",
    "TERMINAL_STATUSES",
    "ApiKeyRecord",
    "ApiKeyRow",
    "AsyncDatabase",
    "Base",
    "Database",
    "EventLog",
    "archived_last_sequence_number",
    "EventLogRow",
    "InFlightLimitReached",
    "InputItemRow",
    "OutputItemRow",
    "Order",
    "ResponseRecord",
    "ResponseRow",
    "Status",
    "async_url",
    "cancel_queued",
    "count_in_flight",
    "create_api_key",
    "delete_response",
    "find_active_key",
    "find_referenced_items",
    "find_stored_items",
    "get_chain",
    "get_event_log",
    "get_owned_response",
    "get_response",
    "ConversationLocked",
    "insert_accepted",
    "insert_response",
    "list_api_keys",
    "active_among",
    "list_in_progress_ids",
    "list_stale_queued",
    "find_input_items",
    "list_input_items",
    "migrate",
    "purge_expired_event_logs",
    "revoke_api_key",
    "save_event_log",
    "save_turn",
    "sync_url",
    "transition",
    "utcnow",
    "warm_statements",
]
