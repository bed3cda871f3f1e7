//! The one base-128 varint reader and writer of the project.

/// A varint longer than protobuf allows (more than 10 bytes).
pub const MAX_VARINT_BYTES: usize = 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VarintError {
    /// The bytes ended inside the varint.
    Truncated,
    /// More than ten bytes.
    TooLong,
}

/// (value, next position) of the varint at `data[pos..end]`. A ten-byte varint whose value
/// does not fit 64 bits saturates to `u64::MAX`, so a length read from it can never wrap
/// round to something small.
#[inline]
pub fn read(data: &[u8], pos: usize, end: usize) -> Result<(u64, usize), VarintError> {
    let end = end.min(data.len());
    if pos < end {
        let b = data[pos];
        if b < 0x80 {
            return Ok((b as u64, pos + 1));
        }
    }
    read_slow(data, pos, end)
}

#[cold]
fn read_slow(data: &[u8], mut pos: usize, end: usize) -> Result<(u64, usize), VarintError> {
    let mut result: u64 = 0;
    let mut overflow = false;
    for i in 0..MAX_VARINT_BYTES {
        if pos >= end {
            return Err(VarintError::Truncated);
        }
        let b = data[pos];
        pos += 1;
        let bits = (b & 0x7F) as u64;
        if i == 9 && bits > 1 {
            overflow = true;
        }
        result |= bits << (7 * i);
        if b < 0x80 {
            return Ok((if overflow { u64::MAX } else { result }, pos));
        }
    }
    Err(VarintError::TooLong)
}

/// Bytes `write` uses for `value`.
#[inline]
pub fn len(value: u64) -> usize {
    let bits = 64 - (value | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

#[inline]
pub fn write(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_lengths() {
        for v in [
            0u64,
            1,
            127,
            128,
            300,
            16383,
            16384,
            u32::MAX as u64,
            u64::MAX,
        ] {
            let mut out = Vec::new();
            write(&mut out, v);
            assert_eq!(out.len(), len(v), "{v}");
            assert_eq!(read(&out, 0, out.len()), Ok((v, out.len())));
        }
    }

    #[test]
    fn truncated_too_long_and_overflow() {
        assert_eq!(read(&[0x80], 0, 1), Err(VarintError::Truncated));
        assert_eq!(read(&[0xFF; 11], 0, 11), Err(VarintError::TooLong));
        let mut big = vec![0xFF; 9];
        big.push(0x7F);
        assert_eq!(read(&big, 0, 10), Ok((u64::MAX, 10)));
    }
}
