//! Calls into the pure-Python reference for what the native code leaves to it.

use pyo3::prelude::*;
use pyo3::types::PyTuple;

/// Call `function` of `postbox.storage_engine.formats.<module>` with `args`.
pub fn call<'py>(py: Python<'py>, module: &str, function: &str, args: Bound<'py, PyTuple>)
                 -> PyResult<Bound<'py, PyAny>> {
    let path = format!("postbox.storage_engine.formats.{module}");
    py.import(path.as_str())?.getattr(function)?.call1(args)
}
