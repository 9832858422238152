//! Map memory for a libbpf consumer: `mmap` of a map descriptor maps the region file at the
//! map's pages, as the kernel's map mmap does; and ring buffer readiness for `epoll`.
//!
//! Ring buffer mmap (libbpf's `ring_buffer__add`): offset 0, one page, read-write: the consumer
//! page; offset one page, read-only, page + 2 x size: the producer page, then the data twice
//! (the second copy maps the same file pages again), so records that wrap are contiguous.
//! Array maps (`BPF_F_MMAPABLE`, libbpf's skeleton globals): the value array from offset 0.
//!
//! Readiness for `epoll`, two ways:
//!
//! - A set whose only member is one ring (libbpf's `ring_buffer__poll` with one ring): our
//!   `epoll_wait` sleeps on the ring's futex itself (`crate::epoll`), as the kernel's consumer
//!   sleeps on the ring's wait queue: a wakeup is the producer's FUTEX_WAKE and the consumer's
//!   return from FUTEX_WAIT, and a consumer that finds a record ready makes no system call.
//! - Anything else (several rings, rings mixed with other descriptors, `poll`/`select`): the
//!   kernel's epoll must see the ring, so a ring's map descriptor is an eventfd, and a bridge
//!   thread per ring sets it readable while a record can be read ("level", cleared when the
//!   consumer has caught up, see `RingBuf::has_record`). Our `epoll_wait` registers the consumer
//!   as waiting with every ring (`Bridge::waiting`) and refreshes every ring's level right
//!   before it waits, so a consumer that has drained the ring sleeps instead of spinning; the
//!   thread follows the ring's futex only meanwhile. Otherwise it refreshes every 100 ms, for
//!   `poll`/`select` users (which are not registered: they see records within 100 ms), and is
//!   not woken by producers that wake a consumer of the first kind.
//!
//! Either way producers wake under the kernel's wakeup rules and only while a consumer is
//! registered, as the kernel wakes only a non-empty wait queue: a consumer that is busy or polls
//! costs the traced process no system call per record.
//!
//! Measured (transport suite, 1 MiB ring, getpgid producers, 2 shared and noisy cores, medians
//! of 6 interleaved runs): through the bridge a wakeup took the producer's FUTEX_WAKE, a switch
//! to the thread, its eventfd read/write, a switch to the consumer, and the consumer's eventfd
//! read/write before its next wait; perf put most of the consumer's CPU in eventfd, epoll and
//! futex code, and with 4 producers nine of ten epoll_wait returns read nothing (a BUSY head
//! record, see `RingBuf::has_record`). Drops with 2/4/8 producers went from 6.7/44/71 % to
//! 0.2/21/61 %, the consumer's CPU from 50/32/18 % to 36/14/6 %. What was left with more
//! producers than cores was a producer preempted between reserve and submit, the consumer asleep
//! behind its record until it ran again: small records are now staged and placed whole at submit
//! (uebpf_maps::ringbuf, "Staging"), and a consumer behind a record being written in place is
//! woken by its submit.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::Thread;
use std::time::Duration;

use uebpf_maps::layout::PAGE_SIZE;
use uebpf_maps::{sleep_for, Waiting};
use uebpf_maps::{Map, MapKind, Region};

use crate::real;

const REFRESH: Duration = Duration::from_millis(100);

/// What the thread and the loader's threads share.
#[derive(Default)]
struct Shared {
    stop: AtomicBool,
    /// `epoll_wait` calls on the eventfd path in progress: the thread follows the ring's futex.
    epoll_waiters: AtomicUsize,
}

pub struct Bridge {
    shared: Arc<Shared>,
    thread: Thread,
    /// The thread's own duplicate of the map's eventfd: valid whatever the loader closes.
    fd: c_int,
    map: Arc<Map>,
}

impl Bridge {
    pub fn start(map: Arc<Map>, map_fd: c_int) -> Result<Bridge, c_int> {
        // The C library's duplicate, not the interposed one: the thread's copy is no object of
        // the loader's.
        let fd = crate::real::fcntl(map_fd, libc::F_DUPFD_CLOEXEC, 3);
        if fd < 0 {
            return Err(crate::real::errno());
        }
        let shared = Arc::new(Shared::default());
        let (thread_shared, thread_map) = (Arc::clone(&shared), Arc::clone(&map));
        let spawned = std::thread::Builder::new().name("uebpf-ring".into()).spawn(move || {
            block_signals();
            let ring = thread_map.consumable().expect("bridges are made for ring and perf buffers");
            while !thread_shared.stop.load(Ordering::Acquire) {
                if thread_shared.epoll_waiters.load(Ordering::Acquire) == 0 {
                    refresh(fd, &thread_map);
                    std::thread::park_timeout(REFRESH);
                    continue;
                }
                // Armed, then the counter, then the level: a submit after the refresh changes the
                // counter.
                let armed = ring.arm();
                let seen = ring.wakeup_seq();
                refresh(fd, &thread_map);
                ring.wait_for_wakeup(seen, sleep_for(armed));
            }
            real::close(fd);
        });
        match spawned {
            Ok(handle) => Ok(Bridge { shared, thread: handle.thread().clone(), fd, map }),
            Err(_) => {
                real::close(fd);
                Err(libc::EAGAIN)
            }
        }
    }

    /// Sets the eventfd's readiness to "a record can be read".
    pub fn refresh(&self) {
        refresh(self.fd, &self.map);
    }

    /// Registers the consumer as waiting until the guard is dropped: producers wake the thread
    /// only meanwhile (a consumer that is busy, not sleeping, costs them no system call).
    pub fn waiting(&self) -> BridgeWaiting<'_> {
        let ring = Waiting::new(self.map.consumable().expect("bridges are made for ring and perf buffers"));
        if self.shared.epoll_waiters.fetch_add(1, Ordering::AcqRel) == 0 {
            self.thread.unpark();
        }
        BridgeWaiting { _ring: ring, shared: &self.shared }
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.thread.unpark();
    }
}

/// A consumer in `epoll_wait` on the eventfd path (`Bridge::waiting`).
pub struct BridgeWaiting<'a> {
    _ring: Waiting<'a>,
    shared: &'a Shared,
}

impl Drop for BridgeWaiting<'_> {
    fn drop(&mut self) {
        self.shared.epoll_waiters.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Process-directed signals (the loader's SIGINT) must reach the loader's own threads, whose
/// waits they interrupt, never this one; the synchronous ones and the hook engine's checkpoint
/// stay open, or the agent of a loader that traces itself could not hook its `syscall` (a
/// perf buffer's end-of-stream markers in the transport suite).
fn block_signals() {
    let mask = uebpf::signals::helper_thread_mask();
    // SAFETY: this thread's mask.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &mask, std::ptr::null_mut()) };
}

fn refresh(fd: c_int, map: &Map) {
    let ring = map.consumable().expect("bridges are made for ring and perf buffers");
    let mut counter = 0u64;
    // SAFETY: 8-byte read/write of an eventfd we own (non-blocking: clearing an unset one is EAGAIN).
    unsafe {
        libc::read(fd, (&mut counter as *mut u64).cast(), 8);
        if ring.has_record() {
            counter = 1;
            libc::write(fd, (&counter as *const u64).cast(), 8);
        }
    }
}

/// An `mmap` call on one of our descriptors.
#[derive(Clone, Copy)]
pub struct MmapRequest {
    pub addr: *mut c_void,
    pub len: usize,
    pub prot: c_int,
    pub flags: c_int,
    pub offset: i64,
}

impl MmapRequest {
    /// Maps `len` bytes of the region file from `file_offset` at `at` (shared, with `extra`
    /// flags), with the request's protection.
    pub fn map_file(&self, region: &Region, at: *mut c_void, len: u64, file_offset: u64, extra: c_int) -> Result<*mut c_void, c_int> {
        let mapped = real::mmap(at, len as usize, self.prot, libc::MAP_SHARED | extra, region.fd(), file_offset as libc::off_t);
        if mapped == libc::MAP_FAILED {
            Err(crate::real::errno())
        } else {
            Ok(mapped)
        }
    }

    /// MAP_FIXED or MAP_FIXED_NOREPLACE, as asked.
    pub fn fixed(&self) -> c_int {
        self.flags & (libc::MAP_FIXED | libc::MAP_FIXED_NOREPLACE)
    }
}

/// `mmap` of a map descriptor.
/// `frozen`: BPF_MAP_FREEZE was asked for (the map descriptor's `MapObject::frozen`).
pub fn mmap(map: &Map, frozen: &AtomicBool, region: &Region, request: &MmapRequest) -> Result<*mut c_void, c_int> {
    let MmapRequest { addr, len, prot, flags, offset } = *request;
    let page = PAGE_SIZE as u64;
    let info = map.info();
    if flags & libc::MAP_SHARED == 0 || offset < 0 || len == 0 {
        return Err(libc::EINVAL);
    }
    let (offset, len64) = (offset as u64, len as u64);
    let map_file = |at: *mut c_void, len: u64, file_offset: u64, extra: c_int| request.map_file(region, at, len, file_offset, extra);
    let fixed = request.fixed();
    match map.kind() {
        MapKind::Array | MapKind::PercpuArray => {
            if info.def.map_flags & uebpf_maps::def::BPF_F_MMAPABLE == 0 {
                return Err(libc::ENODEV);
            }
            if prot & libc::PROT_WRITE != 0 && frozen.load(Ordering::Acquire) {
                return Err(libc::EPERM);
            }
            let values = info.storage.values_len(info.def.max_entries).div_ceil(page) * page;
            if offset.checked_add(len64).is_none_or(|end| end > values) {
                return Err(libc::EINVAL);
            }
            map_file(addr, len64, info.values_offset() + offset, fixed)
        }
        MapKind::RingBuf => {
            let size = u64::from(info.def.max_entries);
            if offset == 0 && len64 <= page {
                map_file(addr, len64, info.ringbuf_consumer_offset(), fixed)
            } else if offset == page && len64 <= page + 2 * size {
                if prot & libc::PROT_WRITE != 0 {
                    return Err(libc::EPERM); // the kernel's producer page and data are read-only
                }
                let first = len64.min(page + size);
                if len64 == first {
                    return map_file(addr, len64, info.ringbuf_producer_offset(), fixed);
                }
                // Reserve the whole range, then map the producer page + data, and the data again.
                let base = real::mmap(addr, len, libc::PROT_NONE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | fixed, -1, 0);
                if base == libc::MAP_FAILED {
                    return Err(crate::real::errno());
                }
                let second = base.cast::<u8>().wrapping_add(first as usize).cast();
                let result = map_file(base, first, info.ringbuf_producer_offset(), libc::MAP_FIXED)
                    .and_then(|_| map_file(second, len64 - first, info.values_offset(), libc::MAP_FIXED));
                if result.is_err() {
                    // SAFETY: the range we reserved above.
                    unsafe { libc::munmap(base, len) };
                }
                result.map(|_| base)
            } else {
                Err(libc::EINVAL)
            }
        }
        // The kernel cannot mmap these either (perf buffers are mapped through their event).
        MapKind::Hash
        | MapKind::PercpuHash
        | MapKind::LruHash
        | MapKind::LruPercpuHash
        | MapKind::PerfEventArray
        | MapKind::ProgArray
        | MapKind::CgroupArray
        | MapKind::PerfBuffer
        | MapKind::Queue
        | MapKind::Stack
        | MapKind::StackTrace
        | MapKind::BloomFilter => Err(libc::ENODEV),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uebpf_maps::ringbuf::BPF_RB_FORCE_WAKEUP;
    use uebpf_maps::{Consumable, MapDef, RegionSpec};

    fn readable(fd: c_int, timeout_ms: c_int) -> bool {
        let mut poll = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut poll, 1, timeout_ms) == 1 }
    }

    #[test]
    fn the_eventfd_is_readable_while_records_wait() {
        let region = Region::create_anonymous(RegionSpec::with_arena(1 << 20)).unwrap();
        let def = MapDef { map_type: uebpf_maps::def::BPF_MAP_TYPE_RINGBUF, max_entries: 4096, ..Default::default() };
        let map = Arc::new(region.map(region.create_map("ring", &def, None).unwrap()).unwrap());
        // SAFETY: a fresh eventfd.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        let bridge = Bridge::start(Arc::clone(&map), fd).unwrap();
        assert!(!readable(fd, 200), "nothing to read yet");
        let ring = map.ringbuf().unwrap();
        let waiting = bridge.waiting(); // what our epoll_wait does before it waits
        let seen = ring.wakeup_seq();
        // SAFETY: 8 readable bytes.
        unsafe { ring.output(b"record!!".as_ptr(), 8, BPF_RB_FORCE_WAKEUP) }.unwrap();
        assert_eq!(ring.wakeup_seq(), seen + 1, "the producer woke the waiting consumer's thread");
        assert!(readable(fd, 5000), "a producer's wakeup reaches the eventfd");
        drop(waiting);
        assert_eq!(ring.consume(|_| {}), 1);
        let waiting = bridge.waiting();
        // SAFETY: 8 readable bytes.
        unsafe { ring.output(b"record!!".as_ptr(), 8, 0) }.unwrap();
        assert_eq!(ring.wakeup_seq(), seen + 1, "an ordinary record wakes nobody");
        assert!(readable(fd, 5000), "the thread's timer finds it");
        drop(waiting);
        assert!(readable(fd, 0), "level-triggered: still readable while the record waits");
        assert_eq!(ring.consume(|_| {}), 1);
        bridge.refresh(); // what our epoll_wait does before it waits
        assert!(!readable(fd, 0), "drained: not readable, so the consumer sleeps");
        drop(bridge);
        real::close(fd);
    }
}
