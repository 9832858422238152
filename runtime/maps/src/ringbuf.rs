//! The BPF ring buffer, with the kernel's algorithm and record layout (kernel/bpf/ringbuf.c):
//! reservations are serialised by a lock and advance `producer_pos`; each record starts with an
//! 8-byte header whose length carries BUSY_BIT until the record is submitted (or DISCARD_BIT if
//! discarded); the consumer advances `consumer_pos` past submitted records only. A reservation
//! that would overtake the consumer (or the oldest record still being written) fails: the ring
//! never overwrites unread data, and every refusal is counted in `dropped`.
//!
//! Each process maps the data pages twice, back to back, so that a record that wraps around the
//! end is contiguous in memory, as the kernel (and a libbpf consumer's mmap) sees it.
//!
//! Wakeups: unlike the kernel's, an ordinary record (flags 0) never wakes the consumer: on uebpf a
//! wakeup is a FUTEX_WAKE system call, and an IPI to an idle CPU, in the traced program itself
//! (~12 us here, where the kernel's irq_work costs the program almost nothing), and the kernel's
//! rule (wake when the consumer had caught up) made a program whose calls are a few microseconds
//! apart pay one per call. So, as LTTng's consumer: a consumer that has drained the ring sleeps
//! for at most CONSUMER_TIMER, FOLLOW_TIMER while records flow (wakeup.rs, `sleep_for`: its
//! wait's timeout, server/src/epoll.rs and ring.rs), and a producer wakes it early only when the
//! unread bytes reach a WATERMARK_DIVISOR-th of the ring (once per sleep: `Wakeup::armed`), so
//! that a burst never fills the ring while it sleeps, or at the first record after a sleep in
//! which the consumer read nothing (wakeup.rs): the first event of a quiet spell is read at
//! once, and a steady producer still pays no wakeup.
//! BPF_RB_FORCE_WAKEUP still wakes every time, BPF_RB_NO_WAKEUP never (the timer still delivers).
//! One more wakeup has no kernel counterpart: a consumer can find the record at its position still
//! being written (a uebpf producer can be preempted between reserve and submit, for a scheduler
//! slice; the kernel's cannot) and can then read nothing, however full the ring behind it; it
//! sleeps until that record's submit, which wakes it (`ConsumerSide::head_waiter`), rather than for
//! its timer while the ring fills and producers drop records (with 4 getpgid producers on 2
//! CPUs, 57 % of them dropped).
//! Wakeups go through a futex (`ConsumerSide::wakeup`, wakeup.rs), which works across processes,
//! and only while a consumer is registered as waiting (`Wakeup::waiters`): otherwise a submit
//! makes no system call.
//!
//! Staging: a reserved record the program is still writing blocks the consumer, which reads in
//! order and stops at it. The kernel's producer cannot be preempted there; a uebpf producer can,
//! for a scheduler slice or several, and with more producers than CPUs that stalled the consumer
//! behind records whose writers were not running while the ring filled (8 getpgid producers on 2
//! CPUs: 70 % of records dropped, the kernel's ring 21 %). So a record of up to STAGED_MAX bytes
//! is written by the program in a staging slot of this process (private memory next to the data
//! mapping, part of the memory programs may reach), its room in the ring held at reserve time
//! (`RingControl::held_pos`, so a reservation fails exactly when the kernel's would; taken by a
//! compare-and-swap, not the lock, so that a producer preempted while it holds the lock does not
//! stall every other producer's reservation), and placed whole in the ring at submit, under the
//! reservation lock: the consumer never sees it half written. What differs from the kernel: records appear in submit order, not reserve order (a
//! discarded one too, as a header the consumer skips), and a process killed while a program held
//! a staged record leaves its room held (the kernel's producer cannot die there; a record written
//! in place would block the consumer for good). Larger records, and reservations that find no
//! staging slot free in their process, go in the ring directly.
//!
//! Owned slots: the first OWNED_SLOTS slots each go to one thread for good, the first time it
//! reserves (`owner`, found by its tid, no thread-local state to clean up when it exits); the
//! others are taken and given back by compare-and-swap. A thread reserving in its own slot needs
//! no atomic read-modify-write: only it writes the slot's word, and a program run nested in its
//! own (from a signal handler) finds the word taken and uses a shared slot. One atomic fewer per
//! record (of three) took ~20 ns off a call traced by two records in the duration study at 0 us.
//! A slot stays with its thread after the thread exits; a thread with the same tid may take it
//! up, and a thread that finds its OWNER_PROBES places taken uses the shared slots.

use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use crate::current;
use crate::error::Error;
use crate::layout::*;
use crate::shared::Shared;
use crate::wakeup::{Armed, Consumable, Waiting};
use crate::Errno;

/// A producer wakes a sleeping consumer early once the unread bytes reach this fraction of the
/// ring: the rest absorbs what arrives while the consumer wakes up, which with more producers
/// than CPUs includes waiting for a CPU (a quarter, the first choice, left too little:
/// runtime/maps/README.md, "Ring buffers", has the measurements).
pub const WATERMARK_DIVISOR: u64 = 16;

pub const BPF_RB_NO_WAKEUP: u64 = 1;
pub const BPF_RB_FORCE_WAKEUP: u64 = 2;
pub const BPF_RB_AVAIL_DATA: u64 = 0;
pub const BPF_RB_RING_SIZE: u64 = 1;
pub const BPF_RB_CONS_POS: u64 = 2;
pub const BPF_RB_PROD_POS: u64 = 3;

/// The kernel's RINGBUF_MAX_RECORD_SZ.
const MAX_RECORD: u64 = (u32::MAX / 4) as u64;
/// Records up to this many bytes are staged ("Staging" above): every record the project's tools
/// write (sslsniff's 256 bytes of plaintext included).
pub const STAGED_MAX: u64 = 512;
/// Staging slots per ring and process: reservations held at once, by all its threads.
pub const STAGE_SLOTS: usize = 64;
/// Slots 0..OWNED_SLOTS belong each to one thread ("Owned slots" above), the others to all.
const OWNED_SLOTS: usize = 32;
/// The places a thread looks at for its slot, from its tid's (tid % OWNED_SLOTS) on.
const OWNER_PROBES: usize = 4;
const STAGING_BYTES: usize = STAGE_SLOTS * STAGED_MAX as usize;
/// Page offset of the data from the control page (control, consumer, producer pages precede it).
const DATA_PAGE: u64 = 3;

pub struct RingBuf {
    control: *const RingControl,
    consumer_pos: *const AtomicU64,
    producer_pos: *const AtomicU64,
    /// Start of the double mapping: `[data, data + 2 * size)`.
    data: *mut u8,
    size: u64,
    /// This process's staging slots, right after the double mapping (STAGING_BYTES).
    staging: *mut u8,
    /// Slot i's record size plus one while it holds a reserved record, 0 while it is free. One
    /// word per slot, not a bitmap, so that a submit frees its slot with a plain store: an atomic
    /// read-modify-write there waits for the record just copied into the ring to leave the store
    /// buffer (a profile put 17 % of a submit on that wait).
    staged: Box<[AtomicU64; STAGE_SLOTS]>,
    /// The tid of the thread owned slot i belongs to (0: nobody yet). Written once per slot.
    owner: Box<[AtomicU32; OWNED_SLOTS]>,
    /// The consumer's position as this process last read it (`fits`, `unread_reaches`).
    consumer_seen: AtomicU64,
}

// SAFETY: every shared field is accessed through atomics or under the ring's lock.
unsafe impl Send for RingBuf {}
unsafe impl Sync for RingBuf {}

impl Drop for RingBuf {
    fn drop(&mut self) {
        // SAFETY: our double mapping and staging slots, created in `map`.
        unsafe { libc::munmap(self.data.cast(), 2 * self.size as usize + STAGING_BYTES) };
    }
}

fn round_record(len: u32) -> u64 {
    align_up(u64::from(len & !(RINGBUF_BUSY_BIT | RINGBUF_DISCARD_BIT)) + RINGBUF_HEADER_SIZE, 8)
}

impl RingBuf {
    /// Maps the ring whose control page, consumer page, producer page and data start at the
    /// given region offsets (validated by the caller).
    pub(crate) fn map(shared: &Shared, control: u64, consumer: u64, producer: u64, data: u64, size: u64) -> Result<RingBuf, Error> {
        let fail =
            |what: &str| Error::io(format_args!("cannot map the ring buffer's data twice ({what})"), std::io::Error::last_os_error());
        let len = 2 * size as usize + STAGING_BYTES;
        // SAFETY: reserve address space, then map the data file range into both halves; the
        // staging slots after them are the reservation's own private memory.
        unsafe {
            let base = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            );
            if base == libc::MAP_FAILED {
                return Err(fail("reserve"));
            }
            // MAP_POPULATE: the page-table entries (and, in the first process, the pages) are made
            // here, once, not by a producer's first write to each page during a traced call (a
            // profile of the micro suite put ~3 % of a call on those faults; a transport producer
            // with a 1 MiB ring took 264 minor faults in a 3 s run before, 7 after). The kernel's
            // ring is allocated whole at map creation too.
            for half in 0..2 {
                let at = (base as *mut u8).add(half * size as usize);
                let flags = libc::MAP_SHARED | libc::MAP_FIXED | libc::MAP_POPULATE;
                let mapped =
                    libc::mmap(at.cast(), size as usize, libc::PROT_READ | libc::PROT_WRITE, flags, shared.raw_fd(), data as libc::off_t);
                if mapped == libc::MAP_FAILED {
                    libc::munmap(base, len);
                    return Err(fail("map"));
                }
            }
            let staging = (base as *mut u8).add(2 * size as usize);
            if libc::mprotect(staging.cast(), STAGING_BYTES, libc::PROT_READ | libc::PROT_WRITE) != 0 {
                libc::munmap(base, len);
                return Err(fail("staging"));
            }
            Ok(RingBuf {
                control: shared.at(control, PAGE_SIZE as u64)? as *const RingControl,
                consumer_pos: shared.at(consumer, 8)? as *const AtomicU64,
                producer_pos: shared.at(producer, 8)? as *const AtomicU64,
                data: base.cast(),
                size,
                staging,
                staged: Box::new(std::array::from_fn(|_| AtomicU64::new(0))),
                owner: Box::new(std::array::from_fn(|_| AtomicU32::new(0))),
                consumer_seen: AtomicU64::new(0),
            })
        }
    }

    fn control(&self) -> &RingControl {
        // SAFETY: inside the region, checked in `map`.
        unsafe { &*self.control }
    }

    fn consumer_pos(&self) -> &AtomicU64 {
        // SAFETY: as above.
        unsafe { &*self.consumer_pos }
    }

    fn producer_pos(&self) -> &AtomicU64 {
        // SAFETY: as above.
        unsafe { &*self.producer_pos }
    }

    fn header_at(&self, pos: u64) -> &RecordHeader {
        // SAFETY: masked into the first copy; 8-byte aligned since every record length is.
        unsafe { &*(self.data.add((pos & (self.size - 1)) as usize) as *const RecordHeader) }
    }

    /// Data size in bytes (the map's max_entries).
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The process-local memory programs write records into: the double mapping
    /// `[start, start + 2 * size)` and the staging slots right after it.
    pub fn data_mapping(&self) -> (*mut u8, u64) {
        (self.data, 2 * self.size + STAGING_BYTES as u64)
    }

    /// True if `record` (a pointer from `reserve`) lies in this ring's mapping or is one of its
    /// staging slots.
    pub fn owns(&self, record: *const u8) -> bool {
        let start = self.data as usize + RINGBUF_HEADER_SIZE as usize;
        (start..self.data as usize + self.size as usize + RINGBUF_HEADER_SIZE as usize).contains(&(record as usize))
            || self.staged_slot(record).is_some()
    }

    /// The staging slot `record` starts, if it is one.
    fn staged_slot(&self, record: *const u8) -> Option<usize> {
        let offset = (record as usize).checked_sub(self.staging as usize)?;
        (offset < STAGING_BYTES && offset.is_multiple_of(STAGED_MAX as usize)).then_some(offset / STAGED_MAX as usize)
    }

    /// Takes a staging slot of this process for a record of `size` bytes, if any: the calling
    /// thread's own if it is free, else a shared one.
    fn claim_slot(&self, size: u64) -> Option<usize> {
        if let Some(slot) = self.own_slot() {
            let word = &self.staged[slot];
            // Only this thread writes its slot's word; a run nested in its own (a signal
            // handler's) between this load and store finishes before it, and gives the slot back.
            if word.load(Ordering::Relaxed) == 0 {
                word.store(size + 1, Ordering::Relaxed);
                return Some(slot);
            }
        }
        (OWNED_SLOTS..STAGE_SLOTS).find(|&slot| {
            let word = &self.staged[slot];
            word.load(Ordering::Relaxed) == 0 && word.compare_exchange(0, size + 1, Ordering::Acquire, Ordering::Relaxed).is_ok()
        })
    }

    /// The calling thread's owned slot: the first of its OWNER_PROBES places that names its tid,
    /// or that names nobody and it takes; None if all are others'.
    fn own_slot(&self) -> Option<usize> {
        let tid = current::tid();
        (0..OWNER_PROBES).map(|probe| (tid as usize + probe) % OWNED_SLOTS).find(|&slot| {
            let owner = &self.owner[slot];
            match owner.load(Ordering::Relaxed) {
                0 => owner.compare_exchange(0, tid, Ordering::Relaxed, Ordering::Relaxed).is_ok(),
                other => other == tid,
            }
        })
    }

    fn release_slot(&self, slot: usize) {
        self.staged[slot].store(0, Ordering::Release);
    }

    /// True if `len` more bytes fit after the room held up to `held` beside the unread records
    /// and the oldest record still being written at `pending`. The consumer's position is read
    /// only when the one this process saw last leaves no room: the consumer writes it at every
    /// record, so each read takes its cache line from the consumer's CPU, and a position seen
    /// earlier is never ahead of the real one (the consumer only moves forward), so the room it
    /// shows is there.
    fn fits(&self, held: u64, pending: u64, len: u64) -> bool {
        let mask = self.size - 1;
        let end = held + len;
        if end.wrapping_sub(pending) > mask {
            return false;
        }
        if end.wrapping_sub(self.consumer_seen.load(Ordering::Relaxed)) <= mask {
            return true;
        }
        end.wrapping_sub(self.consumer_now()) <= mask
    }

    /// The consumer's position, read now (its cache line taken from the consumer's CPU) and
    /// remembered as the one this process saw last.
    fn consumer_now(&self) -> u64 {
        let consumer = self.consumer_pos().load(Ordering::Acquire);
        self.consumer_seen.store(consumer, Ordering::Relaxed);
        consumer
    }

    /// True if the unread bytes reach `bytes` (the watermark). As in `fits`, the consumer's
    /// position is read only when the one this process saw last says they may: a position seen
    /// earlier shows at least as many unread bytes as there are, and the consumer's own line,
    /// which it writes at every record, is taken from its CPU only near the watermark.
    fn unread_reaches(&self, bytes: u64) -> bool {
        let producer = self.producer_pos().load(Ordering::Acquire);
        producer.wrapping_sub(self.consumer_seen.load(Ordering::Relaxed)) >= bytes && producer.wrapping_sub(self.consumer_now()) >= bytes
    }

    /// Under the reservation lock: moves `pending_pos` past the records committed since, and
    /// returns it.
    fn advance_pending(&self) -> u64 {
        let control = self.control();
        let producer = control.placed_pos.load(Ordering::Relaxed);
        let mut pending = control.pending_pos.load(Ordering::Relaxed);
        while pending < producer {
            let header_len = self.header_at(pending).len.load(Ordering::Acquire);
            if header_len & RINGBUF_BUSY_BIT != 0 {
                break;
            }
            pending += round_record(header_len);
        }
        control.pending_pos.store(pending, Ordering::Relaxed);
        pending
    }

    /// Under the reservation lock: holds `len` more bytes of room (advancing `held_pos`, which
    /// staged reservations move concurrently) if they fit, else counts the refusal.
    fn hold_locked(&self, len: u64) -> bool {
        let control = self.control();
        let pending = self.advance_pending();
        let mut held = control.held_pos.load(Ordering::Acquire);
        loop {
            if !self.fits(held, pending, len) {
                control.dropped.fetch_add(1, Ordering::Relaxed);
                return false;
            }
            match control.held_pos.compare_exchange_weak(held, held + len, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return true,
                Err(now) => held = now,
            }
        }
    }

    /// Holds `len` bytes of room for a staged record without the lock: a compare-and-swap on
    /// `held_pos`, so a producer preempted while holding the lock (placing a record) does not
    /// stall the reservations of the others. `pending_pos` is read as last advanced; when only it
    /// stands in the way, the lock is taken to advance it, so a reservation fails exactly when
    /// the kernel's would.
    fn hold_staged(&self, len: u64) -> bool {
        let control = self.control();
        let pending = control.pending_pos.load(Ordering::Relaxed);
        let mut held = control.held_pos.load(Ordering::Acquire);
        loop {
            if !self.fits(held, pending, len) {
                let _guard = control.lock.lock();
                return self.hold_locked(len);
            }
            match control.held_pos.compare_exchange_weak(held, held + len, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return true,
                Err(now) => held = now,
            }
        }
    }

    /// Reserves a record of `size` bytes; null if the ring is full (counted) or `size` too large.
    /// Records up to STAGED_MAX bytes are staged (see "Staging"), others written in place.
    pub fn reserve(&self, size: u64) -> *mut u8 {
        if size > MAX_RECORD {
            return std::ptr::null_mut();
        }
        let len = align_up(size + RINGBUF_HEADER_SIZE, 8);
        if len > self.size {
            return std::ptr::null_mut();
        }
        if size <= STAGED_MAX {
            if let Some(slot) = self.claim_slot(size) {
                if !self.hold_staged(len) {
                    self.release_slot(slot);
                    return std::ptr::null_mut();
                }
                return self.slot_address(slot);
            }
        }
        let _guard = self.control().lock.lock();
        if !self.hold_locked(len) {
            return std::ptr::null_mut();
        }
        // Under the lock nobody else moves producer_pos, and the room after it up to held_pos
        // (the staged records') stays free until they are placed: this record goes first.
        let producer = self.control().placed_pos.load(Ordering::Relaxed);
        let record = self.write_header(producer, size as u32 | RINGBUF_BUSY_BIT);
        self.publish(producer + len);
        record
    }

    /// Under the reservation lock, at `producer` (not yet published): the record header with
    /// `len_word` (length and flag bits) and its page offset; returns the payload's address.
    fn write_header(&self, producer: u64, len_word: u32) -> *mut u8 {
        let header = self.header_at(producer);
        header.len.store(len_word, Ordering::Relaxed);
        let page = ((producer & (self.size - 1)) / PAGE_SIZE as u64 + DATA_PAGE) as u32;
        // SAFETY: the header is ours until producer_pos is published past it.
        unsafe { (std::ptr::addr_of!(header.pg_off) as *mut u32).write(page) };
        (header as *const RecordHeader as *mut u8).wrapping_add(RINGBUF_HEADER_SIZE as usize)
    }

    /// Under the reservation lock: moves the producer position to `producer`, for consumers and
    /// in the lock holders' own copy (`RingControl::placed_pos`).
    fn publish(&self, producer: u64) {
        self.control().placed_pos.store(producer, Ordering::Relaxed);
        self.producer_pos().store(producer, Ordering::Release);
    }

    /// Where staging slot `slot` starts.
    fn slot_address(&self, slot: usize) -> *mut u8 {
        self.staging.wrapping_add(slot * STAGED_MAX as usize)
    }

    /// Places staged record `slot` in the ring whole, or discarded (a header the consumer skips,
    /// as the kernel's discarded records are: positions and available bytes stay the kernel's).
    fn place_staged(&self, slot: usize, discard: bool) {
        let size = self.staged[slot].load(Ordering::Relaxed) - 1;
        let len = round_record(size as u32);
        {
            let _guard = self.control().lock.lock();
            // Room was held at reserve: records and staged bytes never exceed the ring.
            let control = self.control();
            let producer = control.placed_pos.load(Ordering::Relaxed);
            let payload = self.write_header(producer, size as u32 | if discard { RINGBUF_DISCARD_BIT } else { 0 });
            if !discard {
                // SAFETY: the `size` bytes after the header are ours until producer_pos is
                // published (they may run into the second copy: the double mapping); the slot
                // holds `size` bytes.
                unsafe { std::ptr::copy_nonoverlapping(self.slot_address(slot), payload, size as usize) };
            }
            self.publish(producer + len);
            // With no record being written in place before it, the oldest record not committed
            // moves past this one too: else the next reservation that finds `pending_pos` in its
            // way walks every header placed since (`advance_pending`), each a cache miss by then
            // (a profile put 30 % of a reservation there).
            if control.pending_pos.load(Ordering::Relaxed) == producer {
                control.pending_pos.store(producer + len, Ordering::Relaxed);
            }
        }
        self.release_slot(slot);
    }

    /// Submits (or discards) a reserved record. A pointer this ring did not hand out, or a record
    /// already submitted, is ignored (the kernel's verifier rules both out; we cannot).
    // Safe to call with any pointer: it is dereferenced only once `owns` placed it in our mapping.
    #[allow(clippy::not_unsafe_ptr_arg_deref)]
    pub fn commit(&self, record: *mut u8, flags: u64, discard: bool) {
        if let Some(slot) = self.staged_slot(record) {
            if self.staged[slot].load(Ordering::Acquire) == 0 {
                return; // not reserved (or submitted already)
            }
            self.place_staged(slot, discard);
            // Placed whole: no consumer can be waiting behind it.
            self.wake_for(flags, None);
            return;
        }
        if !self.owns(record) || !(record as usize - self.data as usize).is_multiple_of(8) {
            return;
        }
        // SAFETY: inside our first copy (owns), 8-byte aligned.
        let header = unsafe { &*(record.sub(RINGBUF_HEADER_SIZE as usize) as *const RecordHeader) };
        let len = header.len.load(Ordering::Relaxed);
        if len & RINGBUF_BUSY_BIT == 0 {
            return;
        }
        let new_len = (len ^ RINGBUF_BUSY_BIT) | if discard { RINGBUF_DISCARD_BIT } else { 0 };
        // SeqCst, as the consumer's `arm`: either it sees this record submitted, or this producer
        // sees it waiting behind the record (xchg on x86 either way).
        header.len.swap(new_len, Ordering::SeqCst);
        self.wake_for(flags, Some(record as u64 - self.data as u64 - RINGBUF_HEADER_SIZE));
    }

    /// The wakeups a submit with `flags` makes ("Wakeups" above): FORCE always, NO_WAKEUP never,
    /// otherwise at the watermark and for a consumer asleep behind the record at `offset` (a
    /// record that was written in place).
    fn wake_for(&self, flags: u64, offset: Option<u64>) {
        if flags & BPF_RB_FORCE_WAKEUP != 0 {
            self.control().consumer_side.wakeup.wake(true);
        } else if flags & BPF_RB_NO_WAKEUP == 0 {
            self.control().consumer_side.wakeup.record_written(|| self.unread_reaches(self.size / WATERMARK_DIVISOR));
            if let Some(offset) = offset {
                self.wake_head_waiter(offset);
            }
        }
    }

    /// Wakes a consumer asleep behind the record at `offset` (in the first copy), once.
    fn wake_head_waiter(&self, offset: u64) {
        let control = self.control();
        let waiter = control.consumer_side.head_waiter.load(Ordering::SeqCst);
        if waiter != 0
            && (waiter - 1) & (self.size - 1) == offset
            && control.consumer_side.head_waiter.compare_exchange(waiter, 0, Ordering::SeqCst, Ordering::Relaxed).is_ok()
        {
            control.consumer_side.wakeup.signal();
        }
    }

    /// `bpf_ringbuf_output`: 0, -EINVAL for unknown flags, -EAGAIN if the ring is full.
    ///
    /// # Safety
    /// `data` readable for `size` bytes.
    pub unsafe fn output(&self, data: *const u8, size: u64, flags: u64) -> Result<(), Errno> {
        if flags & !(BPF_RB_NO_WAKEUP | BPF_RB_FORCE_WAKEUP) != 0 {
            return Err(libc::EINVAL);
        }
        let record = self.reserve(size);
        if record.is_null() {
            return Err(libc::EAGAIN);
        }
        std::ptr::copy(data, record, size as usize);
        self.commit(record, flags, false);
        Ok(())
    }

    /// `bpf_ringbuf_query`. The producer position counts staged records (`held_pos`), as the
    /// kernel's counts every record reserved (theirs are in the ring from reserve on).
    pub fn query(&self, flags: u64) -> u64 {
        let consumer = self.consumer_pos().load(Ordering::Acquire);
        let producer = self.control().held_pos.load(Ordering::Acquire);
        match flags {
            BPF_RB_AVAIL_DATA => producer.wrapping_sub(consumer),
            BPF_RB_RING_SIZE => self.size,
            BPF_RB_CONS_POS => consumer,
            BPF_RB_PROD_POS => producer,
            _ => 0,
        }
    }

    /// Reservations refused because the ring was full.
    pub fn dropped(&self) -> u64 {
        self.control().dropped.load(Ordering::Relaxed)
    }

    /// Bytes submitted or reserved and not yet consumed.
    fn unread(&self) -> u64 {
        let producer = self.producer_pos().load(Ordering::Acquire);
        producer.wrapping_sub(self.consumer_pos().load(Ordering::Acquire))
    }

    /// True if the record at consumer_pos has been submitted or discarded: the consumer can read
    /// now. The readiness a waiting consumer sleeps on. The kernel's poll reports readable while
    /// producer_pos != consumer_pos, which includes a record still being written; there the
    /// writer cannot be preempted (the program runs with preemption off), but a uebpf producer
    /// can be, for milliseconds, and a consumer told "readable" would spin on its BUSY record
    /// and take the CPU the producer needs to finish it (measured on 2 cores with 4 producers:
    /// nine of ten epoll_wait returns read nothing). No record is left: a sleeping consumer looks
    /// again within CONSUMER_TIMER, or sooner at the watermark or that record's submit (`arm`).
    pub fn has_record(&self) -> bool {
        let consumer = self.consumer_pos().load(Ordering::Acquire);
        consumer < self.producer_pos().load(Ordering::Acquire)
            && self.header_at(consumer).len.load(Ordering::Acquire) & RINGBUF_BUSY_BIT == 0
    }

    /// Hands every submitted record, in order, to `on_record`, advancing consumer_pos past each
    /// (discarded records are skipped); stops at a record still being written. Returns the number
    /// of records handed out. A length that cannot be right (beyond the ring) stops consumption.
    pub fn consume(&self, mut on_record: impl FnMut(&[u8])) -> u64 {
        self.consume_while(|record| {
            on_record(record);
            true
        })
    }

    /// As `consume`, stopping after the first record for which `on_record` returns false (that
    /// record counts as consumed, as with a libbpf callback that returns an error).
    pub fn consume_while(&self, mut on_record: impl FnMut(&[u8]) -> bool) -> u64 {
        let mut count = 0;
        let mut consumer = self.consumer_pos().load(Ordering::Acquire);
        loop {
            let producer = self.producer_pos().load(Ordering::Acquire);
            if consumer >= producer {
                return count;
            }
            let header = self.header_at(consumer);
            let len = header.len.load(Ordering::Acquire);
            if len & RINGBUF_BUSY_BIT != 0 {
                return count;
            }
            let record_len = round_record(len);
            if record_len > self.size {
                return count;
            }
            consumer += record_len;
            let mut go_on = true;
            if len & RINGBUF_DISCARD_BIT == 0 {
                let payload = (header as *const RecordHeader as *const u8).wrapping_add(RINGBUF_HEADER_SIZE as usize);
                // SAFETY: the record lies within the double mapping (start in the first copy,
                // length at most the ring size).
                go_on = on_record(unsafe { std::slice::from_raw_parts(payload, (len & !RINGBUF_DISCARD_BIT) as usize) });
                count += 1;
            }
            self.consumer_pos().store(consumer, Ordering::Release);
            if !go_on {
                return count;
            }
        }
    }

    /// Sleeps until a producer wakes consumers or `timeout` passes; returns at once if a record
    /// is ready. Any number of processes may wait.
    pub fn wait(&self, timeout: Duration) {
        let _waiting = Waiting::new(self);
        let seen = self.control().consumer_side.wakeup.seq();
        if !self.has_record() {
            self.control().consumer_side.wakeup.wait_for_change(seen, timeout);
        }
    }
}

impl Consumable for RingBuf {
    fn wakeup(&self) -> &Wakeup {
        &self.control().consumer_side.wakeup
    }

    fn has_record(&self) -> bool {
        RingBuf::has_record(self)
    }

    fn read_position(&self) -> u64 {
        self.consumer_pos().load(Ordering::Acquire)
    }

    /// What should wake the registered consumer's next sleep: the watermark if it has read
    /// everything, or the submit of the record at its position if that is still being written
    /// (the watermark would wake it for nothing then: it cannot read past that record).
    fn arm(&self) -> Armed {
        let control = self.control();
        let consumer = self.consumer_pos().load(Ordering::Acquire);
        let busy_head = consumer < self.producer_pos().load(Ordering::Acquire)
            && self.header_at(consumer).len.load(Ordering::Acquire) & RINGBUF_BUSY_BIT != 0;
        if busy_head {
            control.consumer_side.wakeup.armed.store(Armed::No as u32, Ordering::SeqCst);
            control.consumer_side.head_waiter.store(consumer + 1, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            Armed::No
        } else {
            control.consumer_side.head_waiter.store(0, Ordering::SeqCst);
            control.consumer_side.wakeup.arm(self.unread() == 0, consumer)
        }
    }

    /// Nobody sleeps behind a record any more: its submit need not wake anyone.
    fn last_waiter_left(&self) {
        self.control().consumer_side.head_waiter.store(0, Ordering::SeqCst);
    }
}
