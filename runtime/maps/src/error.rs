//! The error of every uebpf operation that can fail: one message saying what failed and why
//! (the uebpf crate uses it too), and its kind, for callers that act on the reason rather than
//! show it.

use std::fmt;

/// What kind of failure an [`Error`] is: callers branch on this, never on the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// What was to be created exists already (`Region::create`: a region of that name).
    AlreadyExists,
    /// What was named does not exist: a region file, or a map, program, attachment or object
    /// section asked for by id, name or index.
    NotFound,
    /// `Region::open` will not use the region: it is not a regular file of this process's
    /// user, mode 0600, with one name (see `check_trusted`). The message starts with
    /// [`REFUSED`](crate::REFUSED).
    Refused,
    /// The region's arena has no room left for a map's storage or a program.
    RegionFull,
    /// A table of fixed capacity is full: the region's maps, programs, attachments or agents,
    /// or this process's handles.
    TableFull,
    /// The file is not a (complete) uebpf region of this layout version, or what the region
    /// holds is out of range.
    Corrupt,
    /// Invalid or unsupported input: a name, map definition, object, program or argument.
    Invalid,
    /// A program stopped while it ran (the interpreter's checks or its instruction budget).
    ProgramStopped,
    /// The system failed the operation: a system call, or a page size other than 4 KiB.
    System,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error { kind, message: message.into() }
    }

    /// An [`ErrorKind::Invalid`] error, the most common kind.
    pub fn invalid(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Invalid, message)
    }

    /// An [`ErrorKind::NotFound`] error.
    pub fn not_found(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::NotFound, message)
    }

    /// `what: err`, of the kind the I/O error's errno says (NotFound, AlreadyExists, or System).
    pub fn io(what: impl fmt::Display, err: std::io::Error) -> Error {
        let kind = match err.kind() {
            std::io::ErrorKind::NotFound => ErrorKind::NotFound,
            std::io::ErrorKind::AlreadyExists => ErrorKind::AlreadyExists,
            _ => ErrorKind::System,
        };
        Error::new(kind, format!("{what}: {err}"))
    }

    /// The same error said of `what`: `what: message`, the kind kept.
    pub fn context(self, what: impl fmt::Display) -> Error {
        Error { kind: self.kind, message: format!("{what}: {}", self.message) }
    }

    pub fn kind(&self) -> ErrorKind {
        self.kind
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}
