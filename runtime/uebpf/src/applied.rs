//! Waiting until a process's agent has applied a region's attachments (the agent table): what
//! `uebpf wait-applied` and `uebpf inject` wait for, and the server before an attach that
//! injected the agent returns.

use std::time::{Duration, Instant};

use uebpf_maps::{current, generation_reached, AgentStatus, Region};

/// How often the waiter re-checks that the target still runs while no agent reports.
const RECHECK: Duration = Duration::from_millis(50);

/// Blocks until `pid`'s slot says a pass that began at attach generation `generation` or later
/// has completed, and returns the slot (failed or unsupported attachments are the caller's to
/// judge). Errors: `pid` exits first, or `timeout` passes (saying whether `pid` has an agent on
/// this region at all).
pub fn wait_applied(region: &Region, name: &str, pid: u32, generation: u32, timeout: Duration) -> Result<AgentStatus, String> {
    let deadline = Instant::now() + timeout;
    loop {
        let seen = region.agent_generation();
        if let Some(status) = region.agent(pid).filter(|s| s.passes > 0 && generation_reached(s.report.applied, generation)) {
            return Ok(status);
        }
        if current::process_is_gone(pid) {
            return Err(format!("process {pid} exited before its agent applied region {name}'s attachments"));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            let why = match region.agent(pid) {
                Some(_) => "its agent is still applying them (a hook waits up to 2 s for every thread to stop)",
                None => "it has no agent on this region (is build/lib/libuebpf_agent.so preloaded with the same UEBPF_REGION?)",
            };
            return Err(format!("process {pid} did not apply region {name}'s attachments within {} s: {why}", timeout.as_secs_f64()));
        }
        region.wait_agent_change(seen, left.min(RECHECK));
    }
}
