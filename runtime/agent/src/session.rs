//! The agent's view of one region: which attachments have a live hook in this process, and a
//! pass that brings the hooks in line with the attach table (install what is enabled for this
//! process, remove what is not any more) and reports the outcome in the region's agent table.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::{AtomicU16, Ordering};

use uebpf::maps::{AgentReport, AttachInfo, AttachKind, AttachState, Region};
use uebpf::{Engine, Instance, LoadedProgram};
use uebpf_hook::{Hook, Location, PatchKind};

use crate::probe::Probe;
use crate::syscalls::{self, Point, Side, SyscallProbe};
use crate::{note, warn};

/// Exported for the bpf(2) server preloaded into the same process (a loader that traces
/// itself): its attach then waits until this agent has applied it (server/src/perf.rs,
/// `applied_here`).
#[no_mangle]
#[used]
pub static uebpf_agent_in_process: u8 = 1;

/// What became of an enabled attachment for this process.
#[derive(Clone)]
enum Outcome {
    Hooked,
    /// Its binary is not mapped here and it is not meant for this process alone: nothing to do.
    NotHere,
    Failed(String),
    Unsupported(String),
}

pub(crate) struct Session {
    region: Region,
    /// Rebuilt when the region has maps this instance does not know (each program's instance
    /// lives as long as the program).
    instance: Instance,
    /// (pid, slot) of this process's slot in the agent table; a forked child claims its own.
    slot: Option<(u32, u32)>,
    /// Each attachment's hooks (a system call tracepoint has one per libc entry point).
    hooks: HashMap<u32, Vec<Hook>>,
    /// The USDT semaphore each hooked attachment with one holds raised.
    semaphores: HashMap<u32, Semaphore>,
    /// Attachments judged at a given change (`changed_at`) and not hooked: not judged again
    /// (nor warned about again) until they change.
    judged: HashMap<u32, (u32, Outcome)>,
    /// The attach generation the last pass read first.
    pub(crate) seen: u32,
    /// The pass at the process's start (before `main`): the execve that started this program
    /// has just returned, as the kernel's sys_exit_execve reports in the new program.
    exec_returning: bool,
}

impl Session {
    pub(crate) fn new(region: Region) -> Result<Session, String> {
        let instance = Instance::new(&region).map_err(|e| e.to_string())?;
        let seen = region.attach_generation().wrapping_sub(1);
        Ok(Session {
            region,
            instance,
            slot: None,
            hooks: HashMap::new(),
            semaphores: HashMap::new(),
            judged: HashMap::new(),
            seen,
            exec_returning: false,
        })
    }

    /// The first pass of a program that has just started: exit tracepoints of execve see its
    /// return (0, in the new program, as the kernel's do), then the pass as any other.
    pub(crate) fn pass_after_exec(&mut self) {
        self.exec_returning = true;
        self.pass();
        self.exec_returning = false;
    }

    pub(crate) fn region(&self) -> &Region {
        &self.region
    }

    /// Makes the thread's next wait return at once (a forked child's first pass).
    pub(crate) fn pass_soon(&mut self) {
        self.seen = self.seen.wrapping_sub(1);
    }

    /// Applies every attach-table change up to the current generation, then reports.
    pub(crate) fn pass(&mut self) {
        let me = std::process::id();
        let applied = self.region.attach_generation();
        let mut report = AgentReport { applied, ..AgentReport::default() };
        // The files the pass resolves in are read once for the whole pass (the C library: once,
        // not once per system call program), and not kept after it.
        uebpf_hook::keeping_files(|| self.reconcile_all(me, &mut report));
        self.seen = applied;
        self.report(me, &report);
    }

    /// Every attachment reconciled, what came of it counted in `report`.
    fn reconcile_all(&mut self, me: u32, report: &mut AgentReport) {
        for attachment in self.region.attachments() {
            match self.reconcile(&attachment, me) {
                None | Some(Outcome::NotHere) => {}
                Some(Outcome::Hooked) => {
                    report.hooks += 1;
                    let slow = self
                        .hooks
                        .get(&attachment.id)
                        .is_some_and(|hooks| hooks.iter().any(|hook| matches!(hook.kind(), PatchKind::Int3 { .. })));
                    report.slow_hooks += u32::from(slow);
                }
                Some(Outcome::Failed(why)) => {
                    if report.failed == 0 {
                        report.message = why;
                    }
                    report.failed += 1;
                }
                Some(Outcome::Unsupported(why)) => {
                    if report.failed == 0 && report.unsupported == 0 {
                        report.message = why;
                    }
                    report.unsupported += 1;
                }
            }
        }
    }

    fn report(&mut self, me: u32, report: &AgentReport) {
        let slot = match self.slot {
            Some((pid, slot)) if pid == me => slot,
            _ => match self.region.claim_agent_slot(me) {
                Ok(slot) => {
                    self.slot = Some((me, slot));
                    slot
                }
                Err(e) => return warn(&format!("{e} (nobody can wait for this process's probes)")),
            },
        };
        if let Err(e) = self.region.report_agent(slot, me, report) {
            warn(&e.to_string());
        }
    }

    /// Brings one attachment in line; returns what it is now for this process (None: nothing
    /// is asked of this process).
    fn reconcile(&mut self, attachment: &AttachInfo, me: u32) -> Option<Outcome> {
        let spec = &attachment.spec;
        let wanted = spec.state == AttachState::Enabled && (spec.pid == -1 || spec.pid as u32 == me);
        if let Some(hooks) = self.hooks.remove(&attachment.id) {
            if wanted {
                self.hooks.insert(attachment.id, hooks);
                return Some(Outcome::Hooked);
            }
            self.unhook(attachment.id, hooks);
            return None;
        }
        if !wanted {
            self.judged.remove(&attachment.id);
            return None;
        }
        if let Some((changed_at, outcome)) = self.judged.get(&attachment.id) {
            if *changed_at == attachment.changed_at {
                return Some(outcome.clone());
            }
        }
        let outcome = match self.hook(attachment, me) {
            Ok(Some(hooks)) => {
                self.hooks.insert(attachment.id, hooks);
                return Some(Outcome::Hooked);
            }
            Ok(None) => Outcome::NotHere,
            Err(outcome) => outcome,
        };
        if let Outcome::Failed(why) | Outcome::Unsupported(why) = &outcome {
            warn(why);
        }
        self.judged.insert(attachment.id, (attachment.changed_at, outcome.clone()));
        Some(outcome)
    }

    /// Installs the attachment's hooks; Ok(None) if its binary is not mapped in this process.
    fn hook(&mut self, attachment: &AttachInfo, me: u32) -> Result<Option<Vec<Hook>>, Outcome> {
        let spec = &attachment.spec;
        let program_name = self.program_name(spec.prog_id);
        if spec.kind == AttachKind::SyscallTracepoint {
            return self.hook_syscall(attachment, &program_name).map(Some);
        }
        let what = format!("attachment {} ({program_name} at {}:{:#x})", attachment.id, spec.target, spec.offset);
        let failed = |why: String| Outcome::Failed(format!("{what}: {why}"));
        if !uebpf_hook::is_mapped_executable(spec.dev, spec.ino).map_err(|e| failed(e.to_string()))? {
            if spec.pid == -1 {
                return Ok(None);
            }
            return Err(failed(format!(
                "the binary is not mapped in this process ({me}); the agent does not follow binaries loaded after it ran (dlopen)"
            )));
        }
        let binary = Path::new(&spec.target);
        match std::fs::metadata(binary) {
            Ok(meta) if (meta.dev(), meta.ino()) == (spec.dev, spec.ino) => {}
            _ => return Err(failed("the file at that path is no longer the binary that was attached".into())),
        }
        let target = uebpf_hook::resolve(binary, &Location::FileOffset(spec.offset)).map_err(|e| failed(e.to_string()))?;
        // As the kernel's is_uprobe_at_func_entry: the probed instruction, read from the file
        // (the process's copy may already carry another attachment's patch).
        let at_entry = spec.kind == AttachKind::Uprobe && starts_a_frame(binary, spec.offset);
        let origin = uebpf::StackOrigin::Regs { at_entry };
        let program = self.program(spec.prog_id).map_err(failed)?;
        // An extension makes the call return at once: only where `[sp]` is the return address.
        let at_function_start = target.function.unknown_size != Some(uebpf_hook::NO_SYMBOL) && target.address == target.function.start;
        if program.overrides() && !(spec.kind == AttachKind::Uprobe && at_function_start) {
            return Err(Outcome::Unsupported(format!(
                "{what}: the program calls bpf_override_return, which needs a uprobe at a function's first instruction (a symbol's start)"
            )));
        }
        let probe = self.probe_running(attachment, target.address as u64, origin, program).map_err(failed)?;
        let (handler, promises) = probe.handler();
        let data = probe.leak();
        let hook = match spec.kind {
            AttachKind::Uprobe => Hook::entry_with(&target, handler, data, promises),
            _ => Hook::ret_with(&target, handler, data, promises),
        };
        let hook = hook.map_err(|e| failed(e.to_string()))?;
        if let PatchKind::Int3 { reason } = hook.kind() {
            note(&format!("{what}: int3 patch (slow: a signal per hit): {reason}"));
        }
        // The hook first: a USDT site the program evaluates once its semaphore is up is hooked.
        if spec.ref_ctr_offset != 0 {
            match Semaphore::raise(spec.dev, spec.ino, spec.ref_ctr_offset) {
                Ok(semaphore) => _ = self.semaphores.insert(attachment.id, semaphore),
                Err(why) => {
                    detach(attachment.id, vec![hook]);
                    return Err(failed(why));
                }
            }
        }
        Ok(Some(vec![hook]))
    }

    /// Attaches a system call tracepoint's program at the process's `syscall` instructions
    /// (syscalls.rs). It has no hooks of its own: `unhook` takes it off the list.
    fn hook_syscall(&mut self, attachment: &AttachInfo, program_name: &str) -> Result<Vec<Hook>, Outcome> {
        let spec = &attachment.spec;
        let what = format!("attachment {} ({program_name} on {})", attachment.id, spec.target);
        let (side, point) = Point::parse(&spec.target).map_err(|why| Outcome::Unsupported(format!("{what}: {why}")))?;
        let failed = |why: String| Outcome::Failed(format!("{what}: {why}"));
        let record = side.record_size() as u32;
        let program = self.program(spec.prog_id).map_err(failed)?;
        if program.overrides() && side == Side::Exit {
            return Err(Outcome::Unsupported(format!(
                "{what}: the program calls bpf_override_return, which needs a system call's entry (at its exit the call has been made)"
            )));
        }
        let reach = program.max_ctx_offset();
        if reach > record {
            // As the kernel's attach (EACCES): the program would read past the record.
            return Err(failed(format!(
                "the program reads its context up to byte {reach}; the record of a system call {} has {record}",
                if side == Side::Exit { "exit" } else { "entry" }
            )));
        }
        let probe = self.probe_running(attachment, 0, uebpf::StackOrigin::None, program).map_err(failed)?;
        let data = SyscallProbe::leak(probe, point, spec.offset);
        if self.exec_returning && side == Side::Exit {
            // SAFETY: the probe just leaked, never freed.
            unsafe { syscalls::report_exec_return(data) };
        }
        for binary in syscalls::attach(attachment.id, side, data).map_err(failed)? {
            if !binary.left.is_empty() {
                note(&format!(
                    "{what}: {} of the {} syscall instructions of {} not hooked, their calls not seen (first: {:#x}, {})",
                    binary.left.len(),
                    binary.sites,
                    binary.binary,
                    binary.left[0].0,
                    binary.left[0].1
                ));
            }
        }
        Ok(Vec::new())
    }

    /// The attachment's program (loaded), JIT-compiled, as a probe at `func_ip` (0: not at an
    /// address), its user stack at `stack`.
    fn probe_running(
        &mut self,
        attachment: &AttachInfo,
        func_ip: u64,
        stack: uebpf::StackOrigin,
        program: LoadedProgram,
    ) -> Result<Probe, String> {
        // An injected agent's probe reads take the fast path once the C library's sigaction is
        // diverted (signals.rs): done before the first program is hooked, not at injection, so
        // that a process with nothing to hook is not patched (its sleeping calls interrupted).
        crate::signals::divert_if_injected();
        let state = self.region.attachment_state_word(attachment.id).ok_or("vanished from the attach table")?;
        // SAFETY: the program's instance holds the region, and the probe is never freed.
        unsafe { Probe::new(state, attachment.spec.pid, attachment.spec.cookie, func_ip, stack, program) }
            .ok_or_else(|| "the program is not JIT-compiled".into())
    }

    fn program(&mut self, id: u32) -> Result<LoadedProgram, String> {
        if self.region.maps().len() > self.instance.maps().count() {
            self.instance = Instance::new(&self.region).map_err(|e| e.to_string())?;
        }
        self.instance.program_by_id(id, Engine::Jit).map_err(|e| e.to_string())
    }

    fn program_name(&self, id: u32) -> String {
        self.region.programs().into_iter().find(|p| p.id == id).map_or_else(|| format!("program {id}"), |p| p.name)
    }

    /// Removes every hook and frees this process's slot (the region is going away, or `uebpf
    /// detach`); returns how many hooks it removed.
    pub(crate) fn end(mut self) -> usize {
        let count = self.hooks.values().map(Vec::len).sum();
        for (id, hooks) in std::mem::take(&mut self.hooks) {
            self.unhook(id, hooks);
        }
        self.release_slot();
        count
    }

    /// Removes an attachment's hooks, then lowers the USDT semaphore it held raised.
    fn unhook(&mut self, id: u32, hooks: Vec<Hook>) {
        detach(id, hooks);
        syscalls::forget(id);
        if let Some(semaphore) = self.semaphores.remove(&id) {
            semaphore.lower();
        }
    }

    /// Frees this process's slot in the agent table (at exit).
    pub(crate) fn release_slot(&mut self) {
        let me = std::process::id();
        if let Some((pid, slot)) = self.slot.take() {
            if pid == me {
                self.region.release_agent_slot(slot, me);
            }
        }
    }
}

/// Whether the instruction at `offset` of `binary` starts a frame: `push %rbp` or `endbr64` (the
/// kernel's is_uprobe_at_func_entry, for the user stack of a uprobe there).
fn starts_a_frame(binary: &Path, offset: u64) -> bool {
    use std::os::unix::fs::FileExt;
    let mut first = [0u8; 4];
    let read = std::fs::File::open(binary).and_then(|file| file.read_exact_at(&mut first, offset));
    read.is_ok() && (first[0] == 0x55 || first == [0xf3, 0x0f, 0x1e, 0xfa])
}

/// A USDT semaphore raised by this process's probes: the 2-byte counter a program tests before
/// it evaluates a probe's arguments (sys/sdt.h), so that an unused probe costs one test. Raised
/// while the attachment is hooked here and lowered when it goes, as the kernel's update_ref_ctr
/// does when it installs and removes a uprobe with a reference counter (kernel/events/uprobes.c):
/// in the process's private, writable copy of the binary's data, never below 0.
struct Semaphore {
    counter: usize,
    file: (u64, u64, u64),
}

impl Semaphore {
    fn raise(dev: u64, ino: u64, offset: u64) -> Result<Semaphore, String> {
        let counter = uebpf_hook::private_data_address(dev, ino, offset)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("its USDT semaphore (file offset {offset:#x}) is in no writable mapping of the binary here"))?;
        if counter % std::mem::align_of::<AtomicU16>() != 0 {
            return Err(format!("its USDT semaphore at {counter:#x} is not 2-byte aligned"));
        }
        // SAFETY: an aligned u16 in a writable mapping of this process; the program only reads it.
        unsafe { &*(counter as *const AtomicU16) }.fetch_add(1, Ordering::SeqCst);
        Ok(Semaphore { counter, file: (dev, ino, offset) })
    }

    /// Lowers it, where the binary's data is still mapped where it was (a library unloaded
    /// since took its semaphore with it).
    fn lower(self) {
        let (dev, ino, offset) = self.file;
        if matches!(uebpf_hook::private_data_address(dev, ino, offset), Ok(Some(counter)) if counter == self.counter) {
            // SAFETY: as at `raise`, and still mapped.
            let counter = unsafe { &*(self.counter as *const AtomicU16) };
            _ = counter.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        }
    }
}

/// Removes an attachment's hooks. One that cannot be removed stays, but runs nothing: its
/// attachment is no longer enabled here.
fn detach(id: u32, hooks: Vec<Hook>) {
    for hook in hooks {
        if let Err(e) = hook.detach() {
            warn(&format!("attachment {id}: cannot remove its hook: {e}"));
        }
    }
}
