//! OTLP/JSON requests, parsed by `json.rs`, walked straight into `model.Span`, `Event` and
//! `LogRecord` objects: no Python dict tree is built. The rules are those of
//! `ingest/otlp_json.py`'s module docstring (both JSON dialects per value, lazy skeletons);
//! the rare spellings whose reading is Python's own (`int()` of a string, `float()`, base64,
//! ids that are not plain hex, enum names) are handed to the helpers that module keeps, so
//! one definition holds for both (`json_values.rs`). A skeleton's `source` is a `JsonSpan`:
//! the span's text, read again only when `decode.hydrate` asks.

use std::collections::HashMap;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};

use crate::json::{Obj, V};
use crate::json_values::{Helpers, JsonMarks, JsonSpan};

/// What a walk stops on: OTLP that is not valid (`MalformedOTLP` with its path), or a
/// Python exception (a helper's, or one the Python walker would have raised).
pub enum Fail {
    Otlp { problem: String, at: String },
    Py(PyErr),
}

pub type R<T> = Result<T, Fail>;

impl From<std::convert::Infallible> for Fail {
    fn from(e: std::convert::Infallible) -> Self {
        match e {}
    }
}

impl From<PyErr> for Fail {
    fn from(e: PyErr) -> Self {
        Fail::Py(e)
    }
}

pub fn otlp<T>(problem: String) -> R<T> {
    Err(Fail::Otlp {
        problem,
        at: String::new(),
    })
}

pub fn otlp_at<T>(problem: String, at: String) -> R<T> {
    Err(Fail::Otlp { problem, at })
}

pub struct Walk<'py, 'h> {
    pub py: Python<'py>,
    pub h: &'h Helpers,
    pub marks: &'h JsonMarks,
    pub lazy: bool,
    pub(crate) trace_ids: HashMap<String, Bound<'py, PyString>>,
    pub(crate) scopes: HashMap<String, bool>,
}

impl<'py, 'h> Walk<'py, 'h> {
    pub fn new(py: Python<'py>, h: &'h Helpers, marks: &'h JsonMarks, lazy: bool) -> Self {
        Walk {
            py,
            h,
            marks,
            lazy,
            trace_ids: HashMap::new(),
            scopes: HashMap::new(),
        }
    }

    // -- walks --------------------------------------------------------------------------------

    fn list<'v>(&self, o: &'v Obj<'v>, camel: &str, snake: &str, at: &str) -> R<&'v [V<'v>]> {
        let found = o.get_or(camel, snake);
        if !found.truthy() {
            return Ok(&[]);
        }
        match found {
            V::Arr(a) => Ok(a),
            _ => otlp_at(
                format!("{camel} must be a list, got {}", self.shown(found)?),
                at.into(),
            ),
        }
    }

    /// `otlp_json.walk_traces`: append a `Span` per span to `out`; (seen, GenAI).
    pub fn traces(&mut self, text: &str, req: &Obj, out: &Bound<'py, PyList>) -> R<(usize, usize)> {
        let (mut seen, mut genai) = (0, 0);
        for (i, rs) in self
            .list(req, "resourceSpans", "resource_spans", "")?
            .iter()
            .enumerate()
        {
            let V::Obj(rs) = rs else {
                return otlp_at(
                    format!("expected an object, got {}", self.shown(rs)?),
                    format!("resourceSpans[{i}]"),
                );
            };
            let resource = self.resource(rs).map_err(|f| match f {
                Fail::Otlp { problem, .. } => Fail::Otlp {
                    problem,
                    at: format!("resourceSpans[{i}].resource"),
                },
                other => other,
            })?;
            let mut scope_spans = rs.get_or("scopeSpans", "scope_spans");
            if !scope_spans.truthy() {
                let found = rs.get_or(
                    "instrumentationLibrarySpans",
                    "instrumentation_library_spans",
                );
                if found.truthy() && !matches!(found, V::Arr(_)) {
                    return otlp_at(
                        format!(
                            "instrumentationLibrarySpans must be a list, got {}",
                            self.shown(found)?
                        ),
                        format!("resourceSpans[{i}]"),
                    );
                }
                scope_spans = found;
            }
            let scope_spans: &[V] = match scope_spans {
                V::Arr(a) => a,
                _ if !scope_spans.truthy() => &[],
                _ => {
                    return otlp_at(
                        format!(
                            "scopeSpans must be a list, got {}",
                            self.shown(scope_spans)?
                        ),
                        format!("resourceSpans[{i}]"),
                    )
                }
            };
            for (j, ss) in scope_spans.iter().enumerate() {
                let V::Obj(ss) = ss else {
                    return otlp_at(
                        format!("expected an object, got {}", self.shown(ss)?),
                        format!("resourceSpans[{i}].scopeSpans[{j}]"),
                    );
                };
                let mut scope = ss.get("scope");
                if !scope.truthy() {
                    scope = ss.get_or("instrumentationLibrary", "instrumentation_library");
                }
                let at_scope = || format!("resourceSpans[{i}].scopeSpans[{j}].scope");
                let (scope_name, scope_version) = match scope {
                    V::Obj(s) => (s.get("name"), s.get("version")),
                    _ if !scope.truthy() => (&crate::json::NULL, &crate::json::NULL),
                    _ => {
                        return otlp_at(
                            format!("expected an object, got {}", self.shown(scope)?),
                            at_scope(),
                        )
                    }
                };
                let names = (str_or_empty(scope_name), str_or_empty(scope_version));
                let (Some(scope_name), Some(scope_version)) = names else {
                    return otlp_at("scope name and version must be strings".into(), at_scope());
                };
                let whole_scope = !self.lazy || self.genai_scope(scope_name)?;
                let spans = ss.get("spans");
                if !spans.truthy() {
                    continue;
                }
                let V::Arr(spans) = spans else {
                    return otlp_at(
                        format!("spans must be a list, got {}", self.shown(spans)?),
                        format!("resourceSpans[{i}].scopeSpans[{j}]"),
                    );
                };
                let scope_name = PyString::new(self.py, scope_name);
                let scope_version = PyString::new(self.py, scope_version);
                for (k, s) in spans.iter().enumerate() {
                    let full = self
                        .span(
                            text,
                            s,
                            whole_scope,
                            &resource,
                            &scope_name,
                            &scope_version,
                            out,
                        )
                        .map_err(|f| {
                            let at = format!("resourceSpans[{i}].scopeSpans[{j}].spans[{k}]");
                            self.in_record(f, at, "malformed span")
                        })?;
                    seen += 1;
                    genai += full as usize;
                }
            }
        }
        Ok((seen, genai))
    }

    fn resource(&self, rs: &Obj) -> R<Bound<'py, PyDict>> {
        let resource = rs.get("resource");
        match resource {
            V::Obj(r) => self.attributes(r.get("attributes")),
            _ if !resource.truthy() => Ok(PyDict::new(self.py)),
            _ => otlp(format!("expected an object, got {}", self.shown(resource)?)),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn span(
        &mut self,
        text: &str,
        s: &V,
        whole_scope: bool,
        resource: &Bound<'py, PyDict>,
        scope_name: &Bound<'py, PyString>,
        scope_version: &Bound<'py, PyString>,
        out: &Bound<'py, PyList>,
    ) -> R<bool> {
        let py = self.py;
        let V::Obj(s) = s else {
            return otlp(format!("expected an object, got {}", self.shown(s)?));
        };
        let name_v = s.get("name");
        let name = match name_v {
            V::Str(n) => n.as_ref(),
            _ if !name_v.truthy() => "",
            _ => {
                return otlp(format!(
                    "name must be a string, got {}",
                    self.shown(name_v)?
                ))
            }
        };
        let kvs = s.get("attributes");
        let full = whole_scope || self.marks.name(name) || self.any_genai_key(kvs, false)?;
        let trace_id = self.id(s.get_or("traceId", "trace_id"), 16, "trace id", true)?;
        let span_id = self.id(s.get_or("spanId", "span_id"), 8, "span id", false)?;
        let raw = s.get_or("parentSpanId", "parent_span_id");
        let parent = if raw.truthy() {
            self.id(raw, 8, "parent span id", false)?.into_any()
        } else {
            py.None().into_bound(py)
        };
        let status = s.get("status");
        let (code, message) = if status.truthy() {
            let V::Obj(st) = status else {
                return otlp(format!(
                    "status must be an object, got {}",
                    self.shown(status)?
                ));
            };
            let code = st.get("code");
            let code = if code.truthy() {
                self.enumeration(code, &self.h.statuses, "status")?
            } else {
                0i64.into_pyobject(py)?.into_any()
            };
            (
                code,
                self.text_or_empty(st.get("message"), "bad status message:")?,
            )
        } else {
            (0i64.into_pyobject(py)?.into_any(), PyString::new(py, ""))
        };
        let kind = s.get("kind");
        let kind = match kind {
            _ if !kind.truthy() => 0i64.into_pyobject(py)?.into_any(),
            V::Int(_) | V::UInt(_) | V::Big(_) => self.to_py(kind)?,
            _ => self.enumeration(kind, &self.h.kinds, "span kind")?,
        };
        let start = self.time(
            s.get_or("startTimeUnixNano", "start_time_unix_nano"),
            "start",
        )?;
        let end = self.time(s.get_or("endTimeUnixNano", "end_time_unix_nano"), "end")?;
        let (attributes, events) = if full {
            let attributes = self.attributes(kvs)?; // before the events, as Python did
            let events = if s.get("events").truthy() {
                self.events(s)?
            } else {
                PyList::empty(py)
            };
            (attributes, events)
        } else {
            (PyDict::new(py), PyList::empty(py))
        };
        let content = kvs.truthy() || s.get("events").truthy();
        let source = JsonSpan {
            text: text[s.start..s.end].into(),
            content,
            transport: !full && self.marks.any_transport_key(kvs),
        };
        let args = PyTuple::new(
            py,
            [
                trace_id.into_any(),
                span_id.into_any(),
                parent,
                PyString::new(py, name).into_any(),
                start,
                end,
                kind,
                code,
                message.into_any(),
                attributes.into_any(),
                events.into_any(),
                resource.clone().into_any(),
                scope_name.clone().into_any(),
                scope_version.clone().into_any(),
                Bound::new(py, source)?.into_any(),
            ],
        )?;
        out.append(self.h.span.bind(py).call1(args)?)?;
        Ok(full)
    }

    /// `otlp_json.walk_logs`: append the GenAI log records to `out`; records seen.
    pub fn logs(&mut self, req: &Obj, out: &Bound<'py, PyList>) -> R<usize> {
        let mut seen = 0;
        for (i, rl) in self
            .list(req, "resourceLogs", "resource_logs", "")?
            .iter()
            .enumerate()
        {
            let V::Obj(rl) = rl else {
                return otlp_at(
                    format!("expected an object, got {}", self.shown(rl)?),
                    format!("resourceLogs[{i}]"),
                );
            };
            let scope_logs = rl.get_or("scopeLogs", "scope_logs");
            if !scope_logs.truthy() {
                continue;
            }
            let V::Arr(scope_logs) = scope_logs else {
                return otlp_at(
                    format!("scopeLogs must be a list, got {}", self.shown(scope_logs)?),
                    format!("resourceLogs[{i}]"),
                );
            };
            for (j, sl) in scope_logs.iter().enumerate() {
                let V::Obj(sl) = sl else {
                    return otlp_at(
                        format!("expected an object, got {}", self.shown(sl)?),
                        format!("resourceLogs[{i}].scopeLogs[{j}]"),
                    );
                };
                let scope = sl.get("scope");
                let at_scope = || format!("resourceLogs[{i}].scopeLogs[{j}].scope");
                let scope_name = match scope {
                    V::Obj(s) => s.get("name"),
                    _ if !scope.truthy() => &crate::json::NULL,
                    _ => {
                        return otlp_at(
                            format!("expected an object, got {}", self.shown(scope)?),
                            at_scope(),
                        )
                    }
                };
                let Some(scope_name) = str_or_empty(scope_name) else {
                    return otlp_at("scope name must be a string".into(), at_scope());
                };
                let whole_scope = !self.lazy || self.genai_scope(scope_name)?;
                let records = sl.get_or("logRecords", "log_records");
                if !records.truthy() {
                    continue;
                }
                let V::Arr(records) = records else {
                    return otlp_at(
                        format!("logRecords must be a list, got {}", self.shown(records)?),
                        format!("resourceLogs[{i}].scopeLogs[{j}]"),
                    );
                };
                for (k, lr) in records.iter().enumerate() {
                    seen += 1;
                    self.record(lr, whole_scope, out).map_err(|f| {
                        let at = format!("resourceLogs[{i}].scopeLogs[{j}].logRecords[{k}]");
                        self.in_record(f, at, "malformed log record")
                    })?;
                }
            }
        }
        Ok(seen)
    }

    fn record(&mut self, lr: &V, whole_scope: bool, out: &Bound<'py, PyList>) -> R<()> {
        let py = self.py;
        let V::Obj(lr) = lr else {
            return otlp(format!("expected an object, got {}", self.shown(lr)?));
        };
        let named = lr.get_or("eventName", "event_name");
        let mut event_name = match named {
            V::Str(n) => PyString::new(py, n),
            _ if !named.truthy() => PyString::new(py, ""),
            _ => {
                return otlp(format!(
                    "event name must be a string: {}",
                    self.shown(named)?
                ))
            }
        };
        let kvs = lr.get("attributes");
        let keep = whole_scope
            || matches!(named, V::Str(n) if self.marks.event(n))
            || self.any_genai_key(kvs, true)?;
        if !keep {
            return Ok(());
        }
        let raw = lr.get_or("traceId", "trace_id");
        let trace_id = if raw.truthy() {
            self.id(raw, 16, "trace id", true)?
        } else {
            PyString::new(py, "")
        };
        let raw = lr.get_or("spanId", "span_id");
        let span_id = if raw.truthy() {
            self.id(raw, 8, "span id", false)?
        } else {
            PyString::new(py, "")
        };
        let attributes = self.attributes(kvs)?;
        if event_name.is_empty()? {
            if let Some(found) = attributes.get_item("event.name")? {
                if let Ok(found) = found.cast_into::<PyString>() {
                    event_name = found;
                }
            }
        }
        let mut raw = lr.get_or("timeUnixNano", "time_unix_nano");
        if !raw.truthy() {
            raw = lr.get_or("observedTimeUnixNano", "observed_time_unix_nano");
        }
        let time = self.time(raw, "log")?;
        let body = self.any_value(lr.get("body"))?;
        let record = self
            .h
            .log
            .bind(py)
            .call1((trace_id, span_id, event_name, time, body, attributes))?;
        out.append(record)?;
        Ok(())
    }
}

/// `value or ""` when that is a string.
fn str_or_empty<'v>(v: &'v V) -> Option<&'v str> {
    match v {
        V::Str(s) => Some(s),
        _ if !v.truthy() => Some(""),
        _ => None,
    }
}
