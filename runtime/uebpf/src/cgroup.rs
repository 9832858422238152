//! Cgroups as the kernel's helpers see them: `bpf_get_current_cgroup_id` (the calling thread's
//! cgroup v2 id, kernel/bpf/helpers.c) and `bpf_current_task_under_cgroup` (whether that cgroup is
//! a cgroup array slot's or one of its descendants, kernel/trace/bpf_trace.c with
//! task_under_cgroup_hierarchy). libbpf-tools (syscount, funclatency, execsnoop...) create a cgroup
//! array for their `-c` filter, and bpftrace's `cgroup` builtin reads the id.
//!
//! A cgroup v2 id is the kernfs node id, which is also the inode number of the cgroup's directory
//! in any cgroup2 mount (64-bit kernels: kernfs_id_ino), so userspace gets the kernel's answer
//! with `stat`: the thread's cgroup path from `/proc/thread-self/cgroup` (its `0::PATH` line),
//! under the cgroup2 mount. A descendant test stats each ancestor of that path in turn.
//!
//! *Why raw system calls and stack buffers*: these run inside a probe of the traced process,
//! possibly in a signal handler that interrupted malloc, and with system call tracepoints
//! attached at the C library's wrappers: nothing here allocates or goes through the C library.
//! The mount point is found once, when a program that calls these helpers is loaded (`prepare`),
//! outside any probe.

use std::sync::OnceLock;

use crate::rawsys::{inode_of, raw_syscall};

/// statfs's f_type for cgroup2 (linux/magic.h CGROUP2_SUPER_MAGIC).
const CGROUP2_SUPER_MAGIC: i64 = 0x63677270;
/// The longest cgroup path handled (the kernel's PATH_MAX); longer ones fail the helper.
const PATH_MAX: usize = 4096;

/// Where cgroup2 is mounted in this process's mount namespace, NUL-free, no trailing `/`.
static MOUNT: OnceLock<Option<Vec<u8>>> = OnceLock::new();

/// Finds the cgroup2 mount (`/proc/self/mountinfo`, the first cgroup2 entry). Call it before a
/// program that calls the cgroup helpers first runs; without a mount the helpers fail.
pub fn prepare() {
    MOUNT.get_or_init(|| {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        // Fields: id parent major:minor root mountpoint options [optional...] - fstype source ...
        mountinfo.lines().find_map(|line| {
            let (before, after) = line.split_once(" - ")?;
            (after.split(' ').next()? == "cgroup2").then(|| before.split(' ').nth(4).map(unescape))?
        })
    });
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape(field: &str) -> Vec<u8> {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|d| std::str::from_utf8(d).ok()).and_then(|d| u8::from_str_radix(d, 8).ok());
        match (bytes[i], octal) {
            (b'\\', Some(byte)) => {
                out.push(byte);
                i += 4;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    while out.len() > 1 && out.ends_with(b"/") {
        out.pop();
    }
    out
}

/// The id of the cgroup v2 directory open as `fd`, None if it is not one (the server's cgroup
/// array updates; the kernel answers EBADF).
pub fn id_of_directory(fd: i32) -> Option<u64> {
    let mut fs = std::mem::MaybeUninit::<libc::statfs>::uninit();
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: buffers of the right types; a bad descriptor is an error, not a fault.
    unsafe {
        if libc::fstatfs(fd, fs.as_mut_ptr()) != 0 || libc::fstat(fd, st.as_mut_ptr()) != 0 {
            return None;
        }
        let (fs, st) = (fs.assume_init(), st.assume_init());
        (fs.f_type == CGROUP2_SUPER_MAGIC && st.st_mode & libc::S_IFMT == libc::S_IFDIR).then_some(st.st_ino)
    }
}

/// The calling thread's cgroup directory as a NUL-terminated path in `buf` (mount + `0::` path);
/// returns its length without the NUL, or None (no cgroup2 mount, no v2 line, too long).
fn current_cgroup_path(buf: &mut [u8; PATH_MAX]) -> Option<usize> {
    let mount = MOUNT.get()?.as_deref()?;
    let mut file = [0u8; PATH_MAX];
    // SAFETY: a NUL-terminated path; the descriptor is closed below.
    let fd = unsafe {
        raw_syscall(
            libc::SYS_openat,
            [libc::AT_FDCWD as usize, c"/proc/thread-self/cgroup".as_ptr() as usize, (libc::O_RDONLY | libc::O_CLOEXEC) as usize, 0],
        )
    };
    if fd < 0 {
        return None;
    }
    let mut len = 0;
    while len < file.len() {
        // SAFETY: reading into the unfilled rest of the buffer.
        let n = unsafe { raw_syscall(libc::SYS_read, [fd as usize, file.as_mut_ptr().add(len) as usize, file.len() - len, 0]) };
        if n <= 0 {
            break;
        }
        len += n as usize;
    }
    // SAFETY: the descriptor opened above.
    unsafe { raw_syscall(libc::SYS_close, [fd as usize, 0, 0, 0]) };
    let path = file[..len].split(|&b| b == b'\n').find_map(|line| line.strip_prefix(b"0::"))?;
    let total = mount.len() + path.len();
    if total + 1 > buf.len() {
        return None;
    }
    buf[..mount.len()].copy_from_slice(mount);
    buf[mount.len()..total].copy_from_slice(path);
    buf[total] = 0;
    Some(total)
}

/// bpf_get_current_cgroup_id: the thread's cgroup v2 id, 0 if it cannot be told (the kernel's
/// answer without cgroups).
pub fn current_cgroup_id() -> u64 {
    let mut path = [0u8; PATH_MAX];
    current_cgroup_path(&mut path).and_then(|len| inode_of(&path[..=len])).unwrap_or(0)
}

/// Whether the thread's cgroup is cgroup `id` or one of its descendants: Some(bool), None if the
/// thread's cgroup cannot be read.
pub fn current_under(id: u64) -> Option<bool> {
    let mut path = [0u8; PATH_MAX];
    let mount_len = MOUNT.get()?.as_deref()?.len();
    let mut len = current_cgroup_path(&mut path)?;
    // From the thread's own cgroup up to the mount's root, each ancestor once.
    loop {
        path[len] = 0;
        if inode_of(&path[..=len])? == id {
            return Some(true);
        }
        if len <= mount_len {
            return Some(false);
        }
        len = path[..len].iter().rposition(|&b| b == b'/').unwrap_or(mount_len).max(mount_len);
    }
}
