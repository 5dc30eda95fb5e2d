"""Byte layouts of the RocketMQ-compatible store, in one place. Pure: no I/O.

Everything that defines bytes on disk lives in this package, once: commit-log records (v1/v2,
IPv4/IPv6 hosts), the blank end-of-file record, the properties codec, masked CRC32, Java
``String.hashCode``, the 20-byte consume-queue unit, the key-index header/slot/entry, the
checkpoint page, offsetMsgId and UNIQ_KEY. The engine, the CLI and the Spark jobs all decode
through it. Facts come from ``reference/rocketmq-store.md`` §0–§5 and ``vectors/``; all integers
are big-endian. Modules: ``constants``, ``hashing``, ``properties``, ``record``, ``message_view``,
``message_id``, ``message_rules``, ``queue_unit``, ``index_layout``, ``checkpoint_layout``.
"""

from .checkpoint_layout import (
    CHECKPOINT,
    CHECKPOINT_FILE_SIZE_BYTES,
    CheckpointState,
    decode_checkpoint,
    encode_checkpoint,
)
from .constants import *  # noqa: F403  (the constants are part of the format surface)
from .constants import __all__ as _constant_names
from .directory import *  # noqa: F403  (the store's file and system-topic names)
from .directory import __all__ as _directory_names
from .fastjson import NESTING_DEPTH_MAX as NESTING_DEPTH_MAX
from .fastjson import decode_config_json as decode_config_json
from .fastjson import encode_config_json as encode_config_json
from .hashing import index_key, index_key_hash, java_string_hashcode, masked_crc32, tag_hash
from .index_layout import (
    INDEX_ENTRY,
    INDEX_ENTRY_SIZE_BYTES,
    INDEX_HEADER,
    INDEX_HEADER_SIZE_BYTES,
    INDEX_QUERY_RESULT_MAX,
    INDEX_SLOT,
    entry_position,
    index_file_name,
    index_file_size,
    slot_position,
)
from .message_id import (
    UniqueKeyGenerator,
    UniqueKeyParts,
    decode_offset_msg_id,
    decode_unique_key,
    encode_offset_msg_id,
)
from .message_rules import (
    EMPTY_BODY_PROBLEM,
    PROPERTY_ARGUMENTS,
    SYSTEM_PROPERTY_NAMES,
    empty_body_problem,
    reserved_property_problem,
)
from .message_view import MessageView
from .properties import decode_properties, encode_properties, java_hashmap_order, split_keys
from .queue_unit import (
    CONSUME_QUEUE_UNIT,
    CONSUME_QUEUE_UNIT_SIZE_BYTES,
    EMPTY_UNIT,
    FILLER_UNIT,
    FILLER_UNIT_SIZE,
    is_ext_address,
    segment_file_name,
)
from .record import (
    PROPERTY_CRC_LENGTH,
    PROPERTY_CRC_PLACEHOLDER,
    RECORD_FIXED_OVERHEAD_BYTES,
    DispatchRecord,
    HostAddress,
    RecordCheck,
    RecordFields,
    RecordKind,
    check_record,
    decode_for_dispatch,
    decode_host,
    decode_run,
    encode_blank_record,
    encode_host,
    encode_record,
    encode_record_parts,
    record_size,
    scan_records,
    seal_property_crc,
    takes_queue_offset,
    topic_and_properties,
    unpack_record,
    uses_v2,
    utf16_length,
)

__all__ = [
    *_constant_names,
    *_directory_names,
    "CHECKPOINT",
    "CHECKPOINT_FILE_SIZE_BYTES",
    "CONSUME_QUEUE_UNIT",
    "CONSUME_QUEUE_UNIT_SIZE_BYTES",
    "CheckpointState",
    "DispatchRecord",
    "EMPTY_BODY_PROBLEM",
    "EMPTY_UNIT",
    "FILLER_UNIT",
    "FILLER_UNIT_SIZE",
    "HostAddress",
    "INDEX_ENTRY",
    "INDEX_ENTRY_SIZE_BYTES",
    "INDEX_HEADER",
    "INDEX_HEADER_SIZE_BYTES",
    "INDEX_QUERY_RESULT_MAX",
    "INDEX_SLOT",
    "MessageView",
    "PROPERTY_ARGUMENTS",
    "PROPERTY_CRC_LENGTH",
    "PROPERTY_CRC_PLACEHOLDER",
    "RECORD_FIXED_OVERHEAD_BYTES",
    "RecordCheck",
    "RecordFields",
    "RecordKind",
    "SYSTEM_PROPERTY_NAMES",
    "UniqueKeyGenerator",
    "UniqueKeyParts",
    "check_record",
    "decode_checkpoint",
    "decode_for_dispatch",
    "decode_host",
    "decode_run",
    "decode_offset_msg_id",
    "decode_properties",
    "decode_unique_key",
    "empty_body_problem",
    "encode_blank_record",
    "encode_checkpoint",
    "encode_host",
    "encode_offset_msg_id",
    "encode_properties",
    "encode_record",
    "encode_record_parts",
    "entry_position",
    "index_file_name",
    "index_file_size",
    "index_key",
    "index_key_hash",
    "is_ext_address",
    "java_hashmap_order",
    "reserved_property_problem",
    "java_string_hashcode",
    "masked_crc32",
    "record_size",
    "scan_records",
    "seal_property_crc",
    "segment_file_name",
    "slot_position",
    "split_keys",
    "tag_hash",
    "takes_queue_offset",
    "topic_and_properties",
    "unpack_record",
    "uses_v2",
    "utf16_length",
]
