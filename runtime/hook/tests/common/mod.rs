//! What the hook engine's test binaries share.

use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;

/// The libc this process runs with, from its mappings.
pub fn libc_path() -> std::path::PathBuf {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let line = maps.lines().find(|line| line.contains("libc.so.6")).unwrap();
    line.split_whitespace().nth(5).unwrap().into()
}

/// A thread calling libc's getppid until `stop`, checking every answer; its number of calls.
pub fn calling_getppid(stop: &Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    let stop = stop.clone();
    let parent = std::os::unix::process::parent_id() as i32;
    std::thread::spawn(move || {
        let mut calls = 0u64;
        while !stop.load(SeqCst) {
            assert_eq!(unsafe { libc::getppid() }, parent);
            calls += 1;
        }
        calls
    })
}
