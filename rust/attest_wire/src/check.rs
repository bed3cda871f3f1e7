//! Is this a valid encoding of an OTLP message, as protobuf (upb, what Python's protobuf and
//! the next hop parse with) would judge it? Walked against the generated field table, nothing
//! built. The verdict must equal `Message.FromString`'s on the same bytes, which
//! tests/fuzz/test_wire_differential.py checks. upb's rules, as followed here:
//!
//! - tags are varints of at most 5 bytes with a value below 2^32, field number not 0 (but
//!   inside an unknown group, where upb does not look), wire types 0-5 (6 and 7 are errors);
//! - a known field whose wire type does not fit its type is kept as an unknown field; a
//!   repeated scalar may come packed (length-delimited), whose contents must divide evenly;
//! - a length is a varint of at most 5 bytes, below 2^31 - 1 and inside its message; a
//!   proto3 `string` holds UTF-8;
//! - messages nest at most 100 deep below the root, counting groups (kept as unknown
//!   fields), and a group ends with the end-group tag of its own number.

use crate::fields::{msg, num, MESSAGES};
use crate::probe::{scope_marked, PrefixSet, ScopeMarks};
use crate::schema::Kind;
use crate::varint;

/// upb's default depth limit, which Python's protobuf uses.
pub const MAX_DEPTH: i32 = 100;

/// upb reads a tag or a length as a 32-bit varint: more bytes than that are refused even
/// when the value is small (a padded encoding), though a value's varint may take ten.
pub const MAX_TAG_OR_LENGTH_BYTES: usize = 5;

pub struct Checker<'a, 's, 'p> {
    data: &'a [u8],
    depth: i32,
    scan: Option<&'s mut PlainScan<'p>>,
}

/// None when `data` is a valid `MESSAGES[root]`, else why not.
pub fn check(data: &[u8], root: u16) -> Option<String> {
    let mut c = Checker {
        data,
        depth: MAX_DEPTH,
        scan: None,
    };
    c.message(0, data.len(), Some(root), false, None).err()
}

/// What the validation walk of a traces request learns on the way, for the request path's
/// "plain" test (no span of it may be GenAI): the spans, their trace ids, and whether any
/// span's name, scope name or attribute key is marked. The parser's view: the last value of
/// a field wins, attribute keys are those of `Span.attributes`.
pub struct PlainScan<'p> {
    pub key_prefixes: &'p PrefixSet,
    pub name_prefixes: &'p PrefixSet,
    pub name_suffixes: &'p PrefixSet,
    pub scope_markers: &'p ScopeMarks,
    pub marked: bool,
    pub count: usize,
    pub trace_ids: Vec<(usize, usize)>,
    span_trace_id: (usize, usize),
    scope_name: (usize, usize),
}

impl<'p> PlainScan<'p> {
    pub fn new(
        key_prefixes: &'p PrefixSet,
        name_prefixes: &'p PrefixSet,
        name_suffixes: &'p PrefixSet,
        scope_markers: &'p ScopeMarks,
    ) -> Self {
        PlainScan {
            key_prefixes,
            name_prefixes,
            name_suffixes,
            scope_markers,
            marked: false,
            count: 0,
            trace_ids: Vec::new(),
            span_trace_id: (0, 0),
            scope_name: (0, 0),
        }
    }
}

/// `check` of an ExportTraceServiceRequest that fills `scan` on the way.
pub fn check_traces(data: &[u8], scan: &mut PlainScan<'_>) -> Option<String> {
    let mut c = Checker {
        data,
        depth: MAX_DEPTH,
        scan: Some(scan),
    };
    c.message(
        0,
        data.len(),
        Some(msg::EXPORT_TRACE_SERVICE_REQUEST),
        false,
        None,
    )
    .err()
}

fn corrupt(what: &str, at: usize) -> String {
    format!("wire format is corrupt: {what} at byte {at}")
}

impl<'a, 's, 'p> Checker<'a, 's, 'p> {
    /// The scan's look at a string or bytes field of message `m` (`attr`: a KeyValue of
    /// `Span.attributes`).
    #[inline]
    fn note(&mut self, m: u16, number: u32, attr: bool, value: (usize, usize)) {
        let Some(scan) = self.scan.as_deref_mut() else {
            return;
        };
        let data = self.data;
        let text = || &data[value.0..value.1];
        match m {
            msg::KEY_VALUE if attr && number == num::KEY_VALUE_KEY => {
                if !scan.marked && scan.key_prefixes.starts(text()) {
                    scan.marked = true;
                }
            }
            msg::SPAN if number == num::SPAN_NAME => {
                if !scan.marked
                    && (scan.name_prefixes.starts(text()) || scan.name_suffixes.ends(text()))
                {
                    scan.marked = true;
                }
            }
            msg::SPAN if number == num::SPAN_TRACE_ID => scan.span_trace_id = value,
            msg::INSTRUMENTATION_SCOPE if number == num::INSTRUMENTATION_SCOPE_NAME => {
                scan.scope_name = value
            }
            _ => {}
        }
    }

    #[inline]
    fn varint(&self, pos: usize, end: usize) -> Result<(u64, usize), String> {
        varint::read(self.data, pos, end).map_err(|e| match e {
            varint::VarintError::Truncated => corrupt("truncated varint", pos),
            varint::VarintError::TooLong => corrupt("varint longer than 10 bytes", pos),
        })
    }

    #[inline]
    fn length(&self, pos: usize, end: usize) -> Result<(usize, usize), String> {
        let (len, p) = self.varint(pos, end)?;
        if p - pos > MAX_TAG_OR_LENGTH_BYTES {
            return Err(corrupt("length longer than 5 bytes", pos));
        }
        if len >= i32::MAX as u64 || len > (end - p) as u64 {
            return Err(corrupt("length past the end of its message", pos));
        }
        Ok((p + len as usize, p))
    }

    fn nested(&mut self, at: usize) -> Result<(), String> {
        self.depth -= 1;
        if self.depth < 0 {
            return Err(format!(
                "nested too deeply (more than {MAX_DEPTH} messages) at byte {at}"
            ));
        }
        Ok(())
    }

    /// Walks the fields of `msg` (None: an unknown group's, all unknown) in `pos..end`;
    /// inside a group, up to and including its end-group tag. Returns where it stopped.
    fn message(
        &mut self,
        mut pos: usize,
        end: usize,
        m: Option<u16>,
        attr: bool,
        group: Option<u32>,
    ) -> Result<usize, String> {
        let message = m.map(|i| &MESSAGES[i as usize]);
        loop {
            if pos >= end {
                return match group {
                    None => Ok(pos),
                    Some(n) => Err(corrupt(&format!("group {n} not closed"), pos)),
                };
            }
            let start = pos;
            let (tag, p) = self.varint(pos, end)?;
            if tag > u32::MAX as u64 {
                return Err(corrupt("tag above 2^32", start));
            }
            if p - start > MAX_TAG_OR_LENGTH_BYTES {
                return Err(corrupt("tag longer than 5 bytes", start));
            }
            let number = (tag >> 3) as u32;
            let wire_type = (tag & 7) as u8;
            // upb skips an unknown group's fields without looking at their numbers.
            if number == 0 && group.is_none() {
                return Err(corrupt("field number 0", start));
            }
            pos = p;
            let field = match message {
                Some(d) => d.field(number),
                None => None,
            };
            match wire_type {
                0 => {
                    pos = self.varint(pos, end)?.1;
                }
                1 => {
                    if end - pos < 8 {
                        return Err(corrupt("truncated fixed64", start));
                    }
                    pos += 8;
                }
                5 => {
                    if end - pos < 4 {
                        return Err(corrupt("truncated fixed32", start));
                    }
                    pos += 4;
                }
                2 => {
                    let (vend, vstart) = self.length(pos, end)?;
                    if let Some(f) = field {
                        match f.kind {
                            Kind::Str => {
                                let text = &self.data[vstart..vend];
                                if !text.is_ascii() && std::str::from_utf8(text).is_err() {
                                    return Err(format!(
                                        "invalid UTF-8 in string field {}.{} at byte {}",
                                        message.map(|d| d.name).unwrap_or(""),
                                        f.name,
                                        start
                                    ));
                                }
                                if let Some(m) = m {
                                    self.note(m, number, attr, (vstart, vend));
                                }
                            }
                            Kind::Bytes => {
                                if let Some(m) = m {
                                    self.note(m, number, attr, (vstart, vend));
                                }
                            }
                            Kind::Message(i) => {
                                self.nested(start)?;
                                self.submessage(m, number, i, vstart, vend)?;
                                self.depth += 1;
                            }
                            Kind::Varint if f.repeated => {
                                let mut q = vstart;
                                while q < vend {
                                    q = self.varint(q, vend)?.1;
                                }
                            }
                            Kind::Fixed64 if f.repeated => {
                                if (vend - vstart) % 8 != 0 {
                                    return Err(corrupt("packed fixed64 of odd size", start));
                                }
                            }
                            Kind::Fixed32 if f.repeated => {
                                if (vend - vstart) % 4 != 0 {
                                    return Err(corrupt("packed fixed32 of odd size", start));
                                }
                            }
                            // A singular scalar sent length-delimited: an unknown field.
                            _ => {}
                        }
                    }
                    pos = vend;
                }
                3 => {
                    self.nested(start)?;
                    pos = self.message(pos, end, None, false, Some(number))?;
                    self.depth += 1;
                }
                4 => {
                    return if group == Some(number) {
                        Ok(pos)
                    } else {
                        Err(corrupt("end-group tag without its group", start))
                    };
                }
                _ => return Err(corrupt(&format!("wire type {wire_type}"), start)),
            }
        }
    }

    /// A message field's value, with the scan's bookkeeping around spans and scopes.
    fn submessage(
        &mut self,
        parent: Option<u16>,
        number: u32,
        child: u16,
        vstart: usize,
        vend: usize,
    ) -> Result<(), String> {
        let attr = parent == Some(msg::SPAN) && number == num::SPAN_ATTRIBUTES;
        if self.scan.is_none() || (child != msg::SPAN && child != msg::SCOPE_SPANS) {
            self.message(vstart, vend, Some(child), attr, None)?;
            return Ok(());
        }
        let scan = self.scan.as_deref_mut().expect("checked");
        let before = scan.count;
        if child == msg::SPAN {
            scan.span_trace_id = (0, 0);
        } else {
            scan.scope_name = (0, 0);
        }
        self.message(vstart, vend, Some(child), attr, None)?;
        let data = self.data;
        let scan = self.scan.as_deref_mut().expect("checked");
        if child == msg::SPAN {
            scan.count += 1;
            scan.trace_ids.push(scan.span_trace_id);
        } else if scan.count > before && !scan.marked {
            let name = &data[scan.scope_name.0..scan.scope_name.1];
            if scope_marked(name, scan.scope_markers) {
                scan.marked = true;
            }
        }
        Ok(())
    }
}
