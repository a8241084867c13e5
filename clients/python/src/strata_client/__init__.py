"""Client of `strata serve`, the HTTP API of strata's session runtime.

``StrataClient`` (blocking) and ``AsyncStrataClient`` (asyncio) prepare provider requests for a
session, record the model's replies and tool results, and add and search long-term memory::

    from strata_client import StrataClient

    with StrataClient("http://127.0.0.1:8177", token_file=".strata/serve.token") as strata:
        turn = strata.prepare_turn("s1", "What does notes.txt say about deploys?")
        message = anthropic.Anthropic().messages.create(**turn.request)

Every call that changes a session carries an ``Idempotency-Key`` and is retried under the same
key on passing refusals and broken connections. Every refusal raises a ``StrataError`` subclass
carrying the HTTP status, the server's stable error code and a message that says what to do.
"""

from ._async import AsyncStrataClient
from ._errors import (
    ERROR_CLASSES,
    AgentUnavailableError,
    BodyTooLargeError,
    BudgetError,
    IdempotencyKeyReusedError,
    InternalServerError,
    InvalidRequestError,
    MessageTooLargeError,
    MethodNotAllowedError,
    NotFoundError,
    OverloadedError,
    RequestTimeoutError,
    ServerTimeoutError,
    SessionConflictError,
    StoreUnavailableError,
    StrataError,
    TransportError,
    UnauthorizedError,
    UnknownSessionError,
)
from ._operations import (
    DEFAULT_BASE_URL,
    DEFAULT_MAX_RETRIES,
    DEFAULT_TIMEOUT,
    OPERATIONS,
    TOKEN_ENV,
    Operation,
    __version__,
    read_token_file,
)
from ._sync import StrataClient
from ._types import (
    AgentInfo,
    AnnouncedTool,
    MemoryHit,
    PreparedTurn,
    RecordedReply,
    ReloadInfo,
    Role,
    SessionHistory,
    SessionTurn,
    Status,
    ToolCall,
)

__all__ = [
    "DEFAULT_BASE_URL",
    "DEFAULT_MAX_RETRIES",
    "DEFAULT_TIMEOUT",
    "ERROR_CLASSES",
    "OPERATIONS",
    "TOKEN_ENV",
    "AgentInfo",
    "AgentUnavailableError",
    "AnnouncedTool",
    "AsyncStrataClient",
    "BodyTooLargeError",
    "BudgetError",
    "IdempotencyKeyReusedError",
    "InternalServerError",
    "InvalidRequestError",
    "MemoryHit",
    "MessageTooLargeError",
    "MethodNotAllowedError",
    "NotFoundError",
    "Operation",
    "OverloadedError",
    "PreparedTurn",
    "RecordedReply",
    "ReloadInfo",
    "RequestTimeoutError",
    "Role",
    "ServerTimeoutError",
    "SessionConflictError",
    "SessionHistory",
    "SessionTurn",
    "Status",
    "StoreUnavailableError",
    "StrataClient",
    "StrataError",
    "ToolCall",
    "TransportError",
    "UnauthorizedError",
    "UnknownSessionError",
    "__version__",
    "read_token_file",
]
