//! Mirrors `formats/hashing.py`: the masked CRC32 RocketMQ stores.

use pyo3::prelude::*;

use crate::buffer::with_bytes;

/// CRC32 (zlib/IEEE) with the top bit cleared.
pub fn masked(data: &[u8]) -> u32 {
    crc32fast::hash(data) & 0x7FFF_FFFF
}

/// `masked_crc32(data)`: the reference's function over any byte buffer.
#[pyfunction]
pub fn masked_crc32(data: &Bound<'_, PyAny>) -> PyResult<u32> {
    with_bytes(data, |bytes| Ok(masked(bytes)))
}
