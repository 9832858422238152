//! Array and per-CPU array maps: `max_entries` preallocated values, indexed by a u32 key.
//! Error codes and their order follow the kernel's arraymap.c.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::current;
use crate::def::{BPF_EXIST, BPF_F_LOCK, BPF_NOEXIST};
use crate::error::Error;
use crate::shared::Shared;
use crate::Errno;

pub(crate) struct ArrayView {
    pub values: *mut u8,
    pub value_size: usize,
    pub stride: usize,
    pub cpus: u32,
    pub max_entries: u32,
}

impl ArrayView {
    fn slot(&self, index: u32, cpu: u32) -> *mut u8 {
        self.values.wrapping_add((index as usize * self.cpus as usize + cpu as usize) * self.stride)
    }

    /// # Safety
    /// `key` must be readable for 4 bytes.
    unsafe fn index(key: *const u8) -> u32 {
        (key as *const u32).read_unaligned()
    }

    /// Program view: the value (the calling CPU's slot for per-CPU arrays), or null.
    ///
    /// # Safety
    /// `key` must be readable for 4 bytes.
    #[inline]
    pub unsafe fn lookup(&self, key: *const u8) -> *mut u8 {
        let index = Self::index(key);
        if index >= self.max_entries {
            return std::ptr::null_mut();
        }
        self.slot(index, if self.cpus > 1 { current::cpu(self.cpus) } else { 0 })
    }

    /// Checks flags and index as `array_map_update_elem`; returns the element index.
    ///
    /// # Safety
    /// `key` must be readable for 4 bytes.
    unsafe fn check_update(&self, key: *const u8, flags: u64) -> Result<u32, Errno> {
        if flags & !BPF_F_LOCK > BPF_EXIST {
            return Err(libc::EINVAL);
        }
        let index = Self::index(key);
        if index >= self.max_entries {
            return Err(libc::E2BIG);
        }
        if flags & BPF_NOEXIST != 0 {
            return Err(libc::EEXIST);
        }
        if flags & BPF_F_LOCK != 0 {
            // No value of ours holds a bpf_spin_lock.
            return Err(libc::EINVAL);
        }
        Ok(index)
    }

    /// Program view: writes the value (the calling CPU's slot only, for per-CPU arrays).
    ///
    /// # Safety
    /// `key` readable for 4 bytes, `value` for value_size bytes.
    pub unsafe fn update(&self, key: *const u8, value: *const u8, flags: u64) -> Result<(), Errno> {
        let index = self.check_update(key, flags)?;
        let cpu = if self.cpus > 1 { current::cpu(self.cpus) } else { 0 };
        std::ptr::copy(value, self.slot(index, cpu), self.value_size);
        Ok(())
    }

    /// Syscall view: every CPU's slot from `value` (cpus x stride bytes for per-CPU arrays).
    ///
    /// # Safety
    /// `key` readable for 4 bytes; `value` holds one value, or cpus x stride bytes if per-CPU.
    pub unsafe fn update_all(&self, key: *const u8, value: *const u8, flags: u64) -> Result<(), Errno> {
        let index = self.check_update(key, flags)?;
        for cpu in 0..self.cpus {
            std::ptr::copy(value.add(cpu as usize * self.stride), self.slot(index, cpu), self.value_size);
        }
        Ok(())
    }

    /// Syscall view: copies every CPU's slot out.
    ///
    /// # Safety
    /// As `update_all`, for writing `value`.
    pub unsafe fn lookup_all(&self, key: *const u8, value: *mut u8) -> Result<(), Errno> {
        let index = Self::index(key);
        if index >= self.max_entries {
            return Err(libc::ENOENT);
        }
        for cpu in 0..self.cpus {
            let out = value.add(cpu as usize * self.stride);
            std::ptr::copy(self.slot(index, cpu), out, self.value_size);
            // Per-CPU values are handed out in 8-byte strides; the padding is zero, as the kernel's.
            if self.cpus > 1 {
                std::ptr::write_bytes(out.add(self.value_size), 0, self.stride - self.value_size);
            }
        }
        Ok(())
    }

    /// Array elements always exist.
    pub fn delete(&self) -> Result<(), Errno> {
        Err(libc::EINVAL)
    }

    /// As `array_map_get_next_key`: no key or one out of range gives 0; the last gives ENOENT.
    ///
    /// # Safety
    /// `key` is null or readable for 4 bytes; `next` writable for 4.
    pub unsafe fn next_key(&self, key: *const u8, next: *mut u8) -> Result<(), Errno> {
        next_index(key, next, self.max_entries)
    }
}

/// `BPF_MAP_GET_NEXT_KEY` of an array of `max_entries` (the kernel's array_map_get_next_key): 0
/// after no key or one past the end, ENOENT after the last.
///
/// # Safety
/// `key` null or readable for 4 bytes, `next` writable for 4.
pub(crate) unsafe fn next_index(key: *const u8, next: *mut u8, max_entries: u32) -> Result<(), Errno> {
    let index = if key.is_null() { u32::MAX } else { (key as *const u32).read_unaligned() };
    let following = if index >= max_entries {
        0
    } else if index == max_entries - 1 {
        return Err(libc::ENOENT);
    } else {
        index + 1
    };
    (next as *mut u32).write_unaligned(following);
    Ok(())
}

/// The slots of an array whose values name other objects by id, 0 for none, one every 8 bytes
/// (the array layout of a 4-byte value): a perf event array's perf buffers (map ids) and a prog
/// array's programs (program ids), u32s; a cgroup array's cgroups (`CgroupSlots`), u64s: a
/// cgroup v2 id is the cgroup directory's inode number. The kernel's fd arrays hold object
/// pointers that the bpf(2) update took from descriptors; here the server turns the descriptor
/// into the id (a cgroup's as the kernel's cgroup_fd_array_get_ptr finds the cgroup;
/// `bpf_current_task_under_cgroup` asks about it).
pub struct Slots<A: SlotWord> {
    slots: *const A,
    max_entries: u32,
}

/// A map of program or map ids: u32 slots.
pub type IdSlots = Slots<AtomicU32>;
/// A cgroup array: u64 slots.
pub type CgroupSlots = Slots<AtomicU64>;

/// The atomic word of a slot, and its value.
pub trait SlotWord {
    type Value: Copy + PartialEq + Default;
    fn load(&self) -> Self::Value;
    fn store(&self, value: Self::Value);
    fn take(&self) -> Self::Value;
}

macro_rules! slot_word {
    ($atomic:ty, $value:ty) => {
        impl SlotWord for $atomic {
            type Value = $value;
            #[inline]
            fn load(&self) -> $value {
                <$atomic>::load(self, Ordering::Acquire)
            }
            fn store(&self, value: $value) {
                <$atomic>::store(self, value, Ordering::Release)
            }
            fn take(&self) -> $value {
                self.swap(0, Ordering::AcqRel)
            }
        }
    };
}
slot_word!(AtomicU32, u32);
slot_word!(AtomicU64, u64);

// SAFETY: the slots are atomics in shared memory that the owning map keeps mapped.
unsafe impl<A: SlotWord> Send for Slots<A> {}
unsafe impl<A: SlotWord> Sync for Slots<A> {}

impl<A: SlotWord> Slots<A> {
    pub(crate) fn new(shared: &Shared, values: u64, max_entries: u32) -> Result<Slots<A>, Error> {
        Ok(Slots { slots: shared.at(values, u64::from(max_entries) * 8)? as *const A, max_entries })
    }

    fn slot(&self, index: u32) -> Option<&A> {
        // SAFETY: below max_entries, inside the values checked in `new`; 8 bytes apart.
        (index < self.max_entries).then(|| unsafe { &*self.slots.byte_add(8 * index as usize) })
    }

    /// The id at `index`: None past the end, Some(0) for an empty slot.
    #[inline]
    pub fn get(&self, index: u32) -> Option<A::Value> {
        self.slot(index).map(A::load)
    }

    /// Stores `id` at `index` (the server's update with a descriptor); Err(E2BIG) past the end,
    /// as the kernel's fd_array_map_update_elem.
    pub fn set(&self, index: u32, id: A::Value) -> Result<(), Errno> {
        self.slot(index).ok_or(libc::E2BIG)?.store(id);
        Ok(())
    }

    /// Empties slot `index`: Err(ENOENT) if it was empty, Err(E2BIG) past the end (the kernel's
    /// fd_array_map_delete_elem).
    pub fn clear(&self, index: u32) -> Result<(), Errno> {
        if self.slot(index).ok_or(libc::E2BIG)?.take() == A::Value::default() {
            Err(libc::ENOENT)
        } else {
            Ok(())
        }
    }

    /// The ids stored now, with their indexes.
    pub fn occupied(&self) -> impl Iterator<Item = (u32, A::Value)> + '_ {
        (0..self.max_entries).filter_map(|index| self.get(index).filter(|&id| id != A::Value::default()).map(|id| (index, id)))
    }

    pub fn max_entries(&self) -> u32 {
        self.max_entries
    }
}
