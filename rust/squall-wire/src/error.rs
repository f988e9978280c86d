//! What can be wrong with a message off the wire.

use thiserror::Error;

/// A malformed message. Decoders return this for any input they cannot read, and never
/// panic or allocate more than the bytes present justify.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum WireError {
    #[error("truncated message: {what} needs {needed} bytes, {left} left")]
    Truncated {
        what: &'static str,
        needed: usize,
        left: usize,
    },
    #[error("malformed message: {count} {what} cannot fit in the {left} bytes left")]
    CountTooLarge {
        what: &'static str,
        count: usize,
        left: usize,
    },
    #[error("malformed message: {keys} keys for {tasks} tasks")]
    TooFewKeys { keys: usize, tasks: usize },
    #[error("malformed key in message")]
    BadKey,
    #[error("malformed message: {what} is not utf-8")]
    NotUtf8 { what: &'static str },
    #[error("malformed message: {what} index {index} out of range for {len}")]
    BadIndex {
        what: &'static str,
        index: usize,
        len: usize,
    },
    #[error("malformed message: dependency offsets do not increase from 0")]
    BadOffsets,
    #[error("malformed message: negative spec size {0}")]
    NegativeSize(i64),
    #[error("malformed message: {0} trailing bytes")]
    Trailing(usize),
    #[error("{what}: buffer length {len} is not a multiple of {size}")]
    Ragged {
        what: &'static str,
        len: usize,
        size: usize,
    },
}

pub type WireResult<T> = Result<T, WireError>;
