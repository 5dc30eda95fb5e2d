//! Mirrors `formats/record_walk.py`: walk consecutive valid records, collecting the positions
//! of those whose topic starts with a prefix or whose properties hold a mark.
//!
//! The fast path is exactly the records `record.py`'s `_common_layout` accepts (v1 magic, IPv4
//! hosts, field lengths that add up to the size) and, when CRCs are checked, whose checksums
//! pass as `_crc_failure` decides. The walk stops at the first record outside it: whatever
//! `check_record` would call a blank, the end or corruption, and valid records of another
//! layout (v2, IPv6 hosts), which the caller checks itself before walking on. Arguments of
//! other types, or a `limit` past the end of the buffer, go to the reference.
//!
//! `common_layout` and `valid_record` are also the layout and record tests of `record_scan.rs`.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

use crate::buffer::with_bytes;
use crate::hashing::masked;
use crate::record::{int_at, short_at, HEADER_V4_BYTES, MAGIC_V1};
use crate::reference;

const RECORD_FIXED_OVERHEAD_BYTES: usize = 91;
const TOPIC_V1_LENGTH_MAX: usize = 127;
const HOST_V6_BITS: i32 = 0x30;
const PROPERTY_CRC_LENGTH: usize = 20;
const PROPERTY_CRC_PREFIX: &[u8] = b"__CRC32#\x01";
const PAIR_END: u8 = 2;

/// What to collect: the reference's last three arguments.
struct Wanted<'a> {
    topic_prefixes: Vec<&'a [u8]>,
    property_mark: &'a [u8],
    skip_topic: &'a [u8],
}

impl Wanted<'_> {
    fn matches(&self, topic: &[u8], props: &[u8]) -> bool {
        self.topic_prefixes.iter().any(|prefix| topic.starts_with(prefix))
            || (topic != self.skip_topic && contains(props, self.property_mark))
    }
}

/// `needle in haystack` for bytes (an empty needle is in everything).
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    let Some((&first, rest)) = needle.split_first() else { return true };
    let Some(last_start) = haystack.len().checked_sub(needle.len()) else { return false };
    (0..=last_start).any(|at| haystack[at] == first && &haystack[at + 1..at + needle.len()] == rest)
}

/// A common-layout record: its size and the bounds of its body, topic and properties.
pub(crate) struct Layout {
    pub size: usize,
    body_crc: i32,
    body: std::ops::Range<usize>,
    pub topic: std::ops::Range<usize>,
    pub props: std::ops::Range<usize>,
}

/// `check_record`'s early exits and `_common_layout`: the record at `position` when it is a
/// v1/IPv4 record whose fields add up; None for everything else (`buf` holds `limit` bytes).
pub(crate) fn common_layout(buf: &[u8], position: usize, limit: usize) -> Option<Layout> {
    let remaining = limit.checked_sub(position)?;
    if remaining < RECORD_FIXED_OVERHEAD_BYTES {
        return None;  // the end of data, a blank record, or a record the reference decides
    }
    let size = usize::try_from(int_at(buf, position)?).ok()?;
    let body_length = usize::try_from(int_at(buf, position + 84)?).ok()?;
    if int_at(buf, position + 4)? != MAGIC_V1 || int_at(buf, position + 36)? & HOST_V6_BITS != 0
        || size < RECORD_FIXED_OVERHEAD_BYTES || size > remaining {
        return None;
    }
    let body_start = position + HEADER_V4_BYTES;
    let body_end = body_start.checked_add(body_length)?;
    let record_end = position + size;
    if body_end.checked_add(3)? > record_end {
        return None;
    }
    let topic_length = buf[body_end] as usize;
    let props_at = body_end + 1 + topic_length;
    if topic_length > TOPIC_V1_LENGTH_MAX || props_at + 2 > record_end {
        return None;
    }
    let props_length = usize::try_from(short_at(buf, props_at)?).ok()?;
    if props_at + 2 + props_length != record_end {
        return None;
    }
    Some(Layout { size, body_crc: int_at(buf, position + 8)?, body: body_start..body_end,
                  topic: body_end + 1..props_at, props: props_at + 2..record_end })
}

/// `_property_crc_holds`: None when the record carries no property CRC, else whether it holds.
fn property_crc_holds(buf: &[u8], position: usize, end: usize) -> Option<bool> {
    let tail_at = end - PROPERTY_CRC_LENGTH;
    if &buf[tail_at..tail_at + PROPERTY_CRC_PREFIX.len()] != PROPERTY_CRC_PREFIX {
        return None;
    }
    let digits = &buf[end - 11..end - 1];
    if !digits.iter().all(u8::is_ascii_digit) {
        return Some(false);
    }
    let stored = digits.iter().rev()
        .fold(0u64, |value, digit| value * 10 + u64::from(digit - b'0'));
    Some(stored == u64::from(masked(&buf[position..tail_at])))
}

/// `_crc_failure(...) == ""`: whether the record's checksums and framing hold.
fn crc_holds(buf: &[u8], position: usize, record: &Layout) -> bool {
    let end = position + record.size;
    let ends_pair = buf[end - 1] == PAIR_END;
    let record_crc = if record.props.len() >= PROPERTY_CRC_LENGTH {
        property_crc_holds(buf, position, end)
    } else {
        None
    };
    if record_crc == Some(true) && ends_pair {
        return true;
    }
    // The masked CRC is below 2^31, so a negative stored CRC never matches, as in Python.
    i64::from(masked(&buf[record.body.clone()])) == i64::from(record.body_crc)
        && (record.props.is_empty() || ends_pair)
        && record_crc != Some(false)
}

/// The record at `position` when the fast loops accept it: of the common layout and, when
/// `check_crc`, with checksums that hold. None is where a loop stops.
pub(crate) fn valid_record(buf: &[u8], position: usize, limit: usize, check_crc: bool)
                           -> Option<Layout> {
    common_layout(buf, position, limit)
        .filter(|record| !check_crc || crc_holds(buf, position, record))
}

/// The walk itself over `buf[..limit]`: `(collected positions, stop)`.
fn walk(buf: &[u8], mut position: usize, limit: usize, check_crc: bool, wanted: &Wanted<'_>)
        -> (Vec<usize>, usize) {
    let mut found = Vec::new();
    while let Some(record) = valid_record(buf, position, limit, check_crc) {
        if wanted.matches(&buf[record.topic.clone()], &buf[record.props.clone()]) {
            found.push(position);
        }
        position += record.size;
    }
    (found, position)
}

/// `walk_records(buf, position, limit, check_crc, topic_prefixes, property_mark, skip_topic)`.
#[pyfunction]
pub fn walk_records<'py>(buf: &Bound<'py, PyAny>, position: &Bound<'py, PyAny>,
                         limit: &Bound<'py, PyAny>, check_crc: &Bound<'py, PyAny>,
                         topic_prefixes: &Bound<'py, PyAny>, property_mark: &Bound<'py, PyAny>,
                         skip_topic: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let py = buf.py();
    let prefixes: Option<Vec<Bound<'py, PyBytes>>> = topic_prefixes.downcast::<PyTuple>().ok()
        .and_then(|tuple| tuple.iter().map(|item| item.downcast_into::<PyBytes>().ok()).collect());
    if let (Ok(at), Ok(stop_at), Some(prefixes), Ok(mark), Ok(skip)) = (
        position.extract::<usize>(), limit.extract::<usize>(), prefixes,
        property_mark.downcast::<PyBytes>(), skip_topic.downcast::<PyBytes>()) {
        let wanted = Wanted { topic_prefixes: prefixes.iter().map(|p| p.as_bytes()).collect(),
                              property_mark: mark.as_bytes(), skip_topic: skip.as_bytes() };
        let check = check_crc.is_truthy()?;
        let walked = with_bytes(buf, |bytes| {
            Ok((stop_at <= bytes.len()).then(|| walk(bytes, at, stop_at, check, &wanted)))
        })?;
        if let Some((found, stop)) = walked {
            let found = PyList::new(py, found)?;
            return Ok((found, stop).into_pyobject(py)?.into_any());
        }
    }
    let args = PyTuple::new(py, [buf, position, limit, check_crc, topic_prefixes, property_mark,
                                 skip_topic])?;
    reference::call(py, "record_walk", "walk_records", args)
}
