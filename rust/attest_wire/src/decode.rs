//! OTLP traces and logs requests decoded straight into attest-otel's `model.Span`, `Event`
//! and `LogRecord` objects (issue 30): the grading process's parse and decode in one walk,
//! where upb's parse and a Python walk over it cost several microseconds per span
//! (docs/measurements.md, "Decoding in the wire core").
//!
//! The semantics are protobuf's view of the request, as the Python walk over upb's parse
//! read it (tests/fuzz/test_decode_differential.py holds the two views to each other):
//!
//! - the bytes were judged valid by `check` first (upb's verdict), so strings are UTF-8 and
//!   messages nest at most 100 deep; anything else here is still an error, never a panic;
//! - a field read with the wrong wire type is an unknown field; the last value of a scalar
//!   wins; a singular message field that occurs twice is merged (its occurrences read as
//!   one concatenated message), as is the message member of a oneof while it stays set;
//! - only candidate spans (a marked scope, name or attribute key: `ingest.candidate`) get
//!   attributes and events; the others are skeletons whose `SpanSource` decodes them later;
//! - attribute values: string, bool, int, float, bytes, list (array), dict (kvlist, the last
//!   key wins), None (unset or a string-table index); each nesting level counts against
//!   the interpreter's recursion limit, as the recursive Python walk did.

use std::collections::HashMap;

use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyList, PyString, PyType};

use crate::fields::num;
use crate::probe::{scope_marked, PrefixSet, ScopeMarks};
use crate::varint;

create_exception!(
    attest_otel_wire,
    OtlpError,
    PyValueError,
    "Valid protobuf that is not valid OTLP: args (problem, where, records before it)."
);

const TRACE_ID_BYTES: usize = 16;
const SPAN_ID_BYTES: usize = 8;
/// A bound of our own on nesting, for bytes no `check` has seen (a pickled `SpanSource`).
const MAX_NESTING: u32 = 256;
/// Attribute keys remembered per request (one string object each).
const MAX_KEYS: usize = 4096;

type R = (usize, usize);

/// One or more byte ranges of a message: its occurrences, read as one concatenation.
#[derive(Default)]
struct Ranges {
    one: Option<R>,
    more: Vec<R>,
}

impl Ranges {
    #[inline]
    fn push(&mut self, r: R) {
        match self.one {
            None if self.more.is_empty() => self.one = Some(r),
            None => self.more.push(r),
            Some(first) => {
                self.more.push(first);
                self.more.push(r);
                self.one = None;
            }
        }
    }

    #[inline]
    fn clear(&mut self) {
        self.one = None;
        self.more.clear();
    }

    #[inline]
    fn is_empty(&self) -> bool {
        self.one.is_none() && self.more.is_empty()
    }

    #[inline]
    fn as_slice(&self) -> &[R] {
        match &self.one {
            Some(r) => std::slice::from_ref(r),
            None => &self.more,
        }
    }
}

#[derive(Clone, Copy)]
enum V {
    Int(u64),
    F64(u64),
    F32,
    Len(usize, usize),
}

fn bad(what: String) -> PyErr {
    crate::WireError::new_err(what)
}

/// The fields of data[pos..end], groups skipped (upb keeps them as unknown fields).
struct Fields<'a> {
    data: &'a [u8],
    pos: usize,
    end: usize,
}

impl<'a> Fields<'a> {
    #[inline]
    fn new(data: &'a [u8], r: R) -> Self {
        Fields {
            data,
            pos: r.0,
            end: r.1.min(data.len()),
        }
    }

    #[inline]
    fn varint(&self, pos: usize) -> PyResult<(u64, usize)> {
        varint::read(self.data, pos, self.end).map_err(|_| bad(format!("bad varint at byte {pos}")))
    }

    #[inline]
    fn next_field(&mut self) -> PyResult<Option<(u32, V)>> {
        loop {
            if self.pos >= self.end {
                return Ok(None);
            }
            let start = self.pos;
            let (tag, p) = self.varint(start)?;
            let number = (tag >> 3) as u32;
            self.pos = p;
            match tag & 7 {
                0 => {
                    let (v, p) = self.varint(self.pos)?;
                    self.pos = p;
                    return Ok(Some((number, V::Int(v))));
                }
                1 => {
                    if self.end - self.pos < 8 {
                        return Err(bad(format!("truncated fixed64 at byte {start}")));
                    }
                    let mut b = [0u8; 8];
                    b.copy_from_slice(&self.data[self.pos..self.pos + 8]);
                    self.pos += 8;
                    return Ok(Some((number, V::F64(u64::from_le_bytes(b)))));
                }
                5 => {
                    if self.end - self.pos < 4 {
                        return Err(bad(format!("truncated fixed32 at byte {start}")));
                    }
                    self.pos += 4;
                    return Ok(Some((number, V::F32)));
                }
                2 => {
                    let (len, p) = self.varint(self.pos)?;
                    if len > (self.end - p) as u64 {
                        return Err(bad(format!("length past the end at byte {start}")));
                    }
                    self.pos = p + len as usize;
                    return Ok(Some((number, V::Len(p, self.pos))));
                }
                3 => self.skip_group(number, 0)?,
                w => return Err(bad(format!("wire type {w} at byte {start}"))),
            }
        }
    }

    fn skip_group(&mut self, number: u32, depth: u32) -> PyResult<()> {
        if depth > MAX_NESTING {
            return Err(bad("groups nested too deeply".into()));
        }
        loop {
            if self.pos >= self.end {
                return Err(bad(format!("group {number} not closed")));
            }
            let (tag, p) = self.varint(self.pos)?;
            self.pos = p;
            let inner = (tag >> 3) as u32;
            match tag & 7 {
                0 => self.pos = self.varint(self.pos)?.1,
                1 => self.pos = self.pos.saturating_add(8),
                5 => self.pos = self.pos.saturating_add(4),
                2 => {
                    let (len, p) = self.varint(self.pos)?;
                    self.pos = p.saturating_add(len.min(usize::MAX as u64) as usize);
                }
                3 => self.skip_group(inner, depth + 1)?,
                4 if inner == number => return Ok(()),
                _ => return Err(bad(format!("broken group {number}"))),
            }
            if self.pos > self.end {
                return Err(bad(format!("group {number} runs past its message")));
            }
        }
    }
}

/// Calls `f` on each field of the message whose occurrences are `ranges`.
#[inline]
fn each(data: &[u8], ranges: &[R], mut f: impl FnMut(u32, V) -> PyResult<()>) -> PyResult<()> {
    for &r in ranges {
        let mut fields = Fields::new(data, r);
        while let Some((n, v)) = fields.next_field()? {
            f(n, v)?;
        }
    }
    Ok(())
}

/// A string field as a Python str, decoded (and checked) by Python's UTF-8 decoder alone:
/// a second check in Rust cost 4 % of a GenAI span's decode (perf).
#[inline]
fn py_text<'py>(py: Python<'py>, data: &[u8], r: R) -> PyResult<Bound<'py, PyString>> {
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
struct Fnv(u64);

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

type FnvBuild = std::hash::BuildHasherDefault<Fnv>;

const HEX: &[u8; 16] = b"0123456789abcdef";

/// An id (at most 16 bytes: checked before) as lowercase hex.
fn hex<'py>(py: Python<'py>, raw: &[u8]) -> Bound<'py, PyString> {
    let mut buf = [0u8; 2 * TRACE_ID_BYTES];
    let n = raw.len().min(TRACE_ID_BYTES);
    for (i, b) in raw[..n].iter().enumerate() {
        buf[2 * i] = HEX[(b >> 4) as usize];
        buf[2 * i + 1] = HEX[(b & 15) as usize];
    }
    PyString::new(py, std::str::from_utf8(&buf[..2 * n]).unwrap_or(""))
}

/// `otlp_common.id_length_problem` for raw bytes.
fn id_problem(what: &str, nbytes: usize, got: &[u8]) -> String {
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

/// An open enum or int32 field as upb reads it from a varint: its low 32 bits, signed.
#[inline]
fn int32(x: u64) -> i32 {
    x as u32 as i32
}

/// Whether (field, value) sets a member of AnyValue's oneof (a known field, its wire type).
#[inline]
fn any_member(n: u32, v: V) -> bool {
    matches!(
        (n, v),
        (num::ANY_VALUE_STRING_VALUE, V::Len(..))
            | (num::ANY_VALUE_BYTES_VALUE, V::Len(..))
            | (num::ANY_VALUE_ARRAY_VALUE, V::Len(..))
            | (num::ANY_VALUE_KVLIST_VALUE, V::Len(..))
            | (num::ANY_VALUE_BOOL_VALUE, V::Int(_))
            | (num::ANY_VALUE_INT_VALUE, V::Int(_))
            | (num::ANY_VALUE_STRING_VALUE_STRINDEX, V::Int(_))
            | (num::ANY_VALUE_DOUBLE_VALUE, V::F64(_))
    )
}

/// The member set last in an AnyValue's occurrences: (field number or 0, its scalar value,
/// the occurrences of its message while it stayed set).
fn any_member_of(data: &[u8], ranges: &[R]) -> PyResult<(u32, V, Ranges)> {
    let mut member = 0u32;
    let mut scalar = V::F32;
    let mut sub = Ranges::default();
    each(data, ranges, |n, v| {
        if any_member(n, v) {
            if n == num::ANY_VALUE_ARRAY_VALUE || n == num::ANY_VALUE_KVLIST_VALUE {
                if member != n {
                    sub.clear();
                }
                if let V::Len(s, e) = v {
                    sub.push((s, e));
                }
            } else {
                sub.clear();
            }
            member = n;
            scalar = v;
        }
        Ok(())
    })?;
    Ok((member, scalar, sub))
}

/// The `string_value` of an AnyValue's occurrences ("" when another member is set).
fn string_value<'d>(data: &'d [u8], ranges: &Ranges) -> PyResult<&'d [u8]> {
    let (member, scalar, _) = any_member_of(data, ranges.as_slice())?;
    Ok(match (member, scalar) {
        (num::ANY_VALUE_STRING_VALUE, V::Len(s, e)) => &data[s..e],
        _ => b"",
    })
}

/// One level deeper into an attribute value: two nested messages (the array or kvlist and
/// the values in it), each counted against Python's recursion limit as a frame of the
/// recursive walk this replaces was.
struct Nesting(u8);

impl Nesting {
    fn enter(py: Python<'_>) -> PyResult<Nesting> {
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

/// `model.Span`'s, `Event`'s and `LogRecord`'s fields, in order: the values are handed over
/// in this order, and `SlotMaker::new` refuses a class whose fields are not these.
const SPAN_FIELDS: [&str; 15] = [
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
const EVENT_FIELDS: [&str; 3] = ["name", "time_ns", "attributes"];
const LOG_FIELDS: [&str; 6] = [
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
struct SlotMaker {
    cls: Py<PyType>,
    alloc: ffi::allocfunc,
    setters: Vec<(Py<PyAny>, ffi::descrsetfunc)>,
}

impl SlotMaker {
    fn new(cls: &Bound<'_, PyAny>, names: &[&str]) -> PyResult<Self> {
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

    fn make<'py, const N: usize>(
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
struct Walk<'py, 'a> {
    py: Python<'py>,
    data: &'a [u8],
    keys: HashMap<&'a [u8], Bound<'py, PyString>, FnvBuild>,
    events: &'a SlotMaker,
    depth: u32,
}

impl<'py, 'a> Walk<'py, 'a> {
    fn new(py: Python<'py>, data: &'a [u8], events: &'a SlotMaker) -> Self {
        Walk {
            py,
            data,
            keys: HashMap::default(),
            events,
            depth: 0,
        }
    }

    fn key(&mut self, r: R) -> PyResult<Bound<'py, PyString>> {
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
    fn key_value(&self, r: R) -> PyResult<(R, Ranges)> {
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
    fn attributes(&mut self, kvs: &[R]) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(self.py);
        for &r in kvs {
            let (key, value) = self.key_value(r)?;
            let key = self.key(key)?;
            out.set_item(key, self.any_value(value.as_slice())?)?;
        }
        Ok(out)
    }

    /// An AnyValue (its occurrences) as a Python value.
    fn any_value(&mut self, ranges: &[R]) -> PyResult<Bound<'py, PyAny>> {
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

    fn deeper(&mut self) -> PyResult<Nesting> {
        if self.depth >= MAX_NESTING {
            return Err(bad("attribute values nested too deeply".into()));
        }
        let level = Nesting::enter(self.py)?;
        self.depth += 1;
        Ok(level)
    }

    fn events(&mut self, events: &[R]) -> PyResult<Bound<'py, PyList>> {
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

/// What the decoder reads of one span before it decides how much to build.
struct SpanFields {
    trace_id: R,
    span_id: R,
    parent: R,
    name: R,
    kind: u64,
    start: u64,
    end: u64,
    attributes: Vec<R>,
    events: Vec<R>,
    status: Ranges,
}

fn span_fields(data: &[u8], r: R) -> PyResult<SpanFields> {
    let empty = (r.0, r.0);
    let mut s = SpanFields {
        trace_id: empty,
        span_id: empty,
        parent: empty,
        name: empty,
        kind: 0,
        start: 0,
        end: 0,
        attributes: Vec::new(),
        events: Vec::new(),
        status: Ranges::default(),
    };
    each(data, &[r], |n, v| {
        match (n, v) {
            (num::SPAN_TRACE_ID, V::Len(a, b)) => s.trace_id = (a, b),
            (num::SPAN_SPAN_ID, V::Len(a, b)) => s.span_id = (a, b),
            (num::SPAN_PARENT_SPAN_ID, V::Len(a, b)) => s.parent = (a, b),
            (num::SPAN_NAME, V::Len(a, b)) => s.name = (a, b),
            (num::SPAN_KIND, V::Int(x)) => s.kind = x,
            (num::SPAN_START_TIME_UNIX_NANO, V::F64(x)) => s.start = x,
            (num::SPAN_END_TIME_UNIX_NANO, V::F64(x)) => s.end = x,
            (num::SPAN_ATTRIBUTES, V::Len(a, b)) => s.attributes.push((a, b)),
            (num::SPAN_EVENTS, V::Len(a, b)) => s.events.push((a, b)),
            (num::SPAN_STATUS, V::Len(a, b)) => s.status.push((a, b)),
            _ => {}
        }
        Ok(())
    })?;
    Ok(s)
}

/// A message's singular message field `head` (its occurrences) and repeated field `items`.
struct Group {
    head: Ranges,
    items: Vec<R>,
}

fn group(data: &[u8], r: R, head: u32, items: u32) -> PyResult<Group> {
    let mut g = Group {
        head: Ranges::default(),
        items: Vec::new(),
    };
    each(data, &[r], |n, v| {
        if let V::Len(s, e) = v {
            if n == head {
                g.head.push((s, e));
            } else if n == items {
                g.items.push((s, e));
            }
        }
        Ok(())
    })?;
    Ok(g)
}

/// (name, version) of an InstrumentationScope's occurrences.
fn scope_of(data: &[u8], ranges: &[R]) -> PyResult<(R, R)> {
    let (mut name, mut version) = ((0, 0), (0, 0));
    each(data, ranges, |n, v| {
        match (n, v) {
            (num::INSTRUMENTATION_SCOPE_NAME, V::Len(s, e)) => name = (s, e),
            (num::INSTRUMENTATION_SCOPE_VERSION, V::Len(s, e)) => version = (s, e),
            _ => {}
        }
        Ok(())
    })?;
    Ok((name, version))
}

/// The top-level repeated field 1 of an export request (ResourceSpans or ResourceLogs).
fn top_level(data: &[u8]) -> PyResult<Vec<R>> {
    let mut out = Vec::new();
    each(data, &[(0, data.len())], |n, v| {
        if let (1, V::Len(s, e)) = (n, v) {
            out.push((s, e));
        }
        Ok(())
    })?;
    Ok(out)
}

fn bytes_object<'py>(data: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyBytes>> {
    if let Ok(b) = data.cast::<PyBytes>() {
        return Ok(b.clone());
    }
    let owned = crate::bytes_of(data)?;
    Ok(PyBytes::new(data.py(), &owned))
}

/// A decoded span's origin: the request's bytes and where the span is in them, so a
/// skeleton's attributes and events can be decoded when someone needs them
/// (`ingest.decode.hydrate`). Equal when the spans' encodings are; pickled as the span's
/// own bytes.
#[pyclass(frozen, module = "attest_otel_wire")]
pub struct SpanSource {
    data: Py<PyBytes>,
    start: usize,
    end: usize,
    /// Whether the span has attributes or events the decode left in the bytes.
    #[pyo3(get)]
    pending: bool,
}

#[pymethods]
impl SpanSource {
    /// A source over one span's encoding (a `Span` message's bytes).
    #[new]
    fn new(record: Bound<'_, PyBytes>, pending: bool) -> Self {
        let end = record.as_bytes().len();
        SpanSource {
            data: record.unbind(),
            start: 0,
            end,
            pending,
        }
    }

    /// The span's encoding (a `Span` message), e.g. for a protobuf library's `FromString`.
    fn record<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.data.bind(py).as_bytes()[self.start..self.end])
    }

    fn __eq__(&self, py: Python<'_>, other: PyRef<'_, SpanSource>) -> bool {
        let mine = &self.data.bind(py).as_bytes()[self.start..self.end];
        let theirs = &other.data.bind(py).as_bytes()[other.start..other.end];
        mine == theirs && self.pending == other.pending
    }

    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyType>, (Bound<'py, PyBytes>, bool))> {
        let me = slf.get();
        Ok((slf.get_type(), (me.record(slf.py()), me.pending)))
    }

    fn __repr__(&self) -> String {
        format!(
            "SpanSource({} bytes, pending={})",
            self.end - self.start,
            if self.pending { "True" } else { "False" }
        )
    }
}

/// The decoder: the model's classes to build and the candidate marks (`ingest.candidate`),
/// made again by Python when a dialect registers.
#[pyclass(frozen, module = "attest_otel_wire")]
pub struct Decoder {
    spans: SlotMaker,
    events: SlotMaker,
    logs: SlotMaker,
    keys: PrefixSet,
    names: PrefixSet,
    suffixes: PrefixSet,
    scopes: ScopeMarks,
    event_names: PrefixSet,
}

fn byte_list(obj: &Bound<'_, PyAny>) -> PyResult<Vec<Vec<u8>>> {
    obj.try_iter()?
        .map(|item| Ok(crate::bytes_of(&item?)?.into_owned()))
        .collect()
}

impl Decoder {
    #[inline]
    fn name_marked(&self, name: &[u8]) -> bool {
        self.names.starts(name) || self.suffixes.ends(name)
    }

    fn key_marked(&self, walk: &Walk<'_, '_>, kvs: &[R]) -> PyResult<bool> {
        for &r in kvs {
            let (key, _) = walk.key_value(r)?;
            if self.keys.starts(&walk.data[key.0..key.1]) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Whether a log record is kept by a lazy decode: its event name, or an attribute key,
    /// or an `event.name` attribute's string value is marked.
    fn log_marked(&self, walk: &Walk<'_, '_>, event_name: &[u8], kvs: &[R]) -> PyResult<bool> {
        if self.event_names.starts(event_name) {
            return Ok(true);
        }
        for &r in kvs {
            let (key, value) = walk.key_value(r)?;
            let key = &walk.data[key.0..key.1];
            if self.keys.starts(key)
                || (key == b"event.name"
                    && self.event_names.starts(string_value(walk.data, &value)?))
            {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

#[pymethods]
impl Decoder {
    #[new]
    #[allow(clippy::too_many_arguments)]
    fn new(
        span_cls: Bound<'_, PyAny>,
        event_cls: Bound<'_, PyAny>,
        log_cls: Bound<'_, PyAny>,
        key_prefixes: &Bound<'_, PyAny>,
        name_prefixes: &Bound<'_, PyAny>,
        name_suffixes: &Bound<'_, PyAny>,
        scope_markers: &Bound<'_, PyAny>,
        exact_scopes: &Bound<'_, PyAny>,
        event_prefixes: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        Ok(Decoder {
            spans: SlotMaker::new(&span_cls, &SPAN_FIELDS)?,
            events: SlotMaker::new(&event_cls, &EVENT_FIELDS)?,
            logs: SlotMaker::new(&log_cls, &LOG_FIELDS)?,
            keys: PrefixSet::new(byte_list(key_prefixes)?),
            names: PrefixSet::new(byte_list(name_prefixes)?),
            suffixes: PrefixSet::new(byte_list(name_suffixes)?),
            scopes: ScopeMarks {
                exact: byte_list(exact_scopes)?,
                contains: byte_list(scope_markers)?,
            },
            event_names: PrefixSet::new(byte_list(event_prefixes)?),
        })
    }

    /// (spans, spans seen, spans decoded in full) of an ExportTraceServiceRequest's bytes
    /// (valid: `check` said so). Lazy: only candidates get attributes and events. Raises
    /// OtlpError(problem, where, spans before it) for an id of the wrong length.
    fn traces<'py>(
        &self,
        py: Python<'py>,
        data: &Bound<'py, PyAny>,
        lazy: bool,
    ) -> PyResult<(Bound<'py, PyList>, usize, usize)> {
        let owner = bytes_object(data)?;
        let bytes = owner.as_bytes();
        let mut walk = Walk::new(py, bytes, &self.events);
        let out = PyList::empty(py);
        let (mut seen, mut genai) = (0usize, 0usize);
        // The spans of a trace come together: its id is written as hex once, and shared.
        let mut last_trace: &[u8] = &[];
        let mut last_hex = PyString::new(py, "");
        for (i, rs) in top_level(bytes)?.into_iter().enumerate() {
            let rs = group(
                bytes,
                rs,
                num::RESOURCE_SPANS_RESOURCE,
                num::RESOURCE_SPANS_SCOPE_SPANS,
            )?;
            let mut resource_kvs = Vec::new();
            each(bytes, rs.head.as_slice(), |n, v| {
                if let (num::RESOURCE_ATTRIBUTES, V::Len(s, e)) = (n, v) {
                    resource_kvs.push((s, e));
                }
                Ok(())
            })?;
            let resource = walk.attributes(&resource_kvs)?; // shared by the resource's spans
            for (j, &ss) in rs.items.iter().enumerate() {
                let ss = group(bytes, ss, num::SCOPE_SPANS_SCOPE, num::SCOPE_SPANS_SPANS)?;
                let (name, version) = scope_of(bytes, ss.head.as_slice())?;
                let scope_name = py_text(py, bytes, name)?;
                let scope_version = py_text(py, bytes, version)?;
                let whole_scope = !lazy || scope_marked(&bytes[name.0..name.1], &self.scopes);
                for (k, &sr) in ss.items.iter().enumerate() {
                    let s = span_fields(bytes, sr)?;
                    let trace_id = &bytes[s.trace_id.0..s.trace_id.1];
                    let span_id = &bytes[s.span_id.0..s.span_id.1];
                    let parent = &bytes[s.parent.0..s.parent.1];
                    let problem = if trace_id.len() != TRACE_ID_BYTES {
                        Some(id_problem("trace id", TRACE_ID_BYTES, trace_id))
                    } else if span_id.len() != SPAN_ID_BYTES {
                        Some(id_problem("span id", SPAN_ID_BYTES, span_id))
                    } else if !parent.is_empty() && parent.len() != SPAN_ID_BYTES {
                        Some(id_problem("parent span id", SPAN_ID_BYTES, parent))
                    } else {
                        None
                    };
                    if let Some(problem) = problem {
                        let at = format!("resourceSpans[{i}].scopeSpans[{j}].spans[{k}]");
                        return Err(OtlpError::new_err((problem, at, seen)));
                    }
                    let full = whole_scope
                        || self.name_marked(&bytes[s.name.0..s.name.1])
                        || self.key_marked(&walk, &s.attributes)?;
                    if trace_id != last_trace {
                        last_trace = trace_id;
                        last_hex = hex(py, trace_id);
                    }
                    let (mut status_code, mut status_message) = (0u64, (sr.0, sr.0));
                    each(bytes, s.status.as_slice(), |n, v| {
                        match (n, v) {
                            (num::STATUS_CODE, V::Int(x)) => status_code = x,
                            (num::STATUS_MESSAGE, V::Len(a, b)) => status_message = (a, b),
                            _ => {}
                        }
                        Ok(())
                    })?;
                    seen += 1;
                    let (attributes, events) = if full {
                        genai += 1;
                        (walk.attributes(&s.attributes)?, walk.events(&s.events)?)
                    } else {
                        (PyDict::new(py), PyList::empty(py))
                    };
                    let pending = !full && (!s.attributes.is_empty() || !s.events.is_empty());
                    let source = SpanSource {
                        data: owner.clone().unbind(),
                        start: sr.0,
                        end: sr.1,
                        pending,
                    };
                    let parent_hex = if parent.is_empty() {
                        py.None().into_bound(py)
                    } else {
                        hex(py, parent).into_any()
                    };
                    // In `Span`'s field order (`SPAN_FIELDS`).
                    let span = self.spans.make(
                        py,
                        [
                            last_hex.clone().into_any(),
                            hex(py, span_id).into_any(),
                            parent_hex,
                            py_text(py, bytes, s.name)?.into_any(),
                            s.start.into_pyobject(py)?.into_any(),
                            s.end.into_pyobject(py)?.into_any(),
                            int32(s.kind).into_pyobject(py)?.into_any(),
                            int32(status_code).into_pyobject(py)?.into_any(),
                            py_text(py, bytes, status_message)?.into_any(),
                            attributes.into_any(),
                            events.into_any(),
                            resource.clone().into_any(),
                            scope_name.clone().into_any(),
                            scope_version.clone().into_any(),
                            Bound::new(py, source)?.into_any(),
                        ],
                    )?;
                    out.append(span)?;
                }
            }
        }
        Ok((out, seen, genai))
    }

    /// (attributes, events) of a span, from its source.
    fn content<'py>(
        &self,
        py: Python<'py>,
        source: &Bound<'py, SpanSource>,
    ) -> PyResult<(Bound<'py, PyDict>, Bound<'py, PyList>)> {
        let src = source.get();
        let data = src.data.bind(py).as_bytes();
        let mut walk = Walk::new(py, data, &self.events);
        let s = span_fields(data, (src.start, src.end))?;
        Ok((walk.attributes(&s.attributes)?, walk.events(&s.events)?))
    }

    /// (log records, records seen, records kept) of an ExportLogsServiceRequest's bytes
    /// (valid: `check` said so). Lazy: only GenAI-looking records are kept (a marked scope,
    /// event name or attribute key, or an `event.name` attribute with a marked value).
    /// Raises OtlpError(problem, where, records before it) for an id of the wrong length.
    fn logs<'py>(
        &self,
        py: Python<'py>,
        data: &Bound<'py, PyAny>,
        lazy: bool,
    ) -> PyResult<(Bound<'py, PyList>, usize, usize)> {
        let owner = bytes_object(data)?;
        let bytes = owner.as_bytes();
        let mut walk = Walk::new(py, bytes, &self.events);
        let out = PyList::empty(py);
        let (mut seen, mut kept) = (0usize, 0usize);
        for (i, rl) in top_level(bytes)?.into_iter().enumerate() {
            let rl = group(
                bytes,
                rl,
                num::RESOURCE_LOGS_RESOURCE,
                num::RESOURCE_LOGS_SCOPE_LOGS,
            )?;
            for (j, &sl) in rl.items.iter().enumerate() {
                let sl = group(
                    bytes,
                    sl,
                    num::SCOPE_LOGS_SCOPE,
                    num::SCOPE_LOGS_LOG_RECORDS,
                )?;
                let (name, _) = scope_of(bytes, sl.head.as_slice())?;
                let whole_scope = !lazy || scope_marked(&bytes[name.0..name.1], &self.scopes);
                for (k, &lr) in sl.items.iter().enumerate() {
                    seen += 1;
                    let empty = (lr.0, lr.0);
                    let (mut trace_id, mut span_id, mut event_name) = (empty, empty, empty);
                    let (mut time, mut observed) = (0u64, 0u64);
                    let mut body = Ranges::default();
                    let mut kvs = Vec::new();
                    each(bytes, &[lr], |n, v| {
                        match (n, v) {
                            (num::LOG_RECORD_TIME_UNIX_NANO, V::F64(x)) => time = x,
                            (num::LOG_RECORD_OBSERVED_TIME_UNIX_NANO, V::F64(x)) => observed = x,
                            (num::LOG_RECORD_BODY, V::Len(s, e)) => body.push((s, e)),
                            (num::LOG_RECORD_ATTRIBUTES, V::Len(s, e)) => kvs.push((s, e)),
                            (num::LOG_RECORD_TRACE_ID, V::Len(s, e)) => trace_id = (s, e),
                            (num::LOG_RECORD_SPAN_ID, V::Len(s, e)) => span_id = (s, e),
                            (num::LOG_RECORD_EVENT_NAME, V::Len(s, e)) => event_name = (s, e),
                            _ => {}
                        }
                        Ok(())
                    })?;
                    if !whole_scope
                        && !self.log_marked(&walk, &bytes[event_name.0..event_name.1], &kvs)?
                    {
                        continue;
                    }
                    kept += 1;
                    let tid = &bytes[trace_id.0..trace_id.1];
                    let sid = &bytes[span_id.0..span_id.1];
                    let problem = if !tid.is_empty() && tid.len() != TRACE_ID_BYTES {
                        Some(id_problem("trace id", TRACE_ID_BYTES, tid))
                    } else if !sid.is_empty() && sid.len() != SPAN_ID_BYTES {
                        Some(id_problem("span id", SPAN_ID_BYTES, sid))
                    } else {
                        None
                    };
                    if let Some(problem) = problem {
                        let at = format!("resourceLogs[{i}].scopeLogs[{j}].logRecords[{k}]");
                        return Err(OtlpError::new_err((problem, at, seen - 1)));
                    }
                    let attributes = walk.attributes(&kvs)?;
                    let name = if event_name.0 < event_name.1 {
                        py_text(py, bytes, event_name)?
                    } else {
                        // No event name: the `event.name` attribute's, when a string.
                        match attributes.get_item("event.name")? {
                            Some(v) if v.is_exact_instance_of::<PyString>() => {
                                v.cast_into::<PyString>()?
                            }
                            _ => PyString::new(py, ""),
                        }
                    };
                    let body = if body.is_empty() {
                        py.None().into_bound(py)
                    } else {
                        walk.any_value(body.as_slice())?
                    };
                    let time = if time != 0 { time } else { observed };
                    let record = self.logs.make(
                        py,
                        [
                            hex(py, tid).into_any(),
                            hex(py, sid).into_any(),
                            name.into_any(),
                            time.into_pyobject(py)?.into_any(),
                            body,
                            attributes.into_any(),
                        ],
                    )?;
                    out.append(record)?;
                }
            }
        }
        Ok((out, seen, kept))
    }

    /// (ResourceSpans in the request, the first span's trace id length or -1 without spans):
    /// what tells a logs request read as a traces request (same field numbers).
    #[staticmethod]
    fn traces_outline(data: &Bound<'_, PyAny>) -> PyResult<(usize, i64)> {
        let owner = crate::bytes_of(data)?;
        let bytes: &[u8] = &owner;
        let resources = top_level(bytes)?;
        for &rs in &resources {
            let rs = group(bytes, rs, 0, num::RESOURCE_SPANS_SCOPE_SPANS)?;
            for &ss in &rs.items {
                let ss = group(bytes, ss, 0, num::SCOPE_SPANS_SPANS)?;
                if let Some(&first) = ss.items.first() {
                    let s = span_fields(bytes, first)?;
                    return Ok((resources.len(), (s.trace_id.1 - s.trace_id.0) as i64));
                }
            }
        }
        Ok((resources.len(), -1))
    }

    /// Whether the first log record of a logs request's bytes holds anything a log record
    /// has (a time, a body, an event name, a severity, attributes, a 16-byte trace id).
    #[staticmethod]
    fn looks_like_logs(data: &Bound<'_, PyAny>) -> PyResult<bool> {
        let owner = crate::bytes_of(data)?;
        let bytes: &[u8] = &owner;
        for rl in top_level(bytes)? {
            let rl = group(bytes, rl, 0, num::RESOURCE_LOGS_SCOPE_LOGS)?;
            for &sl in &rl.items {
                let sl = group(bytes, sl, 0, num::SCOPE_LOGS_LOG_RECORDS)?;
                let Some(&first) = sl.items.first() else {
                    continue;
                };
                let (mut time, mut observed, mut severity) = (0u64, 0u64, 0u64);
                let (mut event_name, mut severity_text, mut trace_len) = (0, 0, 0);
                let mut held = false; // a body or an attribute
                each(bytes, &[first], |n, v| {
                    match (n, v) {
                        (num::LOG_RECORD_TIME_UNIX_NANO, V::F64(x)) => time = x,
                        (num::LOG_RECORD_OBSERVED_TIME_UNIX_NANO, V::F64(x)) => observed = x,
                        (num::LOG_RECORD_SEVERITY_NUMBER, V::Int(x)) => severity = x,
                        (num::LOG_RECORD_BODY, V::Len(..))
                        | (num::LOG_RECORD_ATTRIBUTES, V::Len(..)) => held = true,
                        (num::LOG_RECORD_EVENT_NAME, V::Len(s, e)) => event_name = e - s,
                        (num::LOG_RECORD_SEVERITY_TEXT, V::Len(s, e)) => severity_text = e - s,
                        (num::LOG_RECORD_TRACE_ID, V::Len(s, e)) => trace_len = e - s,
                        _ => {}
                    }
                    Ok(())
                })?;
                return Ok(time != 0
                    || observed != 0
                    || held
                    || event_name > 0
                    || int32(severity) != 0
                    || severity_text > 0
                    || trace_len == TRACE_ID_BYTES);
            }
        }
        Ok(false)
    }
}

/// The decoder's classes and exception, added to the module by lib.rs.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("OtlpError", m.py().get_type::<OtlpError>())?;
    m.add_class::<Decoder>()?;
    m.add_class::<SpanSource>()?;
    Ok(())
}
