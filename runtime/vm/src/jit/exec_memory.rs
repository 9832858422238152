//! Executable memory for JIT output, W^X: the code is written into a private read-write mapping,
//! which is then turned read+execute (never writable and executable at once).

use memmap2::{Mmap, MmapMut};

pub(crate) struct ExecutableCode {
    map: Mmap,
}

impl ExecutableCode {
    pub(crate) fn new(code: &[u8]) -> std::io::Result<ExecutableCode> {
        let mut writable = MmapMut::map_anon(code.len())?;
        writable.copy_from_slice(code);
        Ok(ExecutableCode { map: writable.make_exec()? })
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.map
    }
}
