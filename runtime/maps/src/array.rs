//! Array and per-CPU array maps: `max_entries` preallocated values, indexed by a u32 key.
//! Error codes and their order follow the kernel's arraymap.c.

use crate::current;
use crate::def::{BPF_EXIST, BPF_F_LOCK, BPF_NOEXIST};
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
