//! Loading the agent into a process that is already running (`uebpf inject`, `uebpf detach`,
//! and the server when a loader attaches to the pid of a process that has no agent).
//!
//! One thread of the target is borrowed through ptrace (PTRACE_SEIZE, PTRACE_INTERRUPT) for
//! "remote calls": its registers are saved, a call frame is built below its stack pointer (the
//! 128-byte red zone left alone) whose return address is 0, and the thread is resumed at the
//! function. The function's `ret` jumps to 0 and faults: that SIGSEGV, stopped by ptrace before
//! delivery with the instruction pointer at 0 and the stack pointer just above our frame, ends
//! the call (its result in rax) and is discarded. Any other signal the thread gets meanwhile is
//! passed on unchanged. Afterwards every byte written is put back and every register (general,
//! FPU/SSE/AVX state) restored, and the thread is released where it was.
//!
//! The calls: `dlopen(agent, RTLD_NOW | RTLD_NODELETE)` through the target's own dynamic loader
//! (glibc 2.34 and later export it from libc.so.6; its address comes from the libc file's
//! dynamic symbols and the target's /proc/PID/maps), then the agent's `uebpf_agent_follow(region)`
//! or `uebpf_agent_detach()` (agent/src/follow.rs), which return at once: the agent's own thread
//! does the hooking (live patching behind a barrier). The injector then waits on the agent table as
//! `uebpf wait-applied` does.
//!
//! Which thread: the dynamic loader takes locks (the loader lock, malloc's) that a thread
//! stopped at an arbitrary instruction may hold. A thread blocked in a system call holds none
//! of the C library's, so one is preferred (/proc/PID/task/TID/syscall); otherwise the thread is
//! run to its next system call entry (PTRACE_SYSCALL) for up to SYSCALL_WAIT, and failing that
//! (a loop that makes no system call) taken at an instruction outside the C library and the
//! dynamic loader, retried until HIJACK_DEADLINE. The allocator's system calls (brk, mmap...)
//! are no such place: malloc makes them halfway through changing its heap; nor is one the
//! dynamic loader makes itself (its start-up, or a dlopen holding its lock)
//! (`in_safe_system_call`). A process that has just exec'd is given a moment to map its C
//! library (`starting_up`).
//!
//! System call restarts follow the kernel's rules (arch/x86/kernel/signal.c,
//! arch_do_signal_or_restart): a thread interrupted inside a system call is stopped with
//! `orig_rax` = the call's number and rax = -ERESTARTSYS, -ERESTARTNOHAND, -ERESTARTNOINTR or
//! -ERESTART_RESTARTBLOCK; our calls run with `orig_rax` = -1 (no restart), and restoring the
//! saved registers before the final resume lets the kernel restart the call as if nothing
//! happened (a `sleep` sleeps its full time: nanosleep's restart block holds the deadline). A
//! thread taken at a system call entry stop is put back on its `syscall` instruction (rip - 2,
//! rax = the number), as the kernel restarts one.
//!
//! The injector must not die while it holds the thread: a tracer that exits is detached from
//! its tracees (kernel/ptrace.c, exit_ptrace), and a thread inside a call would then return to
//! address 0 with nobody to catch the fault, and the process would die of it. So SIGINT,
//! SIGTERM and SIGHUP are blocked on the injecting thread from the attach to the detach
//! (`Deferred`) and take effect once the thread is released and the mask restored. A call that
//! has not returned within the request's timeout is reported on stderr (one line: the thread is
//! probably waiting on a lock inside dlopen or the agent's entry) and waited for still: the
//! thread cannot be taken back from inside the call, and abandoning it would kill the process.

use std::fmt;
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use uebpf_hook::procmaps::{self, Mapping};
use uebpf_hook::{file_offset, Location};
use uebpf_maps::{check_name, AgentStatus, Region};

use crate::wait_applied;

/// The agent's exported entry points (agent/src/follow.rs).
pub const FOLLOW_SYMBOL: &str = "uebpf_agent_follow";
pub const DETACH_SYMBOL: &str = "uebpf_agent_detach";
/// The entry that takes a region's file from the injector (a process of another user).
pub const FOLLOW_HANDED_SYMBOL: &str = "uebpf_agent_follow_handed";
/// The agent library's file name: a process that maps a file of that name has the agent.
pub const AGENT_FILE: &str = "libuebpf_agent.so";

/// How long the chosen thread may run before it enters a system call.
const SYSCALL_WAIT: Duration = Duration::from_millis(200);
/// How long finding a safe stopping point may take in all.
const HIJACK_DEADLINE: Duration = Duration::from_secs(2);
/// How long one look at a running thread lasts before it is stopped again.
const RETRY_RUN: Duration = Duration::from_millis(1);
/// The longest pause between two looks at a thread running a call (the looks start at 50 us
/// and double): a thread's ptrace stops cannot be waited for with a timeout (a pidfd names a
/// process, not one of its threads, before Linux 6.9), so the injector polls.
const CALL_POLL_MAX: Duration = Duration::from_millis(5);
/// What an interrupted injector would die of: deferred while it holds a thread (see above).
const DEFERRED_SIGNALS: [(libc::c_int, &str); 3] = [(libc::SIGINT, "SIGINT"), (libc::SIGTERM, "SIGTERM"), (libc::SIGHUP, "SIGHUP")];
/// Below the stack pointer, the System V ABI's red zone: a leaf function's data may be there.
const RED_ZONE: u64 = 128;
/// <elf.h> NT_X86_XSTATE: the FPU/SSE/AVX register set (not in the libc crate).
const NT_X86_XSTATE: libc::c_int = 0x202;
/// <linux/ptrace.h> PTRACE_EVENT_STOP: the stop of PTRACE_INTERRUPT or of a group stop.
const PTRACE_EVENT_STOP: i32 = 128;
const RTLD_NOW: u64 = 2;
/// The agent is never unloaded: a thread may be running its code at any time.
const RTLD_NODELETE: u64 = 0x1000;

/// Why an injection was refused or failed: an errno (for the server's attach) and one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub errno: i32,
    pub message: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

fn fail(errno: i32, message: impl Into<String>) -> Failure {
    Failure { errno, message: message.into() }
}

/// What to inject where.
pub struct Request<'a> {
    pub pid: u32,
    /// The agent library (its path must name the same file inside the target's mount namespace).
    pub agent: &'a Path,
    /// Inject into a process with seccomp filters (a filter may kill it for a system call the
    /// dynamic loader makes).
    pub force: bool,
    /// How long to wait for the agent to apply the region's attachments, and how long a call
    /// may run before the injector says on stderr that it has not returned (it waits on).
    pub timeout: Duration,
}

/// The agent loaded and told to follow a region, the borrowed thread released; its first pass
/// not yet waited for (`applied`).
pub struct Loaded {
    /// The thread that made the calls.
    pub tid: i32,
    /// True if this injection loaded the library; false if the process already had it.
    pub loaded: bool,
    /// How long the thread was borrowed: from the attach to the detach (the agent's first pass,
    /// on its own thread, is not included).
    pub borrowed: Duration,
    pid: u32,
    region: Region,
    /// The attach generation the agent's pass must reach.
    generation: u32,
}

/// A completed injection.
pub struct Injected {
    pub loaded: Loaded,
    /// The agent's slot once it had applied the attachments of `loaded.generation`.
    pub status: AgentStatus,
}

impl Loaded {
    /// Waits until the agent has applied the region's attachments as they stood when it was
    /// loaded (as `uebpf wait-applied`), for up to `timeout`.
    pub fn applied(self, name: &str, timeout: Duration) -> Result<Injected, Failure> {
        let status = wait_applied(&self.region, name, self.pid, self.generation, timeout).map_err(|why| fail(libc::ETIMEDOUT, why))?;
        Ok(Injected { loaded: self, status })
    }

    pub fn generation(&self) -> u32 {
        self.generation
    }
}

/// Loads the agent into `request.pid` (unless it is there already) and makes it follow region
/// `name`; returns once the agent has applied the region's attachments as they stood.
pub fn inject(request: &Request, name: &str) -> Result<Injected, Failure> {
    load(request, name)?.applied(name, request.timeout)
}

/// The calls of `inject`: returns once the borrowed thread is released.
pub fn load(request: &Request, name: &str) -> Result<Loaded, Failure> {
    check_name(name).map_err(|e| fail(libc::EINVAL, e.to_string()))?;
    let mut target = Target::inspect(request.pid, request.force)?;
    let region = Region::open(name).map_err(|e| fail(libc::ENOENT, e.to_string()))?;
    // The agent opens by name only a region its own uid owns (maps/src/region.rs, check_trusted):
    // a process of another user (a server's worker that dropped root) is handed the region's file
    // instead, through a socket of ours (`HandOver`).
    let owner = region.path().and_then(|path| std::fs::metadata(path).ok()).map(|meta| meta.uid());
    let handed = owner.is_some_and(|owner| owner != target.euid);
    let agent = AgentFile::new(request.agent)?;
    let present = target.agent(&agent).is_some();
    let dlopen = if present { 0 } else { target.loadable(&agent).and_then(|()| target.symbol("libc.so.6", "dlopen"))? };
    let generation = region.attach_generation();
    let borrowed = Instant::now();
    let mut tracee = Tracee::hijack(&target, request.timeout)?;
    // The addresses were worked out from the image the process ran when it was inspected: one that
    // has exec'd since (a script exec'ing its interpreter) would run our calls at addresses that
    // mean something else in its new image, and die of it.
    if !target.same_image()? {
        tracee.release()?;
        return Err(fail(
            libc::EAGAIN,
            format!(
                "process {} replaced its program (exec) while the agent was being injected: inject it once it runs its last one",
                target.pid
            ),
        ));
    }
    let called = (|| {
        if !present {
            let path = c_string(&agent.path);
            let handle = tracee.call("dlopen of the agent", dlopen, &[Tracee::DATA, RTLD_NOW | RTLD_NODELETE], &path)?;
            if handle == 0 {
                let why = tracee.dlerror(&target)?;
                return Err(fail(libc::ENOEXEC, format!("dlopen of {} in process {} failed: {why}", agent.path.display(), target.pid)));
            }
        }
        target.maps = maps(target.pid)?;
        let (symbol, hand_over) = match handed {
            false => (FOLLOW_SYMBOL, None),
            true => (FOLLOW_HANDED_SYMBOL, Some(HandOver::start(&region, name, target.pid, request.timeout)?)),
        };
        let follow = target.symbol(AGENT_FILE, symbol)?;
        let request = match &hand_over {
            None => name.as_bytes().to_vec(),
            Some(hand_over) => [name.as_bytes(), &[0], hand_over.name.as_bytes()].concat(),
        };
        let code = tracee.call(symbol, follow, &[Tracee::DATA], &request)? as i32;
        let handed_over = hand_over.map(HandOver::finish).transpose();
        match code {
            0 => handed_over.map(drop),
            code => Err(handed_over.err().unwrap_or_else(|| {
                fail(
                    -code,
                    format!("the agent in process {} refused region {name}: {}", target.pid, std::io::Error::from_raw_os_error(-code)),
                )
            })),
        }
    })();
    let tid = tracee.tid;
    let released = tracee.release();
    // What became of the process (left stopped, exited) comes before what became of the call.
    released?;
    called?;
    Ok(Loaded { tid, loaded: !present, borrowed: borrowed.elapsed(), pid: target.pid, region, generation })
}

/// Removes every hook the agent in `request.pid` made and makes it inert (the library stays);
/// returns the borrowed thread and how many hooks were removed.
pub fn detach(request: &Request) -> Result<(i32, u32), Failure> {
    let target = Target::inspect(request.pid, request.force)?;
    let function = target.symbol(AGENT_FILE, DETACH_SYMBOL).map_err(|e| match e.errno {
        libc::ENOENT => fail(libc::ENOENT, format!("process {} has no uebpf agent", target.pid)),
        _ => e,
    })?;
    let mut tracee = Tracee::hijack(&target, request.timeout)?;
    let called = tracee.call(DETACH_SYMBOL, function, &[], &[]);
    let tid = tracee.tid;
    let released = tracee.release();
    released?;
    let removed = called?;
    Ok((tid, removed as u32))
}

/// The region's file, handed to one process's agent over an abstract unix socket of ours
/// (SCM_RIGHTS), while the borrowed thread runs the agent's entry: only a peer whose credentials
/// say it is that process gets it. The socket's name is ours alone (pid, time), and it lives
/// for the one hand-over.
struct HandOver {
    name: String,
    sent: std::thread::JoinHandle<Result<(), Failure>>,
}

impl HandOver {
    fn start(region: &Region, region_name: &str, pid: u32, timeout: Duration) -> Result<HandOver, Failure> {
        use std::os::linux::net::SocketAddrExt;
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |t| t.as_nanos());
        let name = format!("uebpf-hand-over-{}-{nanos}", std::process::id());
        let failed = |what: &str| {
            fail(errno(), format!("handing region {region_name} to process {pid}: {what}: {}", std::io::Error::last_os_error()))
        };
        let listener = std::os::unix::net::UnixListener::bind_addr(
            &std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).map_err(|_| failed("the socket's name"))?,
        )
        .map_err(|_| failed("a socket"))?;
        // SAFETY: the region's descriptor, open while `region` lives (through this call).
        let file = unsafe { std::os::fd::BorrowedFd::borrow_raw(region.fd()) }
            .try_clone_to_owned()
            .map_err(|_| failed("the region's descriptor"))?;
        let sent = std::thread::spawn(move || hand_to(&listener, pid, &file, timeout));
        Ok(HandOver { name, sent })
    }

    fn finish(self) -> Result<(), Failure> {
        self.sent.join().unwrap_or_else(|_| Err(fail(libc::EIO, "the hand-over's thread panicked")))
    }
}

/// Waits (up to `timeout`) for process `pid` to connect, and sends it `file`; a peer that is
/// another process is turned away.
fn hand_to(listener: &std::os::unix::net::UnixListener, pid: u32, file: &std::os::fd::OwnedFd, timeout: Duration) -> Result<(), Failure> {
    use std::os::fd::AsRawFd;
    let deadline = Instant::now() + timeout;
    listener.set_nonblocking(true).map_err(|e| fail(libc::EIO, format!("handing the region to process {pid}: {e}")))?;
    loop {
        match listener.accept() {
            Ok((peer, _)) => {
                let mut credentials = libc::ucred { pid: 0, uid: 0, gid: 0 };
                let mut size = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
                // SAFETY: a connected socket of ours and a ucred buffer.
                let asked = unsafe {
                    libc::getsockopt(
                        peer.as_raw_fd(),
                        libc::SOL_SOCKET,
                        libc::SO_PEERCRED,
                        (&mut credentials as *mut libc::ucred).cast(),
                        &mut size,
                    )
                };
                if asked != 0 || credentials.pid as u32 != pid {
                    continue;
                }
                return send_descriptor(&peer, file).map_err(|e| fail(libc::EIO, format!("handing the region to process {pid}: {e}")));
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_micros(200));
            }
            Err(e) => return Err(fail(libc::ETIMEDOUT, format!("process {pid} did not take the region handed to it: {e}"))),
        }
    }
}

/// One byte with `file` attached (SCM_RIGHTS).
fn send_descriptor(peer: &std::os::unix::net::UnixStream, file: &std::os::fd::OwnedFd) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let mut byte = 0u8;
    let mut data = libc::iovec { iov_base: (&mut byte as *mut u8).cast(), iov_len: 1 };
    let mut control = [0u64; 4];
    // SAFETY: zeroed msghdr pointing at our buffers; CMSG_* write inside `control`, which has room
    // for one descriptor's message.
    unsafe {
        let mut message: libc::msghdr = std::mem::zeroed();
        message.msg_iov = &mut data;
        message.msg_iovlen = 1;
        message.msg_control = control.as_mut_ptr().cast();
        message.msg_controllen = libc::CMSG_SPACE(std::mem::size_of::<libc::c_int>() as u32) as usize;
        let header = libc::CMSG_FIRSTHDR(&message);
        (*header).cmsg_level = libc::SOL_SOCKET;
        (*header).cmsg_type = libc::SCM_RIGHTS;
        (*header).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) as usize;
        (libc::CMSG_DATA(header) as *mut libc::c_int).write_unaligned(file.as_raw_fd());
        if libc::sendmsg(peer.as_raw_fd(), &message, libc::MSG_NOSIGNAL) != 1 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Whether process `pid` maps the file `dev`/`ino` executable and no agent: then only an
/// injected agent could run a probe there (the server's rule for injecting, server/src/autoinject.rs).
pub fn lacks_agent_for(pid: u32, dev: u64, ino: u64) -> bool {
    procmaps::of_process(pid)
        .is_ok_and(|maps| maps.iter().any(|m| m.executable && m.dev == dev && m.inode == ino) && library(&maps, AGENT_FILE).is_none())
}

/// Whether `pid` is stopped (SIGSTOP, a job-control or ptrace stop): its status's `State`.
pub fn is_stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .is_ok_and(|status| matches!(status_field(&status, "State").chars().next(), Some('T' | 't')))
}

/// Field `name` of a /proc/PID/status text (`State`, `TracerPid`, `Seccomp`...), "" if absent.
fn status_field<'a>(status: &'a str, name: &str) -> &'a str {
    status.lines().find_map(|line| line.strip_prefix(name)?.strip_prefix(':')).map(str::trim).unwrap_or("")
}

fn c_string(path: &Path) -> Vec<u8> {
    path.as_os_str().as_encoded_bytes().to_vec()
}

/// The agent file as the injector sees it.
struct AgentFile {
    path: PathBuf,
    dev: u64,
    ino: u64,
}

impl AgentFile {
    fn new(path: &Path) -> Result<AgentFile, Failure> {
        let path = path.canonicalize().map_err(|e| fail(libc::ENOENT, format!("agent {}: {e}", path.display())))?;
        let meta = std::fs::metadata(&path).map_err(|e| fail(libc::ENOENT, format!("agent {}: {e}", path.display())))?;
        Ok(AgentFile { path, dev: meta.dev(), ino: meta.ino() })
    }
}

/// What the injector needs to know about the target, from /proc.
struct Target {
    pid: u32,
    /// Its effective uid: the owner a region must have for its agent to follow it.
    euid: u32,
    maps: Vec<Mapping>,
    /// The target's root directory: paths in its maps are seen through it.
    root: PathBuf,
}

impl Target {
    /// Refuses what cannot be injected safely (see the module comment and runtime/agent/README.md,
    /// "Attaching to a running process").
    fn inspect(pid: u32, force: bool) -> Result<Target, Failure> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).map_err(|_| fail(libc::ESRCH, format!("no process {pid}")))?;
        let field = |name: &str| status_field(&status, name);
        match field("State").chars().next() {
            Some('T' | 't') => {
                return Err(fail(
                    libc::EBUSY,
                    format!("process {pid} is stopped ({}): it could not run the agent's loading", field("State")),
                ))
            }
            Some('Z' | 'X') => return Err(fail(libc::ESRCH, format!("process {pid} has exited"))),
            _ => {}
        }
        if !matches!(field("TracerPid"), "0" | "") {
            return Err(fail(libc::EBUSY, format!("process {pid} is already traced by process {}", field("TracerPid"))));
        }
        match field("Seccomp") {
            "1" => return Err(fail(libc::EPERM, format!("process {pid} runs in strict seccomp mode: loading a library would kill it"))),
            "2" if !force => {
                return Err(fail(
                    libc::EPERM,
                    format!("process {pid} has seccomp filters: one may kill it for a system call the dynamic loader makes (--force injects anyway)"),
                ))
            }
            _ => {}
        }
        let ignored = u64::from_str_radix(field("SigIgn"), 16).unwrap_or(0);
        if ignored & (1 << (libc::SIGSEGV - 1)) != 0 {
            // The fault that ends a remote call would reset an ignored SIGSEGV to its default
            // (kernel/signal.c, force_sig_info_to_task).
            return Err(fail(libc::EPERM, format!("process {pid} ignores SIGSEGV, which the injector's calls end with")));
        }
        let maps = starting_up(pid, maps(pid)?)?;
        if library(&maps, "libc.so.6").is_none() {
            return Err(fail(
                libc::ENOEXEC,
                format!("process {pid} maps no libc.so.6 (a static binary, or another C library): there is no dynamic loader to load the agent with"),
            ));
        }
        // Uid: real, effective, saved, filesystem.
        let euid = field("Uid")
            .split_whitespace()
            .nth(1)
            .and_then(|uid| uid.parse().ok())
            .ok_or_else(|| fail(libc::ESRCH, format!("no uid for process {pid}")))?;
        Ok(Target { pid, euid, maps, root: PathBuf::from(format!("/proc/{pid}/root")) })
    }

    /// The executable mapping of the agent, if the process has one (this file, or any file of
    /// the agent's name: a process preloaded with another build's agent has an agent).
    fn agent(&self, agent: &AgentFile) -> Option<&Mapping> {
        self.maps.iter().find(|m| m.executable && m.dev == agent.dev && m.inode == agent.ino).or_else(|| library(&self.maps, AGENT_FILE))
    }

    /// Whether the process, in its mount namespace, sees the agent at the same path.
    fn loadable(&self, agent: &AgentFile) -> Result<(), Failure> {
        let seen = self.root.join(agent.path.strip_prefix("/").unwrap_or(&agent.path));
        match std::fs::metadata(&seen) {
            Ok(meta) if (meta.dev(), meta.ino()) == (agent.dev, agent.ino) => Ok(()),
            _ => Err(fail(
                libc::ENOENT,
                format!("process {} does not see the agent at {} (another mount namespace or root)", self.pid, agent.path.display()),
            )),
        }
    }

    /// The address of `symbol` (a function) of the library named `file` in the process.
    fn symbol(&self, file: &str, symbol: &str) -> Result<u64, Failure> {
        let mapping = library(&self.maps, file).ok_or_else(|| fail(libc::ENOENT, format!("process {} maps no {file}", self.pid)))?;
        let path = self.root.join(mapping.path.trim_start_matches('/'));
        let offset = file_offset(&path, &Location::Symbol(symbol.into())).map_err(|e| {
            let hint = if file == "libc.so.6" { " (glibc 2.34 or later exports it from libc.so.6)" } else { "" };
            fail(libc::ENOEXEC, format!("process {}: {e}{hint}", self.pid))
        })?;
        self.maps
            .iter()
            .find(|m| m.dev == mapping.dev && m.inode == mapping.inode && (m.offset..m.offset + (m.end - m.start) as u64).contains(&offset))
            .map(|m| m.start as u64 + offset - m.offset)
            .ok_or_else(|| fail(libc::ENOEXEC, format!("process {}: {symbol} of {} is not mapped", self.pid, mapping.path)))
    }

    /// Whether the process still runs the image it was inspected in: its C library mapped at the
    /// same place, from the same file (an exec maps a fresh one, elsewhere).
    fn same_image(&self) -> Result<bool, Failure> {
        let now = maps(self.pid)?;
        let libc = |maps: &[Mapping]| library(maps, "libc.so.6").map(|m| (m.start, m.dev, m.inode));
        Ok(libc(&now).is_some() && libc(&now) == libc(&self.maps))
    }

    /// Whether `address` is in the C library or the dynamic loader, whose locks a thread
    /// stopped there may hold.
    fn in_loader_or_libc(&self, address: u64) -> bool {
        self.in_library(address, |name| name == "libc.so.6" || name.starts_with("ld-linux"))
    }

    fn in_loader(&self, address: u64) -> bool {
        self.in_library(address, |name| name.starts_with("ld-linux"))
    }

    fn in_library(&self, address: u64, named: impl Fn(&str) -> bool) -> bool {
        self.maps.iter().any(|m| m.contains(address as usize) && named(file_name(m)))
    }
}

/// The process's mappings once its dynamic loader has mapped the C library: a process that has
/// just exec'd maps the loader first and the libraries it needs a moment later (a command started
/// and injected at once saw "no libc.so.6"). Waited for up to STARTUP_WAIT; a static binary,
/// which maps no loader, is not waited for.
fn starting_up(pid: u32, mut now: Vec<Mapping>) -> Result<Vec<Mapping>, Failure> {
    let deadline = Instant::now() + STARTUP_WAIT;
    while library(&now, "libc.so.6").is_none() && now.iter().any(|m| file_name(m).starts_with("ld-linux")) {
        if Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_micros(200));
        now = maps(pid)?;
    }
    Ok(now)
}

/// How long a process that has just exec'd may take to map its libraries.
const STARTUP_WAIT: Duration = Duration::from_secs(1);

fn maps(pid: u32) -> Result<Vec<Mapping>, Failure> {
    procmaps::of_process(pid).map_err(|e| match e.kind() {
        std::io::ErrorKind::PermissionDenied => permission(pid, "read the memory map"),
        _ => fail(libc::ESRCH, format!("process {pid}: cannot read its memory map: {e}")),
    })
}

fn library<'a>(maps: &'a [Mapping], file: &str) -> Option<&'a Mapping> {
    maps.iter().find(|m| m.executable && file_name(m) == file)
}

/// The name of the file a mapping maps, without its folder ("" for an anonymous one).
fn file_name(mapping: &Mapping) -> &str {
    mapping.path.rsplit('/').next().unwrap_or("")
}

fn permission(pid: u32, what: &str) -> Failure {
    let yama = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope").map(|s| s.trim().to_string());
    let scope = match yama {
        Ok(scope) if scope != "0" => format!("; Yama ptrace_scope is {scope}"),
        _ => String::new(),
    };
    fail(libc::EPERM, format!("not permitted to {what} of process {pid} (ptrace: another user's process needs CAP_SYS_PTRACE{scope})"))
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// A ptrace request with pointer-sized arguments.
fn ptrace(request: libc::c_uint, tid: i32, addr: u64, data: u64) -> Result<i64, i32> {
    // SAFETY: every request used here reads or writes at most the buffer `data` points at,
    // which the callers size for it.
    let result = unsafe { libc::ptrace(request, tid, addr as *mut libc::c_void, data as *mut libc::c_void) };
    if result == -1 {
        return Err(errno());
    }
    Ok(result)
}

/// What a wait for the traced thread saw.
enum Stop {
    /// A signal-delivery stop: the signal, not yet delivered.
    Signal(i32),
    /// PTRACE_EVENT_STOP: after PTRACE_INTERRUPT (SIGTRAP) or a group stop (the stop signal).
    Event(i32),
    /// A system call entry stop (PTRACE_SYSCALL with PTRACE_O_TRACESYSGOOD).
    Syscall,
    Exited,
}

/// How the borrowed thread goes back.
#[derive(Clone, Copy, PartialEq)]
enum Resume {
    /// Exactly as saved (a restart the kernel owes it happens then).
    AsSaved,
    /// Back on the `syscall` instruction it was stopped at the entry of.
    AtSyscall,
}

/// SIGINT, SIGTERM and SIGHUP blocked on this thread while it lives; on drop the mask is put
/// back, and a signal that came meanwhile takes effect then (its handler runs, or its default
/// action ends the injector), the target's thread already released.
struct Deferred {
    previous: libc::sigset_t,
}

impl Deferred {
    fn new() -> Deferred {
        // SAFETY: sigset_t is plain data, initialised by sigemptyset/pthread_sigmask.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            let mut previous: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for (signal, _) in DEFERRED_SIGNALS {
                libc::sigaddset(&mut set, signal);
            }
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut previous);
            Deferred { previous }
        }
    }
}

impl Drop for Deferred {
    fn drop(&mut self) {
        // SAFETY: as above; sigpending fills a local.
        unsafe {
            let mut pending: libc::sigset_t = std::mem::zeroed();
            libc::sigpending(&mut pending);
            let deferred = DEFERRED_SIGNALS
                .into_iter()
                .find(|&(s, _)| libc::sigismember(&pending, s) == 1 && libc::sigismember(&self.previous, s) == 0);
            if let Some((_, name)) = deferred {
                eprintln!("uebpf: {name} arrived during the injection: it takes effect now that the target's thread is released");
            }
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.previous, std::ptr::null_mut());
        }
    }
}

struct Tracee {
    tid: i32,
    saved: libc::user_regs_struct,
    xstate: Vec<u8>,
    resume: Resume,
    memory: File,
    /// The process was stopped (SIGSTOP...) while it ran a call: stop the thread too on release.
    stopped_meanwhile: bool,
    /// How long a call may run before the injector says so on stderr.
    deadline: Duration,
    /// Dropped last, once the thread is released (fields drop in declaration order).
    _deferred: Deferred,
}

impl Tracee {
    /// Argument placeholder: the address of the call's data on the stack.
    const DATA: u64 = u64::MAX;

    /// Takes one thread of the process, stopped where calling the dynamic loader is safe.
    fn hijack(target: &Target, deadline: Duration) -> Result<Tracee, Failure> {
        let pid = target.pid;
        // Before the attach: from then on, the injector's death would leave a traced thread.
        let deferred = Deferred::new();
        let tid = choose_thread(pid).ok_or_else(|| {
            fail(libc::EBUSY, format!("no thread of process {pid} can make the calls (each blocks SIGSEGV or is the agent's)"))
        })?;
        let memory =
            File::options().read(true).write(true).open(format!("/proc/{pid}/mem")).map_err(|_| permission(pid, "write the memory"))?;
        ptrace(libc::PTRACE_SEIZE, tid, 0, libc::PTRACE_O_TRACESYSGOOD as u64).map_err(|e| match e {
            libc::EPERM => permission(pid, "attach to a thread"),
            e => fail(e, format!("cannot attach to thread {tid} of process {pid}: {}", std::io::Error::from_raw_os_error(e))),
        })?;
        // SAFETY: plain data.
        let mut tracee = Tracee {
            tid,
            saved: unsafe { std::mem::zeroed() },
            xstate: Vec::new(),
            resume: Resume::AsSaved,
            memory,
            stopped_meanwhile: false,
            deadline,
            _deferred: deferred,
        };
        match tracee.stop_safely(target) {
            Ok(resume) => {
                tracee.resume = resume;
                tracee.saved = tracee.registers()?;
                tracee.xstate = tracee.save_xstate()?;
                Ok(tracee)
            }
            Err(e) => {
                // Stopped with its registers untouched (or gone): let go of it as it was. A
                // thread in a group stop stays stopped.
                let _ = ptrace(libc::PTRACE_DETACH, tid, 0, 0);
                Err(e)
            }
        }
    }

    /// Stops the thread in a system call (or at the entry of one), else outside libc and the
    /// dynamic loader, within HIJACK_DEADLINE. On error the thread is stopped (or gone).
    fn stop_safely(&mut self, target: &Target) -> Result<Resume, Failure> {
        let deadline = Instant::now() + HIJACK_DEADLINE;
        let mut syscall_wait = Some(SYSCALL_WAIT);
        loop {
            ptrace(libc::PTRACE_INTERRUPT, self.tid, 0, 0).map_err(|e| self.gone(e))?;
            if self.wait_interrupted()? {
                if self.in_safe_system_call(target)? {
                    return Ok(Resume::AtSyscall);
                }
                self.resume_after_unsafe_stop()?;
                continue;
            }
            if self.in_safe_system_call(target)? {
                return Ok(Resume::AsSaved);
            }
            if let Some(wait) = syscall_wait.take() {
                ptrace(libc::PTRACE_SYSCALL, self.tid, 0, 0).map_err(|e| self.gone(e))?;
                if self.wait_for(wait)? {
                    if self.in_safe_system_call(target)? {
                        return Ok(Resume::AtSyscall);
                    }
                    self.resume_after_unsafe_stop()?;
                }
                continue;
            }
            if !target.in_loader_or_libc(self.registers()?.rip) {
                return Ok(Resume::AsSaved);
            }
            if Instant::now() >= deadline {
                return Err(fail(
                    libc::EBUSY,
                    format!(
                        "process {}: thread {} did not stop outside the C library within {} s",
                        target.pid,
                        self.tid,
                        HIJACK_DEADLINE.as_secs()
                    ),
                ));
            }
            ptrace(libc::PTRACE_CONT, self.tid, 0, 0).map_err(|e| self.gone(e))?;
            std::thread::sleep(RETRY_RUN);
        }
    }

    /// Whether the thread is stopped in (or at the entry of) a system call that leaves the C
    /// library's state whole. Not the allocator's own: glibc's malloc makes brk, mmap, munmap,
    /// mremap, madvise and mprotect calls in the middle of changing its heap, and in a process
    /// with one thread it takes no lock that would make dlopen's allocations wait, so they would
    /// work on a heap half changed (a Python loop allocating while its agent was injected died of
    /// "corrupted size vs. prev_size" one run in three). Nor an exec: the image the calls were
    /// worked out for (its /proc/PID/maps, read before) is being replaced, and a call into it
    /// faults in the new one.
    fn in_safe_system_call(&self, target: &Target) -> Result<bool, Failure> {
        const UNSAFE: [i64; 8] = [
            libc::SYS_brk,
            libc::SYS_mmap,
            libc::SYS_munmap,
            libc::SYS_mremap,
            libc::SYS_madvise,
            libc::SYS_mprotect,
            libc::SYS_execve,
            libc::SYS_execveat,
        ];
        let registers = self.registers()?;
        let number = registers.orig_rax as i64;
        // A system call the dynamic loader makes itself is its start-up (a process that has just
        // exec'd: the C library is not mapped or not initialised yet) or a dlopen in progress,
        // which holds the loader's lock: no place for a dlopen of ours.
        Ok(number >= 0 && !UNSAFE.contains(&number) && !target.in_loader(registers.rip))
    }

    /// Lets a thread stopped where it cannot be taken run on (without system call stops), with
    /// the pause of a look at a running thread.
    fn resume_after_unsafe_stop(&mut self) -> Result<(), Failure> {
        ptrace(libc::PTRACE_CONT, self.tid, 0, 0).map_err(|e| self.gone(e))?;
        std::thread::sleep(RETRY_RUN);
        Ok(())
    }

    /// Runs the thread (already resumed) for up to `wait`: true if it stopped at a system call
    /// entry; otherwise it is left running.
    fn wait_for(&mut self, wait: Duration) -> Result<bool, Failure> {
        let deadline = Instant::now() + wait;
        while Instant::now() < deadline {
            match self.wait(true)? {
                None => std::thread::sleep(RETRY_RUN),
                Some(Stop::Syscall) => return Ok(true),
                Some(stop) => self.pass_on(stop)?,
            }
        }
        Ok(false)
    }

    /// After PTRACE_INTERRUPT: waits for the interrupt stop, passing on signals that arrive
    /// first. True if a system call entry stop came first (the thread stopped there instead).
    fn wait_interrupted(&mut self) -> Result<bool, Failure> {
        loop {
            match self.wait(false)? {
                Some(Stop::Event(libc::SIGTRAP)) => return Ok(false),
                // Stopped at a system call entry first; the interrupt stays pending and its stop,
                // when the thread next runs, is passed over like any other that is not ours.
                Some(Stop::Syscall) => return Ok(true),
                Some(Stop::Event(_)) => return Err(fail(libc::EBUSY, format!("thread {} was stopped (SIGSTOP) meanwhile", self.tid))),
                Some(stop) => self.pass_on(stop)?,
                None => {}
            }
        }
    }

    /// Resumes the thread after a stop that is not ours, delivering its signal unchanged.
    fn pass_on(&mut self, stop: Stop) -> Result<(), Failure> {
        let signal = match stop {
            Stop::Signal(signal) => signal,
            Stop::Exited => return Err(self.gone(libc::ESRCH)),
            Stop::Event(libc::SIGTRAP) | Stop::Syscall => 0,
            // A group stop (SIGSTOP, SIGTSTP...): the thread finishes the call first.
            Stop::Event(_) => {
                self.stopped_meanwhile = true;
                0
            }
        };
        ptrace(libc::PTRACE_CONT, self.tid, 0, signal as u64).map(drop).map_err(|e| self.gone(e))
    }

    fn wait(&self, nohang: bool) -> Result<Option<Stop>, Failure> {
        let mut status = 0;
        let flags = libc::__WALL | if nohang { libc::WNOHANG } else { 0 };
        // SAFETY: waitpid into a local.
        let waited = unsafe { libc::waitpid(self.tid, &mut status, flags) };
        if waited == 0 {
            return Ok(None);
        }
        if waited < 0 {
            return Err(self.gone(errno()));
        }
        if !libc::WIFSTOPPED(status) {
            return Ok(Some(Stop::Exited));
        }
        let signal = libc::WSTOPSIG(status);
        Ok(Some(if signal == libc::SIGTRAP | 0x80 {
            Stop::Syscall
        } else if status >> 16 == PTRACE_EVENT_STOP {
            Stop::Event(signal)
        } else if status >> 16 != 0 {
            Stop::Event(libc::SIGTRAP)
        } else {
            Stop::Signal(signal)
        }))
    }

    fn gone(&self, errno: i32) -> Failure {
        fail(libc::ESRCH, format!("thread {} exited during the injection ({})", self.tid, std::io::Error::from_raw_os_error(errno)))
    }

    fn registers(&self) -> Result<libc::user_regs_struct, Failure> {
        // SAFETY: plain data, filled by the kernel.
        let mut regs: libc::user_regs_struct = unsafe { std::mem::zeroed() };
        ptrace(libc::PTRACE_GETREGS, self.tid, 0, &mut regs as *mut _ as u64).map_err(|e| self.gone(e))?;
        Ok(regs)
    }

    fn set_registers(&self, regs: &libc::user_regs_struct) -> Result<(), Failure> {
        ptrace(libc::PTRACE_SETREGS, self.tid, 0, regs as *const _ as u64).map(drop).map_err(|e| self.gone(e))
    }

    /// The FPU/SSE/AVX state (what a called function may change besides the general registers).
    fn save_xstate(&self) -> Result<Vec<u8>, Failure> {
        let mut buffer = vec![0u8; 1 << 14];
        let mut iov = libc::iovec { iov_base: buffer.as_mut_ptr().cast(), iov_len: buffer.len() };
        ptrace(libc::PTRACE_GETREGSET, self.tid, NT_X86_XSTATE as u64, &mut iov as *mut _ as u64).map_err(|e| self.gone(e))?;
        buffer.truncate(iov.iov_len);
        Ok(buffer)
    }

    fn read(&self, address: u64, len: usize) -> Result<Vec<u8>, Failure> {
        let mut bytes = vec![0u8; len];
        self.memory.read_exact_at(&mut bytes, address).map_err(|e| fail(libc::EFAULT, format!("reading the target's stack: {e}")))?;
        Ok(bytes)
    }

    fn write(&self, address: u64, bytes: &[u8]) -> Result<(), Failure> {
        self.memory.write_all_at(bytes, address).map_err(|e| fail(libc::EFAULT, format!("writing the target's stack: {e}")))
    }

    /// Calls `function(args...)` (`what`, for messages) on the thread; `data` (NUL-terminated)
    /// is copied to the stack first, and an argument `DATA` is its address. Returns rax. The
    /// stack bytes are restored before returning.
    fn call(&mut self, what: &str, function: u64, args: &[u64], data: &[u8]) -> Result<u64, Failure> {
        let top = self.saved.rsp - RED_ZONE;
        let data_at = (top - data.len() as u64 - 1) & !15;
        // The return address: at a function's entry rsp + 8 is 16-byte aligned (the ABI's rule).
        let sp = data_at - 8;
        let original = self.read(sp, (top - sp) as usize)?;
        let mut frame = vec![0u8; (top - sp) as usize];
        frame[8..8 + data.len()].copy_from_slice(data);
        self.write(sp, &frame)?;
        let result = self.run(what, function, args, sp, data_at);
        let restored = self.write(sp, &original);
        let result = result?;
        restored?;
        Ok(result)
    }

    fn run(&mut self, what: &str, function: u64, args: &[u64], sp: u64, data_at: u64) -> Result<u64, Failure> {
        let mut regs = self.saved;
        let values: Vec<u64> = args.iter().map(|&a| if a == Self::DATA { data_at } else { a }).collect();
        for (register, value) in [&mut regs.rdi, &mut regs.rsi, &mut regs.rdx].into_iter().zip(values) {
            *register = value;
        }
        regs.rip = function;
        regs.rsp = sp;
        regs.rax = 0;
        // No system call to restart while ours runs (see the module comment).
        regs.orig_rax = u64::MAX;
        // The ABI wants the direction flag clear at a call; no single-stepping.
        regs.eflags &= !(0x400 | 0x100);
        self.set_registers(&regs)?;
        ptrace(libc::PTRACE_CONT, self.tid, 0, 0).map_err(|e| self.gone(e))?;
        let started = Instant::now();
        let mut pause = Duration::from_micros(50);
        let mut said = false;
        loop {
            match self.wait(true)? {
                None => {
                    if !said && started.elapsed() >= self.deadline {
                        said = true;
                        eprintln!(
                            "uebpf: thread {} is still inside {what} after {} s, probably waiting on a lock: waiting for it to return (the process would die if it were abandoned inside the call)",
                            self.tid,
                            self.deadline.as_secs_f64()
                        );
                    }
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(CALL_POLL_MAX);
                }
                Some(Stop::Signal(libc::SIGSEGV)) => {
                    let now = self.registers()?;
                    if now.rip == 0 && now.rsp == sp + 8 {
                        // Ours: the call returned. The SIGSEGV is discarded by the next resume.
                        return Ok(now.rax);
                    }
                    self.pass_on(Stop::Signal(libc::SIGSEGV))?;
                }
                Some(stop) => self.pass_on(stop)?,
            }
        }
    }

    /// `dlerror()`'s message, read from the target.
    fn dlerror(&mut self, target: &Target) -> Result<String, Failure> {
        let function = target.symbol("libc.so.6", "dlerror")?;
        let address = self.call("dlerror", function, &[], &[])?;
        if address == 0 {
            return Ok("no reason given".into());
        }
        let mut text = Vec::new();
        for chunk in 0..8u64 {
            let Ok(bytes) = self.read(address + chunk * 64, 64) else { break };
            let end = bytes.iter().position(|&b| b == 0);
            text.extend_from_slice(&bytes[..end.unwrap_or(64)]);
            if end.is_some() {
                break;
            }
        }
        Ok(String::from_utf8_lossy(&text).replace('\n', " "))
    }

    /// Puts every register back and lets the thread go where it was.
    fn release(self) -> Result<(), Failure> {
        let mut regs = self.saved;
        if self.resume == Resume::AtSyscall {
            regs.rip -= 2;
            regs.rax = regs.orig_rax;
            regs.orig_rax = u64::MAX;
        }
        let mut iov = libc::iovec { iov_base: self.xstate.as_ptr() as *mut libc::c_void, iov_len: self.xstate.len() };
        ptrace(libc::PTRACE_SETREGSET, self.tid, NT_X86_XSTATE as u64, &mut iov as *mut _ as u64).map_err(|e| self.gone(e))?;
        self.set_registers(&regs)?;
        let signal = if self.stopped_meanwhile { libc::SIGSTOP } else { 0 };
        ptrace(libc::PTRACE_DETACH, self.tid, 0, signal as u64).map_err(|e| self.gone(e))?;
        if self.stopped_meanwhile {
            return Err(fail(libc::EBUSY, format!("thread {} was stopped (SIGSTOP) during the injection: left stopped", self.tid)));
        }
        Ok(())
    }
}

/// A thread for the calls: one blocked in a system call if any, else the first; never one that
/// blocks SIGSEGV (our calls end with one) nor the agent's own threads.
fn choose_thread(pid: u32) -> Option<i32> {
    let mut candidates: Vec<(bool, i32)> = Vec::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/task")).ok()?.flatten() {
        let Some(tid) = entry.file_name().to_str().and_then(|t| t.parse::<i32>().ok()) else { continue };
        let task = entry.path();
        let comm = std::fs::read_to_string(task.join("comm")).unwrap_or_default();
        if comm.trim().starts_with("uebpf-") {
            continue;
        }
        let status = std::fs::read_to_string(task.join("status")).unwrap_or_default();
        let blocked = status.lines().find_map(|l| l.strip_prefix("SigBlk:")).and_then(|m| u64::from_str_radix(m.trim(), 16).ok());
        if blocked.is_none_or(|mask| mask & (1 << (libc::SIGSEGV - 1)) != 0) {
            continue;
        }
        let syscall = std::fs::read_to_string(task.join("syscall")).unwrap_or_default();
        let in_syscall = syscall.split_whitespace().next().and_then(|n| n.parse::<i64>().ok()).is_some_and(|n| n >= 0);
        candidates.push((!in_syscall, tid));
    }
    candidates.sort();
    candidates.first().map(|&(_, tid)| tid)
}
