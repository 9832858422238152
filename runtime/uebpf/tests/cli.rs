//! The `uebpf` command: JSON out, one-line errors, trace_printk on stderr.

mod common;

use std::process::{Command, Output};

use common::object;

fn uebpf(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_uebpf")).args(args).output().expect("uebpf runs")
}

fn json(output: &Output) -> serde_json::Value {
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).expect("one JSON document")
}

#[test]
fn run_prints_r0_maps_records_and_trace_printk_lines() {
    let path = object("uebpf_check");
    let output = uebpf(&["run", path.to_str().unwrap(), "lang", "--engine", "jit", "--set", "scale=3,verbose=1", "--regs", "di=5,si=7,dx=str:hello", "--repeat", "2"]);
    let document = json(&output);
    assert_eq!((document["runs"].as_u64(), document["r0"].as_u64()), (Some(2), Some(0)));
    // .data starts at 1000 and `lang` increments it once per run.
    assert_eq!(document["maps"][".data"]["entries"][0][1], "ea03000000000000");
    assert_eq!(document["rings"]["results"]["records"].as_array().unwrap().len(), 2);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{stderr}");
    assert!(lines[0].starts_with("uebpf-") && lines[0].ends_with("] bpf_trace_printk: uebpf_check key=5 str=hello ret=6"), "{stderr}");
}

#[test]
fn info_lists_programs_and_maps() {
    let path = object("functrace");
    let document = json(&uebpf(&["info", path.to_str().unwrap()]));
    let kinds: Vec<&str> = document["programs"].as_array().unwrap().iter().map(|p| p["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["uprobe", "uretprobe"]);
    assert!(document["maps"].as_array().unwrap().iter().any(|m| m["name"] == "events" && m["type"] == "ringbuf"));
}

#[test]
fn bad_input_is_one_line_and_a_nonzero_status() {
    let path = object("functrace");
    let unknown = uebpf(&["run", path.to_str().unwrap(), "nope"]);
    assert_eq!(unknown.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&unknown.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("no program `nope` (the region has: functrace_entry, functrace_exit)"), "{stderr}");
    let missing = uebpf(&["exec", "no-such-region", "p"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("cannot open region /dev/shm/uebpf-no-such-region"));
    assert_eq!(uebpf(&["frobnicate"]).status.code(), Some(2));
    assert_eq!(uebpf(&["run", path.to_str().unwrap()]).status.code(), Some(2));
}
