//! Stack trace maps (the kernel's kernel/bpf/stackmap.c): `bpf_get_stackid` stores a stack (up
//! to value_size / 8 addresses) in the bucket its hash names and returns that bucket's index, the
//! stack id; a bucket holding another stack answers EEXIST unless BPF_F_REUSE_STACKID replaces
//! it. `max_entries` is rounded up to a power of two buckets, as the kernel's. From bpf(2): lookup
//! copies a stack out (zeros after it), delete empties a bucket, get-next-key walks the ids in use.
//! Ids are not the kernel's (its hash is jhash2, seeded per map); a stack's id is stable within
//! a map, which is what tools rely on.

use std::sync::atomic::{AtomicU32, Ordering};

use crate::lock::SpinLock;
use crate::Errno;

pub const BPF_F_SKIP_FIELD_MASK: u64 = 0xff;
pub const BPF_F_USER_STACK: u64 = 1 << 8;
pub const BPF_F_FAST_STACK_CMP: u64 = 1 << 9;
pub const BPF_F_REUSE_STACKID: u64 = 1 << 10;

/// One bucket: its lock, the stack's length (0: empty) and hash, then value_size / 8 addresses.
#[repr(C)]
pub struct StackBucket {
    pub lock: SpinLock,
    pub nr: AtomicU32,
    pub hash: AtomicU32,
    pub _pad: u32,
}

pub const BUCKET_HEADER: usize = std::mem::size_of::<StackBucket>();

pub struct StackView {
    pub(crate) buckets: *mut u8,
    pub(crate) n_buckets: u32,
    /// Bytes from one bucket to the next: the header and value_size.
    pub(crate) stride: usize,
    /// Addresses a bucket holds (value_size / 8).
    pub(crate) depth: usize,
}

fn hash_ips(ips: &[u64]) -> u32 {
    let mut h = 0x9e37_79b9_7f4a_7c15u64;
    for &ip in ips {
        h = (h ^ ip).wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
    }
    (h ^ (h >> 32)) as u32
}

impl StackView {
    fn bucket(&self, id: u32) -> Option<(&StackBucket, *mut u64)> {
        (id < self.n_buckets).then(|| {
            // SAFETY: id < n_buckets: inside the map's storage, checked when the view was made.
            let at = unsafe { self.buckets.add(id as usize * self.stride) };
            (unsafe { &*(at as *const StackBucket) }, at.wrapping_add(BUCKET_HEADER) as *mut u64)
        })
    }

    /// `bpf_get_stackid`'s store of `ips` (already skipped and cut to `depth`): the stack id.
    pub fn store(&self, ips: &[u64], flags: u64) -> Result<u32, Errno> {
        let ips = &ips[..ips.len().min(self.depth)];
        if ips.is_empty() {
            return Err(libc::EFAULT);
        }
        let hash = hash_ips(ips);
        let id = hash & (self.n_buckets - 1);
        let (bucket, stored) = self.bucket(id).expect("a masked id is a bucket");
        let _guard = bucket.lock.lock();
        let nr = bucket.nr.load(Ordering::Relaxed) as usize;
        if nr != 0 && bucket.hash.load(Ordering::Relaxed) == hash {
            // SAFETY: the bucket holds nr <= depth addresses, read under its lock.
            let same = flags & BPF_F_FAST_STACK_CMP != 0 || unsafe { std::slice::from_raw_parts(stored, nr) } == ips;
            if same {
                return Ok(id);
            }
        }
        if nr != 0 && flags & BPF_F_REUSE_STACKID == 0 {
            return Err(libc::EEXIST);
        }
        // SAFETY: depth addresses fit the bucket; written under its lock.
        unsafe { std::ptr::copy_nonoverlapping(ips.as_ptr(), stored, ips.len()) };
        bucket.hash.store(hash, Ordering::Relaxed);
        bucket.nr.store(ips.len() as u32, Ordering::Release);
        Ok(id)
    }

    /// Syscall lookup: the stack at `id`, zero-padded to `out`'s value_size bytes.
    pub fn lookup(&self, id: u32, out: &mut [u8]) -> Result<(), Errno> {
        let (bucket, stored) = self.bucket(id).ok_or(libc::ENOENT)?;
        let _guard = bucket.lock.lock();
        let nr = bucket.nr.load(Ordering::Relaxed) as usize;
        if nr == 0 {
            return Err(libc::ENOENT);
        }
        out.fill(0);
        // SAFETY: nr <= depth addresses, read under the bucket's lock; out holds depth * 8 bytes.
        unsafe { std::ptr::copy_nonoverlapping(stored.cast::<u8>(), out.as_mut_ptr(), nr * 8) };
        Ok(())
    }

    /// Syscall delete: empties bucket `id` (ENOENT if it was empty).
    pub fn delete(&self, id: u32) -> Result<(), Errno> {
        let (bucket, _) = self.bucket(id).ok_or(libc::ENOENT)?;
        let _guard = bucket.lock.lock();
        match bucket.nr.swap(0, Ordering::AcqRel) {
            0 => Err(libc::ENOENT),
            _ => Ok(()),
        }
    }

    /// The kernel's stack_map_get_next_key: the first id in use after `id` (from 0 for none, or
    /// for an id past the end).
    pub fn next_id(&self, id: Option<u32>) -> Result<u32, Errno> {
        let from = match id {
            Some(id) if id < self.n_buckets => id + 1,
            _ => 0,
        };
        (from..self.n_buckets)
            .find(|&b| self.bucket(b).is_some_and(|(bucket, _)| bucket.nr.load(Ordering::Acquire) != 0))
            .ok_or(libc::ENOENT)
    }
}
