//! The entry points `uebpf inject` and `uebpf detach` call in a running process, on a thread
//! they borrowed through ptrace (uebpf::inject). That thread is the target's: each call returns
//! quickly and leaves the hooking to the agent's own thread, as for attaches made after start-up
//! (live patching behind a barrier).
//!
//! An agent loaded this way cannot interpose `sigaction` (the target's calls were bound to the
//! C library long before): its thread hooks the C library's instead before it installs the
//! fault-safe probe reads' SIGSEGV/SIGBUS handler (signals.rs), and `uebpf detach` undoes both.

use std::ffi::{c_char, c_int, CStr};
use std::sync::atomic::Ordering;

use uebpf::maps::{check_name, current};
use uebpf_hook::without_probes;

use crate::session::Session;
use crate::{followed_name, register_process_handlers, signals, watcher, FOLLOWING, STATE};

/// Makes the agent follow region `region` (a NUL-terminated name) from its thread: the first
/// pass happens there, and the agent table says when it is done (`uebpf wait-applied`).
/// Following another region first ends the current one (its hooks removed, its slot freed).
/// Returns 0, or -EINVAL for a name that is not a region name.
///
/// # Safety
/// `region` is NULL or points at a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn uebpf_agent_follow(region: *const c_char) -> c_int {
    if region.is_null() {
        return -libc::EINVAL;
    }
    let Some(name) = CStr::from_ptr(region).to_str().ok().filter(|name| check_name(name).is_ok()) else {
        return -libc::EINVAL;
    };
    without_probes(|| {
        // Cached before any probe may need it, as at start-up.
        current::pid();
        let name = name.to_string();
        let same = STATE.with(|state| followed_name(state).as_ref() == Some(&name));
        if same && FOLLOWING.load(Ordering::Acquire) {
            return 0;
        }
        end_following();
        signals::INJECTED.store(true, Ordering::Release);
        STATE.with(|state| state.followed = Some(name.clone()));
        FOLLOWING.store(true, Ordering::Release);
        register_process_handlers();
        watcher::spawn(name);
        0
    })
}

/// Removes every hook the agent made (the original bytes come back, the C library's
/// `sigaction` included, and SIGSEGV/SIGBUS go back to the process's own disposition) and stops
/// following any region: the library stays loaded, inert, until the next `uebpf_agent_follow`. Returns how
/// many hooks it removed.
#[no_mangle]
pub extern "C" fn uebpf_agent_detach() -> c_int {
    without_probes(|| {
        let removed = end_following();
        crate::signals::end_diversion();
        c_int::try_from(removed).unwrap_or(c_int::MAX)
    })
}

/// Retires the agent's thread (it ends at its next wakeup, within a second, changing nothing)
/// and ends the session; returns how many hooks were removed.
fn end_following() -> usize {
    FOLLOWING.store(false, Ordering::Release);
    watcher::retire();
    STATE.with(|state| state.session.take().map_or(0, Session::end))
}
