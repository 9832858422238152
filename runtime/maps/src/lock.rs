//! A spin lock that lives in shared memory and works across processes.
//!
//! The lock word holds the owner's process id (0 = free). Critical sections are a few hundred
//! instructions (a hash-bucket walk, a ring-buffer reservation), so waiters spin, then yield. A
//! process killed while holding a lock would block every other process forever; a waiter that has
//! yielded for a while therefore checks whether the owner still exists (`kill(owner, 0)` gives
//! ESRCH) and takes the lock over. The data the dead owner was changing may be half-updated (the
//! structures are designed so that this loses at most that one update), but nothing hangs.

use std::sync::atomic::{AtomicU32, Ordering};

use crate::current;

#[repr(transparent)]
pub struct SpinLock(AtomicU32);

pub struct SpinGuard<'a>(&'a SpinLock);

impl Drop for SpinGuard<'_> {
    fn drop(&mut self) {
        self.0 .0.store(0, Ordering::Release);
    }
}

/// Spins before yielding, and yields between checks that the owner is alive.
const SPINS_BEFORE_YIELD: u32 = 128;
const YIELDS_BETWEEN_OWNER_CHECKS: u32 = 1024;

impl SpinLock {
    /// The lock if it is free now, without waiting.
    pub fn try_lock(&self) -> Option<SpinGuard<'_>> {
        self.0.compare_exchange(0, current::pid(), Ordering::Acquire, Ordering::Relaxed).is_ok().then_some(SpinGuard(self))
    }

    /// The lock, waiting for it if it is taken. The free case is inlined into its callers (a ring
    /// buffer's submit takes it once per record); the wait is not.
    #[inline]
    pub fn lock(&self) -> SpinGuard<'_> {
        let me = current::pid();
        if self.0.compare_exchange_weak(0, me, Ordering::Acquire, Ordering::Relaxed).is_ok() {
            return SpinGuard(self);
        }
        self.lock_contended(me)
    }

    #[cold]
    fn lock_contended(&self, me: u32) -> SpinGuard<'_> {
        let mut spins = 0u32;
        loop {
            let owner = self.0.load(Ordering::Relaxed);
            if owner == 0 {
                if self.0.compare_exchange_weak(0, me, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                    return SpinGuard(self);
                }
                continue;
            }
            spins += 1;
            if spins < SPINS_BEFORE_YIELD {
                std::hint::spin_loop();
                continue;
            }
            // SAFETY: sched_yield has no preconditions.
            unsafe { libc::sched_yield() };
            let yields = spins - SPINS_BEFORE_YIELD;
            if owner != me
                && yields % YIELDS_BETWEEN_OWNER_CHECKS == YIELDS_BETWEEN_OWNER_CHECKS - 1
                && current::process_is_gone(owner)
                && self.0.compare_exchange(owner, me, Ordering::Acquire, Ordering::Relaxed).is_ok()
            {
                return SpinGuard(self);
            }
        }
    }
}
