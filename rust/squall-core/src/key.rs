//! Task keys as Dask spells them (a str, or a tuple of str/int/float/bytes, possibly
//! nested), stored as one compact canonical byte string so that hashing and equality
//! are byte operations and a key costs a single allocation.
//!
//! Encoding (tag byte, then payload): `S` len utf8 | `B` len bytes | `I` zigzag-varint |
//! `F` 8 bytes f64 LE | `T` count elements…  Lengths and counts are LEB128 varints.

use std::borrow::Cow;
use std::fmt::Write as _;

use ref_cast::RefCast;

/// (`Default` is an empty placeholder left behind when a key is moved out; it is not a
/// valid key and is never stored.)
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key(Box<[u8]>);

/// A key borrowed: its canonical bytes, as `str` is to `String`. A task record lends
/// its key this way out of the one allocation that holds its key and its spec.
#[derive(RefCast, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(transparent)]
pub struct KeyRef([u8]);

impl std::ops::Deref for Key {
    type Target = KeyRef;
    fn deref(&self) -> &KeyRef {
        KeyRef::ref_cast(&self.0)
    }
}

impl std::borrow::Borrow<KeyRef> for Key {
    fn borrow(&self) -> &KeyRef {
        self
    }
}

impl ToOwned for KeyRef {
    type Owned = Key;
    fn to_owned(&self) -> Key {
        Key(self.0.into())
    }
}

/// A decoded key, for building keys and for handing them back to Python.
#[derive(Clone, Debug, PartialEq)]
pub enum KeyValue {
    Str(String),
    Bytes(Vec<u8>),
    Int(i64),
    Float(f64),
    Tuple(Vec<KeyValue>),
}

const T_STR: u8 = b'S';
const T_BYTES: u8 = b'B';
const T_INT: u8 = b'I';
const T_FLOAT: u8 = b'F';
const T_TUPLE: u8 = b'T';

pub(crate) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// How many bytes `put_varint` writes for `v`.
pub(crate) fn varint_len(v: u64) -> usize {
    (u64::BITS - v.leading_zeros()).max(1).div_ceil(7) as usize
}

/// The varint at `b[*pos]`. Nearly every one read is a single byte (a key's length, a
/// string's, a small int), which is read inline.
#[inline]
pub(crate) fn get_varint(b: &[u8], pos: &mut usize) -> Option<u64> {
    match b.get(*pos) {
        Some(&byte) if byte < 0x80 => {
            *pos += 1;
            Some(u64::from(byte))
        }
        _ => get_long_varint(b, pos),
    }
}

fn get_long_varint(b: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    let mut shift = 0;
    loop {
        let byte = *b.get(*pos)?;
        *pos += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return Some(v);
        }
        shift += 7;
        if shift > 63 {
            return None;
        }
    }
}

/// Incremental encoder, used by the bindings to encode Python keys without building a
/// [`KeyValue`] tree first.
#[derive(Default)]
pub struct KeyEncoder {
    buf: Vec<u8>,
}

impl KeyEncoder {
    pub fn new() -> Self {
        Self::default()
    }
    /// An encoder appending to `buf` (a payload the key is written straight into).
    pub fn appending(buf: Vec<u8>) -> Self {
        Self { buf }
    }
    /// `buf` with what was encoded appended.
    pub fn into_buffer(self) -> Vec<u8> {
        self.buf
    }
    pub fn str(&mut self, s: &str) {
        self.buf.push(T_STR);
        put_varint(&mut self.buf, s.len() as u64);
        self.buf.extend_from_slice(s.as_bytes());
    }
    pub fn bytes(&mut self, s: &[u8]) {
        self.buf.push(T_BYTES);
        put_varint(&mut self.buf, s.len() as u64);
        self.buf.extend_from_slice(s);
    }
    pub fn int(&mut self, i: i64) {
        self.buf.push(T_INT);
        put_varint(&mut self.buf, ((i << 1) ^ (i >> 63)) as u64);
    }
    pub fn float(&mut self, f: f64) {
        self.buf.push(T_FLOAT);
        self.buf.extend_from_slice(&f.to_le_bytes());
    }
    pub fn tuple(&mut self, len: usize) {
        self.buf.push(T_TUPLE);
        put_varint(&mut self.buf, len as u64);
    }
    pub fn value(&mut self, v: &KeyValue) {
        match v {
            KeyValue::Str(s) => self.str(s),
            KeyValue::Bytes(b) => self.bytes(b),
            KeyValue::Int(i) => self.int(*i),
            KeyValue::Float(f) => self.float(*f),
            KeyValue::Tuple(items) => {
                self.tuple(items.len());
                for it in items {
                    self.value(it);
                }
            }
        }
    }
    pub fn finish(&mut self) -> Key {
        Key(std::mem::take(&mut self.buf).into_boxed_slice())
    }
}

impl Key {
    pub fn str(s: &str) -> Key {
        let mut e = KeyEncoder::new();
        e.str(s);
        e.finish()
    }

    pub fn from_value(v: &KeyValue) -> Key {
        let mut e = KeyEncoder::new();
        e.value(v);
        e.finish()
    }

    /// `(name, i, j, …)`, the usual shape of collection keys.
    pub fn tuple_str_ints(name: &str, idx: &[i64]) -> Key {
        let mut e = KeyEncoder::new();
        e.tuple(idx.len() + 1);
        e.str(name);
        for &i in idx {
            e.int(i);
        }
        e.finish()
    }

    /// Checks that raw bytes are one well-formed key (for keys arriving off the wire).
    pub fn from_encoded(b: &[u8]) -> Option<Key> {
        Self::is_encoded(b).then(|| Key(b.into()))
    }

    /// Whether raw bytes are one well-formed key ([`Self::from_encoded`] without
    /// making the key).
    pub fn is_encoded(b: &[u8]) -> bool {
        let mut pos = 0;
        skip(b, &mut pos, 0).is_some() && pos == b.len()
    }

    /// The length of the key that `b` starts with (a key's encoding delimits itself),
    /// None unless it starts with a well-formed one.
    pub fn encoded_len(b: &[u8]) -> Option<usize> {
        let mut pos = 0;
        skip(b, &mut pos, 0).map(|()| pos)
    }
}

impl KeyRef {
    /// The key that `b` is the encoding of (checked by whoever made `b`).
    pub fn of_encoded(b: &[u8]) -> &KeyRef {
        KeyRef::ref_cast(b)
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    pub fn decode(&self) -> KeyValue {
        let mut pos = 0;
        decode_value(&self.0, &mut pos).expect(VALIDATED)
    }

    /// If the key is a plain string, that string.
    pub fn as_str(&self) -> Option<&str> {
        std::str::from_utf8(self.str_bytes()?).ok()
    }

    /// If the key is a plain string, its UTF-8 bytes: [`Self::as_str`] without checking
    /// them again (they were when the key was made), for the hot paths that only
    /// compare or scan them. That check was about 175 instructions a 50-byte key.
    pub fn str_bytes(&self) -> Option<&[u8]> {
        let b = &self.0;
        if b.first() != Some(&T_STR) {
            return None;
        }
        let mut pos = 1;
        bytes_at(b, &mut pos)
    }

    /// Python's `str(key)`: a string key's own text, borrowed from the encoding; any
    /// other key rendered.
    pub fn python_str(&self) -> Cow<'_, str> {
        match self.as_str() {
            Some(s) => Cow::Borrowed(s),
            None => Cow::Owned(self.render()),
        }
    }

    /// [`Self::python_str`] as UTF-8 bytes, a string key's borrowed unchecked
    /// ([`Self::str_bytes`]): what the graph ordering compares names by (bytes order
    /// as their strings do).
    pub fn python_str_utf8(&self) -> Cow<'_, [u8]> {
        match self.str_bytes() {
            Some(s) => Cow::Borrowed(s),
            None => Cow::Owned(self.render().into_bytes()),
        }
    }

    /// `str()` of a key that is not a plain string.
    fn render(&self) -> String {
        // About the encoding's length: no regrowth on the way.
        let mut out = String::with_capacity(self.0.len() + 16);
        repr_at(&self.0, &mut 0, &mut out).expect(VALIDATED);
        out
    }

    /// The key's string, or the first element of a tuple key if that is a string,
    /// borrowed from the encoding (the common case of every naming rule).
    fn head_borrowed(&self) -> Option<&str> {
        let b = &self.0;
        let mut pos = 1;
        match *b.first()? {
            T_STR => {}
            T_TUPLE => {
                get_varint(b, &mut pos)?;
                if *b.get(pos)? != T_STR {
                    return None;
                }
                pos += 1;
            }
            _ => return None,
        }
        let n = get_varint(b, &mut pos)? as usize;
        std::str::from_utf8(b.get(pos..pos + n)?).ok()
    }

    fn is_tuple(&self) -> bool {
        self.0.first() == Some(&T_TUPLE)
    }

    /// The first element of a tuple key rendered as Python `str`, or the key itself.
    fn head_str(&self) -> String {
        let b = &self.0;
        let mut pos = 1;
        let mut out = String::new();
        match b.first() {
            Some(&T_TUPLE) => {
                if get_varint(b, &mut pos).expect(VALIDATED) == 0 {
                    return out;
                }
                if b.get(pos) == Some(&T_STR) {
                    pos += 1;
                    return str_at(b, &mut pos).expect(VALIDATED).to_owned();
                }
            }
            Some(&T_STR) => return str_at(b, &mut pos).expect(VALIDATED).to_owned(),
            Some(&T_BYTES) => {
                return String::from_utf8_lossy(bytes_at(b, &mut pos).expect(VALIDATED))
                    .into_owned()
            }
            _ => pos = 0,
        }
        repr_at(b, &mut pos, &mut out).expect(VALIDATED);
        out
    }
}

impl std::fmt::Debug for KeyRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.decode() {
            KeyValue::Str(s) => write!(f, "'{s}'"),
            _ => f.write_str(&self.python_str()),
        }
    }
}

impl std::fmt::Display for KeyRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.python_str())
    }
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&**self, f)
    }
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&**self, f)
    }
}

/// Tuples nested deeper than this are refused: validating them would recurse that deep.
const MAX_NESTING: usize = 64;

/// Steps over one encoded value, checking that its strings are UTF-8.
fn skip(b: &[u8], pos: &mut usize, depth: usize) -> Option<()> {
    let tag = *b.get(*pos)?;
    *pos += 1;
    match tag {
        T_STR => {
            str_at(b, pos)?;
        }
        T_BYTES => {
            bytes_at(b, pos)?;
        }
        T_INT => {
            get_varint(b, pos)?;
        }
        T_FLOAT => {
            float_at(b, pos)?;
        }
        T_TUPLE => {
            if depth >= MAX_NESTING {
                return None;
            }
            let n = get_varint(b, pos)?;
            for _ in 0..n {
                skip(b, pos, depth + 1)?;
            }
        }
        _ => return None,
    }
    Some(())
}

const VALIDATED: &str = "keys are validated at construction";

/// The string whose length prefix starts at `b[*pos]` (its tag read).
fn str_at<'b>(b: &'b [u8], pos: &mut usize) -> Option<&'b str> {
    std::str::from_utf8(bytes_at(b, pos)?).ok()
}

/// The bytes whose length prefix starts at `b[*pos]` (its tag read).
fn bytes_at<'b>(b: &'b [u8], pos: &mut usize) -> Option<&'b [u8]> {
    let n = get_varint(b, pos)? as usize;
    let s = b.get(*pos..pos.checked_add(n)?)?;
    *pos += n;
    Some(s)
}

/// The zigzag int at `b[*pos]` (its tag read).
fn int_at(b: &[u8], pos: &mut usize) -> Option<i64> {
    let z = get_varint(b, pos)?;
    Some(((z >> 1) as i64) ^ -((z & 1) as i64))
}

/// The float at `b[*pos]` (its tag read).
fn float_at(b: &[u8], pos: &mut usize) -> Option<f64> {
    let f = f64::from_le_bytes(b.get(*pos..pos.checked_add(8)?)?.try_into().ok()?);
    *pos += 8;
    Some(f)
}

fn decode_value(b: &[u8], pos: &mut usize) -> Option<KeyValue> {
    let tag = *b.get(*pos)?;
    *pos += 1;
    Some(match tag {
        T_STR => KeyValue::Str(str_at(b, pos)?.to_owned()),
        T_BYTES => KeyValue::Bytes(bytes_at(b, pos)?.to_vec()),
        T_INT => KeyValue::Int(int_at(b, pos)?),
        T_FLOAT => KeyValue::Float(float_at(b, pos)?),
        T_TUPLE => {
            let n = get_varint(b, pos)? as usize;
            let mut items = Vec::with_capacity(n.min(64));
            for _ in 0..n {
                items.push(decode_value(b, pos)?);
            }
            KeyValue::Tuple(items)
        }
        _ => return None,
    })
}

/// Python `repr` of the key element encoded at `b[*pos..]` (enough of it for tie-breaks
/// and messages), read from the encoding: the ordering's names are made this way, and
/// decoding each key first cost an allocation per element.
fn repr_at(b: &[u8], pos: &mut usize, out: &mut String) -> Option<()> {
    let tag = *b.get(*pos)?;
    *pos += 1;
    match tag {
        T_STR => repr_str(str_at(b, pos)?, out),
        T_BYTES => {
            out.push('b');
            repr_str(&String::from_utf8_lossy(bytes_at(b, pos)?), out)
        }
        T_INT => push_int(out, int_at(b, pos)?),
        T_FLOAT => {
            let f = float_at(b, pos)?;
            if f.is_finite() && f.fract() == 0.0 && f.abs() < 1e16 {
                let _ = write!(out, "{f:.1}");
            } else if f.is_nan() {
                out.push_str("nan");
            } else if f.is_infinite() {
                out.push_str(if f > 0.0 { "inf" } else { "-inf" });
            } else {
                let _ = write!(out, "{f}");
            }
        }
        T_TUPLE => {
            let n = get_varint(b, pos)?;
            out.push('(');
            for i in 0..n {
                if i > 0 {
                    out.push_str(", ");
                }
                repr_at(b, pos, out)?;
            }
            if n == 1 {
                out.push(',');
            }
            out.push(')');
        }
        _ => return None,
    }
    Some(())
}

/// `i` in decimal, as `write!` would put it, without the formatting machinery (most of
/// the cost of naming a collection's `(name, i, j)` keys).
fn push_int(out: &mut String, i: i64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut n = i.unsigned_abs();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    if i < 0 {
        out.push('-');
    }
    out.push_str(std::str::from_utf8(&digits[at..]).expect("ASCII digits"));
}

fn repr_str(s: &str, out: &mut String) {
    // One pass for the quote choice and whether anything needs escaping.
    let (mut single, mut double, mut special) = (false, false, false);
    for &b in s.as_bytes() {
        match b {
            b'\'' => single = true,
            b'"' => double = true,
            b'\\' | 0x7f | 0..=0x1f => special = true,
            _ => {}
        }
    }
    let quote = if single && !double { '"' } else { '\'' };
    out.push(quote);
    // Usually nothing to escape: copied whole (bytes of other chars pass unchanged below).
    if !(single || double || special) {
        out.push_str(s);
        out.push(quote);
        return;
    }
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c)
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

fn is_hex32(s: &str) -> bool {
    s.len() == 32
        && s.bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
}

/// `"<function foo.bar at 0x…>"` → `"bar"`.
fn angle_name(s: &str) -> &str {
    let inner = s.trim_matches(|c| c == '<' || c == '>');
    let first = inner.split_whitespace().next().unwrap_or("");
    first.rsplit('.').next().unwrap_or("")
}

/// Dask's `key_split`: the task prefix name of a key.
pub fn key_split(key: &KeyRef) -> Cow<'_, str> {
    let name = match key.head_borrowed() {
        Some(h) => split_name(h),
        None => split_name(&key.head_str()).map(|n| Cow::Owned(n.into_owned())),
    };
    name.unwrap_or(Cow::Borrowed("Other"))
}

fn split_name(s: &str) -> Option<Cow<'_, str>> {
    let first_len = s.find('-').unwrap_or(s.len());
    let first = &s[..first_len];
    let alpha_start = first.chars().next()?.is_alphabetic();
    let head = if alpha_start {
        first
    } else {
        first
            .split(',')
            .next()?
            .trim_matches(|c| matches!(c, '_' | '\'' | '(' | ')' | '"'))
    };
    // Following purely alphabetic words (that do not look like hashes) join the name.
    let mut end = first_len;
    for word in s[first_len..].split('-').skip(1) {
        let looks_hashy = word.chars().count() == 8
            && word
                .chars()
                .next()
                .is_some_and(|c| ('a'..='f').contains(&c));
        if word.is_empty() || !word.chars().all(char::is_alphabetic) || looks_hashy {
            break;
        }
        end += 1 + word.len();
    }
    let result: Cow<'_, str> = if end == first_len {
        Cow::Borrowed(head)
    } else if alpha_start {
        Cow::Borrowed(&s[..end])
    } else {
        Cow::Owned(format!("{head}{}", &s[first_len..end]))
    };
    if is_hex32(&result) {
        return Some(Cow::Borrowed("data"));
    }
    if result.starts_with('<') {
        return Some(Cow::Owned(angle_name(&result).to_owned()));
    }
    result.chars().next()?;
    Some(result)
}

/// Distributed's `key_split_group`: the task group name of a key.
pub fn key_split_group(key: &KeyRef) -> Cow<'_, str> {
    if key.is_tuple() {
        return match key.head_borrowed() {
            Some(h) => Cow::Borrowed(h),
            None => Cow::Owned(key.head_str()),
        };
    }
    match key.head_borrowed() {
        Some(s) => group_of_str(s, key),
        None => match key.decode() {
            KeyValue::Bytes(b) => {
                let s = String::from_utf8_lossy(&b).into_owned();
                Cow::Owned(group_of_str(&s, key).into_owned())
            }
            _ => Cow::Borrowed("Other"),
        },
    }
}

fn group_of_str<'a>(s: &'a str, key: &'a KeyRef) -> Cow<'a, str> {
    if s.starts_with('(') {
        Cow::Borrowed(
            s.split(',')
                .next()
                .unwrap_or("")
                .trim_matches(|c| matches!(c, '(' | ')' | '"' | '\'')),
        )
    } else if is_hex32(s) {
        Cow::Borrowed("data")
    } else if s.starts_with('<') {
        Cow::Borrowed(angle_name(s))
    } else {
        key_split(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(x: &str) -> Key {
        Key::str(x)
    }

    #[test]
    fn roundtrip_and_str() {
        let k = Key::tuple_str_ints("x-abc", &[1, -2]);
        assert_eq!(k.python_str(), "('x-abc', 1, -2)");
        assert_eq!(Key::from_encoded(k.as_bytes()), Some(k.clone()));
        assert_eq!(Key::from_encoded(&k.as_bytes()[..3]), None);
        let one = Key::from_value(&KeyValue::Tuple(vec![KeyValue::Str("it's".into())]));
        assert_eq!(one.python_str(), "(\"it's\",)");
        assert_eq!(s("plain").python_str(), "plain");
    }

    #[test]
    fn ints_are_written_as_write_would() {
        for i in [0, 7, -7, 10, -10, 12345, i64::MAX, i64::MIN] {
            let mut out = String::new();
            super::push_int(&mut out, i);
            assert_eq!(out, i.to_string());
        }
    }

    #[test]
    fn str_of_every_element_kind_is_pythons() {
        use KeyValue::{Bytes, Float, Int, Str, Tuple};
        let cases: [(KeyValue, &str); 10] = [
            (Str("naïve-ß".into()), "naïve-ß"),
            (Int(-7), "-7"),
            (Float(2.0), "2.0"),
            (Float(f64::NEG_INFINITY), "-inf"),
            (Bytes(b"ab".to_vec()), "b'ab'"),
            (Tuple(vec![]), "()"),
            (
                Tuple(vec![Str("a\nb".into()), Float(0.5)]),
                "('a\\nb', 0.5)",
            ),
            (Tuple(vec![Str("q'\"".into())]), "('q\\'\"',)"),
            (
                Tuple(vec![Int(1), Tuple(vec![Str("x".into()), Int(2)])]),
                "(1, ('x', 2))",
            ),
            (
                Tuple(vec![Str("tab\t".into()), Bytes(vec![0x01])]),
                "('tab\\t', b'\\x01')",
            ),
        ];
        for (v, want) in cases {
            let k = Key::from_value(&v);
            assert_eq!(k.python_str(), want, "{v:?}");
            assert_eq!(&*k.python_str_utf8(), want.as_bytes(), "{v:?}");
        }
    }

    #[test]
    fn key_split_matches_dask() {
        assert_eq!(key_split(&s("x")), "x");
        assert_eq!(key_split(&s("x-1")), "x");
        assert_eq!(key_split(&s("x-1-2-3")), "x");
        assert_eq!(key_split(&Key::tuple_str_ints("x-1", &[0])), "x");
        assert_eq!(key_split(&s("('x-1', 0)")), "x");
        assert_eq!(key_split(&s("hello-world-1")), "hello-world");
        assert_eq!(key_split(&s("ae05086432ca935f6eba409a8ecd4896")), "data");
        assert_eq!(
            key_split(&s("<module.submodule.myclass object at 0xdaf372")),
            "myclass"
        );
        assert_eq!(key_split(&s("x-abcdefab")), "x");
        assert_eq!(key_split(&s("_(x)")), "x");
        assert_eq!(key_split(&s("")), "Other");
        assert_eq!(
            key_split(&s("sum-aggregate-e1a2c3d4e5f6a7b8c9d0e1f2a3b4c5d6")),
            "sum-aggregate"
        );
    }

    #[test]
    fn key_split_group_matches_distributed() {
        assert_eq!(key_split_group(&s("x")), "x");
        assert_eq!(key_split_group(&s("x-1")), "x");
        assert_eq!(key_split_group(&s("x-1-2-3")), "x");
        assert_eq!(
            key_split_group(&Key::tuple_str_ints("x-1", &[0])),
            "x-1",
            "tuple keys group by their full name"
        );
        assert_eq!(key_split_group(&s("('x-2', 1)")), "x-2");
        assert_eq!(key_split_group(&s("hello-world-1")), "hello-world");
        assert_eq!(
            key_split_group(&s("ae05086432ca935f6eba409a8ecd4896")),
            "data"
        );
        assert_eq!(
            key_split_group(&s("<module.submodule.myclass object at 0xdaf372")),
            "myclass"
        );
    }
}
