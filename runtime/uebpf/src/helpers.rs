//! The kernel helpers uebpf provides, under the kernel's ids, with the kernel's results.
//!
//! Pointer arguments (keys, values, buffers) are used as the program passes them: the safety
//! analysis (vm/README.md, "Safety analysis") proved them valid before the program could run, as
//! the kernel's verifier does; programs loaded through the generic embedding API are trusted
//! instead (see the trust model in the runtime README). Map handles are checked (`handles`), and
//! reads/writes of *traced* memory (probe_read/write) are fault-safe (`probe`).

use std::cell::Cell;

use uebpf_maps::{current, Map};
use uebpf_vm::{Environment, HelperFn};

use crate::handles::{map_of, ring_of};
use crate::helper_names::HELPER_NAMES;
use crate::probe;

/// -errno as the u64 a helper returns.
fn errno(e: i32) -> u64 {
    (-i64::from(e)) as u64
}

fn result(r: Result<(), i32>) -> u64 {
    r.map_or_else(errno, |()| 0)
}

extern "C" fn map_lookup_elem(map: u64, key: u64, _: u64, _: u64, _: u64) -> u64 {
    // SAFETY: key points at key_size bytes of program memory (trusted, see module docs).
    map_of(map).map_or(0, |m| unsafe { m.lookup_ptr(key as *const u8) } as u64)
}

/// bpf_map_lookup_elem where the JIT knows the map (a `MapLookup::Direct` of the instance): it
/// passes the map itself in place of the handle, so no handle is decoded.
pub(crate) extern "C" fn lookup_in_map(map: u64, key: u64, _: u64, _: u64, _: u64) -> u64 {
    // SAFETY: `map` is a Map that the program's instance keeps alive; key as above.
    unsafe { (*(map as *const Map)).lookup_ptr(key as *const u8) as u64 }
}

extern "C" fn map_update_elem(map: u64, key: u64, value: u64, flags: u64, _: u64) -> u64 {
    match map_of(map) {
        // SAFETY: as above, for key and value.
        Some(m) => result(unsafe { m.update_ptr(key as *const u8, value as *const u8, flags) }),
        None => errno(libc::EINVAL),
    }
}

extern "C" fn map_delete_elem(map: u64, key: u64, _: u64, _: u64, _: u64) -> u64 {
    match map_of(map) {
        // SAFETY: as above.
        Some(m) => result(unsafe { m.delete_ptr(key as *const u8) }),
        None => errno(libc::EINVAL),
    }
}

/// Also serves bpf_probe_read_kernel: in userspace there is one address space, and programs use
/// it (through BPF_CORE_READ) to read their own context.
extern "C" fn probe_read_user(dst: u64, size: u64, src: u64, _: u64, _: u64) -> u64 {
    // SAFETY: dst is program memory of `size` bytes (trusted); src is checked by the kernel.
    unsafe { probe::read(dst as *mut u8, size as u32 as usize, src as *const u8) as u64 }
}

/// bpf_probe_read_kernel (and bpf_probe_read): a read of a task image (`task`) copies only an
/// answered field, whole or in part, and fails with -EFAULT (dst zeroed) anywhere else in the
/// images; every other address is read as bpf_probe_read_user reads it.
extern "C" fn probe_read_kernel(dst: u64, size: u64, src: u64, _: u64, _: u64) -> u64 {
    let len = size as u32 as usize;
    match crate::task::image_read(src as usize, len) {
        None => probe_read_user(dst, size, src, 0, 0),
        // SAFETY: dst is program memory of `len` bytes; the field is the arena's, mapped.
        Some(Ok(_)) => unsafe {
            std::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, len);
            0
        },
        Some(Err(())) => {
            // SAFETY: as above.
            unsafe { std::ptr::write_bytes(dst as *mut u8, 0, len) };
            errno(libc::EFAULT)
        }
    }
}

/// bpf_probe_read_kernel_str (and bpf_probe_read_str): a task image's string (`comm`) is read
/// up to its field's end; anywhere else in the images -EFAULT, as above.
extern "C" fn probe_read_kernel_str(dst: u64, size: u64, src: u64, _: u64, _: u64) -> u64 {
    match crate::task::image_read(src as usize, 1) {
        None => probe_read_user_str(dst, size, src, 0, 0),
        Some(Ok(end)) => probe_read_user_str(dst, size.min((end - src as usize) as u64), src, 0, 0),
        Some(Err(())) => {
            // SAFETY: dst is program memory of `size` bytes.
            unsafe { std::ptr::write_bytes(dst as *mut u8, 0, size as u32 as usize) };
            errno(libc::EFAULT)
        }
    }
}

/// bpf_get_current_task: the thread's task image (`task`: the fields uebpf can answer, at the
/// running kernel's offsets), 0 where there is none.
extern "C" fn get_current_task(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    crate::task::current_task()
}

extern "C" fn probe_read_user_str(dst: u64, size: u64, src: u64, _: u64, _: u64) -> u64 {
    // SAFETY: as above.
    unsafe { probe::read_str(dst as *mut u8, size as u32 as usize, src as *const u8) as u64 }
}

extern "C" fn probe_write_user(dst: u64, src: u64, size: u64, _: u64, _: u64) -> u64 {
    // While a system call is answered (allow_answer), only its output buffers, whole.
    let Overridable { record, buffers, .. } = OVERRIDABLE.with(Cell::get);
    if record != 0 && !buffers.iter().any(|&(at, bytes)| at != 0 && at == dst && u64::from(bytes) == size) {
        return errno(libc::EPERM);
    }
    // SAFETY: src is program memory of `size` bytes (trusted); dst is checked by the kernel.
    unsafe { probe::write(dst as *mut u8, src as *const u8, size as u32 as usize) as u64 }
}

/// CLOCK_MONOTONIC in ns, as the kernel's bpf_ktime_get_ns (vDSO: no system call).
pub(crate) fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// `clock`'s time in nanoseconds (the ktime helpers; CLOCK_MONOTONIC through the vDSO).
fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid timespec pointer.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

extern "C" fn ktime_get_ns(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    monotonic_ns()
}

/// CLOCK_MONOTONIC_COARSE, as the kernel's bpf_ktime_get_coarse_ns.
extern "C" fn ktime_get_coarse_ns(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC_COARSE)
}

/// CLOCK_BOOTTIME, as the kernel's bpf_ktime_get_boot_ns (monotonic, counting suspend).
extern "C" fn ktime_get_boot_ns(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    clock_ns(libc::CLOCK_BOOTTIME)
}

/// bpf_get_attach_cookie's id.
pub(crate) const GET_ATTACH_COOKIE: u32 = 174;

thread_local! {
    /// The cookie of the attachment whose program runs on this thread (`set_attach_cookie`).
    static ATTACH_COOKIE: Cell<u64> = const { Cell::new(0) };
}

/// Sets what bpf_get_attach_cookie returns to the programs this thread runs next: the `bpf_cookie`
/// a loader gave the attachment (libbpf's per-attach cookies, its USDT spec ids). A runner calls
/// it before it runs a program that reads the cookie (`LoadedProgram::reads_attach_cookie`);
/// programs run without an attachment see 0, as the kernel's do without a cookie.
pub fn set_attach_cookie(cookie: u64) {
    ATTACH_COOKIE.with(|slot| slot.set(cookie));
}

/// bpf_get_attach_cookie(ctx): the kernel's for perf-event programs (uprobes, tracepoints)
/// returns the cookie of the perf event's link; here the attachment's, as the probe set it.
extern "C" fn get_attach_cookie(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    ATTACH_COOKIE.with(Cell::get)
}

/// bpf_get_stackid's and bpf_get_stack's ids.
pub(crate) const GET_STACKID: u32 = 27;
pub(crate) const GET_STACK: u32 = 67;

/// Where the programs this thread runs next find the user stack (`set_stack_origin`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum StackOrigin {
    /// No user registers (a system call tracepoint's record, a program run by hand): no stack.
    None,
    /// The context is the `pt_regs` of a uprobe or uretprobe; `at_entry`: a uprobe on a
    /// function's first instruction when that is `push %rbp` or `endbr64` (the caller's return
    /// address is at the stack pointer, not yet behind a frame pointer).
    Regs { at_entry: bool },
}

thread_local! {
    static STACK_ORIGIN: Cell<StackOrigin> = const { Cell::new(StackOrigin::None) };
}

/// Sets where bpf_get_stack and bpf_get_stackid find the user stack, for the programs this
/// thread runs next (`LoadedProgram::reads_stack`).
pub fn set_stack_origin(origin: StackOrigin) {
    STACK_ORIGIN.with(|slot| slot.set(origin));
}

/// The kernel's sysctl_perf_event_max_stack default: the longest callchain collected.
const MAX_STACK: usize = 127;

/// The kernel's user callchain of a uprobe (arch/x86/events/core.c, perf_callchain_user, 6.x),
/// into `chain`: the instruction pointer; at a function's entry (`is_uprobe_at_func_entry`) the
/// return address the stack pointer holds; then the frame-pointer chain, each frame's saved frame
/// pointer and return address read fault-safely until a read fails or the chain is full. The
/// number of addresses, None without user registers. No allocation: a probe may run inside the
/// traced program's malloc.
fn user_callchain(ctx: u64, chain: &mut [u64; MAX_STACK]) -> Option<usize> {
    let StackOrigin::Regs { at_entry } = STACK_ORIGIN.with(Cell::get) else { return None };
    // SAFETY: the context is the probe's pt_regs (168 bytes): bp at 32, ip at 128, sp at 152.
    let (bp, ip, sp) = unsafe { (*(ctx as *const u64).add(4), *(ctx as *const u64).add(16), *(ctx as *const u64).add(19)) };
    let read = |address: u64| {
        let mut word = 0u64;
        // SAFETY: a fault-safe read of traced memory into a local.
        (unsafe { probe::read((&mut word as *mut u64).cast(), 8, address as *const u8) } == 0).then_some(word)
    };
    chain[0] = ip;
    let mut len = 1;
    if at_entry {
        if let Some(ret) = read(sp) {
            chain[len] = ret;
            len += 1;
        }
    }
    let mut frame = bp;
    while len < MAX_STACK {
        let (Some(next), Some(ret)) = (read(frame), read(frame.wrapping_add(8))) else { break };
        chain[len] = ret;
        len += 1;
        frame = next;
    }
    Some(len)
}

/// The callchain after `flags`' skip count, for a user stack (BPF_F_USER_STACK), in `chain`; a
/// kernel stack, which uebpf has none of, is EFAULT, as the kernel's answer when it gets no
/// callchain.
fn callchain_for(ctx: u64, flags: u64, chain: &mut [u64; MAX_STACK]) -> Result<&[u64], i32> {
    use uebpf_maps::stack::{BPF_F_SKIP_FIELD_MASK, BPF_F_USER_STACK};
    if flags & BPF_F_USER_STACK == 0 {
        return Err(libc::EFAULT);
    }
    let len = user_callchain(ctx, chain).ok_or(libc::EFAULT)?;
    let skip = (flags & BPF_F_SKIP_FIELD_MASK) as usize;
    if len <= skip {
        return Err(libc::EFAULT);
    }
    Ok(&chain[skip..len])
}

/// bpf_get_stackid(ctx, map, flags): the id of the user stack in a stack trace map.
extern "C" fn get_stackid(ctx: u64, map: u64, flags: u64, _: u64, _: u64) -> u64 {
    use uebpf_maps::stack::*;
    if flags & !(BPF_F_SKIP_FIELD_MASK | BPF_F_USER_STACK | BPF_F_FAST_STACK_CMP | BPF_F_REUSE_STACKID) != 0 {
        return errno(libc::EINVAL);
    }
    let Some(stacks) = map_of(map).and_then(|m| m.stack_trace()) else { return errno(libc::EINVAL) };
    let mut chain = [0u64; MAX_STACK];
    match callchain_for(ctx, flags, &mut chain).and_then(|chain| stacks.store(chain, flags)) {
        Ok(id) => u64::from(id),
        Err(e) => errno(e),
    }
}

/// bpf_get_stack(ctx, buf, size, flags): the user stack's addresses into `buf` (zeros after
/// them); the bytes written, or an error with `buf` zeroed, as the kernel's.
extern "C" fn get_stack(ctx: u64, buf: u64, size: u64, flags: u64, _: u64) -> u64 {
    use uebpf_maps::stack::{BPF_F_SKIP_FIELD_MASK, BPF_F_USER_STACK};
    let size = size as u32 as usize;
    // SAFETY: buf is program memory of `size` writable bytes (trusted).
    let out = unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, size) };
    out.fill(0);
    if flags & !(BPF_F_SKIP_FIELD_MASK | BPF_F_USER_STACK) != 0 || !size.is_multiple_of(8) {
        return errno(libc::EINVAL); // BPF_F_USER_BUILD_ID among them: no build ids here
    }
    let mut chain = [0u64; MAX_STACK];
    match callchain_for(ctx, flags, &mut chain) {
        Ok(chain) => {
            let n = chain.len().min(size / 8);
            for (slot, ip) in out.chunks_exact_mut(8).zip(&chain[..n]) {
                slot.copy_from_slice(&ip.to_ne_bytes());
            }
            (n * 8) as u64
        }
        Err(e) => errno(e),
    }
}

/// bpf_get_func_ip's id.
pub(crate) const GET_FUNC_IP: u32 = 173;

thread_local! {
    /// The probed function's address for the program this thread runs (`set_func_ip`).
    static FUNC_IP: Cell<u64> = const { Cell::new(0) };
}

/// Sets what bpf_get_func_ip returns to the programs this thread runs next: the address of the
/// probed instruction (a uprobe's; a uretprobe's function entry). A runner calls it before it
/// runs a program that calls the helper (`LoadedProgram::reads_func_ip`); 0 otherwise.
pub fn set_func_ip(address: u64) {
    FUNC_IP.with(|slot| slot.set(address));
}

/// bpf_get_func_ip(ctx): for uprobe programs the kernel returns the probe's address
/// (kernel/trace/bpf_trace.c, bpf_get_func_ip_kprobe: `uprobe_dispatch_data.bp_addr`, which a
/// uretprobe's dispatch sets to the function it returns from); here the attachment's, as the
/// probe set it.
extern "C" fn get_func_ip(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    FUNC_IP.with(Cell::get)
}

/// The bytes of the `syscall` instruction.
const SYSCALL_LEN: u64 = 2;

/// bpf_override_return's id.
pub(crate) const OVERRIDE_RETURN: u32 = 58;

/// The call the running program may make return at once: its entry registers, and the stack
/// pointer they had at the function's first instruction; for a system call answered at its
/// `syscall` instruction, the program's record and the buffers the call fills.
#[derive(Clone, Copy)]
struct Overridable {
    regs: *mut uebpf_hook::PtRegs,
    entry_sp: u64,
    /// The instruction pointer at the probe (a system call's answer moves it past the call).
    entry_ip: u64,
    /// The system call record the program runs on (0: a uprobe, whose context is `regs`).
    record: u64,
    /// The call's output buffers (address, bytes; 0: none): the only memory bpf_probe_write_user
    /// may write while the call is being answered.
    buffers: [(u64, u32); MAX_OUTPUT_BUFFERS],
}

/// Output buffers of one system call an extension may fill (struct stat, struct statx...).
pub const MAX_OUTPUT_BUFFERS: usize = 2;

const NOTHING_OVERRIDABLE: Overridable =
    Overridable { regs: std::ptr::null_mut(), entry_sp: 0, entry_ip: 0, record: 0, buffers: [(0, 0); MAX_OUTPUT_BUFFERS] };

thread_local! {
    static OVERRIDABLE: Cell<Overridable> = const { Cell::new(NOTHING_OVERRIDABLE) };
}

/// Lets the programs this thread runs next make the call whose entry registers are `regs` return
/// at once (bpf_override_return); null: no call may be. The agent's probe of an extension at a
/// function's first instruction sets it around the run, and only it (runtime/uebpf/README.md,
/// "Extensions").
///
/// # Safety
/// `regs` is null, or the registers of a hook at a function's first instruction (its `sp` points
/// at the return address), valid while the programs run.
pub unsafe fn allow_override(regs: *mut uebpf_hook::PtRegs) {
    let overridable = if regs.is_null() { NOTHING_OVERRIDABLE } else { Overridable { regs, entry_sp: (*regs).sp, ..NOTHING_OVERRIDABLE } };
    OVERRIDABLE.with(|slot| slot.set(overridable));
}

/// Lets the programs this thread runs next answer the system call whose record they get
/// (`record`, its address), made at the `syscall` instruction whose registers are `regs`:
/// bpf_override_return gives the call's result as the kernel would (a value, or -errno, which the
/// code after the instruction takes as it takes the kernel's), marked by `ip` moving past the
/// 2-byte instruction (the caller puts it back, and does not make the call); and
/// bpf_probe_write_user may write exactly the call's output `buffers` (address, bytes), nothing
/// else. `allow_override(null)` ends it.
///
/// # Safety
/// `regs` are the registers at a `syscall` instruction, valid while the programs run; `record` is
/// the address of the context the programs get.
pub unsafe fn allow_answer(regs: *mut uebpf_hook::PtRegs, record: u64, buffers: [(u64, u32); MAX_OUTPUT_BUFFERS]) {
    OVERRIDABLE.with(|slot| slot.set(Overridable { regs, entry_sp: (*regs).sp, entry_ip: (*regs).ip, record, buffers }));
}

/// bpf_override_return(regs, rc), as the kernel's (kernel/trace/bpf_trace.c with
/// arch/x86/lib/error-inject.c's override_function_with_return): the result register becomes
/// `rc`, and the call returns to its caller at once, the function's body not run (the hook
/// engine takes that form of the registers as a return: uebpf_hook's entry stub). Called again,
/// it changes only the result. -EINVAL where no call may be overridden: outside an extension's
/// probe (the safety analysis lets only extensions call it), or on another context than the
/// probe's. Answering a system call (`allow_answer`), `rc` is the kernel's result, and the call is
/// not made.
extern "C" fn override_return(ctx: u64, rc: u64, _: u64, _: u64, _: u64) -> u64 {
    let Overridable { regs, entry_sp, entry_ip, record, .. } = OVERRIDABLE.with(Cell::get);
    let context = if record != 0 { record } else { regs as u64 };
    if regs.is_null() || context != ctx {
        return errno(libc::EINVAL);
    }
    if record != 0 {
        // SAFETY: the registers at the syscall instruction, valid while the program runs.
        let regs = unsafe { &mut *regs };
        (regs.ax, regs.ip) = (rc, entry_ip + SYSCALL_LEN);
        return 0;
    }
    let mut return_address = 0u64;
    // SAFETY: 8 bytes of ours; the stack pointer is the traced thread's, read fault-safely.
    if unsafe { probe::read((&mut return_address as *mut u64).cast(), 8, entry_sp as *const u8) } != 0 {
        return errno(libc::EFAULT);
    }
    // SAFETY: the probe's registers, valid while the program runs (allow_override).
    let regs = unsafe { &mut *regs };
    (regs.ax, regs.ip, regs.sp) = (rc, return_address, entry_sp + 8);
    0
}

extern "C" fn get_prandom_u32(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    thread_local! {
        static STATE: Cell<u64> = const { Cell::new(0) };
    }
    STATE.with(|state| {
        let mut x = state.get();
        if x == 0 {
            let mut seed = [0u8; 8];
            // SAFETY: getrandom into a local buffer; a failure leaves the tid-based seed below.
            unsafe { libc::getrandom(seed.as_mut_ptr().cast(), 8, 0) };
            x = u64::from_ne_bytes(seed) | u64::from(current::tid()) << 32 | 1;
        }
        // xorshift64*
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        state.set(x);
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) as u32 as u64
    })
}

extern "C" fn get_smp_processor_id(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    // SAFETY: no preconditions.
    unsafe { libc::sched_getcpu() }.max(0) as u64
}

extern "C" fn get_current_pid_tgid(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    u64::from(current::pid()) << 32 | u64::from(current::tid())
}

extern "C" fn get_current_uid_gid(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    // SAFETY: no preconditions.
    unsafe { u64::from(libc::getgid()) << 32 | u64::from(libc::getuid()) }
}

/// The calling thread's comm (16 bytes, NUL-padded).
fn thread_comm() -> [u8; 16] {
    let mut comm = [0u8; 16];
    // SAFETY: PR_GET_NAME writes at most 16 bytes.
    unsafe { libc::prctl(libc::PR_GET_NAME, comm.as_mut_ptr()) };
    comm
}

/// As the kernel (strscpy_pad): the thread's name, truncated to size - 1, NUL-padded; 0.
extern "C" fn get_current_comm(buf: u64, size: u64, _: u64, _: u64, _: u64) -> u64 {
    let size = size as u32 as usize;
    if size == 0 {
        return errno(libc::EINVAL);
    }
    let comm = thread_comm();
    let len = comm.iter().position(|&b| b == 0).unwrap_or(16).min(size - 1);
    // SAFETY: buf is program memory of `size` bytes (trusted).
    unsafe {
        std::ptr::copy_nonoverlapping(comm.as_ptr(), buf as *mut u8, len);
        std::ptr::write_bytes((buf as *mut u8).add(len), 0, size - len);
    }
    0
}

extern "C" fn trace_printk(fmt: u64, fmt_size: u64, a1: u64, a2: u64, a3: u64) -> u64 {
    print_line(fmt, fmt_size, &[a1, a2, a3])
}

/// The kernel's MAX_BPRINTF_VARARGS: bpf_trace_vprintk's most arguments.
const MAX_VPRINTK_ARGS: u64 = 12;

/// bpf_trace_vprintk(fmt, fmt_size, data, data_len): printk with its arguments in an array of
/// u64 (what clang's bpf_printk emits for more than three); the kernel's checks on the array:
/// a whole number of u64s, at most 12, NULL only when empty (kernel/trace/bpf_trace.c).
extern "C" fn trace_vprintk(fmt: u64, fmt_size: u64, data: u64, data_len: u64, _: u64) -> u64 {
    let data_len = data_len as u32 as u64;
    if !data_len.is_multiple_of(8) || data_len > MAX_VPRINTK_ARGS * 8 || (data == 0 && data_len != 0) {
        return errno(libc::EINVAL);
    }
    let args = if data_len == 0 {
        &[][..]
    } else {
        // SAFETY: data is program memory of data_len bytes (trusted, see module docs).
        unsafe { std::slice::from_raw_parts(data as *const u64, (data_len / 8) as usize) }
    };
    print_line(fmt, fmt_size, args)
}

/// One bpf_printk line to stderr (see `trace_printk`); the message's length, or -errno.
fn print_line(fmt: u64, fmt_size: u64, args: &[u64]) -> u64 {
    // SAFETY: fmt is program memory of fmt_size bytes (trusted).
    let format = unsafe { std::slice::from_raw_parts(fmt as *const u8, fmt_size as u32 as usize) };
    let message = match crate::printk::format(format, args) {
        Ok(message) => message,
        Err(e) => return errno(e),
    };
    let comm = thread_comm();
    let comm = String::from_utf8_lossy(&comm[..comm.iter().position(|&b| b == 0).unwrap_or(16)]).into_owned();
    // The line trace_pipe would show; one write(2) so that concurrent lines do not interleave.
    let mut line = format!("{comm}-{} [{:03}] bpf_trace_printk: ", current::tid(), get_smp_processor_id(0, 0, 0, 0, 0)).into_bytes();
    line.extend_from_slice(&message);
    if !message.ends_with(b"\n") {
        line.push(b'\n');
    }
    write_stderr(&line);
    message.len() as u64
}

/// Writes `bytes` to fd 2 with write(2) alone: a line from a program (or the agent) in a
/// traced process must not take std's stderr lock, which a forked child can inherit held by a
/// thread it does not have.
pub fn write_stderr(mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: a valid buffer of that length.
        let written = unsafe { libc::write(2, bytes.as_ptr().cast(), bytes.len()) };
        match written {
            n if n > 0 => bytes = &bytes[n as usize..],
            _ if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted => {}
            _ => return,
        }
    }
}

extern "C" fn ringbuf_output(map: u64, data: u64, size: u64, flags: u64, _: u64) -> u64 {
    match map_of(map).and_then(|m| m.ringbuf()) {
        // SAFETY: data is program memory of `size` bytes (trusted).
        Some(ring) => result(unsafe { ring.output(data as *const u8, size, flags) }),
        None => errno(libc::EINVAL),
    }
}

extern "C" fn map_push_elem(map: u64, value: u64, flags: u64, _: u64, _: u64) -> u64 {
    match map_of(map) {
        // SAFETY: value is program memory of value_size bytes (trusted).
        Some(m) => result(unsafe { m.push_ptr(value as *const u8, flags) }),
        None => errno(libc::EINVAL),
    }
}

fn pop(map: u64, out: u64, remove: bool) -> u64 {
    match map_of(map) {
        // SAFETY: out is program memory of value_size writable bytes (trusted).
        Some(m) => result(unsafe { m.pop_ptr(out as *mut u8, remove) }),
        None => errno(libc::EINVAL),
    }
}

extern "C" fn map_pop_elem(map: u64, out: u64, _: u64, _: u64, _: u64) -> u64 {
    pop(map, out, true)
}

extern "C" fn map_peek_elem(map: u64, out: u64, _: u64, _: u64, _: u64) -> u64 {
    pop(map, out, false)
}

extern "C" fn perf_event_output(_ctx: u64, map: u64, flags: u64, data: u64, size: u64) -> u64 {
    match map_of(map).and_then(|m| m.perf_event_array()) {
        // SAFETY: data is program memory of `size` bytes (trusted).
        Some(array) => result(unsafe { array.output(flags, data as *const u8, size) }),
        None => errno(libc::EINVAL),
    }
}

extern "C" fn ringbuf_reserve(map: u64, size: u64, flags: u64, _: u64, _: u64) -> u64 {
    if flags != 0 {
        return 0;
    }
    map_of(map).and_then(|m| m.ringbuf()).map_or(0, |ring| ring.reserve(size) as u64)
}

fn commit(record: u64, flags: u64, discard: bool) -> u64 {
    if let Some(ring) = ring_of(record as *const u8) {
        ring.commit(record as *mut u8, flags, discard);
    }
    0
}

extern "C" fn ringbuf_submit(record: u64, flags: u64, _: u64, _: u64, _: u64) -> u64 {
    commit(record, flags, false)
}

extern "C" fn ringbuf_discard(record: u64, flags: u64, _: u64, _: u64, _: u64) -> u64 {
    commit(record, flags, true)
}

extern "C" fn ringbuf_query(map: u64, flags: u64, _: u64, _: u64, _: u64) -> u64 {
    map_of(map).and_then(|m| m.ringbuf()).map_or(0, |ring| ring.query(flags))
}

/// The kernel's MAX_TAIL_CALL_CNT: the tail calls one run may take.
const MAX_TAIL_CALLS: u32 = 33;

/// The tail calls of the run on this thread: which programs it may go to (ids, ascending), how
/// many it took, and the one the last successful bpf_tail_call chose (0: none).
#[derive(Clone, Copy)]
pub(crate) struct TailCalls {
    targets: *const [u32],
    taken: u32,
    chosen: u32,
}

thread_local! {
    static TAIL_CALLS: Cell<TailCalls> = const { Cell::new(TailCalls { targets: &[], taken: 0, chosen: 0 }) };
}

/// Starts a run whose programs may tail-call the programs `targets` (ids, ascending; they must
/// outlive the run); returns what to give `end_tail_calls` after it.
pub(crate) fn begin_tail_calls(targets: &[u32]) -> TailCalls {
    TAIL_CALLS.with(|cell| cell.replace(TailCalls { targets, taken: 0, chosen: 0 }))
}

/// The program the run's last successful tail call chose, once.
pub(crate) fn take_tail_call() -> Option<u32> {
    TAIL_CALLS.with(|cell| {
        let mut calls = cell.get();
        let chosen = std::mem::take(&mut calls.chosen);
        cell.set(calls);
        (chosen != 0).then_some(chosen)
    })
}

pub(crate) fn end_tail_calls(outer: TailCalls) {
    TAIL_CALLS.with(|cell| cell.set(outer));
}

/// bpf_tail_call(ctx, prog_array, index), as the kernel's (bpf_tail_call in kernel/bpf/core.c):
/// an index past the end, an empty slot or the 34th tail call of a run fails, and the program
/// goes on. Otherwise it notes the program and returns 0, and the VM ends the run (uebpf_vm's
/// TAIL_CALL_HELPER) so that the runner (`LoadedProgram::run_raw`) runs it on the same context.
/// A program that is not among the run's targets (a program run without them, or one loaded into
/// the region after the caller was) fails the same way: never a jump into nothing.
extern "C" fn tail_call(_ctx: u64, map: u64, index: u64, _: u64, _: u64) -> u64 {
    let Some(slots) = map_of(map).and_then(|m| m.prog_array()) else { return errno(libc::EINVAL) };
    // The kernel compares the index as a u32.
    let id = slots.get(index as u32).unwrap_or(0);
    TAIL_CALLS.with(|cell| {
        let mut calls = cell.get();
        // SAFETY: the runner that set the targets keeps them alive while its run lasts.
        let known = unsafe { &*calls.targets }.binary_search(&id).is_ok();
        if id == 0 || !known || calls.taken >= MAX_TAIL_CALLS {
            return errno(libc::ENOENT);
        }
        calls.taken += 1;
        calls.chosen = id;
        cell.set(calls);
        0
    })
}

pub(crate) const GET_CURRENT_TASK: u32 = 35;
pub(crate) const CURRENT_TASK_UNDER_CGROUP: u32 = 37;
pub(crate) const GET_CURRENT_CGROUP_ID: u32 = 80;

/// bpf_current_task_under_cgroup(cgroup_array, index), as kernel/trace/bpf_trace.c's: -E2BIG
/// past the end, -EAGAIN for an empty slot, else whether the thread's cgroup is the slot's or
/// below it (1 or 0). The thread's cgroup is read at each call (`cgroup`): the kernel's answer
/// follows a process moved between cgroups, and so does this. -EIO if it cannot be read (no
/// /proc): never an answer uebpf cannot stand behind.
extern "C" fn current_task_under_cgroup(map: u64, index: u64, _: u64, _: u64, _: u64) -> u64 {
    let Some(slots) = map_of(map).and_then(|m| m.cgroup_array()) else { return errno(libc::EINVAL) };
    match slots.get(index as u32) {
        None => errno(libc::E2BIG),
        Some(0) => errno(libc::EAGAIN),
        Some(id) => crate::cgroup::current_under(id).map_or(errno(libc::EIO), u64::from),
    }
}

/// bpf_get_current_cgroup_id: the thread's cgroup v2 id (0 if it cannot be read).
extern "C" fn get_current_cgroup_id(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    crate::cgroup::current_cgroup_id()
}

/// Every helper uebpf provides: (kernel id, function).
const HELPERS: &[(u32, HelperFn)] = &[
    (1, map_lookup_elem),
    (2, map_update_elem),
    (3, map_delete_elem),
    (4, probe_read_kernel), // probe_read: on x86-64 user and kernel reads are one address space here
    (5, ktime_get_ns),
    (6, trace_printk),
    (7, get_prandom_u32),
    (8, get_smp_processor_id),
    (uebpf_vm::insn::TAIL_CALL_HELPER as u32, tail_call),
    (14, get_current_pid_tgid),
    (15, get_current_uid_gid),
    (16, get_current_comm),
    (GET_CURRENT_TASK, get_current_task),
    (25, perf_event_output),
    (GET_STACKID, get_stackid),
    (GET_STACK, get_stack),
    (36, probe_write_user),
    (CURRENT_TASK_UNDER_CGROUP, current_task_under_cgroup),
    (GET_CURRENT_CGROUP_ID, get_current_cgroup_id),
    (87, map_push_elem),
    (88, map_pop_elem),
    (89, map_peek_elem),
    (45, probe_read_kernel_str), // probe_read_str
    (112, probe_read_user),
    (113, probe_read_kernel),
    (114, probe_read_user_str),
    (115, probe_read_kernel_str),
    (125, ktime_get_boot_ns),
    (130, ringbuf_output),
    (131, ringbuf_reserve),
    (132, ringbuf_submit),
    (133, ringbuf_discard),
    (134, ringbuf_query),
    (160, ktime_get_coarse_ns),
    (GET_FUNC_IP, get_func_ip),
    (OVERRIDE_RETURN, override_return),
    (GET_ATTACH_COOKIE, get_attach_cookie),
    (177, trace_vprintk),
];

/// Registers every helper in `env`.
pub(crate) fn register_all(env: &mut Environment) {
    for &(id, helper) in HELPERS {
        env.register_helper(id, helper);
    }
}

/// `bpf_<name>` for a kernel helper id.
pub(crate) fn helper_name(id: u32) -> String {
    HELPER_NAMES.get(id as usize).map_or_else(|| format!("helper #{id}"), |name| format!("bpf_{name}"))
}

/// Names of the helpers uebpf provides (for messages).
pub(crate) fn provided_names() -> String {
    // bpf_loop is the VM's own (it calls the program's callback), not a registered helper.
    let own = std::iter::once(uebpf_vm::insn::LOOP_HELPER as u32);
    HELPERS.iter().map(|&(id, _)| id).chain(own).map(helper_name).collect::<Vec<_>>().join(", ")
}
