//! Panics of code that parses untrusted input become errors, quietly.
//!
//! aya-obj panics on some malformed objects (slice indexes taken from the file), and a panic
//! that reaches a C caller aborts the host process. `catch` runs such code under
//! `catch_unwind` and turns a panic into an `Error` naming the panic's message and place.
//!
//! Quietly: the default panic hook prints the message, and with `RUST_BACKTRACE` set a whole
//! backtrace, to the host's stderr. While `catch` runs on a thread, a hook installed once (on
//! first use) records the message for the error instead of printing it. Every other panic goes
//! to the hook that was in place before ours: a host's own hook keeps working, on other threads
//! and outside `catch`. (In a shared library, std and its hook are the library's own; a Rust
//! host linking the rlib shares them, and its hook is kept as above.) A host that replaces the
//! hook after our first use only gives up the quiet part: panics are still caught.

use std::cell::{Cell, RefCell};
use std::panic::{AssertUnwindSafe, PanicHookInfo};
use std::sync::Once;

use crate::error::Error;

thread_local! {
    /// How many `catch` calls are active on this thread (they may nest).
    static CATCHING: Cell<u32> = const { Cell::new(0) };
    /// The last panic `catch` recorded on this thread.
    static CAUGHT: RefCell<Option<String>> = const { RefCell::new(None) };
}

static INSTALL: Once = Once::new();

/// The panic's message and where it happened, on one line.
fn describe(info: &PanicHookInfo<'_>) -> String {
    let payload = info.payload();
    let message = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into());
    let message: String = message.chars().map(|c| if c == '\n' { ' ' } else { c }).collect();
    match info.location() {
        // The crate's directory and file (`aya-obj-0.3.0/src/obj.rs:675`), not the whole
        // registry path.
        Some(at) => {
            let file = at.file();
            let short = match file.rfind("/src/") {
                Some(src) => &file[file[..src].rfind('/').map_or(0, |slash| slash + 1)..],
                None => file,
            };
            format!("{message} (at {short}:{})", at.line())
        }
        None => message,
    }
}

fn install_hook() {
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            // try_with: a panic while the thread's locals are being torn down is not ours.
            let ours = CATCHING.try_with(|c| c.get() > 0).unwrap_or(false);
            if ours {
                let text = describe(info);
                let _ = CAUGHT.try_with(|c| *c.borrow_mut() = Some(text));
            } else {
                previous(info);
            }
        }));
    });
}

/// Runs `f`; a panic inside it becomes `Err("MESSAGE (at FILE:LINE)")`, and prints nothing.
/// `f` must leave nothing it shares in a broken state if it unwinds half-way.
pub fn quietly<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    install_hook();
    CATCHING.with(|c| c.set(c.get() + 1));
    let result = std::panic::catch_unwind(AssertUnwindSafe(f));
    CATCHING.with(|c| c.set(c.get() - 1));
    result.map_err(|_| CAUGHT.with(|c| c.borrow_mut().take()).unwrap_or_else(|| "a panic".into()))
}

/// Runs a parser of untrusted input: a panic inside it becomes `Err` with "`what` failed on
/// malformed input: MESSAGE (at FILE:LINE)", and prints nothing. `f` works on data it owns,
/// dropped with the error (callers pass nothing they share).
pub fn catch<T>(what: &str, f: impl FnOnce() -> Result<T, Error>) -> Result<T, Error> {
    quietly(f).unwrap_or_else(|message| Err(Error::invalid(format!("{what} failed on malformed input: {message}"))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_an_error_with_its_message_and_place() {
        let err = catch("the parser", || -> Result<(), Error> {
            let v: Vec<u8> = Vec::new();
            let i = std::hint::black_box(3);
            std::hint::black_box(v[i]);
            Ok(())
        })
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("the parser failed on malformed input: index out of bounds"), "{err}");
        assert!(err.contains("(at ") && err.contains("panics.rs:"), "{err}");
        assert!(!err.contains('\n'));
        assert_eq!(catch("x", || Ok(5)).unwrap(), 5);
        assert_eq!(catch("x", || Err::<(), _>(Error::not_found("no"))).unwrap_err(), Error::not_found("no"));
        // Nested: the inner one is caught by the inner catch.
        let outer = catch("outer", || catch("inner", || -> Result<(), Error> { panic!("deep") }).map_err(|e| e.context("kept")));
        assert!(outer.unwrap_err().to_string().starts_with("kept: inner failed on malformed input: deep"));
    }
}
