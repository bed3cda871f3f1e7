//! The values of OTLP/JSON as the walk (`json_walk.rs`) reads them: `AnyValue`s, attribute
//! lists, events, times, enums and ids, each with the rules of `ingest/otlp_json.py` (its
//! module docstring), and the span `source` handle (`JsonSpan`). The rare spellings whose
//! reading is Python's own are handed to that module's helpers (`Helpers`).

use pyo3::exceptions::{PyAttributeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};

use crate::json::{Obj, V};
use crate::json_walk::{otlp, Fail, Walk, R};

/// The GenAI marks of `ingest.candidate`, as plain strings.
#[pyclass(frozen, module = "attest_otel_wire")]
pub struct JsonMarks {
    keys: Vec<String>,
    names: Vec<String>,
    suffixes: Vec<String>,
    events: Vec<String>,
    /// Keys of transport spans (HTTP, database, messaging): a skeleton with one is noted
    /// (`JsonSpan.has_transport_key`), so the generic reader need not hydrate it.
    transports: Vec<String>,
}

#[pymethods]
impl JsonMarks {
    #[new]
    #[pyo3(signature = (key_prefixes, name_prefixes, name_suffixes, event_prefixes, transport_prefixes=vec![]))]
    pub(crate) fn new(
        key_prefixes: Vec<String>,
        name_prefixes: Vec<String>,
        name_suffixes: Vec<String>,
        event_prefixes: Vec<String>,
        transport_prefixes: Vec<String>,
    ) -> Self {
        JsonMarks {
            keys: key_prefixes,
            names: name_prefixes,
            suffixes: name_suffixes,
            events: event_prefixes,
            transports: transport_prefixes,
        }
    }
}

impl JsonMarks {
    pub fn none() -> Self {
        JsonMarks {
            keys: vec![],
            names: vec![],
            suffixes: vec![],
            events: vec![],
            transports: vec![],
        }
    }

    /// Whether an attribute list (already scanned by `any_genai_key`) has a key starting
    /// with a transport prefix; what is no list of objects has none.
    pub fn any_transport_key(&self, kvs: &V) -> bool {
        if self.transports.is_empty() {
            return false;
        }
        let V::Arr(list) = kvs else { return false };
        list.iter().any(|kv| match kv {
            V::Obj(o) => match o.get("key") {
                V::Str(key) => self.transports.iter().any(|p| key.starts_with(p.as_str())),
                _ => false,
            },
            _ => false,
        })
    }

    pub fn key(&self, key: &str) -> bool {
        self.keys.iter().any(|p| key.starts_with(p.as_str()))
    }

    /// `candidate.is_genai_name`: a prefix, or the text from the last dot a suffix.
    pub fn name(&self, name: &str) -> bool {
        if self.names.iter().any(|p| name.starts_with(p.as_str())) {
            return true;
        }
        match name.rfind('.') {
            Some(dot) => self.suffixes.iter().any(|s| s == &name[dot..]),
            None => false,
        }
    }

    pub fn event(&self, name: &str) -> bool {
        self.events.iter().any(|p| name.starts_with(p.as_str()))
    }
}

/// The Python objects a walk builds with or hands rare values to.
pub struct Helpers {
    pub span: Py<PyAny>,
    pub event: Py<PyAny>,
    pub log: Py<PyAny>,
    pub malformed: Py<PyAny>,
    pub shown: Py<PyAny>,
    pub text_id: Py<PyAny>,
    pub time: Py<PyAny>,
    pub enumeration: Py<PyAny>,
    pub int_of: Py<PyAny>,
    pub float_of: Py<PyAny>,
    pub bytes_of: Py<PyAny>,
    pub genai_scope: Py<PyAny>,
    pub kinds: Py<PyAny>,
    pub statuses: Py<PyAny>,
}

/// Plain lower-case hex of `text` when it is exactly `n` ASCII hex digits.
fn plain_hex(text: &str, n: usize) -> Option<String> {
    (text.len() == n && text.bytes().all(|c| c.is_ascii_hexdigit()))
        .then(|| text.to_ascii_lowercase())
}

fn ascii_digits(text: &str, most: usize) -> bool {
    !text.is_empty() && text.len() <= most && text.bytes().all(|c| c.is_ascii_digit())
}

/// Python's error of `iter(value)` for what cannot be iterated, and of `.get` on an
/// iterated item that is no dict.
fn not_iterable(v: &V) -> PyErr {
    PyTypeError::new_err(format!("'{}' object is not iterable", v.type_name()))
}

fn no_get(type_name: &str) -> PyErr {
    PyAttributeError::new_err(format!("'{type_name}' object has no attribute 'get'"))
}

impl<'py> Walk<'py, '_> {
    /// The Python object `json.loads` gives for `v`.
    pub fn to_py(&self, v: &V) -> PyResult<Bound<'py, PyAny>> {
        let py = self.py;
        Ok(match v {
            V::Null => py.None().into_bound(py),
            V::Bool(b) => b.into_pyobject(py)?.to_owned().into_any(),
            V::Int(i) => i.into_pyobject(py)?.into_any(),
            V::UInt(u) => u.into_pyobject(py)?.into_any(),
            V::Big(text) => py
                .get_type::<pyo3::types::PyInt>()
                .call1((PyString::new(py, text),))?,
            V::Float(f) => f.into_pyobject(py)?.into_any(),
            V::Str(s) => PyString::new(py, s).into_any(),
            V::Arr(a) => {
                let out = PyList::empty(py);
                for item in a {
                    out.append(self.to_py(item)?)?;
                }
                out.into_any()
            }
            V::Obj(o) => {
                let out = PyDict::new(py);
                for (k, item) in &o.items {
                    out.set_item(PyString::new(py, k), self.to_py(item)?)?;
                }
                out.into_any()
            }
        })
    }

    /// `otlp_json._shown`: the value's repr, cut to 60 characters.
    pub fn shown(&self, v: &V) -> R<String> {
        let value = self.to_py(v)?;
        Ok(self.h.shown.bind(self.py).call1((value,))?.extract()?)
    }

    /// A helper's exception as the walk carries it: `MalformedOTLP` with its path.
    pub(crate) fn helper_failed(&self, e: PyErr) -> Fail {
        let py = self.py;
        let value = e.value(py);
        if value
            .is_instance(self.h.malformed.bind(py))
            .unwrap_or(false)
        {
            let problem = value.getattr("problem").and_then(|p| p.extract::<String>());
            let at = value.getattr("where").and_then(|p| p.extract::<String>());
            if let (Ok(problem), Ok(at)) = (problem, at) {
                return Fail::Otlp { problem, at };
            }
        }
        Fail::Py(e)
    }

    pub(crate) fn call<A: pyo3::call::PyCallArgs<'py>>(
        &self,
        f: &Py<PyAny>,
        args: A,
    ) -> R<Bound<'py, PyAny>> {
        f.bind(self.py)
            .call1(args)
            .map_err(|e| self.helper_failed(e))
    }

    /// `otlp_json.any_value`.
    pub fn any_value(&self, v: &V) -> R<Bound<'py, PyAny>> {
        let py = self.py;
        let o = match v {
            V::Obj(o) => o,
            V::Null => return Ok(py.None().into_bound(py)),
            _ => {
                return otlp(format!(
                    "attribute value must be an object, got {}",
                    self.shown(v)?
                ))
            }
        };
        if let Some(V::Str(s)) = o.find("stringValue") {
            return Ok(PyString::new(py, s).into_any());
        }
        for key in o.keys() {
            let item = o.get(key);
            let found = match key.as_ref() {
                "stringValue" | "string_value" => match item {
                    V::Str(s) => Some(PyString::new(py, s).into_any()),
                    _ => None,
                },
                "intValue" | "int_value" => self.int_value(item)?,
                "doubleValue" | "double_value" => self.double_value(item)?,
                "boolValue" | "bool_value" => match item {
                    V::Bool(_) => Some(self.to_py(item)?),
                    _ => None,
                },
                "arrayValue" | "array_value" => match item {
                    V::Obj(a) => Some(self.array(a.get("values"))?.into_any()),
                    _ => None,
                },
                "kvlistValue" | "kvlist_value" => match item {
                    V::Obj(a) => Some(self.attributes(a.get("values"))?.into_any()),
                    _ => None,
                },
                "bytesValue" | "bytes_value" => match item {
                    V::Str(_) => {
                        let found = self.call(&self.h.bytes_of, (self.to_py(item)?,))?;
                        (!found.is_none()).then_some(found)
                    }
                    _ => None,
                },
                _ => continue, // unknown fields are ignored (OTLP/JSON rule)
            };
            return match found {
                Some(value) => Ok(value),
                None => otlp(format!("bad {key}: {}", self.shown(item)?)),
            };
        }
        Ok(py.None().into_bound(py)) // {} is an empty AnyValue
    }

    pub(crate) fn int_value(&self, item: &V) -> R<Option<Bound<'py, PyAny>>> {
        Ok(match item {
            V::Int(_) | V::UInt(_) | V::Big(_) => Some(self.to_py(item)?),
            V::Str(s) => {
                if ascii_digits(s, 18) {
                    Some(
                        s.parse::<i64>()
                            .unwrap_or(0)
                            .into_pyobject(self.py)?
                            .into_any(),
                    )
                } else {
                    let found = self.call(&self.h.int_of, (self.to_py(item)?,))?;
                    (!found.is_none()).then_some(found)
                }
            }
            V::Float(f) if f.is_finite() && f.fract() == 0.0 => {
                if f.abs() < 9.0e15 {
                    Some((*f as i64).into_pyobject(self.py)?.into_any())
                } else {
                    let int = self.py.get_type::<pyo3::types::PyInt>();
                    Some(int.call1((*f,))?)
                }
            }
            _ => None,
        })
    }

    pub(crate) fn double_value(&self, item: &V) -> R<Option<Bound<'py, PyAny>>> {
        let py = self.py;
        Ok(match item {
            V::Float(f) => Some(f.into_pyobject(py)?.into_any()),
            V::Int(i) => Some((*i as f64).into_pyobject(py)?.into_any()),
            V::UInt(_) | V::Big(_) => {
                let float = py.get_type::<pyo3::types::PyFloat>();
                Some(float.call1((self.to_py(item)?,))?) // OverflowError escapes, as in Python
            }
            V::Str(_) => {
                let found = self.call(&self.h.float_of, (self.to_py(item)?,))?;
                (!found.is_none()).then_some(found)
            }
            _ => None,
        })
    }

    /// `[any_value(v) for v in values or ()]`, iteration as Python iterates what it gets.
    pub(crate) fn array(&self, values: &V) -> R<Bound<'py, PyList>> {
        let out = PyList::empty(self.py);
        if !values.truthy() {
            return Ok(out);
        }
        match values {
            V::Arr(a) => {
                for item in a {
                    out.append(self.any_value(item)?)?;
                }
            }
            // A dict iterates its keys, a string its characters: no AnyValue either way.
            V::Obj(o) => {
                let first = V::Str(o.items[0].0.clone());
                return otlp(format!(
                    "attribute value must be an object, got {}",
                    self.shown(&first)?
                ));
            }
            V::Str(s) => {
                let first = V::Str(s.chars().next().unwrap_or(' ').to_string().into());
                return otlp(format!(
                    "attribute value must be an object, got {}",
                    self.shown(&first)?
                ));
            }
            _ => return Err(Fail::Py(not_iterable(values))),
        }
        Ok(out)
    }

    /// `otlp_json.attributes`: a list of {"key": k, "value": AnyValue} as a dict.
    pub fn attributes(&self, kvs: &V) -> R<Bound<'py, PyDict>> {
        let out = PyDict::new(self.py);
        if !kvs.truthy() {
            return Ok(out);
        }
        let V::Arr(list) = kvs else {
            return otlp(format!(
                "attributes must be a list, got {}",
                self.shown(kvs)?
            ));
        };
        for kv in list {
            let (key, value) = match kv {
                V::Obj(o) => match o.find("key") {
                    None => ("", o.get("value")), // omitted: "" (proto3)
                    Some(V::Str(k)) => (k.as_ref(), o.get("value")),
                    Some(_) => return self.bad_kv(kv),
                },
                _ => return self.bad_kv(kv),
            };
            out.set_item(PyString::new(self.py, key), self.any_value(value)?)?;
        }
        Ok(out)
    }

    pub(crate) fn bad_kv<T>(&self, kv: &V) -> R<T> {
        otlp(format!(
            "attribute must be {{\"key\": ..., \"value\": ...}}, got {}",
            self.shown(kv)?
        ))
    }

    /// `otlp_json.events`.
    pub fn events(&self, span: &Obj) -> R<Bound<'py, PyList>> {
        let out = PyList::empty(self.py);
        let found = span.get("events");
        if !found.truthy() {
            return Ok(out);
        }
        let V::Arr(list) = found else {
            return otlp(format!("events must be a list, got {}", self.shown(found)?));
        };
        for ev in list {
            let V::Obj(e) = ev else {
                return otlp(format!("event must be an object, got {}", self.shown(ev)?));
            };
            let name = self.text_or_empty(e.get("name"), "event name must be a string, got")?;
            let time = self.time(e.get_or("timeUnixNano", "time_unix_nano"), "event")?;
            let attributes = self.attributes(e.get("attributes"))?;
            out.append(self.h.event.bind(self.py).call1((name, time, attributes))?)?;
        }
        Ok(out)
    }

    /// `value or ""`, which must then be a string (else `problem` and the value shown).
    pub(crate) fn text_or_empty(&self, v: &V, problem: &str) -> R<Bound<'py, PyString>> {
        match v {
            V::Str(s) => Ok(PyString::new(self.py, s)),
            _ if !v.truthy() => Ok(PyString::new(self.py, "")),
            _ => otlp(format!("{problem} {}", self.shown(v)?)),
        }
    }

    /// A fixed64 time (`otlp_json._time`), `raw or 0`.
    pub(crate) fn time(&self, raw: &V, what: &str) -> R<Bound<'py, PyAny>> {
        let py = self.py;
        match raw {
            _ if !raw.truthy() => Ok(0u64.into_pyobject(py)?.into_any()),
            V::Int(i) if *i >= 0 => Ok(i.into_pyobject(py)?.into_any()),
            V::UInt(u) => Ok(u.into_pyobject(py)?.into_any()),
            V::Str(s) if ascii_digits(s, 20) => match s.parse::<u64>() {
                Ok(u) => Ok(u.into_pyobject(py)?.into_any()),
                Err(_) => self.call(&self.h.time, (self.to_py(raw)?, what)),
            },
            _ => self.call(&self.h.time, (self.to_py(raw)?, what)),
        }
    }

    /// `otlp_json._enum` for a value that is no int (ints are kept as they are).
    pub(crate) fn enumeration(&self, v: &V, names: &Py<PyAny>, what: &str) -> R<Bound<'py, PyAny>> {
        match v {
            V::Int(_) | V::UInt(_) | V::Big(_) => Ok(self.to_py(v)?),
            V::Str(s) if ascii_digits(s, 18) => Ok(s
                .parse::<i64>()
                .unwrap_or(0)
                .into_pyobject(self.py)?
                .into_any()),
            _ => self.call(
                &self.h.enumeration,
                (self.to_py(v)?, names.bind(self.py), what),
            ),
        }
    }

    pub(crate) fn id(
        &mut self,
        raw: &V,
        bytes: usize,
        what: &str,
        cache: bool,
    ) -> R<Bound<'py, PyString>> {
        if let V::Str(s) = raw {
            if cache {
                if let Some(found) = self.trace_ids.get(s.as_ref()) {
                    return Ok(found.clone());
                }
            }
            if let Some(hex) = plain_hex(s, 2 * bytes) {
                let out = PyString::new(self.py, &hex);
                if cache {
                    self.trace_ids.insert(s.to_string(), out.clone());
                }
                return Ok(out);
            }
        }
        let found = self.call(&self.h.text_id, (self.to_py(raw)?, bytes, what))?;
        Ok(found.cast_into::<PyString>().map_err(PyErr::from)?)
    }

    pub(crate) fn genai_scope(&mut self, name: &str) -> R<bool> {
        if let Some(&found) = self.scopes.get(name) {
            return Ok(found);
        }
        let found: bool = self.h.genai_scope.bind(self.py).call1((name,))?.extract()?;
        self.scopes.insert(name.to_string(), found);
        Ok(found)
    }

    /// A span attribute list's keys, scanned as `walk_traces` scans them: the first GenAI
    /// key ends it; what is no list of objects fails as Python's iteration did.
    pub(crate) fn any_genai_key(&self, kvs: &V, event_name_marks: bool) -> R<bool> {
        if !kvs.truthy() {
            return Ok(false);
        }
        match kvs {
            V::Arr(list) => {
                for kv in list {
                    let V::Obj(o) = kv else {
                        return Err(Fail::Py(no_get(kv.type_name())));
                    };
                    let V::Str(key) = o.get("key") else { continue };
                    if self.marks.key(key) {
                        return Ok(true);
                    }
                    if event_name_marks && key == "event.name" {
                        let named = self.any_value(o.get("value"))?;
                        if let Ok(named) = named.cast::<PyString>() {
                            if self.marks.event(&named.to_cow()?) {
                                return Ok(true);
                            }
                        }
                    }
                }
                Ok(false)
            }
            V::Obj(_) | V::Str(_) => Err(Fail::Py(no_get("str"))),
            _ => Err(Fail::Py(not_iterable(kvs))),
        }
    }

    /// A span or log record's failure with its path; Python's AttributeError, TypeError
    /// and ValueError as "malformed span: ..." (the walker's own catch).
    pub(crate) fn in_record(&self, fail: Fail, at: String, what: &str) -> Fail {
        match fail {
            Fail::Otlp { problem, .. } => Fail::Otlp { problem, at },
            Fail::Py(e) => {
                let py = self.py;
                if e.is_instance_of::<PyAttributeError>(py)
                    || e.is_instance_of::<PyTypeError>(py)
                    || e.is_instance_of::<PyValueError>(py)
                {
                    let text = e.value(py).str().map(|s| s.to_string()).unwrap_or_default();
                    Fail::Otlp {
                        problem: format!("{what}: {text}"),
                        at,
                    }
                } else {
                    Fail::Py(e)
                }
            }
        }
    }
}

/// A JSON span's `source`: its text, read again when `decode.hydrate` fills a skeleton.
#[pyclass(frozen, module = "attest_otel_wire")]
pub struct JsonSpan {
    pub text: Box<str>,
    /// Whether the span has attributes or events (what `decode.is_skeleton` asks).
    pub content: bool,
    /// A skeleton's attribute keys include a transport key (`JsonMarks`' last list).
    pub transport: bool,
}

#[pymethods]
impl JsonSpan {
    /// `content` (whether the span has attributes or events) is read from `text` when not
    /// given; a pickled `JsonSpan` gives it, so coming back costs no parse.
    /// `transport` is never read from `text` (it needs the marks): False, the safe answer,
    /// unless given.
    #[new]
    #[pyo3(signature = (text, content=None, transport=false))]
    pub(crate) fn new(text: &str, content: Option<bool>, transport: bool) -> PyResult<Self> {
        if let Some(content) = content {
            return Ok(JsonSpan {
                text: text.into(),
                content,
                transport,
            });
        }
        let (v, _) = crate::json::one_document(text, 0)
            .map_err(|_| PyValueError::new_err("not one JSON object"))?;
        let V::Obj(o) = v else {
            return Err(PyValueError::new_err("not one JSON object"));
        };
        let content = o.get("attributes").truthy() || o.get("events").truthy();
        Ok(JsonSpan {
            text: text.into(),
            content,
            transport,
        })
    }

    /// The span's JSON text.
    #[getter]
    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    #[getter]
    pub(crate) fn has_content(&self) -> bool {
        self.content
    }

    /// Whether the reader, leaving this span a skeleton, saw a transport key among its
    /// attributes' keys.
    #[getter]
    pub(crate) fn has_transport_key(&self) -> bool {
        self.transport
    }

    pub(crate) fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
        let py = slf.py();
        let cls = slf.get_type();
        let span = slf.get();
        let args = (&*span.text, span.content, span.transport).into_pyobject(py)?;
        PyTuple::new(py, [cls.into_any(), args.into_any()])
    }

    pub(crate) fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        match other.cast::<JsonSpan>() {
            Ok(o) => o.get().text == self.text,
            Err(_) => false,
        }
    }

    pub(crate) fn __repr__(&self) -> String {
        let shown: String = self.text.chars().take(60).collect();
        format!(
            "JsonSpan({shown:?}{})",
            if self.text.chars().count() > 60 {
                "..."
            } else {
                ""
            }
        )
    }
}
