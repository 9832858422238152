//! A uprobe attached to `pid` of a process that has no agent: the server loads the agent into
//! it (uebpf::inject, the code `uebpf inject` runs) before the attach returns, so that a loader
//! given the pid of a process started without the agent traces it as the kernel would. When
//! the injection is refused or fails, the attach fails with its errno and one line on stderr.
//!
//! Only a process that maps the probed binary and no agent file is injected: one that maps the
//! agent (preloaded, or injected before) finds the region itself, and one that does not map the
//! binary could not be hooked anyway (the agent would report it). Nor is a stopped process: a
//! harness's child stopped between its fork and its exec (whose program may well get the agent
//! preloaded, and a probe on libc finds libc mapped already) must not be refused; its
//! attachment waits in the table for an agent, as before injection existed. `UEBPF_NO_INJECT=1`
//! opts out.

use std::ffi::{c_int, CStr};
use std::path::PathBuf;
use std::time::Duration;

use uebpf::inject::{self, Request, AGENT_FILE};
use uebpf_maps::{AttachKind, AttachSpec, Region};

/// The opt-out: set to anything but "" or "0", attaches never inject.
const NO_INJECT_ENV: &str = "UEBPF_NO_INJECT";
/// How long an attach waits for the injected agent's first pass.
const APPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// Injects the agent into `spec.pid` if the attachment needs one there (see the module comment).
pub fn agent_for(spec: &AttachSpec, region: &Region) -> Result<(), c_int> {
    let pid = match (spec.kind, u32::try_from(spec.pid)) {
        (AttachKind::Uprobe | AttachKind::Uretprobe, Ok(pid)) if pid != std::process::id() => pid,
        _ => return Ok(()),
    };
    if std::env::var(NO_INJECT_ENV).is_ok_and(|v| !v.is_empty() && v != "0")
        || region.agent(pid).is_some()
        || !inject::lacks_agent_for(pid, spec.dev, spec.ino)
        || inject::is_stopped(pid)
    {
        return Ok(());
    }
    let refuse = |errno: c_int, why: &str| {
        eprintln!("uebpf: cannot attach to process {pid}: loading the agent into it: {why} ({NO_INJECT_ENV}=1 attaches without)");
        errno
    };
    let agent = agent_path().ok_or_else(|| refuse(libc::ENOENT, &format!("no {AGENT_FILE} beside libuebpf_server.so")))?;
    let request = Request { pid, agent: &agent, force: false, timeout: APPLY_TIMEOUT };
    inject::inject(&request, &crate::lifetime::region_name()).map(drop).map_err(|f| refuse(f.errno, &f.message))
}

/// `libuebpf_agent.so` in the directory this library was loaded from.
fn agent_path() -> Option<PathBuf> {
    // SAFETY: dladdr fills `info` for an address in this library; the name it gives stays valid
    // while the library is loaded.
    let ours = unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        if libc::dladdr(agent_path as *const libc::c_void, &mut info) == 0 || info.dli_fname.is_null() {
            return None;
        }
        PathBuf::from(CStr::from_ptr(info.dli_fname).to_str().ok()?)
    };
    Some(ours.parent()?.join(AGENT_FILE)).filter(|path| path.exists())
}
