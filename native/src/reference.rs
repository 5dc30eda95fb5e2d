//! Calls into the pure-Python reference for what the native code leaves to it.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

/// Call `function` of `postbox.storage_engine.formats.<module>` with `args`.
pub fn call<'py>(py: Python<'py>, module: &str, function: &str, args: Bound<'py, PyTuple>)
                 -> PyResult<Bound<'py, PyAny>> {
    call_with(py, module, function, args, None)
}

/// `call` with keyword arguments too.
pub fn call_with<'py>(py: Python<'py>, module: &str, function: &str, args: Bound<'py, PyTuple>,
                      kwargs: Option<&Bound<'py, PyDict>>) -> PyResult<Bound<'py, PyAny>> {
    let path = format!("postbox.storage_engine.formats.{module}");
    py.import(path.as_str())?.getattr(function)?.call(args, kwargs)
}
