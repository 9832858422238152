//! One error type: what went wrong, in one line that names the function and the reason.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The binary, symbol or offset could not be turned into an address in this process.
    Resolve,
    /// The function cannot be hooked safely; it was left untouched.
    Refused,
    /// A system call failed (mmap, mprotect, membarrier, /proc).
    System,
}

#[derive(Debug, Clone)]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
}

impl Error {
    pub(crate) fn resolve(message: impl Into<String>) -> Error {
        Error { kind: ErrorKind::Resolve, message: message.into() }
    }

    pub(crate) fn refused(function: &str, reason: impl fmt::Display) -> Error {
        Error { kind: ErrorKind::Refused, message: format!("cannot hook {function}: {reason}") }
    }

    /// The same error, with why it mattered here: "REASON, and WHY".
    pub(crate) fn because(mut self, why: &str) -> Error {
        self.message = format!("{}, and {why}", self.message);
        self
    }

    pub(crate) fn system(what: impl fmt::Display, err: std::io::Error) -> Error {
        Error { kind: ErrorKind::System, message: format!("{what}: {err}") }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;
