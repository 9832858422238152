//! The project's own objects load and run; helpers behave as the kernel's; bad input is refused
//! with the reason.

mod common;

use uebpf::maps::{ProgramKind, ProgramSpec, Region, RegionSpec};
use uebpf::{Engine, Instance, Object, PtRegs, Target};
use uebpf_vm::asm::*;

use common::object;

const ENGINES: [Engine; 2] = [Engine::Interpreter, Engine::Jit];

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
    let err = object.set_global("submit_flags", &[1, 2]).unwrap_err().0;
    assert!(err.contains("submit_flags") && err.contains("size"), "{err}");
    let err = object.set_max_entries("nope", 4096).unwrap_err().0;
    assert!(err.contains("no map `nope`") && err.contains("events"), "{err}");
    assert!(object.set_max_entries(".rodata", 2).unwrap_err().0.contains("global data"));
    object.set_max_entries("events", 1 << 12).unwrap();
    let instance = object.load(Target::Anonymous).unwrap();
    assert_eq!(instance.map("events").unwrap().def().max_entries, 4096);
    let err = Object::open("/nonexistent.bpf.o").err().unwrap().0;
    assert!(err.contains("cannot read /nonexistent.bpf.o"), "{err}");
}

#[test]
fn a_load_that_fails_leaves_no_region_behind() {
    let name = format!("test-failed-{}", std::process::id());
    let mut object = Object::open(object("functrace")).unwrap();
    object.set_max_entries("events", 5000).unwrap();
    let err = object.load(Target::Named(&name)).err().unwrap().0;
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

#[test]
fn helpers_uebpf_lacks_and_failed_core_relocations_are_named() {
    let mut a = Asm::new();
    a.call_helper(35).exit(); // bpf_get_current_task
    let err = with_program(&a.build().unwrap()).program("test", Engine::Interpreter).err().unwrap().0;
    assert!(err.contains("calls bpf_get_current_task (35), which uebpf does not provide"), "{err}");
    let mut a = Asm::new();
    a.call_helper(0xbad2310).exit();
    let err = with_program(&a.build().unwrap()).program("test", Engine::Jit).err().unwrap().0;
    assert!(err.contains("CO-RE relocation found no matching field"), "{err}");
}

#[test]
fn probe_write_user_writes_or_fails_cleanly() {
    // ctx = { u64 destination; u64 value }: write the value to the destination.
    let mut a = Asm::new();
    a.mov64(R2, R1).add64(R2, 8).ldx(8, R1, R1, 0).mov64(R3, 8).call_helper(36).exit();
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
fn the_interpreter_stops_a_program_that_writes_outside_its_memory() {
    // Writes through the map value pointer far beyond the value: the interpreter refuses.
    let mut a = Asm::new();
    a.lddw(R1, 0x1000).st(8, R1, 0, 1).mov64(R0, 0).exit();
    let err = with_program(&a.build().unwrap()).program("test", Engine::Interpreter).unwrap().run(&mut [0u8; 8]).unwrap_err().0;
    assert!(err.contains("write of 8 bytes at 0x1000 is outside"), "{err}");
}

#[test]
fn the_interpreter_lets_programs_read_but_not_write_rodata() {
    let region = Region::create_anonymous(RegionSpec::with_arena(1 << 16)).unwrap();
    let rodata = uebpf::maps::MapDef { map_type: 2, key_size: 4, value_size: 8, max_entries: 1, map_flags: 1 << 7 };
    let id = region.create_map(".rodata", &rodata, Some(&42u64.to_ne_bytes())).unwrap() as i32;
    let mut read = Asm::new();
    read.lddw_map_value(R1, id, 0).ldx(8, R0, R1, 0).exit();
    let mut write = Asm::new();
    write.lddw_map_value(R1, id, 0).st(8, R1, 0, 7).mov64(R0, 0).exit();
    for (name, program) in [("read", &read), ("write", &write)] {
        let bytecode = program.build().unwrap();
        region.add_program(&ProgramSpec { name, section: "uprobe", kind: ProgramKind::Uprobe, prog_type: 2, license: "GPL", bytecode: &bytecode }).unwrap();
    }
    let instance = Instance::new(&region).unwrap();
    let mut ctx = [0u8; 8];
    assert_eq!(instance.program("read", Engine::Interpreter).unwrap().run(&mut ctx).unwrap(), 42);
    let err = instance.program("write", Engine::Interpreter).unwrap().run(&mut ctx).unwrap_err().0;
    assert!(err.contains("write of 8 bytes"), "{err}");
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
