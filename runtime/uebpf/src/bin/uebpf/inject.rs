//! `uebpf inject --pid PID --region NAME [--agent PATH] [--force] [--timeout S]` and `uebpf
//! detach --pid PID`: load the agent into a running process and make it follow a region, or
//! remove its hooks and make it inert (uebpf::inject has how). One JSON line on success; a
//! refusal is one line on stderr and exit 1, the process left running as it was.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};
use uebpf::inject::{self, Request, AGENT_FILE};

use crate::wait::verdict;
use crate::{signals, Options};

/// The agent of this build: `lib/libuebpf_agent.so` beside the `bin/` that holds `uebpf`.
fn agent_path(options: &Options) -> Result<PathBuf, String> {
    if let Some(path) = &options.agent {
        return Ok(path.into());
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program's path: {e}"))?;
    let lib = exe.parent().and_then(|bin| bin.parent()).map(|build| build.join("lib").join(AGENT_FILE));
    lib.filter(|path| path.exists())
        .ok_or_else(|| format!("no {AGENT_FILE} in the lib directory next to {} (give --agent PATH)", exe.display()))
}

fn request<'a>(options: &Options, agent: &'a std::path::Path) -> Request<'a> {
    Request {
        pid: options.pid.expect("checked by parse_options") as u32,
        agent,
        force: options.force,
        timeout: Duration::from_secs_f64(options.timeout_s),
    }
}

pub(crate) fn inject(options: &Options) -> Result<Value, String> {
    let agent = agent_path(options)?;
    let region = options.region.as_deref().expect("checked by parse_options");
    let request = request(options, &agent);
    // Not interruptible while the target's thread is borrowed (signals.rs defers SIGINT, SIGTERM
    // and SIGHUP, and uebpf::inject blocks them on this thread): a signal that came meanwhile
    // ends the command here, once the thread is back; the wait for the agent's pass may be cut short.
    let loaded = inject::load(&request, region).map_err(|f| f.message)?;
    let generation = loaded.generation();
    let injected = signals::interruptible(None, || loaded.applied(region, request.timeout)).map_err(|f| f.message)?;
    let mut document = verdict(&injected.status, generation)?;
    let loaded = &injected.loaded;
    document["tid"] = json!(loaded.tid);
    document["region"] = json!(region);
    document["loaded"] = json!(loaded.loaded);
    document["borrowed_ms"] = json!(loaded.borrowed.as_secs_f64() * 1e3);
    Ok(document)
}

pub(crate) fn detach(options: &Options) -> Result<Value, String> {
    let agent = agent_path(options)?;
    let request = request(options, &agent);
    let (tid, removed) = inject::detach(&request).map_err(|f| f.message)?;
    Ok(json!({"pid": request.pid, "tid": tid, "hooks_removed": removed}))
}
