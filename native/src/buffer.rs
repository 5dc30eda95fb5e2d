//! The one module with `unsafe`: reading a Python object's bytes without copying them.
//!
//! `bytes` are read through PyO3's safe accessor. Any other object exporting the buffer
//! protocol (`bytearray`, `memoryview`, `mmap.mmap`: a mapped commit-log segment) is borrowed
//! with `PyBuffer`, which keeps the export alive (and a `bytearray` from resizing) until it is
//! dropped.
//!
//! Why the slice is sound: the buffer is C-contiguous (checked), its pointer and length come
//! from the exporter and stay valid while `PyBuffer` is held, and the slice does not outlive
//! the closure that holds it. Every caller holds the GIL for the whole closure, so no Python
//! code writes the bytes meanwhile (a segment's writes are mmap slice assignments, under the
//! GIL). A write through the file (`pwrite`, GIL released) could still change mapped pages;
//! the store reads only records below its written position, which such writes leave alone,
//! as the pure-Python reader relies on too. The extension never writes through the slice.

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// Run `body` over the bytes of `obj` (bytes, or any C-contiguous byte buffer).
pub fn with_bytes<R>(obj: &Bound<'_, PyAny>, body: impl FnOnce(&[u8]) -> PyResult<R>)
                     -> PyResult<R> {
    if let Ok(bytes) = obj.downcast::<PyBytes>() {
        return body(bytes.as_bytes());
    }
    let view = PyBuffer::<u8>::get(obj)?;
    if !view.is_c_contiguous() {
        return Err(PyBufferError::new_err("the buffer is not contiguous"));
    }
    // SAFETY: see the module comment; `view` outlives the slice, the GIL is held throughout.
    let slice = unsafe {
        std::slice::from_raw_parts(view.buf_ptr() as *const u8, view.len_bytes())
    };
    body(slice)
}
