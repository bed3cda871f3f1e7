//! Byte tests for "may this be GenAI (or a declared dialect's)?" on encoded spans, without
//! decoding: attribute keys, span names and scope names against lists the Python side owns
//! (`ingest.candidate`, a policy's declared dialects) and hands over as byte strings.

use memchr::memchr_iter;

/// Byte strings grouped by their first byte, for "does one of them start here?".
pub struct PrefixSet {
    by_first: Vec<Vec<Vec<u8>>>,
    all: Vec<Vec<u8>>,
    empty: bool,
}

impl PrefixSet {
    pub fn new(items: Vec<Vec<u8>>) -> Self {
        let mut by_first: Vec<Vec<Vec<u8>>> = vec![Vec::new(); 256];
        let mut empty = false;
        for item in items {
            match item.first() {
                Some(&b) => by_first[b as usize].push(item),
                None => empty = true,
            }
        }
        for group in &mut by_first {
            group.sort();
            group.dedup();
        }
        let all = by_first.iter().flatten().cloned().collect();
        PrefixSet {
            by_first,
            all,
            empty,
        }
    }

    pub fn is_empty(&self) -> bool {
        !self.empty && self.all.is_empty()
    }

    /// Whether one of the strings starts `text`.
    #[inline]
    pub fn starts(&self, text: &[u8]) -> bool {
        if self.empty {
            return true;
        }
        match text.first() {
            Some(&b) => self.by_first[b as usize]
                .iter()
                .any(|p| text.starts_with(p)),
            None => false,
        }
    }

    /// Whether one of the strings starts `text` and is followed there by `after`.
    #[inline]
    pub fn starts_then(&self, text: &[u8], after: u8) -> bool {
        let at = |p: &Vec<u8>| text.starts_with(p) && text.get(p.len()) == Some(&after);
        if self.empty && text.first() == Some(&after) {
            return true;
        }
        match text.first() {
            Some(&b) => self.by_first[b as usize].iter().any(at),
            None => false,
        }
    }

    pub fn ends(&self, text: &[u8]) -> bool {
        self.empty || self.all.iter().any(|s| text.ends_with(s))
    }
}

/// The attribute-key probe: somewhere in `data[start..end]`, `lead` (if any) with up to
/// `lead_extra` continuation bytes and one final byte (a varint), then a key tag 0x0a with up
/// to `key_extra` continuation bytes and a final byte (the key's length), then a key that
/// starts with one of `keys` (and, with `after`, is followed by that byte: a whole key).
pub struct KeyProbe {
    pub lead: Option<u8>,
    pub lead_extra: usize,
    pub key_extra: usize,
    pub keys: PrefixSet,
    pub after: Option<u8>,
}

const KEY_TAG: u8 = 0x0A;

impl KeyProbe {
    /// After a varint's bytes starting at `p` (at most `extra` + 1 of them), or None.
    #[inline]
    fn past_varint(data: &[u8], mut p: usize, end: usize, extra: usize) -> Option<usize> {
        for _ in 0..=extra {
            if p >= end {
                return None;
            }
            let b = data[p];
            p += 1;
            if b < 0x80 {
                return Some(p);
            }
        }
        None
    }

    #[inline]
    fn key_at(&self, data: &[u8], tag: usize, end: usize) -> bool {
        if data[tag] != KEY_TAG {
            return false;
        }
        let Some(k) = Self::past_varint(data, tag + 1, end, self.key_extra) else {
            return false;
        };
        let text = &data[k..end];
        match self.after {
            None => self.keys.starts(text),
            Some(a) => self.keys.starts_then(text, a),
        }
    }

    pub fn search(&self, data: &[u8], start: usize, end: usize) -> bool {
        let end = end.min(data.len());
        if start >= end || self.keys.is_empty() {
            return false;
        }
        let hay = &data[start..end];
        match self.lead {
            Some(lead) => memchr_iter(lead, hay).any(|i| {
                let p = start + i + 1;
                match Self::past_varint(data, p, end, self.lead_extra) {
                    Some(tag) => tag < end && self.key_at(data, tag, end),
                    None => false,
                }
            }),
            None => memchr_iter(KEY_TAG, hay).any(|i| self.key_at(data, start + i, end)),
        }
    }
}

/// The scope names that mark all their spans: exact (lower-cased) names and markers a
/// lower-cased name may contain (`candidate.GENAI_SCOPES`, `GENAI_SCOPE_MARKERS`).
pub struct ScopeMarks {
    pub exact: Vec<Vec<u8>>,
    pub contains: Vec<Vec<u8>>,
}

/// `candidate.is_genai_scope`: the lower-cased scope name is one of `exact` or contains one
/// of `contains`.
pub fn scope_marked(name: &[u8], marks: &ScopeMarks) -> bool {
    if name.is_empty() {
        return false;
    }
    let text = String::from_utf8_lossy(name);
    let low = if text.is_ascii() {
        text.to_ascii_lowercase()
    } else {
        text.to_lowercase()
    };
    let low = low.as_bytes();
    marks.exact.iter().any(|e| e.as_slice() == low)
        || marks
            .contains
            .iter()
            .any(|m| memchr::memmem::find(low, m).is_some())
}
