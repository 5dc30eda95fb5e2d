//! Postbox's optional native engine: the store's record coding and the remoting frame's JSON
//! header in Rust.
//!
//! Each module mirrors the pure-Python module of `postbox.storage_engine.formats` it is named
//! after, function by function; the Python code is the reference and stays the readable one.
//! Every function takes the reference's arguments and returns what the reference returns. For
//! input outside its fast domain (an integer that does not fit its field, a layout the native
//! code does not decode, text that is not UTF-8) a native function calls the reference itself
//! (`reference::call`), so an error is the reference's error, message and type included.
//! `frame.rs` is the exception on both counts: it mirrors `postbox.network.protocol.wire`, whose
//! functions sit above the store, and declines (returns None) where the others call the
//! reference; `wire.py` then runs the reference itself.
//!
//! `unsafe` lives only in `buffer.rs` (borrowing a Python buffer as a byte slice).

use pyo3::prelude::*;

mod buffer;
mod frame;
mod hashing;
mod properties;
mod received_record;
mod record;
mod record_scan;
mod record_walk;
mod reference;

/// The record format generation this build encodes; the Python side refuses a mismatch.
const FORMAT_VERSION: u32 = 1;

#[pymodule]
fn postbox_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("FORMAT_VERSION", FORMAT_VERSION)?;
    m.add_function(wrap_pyfunction!(hashing::masked_crc32, m)?)?;
    m.add_function(wrap_pyfunction!(properties::encode_properties, m)?)?;
    m.add_function(wrap_pyfunction!(properties::decode_properties, m)?)?;
    m.add_function(wrap_pyfunction!(record::encode_record_parts, m)?)?;
    m.add_function(wrap_pyfunction!(record::seal_property_crc, m)?)?;
    m.add_function(wrap_pyfunction!(record::unpack_record, m)?)?;
    m.add_function(wrap_pyfunction!(record_walk::walk_records, m)?)?;
    m.add_function(wrap_pyfunction!(record_scan::scan_records, m)?)?;
    m.add_function(wrap_pyfunction!(record_scan::decode_run, m)?)?;
    m.add_function(wrap_pyfunction!(hashing::java_string_hashcode, m)?)?;
    m.add_function(wrap_pyfunction!(hashing::index_key_hash, m)?)?;
    m.add_function(wrap_pyfunction!(received_record::unpack_received_record, m)?)?;
    m.add_function(wrap_pyfunction!(received_record::unpack_received_records, m)?)?;
    m.add_function(wrap_pyfunction!(frame::decode_json_header, m)?)?;
    m.add_function(wrap_pyfunction!(frame::encode_json_frame, m)?)?;
    Ok(())
}
