//! Consumer wakeups shared by ring buffers and perf buffers (ringbuf.rs, "Wakeups"): a consumer
//! registers as waiting, then looks for records, then sleeps on the futex `Wakeup::seq`; a
//! producer makes a system call only while a consumer is registered: once per sleep (`armed`) at
//! the watermark, or at the first record of an idle period, or every time when forced.
//!
//! The first record: a consumer that goes to sleep on an empty buffer after a whole sleep in which
//! it read nothing (an idle period, or its first sleep) is woken by the next record, so a tracer's
//! first event after a quiet spell arrives at once, not at the consumer's timer. A consumer that
//! read records at its last wakeup sleeps for the watermark or FOLLOW_TIMER (1 ms,
//! `sleep_for`), and one that read nothing in a sleep is idle: its next sleep waits for the
//! first record, or CONSUMER_TIMER (50 ms). So while records flow the consumer looks every
//! millisecond, on its own timer: the records that follow a first event (a burst from many
//! probes) are read within a millisecond, and a producer writing steadily, even one record a
//! millisecond, pays no wakeup (the duration study's 1 ms calls paid ~3 us a call when every
//! empty-buffer sleep waited for the first record). A producer that falls silent for a whole
//! millisecond pays one wakeup at its next record: at most one a millisecond, and the consumer's
//! timer goes off at most once a millisecond, and only while records flow.

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
    /// Says what should wake the registered consumer's next sleep (before each sleep): the first
    /// record after an idle period, or the watermark (`Wakeup::arm`); returns which.
    fn arm(&self) -> Armed {
        self.wakeup().arm(!self.has_record(), self.read_position())
    }
    /// Where the consumer reads next (it only grows as records are read).
    fn read_position(&self) -> u64;
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

/// What a producer's record does to a sleeping consumer (`Wakeup::armed`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u32)]
pub enum Armed {
    /// Nothing: a producer has woken it already, or it is not asleep.
    No = 0,
    /// Wake it once the unread bytes reach the watermark (the buffer's WATERMARK_DIVISOR).
    Watermark = 1,
    /// Wake it at the next record: it went to sleep on an empty buffer after an idle period.
    FirstRecord = 2,
}

impl Wakeup {
    /// Arms the next sleep of a registered consumer that reads at `position`: for the first record
    /// if the buffer is `empty` and the consumer read nothing since it last armed (an idle period:
    /// module comment), else for the watermark. Returns how it armed.
    pub fn arm(&self, empty: bool, position: u64) -> Armed {
        let idle = self.armed_at.swap(position, Ordering::Relaxed) == position;
        let armed = if empty && idle { Armed::FirstRecord } else { Armed::Watermark };
        self.armed.store(armed as u32, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        armed
    }

    /// A producer wrote a record: wakes a registered consumer asleep for the first record, or
    /// for the watermark if `at_watermark()` (asked only then: it reads the consumer's position,
    /// a cache line the consumer writes at every record). A consumer not armed for this record
    /// costs a load, no fence: above the watermark every record comes here, and a fence there
    /// waits for the record's own stores to reach memory (a profile put 56 % of a submit on it).
    /// A consumer that arms for the watermark just as this load misses it sleeps no longer than
    /// FOLLOW_TIMER, and the next record looks again. An arm outlives the sleep it was for when
    /// the timer ends that sleep (only a producer takes it back), so the watermark is asked only
    /// while a consumer is registered: a consumer reading behind a steady producer, awake since
    /// its timer, otherwise made every record read its position and fence (a cpu-clock profile
    /// of the duration study at 0 us put 16 % of a traced call there; the consumer stayed about
    /// 1.3 MB behind, above a 16 MiB ring's watermark).
    pub(crate) fn record_written(&self, at_watermark: impl FnOnce() -> bool) {
        // Acquire: a consumer registers before it arms, so a producer that sees the arm sees it.
        let armed = self.armed.load(Ordering::Acquire);
        if armed == Armed::FirstRecord as u32
            || (armed == Armed::Watermark as u32 && self.waiters.load(Ordering::Relaxed) > 0 && at_watermark())
        {
            self.wake(false);
        }
    }

    /// The wakeup counter: it changes every time a producer wakes consumers.
    pub fn seq(&self) -> u32 {
        self.seq.load(Ordering::SeqCst)
    }

    /// Wakes registered consumers; with none, no system call (as the kernel's wakeup of an empty
    /// wait queue). Unless `force`d, only the first producer to find them armed wakes them (one
    /// wakeup per sleep, not one per record while they get up). The fence pairs with
    /// the one in `Waiting::new`: either this producer sees the waiter, or the waiter, looking
    /// for records after registering, sees this record.
    pub(crate) fn wake(&self, force: bool) {
        fence(Ordering::SeqCst);
        if self.waiters.load(Ordering::SeqCst) > 0 && (self.armed.swap(Armed::No as u32, Ordering::SeqCst) != Armed::No as u32 || force) {
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

/// The longest a consumer that has caught up sleeps before it looks again (the bound on how late
/// an ordinary record is read): 50 ms keeps an idle consumer's wakeups to 20 a second and a
/// steadily written ring at one consumer sleep per 50 ms.
pub const CONSUMER_TIMER: Duration = Duration::from_millis(50);

/// How long a consumer that read records sleeps (`sleep_for`): the bound on how late a record that
/// follows a first event is read, and on how often an idle consumer's producers wake it.
pub const FOLLOW_TIMER: Duration = Duration::from_millis(1);

/// How long a consumer sleeps, given how its sleep was armed (module comment): a sleep for the
/// first record may last the whole CONSUMER_TIMER (that record wakes it); a sleep for the
/// watermark, or behind a record being written (`No`: its submit wakes it), lasts FOLLOW_TIMER.
pub fn sleep_for(armed: Armed) -> Duration {
    match armed {
        Armed::FirstRecord => CONSUMER_TIMER,
        Armed::Watermark | Armed::No => FOLLOW_TIMER,
    }
}

/// A registered waiting consumer (until dropped): producers wake consumers only meanwhile.
pub struct Waiting<'a> {
    source: &'a dyn Consumable,
    armed: Armed,
}

impl<'a> Waiting<'a> {
    pub fn new(source: &'a dyn Consumable) -> Waiting<'a> {
        source.wakeup().waiters.fetch_add(1, Ordering::SeqCst);
        let armed = source.arm();
        Waiting { source, armed }
    }

    /// How registering armed the first sleep.
    pub fn armed(&self) -> Armed {
        self.armed
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if self.source.wakeup().waiters.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.source.last_waiter_left();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A consumer armed for the watermark that no longer waits (its timer ended the sleep) is not
    /// asked about: the question reads the consumer's position, a line its CPU writes at every
    /// record.
    #[test]
    fn the_watermark_is_asked_only_while_a_consumer_waits() {
        let wakeup = Wakeup { seq: 0.into(), waiters: 0.into(), armed: (Armed::Watermark as u32).into(), armed_at: 0.into() };
        wakeup.record_written(|| panic!("asked with nobody waiting"));
        wakeup.waiters.store(1, Ordering::SeqCst);
        let mut asked = false;
        wakeup.record_written(|| {
            asked = true;
            false
        });
        assert!(asked, "asked once a consumer waits");
        assert_eq!(wakeup.seq(), 0, "below the watermark: nobody woken");
    }
}
