//! The Python objects the decoder makes: strings, ids as hex, attribute values (each nesting
//! level counted against the interpreter's recursion limit) and instances of the model's
//! slotted dataclasses.

use std::collections::HashMap;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyList, PyString, PyType};

use super::read::{any_member_of, bad, each, Ranges, R, V};
use super::{MAX_KEYS, MAX_NESTING, TRACE_ID_BYTES};
use crate::fields::num;
use crate::varint;

/// A string field as a Python str, decoded (and checked) by Python's UTF-8 decoder alone:
/// a second check in Rust cost 4 % of a GenAI span's decode (perf).
#[inline]
pub(crate) fn py_text<'py>(py: Python<'py>, data: &[u8], r: R) -> PyResult<Bound<'py, PyString>> {
    let raw = &data[r.0..r.1];
    // SAFETY: the pointer and length describe `raw`, alive for the call; the GIL is held.
    unsafe {
        let made =
            ffi::PyUnicode_FromStringAndSize(raw.as_ptr().cast(), raw.len() as ffi::Py_ssize_t);
        Ok(Bound::from_owned_ptr_or_err(py, made)?.cast_into_unchecked())
    }
}

/// FNV-1a, for the per-request key table (short keys; SipHash was 3 % of a decode).
#[derive(Default)]
pub(crate) struct Fnv(u64);

impl std::hash::Hasher for Fnv {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf29ce484222325
        } else {
            self.0
        };
        for &b in bytes {
            h = (h ^ b as u64).wrapping_mul(0x100000001b3);
        }
        self.0 = h;
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

pub(crate) type FnvBuild = std::hash::BuildHasherDefault<Fnv>;

pub(crate) const HEX: &[u8; 16] = b"0123456789abcdef";

/// An id (at most 16 bytes: checked before) as lowercase hex.
pub(crate) fn hex<'py>(py: Python<'py>, raw: &[u8]) -> Bound<'py, PyString> {
    let mut buf = [0u8; 2 * TRACE_ID_BYTES];
    let n = raw.len().min(TRACE_ID_BYTES);
    for (i, b) in raw[..n].iter().enumerate() {
        buf[2 * i] = HEX[(b >> 4) as usize];
        buf[2 * i + 1] = HEX[(b & 15) as usize];
    }
    PyString::new(py, std::str::from_utf8(&buf[..2 * n]).unwrap_or(""))
}

/// `otlp_common.id_length_problem` for raw bytes.
pub(crate) fn id_problem(what: &str, nbytes: usize, got: &[u8]) -> String {
    let shown: String = if got.is_empty() {
        "empty".into()
    } else {
        got.iter()
            .flat_map(|b| {
                [
                    HEX[(b >> 4) as usize] as char,
                    HEX[(b & 15) as usize] as char,
                ]
            })
            .collect()
    };
    format!(
        "{what} must be {nbytes} bytes, got {} bytes ({shown})",
        got.len()
    )
}

/// One level deeper into an attribute value: two nested messages (the array or kvlist and
/// the values in it), each counted against Python's recursion limit as a frame of the
/// recursive walk this replaces was.
pub(crate) struct Nesting(u8);

impl Nesting {
    pub(crate) fn enter(py: Python<'_>) -> PyResult<Nesting> {
        let mut level = Nesting(0);
        while level.0 < 2 {
            // SAFETY: the GIL is held (we have `py`); every successful enter is matched by
            // a leave in `drop`.
            let failed = unsafe {
                ffi::Py_EnterRecursiveCall(c" while decoding an attribute value".as_ptr())
            };
            if failed != 0 {
                return Err(PyErr::fetch(py));
            }
            level.0 += 1;
        }
        Ok(level)
    }
}

impl Drop for Nesting {
    fn drop(&mut self) {
        for _ in 0..self.0 {
            // SAFETY: paired with a successful Py_EnterRecursiveCall in `enter`.
            unsafe { ffi::Py_LeaveRecursiveCall() }
        }
    }
}

const fn len_tag(field: u32) -> u8 {
    ((field << 3) | 2) as u8
}

/// The payload of a length-delimited field at `pos` when its one-byte tag is `tag`.
#[inline]
fn len_field(data: &[u8], pos: usize, end: usize, tag: u8) -> Option<R> {
    if pos >= end || data[pos] != tag {
        return None;
    }
    let (len, p) = varint::read(data, pos + 1, end).ok()?;
    let e = p.checked_add(usize::try_from(len).ok()?)?;
    (e <= end).then_some((p, e))
}

/// A KeyValue that is exactly its key and then its value, each once: (key, value).
#[inline]
fn one_key_one_value(data: &[u8], r: R) -> Option<(R, R)> {
    let key = len_field(data, r.0, r.1, len_tag(num::KEY_VALUE_KEY))?;
    let value = len_field(data, key.1, r.1, len_tag(num::KEY_VALUE_VALUE))?;
    (value.1 == r.1).then_some((key, value))
}

/// An AnyValue that is exactly one `string_value`: the string.
#[inline]
fn only_string(data: &[u8], r: R) -> Option<R> {
    let text = len_field(data, r.0, r.1, len_tag(num::ANY_VALUE_STRING_VALUE))?;
    (text.1 == r.1).then_some(text)
}

/// `model.Span`'s, `Event`'s and `LogRecord`'s fields, in order: the values are handed over
/// in this order, and `SlotMaker::new` refuses a class whose fields are not these.
pub(crate) const SPAN_FIELDS: [&str; 15] = [
    "trace_id",
    "span_id",
    "parent_id",
    "name",
    "start_ns",
    "end_ns",
    "kind",
    "status_code",
    "status_message",
    "attributes",
    "events",
    "resource",
    "scope_name",
    "scope_version",
    "source",
];
pub(crate) const EVENT_FIELDS: [&str; 3] = ["name", "time_ns", "attributes"];
pub(crate) const LOG_FIELDS: [&str; 6] = [
    "trace_id",
    "span_id",
    "event_name",
    "time_ns",
    "body",
    "attributes",
];

/// Makes instances of a slotted dataclass by setting its slots, not by calling it: the
/// generated `__init__` is a Python frame with fifteen stores, a tenth of a GenAI span's
/// decode and a quarter of a plain one's (bench/bench_grading_decode.py). Its `__init__`
/// does nothing else (no `__post_init__`, all fields given), which `new` checks.
pub(crate) struct SlotMaker {
    pub(crate) cls: Py<PyType>,
    pub(crate) alloc: ffi::allocfunc,
    pub(crate) setters: Vec<(Py<PyAny>, ffi::descrsetfunc)>,
}

impl SlotMaker {
    pub(crate) fn new(cls: &Bound<'_, PyAny>, names: &[&str]) -> PyResult<Self> {
        let refuse = |why: &str| {
            PyErr::new::<pyo3::exceptions::PyTypeError, _>(format!(
                "{cls}: {why} (the wire core builds it slot by slot)"
            ))
        };
        let ty = cls.cast::<PyType>().map_err(|_| refuse("not a class"))?;
        let declared: Vec<String> = ty
            .getattr("__dataclass_fields__")
            .map_err(|_| refuse("not a dataclass"))?
            .try_iter()?
            .map(|k| k?.extract::<String>())
            .collect::<PyResult<_>>()?;
        if declared != names {
            return Err(refuse(&format!("fields {declared:?}, expected {names:?}")));
        }
        if ty.hasattr("__post_init__")? {
            return Err(refuse("it has a __post_init__"));
        }
        // SAFETY: PyType_GetSlot on a live type object, with the GIL held; a non-null
        // tp_alloc slot is an allocfunc.
        let alloc = unsafe {
            let slot = ffi::PyType_GetSlot(ty.as_type_ptr(), ffi::Py_tp_alloc);
            if slot.is_null() {
                return Err(refuse("no tp_alloc"));
            }
            std::mem::transmute::<*mut std::ffi::c_void, ffi::allocfunc>(slot)
        };
        let mut setters = Vec::with_capacity(names.len());
        for name in names {
            let descriptor = ty.getattr(*name)?;
            if descriptor.get_type().name()? != "member_descriptor" {
                return Err(refuse(&format!("{name} is not a slot")));
            }
            // SAFETY: as above, on the descriptor's type; a non-null tp_descr_set slot is a
            // descrsetfunc.
            let set = unsafe {
                let slot =
                    ffi::PyType_GetSlot(ffi::Py_TYPE(descriptor.as_ptr()), ffi::Py_tp_descr_set);
                if slot.is_null() {
                    return Err(refuse(&format!("{name} cannot be set")));
                }
                std::mem::transmute::<*mut std::ffi::c_void, ffi::descrsetfunc>(slot)
            };
            setters.push((descriptor.unbind(), set));
        }
        Ok(SlotMaker {
            cls: ty.clone().unbind(),
            alloc,
            setters,
        })
    }

    pub(crate) fn make<'py, const N: usize>(
        &self,
        py: Python<'py>,
        values: [Bound<'py, PyAny>; N],
    ) -> PyResult<Bound<'py, PyAny>> {
        debug_assert_eq!(N, self.setters.len());
        // SAFETY: the GIL is held; `alloc` is the class's own tp_alloc (a new, GC-tracked
        // instance with empty slots, or NULL and an exception); each setter is its slot's
        // member descriptor's tp_descr_set, which takes its own reference to the value.
        unsafe {
            let made = (self.alloc)(self.cls.bind(py).as_type_ptr(), 0);
            let made = Bound::from_owned_ptr_or_err(py, made)?;
            for ((descriptor, set), value) in self.setters.iter().zip(values.iter()) {
                if set(descriptor.as_ptr(), made.as_ptr(), value.as_ptr()) != 0 {
                    return Err(PyErr::fetch(py));
                }
            }
            Ok(made)
        }
    }
}

/// The decoding of one request: its bytes and the attribute keys made so far (a request
/// repeats a few dozen keys over all its spans: one string each, its hash kept).
pub(crate) struct Walk<'py, 'a> {
    pub(crate) py: Python<'py>,
    pub(crate) data: &'a [u8],
    pub(crate) keys: HashMap<&'a [u8], Bound<'py, PyString>, FnvBuild>,
    pub(crate) events: &'a SlotMaker,
    pub(crate) depth: u32,
}

impl<'py, 'a> Walk<'py, 'a> {
    pub(crate) fn new(py: Python<'py>, data: &'a [u8], events: &'a SlotMaker) -> Self {
        Walk {
            py,
            data,
            keys: HashMap::default(),
            events,
            depth: 0,
        }
    }

    pub(crate) fn key(&mut self, r: R) -> PyResult<Bound<'py, PyString>> {
        let raw = &self.data[r.0..r.1];
        if let Some(found) = self.keys.get(raw) {
            return Ok(found.clone());
        }
        let made = py_text(self.py, self.data, r)?;
        if self.keys.len() < MAX_KEYS {
            self.keys.insert(raw, made.clone());
        }
        Ok(made)
    }

    /// A KeyValue's key range and its value's occurrences.
    pub(crate) fn key_value(&self, r: R) -> PyResult<(R, Ranges)> {
        let mut key = (r.0, r.0);
        let mut value = Ranges::default();
        each(self.data, &[r], |n, v| {
            match (n, v) {
                (num::KEY_VALUE_KEY, V::Len(s, e)) => key = (s, e),
                (num::KEY_VALUE_VALUE, V::Len(s, e)) => value.push((s, e)),
                _ => {}
            }
            Ok(())
        })?;
        Ok((key, value))
    }

    /// A repeated KeyValue field as a dict: the last of a repeated key wins.
    pub(crate) fn attributes(&mut self, kvs: &[R]) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(self.py);
        for &r in kvs {
            // Nearly every KeyValue is its key, then its value, once each; and most values a
            // single string. Those are read straight (a fifth of an agent span's decode,
            // bench/bench_grading_decode.py); any other encoding goes the general way.
            if let Some((key, value)) = one_key_one_value(self.data, r) {
                let key = self.key(key)?;
                let value = match only_string(self.data, value) {
                    Some(text) => py_text(self.py, self.data, text)?.into_any(),
                    None => self.any_value(&[value])?,
                };
                out.set_item(key, value)?;
                continue;
            }
            let (key, value) = self.key_value(r)?;
            let key = self.key(key)?;
            out.set_item(key, self.any_value(value.as_slice())?)?;
        }
        Ok(out)
    }

    /// An AnyValue (its occurrences) as a Python value.
    pub(crate) fn any_value(&mut self, ranges: &[R]) -> PyResult<Bound<'py, PyAny>> {
        let py = self.py;
        let (member, scalar, sub) = any_member_of(self.data, ranges)?;
        Ok(match (member, scalar) {
            (num::ANY_VALUE_STRING_VALUE, V::Len(s, e)) => {
                py_text(py, self.data, (s, e))?.into_any()
            }
            (num::ANY_VALUE_BYTES_VALUE, V::Len(s, e)) => {
                PyBytes::new(py, &self.data[s..e]).into_any()
            }
            (num::ANY_VALUE_BOOL_VALUE, V::Int(x)) => PyBool::new(py, x != 0).to_owned().into_any(),
            (num::ANY_VALUE_INT_VALUE, V::Int(x)) => (x as i64).into_pyobject(py)?.into_any(),
            (num::ANY_VALUE_DOUBLE_VALUE, V::F64(x)) => {
                PyFloat::new(py, f64::from_bits(x)).into_any()
            }
            (num::ANY_VALUE_ARRAY_VALUE, _) => {
                let mut items = Vec::new();
                each(self.data, sub.as_slice(), |n, v| {
                    if let (num::ARRAY_VALUE_VALUES, V::Len(s, e)) = (n, v) {
                        items.push((s, e));
                    }
                    Ok(())
                })?;
                let _level = self.deeper()?;
                let list = PyList::empty(py);
                let done = items
                    .into_iter()
                    .try_for_each(|r| list.append(self.any_value(&[r])?));
                self.depth -= 1;
                done?;
                list.into_any()
            }
            (num::ANY_VALUE_KVLIST_VALUE, _) => {
                let mut kvs = Vec::new();
                each(self.data, sub.as_slice(), |n, v| {
                    if let (num::KEY_VALUE_LIST_VALUES, V::Len(s, e)) = (n, v) {
                        kvs.push((s, e));
                    }
                    Ok(())
                })?;
                let _level = self.deeper()?;
                let dict = self.attributes(&kvs);
                self.depth -= 1;
                dict?.into_any()
            }
            _ => py.None().into_bound(py),
        })
    }

    pub(crate) fn deeper(&mut self) -> PyResult<Nesting> {
        if self.depth >= MAX_NESTING {
            return Err(bad("attribute values nested too deeply".into()));
        }
        let level = Nesting::enter(self.py)?;
        self.depth += 1;
        Ok(level)
    }

    pub(crate) fn events(&mut self, events: &[R]) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(self.py);
        for &r in events {
            let mut name = (r.0, r.0);
            let mut time = 0u64;
            let mut kvs = Vec::new();
            each(self.data, &[r], |n, v| {
                match (n, v) {
                    (num::EVENT_TIME_UNIX_NANO, V::F64(x)) => time = x,
                    (num::EVENT_NAME, V::Len(s, e)) => name = (s, e),
                    (num::EVENT_ATTRIBUTES, V::Len(s, e)) => kvs.push((s, e)),
                    _ => {}
                }
                Ok(())
            })?;
            let name = py_text(self.py, self.data, name)?;
            let attributes = self.attributes(&kvs)?;
            let time = time.into_pyobject(self.py)?.into_any();
            out.append(
                self.events
                    .make(self.py, [name.into_any(), time, attributes.into_any()])?,
            )?;
        }
        Ok(out)
    }
}
