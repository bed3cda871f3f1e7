//! The wire core's verdict and cut against prost's decoding of the same bytes, as an
//! ExportTraceServiceRequest and as an ExportLogsServiceRequest.
//!
//! The core judges as upb does (check.rs), prost is a second, independent parser. Where the
//! two parsers differ by design, prost is the stricter one (docs/measurements.md, "The wire
//! core fuzzed"): it refuses a known field sent with another wire type (upb keeps it as an
//! unknown field), a ten-byte varint above 2^64 (upb drops the high bits), field number 0
//! inside an unknown group (upb does not look), and counts an unknown field as one more
//! level at the nesting limit. upb is the stricter one once: it refuses a tag or a length
//! padded to more than five bytes. So:
//!
//! - prost accepts => the core accepts (but for upb's padding rule), and the cut gives back
//!   prost's records exactly once, in order, each decoding to prost's; framed again they
//!   decode to the same placed records;
//! - the core accepts and prost refuses => prost's reason is one of those differences, and
//!   the cut (which the sidecar runs next) counts what the validation walk counted.

#![no_main]

use attest_otel_wire::check::{self, PlainScan};
use attest_otel_wire::cut;
use attest_otel_wire::fields::msg;
use attest_otel_wire::logs;
use attest_otel_wire::probe::{scope_marked, PrefixSet, ScopeMarks};
use libfuzzer_sys::fuzz_target;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

fuzz_target!(|data: &[u8]| {
    traces(data);
    logs(data);
    // The input as the one record of a request too: most mutations of a whole request
    // break its framing, those of a record reach the fields inside (heads, groups, UTF-8).
    let wrapped = frame(1, &frame(2, &frame(2, data)));
    traces(&wrapped);
    logs(&wrapped);
});

fn frame(number: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 6);
    cut::frame(&mut out, number << 3 | 2, &[payload]);
    out
}

/// prost refuses, upb (and so the core) accepts: the differences named above, by prost's
/// own words. The ten-byte varint is checked in the bytes too.
fn prost_is_stricter(error: &prost::DecodeError, data: &[u8]) -> bool {
    let text = error.to_string();
    if text.ends_with("invalid varint") {
        return has_overflowing_varint(data);
    }
    text.contains("invalid wire type: ")
        || text.ends_with("invalid tag value: 0")
        || text.ends_with("recursion limit reached")
}

/// upb refuses, prost accepts: a tag or a length padded to more than five bytes (upb reads
/// them as 32-bit varints, prost as 64-bit ones).
fn upb_is_stricter(problem: &str) -> bool {
    problem.contains("longer than 5 bytes")
}

/// Nine bytes with the continuation bit, then a last byte of 2..=127.
fn has_overflowing_varint(data: &[u8]) -> bool {
    data.windows(10)
        .any(|w| w[..9].iter().all(|b| b & 0x80 != 0) && (2..0x80).contains(&w[9]))
}

fn bytes(data: &[u8], r: cut::Range) -> &[u8] {
    &data[r.0..r.1]
}

/// The record's value, without its tag and length.
fn body(record: &[u8]) -> &[u8] {
    let (_, start) = attest_otel_wire::varint::read(record, 1, record.len()).expect("framed");
    &record[start..]
}

fn join(data: &[u8], parts: &[cut::Range]) -> Vec<u8> {
    parts
        .iter()
        .flat_map(|&r| bytes(data, r))
        .copied()
        .collect()
}

struct Marks {
    keys: PrefixSet,
    names: PrefixSet,
    suffixes: PrefixSet,
    scopes: ScopeMarks,
}

fn marks() -> Marks {
    let set =
        |items: &[&str]| PrefixSet::new(items.iter().map(|s| s.as_bytes().to_vec()).collect());
    Marks {
        keys: set(&["gen_ai.", "llm."]),
        names: set(&["chat ", "ai."]),
        suffixes: set(&[".llm"]),
        scopes: ScopeMarks {
            exact: vec![b"ai".to_vec()],
            contains: vec![b"openai".to_vec()],
        },
    }
}

fn traces(data: &[u8]) {
    let verdict = check::check(data, msg::EXPORT_TRACE_SERVICE_REQUEST);
    let m = marks();
    let mut scan = PlainScan::new(&m.keys, &m.names, &m.suffixes, &m.scopes);
    assert_eq!(check::check_traces(data, &mut scan), verdict);
    let parsed = ExportTraceServiceRequest::decode(data);
    match (&verdict, parsed) {
        (Some(_), Err(_)) => {}
        (Some(problem), Ok(_)) => {
            assert!(
                upb_is_stricter(problem),
                "the core refuses what prost accepts: {problem}"
            )
        }
        (None, Err(e)) => {
            assert!(
                prost_is_stricter(&e, data),
                "the core accepts what prost refuses: {e}"
            );
            if let Ok(cuts) = cut::split(data) {
                let count: usize = cuts
                    .iter()
                    .flat_map(|r| &r.scopes)
                    .map(|s| s.spans.len())
                    .sum();
                assert_eq!(count, scan.count, "the cut and the validation count apart");
            }
        }
        (None, Ok(req)) => same_spans(data, &req, &scan, &m),
    }
}

fn same_spans(data: &[u8], req: &ExportTraceServiceRequest, scan: &PlainScan<'_>, m: &Marks) {
    let placed: Vec<(Vec<u8>, Vec<u8>, &Span)> = req
        .resource_spans
        .iter()
        .flat_map(|rs| {
            let resource = rs.resource.clone().unwrap_or_default().encode_to_vec();
            rs.scope_spans.iter().flat_map(move |ss| {
                let scope = ss.scope.clone().unwrap_or_default().encode_to_vec();
                let resource = resource.clone();
                ss.spans
                    .iter()
                    .map(move |s| (resource.clone(), scope.clone(), s))
            })
        })
        .collect();
    // The validation walk's own count, trace ids and marks: the parser's view.
    assert_eq!(scan.count, placed.len());
    let ids: Vec<&[u8]> = scan.trace_ids.iter().map(|&r| bytes(data, r)).collect();
    let want: Vec<&[u8]> = placed
        .iter()
        .map(|(_, _, s)| s.trace_id.as_slice())
        .collect();
    assert_eq!(ids, want, "trace ids");
    let marked = req
        .resource_spans
        .iter()
        .flat_map(|rs| &rs.scope_spans)
        .any(|ss| {
            let scope = ss
                .scope
                .as_ref()
                .map(|s| s.name.as_bytes())
                .unwrap_or_default();
            (!ss.spans.is_empty() && scope_marked(scope, &m.scopes))
                || ss.spans.iter().any(|s| {
                    m.names.starts(s.name.as_bytes())
                        || m.suffixes.ends(s.name.as_bytes())
                        || s.attributes
                            .iter()
                            .any(|kv| m.keys.starts(kv.key.as_bytes()))
                })
        });
    // Marked too often only costs a full decode; too rarely would skip a GenAI span.
    assert!(!marked || scan.marked, "a marked span the walk did not see");

    let cuts = match cut::split(data) {
        Ok(cuts) => cuts,
        Err(e) if e.0.contains("overlong tag") => return,
        Err(e) => panic!("prost accepts, the cut refuses: {}", e.0),
    };
    let mut rebuilt = Vec::new();
    let mut n = 0;
    for rc in &cuts {
        let resource = join(data, &rc.resource_parts);
        for sc in &rc.scopes {
            let scope = join(data, &sc.scope_parts);
            let mut records = Vec::new();
            for s in &sc.spans {
                let record = bytes(data, s.record);
                let (_, _, want) = placed.get(n).expect("the cut gives more spans than prost");
                n += 1;
                let got = Span::decode(body(record)).expect("a cut span decodes");
                // Compared as prost encodes them: a NaN double is equal to itself there.
                assert_eq!(
                    got.encode_to_vec(),
                    want.encode_to_vec(),
                    "span {n} cut apart from prost's"
                );
                if want.encode_to_vec() == body(record) {
                    // As an encoder writes it: the heads read at once are the span's.
                    assert_eq!(bytes(data, s.trace_id), want.trace_id.as_slice());
                    assert_eq!(bytes(data, s.name), want.name.as_bytes());
                    let (sid, parent) = cut::span_links(record);
                    assert_eq!(bytes(record, sid), want.span_id.as_slice());
                    assert_eq!(bytes(record, parent), want.parent_span_id.as_slice());
                }
                records.push(record);
            }
            if !records.is_empty() {
                cut::encode_spans(&mut rebuilt, &resource, &scope, &records);
            }
        }
    }
    assert_eq!(n, placed.len(), "the cut gives fewer spans than prost");
    let again = ExportTraceServiceRequest::decode(rebuilt.as_slice()).expect("framed again");
    let placed_again: Vec<(Vec<u8>, Vec<u8>, Span)> = again
        .resource_spans
        .into_iter()
        .flat_map(|rs| {
            let resource = rs.resource.unwrap_or_default().encode_to_vec();
            rs.scope_spans.into_iter().flat_map(move |ss| {
                let scope = ss.scope.unwrap_or_default().encode_to_vec();
                let resource = resource.clone();
                ss.spans
                    .into_iter()
                    .map(move |s| (resource.clone(), scope.clone(), s))
            })
        })
        .collect();
    assert_eq!(placed_again.len(), placed.len());
    for ((r1, s1, a), (r2, s2, b)) in placed.iter().zip(&placed_again) {
        assert_eq!(
            (r1, s1, a.encode_to_vec()),
            (r2, s2, b.encode_to_vec()),
            "a span moved to another resource or scope"
        );
    }
    // Cut to size, at span boundaries: every span once, in order.
    let max = 64 + data.first().copied().unwrap_or(0) as usize * 4;
    let pieces = cut::split_to_size(data, max).expect("a cut request cuts to size");
    let spans: Vec<Span> = pieces
        .iter()
        .flat_map(|p| {
            let r = ExportTraceServiceRequest::decode(p.as_slice()).expect("a piece decodes");
            r.resource_spans
                .into_iter()
                .flat_map(|rs| rs.scope_spans.into_iter().flat_map(|ss| ss.spans))
        })
        .collect();
    assert!(
        spans
            .iter()
            .map(|s| s.encode_to_vec())
            .eq(placed.iter().map(|(_, _, s)| s.encode_to_vec())),
        "cut to size"
    );
}

fn logs(data: &[u8]) {
    let verdict = check::check(data, msg::EXPORT_LOGS_SERVICE_REQUEST);
    let parsed = ExportLogsServiceRequest::decode(data);
    let req = match (&verdict, parsed) {
        (Some(_), Err(_)) => return,
        (Some(problem), Ok(_)) => {
            assert!(
                upb_is_stricter(problem),
                "the core refuses a logs request prost accepts: {problem}"
            );
            return;
        }
        (None, Err(e)) => {
            assert!(
                prost_is_stricter(&e, data),
                "the core accepts a logs request prost refuses: {e}"
            );
            return;
        }
        (None, Ok(req)) => req,
    };
    let placed: Vec<(Vec<u8>, Vec<u8>, &LogRecord)> = req
        .resource_logs
        .iter()
        .flat_map(|rl| {
            let resource = rl.resource.clone().unwrap_or_default().encode_to_vec();
            rl.scope_logs.iter().flat_map(move |sl| {
                let scope = sl.scope.clone().unwrap_or_default().encode_to_vec();
                let resource = resource.clone();
                sl.log_records
                    .iter()
                    .map(move |r| (resource.clone(), scope.clone(), r))
            })
        })
        .collect();
    let cuts = match logs::split_logs(data) {
        Ok(cuts) => cuts,
        Err(e) if e.0.contains("overlong tag") => return,
        Err(e) => panic!("prost accepts a logs request, the cut refuses: {}", e.0),
    };
    let mut rebuilt = Vec::new();
    let mut n = 0;
    for rc in &cuts {
        let resource = join(data, &rc.resource_parts);
        for sc in &rc.scopes {
            let scope = join(data, &sc.scope_parts);
            let mut records = Vec::new();
            for r in &sc.spans {
                let record = bytes(data, r.record);
                let (_, _, want) = placed.get(n).expect("the cut gives more log records");
                n += 1;
                let got = LogRecord::decode(body(record)).expect("a cut log record decodes");
                assert_eq!(got.encode_to_vec(), want.encode_to_vec(), "log record {n}");
                // Every valid encoding: the last value of a field wins, in both.
                assert_eq!(bytes(data, r.trace_id), want.trace_id.as_slice());
                assert_eq!(bytes(data, r.span_id), want.span_id.as_slice());
                assert_eq!(bytes(data, r.event_name), want.event_name.as_bytes());
                records.push(record);
            }
            if !records.is_empty() {
                cut::encode_spans(&mut rebuilt, &resource, &scope, &records);
            }
        }
    }
    assert_eq!(
        n,
        placed.len(),
        "the cut gives fewer log records than prost"
    );
    let again = ExportLogsServiceRequest::decode(rebuilt.as_slice()).expect("framed again");
    let placed_again: Vec<(Vec<u8>, Vec<u8>, LogRecord)> = again
        .resource_logs
        .into_iter()
        .flat_map(|rl| {
            let resource = rl.resource.unwrap_or_default().encode_to_vec();
            rl.scope_logs.into_iter().flat_map(move |sl| {
                let scope = sl.scope.unwrap_or_default().encode_to_vec();
                let resource = resource.clone();
                sl.log_records
                    .into_iter()
                    .map(move |r| (resource.clone(), scope.clone(), r))
            })
        })
        .collect();
    assert_eq!(placed_again.len(), placed.len());
    for ((r1, s1, a), (r2, s2, b)) in placed.iter().zip(&placed_again) {
        assert_eq!(
            (r1, s1, a.encode_to_vec()),
            (r2, s2, b.encode_to_vec()),
            "a log record moved"
        );
    }
}
