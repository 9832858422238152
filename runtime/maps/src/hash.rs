//! Hash and per-CPU hash maps, preallocated in the region and safe for concurrent use by several
//! processes.
//!
//! Buckets are chains of entries linked by index; each bucket has its own spin lock, taken by
//! updates, deletes and the syscall view. A program's lookup takes no lock, as the kernel's does
//! under RCU (`htab_map_lookup_elem`, kernel/bpf/hashtab.c): chains end in a marker naming their
//! bucket (`NULLS`, the kernel's hlist_nulls), so a reader whose entry was deleted and reused in
//! another bucket meanwhile ends the walk at a foreign marker and walks again; an insertion
//! rewrites a reused entry's key between odd and even values of its `seq`, so a reader never
//! takes a half-written key for its own. After a few such restarts the reader takes the lock
//! (progress however busy the writers). Free entries form a lock-free stack whose head carries a
//! generation counter (no ABA). `count` reserves a slot before an insertion takes an entry, so at
//! most max_entries keys exist.
//!
//! Differences from the kernel, all invisible to the error codes: values are updated in place
//! under the bucket lock (the kernel swaps in a new element, so a program reading a value while
//! another CPU updates it may here see a half-copied value); a value pointer a program got from a
//! lookup may be reused for another key after a delete (as with the kernel's preallocated maps).
//! Iteration order differs (the kernel's jhash seed is random anyway).
//!
//! LRU: an LRU hash that is full makes room for a new key by evicting one, where a plain hash
//! answers E2BIG. The kernel keeps approximate LRU lists (a reference bit a lookup sets, lists
//! rotated in batches); here the approximation is the CLOCK algorithm, over the entries in index
//! order: a program's lookup sets the entry's ENTRY_REFERENCED bit (if not set: no write on the
//! hot path once set), and an insertion into a full map sweeps from `HashControl::clock`,
//! clearing reference bits, and evicts the first live entry it finds unreferenced (after two
//! turns, any live one). The victim's bucket lock is only tried (the inserter holds its own
//! bucket's: waiting could deadlock two inserters), and a victim whose lock is busy is passed
//! over. Which key goes is not the kernel's choice (neither is it deterministic there); that one
//! goes, and that no insertion fails while the map holds a key, is. An update of a key already
//! there stays in place (the kernel's takes a new element, which can evict another key).

use std::sync::atomic::{fence, Ordering};

use crate::current;
use crate::def::{BPF_EXIST, BPF_F_LOCK, BPF_NOEXIST};
use crate::layout::{Bucket, EntryHeader, HashControl, ENTRY_LIVE, ENTRY_REFERENCED, NULLS};
use crate::Errno;

/// Lock-free walks of one lookup before it takes the bucket lock instead: each restart means an
/// entry on the walk was reused meanwhile, which takes a delete and an insertion on another CPU.
const WALKS_BEFORE_LOCKING: u32 = 3;

/// What a lock-free walk of a chain saw.
enum Walk {
    Found(u32),
    Absent,
    /// The walk left the bucket (an entry on it was reused meanwhile): walk again.
    Restart,
}

/// A hash map's storage as one process sees it.
pub struct HashView {
    pub(crate) control: *const HashControl,
    pub(crate) buckets: *const Bucket,
    pub(crate) n_buckets: u32,
    pub(crate) entries: *mut u8,
    pub(crate) entry_stride: usize,
    pub(crate) values: *mut u8,
    pub(crate) value_size: usize,
    pub(crate) stride: usize,
    pub(crate) cpus: u32,
    pub(crate) key_size: usize,
    pub(crate) max_entries: u32,
    /// An LRU hash (evicts when full).
    pub(crate) lru: bool,
}

/// Where a value to store comes from.
#[derive(Clone, Copy)]
enum Source {
    /// One value for the calling CPU's slot (program helpers); other slots of a new per-CPU
    /// element are zeroed, as the kernel does.
    ThisCpu(*const u8),
    /// cpus x stride bytes, one value per CPU (the syscall view).
    AllCpus(*const u8),
}

/// 64-bit multiply-xorshift over the key's words, folded to 32 bits.
///
/// # Safety
/// `key` readable for `len` bytes.
unsafe fn hash_key(key: *const u8, len: usize) -> u32 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut h = len as u64 ^ K;
    let mut offset = 0;
    while offset + 8 <= len {
        let word = (key.add(offset) as *const u64).read_unaligned();
        h = (h ^ word).wrapping_mul(K).rotate_left(29);
        offset += 8;
    }
    if offset < len {
        h = (h ^ tail_word(key.add(offset), len - offset)).wrapping_mul(K).rotate_left(29);
    }
    h ^= h >> 31;
    (h ^ (h >> 32)) as u32
}

/// The `len` (1..=7) bytes at `bytes` as a little-endian word, zero-extended: at most three loads.
/// Not a copy into a zeroed [u8; 8]: with a length known only at run time that is a call to
/// memcpy, which was a fifth of a 4-byte-key lookup.
///
/// # Safety
/// `bytes` readable for `len` bytes.
#[inline(always)]
unsafe fn tail_word(bytes: *const u8, len: usize) -> u64 {
    let (mut word, mut at) = (0u64, 0usize);
    if len & 4 != 0 {
        word = u64::from((bytes as *const u32).read_unaligned());
        at = 4;
    }
    if len & 2 != 0 {
        word |= u64::from((bytes.add(at) as *const u16).read_unaligned()) << (8 * at);
        at += 2;
    }
    if len & 1 != 0 {
        word |= u64::from(*bytes.add(at)) << (8 * at);
    }
    word
}

/// Key equality; the usual 4- and 8-byte keys as one comparison, not a call to bcmp.
///
/// # Safety
/// Both readable for `len` bytes.
#[inline(always)]
unsafe fn keys_equal(a: *const u8, b: *const u8, len: usize) -> bool {
    match len {
        4 => (a as *const u32).read_unaligned() == (b as *const u32).read_unaligned(),
        8 => (a as *const u64).read_unaligned() == (b as *const u64).read_unaligned(),
        _ => std::slice::from_raw_parts(a, len) == std::slice::from_raw_parts(b, len),
    }
}

impl HashView {
    fn control(&self) -> &HashControl {
        // SAFETY: checked to lie in the region when the view was built.
        unsafe { &*self.control }
    }

    fn bucket_index(&self, hash: u32) -> u32 {
        hash & (self.n_buckets - 1)
    }

    fn bucket(&self, hash: u32) -> &Bucket {
        // SAFETY: index masked below n_buckets (a power of two).
        unsafe { &*self.buckets.add(self.bucket_index(hash) as usize) }
    }

    /// Entry `index` (0-based).
    fn entry(&self, index: u32) -> &EntryHeader {
        // SAFETY: callers pass indexes below max_entries (links are range-checked on read).
        unsafe { &*(self.entries.add(index as usize * self.entry_stride) as *const EntryHeader) }
    }

    fn key_of(&self, index: u32) -> *mut u8 {
        self.entries.wrapping_add(index as usize * self.entry_stride + std::mem::size_of::<EntryHeader>())
    }

    fn value_of(&self, index: u32, cpu: u32) -> *mut u8 {
        self.values.wrapping_add((index as usize * self.cpus as usize + cpu as usize) * self.stride)
    }

    /// Decodes a link (index + 1; 0 or a nulls marker = end). A link out of range (a corrupt
    /// region) ends the chain.
    fn link(&self, raw: u32) -> Option<u32> {
        (raw != 0 && raw <= self.max_entries).then(|| raw - 1)
    }

    /// Walks `bucket`'s chain (caller holds its lock): (previous entry, entry) holding `key`.
    ///
    /// # Safety
    /// `key` readable for key_size bytes.
    unsafe fn find(&self, bucket: &Bucket, hash: u32, key: *const u8) -> Option<(Option<u32>, u32)> {
        let mut previous = None;
        let mut current = self.link(bucket.head.load(Ordering::Relaxed));
        let mut steps = 0;
        while let Some(index) = current {
            let entry = self.entry(index);
            if entry.hash.load(Ordering::Relaxed) == hash && keys_equal(self.key_of(index), key, self.key_size) {
                return Some((previous, index));
            }
            steps += 1;
            if steps > self.max_entries {
                return None; // a cycle: only a corrupted region can have one
            }
            previous = Some(index);
            current = self.link(entry.next.load(Ordering::Relaxed));
        }
        None
    }

    /// Walks `bucket`'s chain without its lock (see the module's comment for why that is sound).
    /// The key bytes are read while a writer may be rewriting them: `seq` tells such a read apart.
    ///
    /// # Safety
    /// `key` readable for key_size bytes.
    unsafe fn walk_unlocked(&self, bucket: &Bucket, bucket_index: u32, hash: u32, key: *const u8) -> Walk {
        let mut raw = bucket.head.load(Ordering::Acquire);
        // A chain in one bucket holds at most max_entries entries: a longer walk left it.
        for _ in 0..=self.max_entries {
            let Some(index) = self.link(raw) else {
                return if raw == NULLS | bucket_index { Walk::Absent } else { Walk::Restart };
            };
            let entry = self.entry(index);
            let seq = entry.seq.load(Ordering::Acquire);
            let matches = entry.hash.load(Ordering::Relaxed) == hash && keys_equal(self.key_of(index), key, self.key_size);
            raw = entry.next.load(Ordering::Acquire);
            fence(Ordering::Acquire);
            if matches && seq & 1 == 0 && entry.seq.load(Ordering::Relaxed) == seq {
                return Walk::Found(index);
            }
        }
        Walk::Restart
    }

    fn pop_free(&self) -> Option<u32> {
        let head = &self.control().free_head;
        let mut current = head.load(Ordering::Acquire);
        loop {
            let index = self.link(current as u32)?;
            let next = self.entry(index).next.load(Ordering::Relaxed);
            let generation = (current >> 32).wrapping_add(1);
            match head.compare_exchange_weak(current, generation << 32 | u64::from(next), Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Some(index),
                Err(seen) => current = seen,
            }
        }
    }

    fn push_free(&self, index: u32) {
        let head = &self.control().free_head;
        let mut current = head.load(Ordering::Relaxed);
        loop {
            self.entry(index).next.store(current as u32, Ordering::Relaxed);
            let generation = (current >> 32).wrapping_add(1);
            match head.compare_exchange_weak(current, generation << 32 | u64::from(index + 1), Ordering::Release, Ordering::Relaxed) {
                Ok(_) => return,
                Err(seen) => current = seen,
            }
        }
    }

    /// Ends every bucket's empty chain with its marker and links every entry into the free stack
    /// (a new map).
    pub fn initialise(&self) {
        for b in 0..self.n_buckets {
            // SAFETY: b < n_buckets.
            unsafe { &*self.buckets.add(b as usize) }.head.store(NULLS | b, Ordering::Relaxed);
        }
        for index in (0..self.max_entries).rev() {
            self.push_free(index);
        }
    }

    /// Program view: the value (the calling CPU's slot for per-CPU maps), or null.
    ///
    /// # Safety
    /// `key` readable for key_size bytes.
    pub unsafe fn lookup(&self, key: *const u8) -> *mut u8 {
        let hash = hash_key(key, self.key_size);
        let (bucket_index, bucket) = (self.bucket_index(hash), self.bucket(hash));
        let walked = (0..WALKS_BEFORE_LOCKING).find_map(|_| match self.walk_unlocked(bucket, bucket_index, hash, key) {
            Walk::Found(index) => Some(Some(index)),
            Walk::Absent => Some(None),
            Walk::Restart => None,
        });
        let found = walked.unwrap_or_else(|| {
            let _guard = bucket.lock.lock();
            self.find(bucket, hash, key).map(|(_, index)| index)
        });
        match found {
            Some(index) => {
                if self.lru {
                    let state = &self.entry(index).state;
                    if state.load(Ordering::Relaxed) & ENTRY_REFERENCED == 0 {
                        state.fetch_or(ENTRY_REFERENCED, Ordering::Relaxed);
                    }
                }
                self.value_of(index, if self.cpus > 1 { current::cpu(self.cpus) } else { 0 })
            }
            None => std::ptr::null_mut(),
        }
    }

    /// Syscall view: copies every CPU's value out.
    ///
    /// # Safety
    /// `key` readable for key_size; `value` writable for value_size (cpus x stride if per-CPU).
    pub unsafe fn lookup_all(&self, key: *const u8, value: *mut u8) -> Result<(), Errno> {
        let hash = hash_key(key, self.key_size);
        let bucket = self.bucket(hash);
        let _guard = bucket.lock.lock();
        let (_, index) = self.find(bucket, hash, key).ok_or(libc::ENOENT)?;
        for cpu in 0..self.cpus {
            let out = value.add(cpu as usize * self.stride);
            std::ptr::copy(self.value_of(index, cpu), out, self.value_size);
            if self.cpus > 1 {
                std::ptr::write_bytes(out.add(self.value_size), 0, self.stride - self.value_size);
            }
        }
        Ok(())
    }

    /// # Safety
    /// The source pointer is readable for what `source` says.
    unsafe fn store(&self, index: u32, source: Source, new_element: bool) {
        match source {
            Source::AllCpus(value) => {
                for cpu in 0..self.cpus {
                    std::ptr::copy(value.add(cpu as usize * self.stride), self.value_of(index, cpu), self.value_size);
                }
            }
            Source::ThisCpu(value) => {
                let this = if self.cpus > 1 { current::cpu(self.cpus) } else { 0 };
                for cpu in 0..self.cpus {
                    if cpu == this {
                        std::ptr::copy(value, self.value_of(index, cpu), self.value_size);
                    } else if new_element {
                        std::ptr::write_bytes(self.value_of(index, cpu), 0, self.value_size);
                    }
                }
            }
        }
    }

    /// As `htab_map_update_elem` with a preallocated map.
    ///
    /// # Safety
    /// `key` readable for key_size; the source as `Source` says.
    unsafe fn update(&self, key: *const u8, source: Source, flags: u64) -> Result<(), Errno> {
        if flags & !BPF_F_LOCK > BPF_EXIST || flags & BPF_F_LOCK != 0 {
            // BPF_F_LOCK needs a bpf_spin_lock in the value, which no uebpf map has.
            return Err(libc::EINVAL);
        }
        let hash = hash_key(key, self.key_size);
        let bucket = self.bucket(hash);
        let _guard = bucket.lock.lock();
        match self.find(bucket, hash, key) {
            Some(_) if flags == BPF_NOEXIST => Err(libc::EEXIST),
            Some((_, index)) => {
                self.store(index, source, false);
                Ok(())
            }
            None if flags == BPF_EXIST => Err(libc::ENOENT),
            None => {
                let Some(index) = self.take_entry(bucket) else { return Err(libc::E2BIG) };
                let entry = self.entry(index);
                // The seqlock's write side: a lock-free reader may still be comparing this entry's
                // old key (it followed it before its delete). The value too is written before the
                // count is even again: a reader that finds the new key finds its value whole.
                let seq = entry.seq.load(Ordering::Relaxed);
                entry.seq.store(seq.wrapping_add(1), Ordering::Relaxed);
                fence(Ordering::Release);
                std::ptr::copy(key, self.key_of(index), self.key_size);
                entry.hash.store(hash, Ordering::Relaxed);
                self.store(index, source, true);
                entry.seq.store(seq.wrapping_add(2), Ordering::Release);
                entry.state.store(ENTRY_LIVE, Ordering::Relaxed);
                entry.next.store(bucket.head.load(Ordering::Relaxed), Ordering::Relaxed);
                bucket.head.store(index + 1, Ordering::Release);
                Ok(())
            }
        }
    }

    /// A free entry for a new key, counted; in a full LRU map, an evicted one ("LRU" above).
    /// `held` is the bucket whose lock the caller holds.
    fn take_entry(&self, held: &Bucket) -> Option<u32> {
        let count = &self.control().count;
        if count.fetch_add(1, Ordering::AcqRel) < self.max_entries {
            // count <= max_entries guarantees a free entry (deletes push before they uncount).
            if let Some(index) = self.pop_free() {
                return Some(index);
            }
        }
        count.fetch_sub(1, Ordering::AcqRel);
        if self.lru {
            self.evict(held)
        } else {
            None
        }
    }

    /// Unlinks a live entry of a full LRU map for reuse (its count moves to the new key): the
    /// first unreferenced one from the clock hand, clearing reference bits on the way; after two
    /// turns, the first one whose bucket lock is free. None if no entry could be taken (every
    /// candidate's bucket busy, or none live: then the map is not full any more).
    fn evict(&self, held: &Bucket) -> Option<u32> {
        let clock = &self.control().clock;
        for step in 0..3 * self.max_entries {
            let index = clock.fetch_add(1, Ordering::Relaxed) % self.max_entries;
            let entry = self.entry(index);
            let state = entry.state.load(Ordering::Relaxed);
            if state & ENTRY_LIVE == 0 {
                continue;
            }
            if state & ENTRY_REFERENCED != 0 && step < 2 * self.max_entries {
                entry.state.fetch_and(!ENTRY_REFERENCED, Ordering::Relaxed);
                continue;
            }
            let bucket = self.bucket(entry.hash.load(Ordering::Relaxed));
            let same = std::ptr::eq(bucket, held);
            let _guard = if same {
                None
            } else {
                match bucket.lock.try_lock() {
                    Some(guard) => Some(guard),
                    None => continue,
                }
            };
            if self.unlink(bucket, index) {
                return Some(index);
            }
        }
        None
    }

    /// Removes entry `index` from `bucket`'s chain (caller holds its lock), if it is there.
    fn unlink(&self, bucket: &Bucket, index: u32) -> bool {
        let mut previous: Option<u32> = None;
        let mut current = self.link(bucket.head.load(Ordering::Relaxed));
        for _ in 0..=self.max_entries {
            let Some(at) = current else { return false };
            if at == index {
                self.unlink_after(bucket, previous, index);
                return true;
            }
            previous = Some(at);
            current = self.link(self.entry(at).next.load(Ordering::Relaxed));
        }
        false
    }

    /// Removes entry `index`, which follows `previous` (or heads the chain), from `bucket`'s chain
    /// (caller holds its lock).
    fn unlink_after(&self, bucket: &Bucket, previous: Option<u32>, index: u32) {
        let next = self.entry(index).next.load(Ordering::Relaxed);
        match previous {
            Some(p) => self.entry(p).next.store(next, Ordering::Release),
            None => bucket.head.store(next, Ordering::Release),
        }
        self.entry(index).state.store(0, Ordering::Relaxed);
    }

    /// Program view of update.
    ///
    /// # Safety
    /// `key` readable for key_size, `value` for value_size.
    pub unsafe fn update_this_cpu(&self, key: *const u8, value: *const u8, flags: u64) -> Result<(), Errno> {
        self.update(key, Source::ThisCpu(value), flags)
    }

    /// Syscall view of update.
    ///
    /// # Safety
    /// `key` readable for key_size, `value` for value_size (cpus x stride if per-CPU).
    pub unsafe fn update_all(&self, key: *const u8, value: *const u8, flags: u64) -> Result<(), Errno> {
        self.update(key, Source::AllCpus(value), flags)
    }

    /// # Safety
    /// `key` readable for key_size bytes.
    pub unsafe fn delete(&self, key: *const u8) -> Result<(), Errno> {
        let hash = hash_key(key, self.key_size);
        let bucket = self.bucket(hash);
        let _guard = bucket.lock.lock();
        let (previous, index) = self.find(bucket, hash, key).ok_or(libc::ENOENT)?;
        self.unlink_after(bucket, previous, index);
        self.push_free(index);
        self.control().count.fetch_sub(1, Ordering::AcqRel);
        Ok(())
    }

    /// Buckets, the unit of the batch commands.
    pub fn n_buckets(&self) -> u32 {
        self.n_buckets
    }

    /// One bucket of `BPF_MAP_LOOKUP_BATCH` (and `_AND_DELETE_`): its keys and values (every
    /// CPU's, in the syscall view's layout) appended to `keys` and `values`, all or none, under
    /// the bucket's lock; deleted if `delete`. Err(n) if its n entries exceed `room`.
    pub fn take_bucket(&self, b: u32, room: usize, delete: bool, keys: &mut Vec<u8>, values: &mut Vec<u8>) -> Result<usize, usize> {
        // SAFETY: the caller's b is below n_buckets (checked here).
        let Some(bucket) = (b < self.n_buckets).then(|| unsafe { &*self.buckets.add(b as usize) }) else { return Ok(0) };
        let _guard = bucket.lock.lock();
        let mut chain = Vec::new();
        let mut current = self.link(bucket.head.load(Ordering::Relaxed));
        while let Some(index) = current {
            if chain.len() > self.max_entries as usize {
                break; // a cycle: only a corrupted region can have one
            }
            chain.push(index);
            current = self.link(self.entry(index).next.load(Ordering::Relaxed));
        }
        if chain.len() > room {
            return Err(chain.len());
        }
        for &index in &chain {
            // SAFETY: the entry's key and values are inside the map, read under the bucket lock.
            unsafe {
                keys.extend_from_slice(std::slice::from_raw_parts(self.key_of(index), self.key_size));
                for cpu in 0..self.cpus {
                    values.extend_from_slice(std::slice::from_raw_parts(self.value_of(index, cpu), self.value_size));
                    if self.cpus > 1 {
                        values.resize(values.len() + self.stride - self.value_size, 0);
                    }
                }
            }
        }
        if delete {
            for &index in &chain {
                self.unlink_after(bucket, None, index); // each is the head by then
                self.push_free(index);
                self.control().count.fetch_sub(1, Ordering::AcqRel);
            }
        }
        Ok(chain.len())
    }

    /// First key of the chain of bucket `from` or a later one.
    ///
    /// # Safety
    /// `next` writable for key_size bytes.
    unsafe fn first_from(&self, from: u32, next: *mut u8) -> Result<(), Errno> {
        for b in from..self.n_buckets {
            let bucket = &*self.buckets.add(b as usize);
            let _guard = bucket.lock.lock();
            if let Some(index) = self.link(bucket.head.load(Ordering::Relaxed)) {
                std::ptr::copy(self.key_of(index), next, self.key_size);
                return Ok(());
            }
        }
        Err(libc::ENOENT)
    }

    /// As `htab_map_get_next_key`: no key, or a key that is not there, gives the first key.
    ///
    /// # Safety
    /// `key` null or readable for key_size; `next` writable for key_size.
    pub unsafe fn next_key(&self, key: *const u8, next: *mut u8) -> Result<(), Errno> {
        if key.is_null() {
            return self.first_from(0, next);
        }
        let hash = hash_key(key, self.key_size);
        let bucket_index = self.bucket_index(hash);
        let bucket = self.bucket(hash);
        {
            let _guard = bucket.lock.lock();
            match self.find(bucket, hash, key) {
                None => {
                    drop(_guard);
                    return self.first_from(0, next);
                }
                Some((_, index)) => {
                    if let Some(following) = self.link(self.entry(index).next.load(Ordering::Relaxed)) {
                        std::ptr::copy(self.key_of(following), next, self.key_size);
                        return Ok(());
                    }
                }
            }
        }
        self.first_from(bucket_index + 1, next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tail_word_is_the_bytes_zero_extended() {
        let bytes = [0x11u8, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88];
        for len in 1..8 {
            let mut expected = [0u8; 8];
            expected[..len].copy_from_slice(&bytes[..len]);
            assert_eq!(unsafe { tail_word(bytes.as_ptr(), len) }, u64::from_le_bytes(expected), "len {len}");
        }
    }

    #[test]
    fn keys_of_every_size_compare_by_value() {
        for len in 1..24 {
            let a: Vec<u8> = (0..len as u8).collect();
            let mut b = a.clone();
            assert!(unsafe { keys_equal(a.as_ptr(), b.as_ptr(), len) });
            b[len - 1] ^= 1;
            assert!(!unsafe { keys_equal(a.as_ptr(), b.as_ptr(), len) }, "len {len}");
        }
    }
}
