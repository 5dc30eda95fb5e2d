//! Mirrors the JSON header form of `network/protocol/wire.py`: a frame's header decoded, a
//! whole frame encoded.
//!
//! Unlike the record codecs, these two functions may *decline*: they return `None` for
//! anything outside their fast domain, and `wire.py` then runs its reference, which returns the
//! same command or raises the protocol's own error. The fast domain is what every peer sends:
//!
//! * decoding: a UTF-8 JSON object whose `code`, `opaque`, `flag` and `version` are int32
//!   literals, `language` a string, `remark` a string or null, `extFields` an object of
//!   strings (at most `max_ext_fields` after duplicates collapse, the last one winning as in a
//!   Python dict), and any other member a string, a number or a literal. Anything else (a
//!   nested value elsewhere, a number where an int is due, an escape that leaves a lone
//!   surrogate, text after the object, bytes that are not UTF-8) declines, so every error, and
//!   every unusual success, is the reference's.
//! * encoding: exact `str`s for `language`, the `extFields` names and values and `remark`,
//!   ints (not bools) within i64, a `bytes` body, a header within 24 bits. The bytes are those
//!   of Python's compact `json` encoder with `ensure_ascii=False`, member for member.

use std::borrow::Cow;

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyInt, PyString};

use crate::buffer::with_bytes;

/// `(code, opaque, flag, ext_fields, remark, language, version)`, as `RemotingCommand` takes
/// them (the body aside).
type Header<'py> = (i32, i32, i32, Bound<'py, PyDict>, Option<String>, String, i32);

const HEADER_LENGTH_MAX: usize = 0xFF_FFFF;
const SERIALIZE_JSON: u32 = 0;

/// `decode_json_header(header, max_ext_fields)`: the header's fields, or None (declined).
#[pyfunction]
pub fn decode_json_header<'py>(header: &Bound<'py, PyAny>, max_ext_fields: usize)
                               -> PyResult<Option<Header<'py>>> {
    let py = header.py();
    with_bytes(header, |bytes| {
        let Ok(text) = std::str::from_utf8(bytes) else {
            return Ok(None);
        };
        let mut parser = Parser { text, at: 0 };
        parser.header(py, max_ext_fields)
    })
}

/// The members of a header object as the reference reads them (defaults included).
struct Members<'py> {
    ints: [i32; 4], // code, opaque, flag, version
    language: Option<String>,
    remark: Option<String>,
    ext_fields: Option<Bound<'py, PyDict>>,
}

struct Parser<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Parser<'a> {
    fn header<'py>(&mut self, py: Python<'py>, max_ext_fields: usize)
                   -> PyResult<Option<Header<'py>>> {
        let mut members = Members { ints: [0; 4], language: None, remark: None,
                                    ext_fields: None };
        if !self.eat(b'{') {
            return Ok(None);
        }
        if !self.eat(b'}') {
            loop {
                let Some(name) = self.string() else { return Ok(None) };
                if !self.eat(b':') || !self.member(py, &name, &mut members)? {
                    return Ok(None);
                }
                if self.eat(b',') {
                    continue;
                }
                if !self.eat(b'}') {
                    return Ok(None);
                }
                break;
            }
        }
        self.skip_space();
        if self.at != self.text.len() {
            return Ok(None); // the reference's "Extra data"
        }
        let ext_fields = match members.ext_fields {
            Some(fields) if fields.len() > max_ext_fields => return Ok(None),
            Some(fields) => fields,
            None => PyDict::new(py),
        };
        let [code, opaque, flag, version] = members.ints;
        Ok(Some((code, opaque, flag, ext_fields, members.remark,
                 members.language.unwrap_or_else(|| "OTHER".to_owned()), version)))
    }

    /// Read the value of member `name` into `members`; false declines.
    fn member<'py>(&mut self, py: Python<'py>, name: &str, members: &mut Members<'py>)
                   -> PyResult<bool> {
        let slot = match name {
            "code" => Some(0),
            "opaque" => Some(1),
            "flag" => Some(2),
            "version" => Some(3),
            _ => None,
        };
        if let Some(slot) = slot {
            let Some(value) = self.int32() else { return Ok(false) };
            members.ints[slot] = value;
            return Ok(true);
        }
        match name {
            "language" => {
                let Some(value) = self.string() else { return Ok(false) };
                members.language = Some(value.into_owned());
            }
            "remark" => {
                if self.literal("null") {
                    members.remark = None;
                } else {
                    let Some(value) = self.string() else { return Ok(false) };
                    members.remark = Some(value.into_owned());
                }
            }
            "extFields" => {
                let Some(fields) = self.string_object(py)? else { return Ok(false) };
                members.ext_fields = Some(fields);
            }
            _ => return Ok(self.skip_scalar()),
        }
        Ok(true)
    }

    /// An object whose values are all strings, as a dict; None declines.
    fn string_object<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        if !self.eat(b'{') {
            return Ok(None);
        }
        let fields = PyDict::new(py);
        if self.eat(b'}') {
            return Ok(Some(fields));
        }
        loop {
            let Some(name) = self.string() else { return Ok(None) };
            if !self.eat(b':') {
                return Ok(None);
            }
            let Some(value) = self.string() else { return Ok(None) };
            fields.set_item(PyString::new(py, &name), PyString::new(py, &value))?;
            if self.eat(b',') {
                continue;
            }
            return Ok(if self.eat(b'}') { Some(fields) } else { None });
        }
    }

    fn skip_space(&mut self) {
        let bytes = self.text.as_bytes();
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = bytes.get(self.at) {
            self.at += 1;
        }
    }

    /// After white space, consume `byte` if it is next.
    fn eat(&mut self, byte: u8) -> bool {
        self.skip_space();
        if self.text.as_bytes().get(self.at) == Some(&byte) {
            self.at += 1;
            return true;
        }
        false
    }

    fn literal(&mut self, word: &str) -> bool {
        self.skip_space();
        if self.text[self.at..].starts_with(word) {
            self.at += word.len();
            return true;
        }
        false
    }

    /// A string, a JSON number or `true`/`false`/`null`, skipped; false declines.
    fn skip_scalar(&mut self) -> bool {
        self.skip_space();
        match self.text.as_bytes().get(self.at) {
            Some(b'"') => self.string().is_some(),
            Some(b'-' | b'0'..=b'9') => self.number().is_some(),
            _ => self.literal("true") || self.literal("false") || self.literal("null"),
        }
    }

    /// A JSON number (strict grammar); its integer part's text when it has no fraction or
    /// exponent, else "" (still a number).
    fn number(&mut self) -> Option<&'a str> {
        self.skip_space();
        let bytes = self.text.as_bytes();
        let start = self.at;
        if bytes.get(self.at) == Some(&b'-') {
            self.at += 1;
        }
        let digits = self.digits();
        if digits == 0 || (digits > 1 && bytes[self.at - digits] == b'0') {
            return None;
        }
        let end = self.at;
        let mut integral = true;
        if bytes.get(self.at) == Some(&b'.') {
            self.at += 1;
            if self.digits() == 0 {
                return None;
            }
            integral = false;
        }
        if let Some(b'e' | b'E') = bytes.get(self.at) {
            self.at += 1;
            if let Some(b'+' | b'-') = bytes.get(self.at) {
                self.at += 1;
            }
            if self.digits() == 0 {
                return None;
            }
            integral = false;
        }
        Some(if integral { &self.text[start..end] } else { "" })
    }

    fn digits(&mut self) -> usize {
        let start = self.at;
        while let Some(b'0'..=b'9') = self.text.as_bytes().get(self.at) {
            self.at += 1;
        }
        self.at - start
    }

    fn int32(&mut self) -> Option<i32> {
        let text = self.number()?;
        if text.is_empty() || text.len() > 11 {
            return None;
        }
        text.parse::<i64>().ok().and_then(|value| i32::try_from(value).ok())
    }

    /// A string, unescaped; None declines (no string here, a control character, a bad escape,
    /// an escape that leaves a lone surrogate).
    fn string(&mut self) -> Option<Cow<'a, str>> {
        if !self.eat(b'"') {
            return None;
        }
        let bytes = self.text.as_bytes();
        let mut owned: Option<String> = None;
        let mut run = self.at;
        loop {
            match *bytes.get(self.at)? {
                b'"' => {
                    let tail = &self.text[run..self.at];
                    self.at += 1;
                    return Some(match owned {
                        None => Cow::Borrowed(tail),
                        Some(mut text) => {
                            text.push_str(tail);
                            Cow::Owned(text)
                        }
                    });
                }
                b'\\' => {
                    let text = owned.get_or_insert_with(String::new);
                    text.push_str(&self.text[run..self.at]);
                    self.at += 1;
                    let escaped = self.escape()?;
                    text.push(escaped);
                    run = self.at;
                }
                0..=0x1f => return None, // strict JSON: the reference refuses it
                _ => self.at += 1,
            }
        }
    }

    /// The character of the escape after a backslash (a surrogate pair joined).
    fn escape(&mut self) -> Option<char> {
        let byte = *self.text.as_bytes().get(self.at)?;
        self.at += 1;
        Some(match byte {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let unit = self.hex4()?;
                if !(0xD800..0xDC00).contains(&unit) {
                    return char::from_u32(unit); // a lone low surrogate is None: declined
                }
                if self.text.as_bytes().get(self.at..self.at + 2)? != b"\\u" {
                    return None;
                }
                self.at += 2;
                let low = self.hex4()?;
                if !(0xDC00..0xE000).contains(&low) {
                    return None;
                }
                char::from_u32(0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00))?
            }
            _ => return None,
        })
    }

    fn hex4(&mut self) -> Option<u32> {
        let digits = self.text.as_bytes().get(self.at..self.at + 4)?;
        let mut value = 0;
        for &digit in digits {
            value = value * 16 + char::from(digit).to_digit(16)?;
        }
        self.at += 4;
        Some(value)
    }
}

/// `encode_json_frame(code, flag, language, opaque, version, ext_fields, remark, body)`: the
/// whole frame, length word included, or None (declined).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn encode_json_frame<'py>(code: &Bound<'py, PyAny>, flag: &Bound<'py, PyAny>,
                              language: &Bound<'py, PyAny>, opaque: &Bound<'py, PyAny>,
                              version: &Bound<'py, PyAny>, ext_fields: &Bound<'py, PyAny>,
                              remark: &Bound<'py, PyAny>, body: &Bound<'py, PyAny>)
                              -> PyResult<Option<Bound<'py, PyBytes>>> {
    let py = code.py();
    let Some(header) = json_header(code, flag, language, opaque, version, ext_fields, remark)
    else {
        return Ok(None);
    };
    let Ok(body) = body.downcast::<PyBytes>() else { return Ok(None) };
    let body = body.as_bytes();
    let length = 4 + header.len() + body.len();
    if header.len() > HEADER_LENGTH_MAX || length > i32::MAX as usize {
        return Ok(None);
    }
    let word = (SERIALIZE_JSON << 24) | header.len() as u32;
    let frame = PyBytes::new_with(py, 4 + length, |out| {
        out[..4].copy_from_slice(&(length as u32).to_be_bytes());
        out[4..8].copy_from_slice(&word.to_be_bytes());
        out[8..8 + header.len()].copy_from_slice(&header);
        out[8 + header.len()..].copy_from_slice(body);
        Ok(())
    })?;
    Ok(Some(frame))
}

/// The JSON header the reference writes, members in its order; None declines.
fn json_header(code: &Bound<'_, PyAny>, flag: &Bound<'_, PyAny>, language: &Bound<'_, PyAny>,
               opaque: &Bound<'_, PyAny>, version: &Bound<'_, PyAny>,
               ext_fields: &Bound<'_, PyAny>, remark: &Bound<'_, PyAny>) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(b"{\"code\":");
    write_int(&mut out, code)?;
    out.extend_from_slice(b",\"flag\":");
    write_int(&mut out, flag)?;
    out.extend_from_slice(b",\"language\":");
    write_string(&mut out, language)?;
    out.extend_from_slice(b",\"opaque\":");
    write_int(&mut out, opaque)?;
    out.extend_from_slice(b",\"serializeTypeCurrentRPC\":\"JSON\",\"version\":");
    write_int(&mut out, version)?;
    let fields = ext_fields.downcast_exact::<PyDict>().ok()?;
    if !fields.is_empty() {
        out.extend_from_slice(b",\"extFields\":{");
        for (index, (name, value)) in fields.iter().enumerate() {
            if index > 0 {
                out.push(b',');
            }
            write_string(&mut out, &name)?;
            out.push(b':');
            write_string(&mut out, &value)?;
        }
        out.push(b'}');
    }
    if !remark.is_none() {
        out.extend_from_slice(b",\"remark\":");
        write_string(&mut out, remark)?;
    }
    out.push(b'}');
    Some(out)
}

fn write_int(out: &mut Vec<u8>, value: &Bound<'_, PyAny>) -> Option<()> {
    if value.is_instance_of::<PyBool>() || !value.is_instance_of::<PyInt>() {
        return None;
    }
    let number: i64 = value.extract().ok()?;
    out.extend_from_slice(number.to_string().as_bytes());
    Some(())
}

/// `value` (an exact `str` that is valid UTF-8) as the reference's JSON string.
fn write_string(out: &mut Vec<u8>, value: &Bound<'_, PyAny>) -> Option<()> {
    let text = value.downcast_exact::<PyString>().ok()?.to_str().ok()?;
    out.push(b'"');
    let mut run = 0;
    for (at, byte) in text.bytes().enumerate() {
        let short = match byte {
            b'"' => b'"',
            b'\\' => b'\\',
            b'\n' => b'n',
            b'\r' => b'r',
            b'\t' => b't',
            0x08 => b'b',
            0x0c => b'f',
            0..=0x1f => 0,
            _ => continue,
        };
        out.extend_from_slice(&text.as_bytes()[run..at]);
        run = at + 1;
        if short != 0 {
            out.extend_from_slice(&[b'\\', short]);
        } else {
            out.extend_from_slice(format!("\\u{byte:04x}").as_bytes());
        }
    }
    out.extend_from_slice(&text.as_bytes()[run..]);
    out.push(b'"');
    Some(())
}
