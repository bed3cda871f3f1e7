//! A JSON parser with exactly the grammar of Python's `json` module (NaN, Infinity and
//! -Infinity read, integers of any size up to `int`'s 4300 digits, control characters in
//! strings refused), into a tree that borrows the text, for the OTLP/JSON reader
//! (`json_walk.rs`). Unpaired UTF-16 surrogate escapes become U+FFFD and are counted, as
//! `ingest/sanitize.py`'s `mend_surrogates` did after `json` parsed them. Nesting stops at
//! 1024 levels (orjson's bound, which `ingest/otlp_json.py` documents). On a refusal nothing
//! is said here: the caller asks Python's `json` for its own message (error path only).

use std::borrow::Cow;

pub const MAX_DEPTH: usize = 1024;
const MAX_INT_DIGITS: usize = 4300;

/// A parsed JSON value. Integers keep their text when beyond 64 bits (`Big`).
pub enum V<'a> {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Big(&'a str),
    Float(f64),
    Str(Cow<'a, str>),
    Arr(Vec<V<'a>>),
    Obj(Box<Obj<'a>>),
}

/// An object: its members in text order (a repeated key is kept twice; `get` finds the last,
/// as a Python dict keeps the last value), and where it starts and ends in the text.
pub struct Obj<'a> {
    pub items: Vec<(Cow<'a, str>, V<'a>)>,
    pub start: usize,
    pub end: usize,
}

pub static NULL: V<'static> = V::Null;

impl<'a> Obj<'a> {
    /// The value of `key` (the last one when repeated), None when absent.
    pub fn find(&self, key: &str) -> Option<&V<'a>> {
        self.items
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }

    /// `dict.get(key)`: absent and null read the same.
    pub fn get(&self, key: &str) -> &V<'a> {
        self.find(key).unwrap_or(&NULL)
    }

    /// `d.get(a) or d.get(b)`.
    pub fn get_or(&self, a: &str, b: &str) -> &V<'a> {
        let first = self.get(a);
        if first.truthy() {
            first
        } else {
            self.get(b)
        }
    }

    pub fn has(&self, key: &str) -> bool {
        self.find(key).is_some()
    }

    /// The keys as a dict holds them: each once, at its first place.
    pub fn keys(&self) -> impl Iterator<Item = &Cow<'a, str>> {
        self.items
            .iter()
            .enumerate()
            .filter(|(i, (k, _))| !self.items[..*i].iter().any(|(seen, _)| seen == k))
            .map(|(_, (k, _))| k)
    }
}

impl V<'_> {
    /// Python's truth value of the parsed object.
    pub fn truthy(&self) -> bool {
        match self {
            V::Null => false,
            V::Bool(b) => *b,
            V::Int(i) => *i != 0,
            V::UInt(u) => *u != 0,
            V::Big(_) => true,
            V::Float(f) => *f != 0.0,
            V::Str(s) => !s.is_empty(),
            V::Arr(a) => !a.is_empty(),
            V::Obj(o) => !o.items.is_empty(),
        }
    }

    /// `type(value).__name__` of the parsed object.
    pub fn type_name(&self) -> &'static str {
        match self {
            V::Null => "NoneType",
            V::Bool(_) => "bool",
            V::Int(_) | V::UInt(_) | V::Big(_) => "int",
            V::Float(_) => "float",
            V::Str(_) => "str",
            V::Arr(_) => "list",
            V::Obj(_) => "dict",
        }
    }
}

/// Why a text was refused: where, and whether for its depth.
#[derive(Debug)]
pub struct Refused {
    pub pos: usize,
    pub too_deep: bool,
}

pub struct Parser<'a> {
    s: &'a str,
    b: &'a [u8],
    pub pos: usize,
    depth: usize,
    /// Strings (and keys) that held unpaired surrogates, mended.
    pub mended: usize,
}

type P<T> = Result<T, Refused>;

pub fn is_ws(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\r')
}

impl<'a> Parser<'a> {
    pub fn new(s: &'a str, pos: usize) -> Self {
        Parser {
            s,
            b: s.as_bytes(),
            pos,
            depth: 0,
            mended: 0,
        }
    }

    pub fn skip_ws(&mut self) -> usize {
        while self.pos < self.b.len() && is_ws(self.b[self.pos]) {
            self.pos += 1;
        }
        self.pos
    }

    fn refuse<T>(&self) -> P<T> {
        Err(Refused {
            pos: self.pos,
            too_deep: false,
        })
    }

    fn literal(&mut self, word: &str, value: V<'a>) -> P<V<'a>> {
        if self.b[self.pos..].starts_with(word.as_bytes()) {
            self.pos += word.len();
            Ok(value)
        } else {
            self.refuse()
        }
    }

    /// One value at `pos` (no whitespace before it).
    pub fn value(&mut self) -> P<V<'a>> {
        let Some(&c) = self.b.get(self.pos) else {
            return self.refuse();
        };
        match c {
            b'{' => self.object(),
            b'[' => self.array(),
            b'"' => Ok(V::Str(self.string()?)),
            b'n' => self.literal("null", V::Null),
            b't' => self.literal("true", V::Bool(true)),
            b'f' => self.literal("false", V::Bool(false)),
            b'N' => self.literal("NaN", V::Float(f64::NAN)),
            b'I' => self.literal("Infinity", V::Float(f64::INFINITY)),
            b'-' | b'0'..=b'9' => self.number(),
            _ => self.refuse(),
        }
    }

    fn enter(&mut self) -> P<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(Refused {
                pos: self.pos,
                too_deep: true,
            });
        }
        Ok(())
    }

    fn object(&mut self) -> P<V<'a>> {
        self.enter()?;
        let start = self.pos;
        self.pos += 1;
        let mut items = Vec::new();
        self.skip_ws();
        if self.b.get(self.pos) == Some(&b'}') {
            self.pos += 1;
        } else {
            loop {
                if self.b.get(self.pos) != Some(&b'"') {
                    return self.refuse();
                }
                let key = self.string()?;
                self.skip_ws();
                if self.b.get(self.pos) != Some(&b':') {
                    return self.refuse();
                }
                self.pos += 1;
                self.skip_ws();
                let value = self.value()?;
                items.push((key, value));
                self.skip_ws();
                match self.b.get(self.pos) {
                    Some(b',') => {
                        self.pos += 1;
                        self.skip_ws();
                    }
                    Some(b'}') => {
                        self.pos += 1;
                        break;
                    }
                    _ => return self.refuse(),
                }
            }
        }
        self.depth -= 1;
        Ok(V::Obj(Box::new(Obj {
            items,
            start,
            end: self.pos,
        })))
    }

    fn array(&mut self) -> P<V<'a>> {
        self.enter()?;
        self.pos += 1;
        let mut items = Vec::new();
        self.skip_ws();
        if self.b.get(self.pos) == Some(&b']') {
            self.pos += 1;
        } else {
            loop {
                items.push(self.value()?);
                self.skip_ws();
                match self.b.get(self.pos) {
                    Some(b',') => {
                        self.pos += 1;
                        self.skip_ws();
                    }
                    Some(b']') => {
                        self.pos += 1;
                        break;
                    }
                    _ => return self.refuse(),
                }
            }
        }
        self.depth -= 1;
        Ok(V::Arr(items))
    }

    fn digits(&mut self) -> usize {
        let start = self.pos;
        while self.pos < self.b.len() && self.b[self.pos].is_ascii_digit() {
            self.pos += 1;
        }
        self.pos - start
    }

    fn number(&mut self) -> P<V<'a>> {
        let start = self.pos;
        if self.b[self.pos] == b'-' {
            self.pos += 1;
            if self.b[self.pos..].starts_with(b"Infinity") {
                self.pos += 8;
                return Ok(V::Float(f64::NEG_INFINITY));
            }
        }
        let lead = self.pos;
        match self.b.get(self.pos) {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return self.refuse(),
        }
        let int_digits = self.pos - lead;
        let mut float = false;
        if self.b.get(self.pos) == Some(&b'.')
            && self.b.get(self.pos + 1).is_some_and(u8::is_ascii_digit)
        {
            self.pos += 1;
            self.digits();
            float = true;
        }
        if matches!(self.b.get(self.pos), Some(b'e' | b'E')) {
            let back = self.pos;
            self.pos += 1;
            if matches!(self.b.get(self.pos), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            if self.digits() == 0 {
                self.pos = back;
            } else {
                float = true;
            }
        }
        let text = &self.s[start..self.pos];
        if float {
            return match text.parse::<f64>() {
                Ok(f) => Ok(V::Float(f)),
                Err(_) => self.refuse(),
            };
        }
        if int_digits > MAX_INT_DIGITS {
            return self.refuse(); // int() refuses it: `json` says so with its own words
        }
        if let Ok(i) = text.parse::<i64>() {
            Ok(V::Int(i))
        } else if let Ok(u) = text.parse::<u64>() {
            Ok(V::UInt(u))
        } else {
            Ok(V::Big(text))
        }
    }

    fn hex4(&self, at: usize) -> Option<u32> {
        let h = self.b.get(at..at + 4)?;
        let mut out = 0u32;
        for &c in h {
            out = out * 16 + (c as char).to_digit(16)?;
        }
        Some(out)
    }

    /// The string at `pos` (its opening quote), escapes read.
    fn string(&mut self) -> P<Cow<'a, str>> {
        self.pos += 1;
        let start = self.pos;
        let b = self.b;
        // The run to the next quote or backslash, then one check for control characters.
        let Some(stop) = memchr::memchr2(b'"', b'\\', &b[start..]).map(|n| start + n) else {
            return self.refuse();
        };
        if let Some(bad) = b[start..stop].iter().position(|&c| c < 0x20) {
            self.pos = start + bad;
            return self.refuse();
        }
        self.pos = stop;
        if b[stop] == b'"' {
            self.pos += 1;
            return Ok(Cow::Borrowed(&self.s[start..stop]));
        }
        let mut out = String::from(&self.s[start..self.pos]);
        let mut mended = false;
        loop {
            let Some(&c) = b.get(self.pos) else {
                return self.refuse();
            };
            match c {
                b'"' => {
                    self.pos += 1;
                    break;
                }
                b'\\' => {
                    let Some(&e) = b.get(self.pos + 1) else {
                        return self.refuse();
                    };
                    self.pos += 2;
                    let ch = match e {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            let Some(u) = self.hex4(self.pos) else {
                                return self.refuse();
                            };
                            self.pos += 4;
                            self.surrogate(u, &mut mended)?
                        }
                        _ => {
                            self.pos -= 1;
                            return self.refuse();
                        }
                    };
                    out.push(ch);
                }
                c if c < 0x20 => return self.refuse(),
                _ => {
                    // Copy the run up to the next quote or backslash (UTF-8 kept whole).
                    let run = self.pos;
                    while self.pos < b.len() && !matches!(b[self.pos], b'"' | b'\\' | 0..=0x1f) {
                        self.pos += 1;
                    }
                    out.push_str(&self.s[run..self.pos]);
                }
            }
        }
        if mended {
            self.mended += 1;
        }
        Ok(Cow::Owned(out))
    }

    /// The character of a `\uXXXX` escape just read, pairing a high surrogate with a low one
    /// that follows as `json` does; an unpaired one is U+FFFD.
    fn surrogate(&mut self, u: u32, mended: &mut bool) -> P<char> {
        if (0xd800..0xdc00).contains(&u) && self.b[self.pos..].starts_with(b"\\u") {
            let Some(low) = self.hex4(self.pos + 2) else {
                self.pos += 2;
                return self.refuse();
            };
            if (0xdc00..0xe000).contains(&low) {
                self.pos += 6;
                let code = 0x10000 + ((u - 0xd800) << 10) + (low - 0xdc00);
                return Ok(char::from_u32(code).unwrap_or('\u{fffd}'));
            }
        }
        match char::from_u32(u) {
            Some(ch) => Ok(ch),
            None => {
                *mended = true;
                Ok('\u{fffd}')
            }
        }
    }
}

/// The one document `text[pos..]` holds with only whitespace around it.
pub fn one_document(text: &str, pos: usize) -> Result<(V<'_>, usize), Refused> {
    let mut p = Parser::new(text, pos);
    p.skip_ws();
    let v = p.value()?;
    p.skip_ws();
    if p.pos != text.len() {
        return Err(Refused {
            pos: p.pos,
            too_deep: false,
        });
    }
    Ok((v, p.mended))
}
