//! The runtime's error is uebpf-maps' (one message that says what failed and why, and its kind).

pub use uebpf_maps::{Error, ErrorKind};

/// An error and its sources, joined with ": " (aya-obj's errors keep the detail in the sources).
///
/// aya-obj's messages quote names read from the object file (symbols, sections, maps): a corrupt
/// file can put line breaks or terminal escapes there. An error message is one printable line,
/// so control characters are written escaped (`\n`, `\u{1b}`).
pub(crate) fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text.chars().flat_map(|c| if c.is_control() { c.escape_default().collect::<Vec<_>>() } else { vec![c] }).collect()
}
