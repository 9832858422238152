//! The region the server serves from: named by `UEBPF_REGION` (default `default`, i.e.
//! `/dev/shm/uebpf-default`), sized by `UEBPF_REGION_SIZE` (bytes of map and program storage,
//! suffixes K, M, G; default 256M: the file is sparse, only what maps touch uses memory),
//! created on the loader's first bpf(2) call, mode 0600, and removed when the loader exits:
//! at `exit` (atexit), and on the signals whose default action kills it (SIGINT, SIGTERM,
//! SIGHUP, SIGQUIT, crashes), for which the server installs a handler only where the loader
//! left the default: it removes the file and re-raises the signal, so the loader dies as it
//! would have. A region left by a loader killed with SIGKILL is replaced by the next loader
//! that uses its name (its creator is gone); a region whose creator lives is never touched.

use std::ffi::{c_int, CString};
use std::sync::OnceLock;

use uebpf_maps::{region_path, ErrorKind, Region, RegionSpec, DEFAULT_REGION, REGION_ENV};

pub const SIZE_ENV: &str = "UEBPF_REGION_SIZE";
const DEFAULT_SIZE: u64 = 256 << 20;
/// Table sizes: libbpf's feature probes add a few maps and programs of their own.
const CAPACITY: u32 = 256;

static REGION: OnceLock<Result<Region, String>> = OnceLock::new();
/// The file to remove; set once the region exists.
static PATH: OnceLock<CString> = OnceLock::new();

/// The server's region, created on first use. If it cannot be created, the reason is printed
/// on stderr once and every call that needs the region fails: with EEXIST if another live
/// loader holds the name, else EIO.
pub fn region() -> Result<&'static Region, c_int> {
    let created = REGION.get_or_init(|| {
        let result = create();
        if let Err(why) = &result {
            eprintln!("uebpf: {why}");
        }
        result
    });
    created.as_ref().map_err(|why| if why.contains("belongs to the running process") { libc::EEXIST } else { libc::EIO })
}

/// The region's name: `UEBPF_REGION`, else `default`.
pub fn region_name() -> String {
    std::env::var(REGION_ENV).unwrap_or_else(|_| DEFAULT_REGION.into())
}

fn create() -> Result<Region, String> {
    let name = region_name();
    let arena_bytes = match std::env::var(SIZE_ENV) {
        Ok(text) => uebpf_maps::parse_region_size(&text).ok_or_else(|| format!("{SIZE_ENV}={text:?} is not a size (e.g. 256M)"))?,
        Err(_) => DEFAULT_SIZE,
    };
    let spec = RegionSpec { arena_bytes, map_capacity: CAPACITY, prog_capacity: CAPACITY, attach_capacity: CAPACITY };
    let region = match Region::create(&name, spec) {
        Err(e) if e.kind() == ErrorKind::AlreadyExists && remove_if_orphaned(&name)? => Region::create(&name, spec),
        other => other,
    }
    .map_err(|e| format!("{e} (set {REGION_ENV} to give each loader its own region)"))?;
    let path = CString::new(region_path(&name).into_os_string().into_encoded_bytes()).expect("region names hold no NUL");
    let _ = PATH.set(path);
    // SAFETY: registers plain functions; see their comments.
    unsafe {
        libc::atexit(remove_at_exit);
        for signal in [
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGHUP,
            libc::SIGQUIT,
            libc::SIGSEGV,
            libc::SIGBUS,
            libc::SIGABRT,
            libc::SIGFPE,
            libc::SIGILL,
        ] {
            remove_on_signal(signal);
        }
    }
    Ok(region)
}

/// True (after removing it) if region `name` was left by a process that no longer exists.
fn remove_if_orphaned(name: &str) -> Result<bool, String> {
    let existing = Region::open(name).map_err(|e| e.to_string())?;
    let owner = existing.creator_pid() as libc::pid_t;
    // SAFETY: signal 0 only checks that the process exists.
    let gone = unsafe { libc::kill(owner, 0) } == -1 && crate::real::errno() == libc::ESRCH;
    if !gone {
        return Err(format!("region {} belongs to the running process {owner}", region_path(name).display()));
    }
    std::fs::remove_file(region_path(name))
        .map_err(|e| format!("cannot remove the orphaned region {}: {e}", region_path(name).display()))?;
    Ok(true)
}

fn remove_file() {
    if let Some(path) = PATH.get() {
        // SAFETY: unlink is async-signal-safe; the path is a valid C string that lives forever.
        unsafe { libc::unlink(path.as_ptr()) };
    }
}

extern "C" fn remove_at_exit() {
    remove_file();
}

extern "C" fn remove_and_reraise(signal: c_int) {
    // The handler was installed with SA_RESETHAND: the default action is back, and the signal
    // is blocked until we return, when it kills the process as it would have without us.
    remove_file();
    // SAFETY: raise is async-signal-safe.
    unsafe { libc::raise(signal) };
}

/// Installs `remove_and_reraise` for `signal` if the loader left its default action.
unsafe fn remove_on_signal(signal: c_int) {
    let mut old: libc::sigaction = std::mem::zeroed();
    if libc::sigaction(signal, std::ptr::null(), &mut old) != 0 || old.sa_sigaction != libc::SIG_DFL {
        return;
    }
    let mut action: libc::sigaction = std::mem::zeroed();
    action.sa_sigaction = remove_and_reraise as *const () as usize;
    action.sa_flags = libc::SA_RESETHAND;
    libc::sigemptyset(&mut action.sa_mask);
    libc::sigaction(signal, &action, std::ptr::null_mut());
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes() {
        assert_eq!(uebpf_maps::parse_region_size("256M"), Some(256 << 20));
        assert_eq!(uebpf_maps::parse_region_size("4096"), Some(4096));
        assert_eq!(uebpf_maps::parse_region_size("1g"), Some(1 << 30));
        assert_eq!(uebpf_maps::parse_region_size("x"), None);
        assert_eq!(uebpf_maps::parse_region_size("0"), None);
    }
}
