//! Map semantics (the kernel's error codes), region lifecycle, and the ring buffer's record layout.

use std::os::unix::fs::PermissionsExt;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use uebpf_maps::def::*;
use uebpf_maps::layout::Wakeup;
use uebpf_maps::layout::{RINGBUF_BUSY_BIT, RINGBUF_DISCARD_BIT};
use uebpf_maps::ringbuf::*;
use uebpf_maps::test_support::until_in_shared_futex_wait;
use uebpf_maps::wakeup::{Armed, CONSUMER_TIMER, FOLLOW_TIMER};
use uebpf_maps::{region_path, Consumable, ErrorKind, MapDef, Region, RegionSpec};

fn def(map_type: u32, key_size: u32, value_size: u32, max_entries: u32) -> MapDef {
    MapDef { map_type, key_size, value_size, max_entries, ..Default::default() }
}

fn anonymous() -> Region {
    Region::create_anonymous(RegionSpec::with_arena(4 << 20)).unwrap()
}

fn unique_name(test: &str) -> String {
    format!("test-{test}-{}", std::process::id())
}

/// How long the waiters below may sleep: a wait that lasts this long was not woken.
const WAIT_LIMIT: Duration = Duration::from_secs(10);

/// Runs `wait` (a futex wait of at most WAIT_LIMIT) on a thread of its own and returns once
/// that thread sleeps in it, so that what the caller does next happens to a blocked waiter. The
/// thread gives back what `wait` returned and how long it slept.
fn blocked_waiter<T: Send + 'static>(wait: impl FnOnce() -> T + Send + 'static) -> JoinHandle<(T, Duration)> {
    let (tid_sender, tid) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        // SAFETY: gettid has no preconditions.
        tid_sender.send(unsafe { libc::gettid() }).unwrap();
        let started = Instant::now();
        (wait(), started.elapsed())
    });
    until_in_shared_futex_wait(tid.recv().unwrap(), WAIT_LIMIT);
    waiter
}

#[test]
fn named_region_is_private_shared_and_removed_by_its_creator() {
    let name = unique_name("lifecycle");
    let path = region_path(&name);
    {
        let region = Region::create(&name, RegionSpec::with_arena(1 << 20)).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let id = region.create_map("counts", &def(BPF_MAP_TYPE_ARRAY, 4, 8, 4), None).unwrap();
        region.map(id).unwrap().update(&1u32.to_ne_bytes(), &7u64.to_ne_bytes(), BPF_ANY).unwrap();

        let other = Region::open(&name).unwrap();
        let info = other.map_info_by_name("counts").unwrap();
        assert_eq!((info.id, info.def.max_entries, info.def.value_size), (id, 4, 8));
        let mut value = [0u8; 8];
        other.map(id).unwrap().lookup(&1u32.to_ne_bytes(), &mut value).unwrap();
        assert_eq!(u64::from_ne_bytes(value), 7);
        let exists = Region::create(&name, RegionSpec::with_arena(4096)).unwrap_err();
        assert!(exists.to_string().contains("File exists") && exists.kind() == ErrorKind::AlreadyExists, "{exists:?}");
        drop(other);
        assert!(path.exists(), "an opener must not remove the region");
    }
    assert!(!path.exists(), "the creator removes the region");
    let missing = Region::open(&name).unwrap_err();
    assert!(missing.to_string().contains("No such file") && missing.kind() == ErrorKind::NotFound, "{missing:?}");
}

/// Only a region of this process's own uid, mode 0600, with one name and no symbolic link on
/// the way is used: anything else could carry another user's programs into this process.
#[test]
fn regions_another_user_could_control_are_refused() {
    let name = unique_name("trust");
    let path = region_path(&name);
    let region = Region::create(&name, RegionSpec::with_arena(4096)).unwrap();
    let refused = |name: &str| {
        let err = Region::open(name).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Refused, "{err}");
        err.to_string()
    };

    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert!(refused(&name).contains("mode 0644"), "{}", refused(&name));
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    Region::open(&name).unwrap();

    let linked = unique_name("trust-link");
    std::fs::hard_link(&path, region_path(&linked)).unwrap();
    assert!(refused(&name).contains("2 names"), "{}", refused(&name));
    assert!(refused(&linked).contains("2 names"));
    std::fs::remove_file(region_path(&linked)).unwrap();

    let symlink = unique_name("trust-symlink");
    std::os::unix::fs::symlink(&path, region_path(&symlink)).unwrap();
    let err = refused(&symlink);
    assert!(err.contains("symbolic link") && err.starts_with(uebpf_maps::REFUSED), "{err}");
    std::fs::remove_file(region_path(&symlink)).unwrap();

    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        std::os::unix::fs::chown(&path, Some(65534), None).unwrap();
        let err = refused(&name);
        assert!(err.contains("owned by uid 65534, not by this process's uid 0") && err.starts_with(uebpf_maps::REFUSED), "{err}");
    }
    drop(region);
}

#[test]
fn trust_rules_for_a_region_file() {
    // SAFETY: a zeroed stat is a valid value to fill in.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    stat.st_mode = libc::S_IFREG | 0o600;
    stat.st_uid = 1000;
    stat.st_nlink = 1;
    assert_eq!(uebpf_maps::check_trusted(&stat, 1000), Ok(()));
    assert!(uebpf_maps::check_trusted(&stat, 0).unwrap_err().contains("owned by uid 1000"));
    assert!(uebpf_maps::check_trusted(&stat, 1001).is_err());
    stat.st_mode = libc::S_IFREG | 0o666;
    assert!(uebpf_maps::check_trusted(&stat, 1000).unwrap_err().contains("mode 0666"));
    stat.st_mode = libc::S_IFIFO | 0o600;
    assert!(uebpf_maps::check_trusted(&stat, 1000).unwrap_err().contains("regular file"));
    stat.st_mode = libc::S_IFREG | 0o600;
    stat.st_nlink = 2;
    assert!(uebpf_maps::check_trusted(&stat, 1000).unwrap_err().contains("2 names"));
}

#[test]
fn bad_names_and_full_regions_are_clear_errors() {
    let err = Region::create("../etc/x", RegionSpec::with_arena(4096)).unwrap_err();
    assert!(err.to_string().contains("invalid region name") && err.kind() == ErrorKind::Invalid, "{err:?}");
    let region = Region::create_anonymous(RegionSpec::with_arena(4096)).unwrap();
    let err = region.create_map("big", &def(BPF_MAP_TYPE_ARRAY, 4, 4096, 4), None).unwrap_err();
    assert!(err.to_string().contains("map `big`: region full") && err.kind() == ErrorKind::RegionFull, "{err:?}");
    let err = region.create_map("trie", &def(11, 8, 8, 4), None).unwrap_err();
    assert!(err.to_string().contains("lpm_trie (11) is not supported") && err.kind() == ErrorKind::Invalid, "{err:?}");
    let one_map = Region::create_anonymous(RegionSpec { map_capacity: 1, ..RegionSpec::with_arena(1 << 16) }).unwrap();
    one_map.create_map("first", &def(BPF_MAP_TYPE_ARRAY, 4, 8, 1), None).unwrap();
    let err = one_map.create_map("second", &def(BPF_MAP_TYPE_ARRAY, 4, 8, 1), None).unwrap_err();
    assert_eq!((err.to_string().as_str(), err.kind()), ("map `second`: the region's map table is full (1 maps)", ErrorKind::TableFull));
}

#[test]
fn array_follows_the_kernel() {
    let region = anonymous();
    let map = region.map(region.create_map("a", &def(BPF_MAP_TYPE_ARRAY, 4, 4, 2), None).unwrap()).unwrap();
    let key = |k: u32| k.to_ne_bytes();
    assert_eq!(map.update(&key(2), &[1; 4], BPF_ANY), Err(libc::E2BIG));
    assert_eq!(map.update(&key(0), &[1; 4], BPF_NOEXIST), Err(libc::EEXIST));
    assert_eq!(map.update(&key(0), &[1; 4], 3), Err(libc::EINVAL));
    assert_eq!(map.update(&key(0), &[1; 4], BPF_F_LOCK), Err(libc::EINVAL));
    assert_eq!(map.update(&key(1), &[9; 4], BPF_EXIST), Ok(()));
    assert_eq!(map.delete(&key(0)), Err(libc::EINVAL));
    let mut value = [0; 4];
    assert_eq!(map.lookup(&key(2), &mut value), Err(libc::ENOENT));
    map.lookup(&key(1), &mut value).unwrap();
    assert_eq!(value, [9; 4]);
    let mut next = [0; 4];
    assert_eq!(map.next_key(None, &mut next), Ok(()));
    assert_eq!(u32::from_ne_bytes(next), 0);
    assert_eq!(map.next_key(Some(&key(0)), &mut next), Ok(()));
    assert_eq!(u32::from_ne_bytes(next), 1);
    assert_eq!(map.next_key(Some(&key(1)), &mut next), Err(libc::ENOENT));
    assert_eq!(map.next_key(Some(&key(7)), &mut next), Ok(()));
    assert_eq!(u32::from_ne_bytes(next), 0);
}

#[test]
fn hash_follows_the_kernel() {
    let region = anonymous();
    let map = region.map(region.create_map("h", &def(BPF_MAP_TYPE_HASH, 8, 8, 3), None).unwrap()).unwrap();
    let key = |k: u64| k.to_ne_bytes();
    assert_eq!(map.update(&key(1), &key(10), BPF_EXIST), Err(libc::ENOENT));
    assert_eq!(map.update(&key(1), &key(10), BPF_NOEXIST), Ok(()));
    assert_eq!(map.update(&key(1), &key(11), BPF_NOEXIST), Err(libc::EEXIST));
    assert_eq!(map.update(&key(1), &key(12), BPF_EXIST), Ok(()));
    assert_eq!(map.update(&key(1), &key(12), 3), Err(libc::EINVAL));
    map.update(&key(2), &key(20), BPF_ANY).unwrap();
    map.update(&key(3), &key(30), BPF_ANY).unwrap();
    assert_eq!(map.update(&key(4), &key(40), BPF_ANY), Err(libc::E2BIG));
    assert_eq!(map.update(&key(3), &key(31), BPF_ANY), Ok(()), "updating an existing key of a full map works");
    let mut value = [0; 8];
    map.lookup(&key(1), &mut value).unwrap();
    assert_eq!(u64::from_ne_bytes(value), 12);
    assert_eq!(map.delete(&key(9)), Err(libc::ENOENT));
    map.delete(&key(2)).unwrap();
    assert_eq!(map.lookup(&key(2), &mut value), Err(libc::ENOENT));
    map.update(&key(4), &key(40), BPF_ANY).unwrap();
    let mut keys: Vec<u64> = map.keys().iter().map(|k| u64::from_ne_bytes(k[..].try_into().unwrap())).collect();
    keys.sort();
    assert_eq!(keys, [1, 3, 4]);
    // A missing key restarts iteration at the first key, as the kernel does.
    let mut next = [0; 8];
    map.next_key(Some(&key(99)), &mut next).unwrap();
    assert_eq!(next.to_vec(), map.keys()[0]);
}

/// Program lookups take no lock (hash.rs): while other threads delete and insert keys, so that
/// entries are reused in other buckets under the readers' feet, a key that stays is always found
/// with its own value, and a key never inserted is never found.
#[test]
fn lock_free_lookups_see_every_staying_key_while_entries_are_reused() {
    let region = anonymous();
    // 16 entries in 16 buckets: 4 staying keys and churn through the other 12.
    let map = region.map(region.create_map("h", &def(BPF_MAP_TYPE_HASH, 8, 8, 16), None).unwrap()).unwrap();
    let staying: Vec<u64> = (1..=4).collect();
    for &key in &staying {
        map.update(&key.to_ne_bytes(), &(key * 10).to_ne_bytes(), BPF_NOEXIST).unwrap();
    }
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        let churners: Vec<_> = (0..2u64)
            .map(|thread| {
                let map = &map;
                scope.spawn(move || {
                    for round in 0..100_000u64 {
                        let key = 1000 + thread * 100 + round % 6;
                        let _ = map.update(&key.to_ne_bytes(), &(key * 10).to_ne_bytes(), BPF_ANY);
                        let _ = map.delete(&(1000 + thread * 100 + (round + 3) % 6).to_ne_bytes());
                    }
                })
            })
            .collect();
        let reader = scope.spawn(|| {
            let mut lookups = 0u64;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                for &key in &staying {
                    let value = unsafe { map.lookup_ptr(key.to_ne_bytes().as_ptr()) } as *const u64;
                    assert!(!value.is_null(), "staying key {key} not found");
                    assert_eq!(unsafe { value.read_volatile() }, key * 10, "key {key} found with another key's value");
                }
                assert!(unsafe { map.lookup_ptr(7u64.to_ne_bytes().as_ptr()) }.is_null(), "a key never inserted was found");
                lookups += 5;
            }
            lookups
        });
        for churner in churners {
            churner.join().unwrap();
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(reader.join().unwrap() > 0);
    });
}

#[test]
fn percpu_maps_expose_every_cpu_slot() {
    let region = anonymous();
    let cpus = region.possible_cpus() as usize;
    for map_type in [BPF_MAP_TYPE_PERCPU_ARRAY, BPF_MAP_TYPE_PERCPU_HASH] {
        let map = region.map(region.create_map("p", &def(map_type, 4, 4, 4), None).unwrap()).unwrap();
        assert_eq!(map.syscall_value_size(), cpus * 8);
        let values: Vec<u8> = (0..cpus).flat_map(|cpu| [cpu as u8 + 1, 0, 0, 0, 0xee, 0xee, 0xee, 0xee]).collect();
        map.update(&0u32.to_ne_bytes(), &values, BPF_ANY).unwrap();
        let mut back = vec![0xffu8; cpus * 8];
        map.lookup(&0u32.to_ne_bytes(), &mut back).unwrap();
        for cpu in 0..cpus {
            assert_eq!(back[cpu * 8..cpu * 8 + 8], [cpu as u8 + 1, 0, 0, 0, 0, 0, 0, 0], "padding is zeroed");
        }
        // The program view sees the calling CPU's slot.
        let here = unsafe { libc::sched_getcpu() } as usize % cpus;
        let slot = unsafe { map.lookup_ptr(0u32.to_ne_bytes().as_ptr()) };
        assert_eq!(unsafe { *slot }, here as u8 + 1);
    }
}

#[test]
fn ring_buffer_keeps_the_kernel_record_layout_and_never_overwrites() {
    let region = anonymous();
    let id = region.create_map("rb", &def(BPF_MAP_TYPE_RINGBUF, 0, 0, 4096), None).unwrap();
    let map = region.map(id).unwrap();
    let ring = map.ringbuf().unwrap();
    let info = map.info();
    assert_eq!(info.ringbuf_producer_offset(), info.ringbuf_consumer_offset() + 4096);
    assert_eq!(info.values_offset(), info.ringbuf_producer_offset() + 4096, "data follows the producer page");

    // Records larger than STAGED_MAX are written in place, as the kernel's are.
    const FIRST: u64 = STAGED_MAX + 5;
    let first = ring.reserve(FIRST);
    assert!(!first.is_null());
    // Header: length with the busy bit, then the page offset.
    let header = unsafe { std::slice::from_raw_parts(first.sub(8), 8) };
    assert_eq!(u32::from_ne_bytes(header[..4].try_into().unwrap()), FIRST as u32 | RINGBUF_BUSY_BIT);
    assert_eq!(ring.query(BPF_RB_PROD_POS), (FIRST + 8).next_multiple_of(8), "8-byte header + the payload, rounded to 8");
    let second = ring.reserve(3);
    unsafe { std::ptr::copy_nonoverlapping(b"two".as_ptr(), second, 3) };
    ring.commit(second, 0, false);
    let mut seen = Vec::new();
    assert_eq!(ring.consume(|r| seen.push(r.to_vec())), 0, "a busy first record blocks the ones after it");
    unsafe { std::ptr::write_bytes(first, b'1', FIRST as usize) };
    ring.commit(first, 0, false);
    let third = ring.reserve(STAGED_MAX + 8);
    ring.commit(third, 0, true);
    let discarded = unsafe { std::slice::from_raw_parts(third.sub(8), 4) };
    assert_eq!(u32::from_ne_bytes(discarded.try_into().unwrap()), (STAGED_MAX + 8) as u32 | RINGBUF_DISCARD_BIT);
    assert_eq!(ring.consume(|r| seen.push(r.to_vec())), 2);
    assert_eq!(seen, [vec![b'1'; FIRST as usize], b"two".to_vec()]);
    assert_eq!(ring.query(BPF_RB_AVAIL_DATA), 0);

    // Fill: 4096-byte ring, 1000-byte records take 1008; the kernel refuses the one that would
    // bring usage to the full size.
    let mut kept = 0;
    while !ring.reserve(1000).is_null() {
        kept += 1;
    }
    assert_eq!(kept, 4);
    assert_eq!(ring.dropped(), 1);
    let big = [7u8; 100];
    assert_eq!(unsafe { ring.output(big.as_ptr(), 100, 0) }, Err(libc::EAGAIN), "4032 + 108 bytes do not fit");
    assert_eq!(unsafe { ring.output(big.as_ptr(), 1, 4) }, Err(libc::EINVAL));
    assert_eq!(unsafe { ring.output(big.as_ptr(), 1, 0) }, Ok(()), "4032 + 16 bytes still fit");
    assert_eq!(ring.dropped(), 2);
}

/// Small records are staged (ringbuf.rs, "Staging"): the program writes them outside the ring,
/// their room is held from reserve on, and they are placed whole at submit, so a consumer never
/// waits behind one being written.
#[test]
fn staged_records_hold_their_room_and_appear_whole_at_submit() {
    let region = anonymous();
    let map = region.map(region.create_map("rb", &def(BPF_MAP_TYPE_RINGBUF, 0, 0, 4096), None).unwrap()).unwrap();
    let ring = map.ringbuf().unwrap();
    let a = ring.reserve(100);
    let b = ring.reserve(100);
    assert!(ring.owns(a) && ring.owns(b) && a != b);
    assert_eq!(ring.query(BPF_RB_PROD_POS), 224, "counted as reserved, as the kernel's records are");
    assert!(!ring.has_record(), "but nothing is in the ring while they are written");
    // 4095 usable bytes, 2 x 112 held: three 1008-byte records fit, not four.
    let direct: Vec<_> = std::iter::from_fn(|| Some(ring.reserve(1000)).filter(|r| !r.is_null())).collect();
    assert_eq!(direct.len(), 3, "the staged records' room is held");
    assert_eq!(ring.dropped(), 1);
    for r in &direct {
        ring.commit(*r, 0, false);
    }
    unsafe { std::ptr::write_bytes(b, b'b', 100) };
    ring.commit(b, 0, false);
    ring.commit(b, 0, false); // submitted twice: ignored
    unsafe { std::ptr::write_bytes(a, b'a', 100) };
    ring.commit(a, 0, false);
    let mut seen = Vec::new();
    assert_eq!(ring.consume(|r| seen.push(r.to_vec())), 5);
    assert_eq!(seen[3..], [vec![b'b'; 100], vec![b'a'; 100]], "in submit order, whole");
    // A discarded staged record is placed as a discarded header, as the kernel's: the consumer
    // skips it, and the positions are the kernel's.
    let position = ring.query(BPF_RB_PROD_POS);
    let c = ring.reserve(8);
    assert_eq!(ring.query(BPF_RB_PROD_POS), position + 16);
    ring.commit(c, 0, true);
    assert_eq!(ring.query(BPF_RB_PROD_POS), position + 16);
    assert!(ring.has_record());
    assert_eq!(ring.consume(|_| {}), 0, "skipped");
    // With every slot of this process held, a reservation is written in place: busy in the ring.
    let held: Vec<_> = (0..STAGE_SLOTS).map(|_| ring.reserve(8)).collect();
    assert!(held.iter().all(|r| !r.is_null()));
    let in_place = ring.reserve(8);
    let header = unsafe { std::slice::from_raw_parts(in_place.sub(8), 4) };
    assert_eq!(u32::from_ne_bytes(header.try_into().unwrap()), 8 | RINGBUF_BUSY_BIT, "the next one is in the ring");
    ring.commit(in_place, 0, false);
    for r in held {
        ring.commit(r, 0, true);
    }
    assert_eq!(ring.consume(|_| {}), 1);
}

/// A thread reserves in a staging slot of its own (no atomic read-modify-write), given back at
/// submit and taken again at its next reservation; a reservation nested in one it holds (a
/// signal handler's program) and another thread's get other slots.
#[test]
fn a_thread_stages_in_its_own_slot_and_a_nested_reservation_elsewhere() {
    let region = anonymous();
    let map = region.map(region.create_map("rb", &def(BPF_MAP_TYPE_RINGBUF, 0, 0, 4096), None).unwrap()).unwrap();
    let ring = map.ringbuf().unwrap();
    let own = ring.reserve(16);
    let nested = ring.reserve(16);
    assert!(ring.owns(own) && ring.owns(nested) && own != nested);
    ring.commit(nested, 0, false);
    ring.commit(own, 0, false);
    let again = ring.reserve(16);
    assert_eq!(again, own, "its own slot again");
    ring.commit(again, 0, false);
    // With every slot free, another thread still does not get this one's.
    let other = std::thread::scope(|scope| scope.spawn(|| ring.reserve(16) as usize).join().unwrap()) as *mut u8;
    assert!(ring.owns(other) && other != own);
    ring.commit(other, 0, false);
    assert_eq!(ring.consume(|_| {}), 4, "every record whole");
}

/// Staged reservations take their room by compare-and-swap, in-place ones under the lock, while
/// staged records are placed under the lock and a consumer reads: with producers of both kinds
/// racing on a small ring, every record is read whole exactly once or counted as dropped, each
/// producer's records arrive in its order, and afterwards no room is left held.
#[test]
fn racing_staged_and_in_place_producers_lose_and_duplicate_nothing() {
    const PRODUCERS: u64 = 4;
    const RECORDS: u64 = 20_000;
    let region = anonymous();
    let map = region.map(region.create_map("rb", &def(BPF_MAP_TYPE_RINGBUF, 0, 0, 16384), None).unwrap()).unwrap();
    let ring = map.ringbuf().unwrap();
    let done = std::sync::atomic::AtomicU64::new(0);
    let (refused, discarded) = (std::sync::atomic::AtomicU64::new(0), std::sync::atomic::AtomicU64::new(0));
    let mut next = [0u64; PRODUCERS as usize];
    let mut received = 0u64;
    std::thread::scope(|scope| {
        for producer in 0..PRODUCERS {
            let (ring, done, refused, discarded) = (&ring, &done, &refused, &discarded);
            scope.spawn(move || {
                // Odd producers write records too large to stage: in place, busy in the ring.
                let size = if producer % 2 == 0 { 16 } else { STAGED_MAX + 16 };
                for sequence in 0..RECORDS {
                    let record = ring.reserve(size);
                    if record.is_null() {
                        refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        std::thread::yield_now();
                        continue;
                    }
                    let discard = sequence % 7 == 0;
                    discarded.fetch_add(u64::from(discard), std::sync::atomic::Ordering::Relaxed);
                    let words = [producer, sequence];
                    // SAFETY: a reserved record of at least 16 bytes.
                    unsafe {
                        std::ptr::write_bytes(record, 0xa5, size as usize);
                        std::ptr::copy_nonoverlapping(words.as_ptr().cast::<u8>(), record, 16);
                    }
                    ring.commit(record, BPF_RB_NO_WAKEUP, discard);
                }
                done.fetch_add(1, std::sync::atomic::Ordering::Release);
            });
        }
        loop {
            let finished = done.load(std::sync::atomic::Ordering::Acquire) == PRODUCERS;
            received += ring.consume(|record| {
                let producer = u64::from_ne_bytes(record[..8].try_into().unwrap());
                let sequence = u64::from_ne_bytes(record[8..16].try_into().unwrap());
                assert!(record[16..].iter().all(|&b| b == 0xa5), "record whole");
                assert_eq!(record.len() as u64, if producer % 2 == 0 { 16 } else { STAGED_MAX + 16 });
                assert!(sequence % 7 != 0, "discarded records are skipped");
                assert!(sequence >= next[producer as usize], "in each producer's order, once");
                next[producer as usize] = sequence + 1;
            });
            if finished && !ring.has_record() {
                break;
            }
            std::hint::spin_loop();
        }
    });
    let (refused, discarded) = (refused.into_inner(), discarded.into_inner());
    assert!(refused > 0, "the ring filled");
    assert_eq!(ring.dropped(), refused, "every refusal counted");
    assert_eq!(received, PRODUCERS * RECORDS - refused - discarded, "every other record read");
    assert_eq!(ring.query(BPF_RB_AVAIL_DATA), 0, "no room left held");
    assert_eq!(ring.query(BPF_RB_PROD_POS), ring.query(BPF_RB_CONS_POS));
}

#[test]
fn ring_buffer_records_wrap_contiguously() {
    let region = anonymous();
    let map = region.map(region.create_map("rb", &def(BPF_MAP_TYPE_RINGBUF, 0, 0, 4096), None).unwrap()).unwrap();
    let ring = map.ringbuf().unwrap();
    let mut received = Vec::new();
    for round in 0..20u8 {
        let payload: Vec<u8> = (0..700).map(|i| (i as u8).wrapping_add(round)).collect();
        unsafe { ring.output(payload.as_ptr(), payload.len() as u64, BPF_RB_NO_WAKEUP) }.unwrap();
        ring.consume(|r| received.push(r.to_vec()));
        assert_eq!(received.last().unwrap(), &payload, "round {round}");
    }
    assert!(ring.query(BPF_RB_PROD_POS) > 4096 * 3, "the positions went around the ring several times");
}

/// uebpf's wakeup rules: a producer wakes (bumps the futex word and calls FUTEX_WAKE) only while a
/// consumer is registered as waiting; then always with BPF_RB_FORCE_WAKEUP, never with
/// BPF_RB_NO_WAKEUP, and for an ordinary record only once the unread bytes reach a WATERMARK_DIVISOR-th of
/// the ring, once per sleep (the consumer's timer delivers the rest).
#[test]
fn ring_buffer_wakes_a_waiting_consumer_when_forced_or_at_the_watermark_once() {
    let region = anonymous();
    let map = region.map(region.create_map("rb", &def(BPF_MAP_TYPE_RINGBUF, 0, 0, 4096), None).unwrap()).unwrap();
    let ring = map.ringbuf().unwrap();
    let output = |flags| unsafe { ring.output(b"12345678".as_ptr(), 8, flags) }.unwrap();
    let seq = ring.wakeup_seq();
    output(0);
    output(BPF_RB_FORCE_WAKEUP);
    assert_eq!(ring.wakeup_seq(), seq, "nobody waits: no wakeup");
    ring.consume(|_| {});
    output(0);
    // A sleep on a ring that is not empty waits for the watermark (the first record wakes only a
    // consumer that fell asleep on an empty ring: the next test).
    let waiting = ring.waiting();
    output(0); // the kernel would wake a consumer that had caught up at every record; uebpf does not
    assert_eq!(ring.wakeup_seq(), seq, "an ordinary record below the watermark");
    // 16 bytes a record (8-byte header): the N-th unread record reaches the watermark.
    let watermark_records = (4096 / WATERMARK_DIVISOR / 16) as usize;
    for _ in 2..watermark_records - 1 {
        output(0);
    }
    assert_eq!(ring.wakeup_seq(), seq, "one record short of the watermark");
    output(0);
    assert_eq!(ring.wakeup_seq(), seq + 1, "the record that reaches it");
    output(0);
    output(0);
    assert_eq!(ring.wakeup_seq(), seq + 1, "once per sleep");
    output(BPF_RB_FORCE_WAKEUP);
    assert_eq!(ring.wakeup_seq(), seq + 2, "forced: every time");
    output(BPF_RB_FORCE_WAKEUP);
    assert_eq!(ring.wakeup_seq(), seq + 3);
    drop(waiting);
    assert_eq!(ring.consume(|_| {}) as usize, watermark_records + 4);
    let waiting = ring.waiting(); // a new sleep: armed again
    for _ in 0..70 {
        output(BPF_RB_NO_WAKEUP);
    }
    assert_eq!(ring.wakeup_seq(), seq + 3, "BPF_RB_NO_WAKEUP never wakes, even past the watermark");
    output(0);
    assert_eq!(ring.wakeup_seq(), seq + 4, "an ordinary record past it does");
    assert_eq!(ring.wait_for_wakeup(seq + 3, std::time::Duration::ZERO), seq + 4);
    drop(waiting);
    output(BPF_RB_FORCE_WAKEUP);
    assert_eq!(ring.wakeup_seq(), seq + 4, "no longer waiting");
}

/// A consumer asleep on an empty buffer after a sleep in which it read nothing (an idle period)
/// is woken by the first record, once per sleep; one that read records at its last wakeup waits
/// for the watermark or its 1 ms timer: the first event of a quiet spell arrives at once, the
/// records after it within a millisecond, and a steady producer pays no wakeup.
#[test]
fn the_first_record_after_an_idle_sleep_wakes_the_consumer_once() {
    use std::sync::atomic::Ordering::SeqCst;
    use uebpf_maps::perfbuf::*;
    let region = anonymous();
    let ring_map = region.map(region.create_map("rb", &def(BPF_MAP_TYPE_RINGBUF, 0, 0, 4096), None).unwrap()).unwrap();
    let ring = ring_map.ringbuf().unwrap();
    let cpus = uebpf_maps::current::possible_cpus();
    let array_map = region.map(region.create_map("events", &def(BPF_MAP_TYPE_PERF_EVENT_ARRAY, 4, 4, cpus), None).unwrap()).unwrap();
    let array = array_map.perf_event_array().unwrap();
    let buffer_id = region.create_perf_buffer("buffer", 4096, ANY_CPU, 7).unwrap();
    for cpu in 0..cpus {
        array.slots().set(cpu, buffer_id).unwrap();
    }
    let buffer_map = region.map(buffer_id).unwrap();
    let ring_output = || unsafe { ring.output(b"12345678".as_ptr(), 8, 0) }.unwrap();
    let perf_output = || unsafe { array.output(BPF_F_CURRENT_CPU, b"12345678".as_ptr(), 8) }.unwrap();
    let kinds: [(&str, &Wakeup, &dyn Fn()); 2] =
        [("ring buffer", ring.wakeup(), &ring_output), ("perf buffer", buffer_map.perfbuf().unwrap().wakeup(), &perf_output)];
    for (kind, wakeup, output) in kinds {
        let seq = wakeup.seq();
        let at = wakeup.armed_at.load(SeqCst);
        wakeup.waiters.fetch_add(1, SeqCst); // a registered consumer, as `Waiting` makes one
        assert_eq!(wakeup.arm(true, at), Armed::FirstRecord, "nothing read since the last sleep ({kind})");
        assert_eq!(uebpf_maps::sleep_for(Armed::FirstRecord), CONSUMER_TIMER, "idle: the record wakes it ({kind})");
        output();
        assert_eq!(wakeup.seq(), seq + 1, "the first record wakes it ({kind})");
        output();
        assert_eq!(wakeup.seq(), seq + 1, "once per sleep ({kind})");
        assert_eq!(wakeup.arm(true, at + 32), Armed::Watermark, "it read two records: a busy producer ({kind})");
        assert_eq!(uebpf_maps::sleep_for(Armed::Watermark), FOLLOW_TIMER, "records flow: it looks again soon ({kind})");
        output();
        assert_eq!(wakeup.seq(), seq + 1, "the watermark's sleep ({kind})");
        assert_eq!(wakeup.arm(false, at + 32), Armed::Watermark, "records unread: the watermark's ({kind})");
        assert_eq!(wakeup.arm(true, at + 48), Armed::Watermark, "{kind}");
        assert_eq!(wakeup.arm(true, at + 48), Armed::FirstRecord, "a sleep that read nothing: idle again ({kind})");
        output();
        assert_eq!(wakeup.seq(), seq + 2, "{kind}");
        wakeup.waiters.fetch_sub(1, SeqCst);
    }
}

/// A consumer that finds the record at its position still being written (its producer preempted
/// between reserve and submit) can read nothing behind it: it is woken by that record's submit,
/// once, not by the watermark (which would wake it for nothing) nor by other records' submits.
#[test]
fn a_consumer_behind_a_record_being_written_is_woken_by_its_submit() {
    let region = anonymous();
    let map = region.map(region.create_map("rb", &def(BPF_MAP_TYPE_RINGBUF, 0, 0, 4096), None).unwrap()).unwrap();
    let ring = map.ringbuf().unwrap();
    let output = |flags| unsafe { ring.output(b"12345678".as_ptr(), 8, flags) }.unwrap();
    let seq = ring.wakeup_seq();
    let head = ring.reserve(STAGED_MAX + 8); // written in place (staged records are never busy)
    assert!(!head.is_null());
    let waiting = ring.waiting();
    assert!(!ring.has_record());
    for _ in 0..100 {
        output(0); // past the watermark (1024 bytes at 16 a record), behind the busy head
    }
    assert_eq!(ring.wakeup_seq(), seq, "records behind the busy head do not wake the consumer");
    let second = ring.reserve(STAGED_MAX + 8);
    ring.commit(second, 0, false);
    assert_eq!(ring.wakeup_seq(), seq, "nor does another record's submit");
    ring.commit(head, 0, false);
    assert_eq!(ring.wakeup_seq(), seq + 1, "the busy head's submit wakes it");
    assert!(ring.has_record());
    assert_eq!(ring.consume(|_| {}), 102);
    // Re-armed after reading everything: the watermark again, once.
    ring.arm();
    for _ in 0..64 {
        output(0);
    }
    assert_eq!(ring.wakeup_seq(), seq + 2, "the watermark once the ring was drained");
    // A discarded head wakes too; BPF_RB_NO_WAKEUP never does.
    ring.consume(|_| {});
    let head = ring.reserve(STAGED_MAX + 8);
    ring.arm();
    ring.commit(head, BPF_RB_NO_WAKEUP, false);
    assert_eq!(ring.wakeup_seq(), seq + 2, "BPF_RB_NO_WAKEUP never wakes");
    ring.consume(|_| {});
    let head = ring.reserve(STAGED_MAX + 8);
    ring.arm();
    ring.commit(head, 0, true);
    assert_eq!(ring.wakeup_seq(), seq + 3, "a discarded busy head wakes it");
    drop(waiting);
    let head = ring.reserve(8);
    ring.commit(head, 0, false);
    assert_eq!(ring.wakeup_seq(), seq + 3, "nobody waits any more");
}

/// Maps a ring the way libbpf's ring_buffer__add maps a kernel ring buffer's fd (consumer page
/// read-write; producer page and the data twice, read-only, in one range), here from the region
/// file at the offsets MapInfo gives, and consumes with libbpf's algorithm (ringbuf_process_ring).
#[test]
fn a_libbpf_style_consumer_reads_the_ring_from_the_region_file() {
    let region = anonymous();
    let size = 8192usize;
    let map = region.map(region.create_map("rb", &def(BPF_MAP_TYPE_RINGBUF, 0, 0, size as u32), None).unwrap()).unwrap();
    let ring = map.ringbuf().unwrap();
    let info = map.info().clone();
    let page = 4096usize;
    // SAFETY: fresh shared mappings of the region file at page-aligned offsets.
    let (consumer, producer) = unsafe {
        let consumer = libc::mmap(
            std::ptr::null_mut(),
            page,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            region.fd(),
            info.ringbuf_consumer_offset() as i64,
        );
        let producer = libc::mmap(
            std::ptr::null_mut(),
            page + 2 * size,
            libc::PROT_READ,
            libc::MAP_SHARED,
            region.fd(),
            info.ringbuf_producer_offset() as i64,
        );
        assert!(consumer != libc::MAP_FAILED && producer != libc::MAP_FAILED);
        // The kernel maps the data twice; from a file that is a second mapping right after.
        let again = libc::mmap(
            (producer as *mut u8).add(page + size).cast(),
            size,
            libc::PROT_READ,
            libc::MAP_SHARED | libc::MAP_FIXED,
            region.fd(),
            info.values_offset() as i64,
        );
        assert!(again != libc::MAP_FAILED);
        (consumer as *mut u64, producer as *const u8)
    };
    let mut produced = Vec::new();
    let mut consumed = Vec::new();
    for round in 0..40u32 {
        let payload: Vec<u8> = (0..(500 + round * 37) as usize).map(|i| (i as u32 * 7 + round) as u8).collect();
        unsafe { ring.output(payload.as_ptr(), payload.len() as u64, 0) }.unwrap();
        produced.push(payload);
        // libbpf: cons = load_acquire(consumer_pos); while cons < load_acquire(producer_pos) ...
        unsafe {
            let mut cons = std::ptr::read_volatile(consumer);
            let prod = std::ptr::read_volatile(producer as *const u64);
            while cons < prod {
                let header = producer.add(page + (cons as usize & (size - 1)));
                let len = std::ptr::read_volatile(header as *const u32);
                assert_eq!(len & (RINGBUF_BUSY_BIT | RINGBUF_DISCARD_BIT), 0);
                consumed.push(std::slice::from_raw_parts(header.add(8), len as usize).to_vec());
                cons += (len as u64 + 8).next_multiple_of(8);
                std::ptr::write_volatile(consumer, cons);
            }
        }
    }
    assert_eq!(consumed, produced, "records that wrapped are contiguous in the double mapping too");
    assert_eq!(ring.query(BPF_RB_CONS_POS), ring.query(BPF_RB_PROD_POS), "the producer sees the consumer's position");
    unsafe {
        libc::munmap(consumer.cast(), page);
        libc::munmap(producer as *mut _, page + 2 * size);
    }
}

#[test]
fn attach_table_is_shared_append_only_and_signals_changes() {
    use uebpf_maps::{AttachKind, AttachSpec, AttachState};
    let name = unique_name("attach");
    let server = Region::create(&name, RegionSpec::with_arena(4096)).unwrap();
    let agent = Region::open(&name).unwrap();
    assert!(agent.attachments().is_empty());
    let seen = agent.attach_generation();
    let spec = AttachSpec {
        kind: AttachKind::Uprobe,
        prog_id: 3,
        pid: -1,
        target: "/usr/bin/app".into(),
        offset: 0x1139,
        ref_ctr_offset: 0,
        cookie: 7,
        dev: 1,
        ino: 2,
        state: AttachState::Disabled,
    };
    // A waiter asleep in another thread (as an agent would be) is woken by the attach.
    let waiter = blocked_waiter(move || agent.wait_attach_change(seen, WAIT_LIMIT));
    let id = server.add_attachment(&spec).unwrap();
    let (generation, waited) = waiter.join().unwrap();
    assert_ne!(generation, seen, "the waiter saw the new generation");
    assert!(waited < WAIT_LIMIT, "woken by the attach, not by its timeout ({waited:?})");
    let agent = Region::open(&name).unwrap();
    let found = agent.attachments();
    assert_eq!(found.len(), 1);
    assert_eq!((found[0].id, &found[0].spec), (id, &spec));
    server.set_attachment_state(id, AttachState::Enabled).unwrap();
    assert_eq!(agent.attachments()[0].spec.state, AttachState::Enabled);
    assert_eq!(agent.attachments()[0].changed_at, agent.attach_generation());
    server.set_attachment_state(id, AttachState::Detached).unwrap();
    let err = server.set_attachment_state(id, AttachState::Enabled).unwrap_err().to_string();
    assert!(err.contains("detached"), "{err}");
    let tp = AttachSpec {
        kind: AttachKind::SyscallTracepoint,
        target: "raw_syscalls/sys_enter".into(),
        state: AttachState::Enabled,
        ..spec.clone()
    };
    assert_eq!(server.add_attachment(&tp).unwrap(), id + 1, "ids are never reused");
    assert!(server.add_attachment(&AttachSpec { target: "x".repeat(300), ..spec }).unwrap_err().to_string().contains("1 to 255 bytes"));
}

#[test]
fn agent_slots_report_passes_and_wake_waiters() {
    use uebpf_maps::{generation_reached, AgentReport};
    let name = unique_name("agents");
    let server = Region::create(&name, RegionSpec::with_arena(4096)).unwrap();
    let agent = Region::open(&name).unwrap();
    let me = std::process::id();
    assert_eq!(agent.agent(me), None);
    let slot = agent.claim_agent_slot(me).unwrap();
    let claimed = server.agent(me).unwrap();
    assert_eq!(claimed.passes, 0);
    assert!(!generation_reached(claimed.report.applied, server.attach_generation()), "nothing counts as applied before a pass");
    // A waiter (as `uebpf wait-applied`) sleeps on the agent generation and sees the report.
    let seen = server.agent_generation();
    let waiter = blocked_waiter(move || server.wait_agent_change(seen, WAIT_LIMIT));
    let report =
        AgentReport { applied: agent.attach_generation(), hooks: 2, slow_hooks: 1, failed: 1, unsupported: 0, message: "é".repeat(200) };
    agent.report_agent(slot, me, &report).unwrap();
    let (generation, waited) = waiter.join().unwrap();
    assert_ne!(generation, seen, "the waiter saw the new generation");
    assert!(waited < WAIT_LIMIT, "woken by the report, not by its timeout ({waited:?})");
    let status = agent.agent(me).unwrap();
    assert_eq!(status.passes, 1);
    assert!(generation_reached(status.report.applied, agent.attach_generation()));
    assert_eq!((status.report.hooks, status.report.slow_hooks, status.report.failed), (2, 1, 1));
    assert!(status.report.message.starts_with("éé") && status.report.message.len() < 224, "cut to the field at a character boundary");
    assert!(!status.report.message.contains(char::REPLACEMENT_CHARACTER));
    assert!(agent.report_agent(slot, me + 1, &report).is_err(), "a slot belongs to one process");
    // A slot whose process is gone is reused; a released slot is free.
    let gone = 0x3fff_fff0; // above pid_max: no such process
    let other = agent.claim_agent_slot(gone).unwrap();
    assert_ne!(other, slot);
    assert_eq!(agent.claim_agent_slot(gone + 1).unwrap(), other, "the gone process's slot is taken over");
    agent.release_agent_slot(slot, me);
    assert_eq!(agent.agent(me), None);
    assert_eq!(agent.agents().len(), 1);
    assert!(generation_reached(5, 5) && generation_reached(0, u32::MAX) && !generation_reached(u32::MAX, 0));
}

/// Perf event arrays and perf buffers (perfbuf.rs): the kernel's record layout, errors and lost
/// records, read as libbpf's perf_buffer reads them.
#[test]
fn perf_event_output_writes_kernel_samples_and_reports_lost_ones() {
    use uebpf_maps::perfbuf::*;
    let region = anonymous();
    let cpus = uebpf_maps::current::possible_cpus();
    let array_id = region.create_map("events", &def(BPF_MAP_TYPE_PERF_EVENT_ARRAY, 4, 4, cpus), None).unwrap();
    let array_map = region.map(array_id).unwrap();
    let array = array_map.perf_event_array().unwrap();
    let internal = MapDef { map_type: UEBPF_PERF_BUFFER, max_entries: 4096, ..Default::default() };
    assert!(region.create_map("sneaky", &internal, None).is_err(), "perf buffers are made only by mapping an event");
    let buffer_id = region.create_perf_buffer("buffer", 4096, ANY_CPU, 7).unwrap();
    let buffer_map = region.map(buffer_id).unwrap();
    let buffer = buffer_map.perfbuf().unwrap();
    let data = *b"0123456789";
    let output = |flags| unsafe { array.output(flags, data.as_ptr(), data.len() as u64) };
    assert_eq!(output(BPF_F_CURRENT_CPU), Err(libc::ENOENT), "an empty slot");
    assert_eq!(output(u64::from(cpus)), Err(libc::E2BIG), "past the end");
    assert_eq!(output(1 << 32), Err(libc::EINVAL), "flags beyond the index");
    for cpu in 0..cpus {
        array.slots().set(cpu, buffer_id).unwrap();
    }
    assert_eq!(output(BPF_F_CURRENT_CPU), Ok(()));
    let mut records = Vec::new();
    assert_eq!(buffer.consume(|kind, body| records.push((kind, body.to_vec()))), 1);
    // header (type 9, misc, size 8 + 16), u32 size 12 (the data and its padding), data, zeros.
    let mut expected = 12u32.to_ne_bytes().to_vec();
    expected.extend_from_slice(&data);
    expected.extend_from_slice(&[0, 0]);
    assert_eq!(records, [(PERF_RECORD_SAMPLE, expected)]);
    // Fill: 4096 bytes, one kept free (CIRC_SPACE); 24-byte samples.
    let mut kept = 0;
    while output(BPF_F_CURRENT_CPU).is_ok() {
        kept += 1;
    }
    assert_eq!(kept, 4095 / 24);
    assert_eq!(output(BPF_F_CURRENT_CPU), Err(libc::ENOSPC));
    assert_eq!(buffer.lost(), 2);
    records.clear();
    assert_eq!(buffer.consume(|kind, _| records.push((kind, Vec::new()))), kept);
    assert_eq!(output(BPF_F_CURRENT_CPU), Ok(()), "room again");
    let mut after = Vec::new();
    buffer.consume(|kind, body| after.push((kind, body.to_vec())));
    assert_eq!(after.len(), 2, "the lost count, then the sample");
    assert_eq!(after[0].0, PERF_RECORD_LOST);
    assert_eq!(after[0].1[..8], 7u64.to_ne_bytes(), "the event's id");
    assert_eq!(after[0].1[8..], 2u64.to_ne_bytes(), "two samples lost");
    assert_eq!(after[1].0, PERF_RECORD_SAMPLE);
    // A buffer for one CPU takes samples from that CPU only (EOPNOTSUPP from the others).
    let other = (uebpf_maps::current::cpu(u32::MAX) + 1) % cpus;
    let pinned = region.create_perf_buffer("pinned", 4096, other, 8).unwrap();
    array.slots().set(0, pinned).unwrap();
    if other != uebpf_maps::current::cpu(u32::MAX) {
        assert_eq!(output(0), Err(libc::EOPNOTSUPP));
    }
    array.slots().set(0, NOT_OUTPUT).unwrap();
    assert_eq!(output(0), Err(libc::EINVAL), "not a BPF output event");
    array.slots().set(0, NO_BUFFER).unwrap();
    assert_eq!(output(0), Err(libc::ENOSPC), "an event never mapped");
    assert_eq!(array_map.delete(&0u32.to_ne_bytes()), Ok(()));
    assert_eq!(array_map.delete(&0u32.to_ne_bytes()), Err(libc::ENOENT));
    assert_eq!(array_map.lookup(&1u32.to_ne_bytes(), &mut [0u8; 4]), Err(ENOTSUPP));
}

/// Queue and stack maps (queue.rs): the kernel's order, full and empty answers, and BPF_EXIST
/// making room by dropping the oldest value.
#[test]
fn queue_and_stack_maps_pop_in_their_order_and_refuse_as_the_kernel() {
    use uebpf_maps::def::{BPF_MAP_TYPE_QUEUE, BPF_MAP_TYPE_STACK};
    let region = anonymous();
    assert!(region.create_map("keyed", &def(BPF_MAP_TYPE_QUEUE, 4, 8, 3), None).is_err(), "no key");
    for (map_type, order) in [(BPF_MAP_TYPE_QUEUE, [2u64, 3, 4]), (BPF_MAP_TYPE_STACK, [4, 3, 2])] {
        let map = region.map(region.create_map("q", &def(map_type, 0, 8, 3), None).unwrap()).unwrap();
        let push = |v: u64, flags| map.update(&[], &v.to_ne_bytes(), flags);
        for v in 1..=3 {
            push(v, 0).unwrap();
        }
        assert_eq!(push(9, 0), Err(libc::E2BIG), "full");
        assert_eq!(push(9, 4), Err(libc::EINVAL), "unknown flags");
        push(4, uebpf_maps::def::BPF_EXIST).unwrap(); // drops the oldest (1)
        let mut value = [0u8; 8];
        map.lookup(&[], &mut value).unwrap();
        assert_eq!(u64::from_ne_bytes(value), order[0], "peek");
        let popped: Vec<u64> =
            std::iter::from_fn(|| map.lookup_and_delete(&[], &mut value).ok().map(|()| u64::from_ne_bytes(value))).collect();
        assert_eq!(popped, order);
        assert_eq!(map.lookup(&[], &mut value), Err(libc::ENOENT), "empty");
        assert_eq!(map.delete(&[]), Err(libc::EINVAL));
    }
}

/// LRU hashes (hash.rs, "LRU"): a full map takes a new key by evicting one, keeps max_entries
/// keys, and evicts an unreferenced key before one a program looked up since the sweep passed.
#[test]
fn a_full_lru_hash_evicts_an_unreferenced_key_for_a_new_one() {
    use uebpf_maps::def::{BPF_F_NO_PREALLOC, BPF_MAP_TYPE_LRU_HASH, BPF_MAP_TYPE_LRU_PERCPU_HASH};
    let region = anonymous();
    let no_prealloc = MapDef { map_flags: BPF_F_NO_PREALLOC, ..def(BPF_MAP_TYPE_LRU_HASH, 4, 8, 4) };
    assert!(region.create_map("np", &no_prealloc, None).is_err(), "LRU maps are preallocated");
    for map_type in [BPF_MAP_TYPE_LRU_HASH, BPF_MAP_TYPE_LRU_PERCPU_HASH] {
        let map = region.map(region.create_map("lru", &def(map_type, 4, 8, 4), None).unwrap()).unwrap();
        let put = |k: u32| unsafe { map.update_ptr(k.to_ne_bytes().as_ptr(), 7u64.to_ne_bytes().as_ptr(), 0) };
        let has = |k: u32| map.keys().contains(&k.to_ne_bytes().to_vec());
        for k in 0..4 {
            put(k).unwrap();
        }
        // A program looks keys 0..3 up but not 2: 2 is the one to go.
        for k in [0u32, 1, 3] {
            assert!(!unsafe { map.lookup_ptr(k.to_ne_bytes().as_ptr()) }.is_null());
        }
        put(10).unwrap();
        assert_eq!(map.keys().len(), 4, "still max_entries keys");
        assert!(has(10) && !has(2) && has(0) && has(1) && has(3), "{:?}", map.keys());
        // Every insertion into a full map succeeds, whatever is referenced.
        for k in 100..200 {
            put(k).unwrap();
            assert!(has(k));
        }
        assert_eq!(map.keys().len(), 4);
        assert_eq!(map.update(&5u32.to_ne_bytes(), &vec![0u8; map.syscall_value_size()], uebpf_maps::def::BPF_EXIST), Err(libc::ENOENT));
    }
}

/// The batch commands' unit (HashView::take_bucket): a bucket's entries, all or none, deleted on
/// request; every key once over all buckets.
#[test]
fn hash_buckets_are_taken_whole_for_the_batch_commands() {
    let region = anonymous();
    let map = region.map(region.create_map("h", &def(BPF_MAP_TYPE_HASH, 4, 8, 64), None).unwrap()).unwrap();
    for k in 0u32..40 {
        map.update(&k.to_ne_bytes(), &u64::from(k * 2).to_ne_bytes(), 0).unwrap();
    }
    let hash = map.hash_buckets().unwrap();
    let (mut keys, mut values) = (Vec::new(), Vec::new());
    let busiest =
        (0..hash.n_buckets()).max_by_key(|&b| hash.take_bucket(b, usize::MAX, false, &mut Vec::new(), &mut Vec::new()).unwrap()).unwrap();
    let size = hash.take_bucket(busiest, usize::MAX, false, &mut Vec::new(), &mut Vec::new()).unwrap();
    assert_eq!(hash.take_bucket(busiest, size - 1, true, &mut keys, &mut values), Err(size), "all or none");
    assert!(keys.is_empty() && map.keys().len() == 40);
    let mut taken = 0;
    for b in 0..hash.n_buckets() {
        taken += hash.take_bucket(b, usize::MAX, true, &mut keys, &mut values).unwrap();
    }
    assert_eq!((taken, map.keys().len()), (40, 0), "every key once, then deleted");
    let mut pairs: Vec<(u32, u64)> = keys
        .chunks(4)
        .zip(values.chunks(8))
        .map(|(k, v)| (u32::from_ne_bytes(k.try_into().unwrap()), u64::from_ne_bytes(v.try_into().unwrap())))
        .collect();
    pairs.sort();
    assert_eq!(pairs, (0u32..40).map(|k| (k, u64::from(k * 2))).collect::<Vec<_>>());
    map.update(&1u32.to_ne_bytes(), &0u64.to_ne_bytes(), 0).unwrap(); // the entries are free again
}

/// Stack trace maps (stack.rs): one id per stack, a taken bucket answers EEXIST to another stack
/// unless BPF_F_REUSE_STACKID, and the syscall view reads, deletes and walks the ids.
#[test]
fn stack_trace_maps_keep_one_stack_per_bucket_as_the_kernel() {
    use uebpf_maps::def::BPF_MAP_TYPE_STACK_TRACE;
    use uebpf_maps::stack::BPF_F_REUSE_STACKID;
    let region = anonymous();
    assert!(region.create_map("odd", &def(BPF_MAP_TYPE_STACK_TRACE, 4, 12, 4), None).is_err(), "whole addresses");
    let map = region.map(region.create_map("st", &def(BPF_MAP_TYPE_STACK_TRACE, 4, 24, 1), None).unwrap()).unwrap();
    let stacks = map.stack_trace().unwrap();
    let id = stacks.store(&[1, 2, 3, 4], 0).unwrap();
    assert_eq!(stacks.store(&[1, 2, 3, 9], 0), Ok(id), "cut to 3 addresses: the same stack");
    assert_eq!(stacks.store(&[7, 8], 0), Err(libc::EEXIST), "one bucket, taken by another stack");
    assert_eq!(stacks.store(&[7, 8], BPF_F_REUSE_STACKID), Ok(id));
    let mut value = [0xffu8; 24];
    map.lookup(&id.to_ne_bytes(), &mut value).unwrap();
    assert_eq!(value, [7u64.to_ne_bytes(), 8u64.to_ne_bytes(), [0; 8]].concat()[..], "zeros after the stack");
    assert_eq!(map.keys(), [id.to_ne_bytes().to_vec()]);
    map.delete(&id.to_ne_bytes()).unwrap();
    assert_eq!(map.delete(&id.to_ne_bytes()), Err(libc::ENOENT));
    assert!(map.keys().is_empty());
    assert_eq!(stacks.store(&[], 0), Err(libc::EFAULT));
}

/// Bloom filters (bloom.rs): a pushed value is always found, the kernel's flags and commands.
#[test]
fn a_bloom_filter_finds_what_was_pushed_and_refuses_as_the_kernel() {
    use uebpf_maps::def::{BPF_F_ZERO_SEED, BPF_MAP_TYPE_BLOOM_FILTER};
    let region = anonymous();
    let bad_extra = MapDef { map_extra: 16, ..def(BPF_MAP_TYPE_BLOOM_FILTER, 0, 8, 64) };
    assert!(region.create_map("x", &bad_extra, None).is_err(), "at most 15 hash functions");
    let extra_on_hash = MapDef { map_extra: 3, ..def(BPF_MAP_TYPE_HASH, 4, 8, 64) };
    assert!(region.create_map("h", &extra_on_hash, None).is_err(), "map_extra is a bloom filter's");
    for flags in [0, BPF_F_ZERO_SEED] {
        let bloom = MapDef { map_extra: 3, map_flags: flags, ..def(BPF_MAP_TYPE_BLOOM_FILTER, 0, 8, 1000) };
        let map = region.map(region.create_map("b", &bloom, None).unwrap()).unwrap();
        for v in (0u64..1000).map(|i| i * 7919) {
            map.update(&[], &v.to_ne_bytes(), 0).unwrap();
        }
        for v in (0u64..1000).map(|i| i * 7919) {
            assert_eq!(map.lookup(&[], &mut v.to_ne_bytes()), Ok(()), "{v} was pushed");
        }
        let false_positives = (0u64..1000).filter(|i| map.lookup(&[], &mut (i * 7919 + 1).to_ne_bytes()).is_ok()).count();
        assert!(false_positives < 100, "{false_positives} of 1000 (about 1% expected)");
        assert_eq!(map.update(&[], &1u64.to_ne_bytes(), 2), Err(libc::EINVAL), "BPF_ANY only");
        assert_eq!(map.delete(&[]), Err(libc::EOPNOTSUPP));
        assert_eq!(unsafe { map.pop_ptr([0u8; 8].as_mut_ptr(), true) }, Err(libc::EOPNOTSUPP));
    }
}

/// Prog arrays as bpf(2) sees them (the kernel's fd_array ops): lookups answer the program id or
/// ENOENT, deletes empty a slot once, updates of a descriptor are the server's (EINVAL here),
/// iteration covers every index; programs cannot reach the slots' memory.
#[test]
fn prog_array_slots_answer_as_the_kernels_fd_array() {
    let region = anonymous();
    let id = region.create_map("jumps", &def(BPF_MAP_TYPE_PROG_ARRAY, 4, 4, 3), None).unwrap();
    let map = region.map(id).unwrap();
    let slots = map.prog_array().unwrap();
    let lookup = |index: u32| {
        let mut value = [0u8; 4];
        map.lookup(&index.to_ne_bytes(), &mut value).map(|()| u32::from_ne_bytes(value))
    };
    assert_eq!(lookup(1), Err(libc::ENOENT));
    slots.set(1, 42).unwrap();
    assert_eq!(slots.set(3, 42), Err(libc::E2BIG));
    assert_eq!((lookup(1), slots.get(1), slots.get(3)), (Ok(42), Some(42), None));
    assert_eq!(slots.occupied().collect::<Vec<_>>(), [(1, 42)]);
    assert_eq!(map.update(&0u32.to_ne_bytes(), &7u32.to_ne_bytes(), BPF_ANY), Err(libc::EINVAL));
    assert_eq!(map.keys(), [0u32, 1, 2].map(|k| k.to_ne_bytes().to_vec()));
    assert_eq!(map.delete(&1u32.to_ne_bytes()), Ok(()));
    assert_eq!(map.delete(&1u32.to_ne_bytes()), Err(libc::ENOENT));
    assert_eq!(map.delete(&3u32.to_ne_bytes()), Err(libc::E2BIG));
    assert_eq!(map.program_memory().len, 0);
    assert!(region.create_map("wide", &def(BPF_MAP_TYPE_PROG_ARRAY, 4, 8, 3), None).is_err());
}
