//! uebpf-hook: userspace uprobes and uretprobes by inline hooking, in the current process
//! (x86-64 Linux). See runtime/hook/README.md for what is patched and the limits, and
//! runtime/README.md ("Trust model") for the trust model.
//!
//! ```no_run
//! use uebpf_hook::{resolve, Hook, Location, PtRegs};
//! unsafe extern "C" fn on_call(regs: *mut PtRegs, _data: *mut std::ffi::c_void) {
//!     let first_argument = (*regs).di;
//!     let _ = first_argument;
//! }
//! let target = resolve("/usr/lib/x86_64-linux-gnu/libc.so.6".as_ref(), &Location::parse("getpid"))?;
//! let hook = Hook::entry(&target, on_call, std::ptr::null_mut())?;
//! hook.detach()?;
//! # Ok::<(), uebpf_hook::Error>(())
//! ```
//!
//! Modules, in layers (each uses only modules of the layers before it; tests/unit/test_imports.py
//! checks there is no circle): error, procmaps, regs / codemem, resolve / prologue, syscall_sites /
//! site / dispatch / stubs / patch / hook, syscall_hooks.

mod codemem;
mod dispatch;
mod error;
mod hook;
mod patch;
pub mod procmaps;
mod prologue;
mod regs;
mod resolve;
mod site;
mod stubs;
mod syscall_hooks;
mod syscall_sites;

pub use dispatch::{defer_while_busy, raw_syscall, set_miss_handler, without_probes, MissHandler, SHADOW_CAPACITY};
pub use error::{Error, ErrorKind, Result};
pub use hook::{check, check_function, Hook, PatchKind};
pub use patch::{prepare_live_patching, PatchMethod};
pub use prologue::TRUST_INDIRECT_JUMPS;
pub use regs::PtRegs;
pub use resolve::{
    file_offset, is_mapped_executable, keeping_files, private_data_address, resolve, Function, Location, Target, IFUNC, NO_SYMBOL,
    SIZE_ZERO,
};
pub use site::{Handler, Promises, SiteStats};
pub use syscall_hooks::{hook_system_calls, unhook_system_calls, SyscallCoverage, SyscallEnter, SyscallExit, SyscallHandlers};
pub use syscall_sites::{syscall_sites, SyscallSite};

/// Resolves the function `symbol` (or `0x...` file offset) of `binary` and returns its address.
pub fn resolve_address(binary: &std::path::Path, symbol_or_offset: &str) -> Result<usize> {
    resolve(binary, &Location::parse(symbol_or_offset)).map(|target| target.address)
}

/// What the crate's unit tests share.
#[cfg(test)]
mod testing {
    /// This process's C library, as its mappings name it.
    pub(crate) fn libc_path() -> std::path::PathBuf {
        let maps = crate::procmaps::read().unwrap();
        maps.into_iter().find(|m| m.path.ends_with("/libc.so.6")).expect("libc.so.6 mapped").path.into()
    }
}
