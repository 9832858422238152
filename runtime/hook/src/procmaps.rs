//! A process's memory mappings, from `/proc/PID/maps`: the hook engine reads its own (files are
//! matched by device and inode); `uebpf inject` reads its target's, whose paths it needs.

use std::io;

/// One line of `/proc/PID/maps`.
#[derive(Debug, Clone)]
pub struct Mapping {
    pub start: usize,
    pub end: usize,
    pub readable: bool,
    pub writable: bool,
    pub executable: bool,
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

pub(crate) fn read() -> io::Result<Vec<Mapping>> {
    read_file("/proc/self/maps")
}

/// The mappings of process `pid` (reading them takes the permission ptrace does).
pub fn of_process(pid: u32) -> io::Result<Vec<Mapping>> {
    read_file(&format!("/proc/{pid}/maps"))
}

fn read_file(path: &str) -> io::Result<Vec<Mapping>> {
    let text = std::fs::read_to_string(path)?;
    text.lines().map(|line| parse(line).ok_or_else(|| io::Error::other(format!("unexpected {path} line {line:?}")))).collect()
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
        assert!(m.readable && !m.writable && m.executable);
        assert_eq!(m.dev, libc::makedev(0xfd, 1));
        assert_eq!(m.path, "/usr/bin/cat");
        let anon = parse("7ffd1000-7ffd2000 rw-p 00000000 00:00 0 ").unwrap();
        assert_eq!((anon.inode, anon.path.as_str()), (0, ""));
    }

    #[test]
    fn this_process_maps_its_own_code() {
        let here = parses_file_and_anonymous_lines as *const () as usize;
        let maps = read().unwrap();
        assert!(maps.iter().any(|m| m.contains(here) && m.executable));
    }
}
