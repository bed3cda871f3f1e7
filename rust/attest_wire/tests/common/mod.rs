//! Encoders the wire core's tests build their inputs with.

#![allow(dead_code)]

use attest_otel_wire::varint;

pub fn varint(value: u64) -> Vec<u8> {
    let mut out = Vec::new();
    varint::write(&mut out, value);
    out
}

/// `value`'s varint in `size` bytes: zero digits with the continuation bit after it.
pub fn padded(value: u64, size: usize) -> Vec<u8> {
    (0..size)
        .map(|i| {
            let digit = ((value >> (7 * i)) & 0x7F) as u8;
            if i + 1 < size {
                digit | 0x80
            } else {
                digit
            }
        })
        .collect()
}

pub fn tag(number: u64, wire_type: u64) -> Vec<u8> {
    varint(number << 3 | wire_type)
}

pub fn ld(number: u64, payload: &[u8]) -> Vec<u8> {
    [
        tag(number, 2),
        varint(payload.len() as u64),
        payload.to_vec(),
    ]
    .concat()
}

pub fn group(number: u64, inner: &[u8]) -> Vec<u8> {
    [tag(number, 3), inner.to_vec(), tag(number, 4)].concat()
}

/// A span with a trace id, a span id and a name.
pub fn span(trace: u8, name: &[u8]) -> Vec<u8> {
    [ld(1, &[trace; 16]), ld(2, &[trace + 1; 8]), ld(5, name)].concat()
}

/// `body` as the one span (log record) of a traces (logs) request.
pub fn request(body: &[u8]) -> Vec<u8> {
    ld(1, &ld(2, &ld(2, body)))
}
