//! What one probe saw, kept with atomics only (handlers run on many threads, and in a forked
//! child the copy goes on counting under the child's pid).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

const SLOTS: usize = 32; // the largest array Default is derived for; victims use at most 5 threads
pub(crate) const VALUES: usize = 8;

#[derive(Default)]
pub(crate) struct Record {
    pub hits: AtomicU64,
    /// `hits` when the victim called `uebpf_hook_test_snapshot` (0 if it never did).
    pub snapshot: AtomicU64,
    /// Wrapping sums of each recorded value (arguments 1-8, or the return value).
    pub sums: [AtomicU64; VALUES],
    /// (pid, hits) pairs; a pid slot is claimed with a compare-exchange.
    pub pids: [AtomicU64; SLOTS],
    pub pid_hits: [AtomicU64; SLOTS],
    pub tids: [AtomicU64; SLOTS],
}

impl Record {
    pub fn hit(&self, values: &[u64]) {
        self.hits.fetch_add(1, Relaxed);
        for (sum, value) in self.sums.iter().zip(values) {
            sum.fetch_add(*value, Relaxed);
        }
        let pid = unsafe { libc::getpid() } as u64;
        if let Some(slot) = claim(&self.pids, pid) {
            self.pid_hits[slot].fetch_add(1, Relaxed);
        }
        claim(&self.tids, unsafe { libc::gettid() } as u64);
    }
}

/// The slot holding `id`, claiming a free one for it; None when all are taken by others.
fn claim(slots: &[AtomicU64; SLOTS], id: u64) -> Option<usize> {
    for (i, slot) in slots.iter().enumerate() {
        match slot.compare_exchange(0, id, Relaxed, Relaxed) {
            Ok(_) => return Some(i),
            Err(current) if current == id => return Some(i),
            Err(_) => continue,
        }
    }
    None
}
