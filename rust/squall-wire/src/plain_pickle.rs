//! The call part of a `map` item's spec, `pickle.dumps((args, {}), protocol=5)`, for
//! arguments of plain types only (None, bool, int, float, str, bytes), written byte for
//! byte as CPython's pickler writes it, so a client makes a chunk's specs in one pass
//! with no Python call per item and the bytes (and so the keys of a pure `map`, hashed
//! over them) are the same as the pickler's (docs/protocol.md#run-specs). A worker
//! reads such a call back ([`read_call`]) and makes its arguments without the
//! unpickler.

/// One argument of a plain type.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Plain<'a> {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(&'a str),
    Bytes(&'a [u8]),
}

// Opcodes of pickle protocol 5 (CPython's Lib/pickle.py names).
const PROTO: u8 = 0x80;
const FRAME: u8 = 0x95;
const MEMOIZE: u8 = 0x94;
const BINGET: u8 = b'h';
const LONG_BINGET: u8 = b'j';
const NONE: u8 = b'N';
const NEWTRUE: u8 = 0x88;
const NEWFALSE: u8 = 0x89;
const BININT1: u8 = b'K';
const BININT2: u8 = b'M';
const BININT: u8 = b'J';
const LONG1: u8 = 0x8a;
const BINFLOAT: u8 = b'G';
const SHORT_BINUNICODE: u8 = 0x8c;
const BINUNICODE: u8 = b'X';
const SHORT_BINBYTES: u8 = b'C';
const BINBYTES: u8 = b'B';
const EMPTY_TUPLE: u8 = b')';
const MARK: u8 = b'(';
const TUPLE: u8 = b't';
const TUPLE1: u8 = 0x85;
const TUPLE2: u8 = 0x86;
const TUPLE3: u8 = 0x87;
const EMPTY_DICT: u8 = b'}';
const STOP: u8 = b'.';

/// The pickler starts a new frame once one reaches this size: a call this large is
/// left to the pickler itself.
const FRAME_TARGET: usize = 64 * 1024;

/// Appends the pickle of `(args, {})` to `out`. `same[i]` names an earlier argument
/// that is the same object as `args[i]` (the pickler memoizes strings and bytes by
/// identity and refers back to them). Returns false, with `out` as it was, where the
/// pickler would write more than one frame (arguments of 64 KiB or more).
///
/// # Panics
///
/// If `same` is not as long as `args` or names an argument that is not earlier.
pub fn write_call(out: &mut Vec<u8>, args: &[Plain<'_>], same: &[Option<usize>]) -> bool {
    assert_eq!(args.len(), same.len(), "one identity per argument");
    let at = out.len();
    out.extend_from_slice(&[PROTO, 5, FRAME, 0, 0, 0, 0, 0, 0, 0, 0]);
    let body = out.len();
    let mut memo = 0u32;
    let mut memo_of = Vec::with_capacity(args.len());
    let mut memoize = |out: &mut Vec<u8>| {
        out.push(MEMOIZE);
        memo += 1;
        memo - 1
    };
    if args.len() > 3 {
        out.push(MARK);
    }
    for (i, (arg, same)) in args.iter().zip(same).enumerate() {
        if let Some(j) = *same {
            assert!(j < i, "an argument can only repeat an earlier one");
            if let Some(m) = memo_of[j] {
                put_get(out, m);
                memo_of.push(Some(m));
                continue;
            }
        }
        memo_of.push(match *arg {
            Plain::Str(s) => {
                put_sized(out, SHORT_BINUNICODE, BINUNICODE, s.as_bytes());
                Some(memoize(out))
            }
            Plain::Bytes(b) => {
                put_sized(out, SHORT_BINBYTES, BINBYTES, b);
                Some(memoize(out))
            }
            other => {
                put_scalar(out, other);
                None
            }
        });
    }
    match args.len() {
        0 => out.push(EMPTY_TUPLE),
        1 => out.push(TUPLE1),
        2 => out.push(TUPLE2),
        3 => out.push(TUPLE3),
        _ => out.push(TUPLE),
    }
    if !args.is_empty() {
        memoize(out);
    }
    out.push(EMPTY_DICT);
    memoize(out);
    out.push(TUPLE2);
    memoize(out);
    out.push(STOP);
    let len = out.len() - body;
    if len >= FRAME_TARGET {
        out.truncate(at);
        return false;
    }
    out[body - 8..body].copy_from_slice(&(len as u64).to_le_bytes());
    true
}

fn put_get(out: &mut Vec<u8>, m: u32) {
    match u8::try_from(m) {
        Ok(m) => out.extend_from_slice(&[BINGET, m]),
        Err(_) => {
            out.push(LONG_BINGET);
            out.extend_from_slice(&m.to_le_bytes());
        }
    }
}

/// A length-prefixed string or bytes: a one-byte length below 256, else four bytes
/// (anything longer than a frame never gets here).
fn put_sized(out: &mut Vec<u8>, short: u8, long: u8, data: &[u8]) {
    match u8::try_from(data.len()) {
        Ok(n) => out.extend_from_slice(&[short, n]),
        Err(_) => {
            out.push(long);
            let n = u32::try_from(data.len()).unwrap_or(u32::MAX);
            out.extend_from_slice(&n.to_le_bytes());
        }
    }
    out.extend_from_slice(data);
}

fn put_scalar(out: &mut Vec<u8>, arg: Plain<'_>) {
    match arg {
        Plain::None => out.push(NONE),
        Plain::Bool(true) => out.push(NEWTRUE),
        Plain::Bool(false) => out.push(NEWFALSE),
        Plain::Int(i) => put_int(out, i),
        Plain::Float(f) => {
            out.push(BINFLOAT);
            out.extend_from_slice(&f.to_be_bytes());
        }
        Plain::Str(_) | Plain::Bytes(_) => unreachable!("memoized values are written above"),
    }
}

/// As the pickler's `save_long`: the shortest of the 1-, 2- and 4-byte forms, else
/// `LONG1` with the fewest little-endian two's-complement bytes that hold it.
fn put_int(out: &mut Vec<u8>, i: i64) {
    if let Ok(b) = u8::try_from(i) {
        out.extend_from_slice(&[BININT1, b]);
    } else if let Ok(w) = u16::try_from(i) {
        out.push(BININT2);
        out.extend_from_slice(&w.to_le_bytes());
    } else if let Ok(d) = i32::try_from(i) {
        out.push(BININT);
        out.extend_from_slice(&d.to_le_bytes());
    } else {
        // nbytes = bit_length(|i|) / 8 + 1, less a redundant sign byte of a negative.
        let bits = 64 - i.unsigned_abs().leading_zeros() as usize;
        let mut n = bits / 8 + 1;
        let bytes = i.to_le_bytes();
        if i < 0 && n > 1 && n <= 8 && bytes[n - 1] == 0xff && bytes[n - 2] & 0x80 != 0 {
            n -= 1;
        }
        let n = n.min(8);
        out.extend_from_slice(&[LONG1, n as u8]);
        out.extend_from_slice(&bytes[..n]);
    }
}

/// One argument of a call read back: a value, or the same object as an earlier
/// argument (by its index).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Arg<'a> {
    Value(Plain<'a>),
    Same(usize),
}

/// Reads a call of plain arguments as [`write_call`] writes it, handing `each`
/// argument in order; false (after any number of arguments) for anything else, which
/// is left to the unpickler. Only opcodes whose meaning is plain are read, strings
/// only as UTF-8 (the unpickler also takes surrogates), and the call must end as
/// `(args, {})` does, all in one frame: then these arguments are exactly what
/// `pickle.loads` gives.
pub fn read_call<'a>(b: &'a [u8], mut each: impl FnMut(Arg<'a>)) -> bool {
    read_args(b, &mut each).is_some()
}

fn read_args<'a>(b: &'a [u8], each: &mut impl FnMut(Arg<'a>)) -> Option<()> {
    let mut r = b.strip_prefix(&[PROTO, 5, FRAME])?;
    let len = u64::from_le_bytes(take(&mut r)?);
    if len != r.len() as u64 {
        return None;
    }
    let marked = r.first() == Some(&MARK);
    if marked {
        r = &r[1..];
    }
    let mut n = 0;
    // The argument each memo entry holds (each string and bytes is memoized).
    let mut memo: Vec<usize> = Vec::new();
    let tuple = loop {
        let [op] = take(&mut r)?;
        let arg = match op {
            NONE => Plain::None,
            NEWTRUE => Plain::Bool(true),
            NEWFALSE => Plain::Bool(false),
            BININT1 => Plain::Int(i64::from(take::<1>(&mut r)?[0])),
            BININT2 => Plain::Int(i64::from(u16::from_le_bytes(take(&mut r)?))),
            BININT => Plain::Int(i64::from(i32::from_le_bytes(take(&mut r)?))),
            LONG1 => {
                let [k] = take(&mut r)?;
                let k = usize::from(k);
                if k == 0 || k > 8 || r.len() < k {
                    return None;
                }
                let (digits, rest) = r.split_at(k);
                r = rest;
                let fill = if digits[k - 1] & 0x80 != 0 { 0xff } else { 0 };
                let mut le = [fill; 8];
                le[..k].copy_from_slice(digits);
                Plain::Int(i64::from_le_bytes(le))
            }
            BINFLOAT => Plain::Float(f64::from_be_bytes(take(&mut r)?)),
            SHORT_BINUNICODE | BINUNICODE | SHORT_BINBYTES | BINBYTES => {
                let k = match op {
                    SHORT_BINUNICODE | SHORT_BINBYTES => usize::from(take::<1>(&mut r)?[0]),
                    _ => u32::from_le_bytes(take(&mut r)?) as usize,
                };
                if r.len() <= k || r[k] != MEMOIZE {
                    return None;
                }
                let (data, rest) = r.split_at(k);
                r = &rest[1..];
                memo.push(n);
                match op {
                    SHORT_BINUNICODE | BINUNICODE => Plain::Str(std::str::from_utf8(data).ok()?),
                    _ => Plain::Bytes(data),
                }
            }
            BINGET | LONG_BINGET => {
                let m = match op {
                    BINGET => usize::from(take::<1>(&mut r)?[0]),
                    _ => u32::from_le_bytes(take(&mut r)?) as usize,
                };
                each(Arg::Same(*memo.get(m)?));
                n += 1;
                continue;
            }
            EMPTY_TUPLE | TUPLE1 | TUPLE2 | TUPLE3 | TUPLE => break op,
            _ => return None,
        };
        each(Arg::Value(arg));
        n += 1;
    };
    let closes = match tuple {
        TUPLE => marked,
        EMPTY_TUPLE => !marked && n == 0,
        TUPLE1 => !marked && n == 1,
        TUPLE2 => !marked && n == 2,
        _ => !marked && n == 3,
    };
    let end: &[u8] = if n == 0 {
        &[EMPTY_DICT, MEMOIZE, TUPLE2, MEMOIZE, STOP]
    } else {
        &[MEMOIZE, EMPTY_DICT, MEMOIZE, TUPLE2, MEMOIZE, STOP]
    };
    (closes && r == end).then_some(())
}

/// The next `N` bytes of `r`, taken off it.
fn take<const N: usize>(r: &mut &[u8]) -> Option<[u8; N]> {
    let (head, rest) = r.split_first_chunk::<N>()?;
    *r = rest;
    Some(*head)
}
