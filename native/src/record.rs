//! Mirrors `formats/record.py`: encoding one commit-log record, sealing its property CRC,
//! unpacking one record into the reference's flat tuple.
//!
//! Layout (v1, IPv4 hosts; each IPv6 host adds 12 bytes, v2 one more topic-length byte):
//!
//! ```text
//!  0 TOTALSIZE i32   20 QUEUEOFFSET i64   40 BORNTIMESTAMP i64   72 RECONSUMETIMES i32
//!  4 MAGICCODE i32   28 PHYSICALOFFSET    48 BORNHOST 8|20       76 PREPARED TX POS i64
//!  8 BODYCRC i32     36 SYSFLAG i32       56 STORETIMESTAMP i64  84 BODYLENGTH i32
//! 12 QUEUEID i32                          64 STOREHOST 8|20      88 BODY, TOPICLENGTH (1|2),
//! 16 FLAG i32                                                       TOPIC, PROPSLENGTH i16, PROPS
//! ```

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use crate::buffer::with_bytes;
use crate::hashing::masked;
use crate::reference;

pub const MAGIC_V1: i32 = -626_843_481;
pub const MAGIC_V2: i32 = -626_843_477;
pub const HEADER_V4_BYTES: usize = 88;
const PROPERTIES_SIZE_MAX_BYTES: usize = 32_767;
const TOPIC_V1_LENGTH_MAX: usize = 127;
const BORNHOST_V6: i32 = 0x10;
const STOREHOST_V6: i32 = 0x20;
const PROPERTY_CRC_LENGTH: usize = 20;

/// Big-endian writer over the output record.
struct Writer<'a> {
    out: &'a mut [u8],
    at: usize,
}

impl Writer<'_> {
    fn put(&mut self, bytes: &[u8]) {
        self.out[self.at..self.at + bytes.len()].copy_from_slice(bytes);
        self.at += bytes.len();
    }
    fn int(&mut self, value: i32) {
        self.put(&value.to_be_bytes());
    }
    fn long(&mut self, value: i64) {
        self.put(&value.to_be_bytes());
    }
}

/// The integer fields of a record, extracted; None when one does not fit its slot.
struct Numbers {
    queue_id: i32,
    flag: i32,
    queue_offset: i64,
    log_position: i64,
    sys_flag: i64,
    born_timestamp_ms: i64,
    store_timestamp_ms: i64,
    reconsume_count: i32,
    prepared_transaction_position: i64,
    body_crc: i32,
}

/// `encode_record_parts(...)`: the reference's positional encoder, byte for byte.
///
/// Anything the reference rejects (properties over 32 767 bytes, a host that is not 8 or 20
/// bytes, an integer that does not fit its field, a topic too long for its length field) or
/// arguments that are not `bytes` go to the reference, which raises or encodes.
#[pyfunction]
#[pyo3(signature = (topic_bytes, is_v2, body, properties, queue_id, flag, queue_offset,
                    log_position, sys_flag, born_timestamp_ms, born_host, store_timestamp_ms,
                    store_host, reconsume_count, prepared_transaction_position, body_crc))]
#[allow(clippy::too_many_arguments)]
pub fn encode_record_parts<'py>(
    topic_bytes: &Bound<'py, PyAny>, is_v2: &Bound<'py, PyAny>, body: &Bound<'py, PyAny>,
    properties: &Bound<'py, PyAny>, queue_id: &Bound<'py, PyAny>, flag: &Bound<'py, PyAny>,
    queue_offset: &Bound<'py, PyAny>, log_position: &Bound<'py, PyAny>,
    sys_flag: &Bound<'py, PyAny>, born_timestamp_ms: &Bound<'py, PyAny>,
    born_host: &Bound<'py, PyAny>, store_timestamp_ms: &Bound<'py, PyAny>,
    store_host: &Bound<'py, PyAny>, reconsume_count: &Bound<'py, PyAny>,
    prepared_transaction_position: &Bound<'py, PyAny>, body_crc: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = topic_bytes.py();
    let args = [topic_bytes, is_v2, body, properties, queue_id, flag, queue_offset, log_position,
                sys_flag, born_timestamp_ms, born_host, store_timestamp_ms, store_host,
                reconsume_count, prepared_transaction_position, body_crc];
    let numbers = (|| Some(Numbers {
        queue_id: queue_id.extract().ok()?,
        flag: flag.extract().ok()?,
        queue_offset: queue_offset.extract().ok()?,
        log_position: log_position.extract().ok()?,
        sys_flag: sys_flag.extract().ok()?,
        born_timestamp_ms: born_timestamp_ms.extract().ok()?,
        store_timestamp_ms: store_timestamp_ms.extract().ok()?,
        reconsume_count: reconsume_count.extract().ok()?,
        prepared_transaction_position: prepared_transaction_position.extract().ok()?,
        body_crc: body_crc.extract().ok()?,
    }))();
    let parts = (
        topic_bytes.downcast::<PyBytes>(), body.downcast::<PyBytes>(),
        properties.downcast::<PyBytes>(), born_host.downcast::<PyBytes>(),
        store_host.downcast::<PyBytes>());
    if let (Some(numbers), (Ok(topic), Ok(body), Ok(props), Ok(born), Ok(store))) =
        (numbers, parts) {
        let encoded = encode(py, topic.as_bytes(), is_v2.is_truthy()?, body.as_bytes(),
                             props.as_bytes(), born.as_bytes(), store.as_bytes(), &numbers)?;
        if let Some(record) = encoded {
            return Ok(record.into_any());
        }
    }
    let args = PyTuple::new(py, args)?;
    reference::call(py, "record", "encode_record_parts", args)
}

/// The record, or None when the reference must decide (it raises for every such case).
#[allow(clippy::too_many_arguments)]
fn encode<'py>(py: Python<'py>, topic: &[u8], is_v2: bool, body: &[u8], props: &[u8],
               born_host: &[u8], store_host: &[u8], n: &Numbers)
               -> PyResult<Option<Bound<'py, PyBytes>>> {
    let host_ok = |host: &[u8]| host.len() == 8 || host.len() == 20;
    let topic_fits = if is_v2 { topic.len() <= 32_767 } else { topic.len() <= TOPIC_V1_LENGTH_MAX };
    if props.len() > PROPERTIES_SIZE_MAX_BYTES || !host_ok(born_host) || !host_ok(store_host)
        || !topic_fits {
        return Ok(None);
    }
    let sys_flag = (n.sys_flag & !0x30)
        | if born_host.len() == 20 { BORNHOST_V6 as i64 } else { 0 }
        | if store_host.len() == 20 { STOREHOST_V6 as i64 } else { 0 };
    let (Ok(sys_flag), Ok(body_length)) = (i32::try_from(sys_flag), i32::try_from(body.len()))
    else {
        return Ok(None);
    };
    let header = 72 + born_host.len() + store_host.len();  // 88, 100 or 112
    let total = header + body.len() + if is_v2 { 2 } else { 1 } + topic.len() + 2 + props.len();
    let Ok(total_field) = i32::try_from(total) else {
        return Ok(None);
    };
    let record = PyBytes::new_with(py, total, |out| {
        let mut w = Writer { out, at: 0 };
        w.int(total_field);
        w.int(if is_v2 { MAGIC_V2 } else { MAGIC_V1 });
        w.int(n.body_crc);
        w.int(n.queue_id);
        w.int(n.flag);
        w.long(n.queue_offset);
        w.long(n.log_position);
        w.int(sys_flag);
        w.long(n.born_timestamp_ms);
        w.put(born_host);
        w.long(n.store_timestamp_ms);
        w.put(store_host);
        w.int(n.reconsume_count);
        w.long(n.prepared_transaction_position);
        w.int(body_length);
        w.put(body);
        if is_v2 {
            w.put(&(topic.len() as u16).to_be_bytes());
        } else {
            w.put(&[topic.len() as u8]);
        }
        w.put(topic);
        w.put(&(props.len() as u16).to_be_bytes());
        w.put(props);
        debug_assert_eq!(w.at, total);
        Ok(())
    })?;
    Ok(Some(record))
}

/// `seal_property_crc(record)`: fill the last 20 bytes' digits with the masked CRC32 of every
/// byte before them, least-significant digit first, right-padded with '0'.
#[pyfunction]
pub fn seal_property_crc<'py>(record: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let py = record.py();
    let Ok(bytes) = record.downcast::<PyBytes>() else {
        let args = PyTuple::new(py, [record])?;
        return reference::call(py, "record", "seal_property_crc", args);
    };
    let data = bytes.as_bytes();
    let crc = masked(&data[..data.len().saturating_sub(PROPERTY_CRC_LENGTH)]);
    let mut digits: Vec<u8> = crc.to_string().bytes().rev().collect();
    digits.resize(10, b'0');
    let head = &data[..data.len().saturating_sub(11)];
    let sealed = PyBytes::new_with(py, head.len() + 11, |out| {
        out[..head.len()].copy_from_slice(head);
        out[head.len()..head.len() + 10].copy_from_slice(&digits);
        out[head.len() + 10] = 2;
        Ok(())
    })?;
    Ok(sealed.into_any())
}

// ---------------------------------------------------------------------------- decoding

/// Bounds-checked big-endian reads; None past the end.
pub fn int_at(buf: &[u8], at: usize) -> Option<i32> {
    Some(i32::from_be_bytes(buf.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

pub fn long_at(buf: &[u8], at: usize) -> Option<i64> {
    Some(i64::from_be_bytes(buf.get(at..at.checked_add(8)?)?.try_into().ok()?))
}

pub fn short_at(buf: &[u8], at: usize) -> Option<i16> {
    Some(i16::from_be_bytes(buf.get(at..at.checked_add(2)?)?.try_into().ok()?))
}

/// `(header bytes, body, topic, properties)`: where a record's fields lie.
pub type FieldBounds = (usize, std::ops::Range<usize>, std::ops::Range<usize>,
                        std::ops::Range<usize>);

/// Field bounds of the record at `position`, or None for anything the reference must handle
/// itself (negative lengths, anything past the end of `buf`: there it raises `struct.error`
/// or returns truncated fields).
pub fn layout(buf: &[u8], position: usize) -> Option<FieldBounds> {
    if buf.len() < position.checked_add(HEADER_V4_BYTES)? {
        return None;
    }
    let sys_flag = int_at(buf, position + 36)?;
    let header = 72 + if sys_flag & BORNHOST_V6 != 0 { 20 } else { 8 }
        + if sys_flag & STOREHOST_V6 != 0 { 20 } else { 8 };
    let body_length = usize::try_from(int_at(buf, position + header - 4)?).ok()?;
    let body_start = position + header;
    let body_end = body_start.checked_add(body_length)?;
    let (topic_start, topic_length) = if int_at(buf, position + 4)? == MAGIC_V2 {
        (body_end + 2, usize::try_from(short_at(buf, body_end)?).ok()?)
    } else {
        (body_end + 1, usize::try_from(*buf.get(body_end)? as i8).ok()?)
    };
    let props_at = topic_start + topic_length;
    let props_length = usize::try_from(short_at(buf, props_at)?).ok()?;
    let props_end = props_at + 2 + props_length;
    if props_end > buf.len() {
        return None;
    }
    Some((header, body_start..body_end, topic_start..props_at, props_at + 2..props_end))
}

/// The reference's flat tuple from a header of `header` bytes at `position` and three fields.
pub fn fields_tuple<'py>(py: Python<'py>, buf: &[u8], position: usize, header: usize,
                         body: &[u8], topic: &[u8], props: &[u8])
                         -> PyResult<Bound<'py, PyTuple>> {
    let p = position;
    let sys_flag = int_at(buf, p + 36).unwrap_or(0);
    let born_length = if sys_flag & BORNHOST_V6 != 0 { 20 } else { 8 };
    let store_at = p + 56 + born_length;
    let after_store = p + header - 16;
    debug_assert_eq!(header, 72 + born_length + after_store - store_at);
    let int = |at: usize| int_at(buf, at).unwrap_or(0);
    let long = |at: usize| long_at(buf, at).unwrap_or(0);
    let items: [Bound<'py, PyAny>; 17] = [
        int(p).into_pyobject(py)?.into_any(),
        int(p + 4).into_pyobject(py)?.into_any(),
        int(p + 8).into_pyobject(py)?.into_any(),
        int(p + 12).into_pyobject(py)?.into_any(),
        int(p + 16).into_pyobject(py)?.into_any(),
        long(p + 20).into_pyobject(py)?.into_any(),
        long(p + 28).into_pyobject(py)?.into_any(),
        int(p + 36).into_pyobject(py)?.into_any(),
        long(p + 40).into_pyobject(py)?.into_any(),
        PyBytes::new(py, &buf[p + 48..p + 48 + born_length]).into_any(),
        long(store_at - 8).into_pyobject(py)?.into_any(),
        PyBytes::new(py, &buf[store_at..after_store]).into_any(),
        int(after_store).into_pyobject(py)?.into_any(),
        long(after_store + 4).into_pyobject(py)?.into_any(),
        PyBytes::new(py, body).into_any(),
        PyBytes::new(py, topic).into_any(),
        PyBytes::new(py, props).into_any(),
    ];
    PyTuple::new(py, items)
}

/// `unpack_record(buf, position)`: the whole record as the reference's flat tuple.
#[pyfunction]
pub fn unpack_record<'py>(buf: &Bound<'py, PyAny>, position: &Bound<'py, PyAny>)
                          -> PyResult<Bound<'py, PyAny>> {
    let py = buf.py();
    let decoded = with_bytes(buf, |bytes| {
        let Some(at) = position.extract::<usize>().ok() else { return Ok(None) };
        let Some((header, body, topic, props)) = layout(bytes, at) else { return Ok(None) };
        fields_tuple(py, bytes, at, header, &bytes[body], &bytes[topic], &bytes[props]).map(Some)
    })?;
    match decoded {
        Some(fields) => Ok(fields.into_any()),
        None => reference::call(py, "record", "unpack_record", PyTuple::new(py, [buf, position])?),
    }
}
