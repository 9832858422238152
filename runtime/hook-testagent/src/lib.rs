//! LD_PRELOAD test agent for the hook engine's torture tests (tests/test_hook.py) and its
//! per-hit benchmark (scripts/hook_bench.py). Not the uebpf agent: no region, no programs.
//!
//! Environment:
//! * `UEBPF_HOOK_TEST_PROBES`: comma-separated `entry:BINARY:SYMBOL` or `return:BINARY:SYMBOL`
//!   (SYMBOL may be a `0x` file offset), attached from a constructor before main.
//! * `UEBPF_HOOK_TEST_LATE_PROBES`: the same, attached when the victim calls
//!   `uebpf_hook_test_attach_late()` (while its threads run).
//! * `uebpf_hook_test_snapshot()`, called by a victim, records every probe's hit count at that
//!   moment (`snapshot` in the summary): the hits of a window the victim controls.
//! * `UEBPF_HOOK_TEST_HANDLER`: `record` (default) or `count` (the benchmark's probe: it only
//!   counts hits, as the kernel benchmark's program does, so a run proves its probe fired).
//! * `UEBPF_HOOK_TEST_OUT`: a folder; each process (the parent and every forked child) writes
//!   `summary.PID.json` there at exit: per probe the hits, the hits by pid, the distinct
//!   thread ids, the sums of arguments 1-8 (6 registers and 2 stack slots) or of the return
//!   values, the engine's counters and how the patch was written; and every refusal's message.

mod record;
mod summary;

use std::ffi::c_void;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Mutex;

use uebpf_hook::{resolve, Hook, Location, Promises, PtRegs};

use record::Record;

struct Attached {
    spec: String,
    kind: &'static str,
    hook: Hook,
    record: &'static Record,
}

struct Agent {
    attached: Vec<Attached>,
    refused: Vec<(String, String)>,
}

static AGENT: Mutex<Agent> = Mutex::new(Agent { attached: Vec::new(), refused: Vec::new() });

#[used]
#[link_section = ".init_array"]
static CONSTRUCTOR: extern "C" fn() = start;

extern "C" fn start() {
    if std::env::var_os("UEBPF_HOOK_TEST_OUT").is_some() {
        unsafe { libc::atexit(write_summary) };
    }
    attach_from("UEBPF_HOOK_TEST_PROBES");
}

/// Called by the victim (a weak symbol there) to attach probes while its threads run.
#[no_mangle]
pub extern "C" fn uebpf_hook_test_attach_late() {
    attach_from("UEBPF_HOOK_TEST_LATE_PROBES");
}

/// Called by the victim (a weak symbol there): every probe's hits now go to its `snapshot`.
#[no_mangle]
pub extern "C" fn uebpf_hook_test_snapshot() {
    let agent = AGENT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    for probe in &agent.attached {
        probe.record.snapshot.store(probe.record.hits.load(Ordering::SeqCst), Ordering::SeqCst);
    }
}

extern "C" fn write_summary() {
    let agent = AGENT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let out = std::env::var_os("UEBPF_HOOK_TEST_OUT").expect("checked at start");
    let path = Path::new(&out).join(format!("summary.{}.json", std::process::id()));
    if let Err(e) = std::fs::write(&path, summary::render(&agent)) {
        eprintln!("uebpf-hook-testagent: cannot write {}: {e}", path.display());
    }
}

fn attach_from(variable: &str) {
    let Ok(specs) = std::env::var(variable) else { return };
    let count_only = std::env::var("UEBPF_HOOK_TEST_HANDLER").as_deref() == Ok("count");
    let mut agent = AGENT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    for spec in specs.split(',').filter(|s| !s.is_empty()) {
        match attach(spec, count_only) {
            Ok(attached) => agent.attached.push(attached),
            Err(message) => {
                eprintln!("uebpf-hook-testagent: {message}");
                agent.refused.push((spec.to_string(), message));
            }
        }
    }
}

fn attach(spec: &str, count_only: bool) -> Result<Attached, String> {
    let malformed = || format!("malformed probe {spec:?}: want entry|return:BINARY:SYMBOL");
    let (kind, rest) = spec.split_once(':').ok_or_else(malformed)?;
    let (binary, location) = rest.rsplit_once(':').ok_or_else(malformed)?;
    let target = resolve(Path::new(binary), &Location::parse(location)).map_err(|e| e.to_string())?;
    let record: &'static Record = Box::leak(Box::default());
    let data = record as *const Record as *mut c_void;
    // Neither handler changes ip or sp; the counting one, machine code of four instructions,
    // leaves the vectors alone too. A site whose only probe is an entry probe then runs it
    // from its stub (the engine's direct path), and so does a site's only return probe; the
    // others run through the dispatcher.
    let recording = Promises { keeps_course: true, keeps_vectors: false };
    let counting = Promises { keeps_course: true, keeps_vectors: true };
    let (kind, hook) = match (kind, count_only) {
        ("entry", false) => ("entry", Hook::entry_with(&target, on_entry, data, recording)),
        ("return", false) => ("return", Hook::ret(&target, on_return, data)),
        ("entry", true) => ("entry", Hook::entry_with(&target, on_count, data, counting)),
        ("return", true) => ("return", Hook::ret_with(&target, on_count, data, counting)),
        _ => return Err(malformed()),
    };
    let hook = hook.map_err(|e| e.to_string())?;
    Ok(Attached { spec: spec.to_string(), kind, hook, record })
}

unsafe extern "C" fn on_entry(regs: *mut PtRegs, data: *mut c_void) {
    let regs = &*regs;
    let stack = regs.sp as *const u64; // [sp] is the return address, then arguments 7, 8
    let args = regs.args();
    let values = [args[0], args[1], args[2], args[3], args[4], args[5], *stack.add(1), *stack.add(2)];
    (*(data as *const Record)).hit(&values);
}

unsafe extern "C" fn on_return(regs: *mut PtRegs, data: *mut c_void) {
    (*(data as *const Record)).hit(&[(*regs).ax]);
}

// Counts without a locked instruction (exact for the single-threaded benchmark victim), in
// machine code so that it provably leaves the xmm registers alone (`Promises::keeps_vectors`):
// compiled Rust gives no such promise.
std::arch::global_asm!(
    ".text",
    ".p2align 4",
    "uebpf_hook_test_count:",
    "mov rax, qword ptr [rsi + {hits}]",
    "add rax, 1",
    "mov qword ptr [rsi + {hits}], rax",
    "ret",
    hits = const std::mem::offset_of!(Record, hits),
);

extern "C" {
    /// `Handler`: adds one to the `hits` of the `Record` that `data` points at.
    #[link_name = "uebpf_hook_test_count"]
    fn on_count(regs: *mut PtRegs, data: *mut c_void);
}
