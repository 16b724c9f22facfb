//! The one place that knows how keys and values are laid out on disk (see `keys` and
//! `records`). Formats are versioned: keys by `keys::FORMAT_VERSION`, values by a leading byte.

pub mod bytes;
pub mod keys;
pub mod records;

pub use bytes::Malformed;
