//! Mirrors `formats/hashing.py`: the masked CRC32 RocketMQ stores and Java's
//! `String.hashCode` (tag codes, key-index hashes).

use pyo3::prelude::*;
use pyo3::types::{PyString, PyTuple};

use crate::buffer::with_bytes;
use crate::reference;

/// CRC32 (zlib/IEEE) with the top bit cleared.
pub fn masked(data: &[u8]) -> u32 {
    crc32fast::hash(data) & 0x7FFF_FFFF
}

/// `masked_crc32(data)`: the reference's function over any byte buffer.
#[pyfunction]
pub fn masked_crc32(data: &Bound<'_, PyAny>) -> PyResult<u32> {
    with_bytes(data, |bytes| Ok(masked(bytes)))
}

/// Java's `String.hashCode` over the UTF-16 code units of `text`.
fn java_hash(text: &str) -> i32 {
    text.encode_utf16()
        .fold(0u32, |hash, unit| hash.wrapping_mul(31).wrapping_add(u32::from(unit))) as i32
}

/// The text of a `str` without lone surrogates (None: the reference takes it).
fn text_of<'a>(text: &'a Bound<'_, PyAny>) -> Option<std::borrow::Cow<'a, str>> {
    text.downcast::<PyString>().ok()?.to_cow().ok()
}

fn reference<'py>(text: &Bound<'py, PyAny>, function: &str) -> PyResult<Bound<'py, PyAny>> {
    let args = PyTuple::new(text.py(), [text])?;
    reference::call(text.py(), "hashing", function, args)
}

/// `java_string_hashcode(text)`: signed 32-bit.
#[pyfunction]
pub fn java_string_hashcode<'py>(text: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    match text_of(text) {
        Some(value) => Ok(java_hash(&value).into_pyobject(text.py())?.into_any()),
        None => reference(text, "java_string_hashcode"),
    }
}

/// `index_key_hash(key_string)`: `abs(hashCode)`, `Integer.MIN_VALUE` mapped to 0.
#[pyfunction]
pub fn index_key_hash<'py>(key_string: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    match text_of(key_string) {
        Some(value) => {
            let hash = java_hash(&value);
            let non_negative = if hash == i32::MIN { 0 } else { hash.abs() };
            Ok(non_negative.into_pyobject(key_string.py())?.into_any())
        }
        None => reference(key_string, "index_key_hash"),
    }
}
