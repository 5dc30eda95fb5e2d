"""Postbox's producer/consumer SDK.

    from postbox.framework import App, RetryLater, DeadLetter

    app = App(store_url="file:///var/lib/postbox")

    @app.handler(topic="orders", consumer_group="billing", tags="paid || refund")
    def bill(message):
        ...

    app.start(); app.producer.send("orders", b"...", tags="paid"); app.stop()

Nothing connects at import or decoration time. ``framework.testing.InlineRunner`` drives the
consumers deterministically in tests. ``Service`` (the one background loop) and ``GroupCommit``
(the leader/follower batcher of synchronous rounds) are the engine's, re-exported for the
packages above, which do not import the engine.
"""

from postbox.storage_engine import SendResult
from postbox.storage_engine.contract import BrokerClient
from postbox.storage_engine.formats.message_id import UniqueKeyGenerator
from postbox.storage_engine.group_commit import GroupCommit
from postbox.storage_engine.service import Service

from .allocation import MessageQueue, strategy_by_name
from .app import App
from .consumed_message import ConsumedMessage
from .consumer import Consumer, ConsumerOptions
from .errors import AppStateError, ConfigurationError, FrameworkError, HandlerRegistrationError
from .event_loop import CoroutineCancelledError, EventLoopError, EventLoopThread
from .handlers import ConsumerGroupPlan, HandlerSpec
from .log_format import LogFormat, configure_logging
from .middleware import ConsumeContext, Middleware
from .outcomes import ConsumeOutcome, DeadLetter, OutcomeKind, RetryLater, SkipMessage
from .producer import BatchMessage, Producer, SendStatus
from .send_failures import SendFailure, send_failure
from .transactions import TransactionResult, TransactionState
from .validation import (
    MAX_MESSAGE_SIZE_BYTES,
    InvalidMessageError,
    check_message,
    check_unique_key,
)

__all__ = [
    "MAX_MESSAGE_SIZE_BYTES", "App", "AppStateError", "BatchMessage", "BrokerClient",
    "ConfigurationError",
    "ConsumeContext", "ConsumeOutcome", "ConsumedMessage", "Consumer", "ConsumerGroupPlan",
    "ConsumerOptions", "CoroutineCancelledError", "DeadLetter", "EventLoopError",
    "EventLoopThread", "FrameworkError", "GroupCommit", "HandlerRegistrationError",
    "HandlerSpec", "InvalidMessageError", "LogFormat", "MessageQueue", "Middleware",
    "OutcomeKind", "Producer", "RetryLater", "SendFailure",
    "SendResult", "SendStatus", "Service", "SkipMessage", "TransactionResult",
    "TransactionState", "UniqueKeyGenerator", "check_message",
    "check_unique_key", "configure_logging", "send_failure", "strategy_by_name",
]
