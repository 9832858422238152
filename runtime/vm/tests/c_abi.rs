//! The C ABI, called from Rust exactly as a C embedder calls it (declarations in uebpf_vm.h).

use std::ffi::CStr;

use uebpf_vm::asm::*;
use uebpf_vm::ffi::*;

extern "C" fn add_helper(a: u64, b: u64, _: u64, _: u64, _: u64) -> u64 {
    a + b
}

fn last_error(vm: *mut UebpfVm) -> String {
    // SAFETY: vm is live; the message is NUL-terminated and owned by vm.
    unsafe { CStr::from_ptr(uebpf_vm_last_error(vm)) }.to_string_lossy().into_owned()
}

#[test]
fn load_and_run_on_both_engines() {
    let mut a = Asm::new();
    a.ldx(8, R1, R1, 0).mov64(R2, R2).call_helper(3).exit();
    let code = a.build().unwrap();
    for engine in [0, 1] {
        let vm = uebpf_vm_new();
        let mut ctx = 40u64.to_le_bytes();
        let mut result = 0u64;
        // SAFETY: vm is live until freed below; pointers are valid for their lengths.
        unsafe {
            assert_eq!(uebpf_vm_register_helper(vm, 3, Some(add_helper)), 0);
            assert_eq!(uebpf_vm_set_context_size(vm, 8), 0);
            assert_eq!(uebpf_vm_load(vm, code.as_ptr(), code.len(), engine), 0, "{}", last_error(vm));
            assert_eq!(uebpf_vm_jit_function(vm).is_some(), engine == 1);
            assert_eq!(uebpf_vm_run(vm, ctx.as_mut_ptr().cast(), ctx.len(), &mut result), 0, "{}", last_error(vm));
            assert_eq!(result, 40 + 8);
            uebpf_vm_free(vm);
        }
    }
}

#[test]
fn failures_report_the_reason() {
    let vm = uebpf_vm_new();
    let code = Asm::new().ldx(8, R0, R1, 16).exit().build().unwrap();
    let mut ctx = [0u8; 8];
    let mut result = 0u64;
    // SAFETY: as above.
    unsafe {
        assert_eq!(uebpf_vm_run(vm, ctx.as_mut_ptr().cast(), ctx.len(), &mut result), -1);
        assert_eq!(last_error(vm), "no program loaded");
        assert_eq!(uebpf_vm_load(vm, code.as_ptr(), code.len() - 1, 0), -1);
        assert!(last_error(vm).contains("not a multiple of 8"));
        // Checked by default: a read past the declared context (none yet) is refused at load.
        assert_eq!(uebpf_vm_load(vm, code.as_ptr(), code.len(), 1), -1);
        assert!(last_error(vm).contains("invalid access to the context, 0 bytes declared"), "{}", last_error(vm));
        // Declared, it loads; a run with less context than declared is refused on either engine.
        assert_eq!(uebpf_vm_set_context_size(vm, 24), 0);
        assert_eq!(uebpf_vm_load(vm, code.as_ptr(), code.len(), 7), -1);
        assert!(last_error(vm).contains("unknown engine 7"));
        for engine in [0, 1] {
            assert_eq!(uebpf_vm_load(vm, code.as_ptr(), code.len(), engine), 0, "{}", last_error(vm));
            assert_eq!(uebpf_vm_run(vm, ctx.as_mut_ptr().cast(), ctx.len(), &mut result), -1);
            assert!(last_error(vm).contains("context of 8 bytes is shorter than the 24"), "{}", last_error(vm));
        }
        // Unchecked, it loads, and only the interpreter stops the read at run time.
        assert_eq!(uebpf_vm_load_unchecked(vm, code.as_ptr(), code.len(), 0), 0);
        assert_eq!(uebpf_vm_run(vm, ctx.as_mut_ptr().cast(), ctx.len(), &mut result), -1);
        assert!(last_error(vm).starts_with("instruction 0 (`ldxdw r0, [r1+16]`)"), "{}", last_error(vm));
        assert_eq!(uebpf_vm_set_budget(vm, 1), 0);
        uebpf_vm_free(vm);
        uebpf_vm_free(std::ptr::null_mut());
        assert_eq!(uebpf_vm_run(std::ptr::null_mut(), ctx.as_mut_ptr().cast(), 8, &mut result), -1);
    }
}
