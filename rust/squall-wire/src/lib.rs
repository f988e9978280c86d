//! squall's hot wire messages (docs/protocol.md#hot-payload-layouts): their byte formats,
//! encoded from and decoded into the core's types without Python, so that they can be
//! tested and fuzzed alone. Decoders return [`WireError`] on any malformed input: they
//! never panic and check every length and count against the bytes present before
//! allocating for it. The binding (squall-py) only converts to and from Python objects.
//! The modules that need squall-core's types sit behind the `scheduler` feature.

#[cfg(feature = "scheduler")]
pub mod acquire;
#[cfg(feature = "scheduler")]
mod addresses;
#[cfg(feature = "scheduler")]
pub mod compute;
mod error;
pub mod finished;
#[cfg(feature = "scheduler")]
pub mod graph;
#[cfg(feature = "scheduler")]
pub mod keys;
#[cfg(feature = "scheduler")]
pub mod notices;
#[cfg(feature = "scheduler")]
pub mod ops;
pub mod packed;
pub mod plain_pickle;
#[cfg(feature = "scheduler")]
mod reader;
pub mod spec;
#[cfg(feature = "scheduler")]
pub mod who_has;

pub use error::{WireError, WireResult};

#[cfg(all(test, feature = "scheduler"))]
mod tests;
#[cfg(all(test, feature = "scheduler"))]
mod tests_blobs;
#[cfg(test)]
mod tests_finished;
#[cfg(test)]
mod tests_spec;
