//! One region, several processes: concurrent hash updates lose nothing, and a ring buffer
//! filled by one process and drained by another keeps every record, in order, counting the ones
//! a full ring refused (never overwriting unread ones). The other processes are `uebpf exec`.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use uebpf::{Engine, Instance, Object, PtRegs, Target};

use common::object;

fn load_stress(test: &str) -> (Instance, String) {
    let name = format!("test-{test}-{}", std::process::id());
    let instance = Object::open(object("uebpf_stress")).unwrap().load(Target::Named(&name)).unwrap();
    (instance, name)
}

fn exec(region: &str, program: &str, engine: &str, regs: &str, repeat: u64) -> Child {
    Command::new(env!("CARGO_BIN_EXE_uebpf"))
        .args(["exec", region, program, "--engine", engine, "--regs", regs, "--repeat", &repeat.to_string()])
        .stdout(Stdio::null())
        .spawn()
        .expect("uebpf exec starts")
}

fn finish(mut child: Child) {
    assert!(child.wait().unwrap().success(), "uebpf exec failed");
}

fn u64_value(instance: &Instance, map: &str, key: &[u8]) -> u64 {
    let map = instance.map(map).unwrap();
    let mut value = vec![0u8; map.syscall_value_size()];
    map.lookup(key, &mut value).unwrap();
    u64::from_ne_bytes(value[..8].try_into().unwrap())
}

#[test]
fn concurrent_hash_updates_from_several_processes_lose_nothing() {
    let (instance, region) = load_stress("counts");
    const N: u64 = 100_000;
    // Two processes race on key 3 (including its first insertion), a third counts key 5.
    let children = [
        exec(&region, "count", "jit", "di=3", N),
        exec(&region, "count", "interpreter", "di=3", N),
        exec(&region, "count", "jit", "di=5", N),
    ];
    children.into_iter().for_each(finish);
    assert_eq!(u64_value(&instance, "counts", &3u32.to_ne_bytes()), 2 * N);
    assert_eq!(u64_value(&instance, "counts", &5u32.to_ne_bytes()), N);
    assert_eq!(instance.map("counts").unwrap().keys().len(), 2);
}

#[derive(Debug)]
struct Received {
    attempts: Vec<u64>,
    pids: Vec<u32>,
}

fn decode(record: &[u8], into: &mut Received) {
    into.attempts.push(u64::from_ne_bytes(record[..8].try_into().unwrap()));
    into.pids.push(u32::from_ne_bytes(record[8..12].try_into().unwrap()));
}

#[test]
fn a_ring_filled_by_one_process_and_drained_by_another_keeps_every_record_in_order() {
    let (instance, region) = load_stress("stream");
    let ring = instance.map("stream").unwrap().ringbuf().unwrap();
    const N: u64 = 200_000;
    let mut producer = exec(&region, "produce", "jit", "di=0", N);
    let producer_pid = producer.id();
    let mut received = Received { attempts: Vec::new(), pids: Vec::new() };
    loop {
        ring.consume(|r| decode(r, &mut received));
        if producer.try_wait().unwrap().is_some() {
            break;
        }
        ring.wait(Duration::from_millis(10));
    }
    ring.consume(|r| decode(r, &mut received));
    finish(producer);

    let dropped = ring.dropped();
    assert!(received.attempts.windows(2).all(|w| w[0] < w[1]), "records arrive in the order they were produced");
    assert_eq!(received.attempts.len() as u64 + dropped, N, "every attempt is either received or counted as dropped");
    assert_eq!(u64_value(&instance, ".bss", &0u32.to_ne_bytes()), N, "attempts");
    let failed = {
        let bss = instance.map(".bss").unwrap();
        let mut value = vec![0u8; 16];
        bss.lookup(&0u32.to_ne_bytes(), &mut value).unwrap();
        u64::from_ne_bytes(value[8..].try_into().unwrap())
    };
    assert_eq!(failed, dropped, "the program's count of failed reservations is the ring's");
    let gaps: u64 = received.attempts.windows(2).map(|w| w[1] - w[0] - 1).sum::<u64>() + received.attempts[0] - 1
        + (N - received.attempts.last().unwrap());
    assert_eq!(gaps, dropped, "the missing attempts are exactly the dropped ones");
    assert!(received.pids.iter().all(|&pid| pid == producer_pid), "records carry the producer's pid");
}

#[test]
fn a_full_ring_refuses_new_records_and_keeps_the_unread_ones() {
    let (instance, _region) = load_stress("full");
    let program = instance.program("produce", Engine::Jit).unwrap();
    for _ in 0..1000 {
        program.run(PtRegs::default().as_bytes_mut()).unwrap();
    }
    let ring = instance.map("stream").unwrap().ringbuf().unwrap();
    let mut received = Received { attempts: Vec::new(), pids: Vec::new() };
    ring.consume(|r| decode(r, &mut received));
    // 24-byte records (8-byte header + 16): the kernel's rule admits 170 in 4096 bytes.
    assert_eq!(received.attempts, (1..=170).collect::<Vec<u64>>(), "the first records survive, none overwritten");
    assert_eq!(ring.dropped(), 1000 - 170);
}
