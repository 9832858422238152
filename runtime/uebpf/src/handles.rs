//! Map handles: the 64-bit value a program holds for a map (what `lddw rX, map` loads and what it
//! passes to map helpers). A handle is a tag and a slot number in a process-wide table, so a helper
//! can check any value a program passes (a program is not verified: it may pass anything) with a
//! comparison and one atomic load, and never dereference a forged pointer.
//!
//! Ring buffers are also listed separately: `bpf_ringbuf_submit(record)` gets only the record
//! pointer, and the ring that owns it is found by address.

use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use uebpf_maps::{Map, RingBuf};

use crate::error::{Error, ErrorKind};

const CAPACITY: usize = 4096;
const RING_CAPACITY: usize = 256;
/// High 32 bits of every handle ("uebf"); the low 32 bits are the slot.
const TAG: u64 = 0x7565_6266 << 32;

static SLOTS: [AtomicPtr<Map>; CAPACITY] = [const { AtomicPtr::new(std::ptr::null_mut()) }; CAPACITY];
static RINGS: [AtomicPtr<Map>; RING_CAPACITY] = [const { AtomicPtr::new(std::ptr::null_mut()) }; RING_CAPACITY];
/// Ring slots in use are below this (scans stop there).
static RING_HIGH: AtomicUsize = AtomicUsize::new(0);
/// Serialises slot allocation (lookups are lock-free).
static ALLOCATION: Mutex<()> = Mutex::new(());

/// A map's registration; the slot is freed when this is dropped.
pub(crate) struct Registration {
    slot: usize,
    ring_slot: Option<usize>,
    /// Keeps the map alive while its slot points at it.
    _map: Arc<Map>,
}

fn claim(table: &[AtomicPtr<Map>], map: *mut Map) -> Option<usize> {
    let slot = table.iter().position(|s| s.load(Ordering::Relaxed).is_null())?;
    table[slot].store(map, Ordering::Release);
    Some(slot)
}

pub(crate) fn register(map: Arc<Map>) -> Result<Registration, Error> {
    let _guard = ALLOCATION.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let pointer = Arc::as_ptr(&map) as *mut Map;
    let full = |what: &str, capacity: usize| {
        Error::new(ErrorKind::TableFull, format!("this process has {capacity} {what} registered, the most uebpf supports"))
    };
    let slot = claim(&SLOTS, pointer).ok_or_else(|| full("maps", CAPACITY))?;
    let ring_slot = match map.ringbuf() {
        None => None,
        Some(_) => match claim(&RINGS, pointer) {
            Some(ring) => {
                RING_HIGH.fetch_max(ring + 1, Ordering::AcqRel);
                Some(ring)
            }
            None => {
                SLOTS[slot].store(std::ptr::null_mut(), Ordering::Release);
                return Err(full("ring buffers", RING_CAPACITY));
            }
        },
    };
    Ok(Registration { slot, ring_slot, _map: map })
}

impl Registration {
    pub fn handle(&self) -> u64 {
        TAG | self.slot as u64
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let _guard = ALLOCATION.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        SLOTS[self.slot].store(std::ptr::null_mut(), Ordering::Release);
        if let Some(ring) = self.ring_slot {
            RINGS[ring].store(std::ptr::null_mut(), Ordering::Release);
        }
    }
}

/// The map behind `handle`, or None for anything that is not a live handle.
///
/// The reference is valid while the registration lives: programs hold their instance, which
/// holds the registrations, so it outlives every helper call a program makes.
pub(crate) fn map_of(handle: u64) -> Option<&'static Map> {
    if handle & !0xffff_ffff != TAG {
        return None;
    }
    let pointer = SLOTS.get((handle & 0xffff_ffff) as usize)?.load(Ordering::Acquire);
    // SAFETY: non-null slots point at maps their registration keeps alive (see above).
    unsafe { pointer.as_ref() }
}

/// The ring slot `ring_of` found last: the ring a submit comes to is nearly always the one the
/// last submit came to, so it is asked first (a hint only: any slot would do, as for the scan).
static LAST_RING: AtomicUsize = AtomicUsize::new(0);

/// The ring buffer whose mapping holds `record` (a pointer from bpf_ringbuf_reserve).
#[inline]
pub(crate) fn ring_of(record: *const u8) -> Option<&'static RingBuf> {
    let owner = |slot: &AtomicPtr<Map>| {
        // SAFETY: as in map_of.
        let map = unsafe { slot.load(Ordering::Acquire).as_ref() }?;
        map.ringbuf().filter(|ring| ring.owns(record))
    };
    let last = LAST_RING.load(Ordering::Relaxed);
    owner(&RINGS[last % RING_CAPACITY]).or_else(|| {
        let high = RING_HIGH.load(Ordering::Acquire).min(RING_CAPACITY);
        let (slot, ring) = RINGS[..high].iter().enumerate().find_map(|(slot, ring)| Some((slot, owner(ring)?)))?;
        LAST_RING.store(slot, Ordering::Relaxed);
        Some(ring)
    })
}
