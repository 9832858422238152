//! A process's memory mappings, from `/proc/PID/maps`: the hook engine reads its own (files are
//! matched by device and inode); `uebpf inject` reads its target's, whose paths it needs.

use std::io::{self, Read};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// The first buffer `read_proc` reads into: a process's maps of a few hundred lines, or a task's
/// status, in one read.
const PROC_READ_BYTES: usize = 64 << 10;

/// A /proc file, whole. Not `std::fs::read_to_string`: it sizes its buffer from the file's size,
/// which /proc gives as 0, so it starts at 32 bytes and doubles, and each read is a pass of the
/// kernel's seq_file: a 4 KiB maps file took 9 reads (~70 us here), and the agent reads its maps
/// several times between an attach and its first hit. Read into 64 KiB, the same file takes 2
/// (std's read_to_end reads into the spare capacity, 8 KiB first, growing).
pub(crate) fn read_proc(path: &str) -> io::Result<String> {
    let mut bytes = Vec::with_capacity(PROC_READ_BYTES);
    std::fs::File::open(path)?.read_to_end(&mut bytes)?;
    String::from_utf8(bytes).map_err(|_| io::Error::other(format!("{path} is not UTF-8")))
}

/// One line of `/proc/PID/maps`.
#[derive(Debug, Clone)]
pub struct Mapping {
    pub start: usize,
    pub end: usize,
    pub readable: bool,
    pub writable: bool,
    pub executable: bool,
    /// Shared (`s`), not private copy-on-write (`p`): the file's pages themselves.
    pub shared: bool,
    /// File offset of `start`.
    pub offset: u64,
    /// `st_dev` of the mapped file (0 for anonymous mappings).
    pub dev: u64,
    pub inode: u64,
    /// The path as the process sees it ("" for anonymous mappings; `[stack]` and the like).
    pub path: String,
}

impl Mapping {
    pub fn contains(&self, address: usize) -> bool {
        (self.start..self.end).contains(&address)
    }

    /// The `PROT_*` bits of this mapping.
    pub fn prot(&self) -> libc::c_int {
        let mut prot = libc::PROT_NONE;
        if self.readable {
            prot |= libc::PROT_READ;
        }
        if self.writable {
            prot |= libc::PROT_WRITE;
        }
        if self.executable {
            prot |= libc::PROT_EXEC;
        }
        prot
    }
}

/// Mappings read when `CHANGES` was the first number.
type Snapshot = (u64, Vec<Mapping>);

/// This process's mappings as `keeping` keeps them: Some while it runs (None until the first
/// read), None outside it.
static KEPT: Mutex<Option<Option<Snapshot>>> = Mutex::new(None);
/// The hook engine's own changes to the mappings so far (`changed`): an atomic, not the lock, so
/// that a change is never missed, whoever holds the lock.
static CHANGES: AtomicU64 = AtomicU64::new(0);
/// Held by the unit tests that keep or change the mappings: they run on threads of one process.
#[cfg(test)]
pub(crate) static TESTS_KEEPING: Mutex<()> = Mutex::new(());

/// Runs `work` with this process's mappings read once, then kept until the hook engine changes
/// them itself (`changed`): an agent's pass read them four times a hook, the most expensive part
/// of hooking a function after the patch itself (a third of the agent's time between an attach
/// and its first hit, sampled with perf). Only the reads that look for files and gaps use the
/// kept copy (`read`); those that decide what a patch may do read now (`read_now`). Another
/// thread's mapping made meanwhile is not seen: a stub page placed in a gap it took fails
/// (MAP_FIXED_NOREPLACE) and the next gap is tried, as before. The lock is only ever tried, as
/// resolve::keeping_files's (a child forked while it was held reads each time).
pub(crate) fn keeping<T>(work: impl FnOnce() -> T) -> T {
    if let Ok(mut kept) = KEPT.try_lock() {
        *kept = Some(None);
    }
    let result = work();
    if let Ok(mut kept) = KEPT.try_lock() {
        *kept = None;
    }
    result
}

/// This process's mappings: the kept copy inside `keeping`, else read now.
pub(crate) fn read() -> io::Result<Vec<Mapping>> {
    let Ok(mut kept) = KEPT.try_lock() else { return read_now() };
    let Some(snapshot) = kept.as_mut() else { return read_now() };
    let changes = CHANGES.load(Ordering::Acquire);
    if let Some((_, maps)) = snapshot.as_ref().filter(|(read_at, _)| *read_at == changes) {
        return Ok(maps.clone());
    }
    let maps = read_now()?;
    *snapshot = Some((changes, maps.clone()));
    Ok(maps)
}

/// This process's mappings, read now.
pub(crate) fn read_now() -> io::Result<Vec<Mapping>> {
    read_file("/proc/self/maps")
}

/// The hook engine mapped, unmapped or protected memory: a kept copy is stale.
pub(crate) fn changed() {
    CHANGES.fetch_add(1, Ordering::AcqRel);
}

/// The mappings of process `pid` (reading them takes the permission ptrace does).
pub fn of_process(pid: u32) -> io::Result<Vec<Mapping>> {
    read_file(&format!("/proc/{pid}/maps"))
}

fn read_file(path: &str) -> io::Result<Vec<Mapping>> {
    let text = read_proc(path)?;
    text.lines().map(|line| parse(line).ok_or_else(|| io::Error::other(format!("unexpected {path} line {line:?}")))).collect()
}

/// The mapping `(start, end)` that contains `address`, read from `/proc/self/maps` with plain
/// system calls into a buffer on the stack: no allocation and no lock, so that a caller running
/// in a signal handler (which may have interrupted malloc) or a vfork child can use it.
pub(crate) fn mapping_containing(address: usize) -> Option<(usize, usize)> {
    // SAFETY: open, read and close of a descriptor this function owns, into a local buffer.
    let fd = unsafe { libc::open(c"/proc/self/maps".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    let mut buffer = [0u8; 4096];
    // Each line starts "start-end ": the two bounds are parsed, the rest skipped.
    let (mut start, mut end, mut field) = (0usize, 0usize, 0);
    let mut found = None;
    'lines: loop {
        let n = unsafe { libc::read(fd, buffer.as_mut_ptr().cast(), buffer.len()) };
        if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        if n <= 0 {
            break;
        }
        for &byte in &buffer[..n as usize] {
            let digit = (byte as char).to_digit(16).map(|d| d as usize);
            match (field, byte, digit) {
                (_, b'\n', _) => (start, end, field) = (0, 0, 0),
                (0, b'-', _) => field = 1,
                (1, b' ', _) => {
                    if (start..end).contains(&address) {
                        found = Some((start, end));
                        break 'lines;
                    }
                    field = 2;
                }
                (0, _, Some(d)) => start = start << 4 | d,
                (1, _, Some(d)) => end = end << 4 | d,
                (0 | 1, _, None) => break 'lines,
                _ => {}
            }
        }
    }
    unsafe { libc::close(fd) };
    found
}

fn parse(line: &str) -> Option<Mapping> {
    // start-end perms offset major:minor inode [path]
    let mut fields = line.split_ascii_whitespace();
    let (start, end) = fields.next()?.split_once('-')?;
    let perms = fields.next()?.as_bytes();
    let offset = u64::from_str_radix(fields.next()?, 16).ok()?;
    let (major, minor) = fields.next()?.split_once(':')?;
    let inode = fields.next()?.parse().ok()?;
    // The path is the rest of the line (it may hold spaces); " (deleted)" stays part of it.
    let path = line.splitn(6, |c: char| c.is_ascii_whitespace()).nth(5).unwrap_or("").trim_start().to_string();
    Some(Mapping {
        start: usize::from_str_radix(start, 16).ok()?,
        end: usize::from_str_radix(end, 16).ok()?,
        readable: perms.first() == Some(&b'r'),
        writable: perms.get(1) == Some(&b'w'),
        executable: perms.get(2) == Some(&b'x'),
        shared: perms.get(3) == Some(&b's'),
        offset,
        dev: libc::makedev(u32::from_str_radix(major, 16).ok()?, u32::from_str_radix(minor, 16).ok()?),
        inode,
        path,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_file_and_anonymous_lines() {
        let m = parse("55d0c0a00000-55d0c0a21000 r-xp 00002000 fd:01 1234  /usr/bin/cat").unwrap();
        assert_eq!((m.start, m.end, m.offset, m.inode), (0x55d0c0a00000, 0x55d0c0a21000, 0x2000, 1234));
        assert!(m.readable && !m.writable && m.executable && !m.shared);
        assert_eq!(m.dev, libc::makedev(0xfd, 1));
        assert_eq!(m.path, "/usr/bin/cat");
        let anon = parse("7ffd1000-7ffd2000 rw-p 00000000 00:00 0 ").unwrap();
        assert_eq!((anon.inode, anon.path.as_str()), (0, ""));
    }

    #[test]
    fn the_mapping_around_an_address_is_found_without_allocating() {
        // `read` tries the kept copy's lock: not while the keeping test uses it.
        let _alone = TESTS_KEEPING.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let here = parses_file_and_anonymous_lines as *const () as usize;
        let expected = read().unwrap().into_iter().find(|m| m.contains(here)).map(|m| (m.start, m.end));
        assert_eq!(mapping_containing(here), expected);
        let local = 0u8;
        let (start, end) = mapping_containing(&local as *const u8 as usize).unwrap();
        assert!(start <= &local as *const u8 as usize && (&local as *const u8 as usize) < end);
        assert_eq!(mapping_containing(0), None);
    }

    #[test]
    fn this_process_maps_its_own_code() {
        // `read` tries the kept copy's lock: not while the keeping test uses it.
        let _alone = TESTS_KEEPING.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let here = parses_file_and_anonymous_lines as *const () as usize;
        let maps = read().unwrap();
        assert!(maps.iter().any(|m| m.contains(here) && m.executable));
    }

    /// Inside `keeping`, `read` gives the mappings as first read until the hook engine changes
    /// them (`changed`); `read_now`, and `read` outside, always the current ones.
    #[test]
    fn kept_mappings_are_read_again_after_a_change_of_ours() {
        let _alone = TESTS_KEEPING.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        // A change made behind the engine's back (as another thread would): the middle page of a
        // reservation of ours made readable. Inside the reservation, so that no other test's
        // mapping, made or unmapped meanwhile, can be where the page is.
        let reserved =
            unsafe { libc::mmap(std::ptr::null_mut(), 3 * 4096, libc::PROT_NONE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0) };
        assert_ne!(reserved, libc::MAP_FAILED);
        let page = reserved as usize + 4096;
        let readable = |protection| assert_eq!(unsafe { libc::mprotect(page as *mut _, 4096, protection) }, 0);
        let shows = |maps: &[Mapping]| maps.iter().any(|m| m.contains(page) && m.readable);
        keeping(|| {
            read().unwrap();
            readable(libc::PROT_READ);
            assert!(!shows(&read().unwrap()), "kept");
            assert!(shows(&read_now().unwrap()), "read now");
            changed();
            assert!(shows(&read().unwrap()), "read again after a change");
            readable(libc::PROT_NONE);
            changed();
            assert!(!shows(&read().unwrap()));
        });
        readable(libc::PROT_READ);
        assert!(shows(&read().unwrap()), "outside keeping: read each time");
        unsafe { libc::munmap(reserved, 3 * 4096) };
    }
}
