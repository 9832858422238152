//! The entry points `uebpf inject` and `uebpf detach` call in a running process, on a thread
//! they borrowed through ptrace (uebpf::inject). That thread is the target's: each call returns
//! quickly and leaves the hooking to the agent's own thread, as for attaches made after start-up
//! (live patching behind a barrier).
//!
//! An agent loaded this way cannot interpose `sigaction` (the target's calls were bound to the
//! C library long before): its thread hooks the C library's instead before it installs the
//! fault-safe probe reads' SIGSEGV/SIGBUS handler (signals.rs), and `uebpf detach` undoes both.

use std::ffi::{c_char, c_int, CStr};
use std::os::fd::{FromRawFd, OwnedFd};
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

/// As `uebpf_agent_follow`, in a process whose user is not the region's (a server's worker that
/// dropped root, injected by root): `request` is the region's name, a NUL, then the name of an
/// abstract unix socket (NUL-terminated) on which the injector hands over the region's file
/// (SCM_RIGHTS), which the agent then uses for that name (maps' `hand`): a region of another
/// user is never opened by name. Returns 0, or -errno (the socket, the hand-over, the file).
///
/// # Safety
/// `request` is NULL or points at two consecutive NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn uebpf_agent_follow_handed(request: *const c_char) -> c_int {
    if request.is_null() {
        return -libc::EINVAL;
    }
    let name = CStr::from_ptr(request);
    let socket = CStr::from_ptr(request.add(name.to_bytes().len() + 1));
    let Some(name) = name.to_str().ok().filter(|name| check_name(name).is_ok()) else {
        return -libc::EINVAL;
    };
    let handed = without_probes(|| {
        let fd = receive_descriptor(socket.to_bytes())?;
        uebpf::maps::hand(name, fd).map_err(|_| libc::EPERM)
    });
    match handed {
        Ok(()) => uebpf_agent_follow(request),
        Err(errno) => -errno,
    }
}

/// How long the agent waits for the injector's hand-over.
const HAND_OVER_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The descriptor the injector sends on abstract unix socket `name` (one SCM_RIGHTS message,
/// which std's stable API cannot receive: recvmsg by hand).
fn receive_descriptor(name: &[u8]) -> Result<OwnedFd, c_int> {
    use std::os::fd::AsRawFd;
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixStream};
    let errno = |e: std::io::Error| e.raw_os_error().unwrap_or(libc::EIO);
    let address = SocketAddr::from_abstract_name(name).map_err(errno)?;
    let socket = UnixStream::connect_addr(&address).map_err(errno)?;
    socket.set_read_timeout(Some(HAND_OVER_WAIT)).map_err(errno)?;
    let mut byte = 0u8;
    let mut data = libc::iovec { iov_base: (&mut byte as *mut u8).cast(), iov_len: 1 };
    // Room for one descriptor's control message (CMSG_SPACE(sizeof(int))), 8-aligned.
    let mut control = [0u64; 4];
    // SAFETY: zeroed msghdr pointing at our buffers.
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    message.msg_iov = &mut data;
    message.msg_iovlen = 1;
    message.msg_control = control.as_mut_ptr().cast();
    message.msg_controllen = std::mem::size_of_val(&control);
    // SAFETY: our socket and message.
    if unsafe { libc::recvmsg(socket.as_raw_fd(), &mut message, libc::MSG_CMSG_CLOEXEC) } <= 0 {
        return Err(errno(std::io::Error::last_os_error()));
    }
    // SAFETY: the kernel filled the control buffer; CMSG_FIRSTHDR and CMSG_DATA read inside it.
    unsafe {
        let header = libc::CMSG_FIRSTHDR(&message);
        if header.is_null() || (*header).cmsg_level != libc::SOL_SOCKET || (*header).cmsg_type != libc::SCM_RIGHTS {
            return Err(libc::EPROTO);
        }
        let fd = (libc::CMSG_DATA(header) as *const c_int).read_unaligned();
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

/// Removes every hook the agent made (the original bytes come back, the C library's
/// `sigaction` included, and SIGSEGV/SIGBUS go back to the process's own disposition) and stops
/// following any region: the library stays loaded, inert, until the next `uebpf_agent_follow`. Returns how
/// many hooks it removed.
#[no_mangle]
pub extern "C" fn uebpf_agent_detach() -> c_int {
    without_probes(|| {
        let removed = end_following();
        uebpf::maps::forget_handed();
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
