//! stepcount against forked children that run known instruction sequences between int3 markers:
//! the counts are exact, so the tests compare them exactly.

use std::arch::{asm, global_asm};
use std::os::fd::AsRawFd;
use std::process::{Command, Output};

use serde_json::{json, Value};

const STEPCOUNT: &str = env!("CARGO_BIN_EXE_stepcount");
/// The kernel's struct sigaction flag for a handler's return path (x86-64 requires one).
const SA_RESTORER: u64 = 0x0400_0000;

// Code whose instructions the tests know exactly, at symbols the symbol lookup must find.
global_asm!(
    ".pushsection .text.stepcount_test,\"ax\",@progbits",
    // The attribution test's traced function: its first instruction is "patched" to jump to the
    // hook's stub (r8), its body is reached again through the trampoline.
    ".globl stepcount_test_f",
    ".type stepcount_test_f,@function",
    "stepcount_test_f:",
    "jmp r8",
    ".globl stepcount_test_f_body",
    "stepcount_test_f_body:",
    "nop",
    "ret",
    ".size stepcount_test_f, .-stepcount_test_f",
    // A helper, named as rustc names functions (legacy mangling).
    ".globl _ZN9stepcount5tests6helper17h0123456789abcdefE",
    ".type _ZN9stepcount5tests6helper17h0123456789abcdefE,@function",
    "_ZN9stepcount5tests6helper17h0123456789abcdefE:",
    "nop",
    "ret",
    ".size _ZN9stepcount5tests6helper17h0123456789abcdefE, .-_ZN9stepcount5tests6helper17h0123456789abcdefE",
    // A signal handler and its return path (rt_sigreturn).
    ".globl stepcount_test_handler",
    ".type stepcount_test_handler,@function",
    "stepcount_test_handler:",
    "ret",
    ".size stepcount_test_handler, .-stepcount_test_handler",
    ".globl stepcount_test_restorer",
    ".type stepcount_test_restorer,@function",
    "stepcount_test_restorer:",
    "mov eax, 15",
    "syscall",
    ".size stepcount_test_restorer, .-stepcount_test_restorer",
    ".popsection",
);

extern "C" {
    fn stepcount_test_f();
    fn stepcount_test_f_body();
    #[link_name = "_ZN9stepcount5tests6helper17h0123456789abcdefE"]
    fn stepcount_test_helper();
    fn stepcount_test_handler();
    fn stepcount_test_restorer();
}

/// The kernel's struct sigaction on x86-64 (arch/x86/include/uapi/asm/signal.h).
#[repr(C)]
struct KernelSigaction {
    handler: usize,
    flags: u64,
    restorer: usize,
    mask: u64,
}

/// Five hits of known instructions (`counted` below has their counts).
fn counted_hits(_: usize) {
    let mut cell = 0u64;
    let cell: *mut u64 = &mut cell;
    let mut buf = [0u8; 16];
    let action = KernelSigaction {
        handler: stepcount_test_handler as *const () as usize,
        flags: SA_RESTORER,
        restorer: stepcount_test_restorer as *const () as usize,
        mask: 0,
    };
    // SAFETY: the sequences touch only `cell`, `buf` and the registers they declare; the raw
    // rt_sigaction installs a handler that returns at once.
    unsafe {
        // 1: four instructions, one atomic.
        asm!("int3", "nop dword ptr [rax + 0x5eed]", "nop", "nop", "mov rax, 1", "lock xadd qword ptr [{cell}], rax", "int3", "nop dword ptr [rax + 0x5eed]", cell = in(reg) cell, out("rax") _);
        // 2: a call of a local function: call, xchg with memory (implicitly locked), ret.
        asm!("int3", "nop dword ptr [rax + 0x5eed]", "call 2f", "int3", "nop dword ptr [rax + 0x5eed]", "jmp 3f", "2:", "xchg qword ptr [{cell}], rax", "ret", "3:", cell = in(reg) cell, out("rax") _);
        // 3: 8 iterations of rep stosb count once; mfence; a system call (getpid).
        asm!(
            "int3", "nop dword ptr [rax + 0x5eed]", "mov rdi, {buf}", "mov ecx, 8", "xor eax, eax", "rep stosb", "mfence", "mov eax, 39", "syscall", "int3", "nop dword ptr [rax + 0x5eed]",
            buf = in(reg) buf.as_mut_ptr(), out("rdi") _, out("rcx") _, out("rax") _, out("r11") _,
        );
        // 4: a signal to itself (tgkill) during the hit: its handler (ret) and return path (mov,
        // syscall) are counted: mov, syscall, ret, mov, syscall, nop.
        if libc::syscall(libc::SYS_rt_sigaction, libc::SIGUSR2, &action, 0usize, 8usize) != 0 {
            libc::_exit(3); // no panic in a forked child
        }
        let (pid, tid) = (libc::getpid() as i64, libc::syscall(libc::SYS_gettid));
        asm!(
            "int3", "nop dword ptr [rax + 0x5eed]", "mov eax, 234", "syscall", "nop", "int3", "nop dword ptr [rax + 0x5eed]",
            in("rdi") pid, in("rsi") tid, in("rdx") libc::SIGUSR2 as i64, out("rax") _, out("rcx") _, out("r11") _,
        );
        // 5: an int3 that is no marker (as a hook patches in where no jump fits): its SIGTRAP goes
        // to the victim's handler, and the hit goes on: int3, ret, mov, syscall, nop.
        if libc::syscall(libc::SYS_rt_sigaction, libc::SIGTRAP, &action, 0usize, 8usize) != 0 {
            libc::_exit(3);
        }
        asm!("int3", "nop dword ptr [rax + 0x5eed]", "int3", "nop", "int3", "nop dword ptr [rax + 0x5eed]", out("rax") _, out("rcx") _, out("r11") _);
    }
}

fn counted() -> Value {
    let counts =
        |instructions, atomics, syscalls| json!({"instructions": instructions, "atomics": atomics, "syscalls": syscalls, "calls": 0});
    let hit = |instructions, atomics, syscalls, signals| {
        json!({"instructions": instructions, "atomics": atomics, "syscalls": syscalls, "signals": signals, "vdso_retried": 0,
               "parts": {"function": counts(instructions, atomics, syscalls)}})
    };
    json!([hit(4, 1, 0, 0), hit(3, 1, 0, 0), hit(7, 1, 1, 0), hit(6, 0, 2, 1), hit(5, 0, 1, 1)])
}

/// One hit through every part, as the hook engine and the agent run a probe: the victim calls f,
/// whose first instruction jumps to the hook's stub (anonymous memory). The stub calls the
/// runtime library (a file mapping of its own), which calls the program (anonymous memory), then
/// runs it again by a tail call; the program calls a helper (here in this test's executable).
/// Then the stub calls f's trampoline (anonymous), which jumps into f's body, which returns to
/// the stub, which returns to the victim. `code` points at [the anonymous page, the runtime].
fn attribution_hit(code: usize) {
    // SAFETY: `code` points at two addresses this test mapped before the fork; the code called
    // uses only the registers given here and the stack.
    unsafe {
        let [page, runtime] = *(code as *const [usize; 2]);
        asm!(
            "int3", "nop dword ptr [rax + 0x5eed]", "call rax", "int3", "nop dword ptr [rax + 0x5eed]",
            in("rax") stepcount_test_f as *const () as usize, in("rdi") runtime, in("rsi") page + PROGRAM,
            in("rdx") stepcount_test_helper as *const () as usize, in("r8") page + STUB, in("r9") page + TRAMPOLINE,
            in("r10") stepcount_test_f_body as *const () as usize, clobber_abi("C"),
        );
    }
}

/// Where attribution_hit's anonymous page has its pieces of code.
const STUB: usize = 0;
const PROGRAM: usize = 16;
const TRAMPOLINE: usize = 32;

/// A child of this test waiting for SIGUSR1; killed and reaped when dropped, if not reaped yet.
struct Victim {
    pid: libc::pid_t,
    reaped: bool,
}

impl Victim {
    /// Forks a child that waits for SIGUSR1, then runs `hits(arg)` and exits 0. SIGUSR1 is
    /// blocked before the fork, so that it is not lost whenever it comes: sigwait takes it.
    fn start(hits: fn(usize), arg: usize) -> Victim {
        // SAFETY: the child makes only async-signal-safe calls (this process has other threads)
        // and leaves with _exit.
        unsafe {
            let mut go: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut go);
            libc::sigaddset(&mut go, libc::SIGUSR1);
            let mut old: libc::sigset_t = std::mem::zeroed();
            assert_eq!(libc::pthread_sigmask(libc::SIG_BLOCK, &go, &mut old), 0);
            let pid = libc::fork();
            if pid == 0 {
                // Other tests' pipes from their stepcount: they would see no end of file while
                // this child held them.
                libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
                // Not stepcount's child: allowed to trace it under Yama's ptrace_scope 1.
                libc::prctl(libc::PR_SET_PTRACER, libc::PR_SET_PTRACER_ANY, 0, 0, 0);
                // A test that leaves it at a marker untraced kills it with SIGTRAP: no core file.
                libc::setrlimit(libc::RLIMIT_CORE, &libc::rlimit { rlim_cur: 0, rlim_max: 0 });
                let mut signal = 0;
                libc::sigwait(&go, &mut signal);
                hits(arg);
                libc::_exit(0);
            }
            libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
            assert!(pid > 0, "fork: {}", std::io::Error::last_os_error());
            Victim { pid, reaped: false }
        }
    }

    /// Waits for it to end: its wait status.
    fn wait(&mut self) -> i32 {
        let mut status = 0;
        // SAFETY: `status` is a valid c_int to write.
        assert_eq!(unsafe { libc::waitpid(self.pid, &mut status, 0) }, self.pid);
        self.reaped = true;
        status
    }
}

impl Drop for Victim {
    fn drop(&mut self) {
        if !self.reaped {
            // SAFETY: our own child.
            unsafe {
                libc::kill(self.pid, libc::SIGKILL);
                libc::waitpid(self.pid, std::ptr::null_mut(), 0);
            }
        }
    }
}

fn stepcount(args: &[&str]) -> Output {
    Command::new(STEPCOUNT).args(args).output().expect("running stepcount")
}

/// Its one line of JSON on stdout, after a success.
fn result(output: &Output) -> Value {
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{:?}: {}", output.status, String::from_utf8_lossy(&output.stderr));
    assert_eq!(stdout.matches('\n').count(), 1, "one line: {stdout}");
    assert!(stdout.ends_with('\n'));
    serde_json::from_str(&stdout).expect("JSON")
}

/// Its one line of error on stderr, after a failure with `status`.
fn failure(output: &Output, status: i32) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(status), "stderr: {stderr}");
    assert!(output.stdout.is_empty());
    assert_eq!(stderr.matches('\n').count(), 1, "one line: {stderr}");
    assert!(stderr.starts_with("stepcount: "), "{stderr}");
    stderr.trim_end().to_string()
}

fn exited_zero(status: i32) -> bool {
    libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
}

#[test]
fn counts_known_instructions_exactly_and_the_same_each_run() {
    let mut runs = Vec::new();
    for _ in 0..3 {
        let mut victim = Victim::start(counted_hits, 0);
        let pid = victim.pid.to_string();
        let output = result(&stepcount(&["--pid", &pid, "--hits", "5", "--go"]));
        assert_eq!(output["pid"], json!(victim.pid));
        assert!(exited_zero(victim.wait()), "the victim goes on and exits 0 once detached");
        runs.push(output["hits"].clone());
    }
    assert_eq!(runs[0], counted());
    assert!(runs.iter().all(|hits| *hits == runs[0]), "{runs:?}");
}

#[test]
fn attributes_hook_program_and_helper() {
    // SAFETY: a fresh page, written while read-write, then made read+execute; a file mapped
    // read+execute.
    let (page, runtime, runtime_path) = unsafe {
        let page =
            libc::mmap(std::ptr::null_mut(), 4096, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0);
        assert_ne!(page, libc::MAP_FAILED);
        let write = |offset: usize, code: &[u8]| std::ptr::copy_nonoverlapping(code.as_ptr(), page.cast::<u8>().add(offset), code.len());
        write(STUB, &[0xff, 0xd7, 0x41, 0xff, 0xd1, 0xc3]); // call rdi (the runtime); call r9 (the trampoline); ret
        write(PROGRAM, &[0xff, 0xd2, 0xc3]); // call rdx (the helper); ret
        write(TRAMPOLINE, &[0x41, 0xff, 0xe2]); // jmp r10 (f's body)
        assert_eq!(libc::mprotect(page, 4096, libc::PROT_READ | libc::PROT_EXEC), 0);
        // The runtime library: call rsi (the program); jmp rsi (the program again, a tail call).
        let path = format!("{}/stepcount-runtime-{}.so", env!("CARGO_TARGET_TMPDIR"), std::process::id());
        std::fs::write(&path, [0xff, 0xd6, 0xff, 0xe6]).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        std::fs::remove_file(&path).unwrap(); // the mapping keeps it: maps shows "(deleted)"
        let runtime = libc::mmap(std::ptr::null_mut(), 4096, libc::PROT_READ | libc::PROT_EXEC, libc::MAP_PRIVATE, file.as_raw_fd(), 0);
        assert_ne!(runtime, libc::MAP_FAILED);
        (page, runtime, path)
    };
    let code = [page as usize, runtime as usize];
    let mut victim = Victim::start(attribution_hit, code.as_ptr() as usize);
    let pid = victim.pid.to_string();
    let output = stepcount(&["--pid", &pid, "--hits", "1", "--go", "--runtime-lib", runtime_path.rsplit('/').next().unwrap()]);
    let status = victim.wait();
    // SAFETY: mapped above, used by no one now.
    unsafe {
        libc::munmap(page, 4096);
        libc::munmap(runtime, 4096);
    }
    let output = result(&output);
    assert!(exited_zero(status));
    let counts = |instructions, calls| json!({"instructions": instructions, "atomics": 0, "syscalls": 0, "calls": calls});
    assert_eq!(
        output["hits"],
        json!([{"instructions": 18, "atomics": 0, "syscalls": 0, "signals": 0, "vdso_retried": 0, "parts": {
            "function": counts(4, 0),                        // call f, its jmp to the stub, its body (nop, ret)
            "hook": counts(6, 0),                            // the stub's 3, the runtime's 2, the trampoline's jmp
            "program": counts(4, 2),                         // called, then tail-called: call rdx, ret
            "helper:stepcount::tests::helper": counts(4, 2), // nop, ret, twice
        }}])
    );
}

#[test]
fn reports_a_victim_that_exits_before_the_hits() {
    let mut victim = Victim::start(counted_hits, 0);
    let pid = victim.pid.to_string();
    let why = failure(&stepcount(&["--pid", &pid, "--hits", "6", "--go"]), 1);
    assert_eq!(why, format!("stepcount: pid {pid} exited (status 0) after 5 of 6 hits"));
    assert!(exited_zero(victim.wait()));
}

#[test]
fn gives_up_on_a_hit_over_max_steps_and_detaches() {
    let mut victim = Victim::start(counted_hits, 0);
    let pid = victim.pid.to_string();
    let why = failure(&stepcount(&["--pid", &pid, "--hits", "1", "--go", "--max-steps", "2"]), 1);
    assert_eq!(why, "stepcount: a hit ran over 2 instructions: is the end marker missing?");
    // Detached in the middle of the first hit, it runs on into the end marker, untraced now.
    let status = victim.wait();
    assert!(libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGTRAP, "status {status:#x}");
}

#[test]
fn usage_mistakes_exit_2() {
    for args in [&["--pid", "1"][..], &["--hits", "1"], &["--pid", "one", "--hits", "1"], &["--pid", "1", "--hits", "1", "--bogus"], &[]] {
        let why = failure(&stepcount(args), 2);
        assert!(why.contains("usage: stepcount --pid PID --hits N"), "{args:?}: {why}");
    }
}

#[test]
fn a_process_that_does_not_exist_exits_1() {
    // Above the largest pid_max (2^22, include/linux/threads.h PID_MAX_LIMIT).
    let why = failure(&stepcount(&["--pid", "2147483647", "--hits", "1"]), 1);
    assert_eq!(why, "stepcount: cannot trace pid 2147483647: no such process");
}
