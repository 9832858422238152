//! What a hook runs: one attached program, JIT-compiled, on the hook's `struct pt_regs`.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, Ordering};

use uebpf::maps::{current, AttachState};
use uebpf::LoadedProgram;
use uebpf_hook::{Handler, Promises, PtRegs};
use uebpf_vm::JitFunction;

/// One attachment's probe. Leaked once attached: a thread may still be running it after the
/// hook is detached, and the program it holds keeps the region's maps mapped. `repr(C)`: the
/// direct handler (`run_direct`) reads its first fields.
#[repr(C)]
pub(crate) struct Probe {
    /// The attachment's state in the region: a disable or detach stops the program at once, in
    /// every process (forked children too), before the agent's thread removes the hook.
    state: &'static AtomicU32,
    /// The attachment's process filter (-1: every process). Checked on each hit because a
    /// forked child inherits the parent's hooks.
    pid: i32,
    /// Where `current::pid` caches the process id, for `run_direct`.
    pid_cell: &'static AtomicU32,
    /// The attachment's `bpf_cookie`, if the program reads it (bpf_get_attach_cookie): set on
    /// the thread before each run. None costs nothing per hit.
    cookie: Option<u64>,
    /// The probed address, if the program reads it (bpf_get_func_ip): set like the cookie.
    func_ip: Option<u64>,
    /// Where the user stack is, if the program reads it (bpf_get_stack, _stackid).
    stack: Option<uebpf::StackOrigin>,
    /// The program's code, called directly; None for a program that takes tail calls, which runs
    /// through `LoadedProgram::run_raw`.
    function: Option<JitFunction>,
    /// An extension (bpf_override_return) at a function's first instruction: its runs may make
    /// the call return at once (the session attaches it nowhere else).
    overrides: bool,
    program: LoadedProgram,
}

impl Probe {
    /// # Safety
    /// `state` must stay mapped for the life of the process (the program's instance holds the
    /// region that contains it, and probes are never freed).
    /// `func_ip`: the probed address (0 where there is none, a system call tracepoint);
    /// `stack`: where a program finds the user stack.
    pub(crate) unsafe fn new(
        state: &AtomicU32,
        pid: i32,
        cookie: u64,
        func_ip: u64,
        stack: uebpf::StackOrigin,
        program: LoadedProgram,
    ) -> Option<Probe> {
        let function = program.jit_function()?;
        let function = (!program.takes_tail_calls()).then_some(function);
        let state = &*(state as *const AtomicU32);
        let cookie = program.reads_attach_cookie().then_some(cookie);
        let func_ip = program.reads_func_ip().then_some(func_ip);
        let stack = program.reads_stack().then_some(stack);
        let overrides = program.overrides();
        let pid_cell = current::pid_cell();
        Some(Probe { state, pid, pid_cell, cookie, func_ip, stack, function, overrides, program })
    }

    /// The hook handler for this probe and what it promises (`uebpf_hook::Promises`): `run`, or
    /// `run_direct` for a program that needs nothing set on the thread before it runs (no
    /// cookie, function address or stack origin, no tail calls), which then keeps the vectors
    /// when its code does. Only an extension's run may make the call return at once.
    pub(crate) fn handler(&self) -> (Handler, Promises) {
        let plain = self.function.is_some() && self.cookie.is_none() && self.func_ip.is_none() && self.stack.is_none();
        let keeps_course = !self.overrides;
        if plain && keeps_course {
            (run_direct, Promises { keeps_course, keeps_vectors: self.program.keeps_vectors() })
        } else {
            (run, Promises { keeps_course, keeps_vectors: false })
        }
    }

    /// The hook data of a probe that runs on `pt_regs` (`run`).
    pub(crate) fn leak(self) -> *mut c_void {
        (Box::leak(Box::new(self)) as *mut Probe).cast()
    }

    /// Whether the attachment is enabled and admits this process.
    pub(crate) fn admits(&self) -> bool {
        self.state.load(Ordering::Relaxed) == AttachState::Enabled as u32 && (self.pid < 0 || self.pid as u32 == current::pid())
    }

    /// Whether the program is an extension (bpf_override_return).
    pub(crate) fn overrides(&self) -> bool {
        self.overrides
    }

    /// Runs the program on the hook's `pt_regs`, an extension allowed to make the call return.
    ///
    /// # Safety
    /// `regs` are a hook's registers (at a function's first instruction, for an extension).
    pub(crate) unsafe fn run_on_regs(&self, regs: *mut PtRegs) {
        if self.overrides {
            uebpf::allow_override(regs);
        }
        self.run_on(regs.cast(), std::mem::size_of::<PtRegs>());
        if self.overrides {
            uebpf::allow_override(std::ptr::null_mut());
        }
    }

    /// Runs the program on a context of `len` bytes.
    ///
    /// # Safety
    /// `context` points at `len` readable and writable bytes.
    pub(crate) unsafe fn run_on(&self, context: *mut u8, len: usize) {
        if let Some(cookie) = self.cookie {
            uebpf::set_attach_cookie(cookie);
        }
        if let Some(address) = self.func_ip {
            uebpf::set_func_ip(address);
        }
        if let Some(origin) = self.stack {
            uebpf::set_stack_origin(origin);
        }
        match self.function {
            Some(function) => {
                function(context, len as u64);
            }
            // JIT code does not stop: the only error is the interpreter's, which probes do not use.
            None => {
                let _ = self.program.run_raw(context, len);
            }
        }
    }
}

/// The hook engine's miss handler (`uebpf_hook::set_miss_handler`): an attachment's probe (a
/// hook whose handler is `run`) whose site was hit while a program ran on the thread, or whose
/// return could not be recorded, counts the miss in its program's `recursion_misses` if it would
/// have run. The agent's other hooks (system call tracepoints at libc's wrappers, its own
/// sigaction hook) are not told apart per program: their misses are the hook's `skipped`.
pub(crate) unsafe extern "C" fn missed(handler: Handler, data: *mut c_void) {
    if ![run as *const () as usize, run_direct as *const () as usize].contains(&(handler as usize)) {
        return;
    }
    let probe = &*data.cast::<Probe>();
    if probe.admits() {
        probe.program.count_miss();
    }
}

/// The hook handler: runs the program on the hook's `pt_regs` if its attachment is enabled and
/// admits this process. The hook engine's per-thread guard keeps it from running nested on one
/// thread.
pub(crate) unsafe extern "C" fn run(regs: *mut PtRegs, data: *mut c_void) {
    let probe = &*data.cast::<Probe>();
    if probe.admits() {
        probe.run_on_regs(regs);
    }
}

// `run` for a probe whose program needs nothing but its context (`Probe::handler`), in machine
// code that touches no vector register, so that a JIT-compiled program that keeps the vectors
// is run without the hook saving them: the attachment's state and process filter as `admits`
// checks them, then a tail call of the program with (regs, size of pt_regs). The process id
// comes from `current::pid`'s cache; where it is not read yet (0: a forked child before its
// first look) it is asked of the kernel by the getpid system call (which changes only rax, rcx
// and r11) and cached, as `current::pid` does.
std::arch::global_asm!(
    ".text",
    ".p2align 4",
    ".globl uebpf_agent_run_direct",
    ".hidden uebpf_agent_run_direct",
    "uebpf_agent_run_direct:",
    "mov rax, qword ptr [rsi + {state}]",
    "cmp dword ptr [rax], {enabled}",
    "jne 9f",
    "mov edx, dword ptr [rsi + {pid}]",
    "test edx, edx",
    "js 2f",
    "mov r8, qword ptr [rsi + {pid_cell}]",
    "mov ecx, dword ptr [r8]",
    "cmp ecx, edx",
    "je 2f",
    "test ecx, ecx",
    "jnz 9f",
    "mov eax, {getpid}",
    "syscall",
    "mov dword ptr [r8], eax",
    "cmp eax, edx",
    "jne 9f",
    "2:",
    "mov rax, qword ptr [rsi + {function}]",
    "mov esi, {ctx_len}",
    "jmp rax",
    "9:",
    "ret",
    state = const std::mem::offset_of!(Probe, state),
    pid = const std::mem::offset_of!(Probe, pid),
    pid_cell = const std::mem::offset_of!(Probe, pid_cell),
    function = const std::mem::offset_of!(Probe, function),
    enabled = const AttachState::Enabled as u32,
    getpid = const libc::SYS_getpid,
    ctx_len = const std::mem::size_of::<PtRegs>(),
);

extern "C" {
    /// The hook handler of a probe `Probe::handler` chose it for: `data` is the probe.
    #[link_name = "uebpf_agent_run_direct"]
    fn run_direct(regs: *mut PtRegs, data: *mut c_void);
}
