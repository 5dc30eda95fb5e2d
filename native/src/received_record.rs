//! Mirrors `formats/received_record.py`: records received from outside the store (a pull
//! answer's body), checked before they are read.
//!
//! The native code takes the fast path only (`_common_fields`: v1, IPv4 hosts, fields that add
//! up exactly); every other record goes to the reference's `unpack_received_record`, which
//! decodes it or raises `RecordLayoutError` naming the fault.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

use crate::record::{fields_tuple, int_at, short_at, HEADER_V4_BYTES, MAGIC_V1};
use crate::reference;

const RECORD_FIXED_OVERHEAD_BYTES: usize = 91;
const TOPIC_V1_LENGTH_MAX: usize = 127;

/// `_common_fields`: the record at `position` when it is a v1/IPv4 record that fits before
/// `end` and adds up exactly; None for anything else.
fn common_fields<'py>(py: Python<'py>, buf: &[u8], position: usize, end: usize)
                      -> PyResult<Option<Bound<'py, PyTuple>>> {
    let fast = || -> Option<(usize, usize, usize, usize)> {
        if end > buf.len() || end.checked_sub(position)? < RECORD_FIXED_OVERHEAD_BYTES {
            return None;
        }
        let size = usize::try_from(int_at(buf, position)?).ok()?;
        let body_length = usize::try_from(int_at(buf, position + 84)?).ok()?;
        if int_at(buf, position + 4)? != MAGIC_V1 || int_at(buf, position + 36)? & 0x30 != 0
            || size > end - position {
            return None;
        }
        let topic_at = position.checked_add(HEADER_V4_BYTES)?.checked_add(body_length)?;
        let record_end = position + size;
        if topic_at + 3 > record_end {
            return None;
        }
        let topic_length = buf[topic_at] as usize;
        let props_at = topic_at + 1 + topic_length;
        if topic_length > TOPIC_V1_LENGTH_MAX || props_at + 2 > record_end {
            return None;
        }
        let props_length = short_at(buf, props_at)?;
        if props_length < 0 || props_at + 2 + props_length as usize != record_end {
            return None;
        }
        Some((topic_at, props_at, record_end, size))
    };
    let Some((topic_at, props_at, record_end, _size)) = fast() else { return Ok(None) };
    let tuple = fields_tuple(py, buf, position, HEADER_V4_BYTES,
                             &buf[position + HEADER_V4_BYTES..topic_at],
                             &buf[topic_at + 1..props_at], &buf[props_at + 2..record_end])?;
    Ok(Some(tuple))
}

fn reference_one<'py>(py: Python<'py>, buf: &Bound<'py, PyAny>, position: usize, end: usize)
                      -> PyResult<Bound<'py, PyAny>> {
    let args = (buf, position, end).into_pyobject(py)?;
    reference::call(py, "received_record", "unpack_received_record", args)
}

/// `unpack_received_record(buf, position, end)`.
#[pyfunction]
pub fn unpack_received_record<'py>(buf: &Bound<'py, PyAny>, position: &Bound<'py, PyAny>,
                                   end: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let py = buf.py();
    if let (Ok(bytes), Ok(at), Ok(stop)) =
        (buf.downcast::<PyBytes>(), position.extract::<usize>(), end.extract::<usize>()) {
        if let Some(fields) = common_fields(py, bytes.as_bytes(), at, stop)? {
            return Ok(fields.into_any());
        }
    }
    let args = PyTuple::new(py, [buf, position, end])?;
    reference::call(py, "received_record", "unpack_received_record", args)
}

/// `unpack_received_records(buf, position, end)`: every record from `position` to `end`,
/// back to back, as a list of the reference's tuples.
#[pyfunction]
pub fn unpack_received_records<'py>(buf: &Bound<'py, PyAny>, position: &Bound<'py, PyAny>,
                                    end: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
    let py = buf.py();
    let (Ok(bytes), Ok(mut at), Ok(stop)) =
        (buf.downcast::<PyBytes>(), position.extract::<usize>(), end.extract::<usize>()) else {
        let args = PyTuple::new(py, [buf, position, end])?;
        return Ok(reference::call(py, "received_record", "unpack_received_records", args)?
            .downcast_into::<PyList>()?);
    };
    let data = bytes.as_bytes();
    let records = PyList::empty(py);
    while at < stop {
        let fields = match common_fields(py, data, at, stop)? {
            Some(fields) => fields.into_any(),
            None => reference_one(py, buf, at, stop)?,
        };
        let size: usize = fields.get_item(0)?.extract()?;
        records.append(fields)?;
        at += size;
    }
    Ok(records)
}
