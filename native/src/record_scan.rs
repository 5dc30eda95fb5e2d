//! Mirrors the two loops of `formats/record.py` that run over whole runs of records:
//! `scan_records` (recovery's scan of the commit log) and `decode_run` (dispatch's decoding,
//! also recovery's re-dispatch).
//!
//! Both accept exactly the records `_common_layout` accepts (v1 magic, IPv4 hosts, field
//! lengths that add up; the layout test is `record_walk.rs`'s) and stop where the reference
//! stops: `scan_records` at the first record outside that layout or whose checksums fail,
//! `decode_run` also at a topic that is not UTF-8. Arguments of other types, or a `limit` past
//! the end of the buffer (where the reference raises `struct.error`), go to the reference.

use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};

use crate::buffer::with_bytes;
use crate::properties::pairs;
use crate::record::{int_at, long_at};
use crate::record_walk::{common_layout, valid_record};
use crate::reference;

/// `(stop, last)` of the reference's loop over `buf[..limit]` (`last` -1: no record).
fn scan(buf: &[u8], mut offset: usize, limit: usize, check_crc: bool) -> (usize, i64) {
    let mut last: i64 = -1;
    while let Some(record) = valid_record(buf, offset, limit, check_crc) {
        last = offset as i64;
        offset += record.size;
    }
    (offset, last)
}

/// `scan_records(buf, offset, limit, *, check_crc=True)`.
#[pyfunction]
#[pyo3(signature = (buf, offset, limit, *, check_crc = None))]
pub fn scan_records<'py>(buf: &Bound<'py, PyAny>, offset: &Bound<'py, PyAny>,
                         limit: &Bound<'py, PyAny>, check_crc: Option<&Bound<'py, PyAny>>)
                         -> PyResult<Bound<'py, PyAny>> {
    let py = buf.py();
    let check = match check_crc {
        Some(value) => value.is_truthy()?,
        None => true,
    };
    if let (Ok(at), Ok(stop_at)) = (offset.extract::<usize>(), limit.extract::<usize>()) {
        let scanned = with_bytes(buf, |bytes| {
            Ok((stop_at <= bytes.len()).then(|| scan(bytes, at, stop_at, check)))
        })?;
        if let Some(result) = scanned {
            return Ok(result.into_pyobject(py)?.into_any());
        }
    }
    let kwargs = PyDict::new(py);
    kwargs.set_item("check_crc", check)?;
    let args = PyTuple::new(py, [buf, offset, limit])?;
    reference::call_with(py, "record", "scan_records", args, Some(&kwargs))
}

/// `tuple.__new__` and the `DispatchRecord` class: `tuple.__new__(DispatchRecord, fields)`
/// builds a record in C (the class's `_make` would add a Python frame per record).
fn dispatch_record_maker(py: Python<'_>) -> PyResult<(Bound<'_, PyAny>, Bound<'_, PyAny>)> {
    static MAKER: GILOnceCell<(Py<PyAny>, Py<PyAny>)> = GILOnceCell::new();
    let (new, class) = MAKER.get_or_try_init(py, || {
        let class = py.import("postbox.storage_engine.formats.record")?.getattr("DispatchRecord")?;
        let new = py.get_type::<PyTuple>().getattr("__new__")?;
        Ok::<_, PyErr>((new.unbind(), class.unbind()))
    })?;
    Ok((new.bind(py).clone(), class.bind(py).clone()))
}

/// Strings one `decode_run` call makes again and again (property names, the topic), made once.
struct Strings<'py> {
    py: Python<'py>,
    names: Vec<(&'static str, Bound<'py, PyString>)>,
    cached: Vec<(String, Bound<'py, PyString>)>,
    topic: Option<(String, Bound<'py, PyString>)>,
}

const CACHED_NAMES_MAX: usize = 32;
const DISPATCH_NAMES: [&str; 3] = ["TAGS", "KEYS", "UNIQ_KEY"];

impl<'py> Strings<'py> {
    fn new(py: Python<'py>) -> Self {
        let names = DISPATCH_NAMES.iter().map(|name| (*name, PyString::new(py, name))).collect();
        Strings { py, names, cached: Vec::new(), topic: None }
    }

    /// A property name, the same object each time it recurs (up to `CACHED_NAMES_MAX` names).
    fn name(&mut self, text: &str) -> Bound<'py, PyString> {
        let known = self.names.iter().map(|(name, made)| (*name, made))
            .chain(self.cached.iter().map(|(name, made)| (name.as_str(), made)))
            .find(|(name, _)| *name == text);
        if let Some((_, found)) = known {
            return found.clone();
        }
        let made = PyString::new(self.py, text);
        if self.cached.len() < CACHED_NAMES_MAX {
            self.cached.push((text.to_owned(), made.clone()));
        }
        made
    }

    /// The topic, the same object while consecutive records share it.
    fn topic(&mut self, text: &str) -> Bound<'py, PyString> {
        match &self.topic {
            Some((topic, made)) if topic == text => made.clone(),
            _ => {
                let made = PyString::new(self.py, text);
                self.topic = Some((text.to_owned(), made.clone()));
                made
            }
        }
    }
}

/// The TAGS, KEYS and UNIQ_KEY values of one record (None: absent).
type DispatchValues<'py> = [Option<Bound<'py, PyString>>; 3];

/// `decode_properties` of `text` (its pairs: `properties::pairs`), and the TAGS, KEYS and
/// UNIQ_KEY values (later duplicates win, as in the dict).
fn dispatch_properties<'py>(strings: &mut Strings<'py>, text: &str)
                            -> PyResult<(Bound<'py, PyDict>, DispatchValues<'py>)> {
    let result = PyDict::new(strings.py);
    let mut wanted: DispatchValues<'py> = [None, None, None];
    for (name, value) in pairs(text) {
        let value = PyString::new(strings.py, value);
        if let Some(at) = DISPATCH_NAMES.iter().position(|known| *known == name) {
            wanted[at] = Some(value.clone());
        }
        result.set_item(strings.name(name), value)?;
    }
    Ok((result, wanted))
}

/// The `DispatchRecord` fields of a common-layout record at `at`; None when its topic is not
/// UTF-8.
fn dispatch_record<'py>(strings: &mut Strings<'py>, buf: &[u8], at: usize, size: usize,
                        topic: &[u8], props: &[u8]) -> PyResult<Option<Bound<'py, PyTuple>>> {
    let py = strings.py;
    let Ok(topic) = std::str::from_utf8(topic) else { return Ok(None) };
    let topic = strings.topic(topic);
    let (properties, [tags, keys, unique_key]) = match std::str::from_utf8(props) {
        Ok(text) => dispatch_properties(strings, text)?,
        Err(_) => dispatch_properties(strings, &String::from_utf8_lossy(props))?,
    };
    // The header was read by `common_layout`, so these reads are in bounds.
    let header = (int_at(buf, at + 12), long_at(buf, at + 20), long_at(buf, at + 28),
                  int_at(buf, at + 36), long_at(buf, at + 56));
    let (Some(queue_id), Some(queue_offset), Some(log_position), Some(sys_flag),
         Some(store_timestamp_ms)) = header else { return Ok(None) };
    let values: [Bound<'py, PyAny>; 11] = [
        topic.into_any(), queue_id.into_pyobject(py)?.into_any(),
        queue_offset.into_pyobject(py)?.into_any(), log_position.into_pyobject(py)?.into_any(),
        size.into_pyobject(py)?.into_any(), sys_flag.into_pyobject(py)?.into_any(),
        store_timestamp_ms.into_pyobject(py)?.into_any(), optional(py, tags),
        optional(py, keys), optional(py, unique_key), properties.into_any()];
    Ok(Some(PyTuple::new(py, values)?))
}

fn optional<'py>(py: Python<'py>, value: Option<Bound<'py, PyString>>) -> Bound<'py, PyAny> {
    value.map_or_else(|| py.None().into_bound(py), Bound::into_any)
}

/// `decode_run(buf, offset, limit, count_max)`: up to `count_max` `DispatchRecord`s.
#[pyfunction]
pub fn decode_run<'py>(buf: &Bound<'py, PyAny>, offset: &Bound<'py, PyAny>,
                       limit: &Bound<'py, PyAny>, count_max: &Bound<'py, PyAny>)
                       -> PyResult<Bound<'py, PyAny>> {
    let py = buf.py();
    if let (Ok(mut at), Ok(stop_at), Ok(wanted)) = (
        offset.extract::<usize>(), limit.extract::<usize>(), count_max.extract::<i64>()) {
        let (new, class) = dispatch_record_maker(py)?;
        let decoded = with_bytes(buf, |bytes| {
            if stop_at > bytes.len() {
                return Ok(None);
            }
            let records = PyList::empty(py);
            let mut strings = Strings::new(py);
            while (records.len() as i64) < wanted {
                let Some(record) = common_layout(bytes, at, stop_at) else { break };
                let Some(fields) = dispatch_record(&mut strings, bytes, at, record.size,
                                                   &bytes[record.topic.clone()],
                                                   &bytes[record.props.clone()])? else { break };
                records.append(new.call1((&class, fields))?)?;
                at += record.size;
            }
            Ok(Some(records))
        })?;
        if let Some(records) = decoded {
            return Ok(records.into_any());
        }
    }
    let args = PyTuple::new(py, [buf, offset, limit, count_max])?;
    reference::call(py, "record", "decode_run", args)
}
