//! The runtime's error: one message that says what failed and why.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error(pub String);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

impl From<uebpf_maps::RegionError> for Error {
    fn from(e: uebpf_maps::RegionError) -> Self {
        Error(e.0)
    }
}

/// An error and its sources, joined with ": " (aya-obj's errors keep the detail in the sources).
pub(crate) fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text
}
