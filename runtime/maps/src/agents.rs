//! The agent table: one slot per process whose agent (libuebpf_agent.so) uses the region, saying
//! how far through the attach table it is. The agent applies attach-table changes on its own
//! thread, a little after they happen; a harness that must not start timing before the probes
//! are live waits until the target's slot reports the attach generation it saw (`uebpf
//! wait-applied`), instead of sleeping and hoping.
//!
//! Protocol: the agent claims a slot (`claim_agent_slot`: a free one, or one whose process is
//! gone), then after every complete pass over the attach table publishes the generation it read
//! before the pass and what came of it (`report_agent`), and frees the slot at exit. Every
//! claim, report and release bumps `agent_generation` and wakes its sleepers (shared futex).

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::current;
use crate::error::{Error, ErrorKind};
use crate::futex;
use crate::layout::{AgentEntry, AGENT_MESSAGE_LEN};
use crate::region::Region;

/// What an agent's pass over the attach table came to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AgentReport {
    /// The attach generation read before the pass: every change up to it has been applied.
    pub applied: u32,
    /// Attachments with a live probe in the agent's process.
    pub hooks: u32,
    /// Of those, the ones whose function got the hook engine's int3 patch (a signal per hit).
    pub slow_hooks: u32,
    /// Enabled attachments for this process that could not be applied.
    pub failed: u32,
    /// Enabled attachments of a kind the agent does not implement.
    pub unsupported: u32,
    /// Why the first one failed (or, if none failed, why the first one is unsupported).
    pub message: String,
}

/// An agent's slot, read by a waiter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentStatus {
    pub pid: u32,
    /// Passes completed since the slot was claimed (0: `report` says nothing yet).
    pub passes: u32,
    pub report: AgentReport,
}

fn owner_word(pid: u32, applied: u32) -> u64 {
    u64::from(pid) << 32 | u64::from(applied)
}

/// Whether generation `a` is at or after `b` (generations wrap around).
pub fn generation_reached(a: u32, b: u32) -> bool {
    a.wrapping_sub(b) as i32 >= 0
}

impl Region {
    fn agent_entry(&self, slot: u32) -> Option<&AgentEntry> {
        let h = self.header();
        (slot < h.agent_capacity).then(|| {
            let table = self.shared.base.wrapping_add(h.agent_table as usize) as *const AgentEntry;
            // SAFETY: the table was checked to lie inside the region when it was opened.
            unsafe { &*table.wrapping_add(slot as usize) }
        })
    }

    fn agent_slots(&self) -> impl Iterator<Item = (u32, &AgentEntry)> {
        (0..self.header().agent_capacity).filter_map(|slot| Some((slot, self.agent_entry(slot)?)))
    }

    fn bump_agent_generation(&self) {
        let word = &self.header().agent_generation;
        word.fetch_add(1, Ordering::AcqRel);
        futex::wake(word);
    }

    /// Claims a slot for the agent of process `pid`: a free slot, one of a process that is gone,
    /// or one a previous process with this pid left. Nothing counts as applied until the first
    /// `report_agent`.
    pub fn claim_agent_slot(&self, pid: u32) -> Result<u32, Error> {
        let unapplied = self.attach_generation().wrapping_sub(1);
        for (slot, entry) in self.agent_slots() {
            let owner = entry.owner.load(Ordering::Acquire);
            let holder = (owner >> 32) as u32;
            let claimable = holder == 0 || holder == pid || current::process_is_gone(holder);
            if claimable && entry.owner.compare_exchange(owner, owner_word(pid, unapplied), Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                self.write_report(entry, &AgentReport { applied: unapplied, ..AgentReport::default() }, 0);
                self.bump_agent_generation();
                return Ok(slot);
            }
        }
        Err(Error::new(ErrorKind::TableFull, format!("the region's agent table is full ({} processes)", self.header().agent_capacity)))
    }

    /// Publishes the outcome of a pass of the agent of `pid` in `slot`.
    pub fn report_agent(&self, slot: u32, pid: u32, report: &AgentReport) -> Result<(), Error> {
        let entry = self.owned_agent_entry(slot, pid)?;
        self.write_report(entry, report, entry.passes.load(Ordering::Relaxed).wrapping_add(1));
        entry.owner.store(owner_word(pid, report.applied), Ordering::Release);
        self.bump_agent_generation();
        Ok(())
    }

    /// Frees `slot` (the agent of `pid` stops: its process exits or the region went away).
    pub fn release_agent_slot(&self, slot: u32, pid: u32) {
        if let Ok(entry) = self.owned_agent_entry(slot, pid) {
            let owner = entry.owner.load(Ordering::Acquire);
            if entry.owner.compare_exchange(owner, 0, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                self.bump_agent_generation();
            }
        }
    }

    fn owned_agent_entry(&self, slot: u32, pid: u32) -> Result<&AgentEntry, Error> {
        self.agent_entry(slot)
            .filter(|entry| (entry.owner.load(Ordering::Acquire) >> 32) as u32 == pid)
            .ok_or_else(|| Error::invalid(format!("agent slot {slot} does not belong to process {pid}")))
    }

    fn write_report(&self, entry: &AgentEntry, report: &AgentReport, passes: u32) {
        entry.seq.fetch_add(1, Ordering::AcqRel); // odd: being written
        entry.passes.store(passes, Ordering::Relaxed);
        entry.hooks.store(report.hooks, Ordering::Relaxed);
        entry.slow_hooks.store(report.slow_hooks, Ordering::Relaxed);
        entry.failed.store(report.failed, Ordering::Relaxed);
        entry.unsupported.store(report.unsupported, Ordering::Relaxed);
        let bytes = report.message.as_bytes();
        let len = (0..=bytes.len().min(AGENT_MESSAGE_LEN - 1)).rev().find(|&at| report.message.is_char_boundary(at)).unwrap_or(0);
        for (i, byte) in entry.message.iter().enumerate() {
            byte.store(if i < len { bytes[i] } else { 0 }, Ordering::Relaxed);
        }
        entry.seq.fetch_add(1, Ordering::Release); // even: complete
    }

    /// The slot of the agent of process `pid`, if it has claimed one.
    pub fn agent(&self, pid: u32) -> Option<AgentStatus> {
        self.agents().into_iter().find(|status| status.pid == pid)
    }

    /// Every claimed slot, each read consistently.
    pub fn agents(&self) -> Vec<AgentStatus> {
        self.agent_slots().filter_map(|(_, entry)| read_status(entry)).collect()
    }

    /// Changes whenever an agent claims, reports to or releases a slot.
    pub fn agent_generation(&self) -> u32 {
        self.header().agent_generation.load(Ordering::Acquire)
    }

    /// Sleeps until the agent generation differs from `seen` or `timeout` passes; returns it.
    pub fn wait_agent_change(&self, seen: u32, timeout: Duration) -> u32 {
        futex::wait_for_change(&self.header().agent_generation, seen, timeout)
    }
}

fn read_status(entry: &AgentEntry) -> Option<AgentStatus> {
    loop {
        let seq = entry.seq.load(Ordering::Acquire);
        let owner = entry.owner.load(Ordering::Acquire);
        if owner >> 32 == 0 {
            return None;
        }
        if seq % 2 == 1 {
            std::hint::spin_loop();
            continue;
        }
        let message: Vec<u8> = entry.message.iter().map(|b| b.load(Ordering::Relaxed)).take_while(|&b| b != 0).collect();
        let status = AgentStatus {
            pid: (owner >> 32) as u32,
            passes: entry.passes.load(Ordering::Relaxed),
            report: AgentReport {
                applied: owner as u32,
                hooks: entry.hooks.load(Ordering::Relaxed),
                slow_hooks: entry.slow_hooks.load(Ordering::Relaxed),
                failed: entry.failed.load(Ordering::Relaxed),
                unsupported: entry.unsupported.load(Ordering::Relaxed),
                message: String::from_utf8_lossy(&message).into_owned(),
            },
        };
        if entry.seq.load(Ordering::Acquire) == seq && entry.owner.load(Ordering::Acquire) == owner {
            return Some(status);
        }
    }
}
