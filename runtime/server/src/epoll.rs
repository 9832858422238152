//! The loader's epoll instances, followed from `epoll_create` on through `epoll_ctl` and
//! `close`, so that `epoll_wait` on an instance whose only member is one uebpf ring can wait on
//! the ring's futex itself (see `ring` for why, and for the path every other instance takes).
//!
//! Only instances created while we are loaded are followed (one created otherwise may hold
//! descriptors we never saw). A descriptor that is not a ring, or a ring registered with
//! anything but level-triggered interest (EPOLLET, EPOLLONESHOT, EPOLLEXCLUSIVE, EPOLLWAKEUP),
//! makes the instance "mixed" until it is deleted from it: the kernel then does the waiting. A
//! mixed member that is closed without being deleted keeps the instance mixed, since a duplicate
//! of its descriptor may keep it in the kernel's set; a ring member that is closed leaves, as a
//! kernel ring's last descriptor does.
//!
//! Several rings stay with the kernel's epoll: the one call that waits on several futexes,
//! futex_waitv, is restarted after a signal handler installed with SA_RESTART (glibc's
//! `signal`), where epoll_wait returns EINTR, and a loader waiting without timeout would no
//! longer see its Ctrl-C.

use std::collections::{HashMap, HashSet};
use std::ffi::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::objects::{lookup, Object};
use uebpf_maps::Consumable;

const PLAIN_INTEREST: u32 = !((libc::EPOLLET | libc::EPOLLONESHOT | libc::EPOLLEXCLUSIVE | libc::EPOLLWAKEUP) as u32);
/// What a ring ever reports, as the kernel's ring buffer poll: readable.
const RING_READY: u32 = (libc::EPOLLIN | libc::EPOLLRDNORM) as u32;

#[derive(Clone)]
pub struct RingMember {
    fd: c_int,
    object: Arc<Object>,
    events: u32,
    data: u64,
}

#[derive(Default)]
struct Instance {
    rings: Vec<RingMember>,
    mixed: HashSet<c_int>,
}

static INSTANCES: Mutex<Option<HashMap<c_int, Instance>>> = Mutex::new(None);
/// Instances followed: lets `close` skip the lock while there are none.
static FOLLOWED: AtomicUsize = AtomicUsize::new(0);

fn instances() -> MutexGuard<'static, Option<HashMap<c_int, Instance>>> {
    INSTANCES.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A new epoll instance `epfd` (empty).
pub fn created(epfd: c_int) {
    if instances().get_or_insert_with(HashMap::new).insert(epfd, Instance::default()).is_none() {
        FOLLOWED.fetch_add(1, Ordering::Release);
    }
}

/// Removes `fd` from the instance's rings; the caller drops what it returns once the lock is
/// released (the last reference to an object may close descriptors, which lands in our `close`).
fn remove_ring(instance: &mut Instance, fd: c_int) -> Vec<RingMember> {
    let (left, kept) = std::mem::take(&mut instance.rings).into_iter().partition(|member| member.fd == fd);
    instance.rings = kept;
    left
}

/// A successful `epoll_ctl(epfd, op, fd, event)`.
pub fn controlled(epfd: c_int, op: c_int, fd: c_int, event: Option<libc::epoll_event>) {
    let ring = lookup(fd).filter(|object| matches!(&**object, Object::Map(map) if map.map.ringbuf().is_some()));
    let mut guard = instances();
    let Some(instance) = guard.as_mut().and_then(|all| all.get_mut(&epfd)) else { return };
    let _left = remove_ring(instance, fd);
    instance.mixed.remove(&fd);
    match (op, event, ring) {
        (libc::EPOLL_CTL_DEL, _, _) | (_, None, _) => {}
        (_, Some(event), Some(object)) if event.events & PLAIN_INTEREST == event.events => {
            instance.rings.push(RingMember { fd, object, events: event.events, data: event.u64 });
        }
        _ => {
            instance.mixed.insert(fd);
        }
    }
    drop(guard);
}

/// `close(fd)`: an instance is forgotten; a ring leaves every instance.
pub fn closed(fd: c_int) {
    if FOLLOWED.load(Ordering::Acquire) == 0 {
        return;
    }
    let mut guard = instances();
    let Some(all) = guard.as_mut() else { return };
    let instance = all.remove(&fd);
    if instance.is_some() {
        FOLLOWED.fetch_sub(1, Ordering::Release);
    }
    let left: Vec<_> = all.values_mut().flat_map(|instance| remove_ring(instance, fd)).collect();
    drop(guard);
    drop((instance, left));
}

/// The ring, if `epfd` is a followed instance whose only member is one ring.
pub fn single_ring(epfd: c_int) -> Option<RingMember> {
    if FOLLOWED.load(Ordering::Acquire) == 0 {
        return None;
    }
    let guard = instances();
    match guard.as_ref()?.get(&epfd)? {
        Instance { rings, mixed } if rings.len() == 1 && mixed.is_empty() => Some(rings[0].clone()),
        _ => None,
    }
}

/// `epoll_wait` on an instance whose only member is `member`: returns at once (no system call)
/// if a record can be read; otherwise registers as the ring's waiting consumer and sleeps on its
/// futex, looking again at uebpf_maps::sleep_for's timer (producers do not wake it for ordinary records:
/// uebpf_maps::wakeup), until a record can be read, the timeout (ms; -1 none, 0 do
/// not wait) or a signal handler (Err(EINTR), as epoll_wait).
pub fn wait(member: &RingMember, events: *mut libc::epoll_event, max: c_int, timeout: c_int) -> Result<c_int, c_int> {
    if max <= 0 {
        return Err(libc::EINVAL);
    }
    let Object::Map(map) = &*member.object else { unreachable!("members are rings") };
    let ring = map.map.ringbuf().expect("members are rings");
    let ready = member.events & RING_READY;
    let report = || -> c_int {
        if ready == 0 || !ring.has_record() {
            return 0;
        }
        // SAFETY: the caller's array holds at least one event (max > 0).
        unsafe { events.write(libc::epoll_event { events: ready, u64: member.data }) };
        1
    };
    let found = report();
    if found > 0 || timeout == 0 {
        return Ok(found);
    }
    let deadline = (timeout > 0).then(|| Instant::now() + Duration::from_millis(timeout as u64));
    let waiting = ring.waiting();
    let mut armed = waiting.armed();
    loop {
        // Registered, then the counter, then the record: a submit in between is seen or wakes.
        let seen = ring.wakeup_seq();
        if report() > 0 {
            return Ok(1);
        }
        let timer = uebpf_maps::sleep_for(armed);
        let slice = match deadline {
            None => timer,
            Some(deadline) => match deadline.checked_duration_since(Instant::now()) {
                Some(left) if !left.is_zero() => left.min(timer),
                _ => return Ok(0),
            },
        };
        ring.sleep_until_woken(seen, slice)?;
        armed = ring.arm();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::{new_fd, register, MapObject};
    use std::sync::atomic::AtomicBool;
    use uebpf_maps::ringbuf::{BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP};
    use uebpf_maps::test_support::until_in_shared_futex_wait;
    use uebpf_maps::{MapDef, Region, RegionSpec};

    fn ring_object() -> (c_int, Arc<uebpf_maps::Map>) {
        let region = Region::create_anonymous(RegionSpec::with_arena(1 << 20)).unwrap();
        let def = MapDef { map_type: uebpf_maps::def::BPF_MAP_TYPE_RINGBUF, max_entries: 4096, ..Default::default() };
        let map = Arc::new(region.map(region.create_map("ring", &def, None).unwrap()).unwrap());
        let object = MapObject { id: 1, map: Arc::clone(&map), frozen: AtomicBool::new(false), bridge: None };
        (register(new_fd().unwrap(), Object::Map(object)), map)
    }

    fn interest(events: c_int, data: u64) -> Option<libc::epoll_event> {
        Some(libc::epoll_event { events: events as u32, u64: data })
    }

    /// A followed instance `epfd` whose only member is a new ring (data 42).
    fn one_ring_instance(epfd: c_int) -> (c_int, Arc<uebpf_maps::Map>, RingMember) {
        let (fd, map) = ring_object();
        created(epfd);
        controlled(epfd, libc::EPOLL_CTL_ADD, fd, interest(libc::EPOLLIN, 42));
        (fd, map, single_ring(epfd).unwrap())
    }

    fn poll(member: &RingMember, timeout: c_int) -> Result<(c_int, u64), c_int> {
        let mut event = libc::epoll_event { events: 0, u64: 0 };
        wait(member, &mut event, 1, timeout).map(|n| (n, if n > 0 { event.u64 } else { 0 }))
    }

    #[test]
    fn only_an_instance_of_exactly_one_plain_ring_waits_on_the_futex() {
        let (ring, _map) = ring_object();
        let (other, epfd) = (new_fd().unwrap(), 1_000_001);
        assert!(single_ring(epfd).is_none(), "not created here: not followed");
        created(epfd);
        controlled(epfd, libc::EPOLL_CTL_ADD, ring, interest(libc::EPOLLIN, 7));
        assert_eq!(single_ring(epfd).map(|m| m.data), Some(7));
        controlled(epfd, libc::EPOLL_CTL_ADD, other, interest(libc::EPOLLIN, 8));
        assert!(single_ring(epfd).is_none(), "mixed with another descriptor");
        controlled(epfd, libc::EPOLL_CTL_DEL, other, None);
        assert!(single_ring(epfd).is_some(), "the other one left");
        controlled(epfd, libc::EPOLL_CTL_MOD, ring, interest(libc::EPOLLIN | libc::EPOLLET, 7));
        assert!(single_ring(epfd).is_none(), "edge-triggered: the kernel's epoll decides");
        controlled(epfd, libc::EPOLL_CTL_MOD, ring, interest(libc::EPOLLIN, 9));
        assert_eq!(single_ring(epfd).map(|m| m.data), Some(9));
        closed(ring);
        assert!(single_ring(epfd).is_none(), "a closed ring leaves");
        closed(epfd);
        controlled(epfd, libc::EPOLL_CTL_ADD, other, interest(libc::EPOLLIN, 8));
        assert!(single_ring(epfd).is_none(), "a closed instance is forgotten");
    }

    #[test]
    fn the_wait_sleeps_behind_a_busy_record_until_its_submit_and_finds_a_silent_one_by_its_timer() {
        let epfd = 1_000_002;
        let (fd, map, member) = one_ring_instance(epfd);
        let ring = map.ringbuf().unwrap();
        assert_eq!(poll(&member, 0), Ok((0, 0)), "empty");
        let started = Instant::now();
        assert_eq!(poll(&member, 30), Ok((0, 0)));
        assert!(started.elapsed() >= Duration::from_millis(30), "slept out its timeout");
        // SAFETY: gettid has no preconditions.
        let consumer = unsafe { libc::gettid() };
        // The submit (or output) must find the consumer asleep: the path under test.
        let after_the_consumer_sleeps = |act: Box<dyn FnOnce(&uebpf_maps::ringbuf::RingBuf) + Send>| {
            let map = Arc::clone(&map);
            std::thread::spawn(move || {
                until_in_shared_futex_wait(consumer, Duration::from_secs(10));
                act(map.ringbuf().unwrap());
            })
        };
        // Written in place: larger than the records uebpf stages (never busy in the ring).
        let record = ring.reserve(uebpf_maps::ringbuf::STAGED_MAX + 8);
        assert_eq!(poll(&member, 0), Ok((0, 0)), "a record being written is not readable yet");
        let seen = ring.wakeup_seq();
        let record = record as usize;
        let submitter = after_the_consumer_sleeps(Box::new(move |ring| ring.commit(record as *mut u8, 0, false)));
        assert_eq!(poll(&member, -1), Ok((1, 42)), "the consumer asleep behind the busy record");
        submitter.join().unwrap();
        assert_eq!(ring.wakeup_seq(), seen + 1, "was woken by its submit");
        assert_eq!(ring.consume(|_| {}), 1);
        // A record that wakes nobody (BPF_RB_NO_WAKEUP): whether an ordinary one would wake the
        // consumer depends on how its sleep was armed (a first record after an idle sleep does:
        // maps' tests), which a thread here cannot choose; this one is found by the timer alone.
        // SAFETY (both closures): 8 readable bytes.
        let producer =
            after_the_consumer_sleeps(Box::new(|ring| unsafe { ring.output(b"record!!".as_ptr(), 8, BPF_RB_NO_WAKEUP) }.unwrap()));
        assert_eq!(poll(&member, -1), Ok((1, 42)), "the sleeping consumer's timer found the record");
        producer.join().unwrap();
        assert_eq!(ring.wakeup_seq(), seen + 1, "the producer made no wakeup");
        assert_eq!(ring.consume(|_| {}), 1);
        // SAFETY: 8 readable bytes.
        unsafe { ring.output(b"record!!".as_ptr(), 8, BPF_RB_FORCE_WAKEUP) }.unwrap();
        assert_eq!(ring.wakeup_seq(), seen + 1, "nobody waiting: no wakeup, even forced");
        assert_eq!(poll(&member, -1), Ok((1, 42)), "ready: no wait");
        closed(epfd);
        closed(fd);
    }

    extern "C" fn ignore(_: c_int) {}

    #[test]
    fn a_signal_handler_ends_the_wait_with_eintr_even_under_sa_restart() {
        let epfd = 1_000_003;
        let (fd, _map, member) = one_ring_instance(epfd);
        // SAFETY: a handler that does nothing, for SIGUSR2 of this test process.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = ignore as extern "C" fn(c_int) as usize;
            action.sa_flags = libc::SA_RESTART;
            libc::sigaction(libc::SIGUSR2, &action, std::ptr::null_mut());
        }
        let (sender, receiver) = std::sync::mpsc::channel();
        let waiter = std::thread::spawn(move || {
            // SAFETY: pthread_self and gettid have no preconditions.
            sender.send(unsafe { (libc::pthread_self() as usize, libc::gettid()) }).unwrap();
            poll(&member, -1)
        });
        let (thread, tid) = receiver.recv().unwrap();
        // A signal before the wait would be handled and forgotten, and the wait never end.
        until_in_shared_futex_wait(tid, Duration::from_secs(10));
        // SAFETY: the waiter thread is alive until it returns, which needs this signal.
        unsafe { libc::pthread_kill(thread as libc::pthread_t, libc::SIGUSR2) };
        assert_eq!(waiter.join().unwrap(), Err(libc::EINTR));
        closed(epfd);
        closed(fd);
    }
}
