//! Is this a valid encoding of an OTLP message, as protobuf (upb, what Python's protobuf and
//! the next hop parse with) would judge it? Walked against the generated field table, nothing
//! built. The verdict must equal `Message.FromString`'s on the same bytes, which
//! tests/fuzz/test_wire_differential.py checks. upb's rules, as followed here:
//!
//! - tags are varints of at most 10 bytes with a value below 2^32, field number not 0, wire
//!   types 0-5 (6 and 7 are errors);
//! - a known field whose wire type does not fit its type is kept as an unknown field; a
//!   repeated scalar may come packed (length-delimited), whose contents must divide evenly;
//! - a length is below 2^31 - 1 and inside its message; a proto3 `string` holds UTF-8;
//! - messages nest at most 100 deep below the root, counting groups (kept as unknown
//!   fields), and a group ends with the end-group tag of its own number.

use crate::fields::MESSAGES;
use crate::schema::{Kind, Message};
use crate::varint;

/// upb's default depth limit, which Python's protobuf uses.
pub const MAX_DEPTH: i32 = 100;

pub struct Checker<'a> {
    data: &'a [u8],
    depth: i32,
}

/// None when `data` is a valid `MESSAGES[root]`, else why not.
pub fn check(data: &[u8], root: u16) -> Option<String> {
    let mut c = Checker {
        data,
        depth: MAX_DEPTH,
    };
    match c.message(0, data.len(), Some(&MESSAGES[root as usize]), None) {
        Ok(_) => None,
        Err(e) => Some(e),
    }
}

fn corrupt(what: &str, at: usize) -> String {
    format!("wire format is corrupt: {what} at byte {at}")
}

impl<'a> Checker<'a> {
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
        msg: Option<&'static Message>,
        group: Option<u32>,
    ) -> Result<usize, String> {
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
            let number = (tag >> 3) as u32;
            let wire_type = (tag & 7) as u8;
            if number == 0 {
                return Err(corrupt("field number 0", start));
            }
            pos = p;
            let field = match msg {
                Some(m) => m.field(number),
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
                                if std::str::from_utf8(&self.data[vstart..vend]).is_err() {
                                    return Err(format!(
                                        "invalid UTF-8 in string field {}.{} at byte {}",
                                        msg.map(|m| m.name).unwrap_or(""),
                                        f.name,
                                        start
                                    ));
                                }
                            }
                            Kind::Bytes => {}
                            Kind::Message(i) => {
                                self.nested(start)?;
                                self.message(vstart, vend, Some(&MESSAGES[i as usize]), None)?;
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
                    pos = self.message(pos, end, None, Some(number))?;
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
}
