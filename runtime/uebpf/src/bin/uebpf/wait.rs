//! `uebpf wait-applied REGION --pid PID [--timeout S]`: blocks until the agent in process PID
//! has applied every attachment of the region as it stood when the command started, so that a
//! harness starts timing only once the probes are live (the agent applies attach-table changes
//! on its own thread, a little after the loader made them).
//!
//! It reads the attach generation G, then sleeps on the region's agent generation (a futex
//! every agent report wakes) until PID's slot in the agent table says a pass that began at G or
//! later has completed. Then it prints the slot as JSON: `pid`, `generation` (G), `passes`,
//! `applied`, `hooks` (attachments with a live probe in PID), `slow_hooks` (of those, the ones on an
//! int3 patch: a signal per hit), `failed`, `unsupported`, `message`; and
//! exits 0 only if nothing failed and nothing is unsupported (e.g. a sched/sched_switch tracepoint, which
//! the agent does not implement: `unsupported` > 0, exit 1, the reason in `message`).
//! Timeout, a process that exits first, or a region that does not exist: exit 1 with the reason.

use std::time::Duration;

use serde_json::{json, Value};
use uebpf::maps::{AgentStatus, Region};

use crate::{agent_json, write_line, Options};

pub(crate) fn wait_applied(options: &Options) -> Result<Value, String> {
    let name = &options.positional[0];
    let pid = options.pid.expect("checked by parse_options") as u32;
    let region = Region::open(name).map_err(|e| e.to_string())?;
    let generation = region.attach_generation();
    let status = uebpf::wait_applied(&region, name, pid, generation, Duration::from_secs_f64(options.timeout_s))?;
    verdict(&status, generation)
}

/// The slot as JSON (printed whatever the outcome, for harnesses); an error if anything failed.
pub(crate) fn verdict(status: &AgentStatus, generation: u32) -> Result<Value, String> {
    let r = &status.report;
    let mut document = agent_json(status);
    document["generation"] = json!(generation);
    if r.failed == 0 && r.unsupported == 0 {
        return Ok(document);
    }
    write_line(&format!("{document:#}")).map_err(|e| format!("cannot write to stdout: {e}"))?;
    Err(match r.failed {
        0 => format!("{} attachment(s) are not supported by uebpf: {}", r.unsupported, r.message),
        failed => format!("the agent in process {} could not apply {failed} attachment(s): {}", status.pid, r.message),
    })
}
