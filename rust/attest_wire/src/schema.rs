//! The shape of the generated field table (`fields.rs`, written by tools/gen_wire_fields.py).

/// What the validator needs to know of a field's type: its wire form and what its bytes hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// int32/64, uint32/64, sint32/64, bool, enum (open, proto3): wire type 0.
    Varint,
    /// fixed64, sfixed64, double: wire type 1.
    Fixed64,
    /// fixed32, sfixed32, float: wire type 5.
    Fixed32,
    /// A proto3 `string`: length-delimited and UTF-8.
    Str,
    /// `bytes`: length-delimited, anything.
    Bytes,
    /// A message, by its index in `fields::MESSAGES`.
    Message(u16),
}

pub struct Field {
    pub number: u32,
    pub name: &'static str,
    pub kind: Kind,
    pub repeated: bool,
}

pub struct Message {
    pub name: &'static str,
    pub fields: &'static [Field],
    /// Field number -> 1 + its index in `fields`, 0 for none (OTLP's numbers are small).
    pub by_number: &'static [u8],
}

impl Message {
    #[inline]
    pub fn field(&self, number: u32) -> Option<&'static Field> {
        match self.by_number.get(number as usize) {
            Some(&i) if i > 0 => Some(&self.fields[i as usize - 1]),
            _ => None,
        }
    }
}

/// The message called `full_name` in the table.
pub fn message_index(full_name: &str) -> Option<u16> {
    crate::fields::MESSAGES
        .iter()
        .position(|m| m.name == full_name)
        .map(|i| i as u16)
}
