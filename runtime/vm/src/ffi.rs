//! C ABI (declared in `include/uebpf_vm.h`): create a VM, register helpers and memory, load
//! bytecode for the interpreter or the JIT, run. Functions return 0 on success and -1 on failure,
//! with the reason in `uebpf_vm_last_error`.

use std::ffi::{c_char, c_int, c_void, CString};
use std::ptr;

use crate::{Environment, HelperFn, JitFunction, JitProgram, MemoryRegion, Program};

const ENGINE_INTERPRETER: c_int = 0;
const ENGINE_JIT: c_int = 1;

enum Loaded {
    Interpreter(Program),
    Jit(JitProgram),
}

/// Opaque to C: `struct uebpf_vm`.
pub struct UebpfVm {
    env: Environment,
    loaded: Option<Loaded>,
    budget: Option<u64>,
    last_error: CString,
}

impl UebpfVm {
    fn fail(&mut self, message: impl Into<String>) -> c_int {
        // Interior NULs cannot come from our messages; strip them rather than lose the message.
        let text: String = message.into().chars().filter(|&c| c != '\0').collect();
        self.last_error = CString::new(text).expect("NULs were removed");
        -1
    }
}

/// Turns a possibly null `vm` into a reference.
///
/// # Safety
/// `vm` is null or a live pointer from `uebpf_vm_new`.
unsafe fn vm_mut<'a>(vm: *mut UebpfVm) -> Option<&'a mut UebpfVm> {
    vm.as_mut()
}

#[no_mangle]
pub extern "C" fn uebpf_vm_new() -> *mut UebpfVm {
    Box::into_raw(Box::new(UebpfVm { env: Environment::new(), loaded: None, budget: None, last_error: CString::default() }))
}

/// # Safety
/// `vm` is null or from `uebpf_vm_new` and not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn uebpf_vm_free(vm: *mut UebpfVm) {
    if !vm.is_null() {
        drop(Box::from_raw(vm));
    }
}

/// # Safety
/// `vm` is null or live; `helper` follows the uebpf_helper_fn signature.
#[no_mangle]
pub unsafe extern "C" fn uebpf_vm_register_helper(vm: *mut UebpfVm, id: u32, helper: Option<HelperFn>) -> c_int {
    let Some(vm) = vm_mut(vm) else { return -1 };
    match helper {
        Some(helper) => {
            vm.env.register_helper(id, helper);
            0
        }
        None => vm.fail(format!("helper {id}: function pointer is NULL")),
    }
}

/// # Safety
/// `vm` is null or live; the region stays valid while programs of this VM run.
#[no_mangle]
pub unsafe extern "C" fn uebpf_vm_allow_memory(vm: *mut UebpfVm, start: *mut c_void, len: usize, writable: c_int) -> c_int {
    let Some(vm) = vm_mut(vm) else { return -1 };
    vm.env.allow_memory(MemoryRegion { start: start as u64, len: len as u64, writable: writable != 0 });
    0
}

/// Before `uebpf_vm_load`: the programs' context is `bytes` of memory (0 until set).
///
/// # Safety
/// `vm` is null or live.
#[no_mangle]
pub unsafe extern "C" fn uebpf_vm_set_context_size(vm: *mut UebpfVm, bytes: u32) -> c_int {
    let Some(vm) = vm_mut(vm) else { return -1 };
    vm.env.set_context_size(bytes);
    0
}

/// Checks `code` with the safety analysis (`Program::load`) and prepares it for `engine` (0
/// interpreter, 1 JIT). Helpers, memory regions and the context size must be set before.
///
/// # Safety
/// `vm` is null or live; `code` is valid for `code_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn uebpf_vm_load(vm: *mut UebpfVm, code: *const u8, code_len: usize, engine: c_int) -> c_int {
    load(vm, code, code_len, engine, Program::load)
}

/// As `uebpf_vm_load` without the safety analysis (`Program::load_unchecked`): a JIT-compiled
/// program may then read and write anywhere in the process and never end.
///
/// # Safety
/// `vm` is null or live; `code` is valid for `code_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn uebpf_vm_load_unchecked(vm: *mut UebpfVm, code: *const u8, code_len: usize, engine: c_int) -> c_int {
    load(vm, code, code_len, engine, Program::load_unchecked)
}

type Loader = fn(&[u8], &Environment) -> Result<Program, crate::LoadError>;

/// # Safety
/// As `uebpf_vm_load`.
unsafe fn load(vm: *mut UebpfVm, code: *const u8, code_len: usize, engine: c_int, loader: Loader) -> c_int {
    let Some(vm) = vm_mut(vm) else { return -1 };
    if code.is_null() {
        return vm.fail("code is NULL");
    }
    let program = match loader(std::slice::from_raw_parts(code, code_len), &vm.env) {
        Ok(program) => program,
        Err(e) => return vm.fail(e.to_string()),
    };
    vm.loaded = Some(match engine {
        ENGINE_INTERPRETER => Loaded::Interpreter(program),
        ENGINE_JIT => match JitProgram::compile(&program) {
            Ok(jit) => Loaded::Jit(jit),
            Err(e) => return vm.fail(e.to_string()),
        },
        other => return vm.fail(format!("unknown engine {other} (0 interpreter, 1 JIT)")),
    });
    0
}

/// Caps the instructions one interpreter run may execute; 0 removes the cap.
///
/// # Safety
/// `vm` is null or live.
#[no_mangle]
pub unsafe extern "C" fn uebpf_vm_set_budget(vm: *mut UebpfVm, budget: u64) -> c_int {
    let Some(vm) = vm_mut(vm) else { return -1 };
    vm.budget = (budget != 0).then_some(budget);
    0
}

/// Runs the loaded program with `ctx` (r1) and `ctx_len` (r2); stores r0 in `*result`.
///
/// # Safety
/// `vm` is null or live; `ctx` is valid for `ctx_len` bytes; `result` is valid for writing.
/// A program loaded checked gets at least the context it was checked for (else -1); one loaded
/// unchecked and JIT-compiled is trusted (no run-time memory checks).
#[no_mangle]
pub unsafe extern "C" fn uebpf_vm_run(vm: *mut UebpfVm, ctx: *mut c_void, ctx_len: usize, result: *mut u64) -> c_int {
    let Some(vm) = vm_mut(vm) else { return -1 };
    if result.is_null() {
        return vm.fail("result pointer is NULL");
    }
    let needed = match &vm.loaded {
        None => return vm.fail("no program loaded"),
        Some(Loaded::Jit(jit)) => jit.context_needed(),
        Some(Loaded::Interpreter(program)) => program.context_needed(),
    };
    if ctx_len < needed || (ctx.is_null() && needed > 0) {
        return vm.fail(crate::error::context_too_short(if ctx.is_null() { 0 } else { ctx_len }, needed));
    }
    let r0 = match &vm.loaded {
        None => return vm.fail("no program loaded"),
        Some(Loaded::Jit(jit)) => (jit.function())(ctx.cast(), ctx_len as u64),
        Some(Loaded::Interpreter(program)) => match program.interpret_raw(ctx.cast(), ctx_len, vm.budget) {
            Ok(r0) => r0,
            Err(e) => return vm.fail(e.to_string()),
        },
    };
    result.write(r0);
    0
}

/// The JIT entry point of the loaded program, or NULL if it was not loaded for the JIT. Valid
/// until the next load or `uebpf_vm_free`.
///
/// # Safety
/// `vm` is null or live.
#[no_mangle]
pub unsafe extern "C" fn uebpf_vm_jit_function(vm: *const UebpfVm) -> Option<JitFunction> {
    match vm.as_ref()?.loaded.as_ref()? {
        Loaded::Jit(jit) => Some(jit.function()),
        Loaded::Interpreter(_) => None,
    }
}

/// The message of the last failure ("" if none). Valid until the next call on `vm`.
///
/// # Safety
/// `vm` is null or live.
#[no_mangle]
pub unsafe extern "C" fn uebpf_vm_last_error(vm: *const UebpfVm) -> *const c_char {
    match vm.as_ref() {
        Some(vm) => vm.last_error.as_ptr(),
        None => ptr::null(),
    }
}
