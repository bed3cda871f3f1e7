//! The OTLP/JSON reader's Python face (`attest_otel_wire.JsonReader`): a whole text (one
//! document, JSON lines, or concatenated documents, told apart as `ingest/decode.py` always
//! did), one line of a big file (`ingest/stream.py`), and a skeleton's attributes and events
//! (`decode.hydrate`). Errors are `JsonReadError(kind, message, line, detail)`; for a text
//! `json` refuses, the Python side asks `json` for its own words (kind "json").

use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};

use crate::json::{one_document, Parser, Refused, V};
use crate::json_values::{Helpers, JsonMarks, JsonSpan};
use crate::json_walk::{Fail, Walk};

create_exception!(
    attest_otel_wire,
    JsonReadError,
    PyValueError,
    "OTLP/JSON the reader refused: (kind, message, line, detail)."
);

const BOM: &[u8] = b"\xef\xbb\xbf";

/// What one text or line held.
struct Out<'py> {
    spans: Bound<'py, PyList>,
    logs: Bound<'py, PyList>,
    span_count: usize,
    genai: usize,
    log_count: usize,
    /// (line, strings mended) per document that had unpaired surrogates.
    mended: Vec<(Option<usize>, usize)>,
}

/// A refusal on its way out: kind, message, line, detail.
type Refusal<'py> = (&'static str, String, Option<usize>, Bound<'py, PyAny>);

fn is_py_space(c: char) -> bool {
    c.is_whitespace() || ('\x1c'..='\x1f').contains(&c)
}

fn skip_ws(b: &[u8], mut pos: usize) -> usize {
    while pos < b.len() && crate::json::is_ws(b[pos]) {
        pos += 1;
    }
    pos
}

fn lines_before(b: &[u8], pos: usize) -> usize {
    memchr::memchr_iter(b'\n', &b[..pos]).count()
}

#[pyclass(frozen, module = "attest_otel_wire")]
pub struct JsonReader {
    h: Helpers,
}

impl JsonReader {
    /// One parsed document (a request, or a list of them) into `out`.
    fn document<'py>(
        &self,
        walk: &mut Walk<'py, '_>,
        text: &str,
        doc: &V,
        out: &mut Out<'py>,
    ) -> Result<(), (&'static str, String, Option<PyErr>)> {
        match doc {
            V::Arr(items) => {
                for item in items {
                    self.request(walk, text, item, out)?;
                }
                Ok(())
            }
            _ => self.request(walk, text, doc, out),
        }
    }

    fn request<'py>(
        &self,
        walk: &mut Walk<'py, '_>,
        text: &str,
        doc: &V,
        out: &mut Out<'py>,
    ) -> Result<(), (&'static str, String, Option<PyErr>)> {
        let V::Obj(o) = doc else {
            let got = doc.type_name();
            return Err((
                "input",
                format!("not OTLP: expected a JSON object with resourceSpans, got {got}"),
                None,
            ));
        };
        let walked = if o.has("resourceSpans") || o.has("resource_spans") {
            walk.traces(text, o, &out.spans).map(|(seen, genai)| {
                out.span_count += seen;
                out.genai += genai;
            })
        } else if o.has("resourceLogs") || o.has("resource_logs") {
            walk.logs(o, &out.logs).map(|seen| out.log_count += seen)
        } else if [
            "resourceMetrics",
            "resource_metrics",
            "resourceProfiles",
            "resource_profiles",
        ]
        .iter()
        .any(|k| o.has(k))
        {
            Ok(()) // metrics and profiles lines are skipped
        } else if !o.items.is_empty() {
            let mut keys = Vec::new();
            for key in o.keys().take(5) {
                let shown = PyString::new(walk.py, key)
                    .repr()
                    .map_err(|e| ("walker", String::new(), Some(e)))?;
                keys.push(shown.to_string());
            }
            return Err((
                "input",
                format!(
                    "not OTLP: expected resourceSpans, got keys {}",
                    keys.join(", ")
                ),
                None,
            ));
        } else {
            Ok(())
        };
        walked.map_err(|f| match f {
            Fail::Otlp { problem, at } if at.is_empty() => ("otlp", problem, None),
            Fail::Otlp { problem, at } => ("otlp", format!("{at}: {problem}"), None),
            Fail::Py(e) => ("walker", String::new(), Some(e)),
        })
    }

    fn parse_walk<'py>(
        &self,
        walk: &mut Walk<'py, '_>,
        text: &str,
        doc: Result<(V, usize), Refused>,
        line: Option<usize>,
        out: &mut Out<'py>,
    ) -> Result<(), Refusal<'py>> {
        let py = walk.py;
        let (v, mended) = doc.map_err(|r| refused(py, r, line, "line"))?;
        if mended > 0 {
            out.mended.push((line, mended));
        }
        self.document(walk, text, &v, out)
            .map_err(|(kind, message, e)| {
                let detail = match e {
                    Some(e) => e.into_value(py).into_bound(py).into_any(),
                    None => py.None().into_bound(py),
                };
                (kind, message, line, detail)
            })
    }
}

fn refused<'py>(py: Python<'py>, r: Refused, line: Option<usize>, how: &str) -> Refusal<'py> {
    let detail = (how, r.pos, r.too_deep)
        .into_pyobject(py)
        .map(|t| t.into_any());
    (
        "json",
        String::new(),
        line,
        detail.unwrap_or_else(|_| py.None().into_bound(py)),
    )
}

fn raise(r: Refusal<'_>) -> PyErr {
    let (kind, message, line, detail) = r;
    JsonReadError::new_err((kind, message, line, detail.unbind()))
}

fn result<'py>(py: Python<'py>, out: Out<'py>) -> PyResult<Bound<'py, PyTuple>> {
    (
        out.spans,
        out.logs,
        out.span_count,
        out.genai,
        out.log_count,
        out.mended,
    )
        .into_pyobject(py)
}

#[pymethods]
impl JsonReader {
    /// The classes a walk builds and the helpers it hands rare spellings to
    /// (`ingest/otlp_json.py` names them).
    #[new]
    #[allow(clippy::too_many_arguments)]
    fn new(
        span: Py<PyAny>,
        event: Py<PyAny>,
        log: Py<PyAny>,
        malformed: Py<PyAny>,
        shown: Py<PyAny>,
        text_id: Py<PyAny>,
        time: Py<PyAny>,
        enumeration: Py<PyAny>,
        int_of: Py<PyAny>,
        float_of: Py<PyAny>,
        bytes_of: Py<PyAny>,
        genai_scope: Py<PyAny>,
        kinds: Py<PyAny>,
        statuses: Py<PyAny>,
    ) -> Self {
        JsonReader {
            h: Helpers {
                span,
                event,
                log,
                malformed,
                shown,
                text_id,
                time,
                enumeration,
                int_of,
                float_of,
                bytes_of,
                genai_scope,
                kinds,
                statuses,
            },
        }
    }

    /// Every request of a whole OTLP/JSON text (UTF-8 bytes, a byte order mark allowed):
    /// (spans, log records, spans seen, GenAI spans, log records seen, [(line, mended)]).
    fn read_text<'py>(
        &self,
        py: Python<'py>,
        data: &Bound<'py, PyBytes>,
        lazy: bool,
        marks: &JsonMarks,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let bytes = data.as_bytes();
        let skip = if bytes.starts_with(BOM) { 3 } else { 0 };
        let text = std::str::from_utf8(&bytes[skip..])
            .map_err(|e| JsonReadError::new_err(("utf8", "", py.None(), skip + e.valid_up_to())))?;
        let b = text.as_bytes();
        let mut walk = Walk::new(py, &self.h, marks, lazy);
        let mut out = Out {
            spans: PyList::empty(py),
            logs: PyList::empty(py),
            span_count: 0,
            genai: 0,
            log_count: 0,
            mended: Vec::new(),
        };
        let start = skip_ws(b, 0);
        if start == b.len() {
            return result(py, out);
        }
        // JSON lines: the first line is a whole document and more follows it.
        if let Some(nl) = memchr::memchr(b'\n', &b[start..]).map(|n| start + n) {
            if skip_ws(b, nl) != b.len() {
                if let Ok(first) = one_document(&text[..nl], start) {
                    let mut line = lines_before(b, start) + 1;
                    self.parse_walk(&mut walk, text, Ok(first), Some(line), &mut out)
                        .map_err(raise)?;
                    let mut pos = nl + 1;
                    while pos < b.len() {
                        line += 1;
                        let end = memchr::memchr(b'\n', &b[pos..]).map_or(b.len(), |n| pos + n);
                        let chunk = &text[pos..end];
                        if !chunk.chars().all(is_py_space) {
                            let doc = one_document(&text[..end], pos);
                            if let Err(r) = doc {
                                let detail = ("line", pos, end, r.too_deep);
                                return Err(JsonReadError::new_err(("json", "", line, detail)));
                            }
                            self.parse_walk(&mut walk, text, doc, Some(line), &mut out)
                                .map_err(raise)?;
                        }
                        pos = end + 1;
                    }
                    return result(py, out);
                }
            }
        }
        if let Ok(doc) = one_document(text, 0) {
            self.parse_walk(&mut walk, text, Ok(doc), None, &mut out)
                .map_err(raise)?;
            return result(py, out);
        }
        // Concatenated documents, each named by the line it starts on.
        let mut line = lines_before(b, start) + 1;
        let mut pos = start;
        while pos < b.len() {
            let mut p = Parser::new(text, pos);
            let doc = match p.value() {
                Ok(v) => Ok((v, p.mended)),
                Err(r) => {
                    let detail = ("doc", pos, r.pos, r.too_deep);
                    return Err(JsonReadError::new_err(("json", "", line, detail)));
                }
            };
            let after = skip_ws(b, p.pos);
            self.parse_walk(&mut walk, text, doc, Some(line), &mut out)
                .map_err(raise)?;
            line += memchr::memchr_iter(b'\n', &b[pos..after]).count();
            pos = after;
        }
        result(py, out)
    }

    /// One line of a JSON-lines file (its bytes, newline included or not): None when blank,
    /// else (spans, log records, spans seen, GenAI spans, log records seen, mended, refusal);
    /// the refusal (kind, message, None, detail) is handed back, not raised, so the caller
    /// says the faults of a file in the order `decode` meets them. Invalid UTF-8 is raised.
    fn read_line<'py>(
        &self,
        py: Python<'py>,
        data: &Bound<'py, PyBytes>,
        lazy: bool,
        marks: &JsonMarks,
        first: bool,
    ) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let bytes = data.as_bytes();
        let text = std::str::from_utf8(bytes)
            .map_err(|e| JsonReadError::new_err(("utf8", "", py.None(), e.valid_up_to())))?;
        let mut text = text.strip_suffix('\n').unwrap_or(text);
        if first {
            text = text.strip_prefix('\u{feff}').unwrap_or(text);
        }
        if text.chars().all(is_py_space) {
            return Ok(None);
        }
        let mut walk = Walk::new(py, &self.h, marks, lazy);
        let mut out = Out {
            spans: PyList::empty(py),
            logs: PyList::empty(py),
            span_count: 0,
            genai: 0,
            log_count: 0,
            mended: Vec::new(),
        };
        let doc = one_document(text, 0);
        let failed = self.parse_walk(&mut walk, text, doc, None, &mut out).err();
        let failed = match failed {
            Some((kind, message, _, detail)) => (kind, message, py.None(), detail)
                .into_pyobject(py)?
                .into_any(),
            None => py.None().into_bound(py),
        };
        let mended: usize = out.mended.iter().map(|(_, n)| n).sum();
        Ok(Some(
            (
                out.spans,
                out.logs,
                out.span_count,
                out.genai,
                out.log_count,
                mended,
                failed,
            )
                .into_pyobject(py)?,
        ))
    }

    /// A skeleton's (attributes, events) from its `JsonSpan`.
    fn hydrate<'py>(
        &self,
        py: Python<'py>,
        source: &Bound<'py, JsonSpan>,
        marks: &JsonMarks,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let text = &source.get().text;
        let (v, _) =
            one_document(text, 0).map_err(|_| PyValueError::new_err("not one JSON object"))?;
        let V::Obj(o) = v else {
            return Err(PyValueError::new_err("not one JSON object"));
        };
        let walk = Walk::new(py, &self.h, marks, false);
        let done = walk
            .attributes(o.get("attributes"))
            .and_then(|a| Ok((a, walk.events(&o)?)));
        match done {
            Ok(pair) => pair.into_pyobject(py),
            Err(Fail::Otlp { problem, at }) => {
                let message = if at.is_empty() {
                    problem
                } else {
                    format!("{at}: {problem}")
                };
                Err(JsonReadError::new_err((
                    "otlp",
                    message,
                    py.None(),
                    py.None(),
                )))
            }
            Err(Fail::Py(e)) => Err(e),
        }
    }

    /// The value `json.loads` gives for `text` (bytes), read by this parser; JsonReadError
    /// ("json", "", None, ("line", 0, len, too deep)) when it refuses (for the tests that hold
    /// it to `json`).
    fn loads<'py>(
        &self,
        py: Python<'py>,
        data: &Bound<'py, PyBytes>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let text = std::str::from_utf8(data.as_bytes())
            .map_err(|e| JsonReadError::new_err(("utf8", "", py.None(), e.valid_up_to())))?;
        let (v, _) = one_document(text, 0).map_err(|r| raise(refused(py, r, None, "line")))?;
        Walk::new(py, &self.h, &JsonMarks::none(), false).to_py(&v)
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("JsonReadError", m.py().get_type::<JsonReadError>())?;
    m.add_class::<JsonReader>()?;
    m.add_class::<JsonMarks>()?;
    m.add_class::<JsonSpan>()?;
    Ok(())
}
