//! Bloom filter maps (the kernel's kernel/bpf/bloom_filter.c): push sets a value's bits, peek
//! answers 0 when every bit of a value is set (perhaps pushed) and ENOENT when one is not (never
//! pushed). The bit array is sized as the kernel's (max_entries x hash functions x 7 / 5 bits,
//! rounded up to a power of two, at least 64), and BPF_F_ZERO_SEED gives a fixed seed. The hash
//! is not the kernel's jhash, so which values are false positives differs; that a pushed value is
//! always found does not.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::def::{MapDef, BPF_ANY};
use crate::Errno;

/// Seed and hash count, before the bits.
#[repr(C)]
pub struct BloomControl {
    pub seed: AtomicU32,
    pub hashes: AtomicU32,
}

pub(crate) struct BloomView {
    pub control: *const BloomControl,
    pub words: *const AtomicU64,
    pub mask: u64,
    pub value_size: usize,
}

impl BloomView {
    pub(crate) fn new(control: *const BloomControl, words: *const AtomicU64, def: &MapDef) -> BloomView {
        BloomView { control, words, mask: def.bloom_bit_mask(), value_size: def.value_size as usize }
    }

    /// A new filter: its hash count and seed (random unless BPF_F_ZERO_SEED).
    pub(crate) fn initialise(&self, def: &MapDef) {
        let control = self.control();
        control.hashes.store(def.bloom_hashes() as u32, Ordering::Relaxed);
        if def.map_flags & crate::def::BPF_F_ZERO_SEED == 0 {
            let mut seed = 0u32;
            // SAFETY: getrandom into a local; a failure leaves seed 0 (a valid seed).
            unsafe { libc::getrandom((&mut seed as *mut u32).cast(), 4, 0) };
            control.seed.store(seed, Ordering::Relaxed);
        }
    }

    fn control(&self) -> &BloomControl {
        // SAFETY: inside the region, checked when the view was made.
        unsafe { &*self.control }
    }

    /// The bit positions of `value`: double hashing (h1 + i h2) over a seeded FNV-1a of its
    /// bytes, each half finished with splitmix64's mixer so that every bit depends on every byte.
    fn bits<'a>(&'a self, value: &'a [u8]) -> impl Iterator<Item = u64> + 'a {
        fn mix(mut z: u64) -> u64 {
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }
        let control = self.control();
        let mut h = 0xcbf2_9ce4_8422_2325u64 ^ u64::from(control.seed.load(Ordering::Relaxed));
        for &b in value {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        let (h1, h2) = (mix(h), mix(h ^ 0x9e37_79b9_7f4a_7c15) | 1);
        (0..u64::from(control.hashes.load(Ordering::Relaxed).min(15))).map(move |i| h1.wrapping_add(i.wrapping_mul(h2)) & self.mask)
    }

    fn word(&self, bit: u64) -> &AtomicU64 {
        // SAFETY: bit <= mask, inside the bit array checked when the view was made.
        unsafe { &*self.words.add((bit / 64) as usize) }
    }

    /// `map_push_elem`: flags BPF_ANY only, as the kernel's.
    ///
    /// # Safety
    /// `value` readable for value_size bytes.
    pub unsafe fn push(&self, value: *const u8, flags: u64) -> Result<(), Errno> {
        if flags != BPF_ANY {
            return Err(libc::EINVAL);
        }
        for bit in self.bits(std::slice::from_raw_parts(value, self.value_size)) {
            self.word(bit).fetch_or(1 << (bit % 64), Ordering::Relaxed);
        }
        Ok(())
    }

    /// `map_peek_elem`: 0 if every bit of `value` is set, ENOENT otherwise.
    ///
    /// # Safety
    /// `value` readable for value_size bytes.
    pub unsafe fn peek(&self, value: *const u8) -> Result<(), Errno> {
        let all = self
            .bits(std::slice::from_raw_parts(value, self.value_size))
            .all(|bit| self.word(bit).load(Ordering::Relaxed) & 1 << (bit % 64) != 0);
        if all {
            Ok(())
        } else {
            Err(libc::ENOENT)
        }
    }
}
