//! Perf event arrays and the perf buffers they name: `bpf_perf_event_output` with the kernel's
//! record layout, read by an unmodified libbpf `perf_buffer` consumer.
//!
//! The kernel's way (kernel/bpf/arraymap.c, kernel/events/ring_buffer.c): a loader opens one
//! BPF output perf event per CPU (`PERF_COUNT_SW_BPF_OUTPUT`), maps its ring (a
//! `struct perf_event_mmap_page`, then 2^n data pages), and stores the event's descriptor at that
//! CPU's index of a perf event array. A program's `bpf_perf_event_output(ctx, &array, index or
//! BPF_F_CURRENT_CPU, data, size)` appends a PERF_RECORD_SAMPLE to that event's ring: an 8-byte
//! `perf_event_header`, a u32 size, the data, padded so that the u32 and the data end on 8 bytes
//! (the u32 counts the padding). A sample that does not fit is counted as lost, and the next
//! one that fits is preceded by a PERF_RECORD_LOST with the count. The consumer reads from
//! `data_tail` to `data_head` (records may wrap around the end of the data) and advances
//! `data_tail`.
//!
//! Here the bpf(2) server makes each event's ring a perf buffer of the region (a map of the
//! internal type UEBPF_PERF_BUFFER: a control page, the mmap page, the data) when the loader maps
//! the event, and a perf event array's slot holds that buffer's map id, so a program in any
//! process finds it. What differs from the kernel: a buffer's writers take a lock (a uebpf
//! producer can be preempted, and two threads can find themselves on one CPU), and wakeups
//! follow uebpf's ring buffer policy (ringbuf.rs, "Wakeups"), not the event's `wakeup_events`:
//! no system call per sample, a consumer that has read everything sleeps at most CONSUMER_TIMER
//! and is woken early at a WATERMARK_DIVISOR-th of the buffer.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::array::IdSlots;
use crate::error::Error;
use crate::layout::*;
use crate::region::{MapInfo, Region};
use crate::ringbuf::WATERMARK_DIVISOR;
use crate::shared::Shared;
use crate::wakeup::Consumable;
use crate::Errno;

/// `bpf_perf_event_output` flags: the index, or BPF_F_CURRENT_CPU (all index bits set).
pub const BPF_F_INDEX_MASK: u64 = 0xffff_ffff;
pub const BPF_F_CURRENT_CPU: u64 = BPF_F_INDEX_MASK;
/// A slot for an event that has no buffer (never mapped): output fails as the kernel's does
/// without a ring (ENOSPC).
pub const NO_BUFFER: u32 = u32::MAX;
/// A slot for a perf event that is not a BPF output event: output fails with EINVAL, as the
/// kernel's.
pub const NOT_OUTPUT: u32 = u32::MAX - 1;
/// A buffer whose event was opened for any CPU.
pub const ANY_CPU: u32 = u32::MAX;

/// `perf_event_header`: u32 type, u16 misc, u16 size.
pub const PERF_RECORD_LOST: u32 = 2;
pub const PERF_RECORD_SAMPLE: u32 = 9;
/// `perf_event_header::misc` of a sample taken in user context.
const PERF_RECORD_MISC_USER: u16 = 2;
/// header + id + count.
const LOST_RECORD_LEN: u64 = 24;
/// The kernel's ENOTSUPP (not in libc: kernel-internal, yet returned to bpf(2) callers).
pub const ENOTSUPP: Errno = 524;

pub struct PerfBuf {
    control: *const PerfControl,
    /// The `perf_event_mmap_page` a consumer maps.
    page: *mut u8,
    data: *mut u8,
    size: u64,
}

// SAFETY: shared memory used through atomics, or under the buffer's lock.
unsafe impl Send for PerfBuf {}
unsafe impl Sync for PerfBuf {}

impl PerfBuf {
    /// The view of perf buffer map `info` (its entry checked: `Region::check_entry`).
    pub(crate) fn of(shared: &Shared, info: &MapInfo) -> Result<PerfBuf, Error> {
        let size = u64::from(info.def.max_entries);
        Ok(PerfBuf {
            control: shared.at(info.area + info.storage.control, PAGE_SIZE as u64)? as *const PerfControl,
            page: shared.at(info.perf_page_offset(), PAGE_SIZE as u64)?,
            data: shared.at(info.values_offset(), size)?,
            size,
        })
    }

    /// Sets up a new buffer: where its data lies for the consumer, its CPU and event id.
    pub(crate) fn initialise(&self, cpu: u32, event_id: u64) {
        self.field(PERF_DATA_OFFSET).store(PAGE_SIZE as u64, Ordering::Relaxed);
        self.field(PERF_DATA_SIZE).store(self.size, Ordering::Relaxed);
        // SAFETY: nobody else sees the buffer before its map entry is handed out.
        unsafe {
            let control = self.control as *mut PerfControl;
            (*control).cpu = cpu;
            (*control).event_id = event_id;
        }
    }

    fn control(&self) -> &PerfControl {
        // SAFETY: inside the region, checked in `of`.
        unsafe { &*self.control }
    }

    fn field(&self, offset: u64) -> &AtomicU64 {
        // SAFETY: an 8-byte-aligned field of the mmap page, checked in `of`.
        unsafe { &*(self.page.add(offset as usize) as *const AtomicU64) }
    }

    /// Data bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The CPU the event was opened for (ANY_CPU: any).
    pub fn cpu(&self) -> u32 {
        self.control().cpu
    }

    /// Samples refused for want of room, in all.
    pub fn lost(&self) -> u64 {
        self.control().lost_total.load(Ordering::Relaxed)
    }

    /// Copies `len` bytes to data position `pos`, wrapping at the end of the data.
    ///
    /// # Safety
    /// `bytes` readable for `len` bytes, `len` at most the data size, the lock held.
    unsafe fn write(&self, pos: u64, bytes: *const u8, len: u64) {
        let start = pos & (self.size - 1);
        let first = len.min(self.size - start);
        std::ptr::copy_nonoverlapping(bytes, self.data.add(start as usize), first as usize);
        std::ptr::copy_nonoverlapping(bytes.add(first as usize), self.data, (len - first) as usize);
    }

    /// `bpf_perf_event_output` into this buffer: a PERF_RECORD_SAMPLE of `size` bytes of raw
    /// data; Err(ENOSPC) if it does not fit (counted, and reported to the consumer by a
    /// PERF_RECORD_LOST before the next sample that fits, as the kernel's perf_output_begin).
    ///
    /// # Safety
    /// `data` readable for `size` bytes.
    pub unsafe fn output(&self, data: *const u8, size: u64) -> Result<(), Errno> {
        let raw = align_up(size + 4, 8);
        let sample = 8 + raw;
        if sample > u64::from(u16::MAX) {
            return Err(libc::E2BIG); // perf_event_header::size is a u16
        }
        let control = self.control();
        let head = {
            let _guard = control.lock.lock();
            let head = self.field(PERF_DATA_HEAD).load(Ordering::Relaxed);
            let tail = self.field(PERF_DATA_TAIL).load(Ordering::Acquire);
            let lost = control.lost.load(Ordering::Relaxed);
            let need = sample + if lost > 0 { LOST_RECORD_LEN } else { 0 };
            // The kernel's ring_buffer_has_space: CIRC_SPACE keeps one byte free.
            if head.wrapping_sub(tail) + need > self.size - 1 {
                control.lost.fetch_add(1, Ordering::Relaxed);
                control.lost_total.fetch_add(1, Ordering::Relaxed);
                return Err(libc::ENOSPC);
            }
            let mut at = head;
            if lost > 0 {
                let mut record = [0u8; LOST_RECORD_LEN as usize];
                record[..4].copy_from_slice(&PERF_RECORD_LOST.to_ne_bytes());
                record[6..8].copy_from_slice(&(LOST_RECORD_LEN as u16).to_ne_bytes());
                record[8..16].copy_from_slice(&control.event_id.to_ne_bytes());
                record[16..].copy_from_slice(&lost.to_ne_bytes());
                self.write(at, record.as_ptr(), LOST_RECORD_LEN);
                control.lost.store(0, Ordering::Relaxed);
                at += LOST_RECORD_LEN;
            }
            let mut header = [0u8; 12];
            header[..4].copy_from_slice(&PERF_RECORD_SAMPLE.to_ne_bytes());
            header[4..6].copy_from_slice(&PERF_RECORD_MISC_USER.to_ne_bytes());
            header[6..8].copy_from_slice(&(sample as u16).to_ne_bytes());
            header[8..12].copy_from_slice(&((raw - 4) as u32).to_ne_bytes());
            self.write(at, header.as_ptr(), 12);
            self.write(at + 12, data, size);
            // The kernel leaves the padding as it was; zeros say nothing of earlier records.
            let zeros = [0u8; 8];
            self.write(at + 12 + size, zeros.as_ptr(), raw - 4 - size);
            let head = head + need;
            self.field(PERF_DATA_HEAD).store(head, Ordering::Release);
            head
        };
        let unread = || head.wrapping_sub(self.field(PERF_DATA_TAIL).load(Ordering::Acquire));
        control.wakeup.record_written(|| unread() >= self.size / WATERMARK_DIVISOR);
        Ok(())
    }

    /// Hands every record (its type and its bytes after the 8-byte header) to `on_record` and
    /// advances `data_tail` past them, as libbpf's perf_buffer consumer does. For tests and
    /// for consumers that are not libbpf.
    pub fn consume(&self, mut on_record: impl FnMut(u32, &[u8])) -> u64 {
        let (head, mut tail) = (self.field(PERF_DATA_HEAD).load(Ordering::Acquire), self.field(PERF_DATA_TAIL).load(Ordering::Relaxed));
        let mut count = 0;
        while tail < head {
            let mut header = [0u8; 8];
            // SAFETY: reads within the data; the consumer owns [tail, head).
            let read = |pos: u64, out: &mut [u8]| unsafe {
                let start = pos & (self.size - 1);
                let first = (out.len() as u64).min(self.size - start) as usize;
                std::ptr::copy_nonoverlapping(self.data.add(start as usize), out.as_mut_ptr(), first);
                std::ptr::copy_nonoverlapping(self.data, out.as_mut_ptr().add(first), out.len() - first);
            };
            read(tail, &mut header);
            let len = u64::from(u16::from_ne_bytes([header[6], header[7]]));
            if len < 8 || len > head - tail {
                break;
            }
            let mut body = vec![0u8; len as usize - 8];
            read(tail + 8, &mut body);
            on_record(u32::from_ne_bytes([header[0], header[1], header[2], header[3]]), &body);
            tail += len;
            count += 1;
        }
        self.field(PERF_DATA_TAIL).store(tail, Ordering::Release);
        count
    }
}

impl Consumable for PerfBuf {
    fn wakeup(&self) -> &Wakeup {
        &self.control().wakeup
    }

    fn has_record(&self) -> bool {
        self.field(PERF_DATA_HEAD).load(Ordering::Acquire) != self.field(PERF_DATA_TAIL).load(Ordering::Acquire)
    }

    fn read_position(&self) -> u64 {
        self.field(PERF_DATA_TAIL).load(Ordering::Acquire)
    }
}

/// A perf buffer this process has opened: its map id and view.
type OpenBuffer = (u32, PerfBuf);

/// A perf event array: slot i holds the map id of the perf buffer of the event stored at index
/// i, 0 for none.
pub struct PerfEventArray {
    slots: IdSlots,
    /// To open the buffers the slots name.
    region: Region,
    /// This process's view of each slot's buffer, opened at its first output.
    open: Box<[Mutex<Option<OpenBuffer>>]>,
}

impl PerfEventArray {
    pub(crate) fn new(shared: &Arc<Shared>, values: u64, max_entries: u32) -> Result<PerfEventArray, Error> {
        Ok(PerfEventArray {
            slots: IdSlots::new(shared, values, max_entries)?,
            region: Region { shared: Arc::clone(shared) },
            open: (0..max_entries).map(|_| Mutex::new(None)).collect(),
        })
    }

    /// The slots: the server stores a buffer's map id (or NO_BUFFER) at an event's index.
    pub fn slots(&self) -> &IdSlots {
        &self.slots
    }

    /// The view of perf buffer map `id`; None if the region has no such map, or one of another
    /// kind (a slot naming anything but a perf buffer is a corrupt region: nothing to write to).
    fn open_buffer(&self, id: u32) -> Option<PerfBuf> {
        let info = self.region.map_info(id).ok()?;
        match self.region.check_entry(&info) {
            Ok(crate::def::MapKind::PerfBuffer) => PerfBuf::of(&self.region.shared, &info).ok(),
            _ => None,
        }
    }

    /// `bpf_perf_event_output(ctx, array, flags, data, size)`, with the kernel's errors: EINVAL
    /// for flags beyond the index, E2BIG for an index past the end, ENOENT for an empty slot,
    /// EOPNOTSUPP if the event is another CPU's, ENOSPC if its buffer is full.
    ///
    /// # Safety
    /// `data` readable for `size` bytes.
    pub unsafe fn output(&self, flags: u64, data: *const u8, size: u64) -> Result<(), Errno> {
        if flags & !BPF_F_INDEX_MASK != 0 {
            return Err(libc::EINVAL);
        }
        let cpu = crate::current::cpu(u32::MAX);
        let index = if flags == BPF_F_CURRENT_CPU { cpu } else { flags as u32 };
        let id = self.slots.get(index).ok_or(libc::E2BIG)?;
        match id {
            0 => return Err(libc::ENOENT),
            NO_BUFFER => return Err(libc::ENOSPC),
            NOT_OUTPUT => return Err(libc::EINVAL),
            _ => {}
        }
        let mut open = self.open[index as usize].lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if open.as_ref().is_none_or(|(known, _)| *known != id) {
            let buffer = self.open_buffer(id).ok_or(libc::ENOENT)?;
            *open = Some((id, buffer));
        }
        let buffer = &open.as_ref().expect("opened above").1;
        if buffer.cpu() != ANY_CPU && buffer.cpu() != cpu {
            return Err(libc::EOPNOTSUPP);
        }
        buffer.output(data, size)
    }
}
