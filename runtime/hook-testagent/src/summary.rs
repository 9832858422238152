//! The exit summary as JSON (written by hand: a few numbers and strings).

use std::fmt::Write;
use std::sync::atomic::Ordering::Relaxed;

use uebpf_hook::PatchMethod;

use crate::Agent;

pub(crate) fn render(agent: &Agent) -> String {
    let mut out = format!("{{\"pid\": {}, \"probes\": [", std::process::id());
    for (i, probe) in agent.attached.iter().enumerate() {
        let record = probe.record;
        let stats = probe.hook.stats();
        let patch = match probe.hook.patch {
            Some(PatchMethod::Plain) => "\"plain\"",
            Some(PatchMethod::Int3) => "\"int3\"",
            Some(PatchMethod::SelfLoop) => "\"self-loop\"",
            Some(PatchMethod::Behind) => "\"behind\"",
            None => "null",
        };
        let sums: Vec<String> = record.sums.iter().map(|s| s.load(Relaxed).to_string()).collect();
        let by_pid: Vec<String> = record
            .pids
            .iter()
            .zip(&record.pid_hits)
            .filter(|(pid, _)| pid.load(Relaxed) != 0)
            .map(|(pid, hits)| format!("\"{}\": {}", pid.load(Relaxed), hits.load(Relaxed)))
            .collect();
        let tids = record.tids.iter().filter(|tid| tid.load(Relaxed) != 0).count();
        let _ = write!(
            out,
            "{}{{\"spec\": {}, \"kind\": \"{}\", \"address\": {}, \"hits\": {}, \"snapshot\": {}, \"sums\": [{}], \"by_pid\": {{{}}}, \
             \"tids\": {}, \"skipped\": {}, \"missed_returns\": {}, \"stale_returns\": {}, \"patch\": {}, \"patch_kind\": \"{}\", \
             \"patch_reason\": {}}}",
            if i > 0 { ", " } else { "" },
            quote(&probe.spec),
            probe.kind,
            probe.hook.address(),
            record.hits.load(Relaxed),
            record.snapshot.load(Relaxed),
            sums.join(", "),
            by_pid.join(", "),
            tids,
            stats.skipped,
            stats.missed_returns,
            stats.stale_returns,
            patch,
            probe.hook.kind().name(),
            quote(probe.hook.kind().reason())
        );
    }
    out.push_str("], \"refused\": [");
    for (i, (spec, message)) in agent.refused.iter().enumerate() {
        let _ = write!(out, "{}{{\"spec\": {}, \"error\": {}}}", if i > 0 { ", " } else { "" }, quote(spec), quote(message));
    }
    out.push_str("]}\n");
    out
}

fn quote(text: &str) -> String {
    let mut quoted = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => quoted.push_str("\\\""),
            '\\' => quoted.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(quoted, "\\u{:04x}", c as u32);
            }
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}
