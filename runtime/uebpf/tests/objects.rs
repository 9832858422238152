//! The project's own objects load and run; helpers behave as the kernel's; bad input is refused
//! with the reason.

mod common;

use uebpf::maps::{ProgramKind, ProgramSpec, Region, RegionSpec};
use uebpf::{Engine, Instance, Object, PtRegs, Target, Tier};
use uebpf_vm::asm::*;

use common::object;

const ENGINES: [Engine; 4] = [Engine::Interpreter, Engine::Jit, Engine::JitTier(Tier::Base), Engine::JitTier(Tier::Optimizing)];

#[test]
fn every_project_object_loads_and_every_program_compiles() {
    for name in ["functrace", "uebpf_check", "uebpf_stress"] {
        let object = Object::open(object(name)).unwrap();
        let programs = object.programs();
        assert!(!programs.is_empty(), "{name} has programs");
        let instance = object.load(Target::Anonymous).unwrap();
        for program in &programs {
            for engine in ENGINES {
                instance.program(&program.name, engine).unwrap_or_else(|e| panic!("{name}: {e}"));
            }
        }
    }
}

#[test]
fn sections_give_kinds_and_maps_keep_their_declarations() {
    let object = Object::open(object("functrace")).unwrap();
    let kinds: Vec<_> = object.programs().iter().map(|p| (p.name.clone(), p.kind)).collect();
    assert_eq!(kinds, [("functrace_entry".into(), ProgramKind::Uprobe), ("functrace_exit".into(), ProgramKind::Uretprobe)]);
    let maps = object.maps();
    let events = maps.iter().find(|m| m.name == "events").unwrap();
    assert_eq!((events.def.map_type, events.def.max_entries), (27, 16 << 20));
    assert_eq!(object.global_size("submit_flags"), Some(8));
}

#[test]
fn loader_settings_are_checked() {
    let mut object = Object::open(object("functrace")).unwrap();
    let err = object.set_global("submit_flags", &[1, 2]).unwrap_err().to_string();
    assert!(err.contains("submit_flags") && err.contains("size"), "{err}");
    let err = object.set_max_entries("nope", 4096).unwrap_err().to_string();
    assert!(err.contains("no map `nope`") && err.contains("events"), "{err}");
    assert!(object.set_max_entries(".rodata", 2).unwrap_err().to_string().contains("global data"));
    object.set_max_entries("events", 1 << 12).unwrap();
    let instance = object.load(Target::Anonymous).unwrap();
    assert_eq!(instance.map("events").unwrap().def().max_entries, 4096);
    let err = Object::open("/nonexistent.bpf.o").err().unwrap().to_string();
    assert!(err.contains("cannot read /nonexistent.bpf.o"), "{err}");
}

#[test]
fn a_load_that_fails_leaves_no_region_behind() {
    let name = format!("test-failed-{}", std::process::id());
    let mut object = Object::open(object("functrace")).unwrap();
    object.set_max_entries("events", 5000).unwrap();
    let err = object.load(Target::Named(&name)).err().unwrap().to_string();
    assert!(err.contains("map `events`") && err.contains("power of two"), "{err}");
    assert!(!uebpf::maps::region_path(&name).exists());
}

#[test]
fn a_named_region_is_removed_when_the_instance_goes() {
    let name = format!("test-objects-{}", std::process::id());
    let instance = Object::open(object("uebpf_stress")).unwrap().load(Target::Named(&name)).unwrap();
    let path = uebpf::maps::region_path(&name);
    assert!(path.exists());
    let other = Instance::new(&Region::open(&name).unwrap()).unwrap();
    assert_eq!(other.programs().len(), 3);
    drop(other);
    drop(instance);
    assert!(!path.exists());
}

/// An instance holding one hand-written program (for helpers no project object calls).
fn with_program(bytecode: &[u8]) -> Instance {
    let region = Region::create_anonymous(RegionSpec::with_arena(1 << 16)).unwrap();
    let spec = ProgramSpec { name: "test", section: "uprobe", kind: ProgramKind::Uprobe, prog_type: 2, license: "GPL", bytecode };
    region.add_program(&spec).unwrap();
    Instance::new(&region).unwrap()
}

/// `Engine::Jit` gives a program that loops the optimizing tier and a straight one the base tier
/// (instance.rs, `jit_tier`); every engine runs each to the same result.
#[test]
fn the_jit_tier_follows_loops_and_every_tier_agrees() {
    let mut straight = Asm::new();
    straight.mov64(R0, 6).add64(R0, 36).exit();
    // r0 = 1 + 2 + ... + 10, in a loop.
    let mut looping = Asm::new();
    looping.mov64(R0, 0).mov64(R1, 10).label("again").add64(R0, R1).sub64(R1, 1).jne(R1, 0, "again").exit();
    for (asm, tier, r0) in [(straight, Tier::Base, 42), (looping, Tier::Optimizing, 55)] {
        let instance = with_program(&asm.build().unwrap());
        let chosen = instance.program("test", Engine::Jit).unwrap().compiled();
        assert_eq!((chosen.tier, chosen.loops), (Some(tier), tier == Tier::Optimizing));
        for engine in ENGINES {
            let mut regs = PtRegs::default();
            assert_eq!(instance.program("test", engine).unwrap().run(regs.as_bytes_mut()).unwrap(), r0, "{engine:?}");
        }
    }
}

#[test]
fn helpers_uebpf_lacks_and_failed_core_relocations_are_named() {
    let mut a = Asm::new();
    a.call_helper(158).exit(); // bpf_get_current_task_btf
    let err = with_program(&a.build().unwrap()).program("test", Engine::Interpreter).err().unwrap().to_string();
    assert!(err.contains("calls bpf_get_current_task_btf (158), which uebpf does not provide"), "{err}");
    let mut a = Asm::new();
    a.call_helper(0xbad2310).exit();
    let err = with_program(&a.build().unwrap()).program("test", Engine::Jit).err().unwrap().to_string();
    assert!(err.contains("CO-RE relocation found no matching field"), "{err}");
    // In a branch the program's own constants make dead, neither refuses it (the kernel's
    // verifier never visits such a branch): r1 = 0; if r1 != 0 { bpf_get_current_task_btf; a
    // poisoned relocation }; r0 = 7.
    for missing in [158, 0xbad2310] {
        let mut a = Asm::new();
        a.mov64(R1, 0).jne(R1, 0, "dead").mov64(R0, 7).ja("done").label("dead").call_helper(missing).label("done").exit();
        let instance = with_program(&a.build().unwrap());
        for engine in ENGINES {
            assert_eq!(instance.program("test", engine).unwrap().run(&mut [0u8; 8]).unwrap(), 7);
        }
    }
}

#[test]
fn probe_write_user_writes_or_fails_cleanly() {
    // ctx = { u64 destination; u64 value }: write the value (copied to the stack: a helper may
    // not read the context) to the destination.
    let mut a = Asm::new();
    a.ldx(8, R3, R1, 8).stx(8, R10, -8, R3).mov64(R2, R10).add64(R2, -8).ldx(8, R1, R1, 0).mov64(R3, 8).call_helper(36).exit();
    let instance = with_program(&a.build().unwrap());
    for engine in ENGINES {
        let program = instance.program("test", engine).unwrap();
        let target = Box::new(0u64);
        let mut ctx = [(&*target as *const u64 as u64).to_ne_bytes(), 0xfeedu64.to_ne_bytes()].concat();
        assert_eq!(program.run(&mut ctx).unwrap(), 0);
        assert_eq!(*target, 0xfeed);
        for bad in [8u64, "read-only".as_ptr() as u64] {
            ctx[..8].copy_from_slice(&bad.to_ne_bytes());
            assert_eq!(program.run(&mut ctx).unwrap() as i64, -14, "-EFAULT for {bad:#x}");
        }
    }
}

#[test]
fn a_program_that_writes_through_a_number_is_refused_at_load() {
    // A write to address 0x1000: the safety analysis refuses it for both engines.
    let mut a = Asm::new();
    a.lddw(R1, 0x1000).st(8, R1, 0, 1).mov64(R0, 0).exit();
    for engine in ENGINES {
        let err = with_program(&a.build().unwrap()).program("test", engine).err().unwrap().to_string();
        assert!(err.contains("instruction 2 (`stdw [r1+0], 1`): refused by the safety analysis: R1 invalid mem access 'scalar'"), "{err}");
    }
}

#[test]
fn programs_read_rodata_and_one_that_writes_it_is_refused_at_load() {
    let region = Region::create_anonymous(RegionSpec::with_arena(1 << 16)).unwrap();
    let rodata = uebpf::maps::MapDef { map_type: 2, key_size: 4, value_size: 8, max_entries: 1, map_flags: 1 << 7, map_extra: 0 };
    let id = region.create_map(".rodata", &rodata, Some(&42u64.to_ne_bytes())).unwrap() as i32;
    let mut read = Asm::new();
    read.lddw_map_value(R1, id, 0).ldx(8, R0, R1, 0).exit();
    let mut write = Asm::new();
    write.lddw_map_value(R1, id, 0).st(8, R1, 0, 7).mov64(R0, 0).exit();
    for (name, program) in [("read", &read), ("write", &write)] {
        let bytecode = program.build().unwrap();
        region
            .add_program(&ProgramSpec {
                name,
                section: "uprobe",
                kind: ProgramKind::Uprobe,
                prog_type: 2,
                license: "GPL",
                bytecode: &bytecode,
            })
            .unwrap();
    }
    let instance = Instance::new(&region).unwrap();
    let mut ctx = [0u8; 8];
    for engine in ENGINES {
        assert_eq!(instance.program("read", engine).unwrap().run(&mut ctx).unwrap(), 42);
        let err = instance.program("write", engine).err().unwrap().to_string();
        assert!(err.contains("write into map forbidden") && err.contains("read-only to programs"), "{err}");
    }
}

#[test]
fn pid_tgid_is_the_kernels_and_not_cached_across_fork() {
    let instance = Object::open(object("uebpf_stress")).unwrap().load(Target::Anonymous).unwrap();
    for engine in ENGINES {
        let program = instance.program("ids", engine).unwrap();
        let mut regs = PtRegs::default();
        // SAFETY: plain system calls.
        let (pid, tid) = unsafe { (libc::getpid() as u64, libc::gettid() as u64) };
        assert_eq!(program.run(regs.as_bytes_mut()).unwrap(), pid << 32 | tid);
        let mut pipe = [0; 2];
        // SAFETY: the child only runs the loaded program (no allocation), writes to a pipe and
        // leaves with _exit.
        unsafe {
            assert_eq!(libc::pipe(pipe.as_mut_ptr()), 0);
            let child = libc::fork();
            if child == 0 {
                let mut regs = PtRegs::default();
                let r0 = program.run(regs.as_bytes_mut()).unwrap_or(0);
                let expected = (libc::getpid() as u64) << 32 | libc::gettid() as u64;
                let ok = [u8::from(r0 == expected)];
                libc::write(pipe[1], ok.as_ptr().cast(), 1);
                libc::_exit(0);
            }
            let mut ok = [0u8];
            assert_eq!(libc::read(pipe[0], ok.as_mut_ptr().cast(), 1), 1);
            libc::waitpid(child, std::ptr::null_mut(), 0);
            libc::close(pipe[0]);
            libc::close(pipe[1]);
            assert_eq!(ok[0], 1, "{engine:?}: the forked child saw its parent's pid/tid");
        }
    }
}

/// Runs `f` with the calling thread pinned to the CPU it is on, so that per-CPU lookups of
/// both engines see the same CPU.
fn pinned<T>(f: impl FnOnce(u32) -> T) -> T {
    // SAFETY: cpu_set_t values on the stack, for the calling thread only.
    unsafe {
        let size = std::mem::size_of::<libc::cpu_set_t>();
        let mut allowed: libc::cpu_set_t = std::mem::zeroed();
        assert_eq!(libc::sched_getaffinity(0, size, &mut allowed), 0);
        let cpu = libc::sched_getcpu();
        let mut one: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu as usize, &mut one);
        assert_eq!(libc::sched_setaffinity(0, size, &one), 0);
        let result = f(cpu as u32);
        libc::sched_setaffinity(0, size, &allowed);
        result
    }
}

#[test]
fn both_engines_find_the_same_array_element_for_any_key() {
    // The JIT inlines lookups of array and per-CPU array maps (a bounds check and a
    // multiply-add) where the interpreter calls the helper: both must find the same value, or
    // none. A 12-byte value has a 16-byte stride in the region.
    for map_type in [2, 6] {
        let region = Region::create_anonymous(RegionSpec::with_arena(1 << 16)).unwrap();
        let def = uebpf::maps::MapDef { map_type, key_size: 4, value_size: 12, max_entries: 5, ..Default::default() };
        let id = region.create_map("array", &def, None).unwrap() as i32;
        // ctx = { u64 key word (the key is its low 4 bytes) }: returns the address of the value
        // found, or 0 (a kprobe's context is read-only: the address is the result).
        let mut a = Asm::new();
        a.ldx(8, R6, R1, 0).stx(8, R10, -8, R6).mov64(R2, R10).add64(R2, -8);
        a.lddw_map_fd(R1, id).call_helper(1).exit();
        let bytecode = a.build().unwrap();
        region
            .add_program(&ProgramSpec {
                name: "lookup",
                section: "uprobe",
                kind: ProgramKind::Uprobe,
                prog_type: 2,
                license: "GPL",
                bytecode: &bytecode,
            })
            .unwrap();
        let instance = Instance::new(&region).unwrap();
        // Element k, CPU c (all c of one element follow each other): the value 100 + 10 k + c.
        let map = instance.map("array").unwrap();
        let cpus = if map.kind().is_percpu() { map.syscall_value_size() as u64 / 16 } else { 1 };
        for k in 0..5u32 {
            let value: Vec<u8> = (0..cpus).flat_map(|c| [(100 + 10 * u64::from(k) + c).to_ne_bytes(), [0; 8]].concat()).collect();
            map.update(&k.to_ne_bytes(), &value[..map.syscall_value_size()], 0).unwrap();
        }
        let values = map.program_memory().start as u64;
        let programs = ENGINES.map(|engine| instance.program("lookup", engine).unwrap());
        pinned(|cpu| {
            let cpu = if cpus > 1 { u64::from(cpu) } else { 0 };
            for key in [0u64, 1, 4, 5, 6, 0x8000_0000, 0xffff_ffff, 0xffff_ffff_0000_0002] {
                let k = u64::from(key as u32);
                let expected = if k < 5 { (100 + 10 * k + cpu, values + 16 * (k * cpus + cpu)) } else { (u64::MAX, 0) };
                for (engine, program) in ENGINES.iter().zip(&programs) {
                    let mut ctx = key.to_ne_bytes();
                    let found = program.run(&mut ctx).unwrap();
                    // SAFETY: a non-null result is the address of a value of the live map.
                    let value = if found == 0 { u64::MAX } else { unsafe { *(found as *const u64) } };
                    assert_eq!((value, found), expected, "map type {map_type}, {engine:?}, key {key:#x}");
                }
            }
        });
    }
}
