//! attest-otel's OTLP wire core: the byte paths the sidecar runs for every request
//! (validate before acknowledging, cut into spans, classify, re-frame), as a Python
//! extension. attest_otel/sidecar/wire.py is its Python face; docs/architecture.md says
//! why it is compiled (issue 30).

use std::borrow::Cow;

use pyo3::create_exception;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyList, PySet, PyTuple};

pub mod check;
pub mod cut;
pub mod decode;
#[rustfmt::skip]
pub mod fields;
pub mod json;
pub mod json_read;
pub mod json_values;
pub mod json_walk;
pub mod logs;
pub mod probe;
pub mod schema;
pub mod varint;

create_exception!(
    attest_otel_wire,
    WireError,
    PyValueError,
    "The bytes are not a well-framed OTLP request."
);

/// Above this size a check runs without the GIL, so the other receivers keep going.
const DETACH_BYTES: usize = 64 * 1024;

fn bytes_of<'a>(obj: &'a Bound<'_, PyAny>) -> PyResult<Cow<'a, [u8]>> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(Cow::Borrowed(b.as_bytes()));
    }
    if let Ok(b) = obj.cast::<PyByteArray>() {
        return Ok(Cow::Owned(b.to_vec()));
    }
    if let Ok(v) = obj.extract::<Vec<u8>>() {
        return Ok(Cow::Owned(v));
    }
    Err(PyTypeError::new_err("expected bytes or bytearray"))
}

fn wire_err(e: cut::WireErr) -> PyErr {
    WireError::new_err(e.0)
}

fn slice<'py>(py: Python<'py>, data: &[u8], r: cut::Range) -> Bound<'py, PyBytes> {
    PyBytes::new(py, &data[r.0..r.1])
}

/// Why `data` is not a valid encoding of the message called `full_name` (an OTLP export
/// request or *Data message), or None when it is one.
#[pyfunction]
#[pyo3(name = "check")]
fn check_message(
    py: Python<'_>,
    data: &Bound<'_, PyAny>,
    full_name: &str,
) -> PyResult<Option<String>> {
    let root = schema::message_index(full_name)
        .ok_or_else(|| PyValueError::new_err(format!("no wire schema for {full_name}")))?;
    let data = bytes_of(data)?;
    let data: &[u8] = &data;
    if data.len() >= DETACH_BYTES {
        Ok(py.detach(|| check::check(data, root)))
    } else {
        Ok(check::check(data, root))
    }
}

/// [(resource fields, scope fields, [(trace id, name, span record)])] of every ScopeSpans;
/// the groups of one ResourceSpans share its fields' bytes object.
#[pyfunction]
fn split<'py>(py: Python<'py>, data: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
    let data = bytes_of(data)?;
    let cuts = cut::split(&data).map_err(wire_err)?;
    let out = PyList::empty(py);
    for rc in cuts {
        let resource = PyBytes::new(py, &join(&data, &rc.resource_parts));
        for sc in rc.scopes {
            let scope = PyBytes::new(py, &join(&data, &sc.scope_parts));
            let spans = PyList::empty(py);
            for s in sc.spans {
                let t = PyTuple::new(
                    py,
                    [
                        slice(py, &data, s.trace_id),
                        slice(py, &data, s.name),
                        slice(py, &data, s.record),
                    ],
                )?;
                spans.append(t)?;
            }
            out.append((resource.clone(), scope, spans))?;
        }
    }
    Ok(out)
}

/// [(resource fields, scope fields, [(trace id, event name, log record, span id)])] of every
/// ScopeLogs of a logs request, as `split` cuts a traces request.
#[pyfunction]
fn split_logs<'py>(py: Python<'py>, data: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
    let data = bytes_of(data)?;
    let cuts = logs::split_logs(&data).map_err(wire_err)?;
    let out = PyList::empty(py);
    for rc in cuts {
        let resource = PyBytes::new(py, &join(&data, &rc.resource_parts));
        for sc in rc.scopes {
            let scope = PyBytes::new(py, &join(&data, &sc.scope_parts));
            let records = PyList::empty(py);
            for r in sc.spans {
                let t = PyTuple::new(
                    py,
                    [r.trace_id, r.event_name, r.record, r.span_id].map(|x| slice(py, &data, x)),
                )?;
                records.append(t)?;
            }
            out.append((resource.clone(), scope, records))?;
        }
    }
    Ok(out)
}

fn join(data: &[u8], parts: &[cut::Range]) -> Vec<u8> {
    let mut out = Vec::new();
    for &(s, e) in parts {
        out.extend_from_slice(&data[s..e]);
    }
    out
}

/// (raw span id, raw parent span id or b"") of a span record; (b"", b"") when unreadable.
#[pyfunction]
fn span_links<'py>(
    py: Python<'py>,
    record: &Bound<'py, PyAny>,
) -> PyResult<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)> {
    let record = bytes_of(record)?;
    let (sid, parent) = cut::span_links(&record);
    Ok((slice(py, &record, sid), slice(py, &record, parent)))
}

/// The raw trace id of the span encoded in data[start:end] (b"" when it has none).
#[pyfunction]
#[pyo3(signature = (data, start=0, end=None))]
fn span_trace_id<'py>(
    py: Python<'py>,
    data: &Bound<'py, PyAny>,
    start: usize,
    end: Option<usize>,
) -> PyResult<Bound<'py, PyBytes>> {
    let data = bytes_of(data)?;
    let end = end.unwrap_or(data.len()).min(data.len());
    if start > end {
        return Ok(PyBytes::new(py, b""));
    }
    let (tid, _) = cut::span_head(&data, start, end).map_err(wire_err)?;
    Ok(slice(py, &data, tid))
}

/// The instrumentation scope's name in a ScopeSpans' non-span fields (UTF-8, errors
/// replaced), "" when it has none.
#[pyfunction]
fn scope_name(scope_fields: &Bound<'_, PyAny>) -> PyResult<String> {
    let data = bytes_of(scope_fields)?;
    let name = cut::scope_name(&data, &[(0, data.len())]).map_err(wire_err)?;
    Ok(String::from_utf8_lossy(name).into_owned())
}

/// (start, end) of each ResourceSpans record (tag and length included) in a request.
#[pyfunction]
fn resource_spans(data: &Bound<'_, PyAny>) -> PyResult<Vec<(usize, usize)>> {
    let data = bytes_of(data)?;
    cut::resource_spans(&data).map_err(wire_err)
}

/// (number, wire type, tag start, value start, value end) of each field in data[start:end].
#[pyfunction]
#[pyo3(name = "fields", signature = (data, start=0, end=None))]
fn field_list(
    data: &Bound<'_, PyAny>,
    start: usize,
    end: Option<usize>,
) -> PyResult<Vec<(u64, u8, usize, usize, usize)>> {
    let data = bytes_of(data)?;
    let end = end.unwrap_or(data.len()).min(data.len());
    cut::fields(&data, start, end)
        .map(|f| {
            f.map(|f| (f.number, f.wire_type, f.tag_start, f.start, f.end))
                .map_err(wire_err)
        })
        .collect()
}

/// [[(start, end) of each ScopeSpans] per ResourceSpans], read leniently: a framing
/// problem ends the lists early (the caller compares counts with what a parser saw).
#[pyfunction]
fn scope_ranges(data: &Bound<'_, PyAny>) -> PyResult<Vec<Vec<(usize, usize)>>> {
    let data = bytes_of(data)?;
    let lenient = |s: usize, e: usize| -> Vec<(u64, usize, usize)> {
        let mut out = Vec::new();
        for f in cut::fields(&data, s, e) {
            match f {
                Ok(f) if f.wire_type == 2 => out.push((f.number, f.start, f.end)),
                Ok(_) => {}
                Err(_) => break,
            }
        }
        out
    };
    Ok(lenient(0, data.len())
        .into_iter()
        .filter(|(n, _, _)| *n == 1)
        .map(|(_, s, e)| {
            lenient(s, e)
                .into_iter()
                .filter(|(n, _, _)| *n == fields::num::RESOURCE_SPANS_SCOPE_SPANS as u64)
                .map(|(_, s, e)| (s, e))
                .collect()
        })
        .collect())
}

/// `data` with `additions[span id]` appended to each span it names, and how many changed.
#[pyfunction]
fn append_to_spans<'py>(
    py: Python<'py>,
    data: &Bound<'py, PyAny>,
    additions: &Bound<'py, PyDict>,
) -> PyResult<(Bound<'py, PyBytes>, usize)> {
    let data = bytes_of(data)?;
    let mut table: std::collections::HashMap<Vec<u8>, Vec<u8>> = Default::default();
    for (k, v) in additions.iter() {
        table.insert(bytes_of(&k)?.into_owned(), bytes_of(&v)?.into_owned());
    }
    let (out, changed) = cut::append_to_spans(&data, |sid| table.get(sid).map(|v| v.as_slice()))
        .map_err(wire_err)?;
    Ok((PyBytes::new(py, &out), changed))
}

/// `data` cut into requests of at most `max_bytes` each, at span boundaries.
#[pyfunction]
fn split_to_size<'py>(
    py: Python<'py>,
    data: &Bound<'py, PyAny>,
    max_bytes: usize,
) -> PyResult<Vec<Bound<'py, PyBytes>>> {
    let data = bytes_of(data)?;
    let parts = cut::split_to_size(&data, max_bytes).map_err(wire_err)?;
    Ok(parts.iter().map(|p| PyBytes::new(py, p)).collect())
}

fn byte_list(obj: &Bound<'_, PyAny>) -> PyResult<Vec<Vec<u8>>> {
    obj.try_iter()?
        .map(|item| Ok(bytes_of(&item?)?.into_owned()))
        .collect()
}

/// One ResourceSpans record (tag included) holding `spans` under the given origin.
#[pyfunction]
fn encode_spans<'py>(
    py: Python<'py>,
    resource_fields: &Bound<'py, PyAny>,
    scope_fields: &Bound<'py, PyAny>,
    spans: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyBytes>> {
    let spans = byte_list(spans)?;
    let refs: Vec<&[u8]> = spans.iter().map(|s| s.as_slice()).collect();
    let mut out = Vec::new();
    cut::encode_spans(
        &mut out,
        &bytes_of(resource_fields)?,
        &bytes_of(scope_fields)?,
        &refs,
    );
    Ok(PyBytes::new(py, &out))
}

/// A request from ((resource fields, scope fields), span records) pairs; empty ones skipped.
#[pyfunction]
fn encode_groups<'py>(
    py: Python<'py>,
    groups: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyBytes>> {
    let mut out = Vec::new();
    for item in groups.try_iter()? {
        let item = item?;
        let (context, spans): (Bound<'py, PyAny>, Bound<'py, PyAny>) = item.extract()?;
        let (resource, scope): (Bound<'py, PyAny>, Bound<'py, PyAny>) = context.extract()?;
        let mut records: Vec<Cow<'_, [u8]>> = Vec::new();
        let owned: Vec<Bound<'py, PyAny>> = spans.try_iter()?.collect::<PyResult<_>>()?;
        for s in &owned {
            records.push(bytes_of(s)?);
        }
        if records.is_empty() {
            continue;
        }
        let refs: Vec<&[u8]> = records.iter().map(|r| r.as_ref()).collect();
        cut::encode_spans(&mut out, &bytes_of(&resource)?, &bytes_of(&scope)?, &refs);
    }
    Ok(PyBytes::new(py, &out))
}

/// One length-delimited field: tag byte, varint length, payload.
#[pyfunction]
fn field_bytes<'py>(
    py: Python<'py>,
    tag: u8,
    payload: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyBytes>> {
    let payload = bytes_of(payload)?;
    let mut out = Vec::with_capacity(payload.len() + 6);
    cut::frame(&mut out, tag, &[&payload]);
    Ok(PyBytes::new(py, &out))
}

/// Base-128 varint of an unsigned 64-bit value.
#[pyfunction]
fn encode_varint(py: Python<'_>, value: u64) -> Bound<'_, PyBytes> {
    let mut out = Vec::with_capacity(10);
    varint::write(&mut out, value);
    PyBytes::new(py, &out)
}

/// (value, next position) of the varint at data[pos:]; WireError when truncated or longer
/// than ten bytes.
#[pyfunction]
fn read_varint(data: &Bound<'_, PyAny>, pos: usize) -> PyResult<(u64, usize)> {
    let data = bytes_of(data)?;
    varint::read(&data, pos, data.len()).map_err(|e| {
        WireError::new_err(match e {
            varint::VarintError::Truncated => "truncated varint",
            varint::VarintError::TooLong => "varint too long",
        })
    })
}

/// An attribute-key probe over encoded bytes (see `probe::KeyProbe`).
#[pyclass(frozen, module = "attest_otel_wire")]
struct KeyFinder {
    probe: probe::KeyProbe,
}

#[pymethods]
impl KeyFinder {
    /// A span attribute (field 9 of a Span) whose key starts with one of `prefixes`.
    #[staticmethod]
    fn span_attribute_prefixes(prefixes: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(KeyFinder {
            probe: probe::KeyProbe {
                lead: Some(tag_of(fields::num::SPAN_ATTRIBUTES)),
                lead_extra: 3,
                key_extra: 1,
                keys: probe::PrefixSet::new(byte_list(prefixes)?),
                after: None,
            },
        })
    }

    /// A key (field 1 of any message) that is one of `keys` whole, its value's tag after it.
    #[staticmethod]
    fn whole_keys(keys: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(KeyFinder {
            probe: probe::KeyProbe {
                lead: None,
                lead_extra: 0,
                key_extra: 1,
                keys: probe::PrefixSet::new(byte_list(keys)?),
                after: Some(tag_of(fields::num::KEY_VALUE_VALUE)),
            },
        })
    }

    /// A key (field 1 of any message, a length of up to ten bytes) starting with one of
    /// `prefixes`.
    #[staticmethod]
    fn key_prefixes(prefixes: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(KeyFinder {
            probe: probe::KeyProbe {
                lead: None,
                lead_extra: 0,
                key_extra: 9,
                keys: probe::PrefixSet::new(byte_list(prefixes)?),
                after: None,
            },
        })
    }

    /// True when data[start:end] holds such a key, else None (the answers of
    /// `re.Pattern.search`, whose place this takes).
    #[pyo3(signature = (data, start=0, end=None))]
    fn search(
        &self,
        data: &Bound<'_, PyAny>,
        start: usize,
        end: Option<usize>,
    ) -> PyResult<Option<bool>> {
        let data = bytes_of(data)?;
        let end = end.unwrap_or(data.len());
        Ok(self.probe.search(&data, start, end).then_some(true))
    }
}

const fn tag_of(number: u32) -> u8 {
    ((number << 3) | 2) as u8
}

/// The GenAI marks of `ingest.candidate`, for the request-level tests.
#[pyclass(frozen, module = "attest_otel_wire")]
struct Marks {
    keys: probe::PrefixSet,
    names: probe::PrefixSet,
    suffixes: probe::PrefixSet,
    scopes: probe::ScopeMarks,
}

#[pymethods]
impl Marks {
    #[new]
    fn new(
        key_prefixes: &Bound<'_, PyAny>,
        name_prefixes: &Bound<'_, PyAny>,
        name_suffixes: &Bound<'_, PyAny>,
        scope_markers: &Bound<'_, PyAny>,
        exact_scopes: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        Ok(Marks {
            keys: probe::PrefixSet::new(byte_list(key_prefixes)?),
            names: probe::PrefixSet::new(byte_list(name_prefixes)?),
            suffixes: probe::PrefixSet::new(byte_list(name_suffixes)?),
            scopes: probe::ScopeMarks {
                exact: byte_list(exact_scopes)?,
                contains: byte_list(scope_markers)?,
            },
        })
    }

    /// Whether a span name (UTF-8 bytes) marks a candidate.
    fn name(&self, name: &[u8]) -> bool {
        self.names.starts(name) || self.suffixes.ends(name)
    }

    /// Whether an instrumentation scope's name (UTF-8 bytes) marks all its spans.
    fn scope(&self, name: &[u8]) -> bool {
        probe::scope_marked(name, &self.scopes)
    }

    /// (why `data` is not a valid ExportTraceServiceRequest or None, and when it is one and
    /// no span of it is marked (attribute key, name, scope), its (spans, raw trace ids)).
    /// One walk: the validation the request needs anyway, noting the marks on the way.
    fn check_plain<'py>(
        &self,
        py: Python<'py>,
        data: &Bound<'py, PyAny>,
    ) -> PyResult<(Option<String>, Option<(usize, Bound<'py, PySet>)>)> {
        let data = bytes_of(data)?;
        let data: &[u8] = &data;
        let run = || {
            let mut scan =
                check::PlainScan::new(&self.keys, &self.names, &self.suffixes, &self.scopes);
            let problem = check::check_traces(data, &mut scan);
            (problem, scan.marked, scan.count, scan.trace_ids)
        };
        let (problem, marked, count, ids) = if data.len() >= DETACH_BYTES {
            py.detach(run)
        } else {
            run()
        };
        if problem.is_some() || marked {
            return Ok((problem, None));
        }
        let set = PySet::empty(py)?;
        for (s, e) in ids {
            set.add(PyBytes::new(py, &data[s..e]))?;
        }
        Ok((None, Some((count, set))))
    }

    /// (span id, parent span id, looks GenAI, span record) of every span of a request: a
    /// held trace's shape. GenAI: a marked scope or name, or a key `keys` finds in the span.
    fn shape<'py>(
        &self,
        py: Python<'py>,
        data: &Bound<'py, PyAny>,
        keys: &KeyFinder,
    ) -> PyResult<Bound<'py, PyList>> {
        let data = bytes_of(data)?;
        let cuts = cut::split(&data).map_err(wire_err)?;
        let out = PyList::empty(py);
        for rc in cuts {
            for sc in rc.scopes {
                let scope = !sc.spans.is_empty()
                    && probe::scope_marked(
                        cut::scope_name(&data, &sc.scope_parts).map_err(wire_err)?,
                        &self.scopes,
                    );
                for s in sc.spans {
                    let record = &data[s.record.0..s.record.1];
                    let genai = scope
                        || self.name(&data[s.name.0..s.name.1])
                        || keys.probe.search(record, 0, record.len());
                    let (sid, parent) = cut::span_links(record);
                    out.append((
                        slice(py, record, sid),
                        slice(py, record, parent),
                        genai,
                        PyBytes::new(py, record),
                    ))?;
                }
            }
        }
        Ok(out)
    }

    /// (spans, raw trace ids) of a request in which no scope and no span name is marked;
    /// None when one is. Raises WireError on broken framing.
    fn plain<'py>(
        &self,
        py: Python<'py>,
        data: &Bound<'py, PyAny>,
    ) -> PyResult<Option<(usize, Bound<'py, PySet>)>> {
        let data = bytes_of(data)?;
        let found = cut::plain(
            &data,
            |n| self.name(n),
            |s| probe::scope_marked(s, &self.scopes),
        )
        .map_err(wire_err)?;
        match found {
            None => Ok(None),
            Some((count, ids)) => {
                let set = PySet::empty(py)?;
                for id in ids {
                    set.add(PyBytes::new(py, id))?;
                }
                Ok(Some((count, set)))
            }
        }
    }
}

/// Fixed byte strings, any of which may occur in a record (SIMD substring search).
#[pyclass(frozen, module = "attest_otel_wire")]
struct Substrings {
    finders: Vec<memchr::memmem::Finder<'static>>,
}

#[pymethods]
impl Substrings {
    #[new]
    fn new(needles: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(Substrings {
            finders: byte_list(needles)?
                .iter()
                .map(|n| memchr::memmem::Finder::new(n).into_owned())
                .collect(),
        })
    }

    /// Whether one of the strings occurs in `data`.
    fn any_in(&self, data: &[u8]) -> bool {
        self.finders.iter().any(|f| f.find(data).is_some())
    }
}

#[pymodule]
fn attest_otel_wire(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("WireError", m.py().get_type::<WireError>())?;
    m.add("MAX_DEPTH", check::MAX_DEPTH)?;
    json_read::register(m)?;
    m.add_class::<KeyFinder>()?;
    m.add_class::<Marks>()?;
    m.add_class::<Substrings>()?;
    decode::register(m)?;
    m.add_function(wrap_pyfunction!(check_message, m)?)?;
    m.add_function(wrap_pyfunction!(split, m)?)?;
    m.add_function(wrap_pyfunction!(split_logs, m)?)?;
    m.add_function(wrap_pyfunction!(span_links, m)?)?;
    m.add_function(wrap_pyfunction!(span_trace_id, m)?)?;
    m.add_function(wrap_pyfunction!(scope_name, m)?)?;
    m.add_function(wrap_pyfunction!(resource_spans, m)?)?;
    m.add_function(wrap_pyfunction!(field_list, m)?)?;
    m.add_function(wrap_pyfunction!(scope_ranges, m)?)?;
    m.add_function(wrap_pyfunction!(append_to_spans, m)?)?;
    m.add_function(wrap_pyfunction!(split_to_size, m)?)?;
    m.add_function(wrap_pyfunction!(encode_spans, m)?)?;
    m.add_function(wrap_pyfunction!(encode_groups, m)?)?;
    m.add_function(wrap_pyfunction!(field_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(encode_varint, m)?)?;
    m.add_function(wrap_pyfunction!(read_varint, m)?)?;
    Ok(())
}
