//! uebpf: tracecost's userspace eBPF runtime. The same clang-built `.bpf.o` the kernel loads is
//! loaded here into a shared-memory region (maps that several processes share, programs any of
//! them can run) and runs on uebpf-vm's interpreter or JIT with the kernel's helpers.
//!
//! ```no_run
//! use uebpf::{Engine, Object, PtRegs, Target};
//!
//! let mut object = Object::open("build/bpf/functrace.bpf.o")?;
//! object.set_global("submit_flags", &0u64.to_ne_bytes())?; // like skel->rodata->submit_flags
//! object.set_max_entries("events", 1 << 20)?;
//! let instance = object.load(Target::Named("functrace"))?; // /dev/shm/uebpf-functrace
//! let entry = instance.program("functrace_entry", Engine::Jit)?;
//! let mut regs = PtRegs::with_args(&[1, 2, 0]);
//! entry.run(regs.as_bytes_mut())?;
//! let ring = instance.map("events")?.ringbuf().unwrap();
//! ring.consume(|record| println!("{} bytes", record.len()));
//! # Ok::<(), uebpf::Error>(())
//! ```
//!
//! Modules, in layers (each uses only modules of the layers before it; tests/unit/test_imports.py
//! checks there is no circle): applied, error, helper_names, inject, nofault, rawsys, signals /
//! cgroup, handlers, handles, panics, probe, task / dispositions, ffi, printk, user / helpers /
//! checks / instance, object / load.

mod applied;
pub mod cgroup;
mod checks;
pub mod dispositions;
mod error;
pub mod ffi;
pub mod handlers;
mod handles;
mod helper_names;
mod helpers;
pub mod inject;
mod instance;
mod load;
pub mod nofault;
mod object;
pub mod panics;
mod printk;
mod probe;
mod rawsys;
pub mod signals;
mod task;
pub mod user;

pub use applied::wait_applied;
pub use checks::{check_extension, check_program, is_extension, EXTENSION_SECTION, SYSCALL_EXTENSION_SECTION};
pub use error::{Error, ErrorKind};
pub use helpers::{
    allow_answer, allow_override, set_attach_cookie, set_func_ip, set_stack_origin, write_stderr, StackOrigin, MAX_OUTPUT_BUFFERS,
};
pub use instance::{jit_tier, load_checked, Compiled, Engine, Instance, LoadedProgram, Tier, JIT_TIER_ENV};
pub use load::{check_btf, Target, VMLINUX_BTF};
pub use object::{parse_section, MapDesc, Object, ProgramDesc};
/// The context of uprobe and uretprobe programs: the kernel's x86-64 `struct pt_regs`, field for
/// field (the hook engine builds it; the same type serves programs run on a made-up call).
pub use uebpf_hook::PtRegs;
pub use uebpf_maps as maps;
