//! The one varint reader and writer: every length boundary, reads bounded by `end`.

use attest_otel_wire::varint::{len, read, write, VarintError, MAX_VARINT_BYTES};

#[test]
fn every_length_boundary_round_trips() {
    for bits in 0..64 {
        for v in [(1u64 << bits) - 1, 1u64 << bits, (1u64 << bits) + 1] {
            let mut out = vec![0xAA];
            write(&mut out, v);
            let size = out.len() - 1;
            assert_eq!(size, len(v), "{v}");
            assert_eq!(size, (64 - (v | 1).leading_zeros() as usize).div_ceil(7));
            assert_eq!(read(&out, 1, out.len()), Ok((v, out.len())), "{v}");
            assert_eq!(out[size] & 0x80, 0, "the last byte ends it");
        }
    }
    let mut out = Vec::new();
    write(&mut out, u64::MAX);
    assert_eq!(out.len(), MAX_VARINT_BYTES);
}

#[test]
fn a_read_stops_at_end_not_at_the_data() {
    let data = [0x96, 0x01, 0x05];
    assert_eq!(read(&data, 0, 3), Ok((150, 2)));
    assert_eq!(read(&data, 0, 1), Err(VarintError::Truncated));
    assert_eq!(
        read(&data, 2, 99),
        Ok((5, 3)),
        "end past the data is the data's end"
    );
    assert_eq!(read(&data, 3, 3), Err(VarintError::Truncated));
}

#[test]
fn padded_and_overlong_encodings() {
    // Zero digits with the continuation bit: the same value, more bytes.
    assert_eq!(read(&[0x81, 0x80, 0x80, 0x00], 0, 4), Ok((1, 4)));
    let mut ten = vec![0x80; 9];
    ten.push(0x01);
    assert_eq!(read(&ten, 0, 10), Ok((1 << 63, 10)));
    let mut eleven = vec![0x80; 10];
    eleven.push(0x00);
    assert_eq!(read(&eleven, 0, 11), Err(VarintError::TooLong));
}
