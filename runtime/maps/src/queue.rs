//! Queue and stack maps (the kernel's kernel/bpf/queue_stack_maps.c): `max_entries` values in a
//! ring of `max_entries + 1` slots under one lock; push appends at `head`, a queue pops the
//! oldest (at `tail`), a stack the newest. Push into a full map fails with E2BIG, or with
//! BPF_EXIST drops the oldest value to make room; pop and peek of an empty map fail with ENOENT.

use std::sync::atomic::Ordering;

use crate::def::BPF_EXIST;
use crate::layout::QueueControl;
use crate::Errno;

pub(crate) struct QueueView {
    pub control: *const QueueControl,
    pub values: *mut u8,
    pub value_size: usize,
    pub stride: usize,
    /// max_entries + 1: one slot always free tells full from empty.
    pub slots: u32,
    /// A stack: pop and peek take the newest value.
    pub lifo: bool,
}

impl QueueView {
    fn control(&self) -> &QueueControl {
        // SAFETY: inside the region, checked when the view was made.
        unsafe { &*self.control }
    }

    fn slot(&self, index: u32) -> *mut u8 {
        self.values.wrapping_add(index as usize * self.stride)
    }

    /// `map_push_elem` (helper and `BPF_MAP_UPDATE_ELEM`): flags BPF_ANY or BPF_EXIST.
    ///
    /// # Safety
    /// `value` readable for value_size bytes.
    pub unsafe fn push(&self, value: *const u8, flags: u64) -> Result<(), Errno> {
        if flags & !BPF_EXIST != 0 {
            return Err(libc::EINVAL);
        }
        let control = self.control();
        let _guard = control.lock.lock();
        let (head, mut tail) = (control.head.load(Ordering::Relaxed), control.tail.load(Ordering::Relaxed));
        if (head + 1) % self.slots == tail {
            if flags & BPF_EXIST == 0 {
                return Err(libc::E2BIG);
            }
            tail = (tail + 1) % self.slots; // the oldest value makes room
            control.tail.store(tail, Ordering::Relaxed);
        }
        std::ptr::copy_nonoverlapping(value, self.slot(head), self.value_size);
        control.head.store((head + 1) % self.slots, Ordering::Relaxed);
        Ok(())
    }

    /// `map_pop_elem` (`remove`) or `map_peek_elem`: the oldest value of a queue, the newest of a
    /// stack, copied to `out`.
    ///
    /// # Safety
    /// `out` writable for value_size bytes.
    pub unsafe fn pop(&self, out: *mut u8, remove: bool) -> Result<(), Errno> {
        let control = self.control();
        let _guard = control.lock.lock();
        let (head, tail) = (control.head.load(Ordering::Relaxed), control.tail.load(Ordering::Relaxed));
        if head == tail {
            return Err(libc::ENOENT);
        }
        let index = if self.lifo { (head + self.slots - 1) % self.slots } else { tail };
        std::ptr::copy_nonoverlapping(self.slot(index), out, self.value_size);
        if remove {
            if self.lifo {
                control.head.store(index, Ordering::Relaxed);
            } else {
                control.tail.store((tail + 1) % self.slots, Ordering::Relaxed);
            }
        }
        Ok(())
    }
}
