//! Packed little-endian arrays (task ids, run ids, sizes, seconds): the `finished`
//! report, `free-keys` / `remove-replicas` and the id lists the scheduler returns.

use crate::error::{WireError, WireResult};

/// A fixed-size item of a packed array.
pub trait Packed: Copy {
    const SIZE: usize;
    /// From exactly `SIZE` bytes.
    fn read(b: &[u8]) -> Self;
    fn write(self, out: &mut Vec<u8>);
}

macro_rules! packed {
    ($($t:ty),*) => {$(
        impl Packed for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            fn read(b: &[u8]) -> Self {
                <$t>::from_le_bytes(b.try_into().expect("chunks_exact gives SIZE bytes"))
            }
            fn write(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
        }
    )*};
}
packed!(u32, u64, i64, f64);

/// Reads a packed array; `what` names it in the error if its length is ragged.
pub fn decode<T: Packed>(b: &[u8], what: &'static str) -> WireResult<Vec<T>> {
    if !b.len().is_multiple_of(T::SIZE) {
        return Err(WireError::Ragged {
            what,
            len: b.len(),
            size: T::SIZE,
        });
    }
    Ok(b.chunks_exact(T::SIZE).map(T::read).collect())
}

/// Appends `x` to a packed array.
pub fn put<T: Packed>(out: &mut Vec<u8>, x: T) {
    x.write(out);
}

pub fn encode<T: Packed>(items: impl IntoIterator<Item = T>) -> Vec<u8> {
    let items = items.into_iter();
    let mut out = Vec::with_capacity(items.size_hint().0 * T::SIZE);
    for x in items {
        x.write(&mut out);
    }
    out
}
