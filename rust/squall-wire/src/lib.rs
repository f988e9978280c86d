//! squall's hot wire messages (docs/protocol.md#hot-payload-layouts): their byte formats,
//! encoded from and decoded into the core's types without Python, so that they can be
//! tested and fuzzed alone. Decoders return [`WireError`] on any malformed input: they
//! never panic and check every length and count against the bytes present before
//! allocating for it. The binding (squall-py) only converts to and from Python objects.

mod addresses;
pub mod compute;
mod error;
pub mod graph;
pub mod keys;
pub mod notices;
pub mod packed;
mod reader;
pub mod who_has;

pub use error::{WireError, WireResult};

#[cfg(test)]
mod tests;
