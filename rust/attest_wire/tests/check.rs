//! The validator's edge cases: each verdict is upb's (tests/fuzz/test_wire_differential.py
//! and test_wire_groups.py hold the same inputs to Python's protobuf).

mod common;

use attest_otel_wire::check::{check, MAX_DEPTH};
use attest_otel_wire::fields::msg;
use common::*;

fn traces(data: &[u8]) -> Option<String> {
    check(data, msg::EXPORT_TRACE_SERVICE_REQUEST)
}

fn accepted(data: &[u8]) -> bool {
    traces(data).is_none()
}

fn refused_for(data: &[u8], why: &str) {
    let problem = traces(data).expect("refused");
    assert!(problem.contains(why), "{problem:?} should say {why:?}");
}

#[test]
fn empty_and_plain_requests() {
    assert!(accepted(b""));
    assert!(accepted(&request(&span(1, b"GET /"))));
}

#[test]
fn tags() {
    refused_for(b"\x00\x00", "field number 0");
    refused_for(&tag(1, 6), "wire type 6");
    refused_for(
        &request(&[span(1, b"x"), tag(3, 7)].concat()),
        "wire type 7",
    );
    refused_for(b"\x88\x80\x80\x80\x80\x01\x00", "tag above 2^32");
    // A tag of five bytes is a tag; padded to six it is refused, whatever its value.
    assert!(accepted(&[padded(20 << 3, 5), vec![1]].concat()));
    refused_for(
        &[padded(20 << 3, 6), vec![1]].concat(),
        "tag longer than 5 bytes",
    );
    refused_for(
        &[padded(20 << 3, 10), vec![1]].concat(),
        "tag longer than 5 bytes",
    );
}

#[test]
fn lengths() {
    let within =
        |size| request(&[span(1, b"x"), tag(20, 2), padded(2, size), b"ab".to_vec()].concat());
    assert!(accepted(&within(5)));
    refused_for(&within(6), "length longer than 5 bytes");
    refused_for(
        &[tag(1, 2), varint(5), b"ab".to_vec()].concat(),
        "past the end",
    );
    refused_for(&[tag(1, 2), varint((1 << 31) - 1)].concat(), "past the end");
}

#[test]
fn varint_values() {
    let with = |v: &[u8]| request(&[span(1, b"x"), tag(7, 0), v.to_vec()].concat());
    // Ten bytes whose value overflows 64 bits: upb keeps the low bits.
    assert!(accepted(&with(&[[0xFF; 9].as_slice(), &[0x7F]].concat())));
    refused_for(
        &with(&[[0xFF; 10].as_slice(), &[0x01]].concat()),
        "longer than 10 bytes",
    );
    refused_for(&with(&[0x80]), "truncated varint");
}

#[test]
fn strings_are_utf8_bytes_are_anything() {
    refused_for(&request(&span(1, b"GET /\xff")), "invalid UTF-8");
    refused_for(&request(&span(1, b"\xed\xa0\x80")), "invalid UTF-8"); // a surrogate
    refused_for(&request(&span(1, b"\xc0\xaf")), "invalid UTF-8"); // overlong
    assert!(accepted(&request(
        &[ld(1, &[0xFF; 16]), ld(5, b"ok")].concat()
    )));
    assert!(accepted(&request(
        &[span(1, b"x"), ld(99, b"\xff")].concat()
    )));
}

#[test]
fn a_known_field_of_another_wire_type_is_an_unknown_field() {
    assert!(accepted(&request(
        &[span(1, b"x"), tag(5, 0), vec![1]].concat()
    )));
    assert!(accepted(&[ld(1, &[tag(2, 0), vec![5]].concat())].concat()));
    assert!(accepted(&request(
        &[span(1, b"x"), group(5, &ld(5, b"\xff"))].concat()
    )));
}

#[test]
fn groups() {
    assert!(accepted(&request(
        &[span(1, b"x"), group(20, &ld(1, b"k"))].concat()
    )));
    // upb does not look at the numbers of an unknown group's fields.
    assert!(accepted(&request(
        &[span(1, b"x"), group(20, b"\x00\x01")].concat()
    )));
    refused_for(
        &[tag(20, 3), tag(21, 4)].concat(),
        "end-group tag without its group",
    );
    refused_for(&tag(20, 3), "group 20 not closed");
    refused_for(&tag(20, 4), "end-group tag without its group");
    refused_for(b"\x03\x04", "field number 0");
}

#[test]
fn nesting_counts_groups_and_messages_to_upbs_limit() {
    let nested = |n: usize| (0..n).fold(Vec::new(), |inner, _| group(20, &inner));
    assert!(accepted(&nested(MAX_DEPTH as usize)));
    refused_for(&nested(MAX_DEPTH as usize + 1), "nested too deeply");
}

#[test]
fn packed_repeated_fields() {
    // HistogramDataPoint.bucket_counts (fixed64, field 6) in a Metric's histogram.
    let metrics = |packed: &[u8]| ld(1, &ld(2, &ld(2, &ld(9, &ld(1, &ld(6, packed))))));
    let m = msg::EXPORT_METRICS_SERVICE_REQUEST;
    assert!(check(&metrics(&[1; 16]), m).is_none());
    let odd = check(&metrics(&[1; 9]), m).expect("refused");
    assert!(odd.contains("packed fixed64 of odd size"), "{odd}");
}
