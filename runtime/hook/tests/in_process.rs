//! The hook engine on functions of this test binary (a PIE executable) and of libc.
//! cargo runs these tests on several threads, so most attaches are live patches behind a barrier.

use std::ffi::c_void;
use std::hint::black_box;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};

mod common;
use common::libc_path;
use uebpf_hook::{check, resolve, resolve_address, ErrorKind, Hook, Location, PatchKind, PtRegs, Target};

// Shapes that must be exact, so they are written in assembly (System V, Intel syntax).
std::arch::global_asm!(
    // A RIP-relative load as the first instruction (7 bytes).
    ".globl hook_test_rip_load", ".type hook_test_rip_load,@function", "hook_test_rip_load:",
    "mov rax, qword ptr [rip + {global}]", "add rax, rdi", "ret",
    ".size hook_test_rip_load, .-hook_test_rip_load",
    // A rel8 conditional branch inside the patch: relocated as rel32.
    ".globl hook_test_short_branch", ".type hook_test_short_branch,@function", "hook_test_short_branch:",
    "test rdi, rdi", "jz 2f", "lea rax, [rdi + 1]", "ret", "2:", "mov rax, 100", "ret",
    ".size hook_test_short_branch, .-hook_test_short_branch",
    // Three bytes long: refused.
    ".globl hook_test_tiny", ".type hook_test_tiny,@function", "hook_test_tiny:",
    "xor eax, eax", "ret",
    ".size hook_test_tiny, .-hook_test_tiny",
    // A loop back to byte 2, inside the patch: refused.
    ".globl hook_test_into_patch", ".type hook_test_into_patch,@function", "hook_test_into_patch:",
    "xor eax, eax", "3:", "add rax, rdi", "dec rdi", "jnz 3b", "ret",
    ".size hook_test_into_patch, .-hook_test_into_patch",
    // A loop back to the first instruction: accepted, the probe fires on every pass.
    ".globl hook_test_loop_to_start", ".type hook_test_loop_to_start,@function", "hook_test_loop_to_start:",
    "test rdi, rdi", "jz 4f", "add rsi, rdi", "dec rdi", "jmp hook_test_loop_to_start", "4:", "mov rax, rsi", "ret",
    ".size hook_test_loop_to_start, .-hook_test_loop_to_start",
    // A leaf that changes neither flags nor registers but rax, and a caller that sets the flags
    // to `rdi` (popfq), calls it, and returns the flags it finds afterwards (DF cleared again).
    ".globl hook_test_flag_leaf", ".type hook_test_flag_leaf,@function", "hook_test_flag_leaf:",
    "lea rax, [rdi + 1]", "nop", "ret",
    ".size hook_test_flag_leaf, .-hook_test_flag_leaf",
    ".globl hook_test_flags_across_call", ".type hook_test_flags_across_call,@function", "hook_test_flags_across_call:",
    "sub rsp, 8", "push rdi", "popfq", "call hook_test_flag_leaf", "pushfq", "pop rax", "cld", "add rsp, 8", "ret",
    ".size hook_test_flags_across_call, .-hook_test_flags_across_call",
    // A function that blocks in a system call at byte 1 of its patch: hook_test_read(fd, buf, n)
    // calls read(fd, buf, n) from there and returns its result.
    ".globl hook_test_blocker", ".type hook_test_blocker,@function", "hook_test_blocker:",
    "push rbp", "syscall", "pop rbp", "nop", "nop", "ret",
    ".size hook_test_blocker, .-hook_test_blocker",
    ".globl hook_test_read", ".type hook_test_read,@function", "hook_test_read:",
    "xor eax, eax", "call hook_test_blocker", "ret",
    ".size hook_test_read, .-hook_test_read",
    // A get-PC idiom as the first instruction: returns 0 when the call pushed its own address.
    ".globl hook_test_get_pc", ".type hook_test_get_pc,@function", "hook_test_get_pc:",
    "call 5f", "5:", "pop rax", "lea rdx, [rip + 5b]", "sub rax, rdx", "ret",
    ".size hook_test_get_pc, .-hook_test_get_pc",
    // A call from byte 1 that returns to byte 4, inside the jump's bytes:
    // hook_test_read_early(fd, buf, n) reads through hook_test_sys_read, called from there.
    ".globl hook_test_call_early", ".type hook_test_call_early,@function", "hook_test_call_early:",
    "push rbp", "call r11", "pop rbp", "ret",
    ".size hook_test_call_early, .-hook_test_call_early",
    ".globl hook_test_sys_read", ".type hook_test_sys_read,@function", "hook_test_sys_read:",
    "xor eax, eax", "syscall", "ret",
    ".size hook_test_sys_read, .-hook_test_sys_read",
    ".globl hook_test_read_early", ".type hook_test_read_early,@function", "hook_test_read_early:",
    "lea r11, [rip + hook_test_sys_read]", "jmp hook_test_call_early",
    ".size hook_test_read_early, .-hook_test_read_early",
    // tgkill(rdi, rsi, rdx) from byte 1: the signal's frame saves ip = byte 3, inside the jump.
    ".globl hook_test_signalled", ".type hook_test_signalled,@function", "hook_test_signalled:",
    "push rbp", "syscall", "pop rbp", "ret",
    ".size hook_test_signalled, .-hook_test_signalled",
    ".globl hook_test_raise", ".type hook_test_raise,@function", "hook_test_raise:",
    "mov eax, 234", "jmp hook_test_signalled",
    ".size hook_test_raise, .-hook_test_raise",
    // An indirect jump back to byte 2 (a switch's jump does the same): returns max(n, 1).
    ".globl hook_test_indirect", ".type hook_test_indirect,@function", "hook_test_indirect:",
    "xor eax, eax", "6:", "inc eax", "dec rdi", "jle 7f", "lea rcx, [rip + 6b]", "jmp rcx", "7:", "ret",
    ".size hook_test_indirect, .-hook_test_indirect",
    // One byte, and three returning the first argument.
    ".globl hook_test_ret", ".type hook_test_ret,@function", "hook_test_ret:",
    "ret",
    ".size hook_test_ret, .-hook_test_ret",
    ".globl hook_test_identity", ".type hook_test_identity,@function", "hook_test_identity:",
    "mov eax, edi", "ret",
    ".size hook_test_identity, .-hook_test_identity",
    // No .size: the symbol's size is 0.
    ".globl hook_test_unsized", ".type hook_test_unsized,@function", "hook_test_unsized:",
    "lea rax, [rdi + 2]", "ret",
    global = sym HOOK_TEST_GLOBAL,
);

#[no_mangle]
static HOOK_TEST_GLOBAL: u64 = 1000;

// Switches through jump tables, as gcc emits them for position-independent code: the bound's
// `cmp` and `ja`, then `lea` of the table, a 4-byte offset loaded and added, `jmp`. The table
// entries are judged. hook_test_switch(k) returns 10, 20, 30 for k = 0, 1, 2 (else 0); its
// cases land past the patch. hook_test_switch_into's case 1 lands on byte 2: refused the jump.
std::arch::global_asm!(
    ".globl hook_test_switch",
    ".type hook_test_switch,@function",
    "hook_test_switch:",
    "xor eax, eax",
    "mov edx, edi",
    "cmp dl, 2",
    "ja 19f",
    "lea rcx, [rip + 18f]",
    "movzx edx, dl",
    "movsxd rdx, dword ptr [rcx + rdx*4]",
    "add rdx, rcx",
    "jmp rdx",
    "10:",
    "mov eax, 10",
    "ret",
    "11:",
    "mov eax, 20",
    "ret",
    "12:",
    "mov eax, 30",
    "19:",
    "ret",
    ".size hook_test_switch, .-hook_test_switch",
    ".globl hook_test_switch_into",
    ".type hook_test_switch_into,@function",
    "hook_test_switch_into:",
    "xor eax, eax",
    "13:",
    "add eax, 1",
    "cmp edi, 2",
    "ja 14f",
    "lea rcx, [rip + 17f]",
    "mov edi, edi",
    "movsxd rdx, dword ptr [rcx + rdi*4]",
    "add rdx, rcx",
    "jmp rdx",
    "14:",
    "ret",
    ".size hook_test_switch_into, .-hook_test_switch_into",
    ".section .rodata",
    ".p2align 2",
    "18:",
    ".long 10b - 18b",
    ".long 11b - 18b",
    ".long 12b - 18b",
    "17:",
    ".long 14b - 17b",
    ".long 13b - 17b",
    ".long 14b - 17b",
    ".text",
);

// Not code: bytes no x86-64 decoder accepts, in a function symbol (refused).
std::arch::global_asm!(
    ".globl HOOK_TEST_UNDECODABLE",
    ".type HOOK_TEST_UNDECODABLE,@function",
    "HOOK_TEST_UNDECODABLE:",
    ".byte 0x06, 0x06, 0x06, 0x06, 0x06, 0x06",
    ".size HOOK_TEST_UNDECODABLE, .-HOOK_TEST_UNDECODABLE",
);

extern "C" {
    fn hook_test_rip_load(x: u64) -> u64;
    fn hook_test_switch(k: u64) -> u64;
    fn hook_test_short_branch(x: u64) -> u64;
    fn hook_test_tiny() -> u64;
    fn hook_test_into_patch(n: u64) -> u64;
    fn hook_test_loop_to_start(n: u64, acc: u64) -> u64;
    fn hook_test_flags_across_call(flags: u64) -> u64;
    fn hook_test_read(fd: i32, buf: *mut u8, len: usize) -> i64;
    fn hook_test_get_pc() -> u64;
    fn hook_test_read_early(fd: i32, buf: *mut u8, len: usize) -> i64;
    fn hook_test_raise(tgid: i32, tid: i32, signal: i32) -> i64;
    fn hook_test_indirect(n: u64) -> u64;
    fn hook_test_ret();
    fn hook_test_identity(x: u32) -> u32;
    fn hook_test_unsized(x: u64) -> u64;
}

#[no_mangle]
#[inline(never)]
#[allow(clippy::identity_op)] // `a * 1`: each argument weighted by its position, the first too
extern "C" fn hook_test_seven(a: u64, b: u64, c: u64, d: u64, e: u64, f: u64, g: u64) -> u64 {
    black_box(a * 1 + b * 2 + c * 3 + d * 4 + e * 5 + f * 6 + g * 7)
}

#[no_mangle]
#[inline(never)]
extern "C" fn hook_test_recurse(n: u64) -> u64 {
    if n == 0 {
        return 1;
    }
    black_box(hook_test_recurse(black_box(n - 1)) ^ n)
}

#[no_mangle]
#[inline(never)]
extern "C" fn hook_test_hammer(x: u64) -> u64 {
    black_box(x.wrapping_mul(31) + 7)
}

#[no_mangle]
#[inline(never)]
extern "C" fn hook_test_without_probes(x: u64) -> u64 {
    black_box(x.wrapping_mul(37) + 11)
}

#[no_mangle]
#[inline(never)]
extern "C" fn hook_test_nested(x: u64) -> u64 {
    black_box(x.wrapping_mul(41) + 13)
}

fn this_binary(symbol: &str) -> Target {
    resolve(Path::new("/proc/self/exe"), &Location::Symbol(symbol.into())).unwrap()
}

/// A counter a handler adds to: data points at a Record.
#[derive(Default)]
struct Record {
    hits: AtomicU64,
    sum: AtomicU64,
    last_ip: AtomicU64,
    last_sp: AtomicU64,
}

impl Record {
    fn hit(&self, regs: &PtRegs, value: u64) {
        self.hits.fetch_add(1, SeqCst);
        self.sum.fetch_add(value, SeqCst);
        self.last_ip.store(regs.ip, SeqCst);
        self.last_sp.store(regs.sp, SeqCst);
    }
}

unsafe extern "C" fn count_first_arg(regs: *mut PtRegs, data: *mut c_void) {
    (*(data as *const Record)).hit(&*regs, (*regs).di);
}

unsafe extern "C" fn count_return(regs: *mut PtRegs, data: *mut c_void) {
    (*(data as *const Record)).hit(&*regs, (*regs).ax);
}

unsafe extern "C" fn seventh_argument(regs: *mut PtRegs, data: *mut c_void) {
    let record = &*(data as *const Record);
    let args = (*regs).args();
    let seventh = *((*regs).sp as *const u64).add(1);
    record.hits.fetch_add(1, SeqCst);
    record.sum.store(args.iter().sum::<u64>() + seventh, SeqCst);
}

/// Whether a patch was written while other threads ran: behind an int3, or behind the self-loop
/// when a thread blocked SIGTRAP at that moment (glibc blocks every signal while another test
/// creates a thread).
fn is_live(patch: Option<uebpf_hook::PatchMethod>) -> bool {
    matches!(patch, Some(uebpf_hook::PatchMethod::Int3 | uebpf_hook::PatchMethod::SelfLoop))
}

fn leak(record: Record) -> (&'static Record, *mut c_void) {
    let record: &'static Record = Box::leak(Box::new(record));
    (record, record as *const Record as *mut c_void)
}

#[test]
fn resolves_libc_symbols_as_the_dynamic_linker_does() {
    let address = resolve_address(&libc_path(), "getpid").unwrap();
    assert_eq!(address, libc::getpid as *const () as usize);
}

#[test]
fn resolves_file_offsets_inside_functions() {
    let target = this_binary("hook_test_hammer");
    let by_symbol = target.address;
    // The file offset of the symbol, from the mapping that holds it.
    let line = std::fs::read_to_string("/proc/self/maps").unwrap().lines().map(str::to_string).find(|line| {
        let range = line.split_whitespace().next().unwrap();
        let (start, end) = range.split_once('-').unwrap();
        (usize::from_str_radix(start, 16).unwrap()..usize::from_str_radix(end, 16).unwrap()).contains(&by_symbol)
    });
    let line = line.unwrap();
    let fields: Vec<&str> = line.split_whitespace().collect();
    let start = usize::from_str_radix(fields[0].split('-').next().unwrap(), 16).unwrap();
    let file_offset = (by_symbol - start) as u64 + u64::from_str_radix(fields[2], 16).unwrap();
    let by_offset = resolve(Path::new("/proc/self/exe"), &Location::FileOffset(file_offset)).unwrap();
    assert_eq!(by_offset.address, by_symbol);
    assert_eq!(by_offset.function, target.function);
}

#[test]
fn file_offsets_and_mappings_without_hooking() {
    let exe = std::fs::canonicalize("/proc/self/exe").unwrap();
    let by_symbol = uebpf_hook::file_offset(&exe, &Location::Symbol("hook_test_hammer".into())).unwrap();
    let by_offset = resolve(&exe, &Location::FileOffset(by_symbol)).unwrap();
    assert_eq!(by_offset.address, this_binary("hook_test_hammer").address, "the offset libbpf would compute");
    assert_eq!(uebpf_hook::file_offset(&exe, &Location::FileOffset(0x1234)).unwrap(), 0x1234);
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(&exe).unwrap();
    assert!(uebpf_hook::is_mapped_executable(meta.dev(), meta.ino()).unwrap());
    let other = std::fs::metadata("/bin/true").unwrap();
    assert!(!uebpf_hook::is_mapped_executable(other.dev(), other.ino()).unwrap());
}

#[test]
fn without_probes_skips_this_threads_hits() {
    let target = this_binary("hook_test_without_probes");
    let (record, data) = leak(Record::default());
    let hook = Hook::entry(&target, count_first_arg, data).unwrap();
    uebpf_hook::without_probes(|| hook_test_without_probes(1));
    assert_eq!(record.hits.load(SeqCst), 0);
    assert_eq!(hook.stats().skipped, 1);
    hook_test_without_probes(2);
    assert_eq!(record.hits.load(SeqCst), 1, "probes run again afterwards");
}

#[test]
fn bad_locations_are_clear_errors() {
    let missing = resolve(Path::new("/proc/self/exe"), &Location::Symbol("no_such_function".into())).unwrap_err();
    assert_eq!(missing.kind, ErrorKind::Resolve);
    assert!(missing.message.contains("no function symbol no_such_function"), "{missing}");
    let data = resolve(Path::new("/proc/self/exe"), &Location::Symbol("HOOK_TEST_GLOBAL".into())).unwrap_err();
    assert!(data.message.contains("not a function"), "{data}");
    let unmapped = resolve(Path::new("/bin/true"), &Location::Symbol("main".into()));
    assert!(unmapped.is_err());
}

#[test]
fn entry_probe_sees_arguments_ip_and_sp() {
    let target = this_binary("hook_test_rip_load");
    let (record, data) = leak(Record::default());
    let hook = Hook::entry(&target, count_first_arg, data).unwrap();
    let mut expected = 0;
    for i in 0..1000u64 {
        assert_eq!(unsafe { hook_test_rip_load(black_box(i)) }, 1000 + i);
        expected += i;
    }
    assert_eq!(record.hits.load(SeqCst), 1000);
    assert_eq!(record.sum.load(SeqCst), expected);
    assert_eq!(record.last_ip.load(SeqCst), target.address as u64);
    assert_eq!(record.last_sp.load(SeqCst) % 16, 8, "sp at entry points at the return address");
    hook.detach().unwrap();
    unsafe { hook_test_rip_load(1) };
    assert_eq!(record.hits.load(SeqCst), 1000, "no hits after detach");
}

#[test]
fn short_branch_in_the_patch_is_relocated() {
    let target = this_binary("hook_test_short_branch");
    let (record, data) = leak(Record::default());
    let _hook = Hook::entry(&target, count_first_arg, data).unwrap();
    assert_eq!(unsafe { hook_test_short_branch(0) }, 100);
    assert_eq!(unsafe { hook_test_short_branch(5) }, 6);
    assert_eq!(record.hits.load(SeqCst), 2);
}

/// The int3 patch: only byte 0 changed (to int3), and `kind` is int3 for `reason`.
fn assert_int3(hook: &Hook, target: &Target, before: &[u8], reason: &str) {
    let now = unsafe { std::slice::from_raw_parts(target.address as *const u8, before.len()) };
    assert_eq!((now[0], &now[1..]), (0xcc, &before[1..]), "byte 0 only");
    match hook.kind() {
        PatchKind::Int3 { reason: why } => assert!(why.contains(reason), "{why}"),
        PatchKind::Jump => panic!("{target:?}: a jump patch, want int3 for {reason}"),
    }
}

fn code(target: &Target, len: usize) -> Vec<u8> {
    unsafe { std::slice::from_raw_parts(target.address as *const u8, len) }.to_vec()
}

/// The sum of what 100 calls of `symbol` return (1..=100 as the argument).
fn call_100(symbol: &str) -> u64 {
    (1..=100u64)
        .map(|n| unsafe {
            match symbol {
                "hook_test_tiny" => hook_test_tiny(),
                "hook_test_into_patch" => hook_test_into_patch(n),
                "hook_test_identity" => u64::from(hook_test_identity(n as u32)),
                _ => {
                    hook_test_ret();
                    0
                }
            }
        })
        .sum()
}

#[test]
fn short_functions_and_branches_into_the_patch_get_the_int3_patch() {
    for (symbol, len, reason) in [
        ("hook_test_tiny", 3, "the function is 3 bytes long: the 5-byte jump does not fit"),
        ("hook_test_into_patch", 5, "jumps to +0x2, inside the 5 patched bytes"),
        ("hook_test_ret", 1, "the function is 1 bytes long"),
        ("hook_test_identity", 3, "the function is 3 bytes long"),
    ] {
        let target = this_binary(symbol);
        let before = code(&target, len);
        let plain = call_100(symbol);
        let (entries, entry_data) = leak(Record::default());
        let (returns, return_data) = leak(Record::default());
        let entry = Hook::entry(&target, count_first_arg, entry_data).unwrap();
        let ret = Hook::ret(&target, count_return, return_data).unwrap();
        assert_int3(&entry, &target, &before, reason);
        let hooked = call_100(symbol);
        assert_eq!(hooked, plain, "{symbol} returned what it returns unhooked");
        assert_eq!((entries.hits.load(SeqCst), returns.hits.load(SeqCst)), (100, 100), "{symbol}");
        if symbol != "hook_test_ret" {
            assert_eq!(returns.sum.load(SeqCst), plain, "{symbol}: the return probe saw each return value");
        }
        ret.detach().unwrap();
        entry.detach().unwrap();
        assert_eq!(code(&target, len), before, "detach puts byte 0 back");
    }
}

#[test]
fn undecodable_code_is_refused_and_left_untouched() {
    let target = this_binary("HOOK_TEST_UNDECODABLE");
    let before = code(&target, 4);
    let error = Hook::entry(&target, count_first_arg, std::ptr::null_mut()).unwrap_err();
    assert_eq!(error.kind, ErrorKind::Refused);
    assert!(error.message.ends_with("HOOK_TEST_UNDECODABLE: cannot decode the instruction at +0x0"), "{error}");
    assert_eq!(code(&target, 4), before);
}

#[test]
fn check_judges_the_file_as_an_attach_would() {
    let exe = Path::new("/proc/self/exe");
    for (symbol, reason) in [
        ("hook_test_tiny", "the function is 3 bytes long: the 5-byte jump does not fit"),
        ("hook_test_into_patch", "at +0x8 jumps to +0x2, inside the 5 patched bytes"),
        ("hook_test_call_early", "`call r11` at +0x1 would return inside the 5 patched bytes"),
        ("hook_test_indirect", "`jmp rcx` at +0x10 may jump into the 5 patched bytes (UEBPF_HOOK_TRUST_INDIRECT_JUMPS=1"),
    ] {
        let judged = check(exe, &Location::parse(symbol), false).unwrap();
        assert!(judged.reason().contains(reason), "{symbol}: {judged:?}");
    }
    // (The attaches of these are checked against the same words by the tests that hook them.)
    // A symbol of size 0: the attach says the same, and its probe fires.
    let judged = check(exe, &Location::parse("hook_test_unsized"), false).unwrap();
    let (record, data) = leak(Record::default());
    let size_zero = Hook::entry(&this_binary("hook_test_unsized"), count_first_arg, data).unwrap();
    assert_eq!(judged, size_zero.kind());
    assert_eq!(judged.reason(), "the symbol's size is 0: its extent is unknown, only its first instruction is moved");
    assert_eq!(unsafe { hook_test_unsized(40) }, 42);
    assert_eq!((record.hits.load(SeqCst), record.sum.load(SeqCst)), (1, 40));
    let undecodable = check(exe, &Location::parse("HOOK_TEST_UNDECODABLE"), false).unwrap_err();
    assert_eq!(undecodable.kind, ErrorKind::Refused);
    for symbol in ["hook_test_rip_load", "hook_test_short_branch", "hook_test_loop_to_start", "hook_test_get_pc"] {
        assert_eq!(check(exe, &Location::parse(symbol), false).unwrap(), PatchKind::Jump, "{symbol}");
        assert_eq!(check(exe, &Location::parse(symbol), true).unwrap(), PatchKind::Jump, "{symbol}");
    }
    // Past the 7-byte first instruction of hook_test_rip_load: an entry probe's 4 bytes of room
    // are too few for the jump; a return probe is refused for its place.
    let inside = uebpf_hook::file_offset(exe, &Location::parse("hook_test_rip_load")).unwrap() + 7;
    let entry = check(exe, &Location::FileOffset(inside), false).unwrap();
    let too_short = "the function is 11 bytes long and the hook is at +0x7: the 5-byte jump does not fit";
    assert_eq!(entry.reason(), too_short);
    let ret = check(exe, &Location::FileOffset(inside), true).unwrap_err();
    assert!(ret.message.ends_with("hook_test_rip_load+0x7: a return probe must be at the function's first instruction"), "{ret}");
    let missing = check(exe, &Location::parse("no_such_function"), false).unwrap_err();
    assert_eq!(missing.kind, ErrorKind::Resolve);
    // An IFUNC's implementation is the dynamic linker's choice at run time: int3, undecoded.
    let ifunc = check(&libc_path(), &Location::parse("strlen"), false).unwrap();
    assert!(ifunc.reason().starts_with("an IFUNC"), "{ifunc:?}");
}

#[test]
fn loop_to_the_first_instruction_fires_on_every_pass() {
    let target = this_binary("hook_test_loop_to_start");
    let (entries, entry_data) = leak(Record::default());
    let (returns, return_data) = leak(Record::default());
    let _entry = Hook::entry(&target, count_first_arg, entry_data).unwrap();
    let _ret = Hook::ret(&target, count_return, return_data).unwrap();
    assert_eq!(unsafe { hook_test_loop_to_start(10, 0) }, 55);
    assert_eq!(entries.hits.load(SeqCst), 11);
    // As the kernel's chained uretprobes: one return event per entry, all with the result.
    assert_eq!(returns.hits.load(SeqCst), 11);
    assert_eq!(returns.sum.load(SeqCst), 11 * 55);
}

#[test]
fn seventh_argument_is_on_the_stack() {
    let target = this_binary("hook_test_seven");
    let (record, data) = leak(Record::default());
    let _hook = Hook::entry(&target, seventh_argument, data).unwrap();
    assert_eq!(hook_test_seven(1, 2, 3, 4, 5, 6, 7), 140);
    assert_eq!(record.hits.load(SeqCst), 1);
    assert_eq!(record.sum.load(SeqCst), 28);
}

#[test]
fn recursion_balances_entries_and_returns() {
    let target = this_binary("hook_test_recurse");
    let (entries, entry_data) = leak(Record::default());
    let (returns, return_data) = leak(Record::default());
    let expected: Vec<u64> = (0..=300)
        .scan(1u64, |acc, n| {
            if n > 0 {
                *acc ^= n;
            }
            Some(*acc)
        })
        .collect();
    let _entry = Hook::entry(&target, count_first_arg, entry_data).unwrap();
    let _ret = Hook::ret(&target, count_return, return_data).unwrap();
    assert_eq!(hook_test_recurse(black_box(300)), expected[300]);
    assert_eq!(entries.hits.load(SeqCst), 301);
    assert_eq!(returns.hits.load(SeqCst), 301);
    assert_eq!(returns.sum.load(SeqCst), expected.iter().sum::<u64>());
    let stats = _ret.stats();
    assert_eq!((stats.missed_returns, stats.stale_returns, stats.skipped), (0, 0, 0));
}

#[test]
fn threads_hammering_one_probe_are_all_counted() {
    let target = this_binary("hook_test_hammer");
    let (record, data) = leak(Record::default());
    let (returns, return_data) = leak(Record::default());
    let _hook = Hook::entry(&target, count_first_arg, data).unwrap();
    let _ret = Hook::ret(&target, count_return, return_data).unwrap();
    let threads: Vec<_> = (0..4)
        .map(|_| std::thread::spawn(|| (0..50_000u64).map(|i| hook_test_hammer(black_box(i))).fold(0u64, u64::wrapping_add)))
        .collect();
    let unhooked: u64 = (0..50_000u64).map(|i| i.wrapping_mul(31) + 7).fold(0, u64::wrapping_add);
    for thread in threads {
        assert_eq!(thread.join().unwrap(), unhooked);
    }
    assert_eq!(record.hits.load(SeqCst), 200_000);
    assert_eq!(returns.hits.load(SeqCst), 200_000);
    assert_eq!(returns.sum.load(SeqCst), unhooked.wrapping_mul(4));
}

#[test]
fn libc_functions_can_be_hooked_while_threads_run() {
    let target = resolve(&libc_path(), &Location::Symbol("getppid".into())).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let worker = common::calling_getppid(&stop);
    let (record, data) = leak(Record::default());
    let (returns, return_data) = leak(Record::default());
    let entry = Hook::entry(&target, count_first_arg, data).unwrap();
    let ret = Hook::ret(&target, count_return, return_data).unwrap();
    assert!(is_live(entry.patch), "{:?}", entry.patch);
    while record.hits.load(SeqCst) < 1000 || returns.hits.load(SeqCst) < 1000 {
        std::thread::yield_now();
    }
    ret.detach().unwrap();
    entry.detach().unwrap();
    stop.store(true, SeqCst);
    assert!(worker.join().unwrap() >= 1000);
}

#[test]
fn status_flags_and_direction_survive_entry_and_return_probes() {
    const CF: u64 = 1;
    const PF: u64 = 1 << 2;
    const AF: u64 = 1 << 4;
    const ZF: u64 = 1 << 6;
    const SF: u64 = 1 << 7;
    const DF: u64 = 1 << 10;
    const OF: u64 = 1 << 11;
    const RESERVED: u64 = 1 << 1;
    let patterns = [RESERVED, RESERVED | CF | ZF | OF, RESERVED | PF | AF | SF | DF, RESERVED | CF | PF | AF | ZF | SF | DF | OF];
    let plain: Vec<u64> = patterns.iter().map(|&f| unsafe { hook_test_flags_across_call(f) }).collect();
    let target = this_binary("hook_test_flag_leaf");
    let (record, data) = leak(Record::default());
    let (returns, return_data) = leak(Record::default());
    // A return probe alone first (the entry stub's inline push), then with an entry probe.
    let _ret = Hook::ret(&target, count_return, return_data).unwrap();
    let returns_only: Vec<u64> = patterns.iter().map(|&f| unsafe { hook_test_flags_across_call(f) }).collect();
    let _entry = Hook::entry(&target, count_first_arg, data).unwrap();
    let hooked: Vec<u64> = patterns.iter().map(|&f| unsafe { hook_test_flags_across_call(f) }).collect();
    assert_eq!((&returns_only, &hooked), (&plain, &plain));
    for (pattern, flags) in patterns.iter().zip(&hooked) {
        assert_eq!(flags & (CF | PF | AF | ZF | SF | DF | OF), pattern & !RESERVED);
    }
    assert_eq!((record.hits.load(SeqCst), returns.hits.load(SeqCst)), (4, 8));
}

#[test]
fn a_thread_blocked_inside_the_patch_keeps_the_int3_and_is_not_interrupted() {
    let target = this_binary("hook_test_blocker");
    let mut pipe = [0; 2];
    assert_eq!(unsafe { libc::pipe(pipe.as_mut_ptr()) }, 0);
    let (tid_sender, tid) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        tid_sender.send(unsafe { libc::gettid() }).unwrap();
        let mut byte = 0u8;
        let read = unsafe { hook_test_read(pipe[0], &mut byte, 1) };
        (read, byte)
    });
    // Wait until it blocks in read(2) with its next instruction at byte 3 of the patch: a jump
    // would put its displacement there. The checkpoint reads the thread's saved state from
    // /proc and leaves it asleep: the int3 stays for good.
    let syscall_file = format!("/proc/self/task/{}/syscall", tid.recv().unwrap());
    let resumes_at = format!("{:#x}", target.address + 3);
    while !std::fs::read_to_string(&syscall_file).unwrap().trim_end().ends_with(&resumes_at) {
        std::thread::yield_now();
    }
    let (record, data) = leak(Record::default());
    let hook = Hook::entry(&target, count_first_arg, data).unwrap();
    assert_eq!(hook.patch, Some(uebpf_hook::PatchMethod::Int3));
    assert!(hook.kind().reason().contains("stopped inside the displaced instructions"), "{:?}", hook.kind());
    assert_eq!(code(&target, 1), [0xcc]);
    assert_eq!(unsafe { libc::write(pipe[1], b"x".as_ptr().cast(), 1) }, 1);
    assert_eq!(reader.join().unwrap(), (1, b'x'));
    assert_eq!(record.hits.load(SeqCst), 0, "the blocked thread had entered before the probe");
    assert_eq!(unsafe { libc::write(pipe[1], b"y".as_ptr().cast(), 1) }, 1);
    let mut byte = 0u8;
    assert_eq!(unsafe { hook_test_read(pipe[0], &mut byte, 1) }, 1);
    assert_eq!((byte, record.hits.load(SeqCst)), (b'y', 1));
    unsafe {
        libc::close(pipe[0]);
        libc::close(pipe[1])
    };
}

#[no_mangle]
#[inline(never)]
extern "C" fn hook_test_while_others_sleep(x: u64) -> u64 {
    black_box(x.wrapping_mul(41) + 13)
}

/// What a sleeping call returned: its result and errno.
type Returned = (i64, i32);

fn returned(result: i64) -> Returned {
    (result, if result < 0 { std::io::Error::last_os_error().raw_os_error().unwrap_or(0) } else { 0 })
}

#[test]
fn threads_sleeping_in_poll_nanosleep_and_read_are_not_interrupted_by_a_live_attach_or_detach() {
    // Untraced, each returns its normal result: poll and read see the byte written at the end,
    // nanosleep sleeps its full time. A signal to any of them during the patch would make poll
    // and nanosleep return EINTR (they are never restarted after a handler, SA_RESTART or not).
    let mut pipes = [[0; 2]; 2];
    for pipe in &mut pipes {
        assert_eq!(unsafe { libc::pipe(pipe.as_mut_ptr()) }, 0);
    }
    let [(poll_fd, poll_writer), (read_fd, read_writer)] = pipes.map(|[r, w]| (r, w));
    let (tid_sender, tids) = std::sync::mpsc::channel();
    let spawn = |sleeper: Box<dyn FnOnce() -> Returned + Send>| {
        let tid_sender = tid_sender.clone();
        std::thread::spawn(move || {
            tid_sender.send(unsafe { libc::gettid() }).unwrap();
            sleeper()
        })
    };
    let sleepers = [
        spawn(Box::new(move || {
            let mut fd = libc::pollfd { fd: poll_fd, events: libc::POLLIN, revents: 0 };
            returned(unsafe { libc::poll(&mut fd, 1, 20_000) }.into())
        })),
        spawn(Box::new(|| {
            let asked = libc::timespec { tv_sec: 1, tv_nsec: 0 };
            let mut left = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            returned(unsafe { libc::nanosleep(&asked, &mut left) }.into())
        })),
        spawn(Box::new(move || {
            let mut byte = 0u8;
            returned(unsafe { libc::read(read_fd, (&mut byte as *mut u8).cast(), 1) } as i64)
        })),
    ];
    // poll = 7, nanosleep = 35 (or clock_nanosleep = 230), read = 0 on x86-64.
    for tid in tids.iter().take(sleepers.len()) {
        let syscall_file = format!("/proc/self/task/{tid}/syscall");
        while !matches!(std::fs::read_to_string(&syscall_file).unwrap().split(' ').next(), Some("7" | "35" | "230" | "0")) {
            std::thread::yield_now();
        }
    }
    let target = this_binary("hook_test_while_others_sleep");
    let (record, data) = leak(Record::default());
    let hook = Hook::entry(&target, count_first_arg, data).unwrap();
    assert!(is_live(hook.patch) && hook.kind() == PatchKind::Jump, "a live jump patch: {:?}", hook.patch);
    assert_eq!(hook_test_while_others_sleep(1), 54);
    hook.detach().unwrap();
    for writer in [poll_writer, read_writer] {
        assert_eq!(unsafe { libc::write(writer, b"x".as_ptr().cast(), 1) }, 1);
    }
    let results: Vec<Returned> = sleepers.into_iter().map(|sleeper| sleeper.join().unwrap()).collect();
    assert_eq!(results, [(1, 0), (0, 0), (1, 0)], "poll, nanosleep, read");
    assert_eq!(record.hits.load(SeqCst), 1);
    for fd in [poll_fd, poll_writer, read_fd, read_writer] {
        unsafe { libc::close(fd) };
    }
}

#[test]
fn a_call_in_the_first_bytes_pushes_the_original_return_address() {
    let target = this_binary("hook_test_get_pc");
    assert_eq!(unsafe { hook_test_get_pc() }, 0);
    let (record, data) = leak(Record::default());
    let hook = Hook::entry(&target, count_first_arg, data).unwrap();
    assert_eq!(hook.kind(), PatchKind::Jump, "a call ending at byte 5 takes the jump");
    // The trampoline emulates the call: `pop` finds the function's own address, not the trampoline's.
    assert_eq!(unsafe { hook_test_get_pc() }, 0);
    assert_eq!(record.hits.load(SeqCst), 1);
}

/// Blocks a new thread in `blocked` (a read(2) on a fresh pipe from `start`), attaches
/// `target` with a counting entry probe once `/proc/.../syscall` shows the thread in read,
/// then lets it go; returns the hook, the thread's (bytes read, byte) and the pipe's write end.
fn attach_while_a_thread_blocks(
    target: &Target,
    start: impl FnOnce(i32) -> (i64, u8) + Send + 'static,
) -> (Hook, &'static Record, (i64, u8), i32) {
    let mut pipe = [0; 2];
    assert_eq!(unsafe { libc::pipe(pipe.as_mut_ptr()) }, 0);
    let (tid_sender, tid) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        tid_sender.send(unsafe { libc::gettid() }).unwrap();
        start(pipe[0])
    });
    let syscall_file = format!("/proc/self/task/{}/syscall", tid.recv().unwrap());
    while !std::fs::read_to_string(&syscall_file).unwrap().starts_with("0 ") {
        std::thread::yield_now();
    }
    let (record, data) = leak(Record::default());
    let hook = Hook::entry(target, count_first_arg, data).unwrap();
    assert_eq!(hook.patch, Some(uebpf_hook::PatchMethod::Int3), "a live patch");
    assert_eq!(unsafe { libc::write(pipe[1], b"x".as_ptr().cast(), 1) }, 1);
    let read = reader.join().unwrap();
    (hook, record, read, pipe[1])
}

#[test]
fn a_thread_in_a_callee_called_from_bytes_1_to_4_survives_a_live_attach() {
    // hook_test_call_early calls from byte 1 and returns to byte 4: the jump would put its
    // displacement there; the thread blocked in the callee returns into the int3 patch's
    // untouched bytes instead.
    let target = this_binary("hook_test_call_early");
    let (hook, record, read, writer) = attach_while_a_thread_blocks(&target, |fd| {
        let mut byte = 0u8;
        (unsafe { hook_test_read_early(fd, &mut byte, 1) }, byte)
    });
    assert_eq!(read, (1, b'x'));
    assert!(hook.kind().reason().contains("`call r11` at +0x1 would return inside the 5 patched bytes"), "{:?}", hook.kind());
    assert_eq!(record.hits.load(SeqCst), 0, "the blocked thread had entered before the probe");
    // Called again: the probe fires and the emulated call returns where the function expects.
    let mut pipe = [0; 2];
    assert_eq!(unsafe { libc::pipe(pipe.as_mut_ptr()) }, 0);
    assert_eq!(unsafe { libc::write(pipe[1], b"y".as_ptr().cast(), 1) }, 1);
    let mut byte = 0u8;
    assert_eq!((unsafe { hook_test_read_early(pipe[0], &mut byte, 1) }, byte), (1, b'y'));
    assert_eq!(record.hits.load(SeqCst), 1);
    for fd in [writer, pipe[0], pipe[1]] {
        unsafe { libc::close(fd) };
    }
}

static SIGNAL_PIPE: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

/// SIGUSR1's handler: blocks reading one byte from SIGNAL_PIPE.
extern "C" fn block_in_handler(_signal: i32) {
    let mut byte = 0u8;
    unsafe { libc::read(SIGNAL_PIPE.load(SeqCst), (&mut byte as *mut u8).cast(), 1) };
}

#[test]
fn a_signal_frame_saved_inside_bytes_1_to_4_makes_a_live_jump_an_int3() {
    // The thread sends itself SIGUSR1 from byte 1 of hook_test_signalled: the signal frame
    // saves ip = byte 3, and the handler blocks. The checkpoint finds it on the thread's stack:
    // a jump would make the handler's return land inside its displacement.
    let target = this_binary("hook_test_signalled");
    assert_eq!(check(Path::new("/proc/self/exe"), &Location::parse("hook_test_signalled"), false).unwrap(), PatchKind::Jump);
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = block_in_handler as *const () as usize;
        action.sa_flags = libc::SA_RESTART;
        assert_eq!(libc::sigaction(libc::SIGUSR1, &action, std::ptr::null_mut()), 0);
    }
    let (hook, record, read, writer) = attach_while_a_thread_blocks(&target, |fd| {
        SIGNAL_PIPE.store(fd, SeqCst);
        let result = unsafe { hook_test_raise(libc::getpid(), libc::gettid(), libc::SIGUSR1) };
        (result, 0)
    });
    assert_eq!(read, (0, 0), "tgkill returned 0 after the handler, through the original bytes");
    assert!(hook.kind().reason().contains("stack holds an address inside bytes 1-4"), "{:?}", hook.kind());
    assert_eq!(code(&target, 1), [0xcc]);
    assert_eq!(unsafe { hook_test_raise(libc::getpid(), libc::gettid(), 0) }, 0, "signal 0: no signal, just the call");
    assert_eq!(record.hits.load(SeqCst), 1);
    unsafe { libc::close(writer) };
}

#[test]
fn an_indirect_jump_into_the_patch_gets_the_int3_patch() {
    let target = this_binary("hook_test_indirect");
    let before = code(&target, 5);
    let plain: Vec<u64> = (0..50).map(|n| unsafe { hook_test_indirect(n) }).collect();
    let (record, data) = leak(Record::default());
    let hook = Hook::entry(&target, count_first_arg, data).unwrap();
    assert_int3(&hook, &target, &before, "`jmp rcx` at +0x10 may jump into the 5 patched bytes");
    let hooked: Vec<u64> = (0..50).map(|n| unsafe { hook_test_indirect(n) }).collect();
    assert_eq!(hooked, plain);
    assert_eq!(record.hits.load(SeqCst), 50, "byte 0 runs once per call: the jump lands on byte 2");
}

#[test]
fn an_ifunc_is_hooked_at_the_implementation_this_process_selected() {
    let target = resolve(&libc_path(), &Location::Symbol("strlen".into())).unwrap();
    assert_eq!(target.address, selected_in_libc(c"strlen"));
    assert_eq!(target.function.unknown_size, Some(uebpf_hook::IFUNC));
    let text = c"the ifunc's own text";
    let (record, data) = leak(Record::default());
    let hook = Hook::entry(&target, count_only_this, data).unwrap();
    COUNTED_STRING.store(text.as_ptr() as u64, SeqCst);
    for _ in 0..1000 {
        assert_eq!(unsafe { libc::strlen(black_box(text.as_ptr())) }, 20);
    }
    assert_eq!(record.hits.load(SeqCst), 1000);
    assert_eq!(hook.kind().name(), "int3");
    hook.detach().unwrap();
}

#[test]
fn an_ifunc_with_several_symbol_versions_resolves_to_the_default_one() {
    // libc exports memcpy@GLIBC_2.2.5 (a plain function, the old memmove alias) and the default
    // memcpy@@GLIBC_2.14, an IFUNC: a name is its default version, as the dynamic linker binds it.
    let target = resolve(&libc_path(), &Location::Symbol("memcpy".into())).unwrap();
    assert_eq!(target.address, selected_in_libc(c"memcpy"));
    assert_eq!(target.function.unknown_size, Some(uebpf_hook::IFUNC));
}

/// The address the dynamic linker gives `name` in this process's libc (an IFUNC's selected
/// implementation).
fn selected_in_libc(name: &std::ffi::CStr) -> usize {
    // SAFETY: RTLD_NOLOAD only looks the loaded libc up; dlsym reads the loader's tables.
    unsafe {
        let handle = libc::dlopen(c"libc.so.6".as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY);
        libc::dlsym(handle, name.as_ptr()) as usize
    }
}

static COUNTED_STRING: AtomicU64 = AtomicU64::new(0);

/// Counts the calls whose first argument is COUNTED_STRING (other threads call strlen too).
unsafe extern "C" fn count_only_this(regs: *mut PtRegs, data: *mut c_void) {
    if (*regs).di == COUNTED_STRING.load(SeqCst) {
        (*(data as *const Record)).hit(&*regs, (*regs).di);
    }
}

static BODY_RUNS: AtomicU64 = AtomicU64::new(0);

#[no_mangle]
#[inline(never)]
extern "C" fn hook_test_with_side_effect(x: u64) -> u64 {
    BODY_RUNS.fetch_add(1, SeqCst);
    black_box(x + 1)
}

/// An entry handler that makes the function return `x * 100` for an even argument `x` without
/// running it (the kernel's override_function_with_return), and leaves odd calls alone.
unsafe extern "C" fn override_even(regs: *mut PtRegs, _: *mut c_void) {
    let regs = &mut *regs;
    if regs.di.is_multiple_of(2) {
        regs.ax = regs.di * 100;
        regs.ip = *(regs.sp as *const u64);
        regs.sp += 8;
    }
}

/// A handler that moves ip elsewhere: not a return, so the hook ignores it.
unsafe extern "C" fn stray_ip(regs: *mut PtRegs, _: *mut c_void) {
    (*regs).ip = 0x1234;
}

#[test]
fn an_entry_handler_makes_the_function_return_without_running_it() {
    for (symbol, int3) in [("hook_test_with_side_effect", false), ("hook_test_identity", true)] {
        let target = this_binary(symbol);
        let call = |x: u64| unsafe {
            match symbol {
                "hook_test_identity" => u64::from(hook_test_identity(x as u32)),
                _ => hook_test_with_side_effect(x),
            }
        };
        let plain = |x: u64| if symbol == "hook_test_identity" { x } else { x + 1 };
        let (returns, return_data) = leak(Record::default());
        // The stray handler runs first: the overriding one's return still counts.
        let stray = Hook::entry(&target, stray_ip, std::ptr::null_mut()).unwrap();
        let overriding = Hook::entry(&target, override_even, std::ptr::null_mut()).unwrap();
        let ret = Hook::ret(&target, count_return, return_data).unwrap();
        assert_eq!(matches!(overriding.kind(), PatchKind::Int3 { .. }), int3, "{symbol}");
        let runs_before = BODY_RUNS.load(SeqCst);
        for x in 0..100u64 {
            let expected = if x % 2 == 0 { x * 100 } else { plain(x) };
            assert_eq!(call(x), expected, "{symbol}({x})");
        }
        if symbol == "hook_test_with_side_effect" {
            assert_eq!(BODY_RUNS.load(SeqCst) - runs_before, 50, "the body ran for odd arguments only");
        }
        // Return probes see every call's result, the forced ones included.
        let forced: u64 = (0..100u64).map(|x| if x % 2 == 0 { x * 100 } else { plain(x) }).sum();
        assert_eq!((returns.hits.load(SeqCst), returns.sum.load(SeqCst)), (100, forced), "{symbol}");
        for hook in [overriding, stray, ret] {
            hook.detach().unwrap();
        }
        assert_eq!(call(4), plain(4), "{symbol}: detached");
    }
}

/// An entry probe whose handler calls its own function, and a return probe on it.
unsafe extern "C" fn call_again(regs: *mut PtRegs, data: *mut c_void) {
    (*(data as *const Record)).hit(&*regs, (*regs).di);
    hook_test_nested(black_box(100));
}

/// Misses told per probe, by its record (the data the probe was attached with).
static TOLD: std::sync::Mutex<Vec<(usize, usize)>> = std::sync::Mutex::new(Vec::new());

unsafe extern "C" fn tell(handler: uebpf_hook::Handler, data: *mut c_void) {
    TOLD.lock().unwrap().push((handler as usize, data as usize));
}

#[test]
fn a_hit_while_a_probe_runs_is_told_to_the_miss_handler_for_each_probe_that_did_not_run() {
    let target = this_binary("hook_test_nested");
    let ((entry, entry_data), (ret, ret_data)) = (leak(Record::default()), leak(Record::default()));
    uebpf_hook::set_miss_handler(tell);
    let entry_hook = Hook::entry(&target, call_again, entry_data).unwrap();
    let return_hook = Hook::ret(&target, count_first_arg, ret_data).unwrap();
    hook_test_nested(1);
    // The handler's own call ran no probe: neither the entry's nor the return's.
    assert_eq!((entry.hits.load(SeqCst), ret.hits.load(SeqCst)), (1, 1));
    assert_eq!(entry_hook.stats().skipped, 1);
    let told: Vec<_> =
        TOLD.lock().unwrap().iter().copied().filter(|&(_, data)| data == entry_data as usize || data == ret_data as usize).collect();
    assert_eq!(told, [(call_again as *const () as usize, entry_data as usize), (count_first_arg as *const () as usize, ret_data as usize)]);
    // A hit while the thread works without probes is not the target's: counted, not told.
    uebpf_hook::without_probes(|| hook_test_nested(2));
    assert_eq!(entry_hook.stats().skipped, 2);
    assert_eq!(TOLD.lock().unwrap().iter().filter(|&&(_, data)| data == entry_data as usize).count(), 1);
    return_hook.detach().unwrap();
    entry_hook.detach().unwrap();
}

#[test]
fn a_switch_whose_table_stays_out_of_the_patch_takes_the_jump() {
    let target = this_binary("hook_test_switch");
    let file = Path::new("/proc/self/exe").canonicalize().unwrap();
    assert_eq!(check(&file, &Location::Symbol("hook_test_switch".into()), false).unwrap(), PatchKind::Jump);
    let (record, data) = leak(Record::default());
    let hook = Hook::entry(&target, count_first_arg, data).unwrap();
    assert_eq!(hook.kind(), PatchKind::Jump);
    let results: Vec<u64> = (0..4).map(|k| unsafe { hook_test_switch(black_box(k)) }).collect();
    assert_eq!(results, [10, 20, 30, 0]);
    assert_eq!((record.hits.load(SeqCst), record.sum.load(SeqCst)), (4, 6));
    hook.detach().unwrap();
}

#[test]
fn a_switch_whose_table_lands_in_the_patch_is_refused_the_jump() {
    let file = Path::new("/proc/self/exe").canonicalize().unwrap();
    let kind = check(&file, &Location::Symbol("hook_test_switch_into".into()), false).unwrap();
    assert_eq!(kind.reason(), "the switch `jmp rdx` at +0x1a jumps to +0x2, inside the 5 patched bytes", "{kind:?}");
}
