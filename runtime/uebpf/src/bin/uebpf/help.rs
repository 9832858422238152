//! What `uebpf --help` and `uebpf COMMAND --help` print, and the one line a usage mistake gets.
//!
//! Every subcommand is described once here: its synopsis (the one line a usage error repeats),
//! its summary (its row of the `uebpf --help` table), the options it reads (any other option is a
//! usage error rather than silently ignored) and the rest of its `--help`.

use std::ffi::OsString;
use std::process::ExitCode;

pub(crate) struct Command {
    pub name: &'static str,
    /// What follows `uebpf NAME`: arguments and options.
    pub synopsis: &'static str,
    /// The row of the table, short enough for one line beside the name and its arguments.
    pub summary: &'static str,
    /// The options parse_options accepts for it (long names, without `--`).
    pub options: &'static [&'static str],
    /// The rest of its `--help`: what it does, its options, its output.
    pub details: &'static str,
}

/// Options `run`, `exec` and `fire` share (one program run on given registers).
const RUN_OPTIONS: &str = "  --engine interpreter|jit   how to run the program (default interpreter)
  --repeat N                 run it N times (default 1)
  --budget N                 interpreter: stop a run after N instructions (the JIT has none: use a signal)
  --regs di=1,si=0x10,dx=str:hello
                             struct pt_regs fields; str: passes a string's address";

pub(crate) const COMMANDS: &[Command] = &[
    Command {
        name: "load",
        synopsis: "[--region NAME] [--region-size SIZE] [--server PATH] -- TOOL ARGS...",
        summary: "run a libbpf loader (opensnoop, bpftrace...) on uebpf",
        options: &["region", "region-size", "server"],
        details: "Runs TOOL with the bpf(2) server preloaded (LD_PRELOAD, after any already there) and
UEBPF_REGION set: its maps and programs go to region NAME instead of the kernel. Targets join
with `uebpf start` or `uebpf inject`, as one line on stderr says. SIGINT, SIGTERM and SIGHUP are
passed to TOOL; the exit status is TOOL's (128 + the signal if a signal killed it). The region
is removed when TOOL exits, even if it was killed with SIGKILL. A statically linked TOOL is
refused (exit 1): no dynamic loader runs in it to preload the server.

  --region NAME        the region (default: a new unguessable name, load-PID-RANDOM)
  --region-size SIZE   bytes for maps and programs (suffix K, M or G; the server's default 256M)
  --server PATH        the server library (default: lib/libuebpf_server.so beside bin/uebpf)",
    },
    Command {
        name: "start",
        synopsis: "--region NAME [--agent PATH] -- PROGRAM ARGS...",
        summary: "run a program with the agent, in region NAME",
        options: &["region", "agent"],
        details: "Runs PROGRAM in place of this command (same process id, its own signals and exit status)
with the agent preloaded (LD_PRELOAD, after any already there) and UEBPF_REGION=NAME: the
programs a loader attaches in region NAME run in it. Exit 127 if PROGRAM is not found, 1 if it
is statically linked (no dynamic loader runs in it to preload the agent).

  --region NAME   the loader's region (`uebpf load` prints it)
  --agent PATH    the agent library (default: lib/libuebpf_agent.so beside bin/uebpf)",
    },
    Command {
        name: "inject",
        synopsis: "--pid PID --region NAME [--agent PATH] [--force] [--timeout S]",
        summary: "load the agent into a running process",
        options: &["pid", "region", "agent", "force", "timeout"],
        details: "Loads the agent into process PID (ptrace; the process runs on) and makes it follow region
NAME; returns once it applied every attachment. One JSON line: the agent's slot, the thread
borrowed and for how long.

  --agent PATH   the agent library (default: lib/libuebpf_agent.so beside bin/uebpf)
  --force        inject despite a seccomp filter
  --timeout S    how long to wait for the agent (default 10)",
    },
    Command {
        name: "detach",
        synopsis: "--pid PID [--agent PATH] [--timeout S]",
        summary: "remove the agent's hooks from a process",
        options: &["pid", "agent", "timeout"],
        details: "Removes every hook of the agent in process PID (the original bytes back) and stops it
following any region. One JSON line.

  --agent PATH   the agent library (default: lib/libuebpf_agent.so beside bin/uebpf)
  --timeout S    how long a call in the process may take before it is reported (default 10)",
    },
    Command {
        name: "wait-applied",
        synopsis: "REGION --pid PID [--timeout S]",
        summary: "wait until PID's agent applied every attachment",
        options: &["pid", "timeout"],
        details: "Returns once the agent in process PID has applied every attachment region REGION had when
the command started; prints the agent's slot (JSON). Exit 1 if an attachment failed or is not
supported, PID has no agent on REGION (timeout) or PID exited.

  --timeout S   how long to wait (default 10)",
    },
    Command {
        name: "info",
        synopsis: "OBJ",
        summary: "programs and maps of an object, JSON",
        options: &[],
        details: "Lists the programs (kind, attach target) and maps (type, sizes, supported) of a clang-built
.bpf.o, as JSON.",
    },
    Command {
        name: "jit",
        synopsis: "OBJ [--repeat N] [--set NAME=VALUE]... [--extension PROG]...",
        summary: "each program's JIT tier and compile time per tier, JSON",
        options: &["repeat", "set", "extension"],
        details: "Loads OBJ and compiles each of its programs on every JIT tier this build has (the base tier,
and the optimizing one with the `opt` feature), N times each (default 5); prints per program the
tier the JIT chooses for it (`--engine jit`), whether it loops (the choice's reason), and each
tier's fastest compile in ns, the safety analysis not included (JSON). A program that does not
load has its error instead.",
    },
    Command {
        name: "run",
        synopsis:
            "OBJ PROG [--engine E] [--repeat N] [--budget N] [--regs R=V,...] [--set NAME=VALUE]... [--extension PROG]... [--region NAME]",
        summary: "load an object, run a program, print r0 and maps",
        options: &["engine", "repeat", "budget", "regs", "set", "extension", "region"],
        details: "Loads OBJ, runs its program PROG and prints r0, the maps and the drained ring buffers (JSON).

  --set NAME=VALUE           a global before loading: an integer, or str:TEXT for a char array
  --extension PROG           PROG may change what its probed call returns
  --region NAME              load into /dev/shm/uebpf-NAME (removed at exit), not private memory",
    },
    Command {
        name: "exec",
        synopsis: "REGION PROG [--engine E] [--repeat N] [--budget N] [--regs R=V,...]",
        summary: "run a program of a live region",
        options: &["engine", "repeat", "budget", "regs"],
        details: "Runs program PROG of region REGION (another process created it) and prints r0 (JSON).",
    },
    Command {
        name: "dump",
        synopsis: "REGION",
        summary: "maps and records of a live region",
        options: &[],
        details: "Prints the maps of region REGION and drains its ring buffers (JSON).",
    },
    Command {
        name: "attachments",
        synopsis: "REGION",
        summary: "a region's attach table and agents, JSON",
        options: &[],
        details: "Prints what a loader attached in region REGION and what each target's agent applied (JSON).",
    },
    Command {
        name: "fire",
        synopsis: "REGION [--engine E] [--repeat N] [--budget N] [--regs R=V,...] [--ret N] [--wait]",
        summary: "act as a target: run the attached programs",
        options: &["engine", "repeat", "budget", "regs", "ret", "wait"],
        details: "Runs every enabled uprobe and uretprobe attachment of REGION whose pid filter admits this
process, as the agent would at the probed function (JSON).

  --ret N                    the return value uretprobes see
  --wait                     print this process's pid, then fire once a line arrives on stdin",
    },
    Command {
        name: "attach",
        synopsis: "OBJ --region NAME [--attach PROG:BINARY:SYMBOL]... [--pid PID] [--set NAME=VALUE]... [--extension PROG]...",
        summary: "load and attach an object without a libbpf loader",
        options: &["region", "attach", "pid", "set", "extension"],
        details: "Loads OBJ into a new region NAME, attaches the programs whose sections name a target and
every --attach (SYMBOL may be a 0x file offset), prints READY, and on SIGINT or SIGTERM prints
the maps and records and removes the region.

  --pid PID          attach for process PID only (default every process with the agent)
  --set NAME=VALUE   a global before loading: an integer, or str:TEXT for a char array
  --extension PROG   PROG may change what its probed call returns",
    },
    Command {
        name: "check-hook",
        synopsis: "BINARY SYMBOL|0xOFFSET [--return]",
        summary: "would the hook engine hook there? (JSON)",
        options: &["return"],
        details: "Judges, from the file alone, whether the hook engine would hook SYMBOL (or a file offset) of
BINARY, and with which patch. Exit 1 if the location is not in the file.

  --return   as a return probe",
    },
];

/// Answers `uebpf --help`, `uebpf help [COMMAND]`, `uebpf COMMAND --help` (or `-h`, before any
/// `--`: what follows belongs to the program `load` or `start` runs) and a bare `uebpf`; returns
/// the exit status, or None if ARGS ask for something else.
pub(crate) fn requested(args: &[OsString]) -> Option<ExitCode> {
    if args.is_empty() {
        // Not a request for help but a command line that says nothing: the table, as an error.
        crate::error_line(&table());
        return Some(ExitCode::from(2));
    }
    let words: Vec<&str> = args.iter().take_while(|a| *a != "--").map(|a| a.to_str().unwrap_or("")).collect();
    if words.first() == Some(&"help") {
        return Some(match words[1..] {
            [] => print(&table()),
            [name] => match find(name) {
                Some(command) => print(&usage(command)),
                None => mistaken(&mistake(&format!("unknown command `{name}`"), None)),
            },
            _ => mistaken(&mistake("`help` takes at most one command", None)),
        });
    }
    if !words.iter().any(|w| matches!(*w, "--help" | "-h")) {
        return None;
    }
    Some(print(&words.iter().find_map(|w| find(w)).map_or_else(table, usage)))
}

fn print(text: &str) -> ExitCode {
    match crate::write_line(text) {
        Ok(()) => ExitCode::SUCCESS,
        // As every command: a reader that went away ends it quietly (runtime/uebpf/README.md,
        // "Signals and output").
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::from(128 + libc::SIGPIPE as u8),
        Err(_) => ExitCode::FAILURE,
    }
}

/// Prints a usage mistake's line and gives its status.
pub(crate) fn mistaken(line: &str) -> ExitCode {
    crate::error_line(&format!("uebpf: {line}"));
    ExitCode::from(2)
}

pub(crate) fn find(name: &str) -> Option<&'static Command> {
    COMMANDS.iter().find(|c| c.name == name)
}

/// `uebpf --help`: one line per subcommand.
pub(crate) fn table() -> String {
    let rows: Vec<(String, &str)> = COMMANDS.iter().map(|c| (format!("{} {}", c.name, short(c.synopsis, false)), c.summary)).collect();
    let width = rows.iter().map(|(left, _)| left.len()).max().unwrap_or(0);
    let mut text = String::from("usage: uebpf COMMAND ARGS...   (uebpf COMMAND --help: its usage and options)\n\n");
    for (left, summary) in rows {
        text += &format!("  {left:width$}  {summary}\n");
    }
    text.pop();
    text
}

/// The synopsis without its optional parts (`[...]`, and the `...` that repeats one), for the
/// table; with `options`, the first of them stands as `[OPTIONS]` (for a usage mistake's line).
fn short(synopsis: &str, options: bool) -> String {
    let mut depth = 0;
    let mut kept = String::new();
    let mut marked = !options;
    // Just after a dropped part: its `...` goes with it.
    let mut dropped = false;
    for c in synopsis.chars() {
        match c {
            '[' => {
                if depth == 0 && !marked {
                    kept += "[OPTIONS]";
                    marked = true;
                }
                depth += 1
            }
            ']' => {
                depth -= 1;
                dropped = depth == 0;
            }
            '.' if dropped => {}
            _ if depth == 0 => {
                kept.push(c);
                dropped = false;
            }
            _ => {}
        }
    }
    kept.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `uebpf COMMAND --help`.
pub(crate) fn usage(command: &Command) -> String {
    let mut text = format!("usage: uebpf {} {}\n\n{}", command.name, command.synopsis, command.details.trim_end());
    if matches!(command.name, "run" | "exec" | "fire") {
        // Under the command's own options, or after a blank line if it has none.
        let own_options = text.lines().last().is_some_and(|line| line.starts_with("  -"));
        text += if own_options { "\n" } else { "\n\n" };
        text += RUN_OPTIONS;
    }
    text
}

/// The one line of a usage mistake (without the `uebpf: ` the caller adds).
pub(crate) fn mistake(why: &str, command: Option<&Command>) -> String {
    match command {
        Some(c) => format!("{why} (usage: uebpf {} {}; see uebpf {} --help)", c.name, short(c.synopsis, true), c.name),
        None => format!("{why} (uebpf --help lists the commands)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_has_one_line_per_command() {
        let table = table();
        assert_eq!(table.lines().count(), COMMANDS.len() + 2, "{table}");
        assert!(table.contains("  load -- TOOL ARGS..."), "{table}");
        assert!(table.contains("  attach OBJ --region NAME "), "{table}");
        assert!(table.lines().all(|line| line.len() <= 100), "{table}");
    }

    #[test]
    fn a_mistake_is_one_line_with_the_short_synopsis() {
        let line = mistake("no TOOL after `--`", find("load"));
        assert_eq!(line, "no TOOL after `--` (usage: uebpf load [OPTIONS] -- TOOL ARGS...; see uebpf load --help)");
        assert!(mistake("x", find("run")).contains("uebpf run OBJ PROG [OPTIONS];"));
        assert!(mistake("x", find("attach")).contains("uebpf attach OBJ --region NAME [OPTIONS];"));
        assert!(mistake("x", find("dump")).contains("(usage: uebpf dump REGION;"));
    }

    #[test]
    fn every_usage_names_its_options() {
        for command in COMMANDS {
            let usage = usage(command);
            for option in command.options {
                assert!(usage.contains(&format!("--{option}")), "{} --help does not mention --{option}", command.name);
            }
        }
    }
}
