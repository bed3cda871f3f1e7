//! OTLP export requests cut into resource/scope groups and spans, and framed again, on the
//! wire (see attest_otel/sidecar/wire.py for why). These walks read framing only; what is
//! inside a span was checked before (`check`). Every range is into the request's bytes.

use crate::fields::num;
use crate::varint;

pub type Range = (usize, usize);

#[derive(Debug)]
pub struct WireErr(pub String);

impl WireErr {
    fn truncated() -> Self {
        WireErr("truncated protobuf".into())
    }
}

// One-byte tags of the length-delimited fields the fast paths look for.
const fn tag2(number: u32) -> u8 {
    ((number << 3) | 2) as u8
}
pub const RESOURCE_SPANS_TAG: u8 = tag2(num::EXPORT_TRACE_SERVICE_REQUEST_RESOURCE_SPANS);
pub const SCOPE_SPANS_TAG: u8 = tag2(num::RESOURCE_SPANS_SCOPE_SPANS);
pub const SPAN_TAG: u8 = tag2(num::SCOPE_SPANS_SPANS);
/// Spans of a ScopeSpans and log records of a ScopeLogs are both field 2 (`walk_scope`).
const RECORDS_NUMBER: u64 = num::SCOPE_SPANS_SPANS as u64;
const _: () = assert!(num::SCOPE_LOGS_LOG_RECORDS == num::SCOPE_SPANS_SPANS);
const _: () = assert!(num::RESOURCE_LOGS_SCOPE_LOGS == num::RESOURCE_SPANS_SCOPE_SPANS);
const TRACE_ID_TAG: u8 = tag2(num::SPAN_TRACE_ID);
const SPAN_ID_TAG: u8 = tag2(num::SPAN_SPAN_ID);
const TRACE_STATE_TAG: u8 = tag2(num::SPAN_TRACE_STATE);
const PARENT_TAG: u8 = tag2(num::SPAN_PARENT_SPAN_ID);
const NAME_TAG: u8 = tag2(num::SPAN_NAME);
const TRACE_ID_LEN: u8 = 16;
const SPAN_ID_LEN: u8 = 8;

#[inline]
fn byte(data: &[u8], i: usize) -> Result<u8, WireErr> {
    data.get(i).copied().ok_or_else(WireErr::truncated)
}

#[inline]
fn read_varint(data: &[u8], pos: usize, end: usize) -> Result<(u64, usize), WireErr> {
    varint::read(data, pos, end).map_err(|e| {
        WireErr(match e {
            varint::VarintError::Truncated => "truncated varint".into(),
            varint::VarintError::TooLong => "varint too long".into(),
        })
    })
}

/// One field: number, wire type, tag start, value start, value end.
#[derive(Clone, Copy, Debug)]
pub struct FieldPos {
    pub number: u64,
    pub wire_type: u8,
    pub tag_start: usize,
    pub start: usize,
    pub end: usize,
}

/// The fields of `data[pos..end]` one by one; an error ends the walk.
pub struct Fields<'a> {
    data: &'a [u8],
    pos: usize,
    end: usize,
    failed: bool,
}

pub fn fields(data: &[u8], pos: usize, end: usize) -> Fields<'_> {
    Fields {
        data,
        pos,
        end,
        failed: false,
    }
}

impl<'a> Fields<'a> {
    fn step(&mut self) -> Result<FieldPos, WireErr> {
        let (data, end) = (self.data, self.end);
        let start = self.pos;
        let (tag, mut pos) = read_varint(data, start, end)?;
        let number = tag >> 3;
        let wire_type = (tag & 7) as u8;
        if number == 0 {
            return Err(WireErr(format!("field number 0 at byte {start}")));
        }
        let value_end;
        match wire_type {
            2 => {
                let (length, p) = read_varint(data, pos, end)?;
                pos = p;
                if length > (end - pos) as u64 {
                    return Err(WireErr(format!(
                        "field {number} at byte {start} runs past its message"
                    )));
                }
                value_end = pos + length as usize;
            }
            0 => value_end = read_varint(data, pos, end)?.1,
            1 | 5 => {
                value_end = pos + if wire_type == 1 { 8 } else { 4 };
                if value_end > end {
                    return Err(WireErr("field runs past the end of its message".into()));
                }
            }
            // An unknown group, which protobuf keeps: skipped whole, end-group tag included.
            3 => value_end = skip_group(data, pos, end, number)?,
            4 => {
                return Err(WireErr(format!(
                    "end-group tag without its group at byte {start}"
                )))
            }
            _ => return Err(WireErr(format!("unsupported wire type {wire_type}"))),
        }
        self.pos = value_end;
        Ok(FieldPos {
            number,
            wire_type,
            tag_start: start,
            start: pos,
            end: value_end,
        })
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<FieldPos, WireErr>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.end {
            return None;
        }
        let r = self.step();
        self.failed = r.is_err();
        Some(r)
    }
}

/// Where the group of field `number` whose fields start at `pos` ends (after its end-group
/// tag). upb's rules (check.rs): inside a group field numbers are not looked at, nested
/// groups must close in order. A stack, not recursion: the cut also reads unchecked bytes.
fn skip_group(data: &[u8], mut pos: usize, end: usize, number: u64) -> Result<usize, WireErr> {
    let mut open = vec![number];
    while let Some(&inner) = open.last() {
        if pos >= end {
            return Err(WireErr(format!("group {inner} not closed")));
        }
        let start = pos;
        let (tag, p) = read_varint(data, pos, end)?;
        pos = p;
        let n = tag >> 3;
        match tag & 7 {
            0 => pos = read_varint(data, pos, end)?.1,
            1 | 5 => {
                pos += if tag & 7 == 1 { 8 } else { 4 };
                if pos > end {
                    return Err(WireErr("field runs past the end of its group".into()));
                }
            }
            2 => {
                let (length, p) = read_varint(data, pos, end)?;
                if length > (end - p) as u64 {
                    return Err(WireErr(format!(
                        "field {n} at byte {start} runs past its group"
                    )));
                }
                pos = p + length as usize;
            }
            3 => open.push(n),
            4 if n == inner => {
                open.pop();
            }
            4 => {
                return Err(WireErr(format!(
                    "end-group tag of field {n} inside group {inner} at byte {start}"
                )))
            }
            w => return Err(WireErr(format!("unsupported wire type {w}"))),
        }
    }
    Ok(pos)
}

fn span_head_slow(data: &[u8], start: usize, end: usize) -> Result<(Range, Range), WireErr> {
    let mut trace_id = (0, 0);
    let mut name = (0, 0);
    for f in fields(data, start, end) {
        let f = f?;
        if f.number == num::SPAN_TRACE_ID as u64 {
            trace_id = (f.start, f.end);
        } else if f.number == num::SPAN_NAME as u64 {
            name = (f.start, f.end);
        }
    }
    Ok((trace_id, name))
}

/// (trace id, name) of the span in `data[start..end]`. Fast path for the field order
/// encoders write (trace_id, span_id, trace_state, parent_span_id, name); else a scan.
pub fn span_head(data: &[u8], start: usize, end: usize) -> Result<(Range, Range), WireErr> {
    let mut p = start;
    if end - p < 18 || data[p] != TRACE_ID_TAG || data[p + 1] != TRACE_ID_LEN {
        return span_head_slow(data, start, end);
    }
    let trace_id = (p + 2, p + 18);
    p += 18;
    for tag in [SPAN_ID_TAG, TRACE_STATE_TAG, PARENT_TAG] {
        if p < end && data[p] == tag {
            let length = if p + 1 < end { data[p + 1] } else { 0x80 };
            if length >= 0x80 {
                return span_head_slow(data, start, end);
            }
            p += 2 + length as usize;
        }
    }
    if p + 1 < end && data[p] == NAME_TAG {
        let length = data[p + 1] as usize;
        if length < 0x80 && p + 2 + length <= end {
            return Ok((trace_id, (p + 2, p + 2 + length)));
        }
    }
    span_head_slow(data, start, end)
}

fn links_slow(record: &[u8], start: usize, end: usize) -> (Range, Range) {
    let mut span_id = (0, 0);
    let mut parent = (0, 0);
    for f in fields(record, start, end) {
        let Ok(f) = f else {
            return ((0, 0), (0, 0));
        };
        if f.wire_type != 2 {
            continue;
        }
        if f.number == num::SPAN_SPAN_ID as u64 {
            span_id = (f.start, f.end);
        } else if f.number == num::SPAN_PARENT_SPAN_ID as u64 {
            parent = (f.start, f.end);
        }
    }
    (span_id, parent)
}

/// (span id, parent span id) of a span record (tag and length included); empty ranges
/// when unreadable. Never fails.
pub fn span_links(record: &[u8]) -> (Range, Range) {
    let end = record.len();
    if end < 2 {
        return ((0, 0), (0, 0));
    }
    let mut p = if record[1] < 0x80 {
        2
    } else {
        match varint::read(record, 1, end) {
            Ok((_, p)) => p,
            Err(_) => return ((0, 0), (0, 0)),
        }
    };
    let start = p;
    if end - p >= 28
        && record[p] == TRACE_ID_TAG
        && record[p + 1] == TRACE_ID_LEN
        && record[p + 18] == SPAN_ID_TAG
        && record[p + 19] == SPAN_ID_LEN
    {
        let span_id = (p + 20, p + 28);
        p += 28;
        if p < end && record[p] == TRACE_STATE_TAG {
            let size = if p + 1 < end { record[p + 1] } else { 0x80 };
            if size >= 0x80 {
                return links_slow(record, start, end);
            }
            p += 2 + size as usize;
        }
        if p + 1 < end && record[p] == PARENT_TAG {
            let size = record[p + 1] as usize;
            if size < 0x80 && p + 2 + size <= end {
                return (span_id, (p + 2, p + 2 + size));
            }
            return links_slow(record, start, end);
        }
        return (span_id, (0, 0));
    }
    links_slow(record, start, end)
}

/// One span as cut: its record (tag and length included), trace id and name.
pub struct SpanCut {
    pub record: Range,
    pub trace_id: Range,
    pub name: Range,
}

pub struct ScopeCutOf<R> {
    /// Every field of the ScopeSpans (ScopeLogs) but its records, in order (scope,
    /// schema_url, others).
    pub scope_parts: Vec<Range>,
    pub spans: Vec<R>,
}

pub struct ResourceCutOf<R> {
    /// Every field of the ResourceSpans (ResourceLogs) but its scopes, in order.
    pub resource_parts: Vec<Range>,
    pub scopes: Vec<ScopeCutOf<R>>,
}

pub type ScopeCut = ScopeCutOf<SpanCut>;
pub type ResourceCut = ResourceCutOf<SpanCut>;

/// The span record at `pos` (a one-byte field-2 tag there): (value start, value end).
#[inline]
fn span_record(data: &[u8], pos: usize, end: usize) -> Result<(usize, usize), WireErr> {
    let mut length = byte(data, pos + 1)? as u64;
    let vstart;
    if length < 0x80 {
        vstart = pos + 2;
    } else {
        let b2 = byte(data, pos + 2)?;
        if b2 < 0x80 {
            length = (length & 0x7F) | ((b2 as u64) << 7);
            vstart = pos + 3;
        } else {
            let (l, p) = read_varint(data, pos + 1, end)?;
            length = l;
            vstart = p;
        }
    }
    if length > end.saturating_sub(vstart) as u64 || vstart > end {
        return Err(WireErr(format!(
            "span at byte {pos} runs past its ScopeSpans"
        )));
    }
    Ok((vstart, vstart + length as usize))
}

/// Calls `each_span(record start, value start, value end)` for every span of the
/// ScopeSpans in `data[pos..end]` and returns the ranges of its other fields.
#[inline]
fn walk_scope(
    data: &[u8],
    mut pos: usize,
    end: usize,
    mut each_span: impl FnMut(usize, usize, usize) -> Result<bool, WireErr>,
) -> Result<Option<Vec<Range>>, WireErr> {
    let mut scope_parts = Vec::new();
    while pos < end {
        if data[pos] == SPAN_TAG {
            let (vstart, vend) = span_record(data, pos, end)?;
            if !each_span(pos, vstart, vend)? {
                return Ok(None);
            }
            pos = vend;
        } else {
            let f = fields(data, pos, end).next().expect("pos < end")?;
            if f.number == RECORDS_NUMBER && f.wire_type == 2 {
                // A record whose tag is a longer varint than an encoder writes: valid, but
                // a record here starts with its one-byte tag (`span_links`, re-framing).
                return Err(WireErr(format!(
                    "record at byte {pos} has an overlong tag (not re-framed)"
                )));
            }
            scope_parts.push((f.tag_start, f.end));
            pos = f.end;
        }
    }
    Ok(Some(scope_parts))
}

/// Every ResourceSpans of a request cut into its parts.
pub fn split(data: &[u8]) -> Result<Vec<ResourceCut>, WireErr> {
    split_with(data, |record, vstart, vend| {
        let (trace_id, name) = span_head(data, vstart, vend)?;
        Ok(SpanCut {
            record,
            trace_id,
            name,
        })
    })
}

/// The cut both signals share; `record(record range, value start, value end)` reads a
/// record's head.
pub(crate) fn split_with<R>(
    data: &[u8],
    mut record: impl FnMut(Range, usize, usize) -> Result<R, WireErr>,
) -> Result<Vec<ResourceCutOf<R>>, WireErr> {
    let mut out = Vec::new();
    for rs in fields(data, 0, data.len()) {
        let rs = rs?;
        if rs.number != 1 || rs.wire_type != 2 {
            continue;
        }
        let mut resource_parts = Vec::new();
        let mut scope_ranges = Vec::new();
        for f in fields(data, rs.start, rs.end) {
            let f = f?;
            if f.number == num::RESOURCE_SPANS_SCOPE_SPANS as u64 && f.wire_type == 2 {
                scope_ranges.push((f.start, f.end));
            } else {
                resource_parts.push((f.tag_start, f.end));
            }
        }
        let mut scopes = Vec::with_capacity(scope_ranges.len());
        for (ss_start, ss_end) in scope_ranges {
            let mut spans = Vec::new();
            let scope_parts = walk_scope(data, ss_start, ss_end, |rec, vstart, vend| {
                spans.push(record((rec, vend), vstart, vend)?);
                Ok(true)
            })?
            .unwrap_or_default();
            scopes.push(ScopeCutOf { scope_parts, spans });
        }
        out.push(ResourceCutOf {
            resource_parts,
            scopes,
        });
    }
    Ok(out)
}

/// The instrumentation scope's name in a ScopeSpans' non-span fields (as `split` gives
/// them): field 1 of the first field 1.
pub fn scope_name<'d>(data: &'d [u8], parts: &[Range]) -> Result<&'d [u8], WireErr> {
    for &(s, e) in parts {
        for f in fields(data, s, e) {
            let f = f?;
            if f.number == num::SCOPE_SPANS_SCOPE as u64 {
                for g in fields(data, f.start, f.end) {
                    let g = g?;
                    if g.number == num::INSTRUMENTATION_SCOPE_NAME as u64 {
                        return Ok(&data[g.start..g.end]);
                    }
                }
                return Ok(&[]);
            }
        }
    }
    Ok(&[])
}

/// The spans and trace ids of a request none of whose scopes or span names `is_genai`
/// marks; None as soon as one does.
pub fn plain<'d>(
    data: &'d [u8],
    name_marks: impl Fn(&[u8]) -> bool,
    scope_marks: impl Fn(&[u8]) -> bool,
) -> Result<Option<(usize, Vec<&'d [u8]>)>, WireErr> {
    let mut count = 0usize;
    let mut trace_ids: Vec<&'d [u8]> = Vec::new();
    for rs in fields(data, 0, data.len()) {
        let rs = rs?;
        if rs.number != 1 || rs.wire_type != 2 {
            continue;
        }
        for ss in fields(data, rs.start, rs.end) {
            let ss = ss?;
            if ss.number != num::RESOURCE_SPANS_SCOPE_SPANS as u64 || ss.wire_type != 2 {
                continue;
            }
            let first = count;
            let parts = walk_scope(data, ss.start, ss.end, |_rec, vstart, vend| {
                let (trace_id, name) = span_head(data, vstart, vend)?;
                if name_marks(&data[name.0..name.1]) {
                    return Ok(false);
                }
                trace_ids.push(&data[trace_id.0..trace_id.1]);
                count += 1;
                Ok(true)
            })?;
            let Some(parts) = parts else {
                return Ok(None);
            };
            if count > first && scope_marks(scope_name(data, &parts)?) {
                return Ok(None);
            }
        }
    }
    Ok(Some((count, trace_ids)))
}

/// Appends `tag`, the length of `parts` together, and the parts.
pub fn frame(out: &mut Vec<u8>, tag: u8, parts: &[&[u8]]) {
    let size: usize = parts.iter().map(|p| p.len()).sum();
    out.reserve(1 + varint::len(size as u64) + size);
    out.push(tag);
    varint::write(out, size as u64);
    for p in parts {
        out.extend_from_slice(p);
    }
}

/// One ResourceSpans record (tag included) holding `spans` under the given origin.
pub fn encode_spans(out: &mut Vec<u8>, resource: &[u8], scope: &[u8], spans: &[&[u8]]) {
    let inner: usize = scope.len() + spans.iter().map(|s| s.len()).sum::<usize>();
    let scope_spans = 1 + varint::len(inner as u64) + inner;
    let outer = resource.len() + scope_spans;
    out.reserve(1 + varint::len(outer as u64) + outer);
    out.push(RESOURCE_SPANS_TAG);
    varint::write(out, outer as u64);
    out.extend_from_slice(resource);
    out.push(SCOPE_SPANS_TAG);
    varint::write(out, inner as u64);
    out.extend_from_slice(scope);
    for s in spans {
        out.extend_from_slice(s);
    }
}

fn join(data: &[u8], parts: &[Range]) -> Vec<u8> {
    let mut out = Vec::with_capacity(parts.iter().map(|(s, e)| e - s).sum());
    for &(s, e) in parts {
        out.extend_from_slice(&data[s..e]);
    }
    out
}

/// `data` with `extra(span id)` appended to each span it names, and how many changed.
/// Each ResourceSpans keeps its fields and each ScopeSpans its scope; the fields that are
/// neither (none in OTLP) are dropped, as is a ResourceSpans without ScopeSpans.
pub fn append_to_spans<'x>(
    data: &[u8],
    extra: impl Fn(&[u8]) -> Option<&'x [u8]>,
) -> Result<(Vec<u8>, usize), WireErr> {
    let mut out = Vec::with_capacity(data.len() + 4096);
    let mut changed = 0;
    for rc in split(data)? {
        if rc.scopes.is_empty() {
            continue;
        }
        let resource = join(data, &rc.resource_parts);
        let mut scopes_bytes: Vec<Vec<u8>> = Vec::with_capacity(rc.scopes.len());
        for sc in &rc.scopes {
            let scope = join(data, &sc.scope_parts);
            let mut body = scope;
            for span in &sc.spans {
                let record = &data[span.record.0..span.record.1];
                let (sid, _) = span_links(record);
                match extra(&record[sid.0..sid.1]) {
                    Some(add) => {
                        let (_, start) = read_varint(record, 1, record.len())?;
                        frame(&mut body, SPAN_TAG, &[&record[start..], add]);
                        changed += 1;
                    }
                    None => body.extend_from_slice(record),
                }
            }
            let mut framed = Vec::with_capacity(body.len() + 6);
            frame(&mut framed, SCOPE_SPANS_TAG, &[&body]);
            scopes_bytes.push(framed);
        }
        let mut parts: Vec<&[u8]> = vec![&resource];
        parts.extend(scopes_bytes.iter().map(|s| s.as_slice()));
        frame(&mut out, RESOURCE_SPANS_TAG, &parts);
    }
    Ok((out, changed))
}

/// `data` cut into requests of at most `max_bytes`, at span boundaries; a span larger than
/// that goes alone.
pub fn split_to_size(data: &[u8], max_bytes: usize) -> Result<Vec<Vec<u8>>, WireErr> {
    if data.len() <= max_bytes {
        return Ok(vec![data.to_vec()]);
    }
    let mut out = Vec::new();
    let mut current: Vec<u8> = Vec::new();
    for rc in split(data)? {
        let resource = join(data, &rc.resource_parts);
        for sc in &rc.scopes {
            let scope = join(data, &sc.scope_parts);
            let overhead = resource.len() + scope.len() + 16;
            let mut pending: Vec<&[u8]> = Vec::new();
            let mut pending_size = overhead;
            let put = |pending: &[&[u8]], current: &mut Vec<u8>, out: &mut Vec<Vec<u8>>| {
                let mut record = Vec::new();
                encode_spans(&mut record, &resource, &scope, pending);
                if current.len() + record.len() > max_bytes && !current.is_empty() {
                    out.push(std::mem::take(current));
                }
                current.extend_from_slice(&record);
            };
            for span in &sc.spans {
                let record = &data[span.record.0..span.record.1];
                if !pending.is_empty() && pending_size + record.len() > max_bytes {
                    put(&pending, &mut current, &mut out);
                    pending.clear();
                    pending_size = overhead;
                }
                pending.push(record);
                pending_size += record.len();
            }
            if !pending.is_empty() {
                put(&pending, &mut current, &mut out);
            }
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    Ok(out)
}

/// (start, end) of each ResourceSpans record (tag and length included).
pub fn resource_spans(data: &[u8]) -> Result<Vec<Range>, WireErr> {
    let mut out = Vec::new();
    for f in fields(data, 0, data.len()) {
        let f = f?;
        if f.number == 1 && f.wire_type == 2 {
            out.push((f.tag_start, f.end));
        }
    }
    Ok(out)
}
