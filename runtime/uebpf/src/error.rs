//! The runtime's error is uebpf-maps' (one message that says what failed and why, and its kind).

pub use uebpf_maps::{Error, ErrorKind};

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
