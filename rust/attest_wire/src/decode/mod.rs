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

mod build;
mod read;

use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyType};

use crate::fields::num;
use crate::probe::{scope_marked, PrefixSet, ScopeMarks};
use build::{hex, id_problem, py_text, SlotMaker, Walk, EVENT_FIELDS, LOG_FIELDS, SPAN_FIELDS};
use read::{each, group, int32, scope_of, span_fields, string_value, top_level, Ranges, R, V};

create_exception!(
    attest_otel_wire,
    OtlpError,
    PyValueError,
    "Valid protobuf that is not valid OTLP: args (problem, where, records before it)."
);

pub(crate) const TRACE_ID_BYTES: usize = 16;
pub(crate) const SPAN_ID_BYTES: usize = 8;
/// A bound of our own on nesting, for bytes no `check` has seen (a pickled `SpanSource`).
pub(crate) const MAX_NESTING: u32 = 256;
/// Attribute keys remembered per request (one string object each).
pub(crate) const MAX_KEYS: usize = 4096;

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
