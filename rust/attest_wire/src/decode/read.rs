//! Reading an OTLP request's bytes as protobuf's parser sees them: fields (groups skipped),
//! the occurrences of a message read as one, the members of AnyValue's oneof, and the fields
//! of the messages the decoder walks. No Python objects are made here.

use pyo3::prelude::*;

use super::MAX_NESTING;
use crate::fields::num;
use crate::varint;

pub(crate) type R = (usize, usize);

/// One or more byte ranges of a message: its occurrences, read as one concatenation.
#[derive(Default)]
pub(crate) struct Ranges {
    pub(crate) one: Option<R>,
    pub(crate) more: Vec<R>,
}

impl Ranges {
    #[inline]
    pub(crate) fn push(&mut self, r: R) {
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
    pub(crate) fn clear(&mut self) {
        self.one = None;
        self.more.clear();
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.one.is_none() && self.more.is_empty()
    }

    #[inline]
    pub(crate) fn as_slice(&self) -> &[R] {
        match &self.one {
            Some(r) => std::slice::from_ref(r),
            None => &self.more,
        }
    }
}

#[derive(Clone, Copy)]
pub(crate) enum V {
    Int(u64),
    F64(u64),
    F32,
    Len(usize, usize),
}

pub(crate) fn bad(what: String) -> PyErr {
    crate::WireError::new_err(what)
}

/// The fields of data[pos..end], groups skipped (upb keeps them as unknown fields).
pub(crate) struct Fields<'a> {
    pub(crate) data: &'a [u8],
    pub(crate) pos: usize,
    pub(crate) end: usize,
}

impl<'a> Fields<'a> {
    #[inline]
    pub(crate) fn new(data: &'a [u8], r: R) -> Self {
        Fields {
            data,
            pos: r.0,
            end: r.1.min(data.len()),
        }
    }

    #[inline]
    pub(crate) fn varint(&self, pos: usize) -> PyResult<(u64, usize)> {
        varint::read(self.data, pos, self.end).map_err(|_| bad(format!("bad varint at byte {pos}")))
    }

    #[inline]
    pub(crate) fn next_field(&mut self) -> PyResult<Option<(u32, V)>> {
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

    pub(crate) fn skip_group(&mut self, number: u32, depth: u32) -> PyResult<()> {
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
pub(crate) fn each(
    data: &[u8],
    ranges: &[R],
    mut f: impl FnMut(u32, V) -> PyResult<()>,
) -> PyResult<()> {
    for &r in ranges {
        let mut fields = Fields::new(data, r);
        while let Some((n, v)) = fields.next_field()? {
            f(n, v)?;
        }
    }
    Ok(())
}

/// An open enum or int32 field as upb reads it from a varint: its low 32 bits, signed.
#[inline]
pub(crate) fn int32(x: u64) -> i32 {
    x as u32 as i32
}

/// Whether (field, value) sets a member of AnyValue's oneof (a known field, its wire type).
#[inline]
pub(crate) fn any_member(n: u32, v: V) -> bool {
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
pub(crate) fn any_member_of(data: &[u8], ranges: &[R]) -> PyResult<(u32, V, Ranges)> {
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
pub(crate) fn string_value<'d>(data: &'d [u8], ranges: &Ranges) -> PyResult<&'d [u8]> {
    let (member, scalar, _) = any_member_of(data, ranges.as_slice())?;
    Ok(match (member, scalar) {
        (num::ANY_VALUE_STRING_VALUE, V::Len(s, e)) => &data[s..e],
        _ => b"",
    })
}

/// What the decoder reads of one span before it decides how much to build.
pub(crate) struct SpanFields {
    pub(crate) trace_id: R,
    pub(crate) span_id: R,
    pub(crate) parent: R,
    pub(crate) name: R,
    pub(crate) kind: u64,
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) attributes: Vec<R>,
    pub(crate) events: Vec<R>,
    pub(crate) status: Ranges,
}

pub(crate) fn span_fields(data: &[u8], r: R) -> PyResult<SpanFields> {
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
pub(crate) struct Group {
    pub(crate) head: Ranges,
    pub(crate) items: Vec<R>,
}

pub(crate) fn group(data: &[u8], r: R, head: u32, items: u32) -> PyResult<Group> {
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
pub(crate) fn scope_of(data: &[u8], ranges: &[R]) -> PyResult<(R, R)> {
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
pub(crate) fn top_level(data: &[u8]) -> PyResult<Vec<R>> {
    let mut out = Vec::new();
    each(data, &[(0, data.len())], |n, v| {
        if let (1, V::Len(s, e)) = (n, v) {
            out.push((s, e));
        }
        Ok(())
    })?;
    Ok(out)
}
