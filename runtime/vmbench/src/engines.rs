//! The engines a benchmark program runs on. Preparing a program for an engine either gives a
//! runner (run the program N times on a packet, report mean ns per run and the last r0) or the
//! reason the engine cannot run it.

use std::collections::BTreeMap;
use std::ffi::{c_int, c_void, CStr};
use std::hint::black_box;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

use uebpf::{Engine, LoadedProgram, Tier};
use uebpf_vm::{ffi, JitError, JitFunction, JitProgram, Program};

use crate::programs::{BenchProgram, Embedded};

pub const ENGINES: [(&str, &str); 9] = [
    (
        "uebpf-interpreter",
        "uebpf interpreter through the Rust API (Program::interpret, every access checked; embed_* programs: uebpf::LoadedProgram::run)",
    ),
    ("uebpf-jit", "uebpf x86-64 JIT through the Rust API (JitProgram::run; embed_* programs: uebpf::LoadedProgram::run, base tier)"),
    (
        "uebpf-opt",
        "uebpf optimizing JIT tier, on Cranelift, through the Rust API (JitProgram::compile_optimized, then run; embed_* programs: uebpf::LoadedProgram::run, optimizing tier)",
    ),
    ("uebpf-c-api-jit", "uebpf JIT called from C through uebpf_vm_run (embed_* programs: uebpf_program_run), the C embedding APIs"),
    (
        "uebpf-c-jit-fn",
        "uebpf JIT called from C through the pointer uebpf_vm_jit_function (embed_* programs: uebpf_program_jit_function) returns",
    ),
    ("rbpf-interpreter", "rbpf 0.4 interpreter (EbpfVmRaw::execute_program)"),
    ("rbpf-jit", "rbpf 0.4 x86-64 JIT (EbpfVmRaw::execute_program_jit)"),
    ("kernel-jit", "Linux BPF JIT via BPF_PROG_TEST_RUN (XDP, repeat=N); kernel-measured mean ns per run"),
    ("native-c", "the same algorithm in C, cc -O2, called through a function pointer"),
];

/// One timed batch: mean nanoseconds per run, and r0 of the batch (for result checks).
pub struct Timed {
    pub ns_per_run: f64,
    pub r0: u64,
}

pub type Runner<'a> = Box<dyn FnMut(&mut [u8], u64) -> Result<Timed, String> + 'a>;

/// As `time_loop` for calls that can fail; the last failure (if any) is the result.
fn time_fallible(iterations: u64, mut call: impl FnMut() -> Result<u64, String>) -> Result<Timed, String> {
    let mut error = None;
    let timed = time_loop(iterations, || {
        call().unwrap_or_else(|e| {
            error = Some(e);
            0
        })
    });
    error.map_or(Ok(timed), Err)
}

/// Times `iterations` calls of `call` and returns the mean and the last result.
fn time_loop(iterations: u64, mut call: impl FnMut() -> u64) -> Timed {
    let mut r0 = 0;
    let start = Instant::now();
    for _ in 0..iterations {
        r0 = black_box(call());
    }
    let elapsed = start.elapsed().as_nanos() as f64;
    Timed { ns_per_run: elapsed / iterations as f64, r0 }
}

extern "C" {
    /// `vm` is a `struct uebpf_vm *`, opaque on both sides.
    fn embed_run_loop(vm: *mut c_void, ctx: *mut c_void, ctx_len: usize, iterations: u64, failed: *mut c_int) -> u64;
    fn embed_jit_fn_loop(jit: JitFunction, ctx: *mut c_void, ctx_len: usize, iterations: u64) -> u64;
    /// `program` is a `struct uebpf_program *`, opaque on both sides.
    fn embed_program_loop(program: *const c_void, ctx: *mut c_void, ctx_len: usize, iterations: u64, failed: *mut c_int) -> u64;
}

/// A VM created through the C API, freed on drop.
struct CVm(*mut ffi::UebpfVm);

impl CVm {
    /// Closures must call this rather than read `.0`: a closure that names only the field
    /// captures a copy of the pointer and lets the owner (and the VM) be dropped.
    fn ptr(&self) -> *mut ffi::UebpfVm {
        self.0
    }
}

impl Drop for CVm {
    fn drop(&mut self) {
        // SAFETY: created by uebpf_vm_new and not used after this.
        unsafe { ffi::uebpf_vm_free(self.0) }
    }
}

/// A VM loaded for the JIT through the C API.
fn c_vm_with_jit(program: &BenchProgram, checked: bool) -> Result<CVm, String> {
    let vm = CVm(ffi::uebpf_vm_new());
    // SAFETY: vm is live; the bytecode slice is valid for its length. Loaded as the Rust side
    // loaded it (main.rs, `load`): checked, the program's context its packet, where the analysis
    // accepts it, else unchecked.
    let loaded = unsafe {
        ffi::uebpf_vm_set_context_size(vm.ptr(), program.packet.len() as u32);
        let (code, len) = (program.bytecode.as_ptr(), program.bytecode.len());
        if checked {
            ffi::uebpf_vm_load(vm.ptr(), code, len, 1)
        } else {
            ffi::uebpf_vm_load_unchecked(vm.ptr(), code, len, 1)
        }
    };
    if loaded != 0 {
        // SAFETY: vm is live; last_error is a NUL-terminated string it owns.
        let why = unsafe { CStr::from_ptr(ffi::uebpf_vm_last_error(vm.ptr())) };
        return Err(format!("uebpf_vm_load failed: {}", why.to_string_lossy()));
    }
    Ok(vm)
}

/// Times a C loop (`c_loop(iterations) -> folded r0`) around all iterations at once.
fn time_c_loop(iterations: u64, c_loop: impl FnOnce() -> u64) -> Timed {
    let start = Instant::now();
    let r0 = c_loop();
    Timed { ns_per_run: start.elapsed().as_nanos() as f64 / iterations as f64, r0 }
}

fn c_jit_fn<'a>(program: &BenchProgram, checked: bool) -> Result<Runner<'a>, String> {
    let vm = c_vm_with_jit(program, checked)?;
    // SAFETY: vm is live and was loaded for the JIT.
    let jit = unsafe { ffi::uebpf_vm_jit_function(vm.ptr()) }.ok_or("no JIT function after a JIT load")?;
    Ok(Box::new(move |packet: &mut [u8], iterations| {
        let _owner = &vm; // the entry point lives as long as the VM
                          // SAFETY: jit is live while vm is; packet is valid for its length.
        Ok(time_c_loop(iterations, || unsafe { embed_jit_fn_loop(jit, packet.as_mut_ptr().cast(), packet.len(), iterations) }))
    }))
}

fn c_api_jit<'a>(program: &BenchProgram, checked: bool) -> Result<Runner<'a>, String> {
    let vm = c_vm_with_jit(program, checked)?;
    Ok(Box::new(move |packet: &mut [u8], iterations| {
        let mut failed = 0;
        // SAFETY: vm is live and loaded; packet is valid for its length.
        let timed = time_c_loop(iterations, || unsafe {
            embed_run_loop(vm.ptr().cast(), packet.as_mut_ptr().cast(), packet.len(), iterations, &mut failed)
        });
        if failed != 0 {
            return Err("uebpf_vm_run failed".into());
        }
        Ok(timed)
    }))
}

/// rbpf reports some unsupported instructions by panicking (`unimplemented!`): turn that into a reason.
fn rbpf_guard<T>(what: &str, f: impl FnOnce() -> Result<T, std::io::Error>) -> Result<T, String> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(format!("rbpf {what}: {e}")),
        Err(_) => Err(format!("rbpf {what} panicked (instruction not implemented)")),
    }
}

fn kernel_jit<'a>(program: &BenchProgram) -> Result<Runner<'a>, String> {
    kernel_bpf::check_access()?;
    let jit_enabled = std::fs::read_to_string("/proc/sys/net/core/bpf_jit_enable").unwrap_or_default();
    if jit_enabled.trim() == "0" {
        return Err("the kernel BPF JIT is disabled (net.core.bpf_jit_enable = 0)".into());
    }
    let loaded = kernel_bpf::XdpProgram::load(&program.bytecode, program.packet.len()).map_err(|e| e.to_string())?;
    Ok(Box::new(move |packet: &mut [u8], iterations| {
        let repeat = u32::try_from(iterations).map_err(|_| "BPF_PROG_TEST_RUN repeat is 32-bit".to_string())?;
        let run = loaded.test_run(packet, repeat).map_err(|e| e.to_string())?;
        Ok(Timed { ns_per_run: f64::from(run.duration_ns), r0: u64::from(run.retval) })
    }))
}

/// A program of an object, loaded through the runtime's C API (`uebpf_program_load`), freed on drop.
struct CProgram(*mut LoadedProgram);

impl CProgram {
    fn load(embedded: &Embedded, engine: c_int) -> Result<CProgram, String> {
        let name = std::ffi::CString::new(embedded.program).expect("program names have no NUL");
        // SAFETY: a live instance and a NUL-terminated name.
        let program = unsafe { uebpf::ffi::uebpf_program_load(&embedded.instance, name.as_ptr(), engine) };
        if program.is_null() {
            // SAFETY: the thread's last error, NUL-terminated.
            let why = unsafe { CStr::from_ptr(uebpf::ffi::uebpf_last_error()) };
            return Err(format!("uebpf_program_load failed: {}", why.to_string_lossy()));
        }
        Ok(CProgram(program))
    }

    fn ptr(&self) -> *mut LoadedProgram {
        self.0
    }
}

impl Drop for CProgram {
    fn drop(&mut self) {
        // SAFETY: from uebpf_program_load, not used after this.
        unsafe { uebpf::ffi::uebpf_program_free(self.0) }
    }
}

/// Programs of an object through the uebpf runtime's embedding APIs (Rust and C).
fn embedded_engine<'a>(engine: &str, embedded: &Embedded) -> Result<Runner<'a>, String> {
    match engine {
        "uebpf-interpreter" | "uebpf-jit" | "uebpf-opt" => {
            let mode = match engine {
                "uebpf-jit" => Engine::JitTier(Tier::Base),
                "uebpf-opt" => Engine::JitTier(Tier::Optimizing),
                _ => Engine::Interpreter,
            };
            let program = embedded.instance.program(embedded.program, mode).map_err(|e| e.to_string())?;
            Ok(Box::new(move |packet: &mut [u8], iterations| time_fallible(iterations, || program.run(packet).map_err(|e| e.to_string()))))
        }
        "uebpf-c-api-jit" => {
            let program = CProgram::load(embedded, 1)?;
            Ok(Box::new(move |packet: &mut [u8], iterations| {
                let mut failed = 0;
                // SAFETY: a live program; the packet is valid for its length.
                let timed = time_c_loop(iterations, || unsafe {
                    embed_program_loop(program.ptr().cast(), packet.as_mut_ptr().cast(), packet.len(), iterations, &mut failed)
                });
                if failed != 0 {
                    return Err("uebpf_program_run failed".into());
                }
                Ok(timed)
            }))
        }
        _ => {
            let program = CProgram::load(embedded, 1)?;
            // SAFETY: a live program loaded for the JIT.
            let jit = unsafe { uebpf::ffi::uebpf_program_jit_function(program.ptr()) }.ok_or("no JIT function after a JIT load")?;
            Ok(Box::new(move |packet: &mut [u8], iterations| {
                let _owner = &program; // the entry point lives as long as the program
                                       // SAFETY: jit is live while the program is; packet is valid for its length.
                Ok(time_c_loop(iterations, || unsafe { embed_jit_fn_loop(jit, packet.as_mut_ptr().cast(), packet.len(), iterations) }))
            }))
        }
    }
}

/// A JIT tier's compiler.
type Compile = fn(&Program) -> Result<JitProgram, JitError>;

/// How long each JIT tier takes to compile `loaded`: the fastest of a few compiles, in ns.
pub fn compile_times(loaded: &Program) -> Result<BTreeMap<&'static str, u64>, String> {
    const TIMES: usize = 5;
    let tiers: [(&str, Compile); 2] = [("uebpf-jit", JitProgram::compile), ("uebpf-opt", JitProgram::compile_optimized)];
    tiers
        .into_iter()
        .map(|(engine, compile)| {
            let mut fastest = u64::MAX;
            for _ in 0..TIMES {
                let start = Instant::now();
                black_box(compile(loaded).map_err(|e| format!("{engine}: {e}"))?);
                fastest = fastest.min(start.elapsed().as_nanos() as u64);
            }
            Ok((engine, fastest))
        })
        .collect()
}

/// Prepares `program` (already loaded into uebpf as `loaded`) for `engine`.
pub fn prepare<'a>(engine: &str, program: &'a BenchProgram, loaded: &'a Program) -> Result<Runner<'a>, String> {
    if let Some(embedded) = &program.embedded {
        match engine {
            // Both tiers through LoadedProgram::run, so that they compare with each other here.
            "uebpf-interpreter" | "uebpf-jit" | "uebpf-opt" | "uebpf-c-api-jit" | "uebpf-c-jit-fn" => {
                return embedded_engine(engine, embedded)
            }
            "kernel-jit" => return Err("a uprobe program: the kernel cannot run it with BPF_PROG_TEST_RUN".into()),
            _ => {}
        }
    }
    match engine {
        "uebpf-interpreter" => Ok(Box::new(move |packet: &mut [u8], iterations| {
            time_fallible(iterations, || loaded.interpret(packet, None).map_err(|e| e.to_string()))
        })),
        "uebpf-jit" | "uebpf-opt" => {
            let compile: Compile = if engine == "uebpf-opt" { JitProgram::compile_optimized } else { JitProgram::compile };
            let jit = compile(loaded).map_err(|e| e.to_string())?;
            if program.packet.len() < jit.context_needed() {
                return Err(format!("a packet of {} bytes, checked for {}", program.packet.len(), jit.context_needed()));
            }
            // SAFETY: loaded checked where the analysis accepts it (main.rs), within its stack and
            // a packet as long as the analysis assumed (above); the others the kernel verifier
            // accepts (the kernel engine), and they touch only their packet and stack.
            Ok(Box::new(move |packet: &mut [u8], iterations| Ok(time_loop(iterations, || unsafe { jit.run(packet) }))))
        }
        "uebpf-c-api-jit" => c_api_jit(program, loaded.is_checked()),
        "uebpf-c-jit-fn" => c_jit_fn(program, loaded.is_checked()),
        "rbpf-interpreter" => {
            let vm = rbpf_guard("load", || rbpf::EbpfVmRaw::new(Some(&program.bytecode)))?;
            Ok(Box::new(move |packet: &mut [u8], iterations| {
                time_fallible(iterations, || vm.execute_program(packet).map_err(|e| format!("rbpf interpreter: {e}")))
            }))
        }
        "rbpf-jit" => {
            let mut vm = rbpf_guard("load", || rbpf::EbpfVmRaw::new(Some(&program.bytecode)))?;
            rbpf_guard("JIT compile", || vm.jit_compile())?;
            Ok(Box::new(move |packet: &mut [u8], iterations| {
                // SAFETY: as for uebpf-jit; rbpf's JIT does not check accesses either.
                Ok(time_loop(iterations, || unsafe { vm.execute_program_jit(packet).unwrap_or(u64::MAX) }))
            }))
        }
        "kernel-jit" => kernel_jit(program),
        "native-c" => {
            let native = program.native;
            // SAFETY: the native twins access only the packet they are given, within its length.
            Ok(Box::new(move |packet: &mut [u8], iterations| {
                Ok(time_loop(iterations, || unsafe { native(packet.as_mut_ptr(), packet.len() as u64) }))
            }))
        }
        other => Err(format!("unknown engine {other}")),
    }
}
