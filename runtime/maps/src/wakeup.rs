//! Consumer wakeups shared by ring buffers and perf buffers (ringbuf.rs, "Wakeups"): a consumer
//! registers as waiting, then looks for records, then sleeps on the futex `Wakeup::seq`; a
//! producer makes a system call only while a consumer is registered, once per sleep at the
//! watermark (`armed`), or every time when forced.

use std::sync::atomic::{fence, Ordering};
use std::time::Duration;

use crate::futex;
use crate::layout::Wakeup;
use crate::Errno;

/// What a consumer sleeps on: a ring buffer or a perf buffer.
pub trait Consumable: Sync {
    fn wakeup(&self) -> &Wakeup;
    /// True if the consumer can read a record now.
    fn has_record(&self) -> bool;
    /// Says what should wake the registered consumer's next sleep (before each sleep).
    fn arm(&self) {
        self.wakeup().armed.store(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }
    /// The last registered consumer has left.
    fn last_waiter_left(&self) {}

    /// The wakeup counter: it changes every time a producer wakes consumers.
    fn wakeup_seq(&self) -> u32 {
        self.wakeup().seq()
    }

    /// Sleeps until the wakeup counter differs from `seen` (a producer woke consumers) or
    /// `timeout` passes, whether or not records are waiting; returns the counter. For a thread
    /// that turns wakeups into another signal (an eventfd for epoll). It does not count as
    /// waiting: producers wake it only while a consumer is registered (`Waiting`).
    fn wait_for_wakeup(&self, seen: u32, timeout: Duration) -> u32 {
        self.wakeup().wait_for_change(seen, timeout)
    }

    /// As `wait_for_wakeup`, for a consumer that must return when a signal handler runs, as
    /// epoll_wait does: Err(EINTR) then.
    fn sleep_until_woken(&self, seen: u32, timeout: Duration) -> Result<(), Errno> {
        self.wakeup().sleep(seen, timeout)
    }

    /// Registers a waiting consumer until the guard is dropped: register, then look for records,
    /// then sleep; a record submitted in between is either seen or wakes. A consumer that sleeps
    /// again under the same registration calls `arm` before each later sleep.
    fn waiting(&self) -> Waiting<'_>
    where
        Self: Sized,
    {
        Waiting::new(self)
    }
}

impl Wakeup {
    /// The wakeup counter: it changes every time a producer wakes consumers.
    pub fn seq(&self) -> u32 {
        self.seq.load(Ordering::SeqCst)
    }

    /// Wakes registered consumers; with none, no system call (as the kernel's wakeup of an empty
    /// wait queue). Unless `force`d, only the first producer to find them armed wakes them (one
    /// watermark wakeup per sleep, not one per record while they get up). The fence pairs with
    /// the one in `Waiting::new`: either this producer sees the waiter, or the waiter, looking
    /// for records after registering, sees this record.
    pub(crate) fn wake(&self, force: bool) {
        fence(Ordering::SeqCst);
        if self.waiters.load(Ordering::SeqCst) > 0 && (self.armed.swap(0, Ordering::SeqCst) == 1 || force) {
            self.signal();
        }
    }

    /// Changes the counter and wakes whoever sleeps on it.
    pub(crate) fn signal(&self) {
        self.seq.fetch_add(1, Ordering::SeqCst);
        futex::wake(&self.seq);
    }

    /// Sleeps until the counter differs from `seen` or `timeout` passes; returns the counter.
    pub fn wait_for_change(&self, seen: u32, timeout: Duration) -> u32 {
        futex::wait_for_change(&self.seq, seen, timeout)
    }

    /// As `wait_for_change`, for a consumer that must return when a signal handler runs, as
    /// epoll_wait does: Err(EINTR) then.
    pub fn sleep(&self, seen: u32, timeout: Duration) -> Result<(), Errno> {
        if futex::wait(&self.seq, seen, timeout) {
            Ok(())
        } else {
            Err(libc::EINTR)
        }
    }
}

/// A registered waiting consumer (until dropped): producers wake consumers only meanwhile.
pub struct Waiting<'a> {
    source: &'a dyn Consumable,
}

impl<'a> Waiting<'a> {
    pub fn new(source: &'a dyn Consumable) -> Waiting<'a> {
        source.wakeup().waiters.fetch_add(1, Ordering::SeqCst);
        source.arm();
        Waiting { source }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if self.source.wakeup().waiters.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.source.last_waiter_left();
        }
    }
}
