//! The agent's thread: it waits for the region to exist (looking every 10 ms), follows its
//! attach table (sleeping on the generation futex, woken by every attach, enable, disable and
//! detach), and notices when the region goes away (its loader exited: the file was removed, or
//! its creator is gone), then removes every hook and waits for a region of that name again.
//!
//! The thread blocks every asynchronous signal but the hook engine's checkpoint signal
//! (SIGRTMAX; a signal sent to the process, such as the SIGUSR1 a harness uses to start a
//! paused target, must reach the target's own threads) and
//! runs with probes off (`without_probes`): its mallocs and libc calls are the agent's, not the
//! target's, and no probe sees them.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use uebpf::maps::{current, region_path, ErrorKind, Region};
use uebpf_hook::without_probes;

use crate::session::Session;
use crate::{warn, warn_refused, STATE};

/// How often a sleeping agent checks that its region still exists (a removal wakes nobody).
const LIVENESS_PERIOD: Duration = Duration::from_secs(1);
/// How often a thread waiting for its region looks for it.
const REGION_POLL: Duration = Duration::from_millis(10);
/// How long a region file may stay unopenable (being created) before the agent says why.
const CREATION_PATIENCE: Duration = Duration::from_secs(2);

/// Which thread follows: a thread started at an older epoch has been retired (`uebpf detach`, or
/// `uebpf inject` naming another region) and ends at its next wakeup, touching nothing.
static EPOCH: AtomicU32 = AtomicU32::new(0);

/// Retires every running thread: from now on none of them changes the agent's state.
pub(crate) fn retire() {
    EPOCH.fetch_add(1, Ordering::AcqRel);
}

fn current(epoch: u32) -> bool {
    EPOCH.load(Ordering::Acquire) == epoch
}

/// Starts the thread, with every asynchronous signal blocked from its first instruction.
///
/// With pthread_create, not std::thread: std's spawn gives the spawning thread (the target's
/// main thread, or a forked child's only one) a thread-local with a destructor (its spawn
/// hooks), and glibc frees that destructor's record at the thread's exit (`__call_tls_dtors`,
/// stdlib/cxa_thread_atexit_impl.c) with the target's probes on: one `free` per process that a
/// probe on free counted as the target's. The agent's thread exits only when retired (`uebpf detach`).
pub(crate) fn spawn(name: String) {
    let epoch = EPOCH.load(Ordering::Acquire);
    // SAFETY: signal masks of the calling thread, restored right after the spawn; the thread
    // takes ownership of the boxed name and epoch.
    unsafe {
        // The hook engine's checkpoint signal stays open: a live patch made by another thread
        // (a successor after `uebpf detach` and a new inject, while the retired thread has not
        // woken yet; a self-tracing loader's own threads) must see this thread stop too, since
        // it runs libc code that may be the function being patched.
        let all = uebpf::signals::helper_thread_mask();
        let mut previous: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut previous);
        // Probes off on the spawning thread too: the spawn is the agent's work, not the target's.
        let error = without_probes(|| {
            let name = Box::into_raw(Box::new((name, epoch)));
            let mut thread: libc::pthread_t = 0;
            let error = libc::pthread_create(&mut thread, std::ptr::null(), run, name.cast());
            if error == 0 {
                libc::pthread_setname_np(thread, c"uebpf-agent".as_ptr());
                libc::pthread_detach(thread);
            } else {
                drop(Box::from_raw(name));
            }
            error
        });
        libc::pthread_sigmask(libc::SIG_SETMASK, &previous, std::ptr::null_mut());
        if error != 0 {
            let e = std::io::Error::from_raw_os_error(error);
            warn(&format!("cannot start the agent thread, later attaches will not be seen: {e}"));
        }
    }
}

/// The thread's body; a panic ends the thread with one line, never unwinds into C.
extern "C" fn run(name: *mut libc::c_void) -> *mut libc::c_void {
    without_probes(|| {
        // SAFETY: `spawn` passed the boxed name and epoch and gave up its ownership.
        let (name, epoch) = *unsafe { Box::from_raw(name.cast::<(String, u32)>()) };
        // Under STATE's lock, as every change of the agent's: a fork waits for it.
        STATE.with(|_| uebpf_hook::prepare_live_patching());
        if std::panic::catch_unwind(|| watch(&name, epoch)).is_err() {
            warn("the agent's thread stopped after an internal error; later attaches will not be seen");
        }
    });
    std::ptr::null_mut()
}

/// Every change of the agent's state is made under STATE's lock by a current thread only, so a
/// retired one (see `retire`) can never undo what its successor or a detach did.
fn watch(name: &str, epoch: u32) {
    while current(epoch) {
        let connected = STATE.with(|state| state.session.as_ref().map(|s| (s.region().clone(), s.seen)));
        let Some((region, seen)) = connected else {
            let Some(region) = wait_for_region(name, epoch) else { return };
            match Session::new(region.clone()) {
                Ok(mut session) => STATE.with(|state| {
                    if current(epoch) {
                        session.pass();
                        state.session = Some(session);
                    }
                }),
                Err(e) => {
                    warn(&e);
                    while !is_gone(&region) && current(epoch) {
                        std::thread::sleep(LIVENESS_PERIOD);
                    }
                }
            }
            continue;
        };
        if region.wait_attach_change(seen, LIVENESS_PERIOD) != seen {
            STATE.with(|state| current(epoch).then(|| state.session.as_mut().map(Session::pass)));
        } else if is_gone(&region) {
            STATE.with(|state| current(epoch).then(|| state.session.take().map(Session::end)));
            // The region's last references are the leaked probes' (a thread may still run one).
        } else {
            // Under the state lock, as every change of the agent's hooks.
            STATE.with(|_locked| current(epoch).then(crate::syscalls::drop_returned));
        }
    }
}

/// The region was removed (its loader exited), or its creator died without removing it.
fn is_gone(region: &Region) -> bool {
    // SAFETY: fstat into a zeroed buffer on a descriptor the region owns.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    let unlinked = unsafe { libc::fstat(region.fd(), &mut stat) } == 0 && stat.st_nlink == 0;
    unlinked || current::process_is_gone(region.creator_pid())
}

/// Blocks until region `name` exists and opens (None once the thread is retired). The path is checked every few milliseconds:
/// inotify would answer at once, but through a descriptor that a target closing every
/// descriptor it did not open (daemons do) could take away and reuse for one of its own.
fn wait_for_region(name: &str, epoch: u32) -> Option<Region> {
    let path = region_path(name);
    let creations = STATE.with(|_| Creations::get(path.parent().unwrap_or(std::path::Path::new("/"))));
    let mut unopenable_since: Option<Instant> = None;
    let mut complained = false;
    while current(epoch) {
        match Region::open(name) {
            Ok(region) => return Some(region),
            Err(e) if path.exists() => {
                // Being created (the header is written last), or not ours to open: a region
                // refused for its owner, links or mode is said at once, the first time.
                let since = *unopenable_since.get_or_insert_with(Instant::now);
                let refused = e.kind() == ErrorKind::Refused;
                if since.elapsed() < CREATION_PATIENCE && !refused {
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
                if refused {
                    warn_refused(&e.to_string());
                } else if !complained {
                    warn(&e.to_string());
                    complained = true;
                }
                std::thread::sleep(LIVENESS_PERIOD);
            }
            Err(_) => {
                unopenable_since = None;
                match &creations {
                    Some(creations) => creations.wait(REGION_POLL),
                    None => std::thread::sleep(REGION_POLL),
                }
            }
        }
    }
    None
}

/// Files created in (or moved into) the regions' folder, seen through inotify: a loader's region
/// is found as it appears, so its first attachments are applied at once, not up to REGION_POLL
/// later (the load suite's first event waited 5 ms on average for that alone). The looks every
/// REGION_POLL stay, for a retired thread to notice and for a folder inotify cannot watch.
struct Creations {
    fd: libc::c_int,
}

/// The process's watch: (pid << 32) | descriptor, 0 before the first. A forked child has its
/// parent's descriptor, one inotify instance whose events either process may read first: it
/// makes its own. Changed under STATE's lock only (`wait_for_region`), so that a fork (which
/// takes that lock) never copies it half made.
static WATCH: AtomicU64 = AtomicU64::new(0);

impl Creations {
    /// The process's watch of `folder`, kept once made: closing an inotify descriptor waits for
    /// an SRCU grace period (fs/notify/group.c, fsnotify_destroy_group), 8 ms here, which would
    /// delay the first attachment of the region just found. None if inotify cannot watch it.
    fn get(folder: &std::path::Path) -> Option<Creations> {
        let pid = current::pid() as u64;
        let watch = WATCH.load(Ordering::Acquire);
        if watch != 0 && watch >> 32 == pid {
            return Some(Creations { fd: watch as u32 as libc::c_int });
        }
        if watch != 0 {
            // The parent's: dropping our reference to its instance costs nothing, it keeps one.
            // SAFETY: a descriptor this process inherited and nothing else of ours uses.
            unsafe { libc::close(watch as u32 as libc::c_int) };
            WATCH.store(0, Ordering::Release);
        }
        let creations = Creations::watch(folder)?;
        WATCH.store(pid << 32 | creations.fd as u32 as u64, Ordering::Release);
        Some(creations)
    }

    /// Its descriptor goes where the region's does, out of the process's way.
    fn watch(folder: &std::path::Path) -> Option<Creations> {
        use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd};
        let folder = std::ffi::CString::new(folder.as_os_str().as_encoded_bytes()).ok()?;
        // SAFETY: a new descriptor, owned at once.
        let fd = unsafe { libc::inotify_init1(libc::IN_CLOEXEC | libc::IN_NONBLOCK) };
        if fd < 0 {
            return None;
        }
        let fd = uebpf::maps::out_of_the_way(unsafe { OwnedFd::from_raw_fd(fd) }).into_raw_fd();
        // SAFETY: our inotify descriptor and a NUL-terminated path.
        if unsafe { libc::inotify_add_watch(fd, folder.as_ptr(), libc::IN_CREATE | libc::IN_MOVED_TO) } < 0 {
            // SAFETY: ours, never used again.
            unsafe { libc::close(fd) };
            return None;
        }
        Some(Creations { fd })
    }

    /// Returns when a file is created in the folder, or after `timeout`; forgets what it saw.
    fn wait(&self, timeout: Duration) {
        let fd = self.fd;
        let mut ready = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        let mut events = [0u8; 4096];
        // SAFETY: one pollfd; a buffer of its own length for the events read (and dropped).
        unsafe {
            libc::poll(&mut ready, 1, timeout.as_millis() as libc::c_int);
            while libc::read(fd, events.as_mut_ptr().cast(), events.len()) > 0 {}
        }
    }
}
