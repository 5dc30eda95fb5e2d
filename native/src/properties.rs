//! Mirrors `formats/properties.py`: the `name\x01value\x02` properties string.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString, PyTuple};

use crate::buffer::with_bytes;
use crate::reference;

/// `encode_properties(mapping)`: every pair whose value is not None, as UTF-8.
///
/// A name that is not `str`, a framing character or text that is not UTF-8 goes to the
/// reference, which raises its error.
#[pyfunction]
pub fn encode_properties<'py>(properties: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let py = properties.py();
    let mut out: Vec<u8> = Vec::new();
    for item in properties.call_method0("items")?.try_iter()? {
        let (name, value): (Bound<'py, PyAny>, Bound<'py, PyAny>) = item?.extract()?;
        if value.is_none() {
            continue;
        }
        let value = value.str()?;
        let Ok(name) = name.downcast::<PyString>() else {
            return reference(properties);
        };
        let (Ok(name), Ok(value)) = (name.to_str(), value.to_str()) else {
            return reference(properties);
        };
        if framed(name) || framed(value) {
            return reference(properties);
        }
        out.extend_from_slice(name.as_bytes());
        out.push(1);
        out.extend_from_slice(value.as_bytes());
        out.push(2);
    }
    Ok(PyBytes::new(py, &out).into_any())
}

fn framed(text: &str) -> bool {
    text.bytes().any(|byte| byte == 1 || byte == 2)
}

fn reference<'py>(properties: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let args = PyTuple::new(properties.py(), [properties])?;
    reference::call(properties.py(), "properties", "encode_properties", args)
}

/// `decode_properties(text)`: RocketMQ's parse rules over bytes (UTF-8, invalid sequences
/// replaced by U+FFFD as Python's `errors="replace"` does) or `str`.
#[pyfunction]
pub fn decode_properties<'py>(text: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
    let py = text.py();
    if let Ok(string) = text.downcast::<PyString>() {
        return match string.to_str() {
            Ok(string) => parse(py, string),
            Err(_) => {  // lone surrogates: the reference's str path
                let args = PyTuple::new(py, [text])?;
                Ok(reference::call(py, "properties", "decode_properties", args)?
                    .downcast_into::<PyDict>()?)
            }
        };
    }
    with_bytes(text, |bytes| parse(py, &String::from_utf8_lossy(bytes)))
}

/// The `(name, value)` pairs of `text` that the reference keeps, in order: a segment ends at
/// U+0002; a pair is kept when its first U+0001 has a non-empty name before it and a non-empty
/// value after it (so the reference's "at least 3 characters" holds too). Later duplicates win
/// when they go into a dict.
pub(crate) fn pairs(text: &str) -> impl Iterator<Item = (&str, &str)> {
    text.split('\u{2}')
        .filter_map(|segment| segment.split_once('\u{1}'))
        .filter(|(name, value)| !name.is_empty() && !value.is_empty())
}

fn parse<'py>(py: Python<'py>, text: &str) -> PyResult<Bound<'py, PyDict>> {
    let result = PyDict::new(py);
    for (name, value) in pairs(text) {
        result.set_item(name, value)?;
    }
    Ok(result)
}
