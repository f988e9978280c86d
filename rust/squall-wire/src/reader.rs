//! A bounds-checked cursor over a message: every read checks the bytes left first.

use crate::error::{WireError, WireResult};
use squall_core::Key;

pub(crate) struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(b: &'a [u8]) -> Self {
        Self { b, pos: 0 }
    }

    pub(crate) fn done(&self) -> bool {
        self.pos >= self.b.len()
    }

    pub(crate) fn left(&self) -> usize {
        self.b.len() - self.pos
    }

    pub(crate) fn take(&mut self, n: usize, what: &'static str) -> WireResult<&'a [u8]> {
        let left = self.left();
        if n > left {
            return Err(WireError::Truncated {
                what,
                needed: n,
                left,
            });
        }
        let s = &self.b[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    pub(crate) fn arr<const N: usize>(&mut self, what: &'static str) -> WireResult<[u8; N]> {
        let mut a = [0; N];
        a.copy_from_slice(self.take(N, what)?);
        Ok(a)
    }

    pub(crate) fn u16(&mut self, what: &'static str) -> WireResult<u16> {
        Ok(u16::from_le_bytes(self.arr(what)?))
    }

    pub(crate) fn u32(&mut self, what: &'static str) -> WireResult<u32> {
        Ok(u32::from_le_bytes(self.arr(what)?))
    }

    /// A count of items of at least `min_size` bytes each, checked against the bytes
    /// left so that a lying count cannot make the caller allocate for it.
    pub(crate) fn count(&self, n: usize, min_size: usize, what: &'static str) -> WireResult<usize> {
        let left = self.left();
        match n.checked_mul(min_size) {
            Some(need) if need <= left => Ok(n),
            _ => Err(WireError::CountTooLarge {
                what,
                count: n,
                left,
            }),
        }
    }

    /// `u32 length | bytes`.
    pub(crate) fn bytes(&mut self, what: &'static str) -> WireResult<&'a [u8]> {
        let n = self.u32(what)? as usize;
        self.take(n, what)
    }

    pub(crate) fn str(&mut self, what: &'static str) -> WireResult<&'a str> {
        std::str::from_utf8(self.bytes(what)?).map_err(|_| WireError::NotUtf8 { what })
    }

    /// A key in squall-core's canonical encoding, as `bytes`: checked, and left as the
    /// message's bytes.
    pub(crate) fn key_bytes(&mut self) -> WireResult<&'a [u8]> {
        let b = self.bytes("key")?;
        Key::is_encoded(b).then_some(b).ok_or(WireError::BadKey)
    }

    /// Fails unless every byte was read.
    pub(crate) fn finish(&self) -> WireResult<()> {
        match self.left() {
            0 => Ok(()),
            n => Err(WireError::Trailing(n)),
        }
    }
}
