//! The x86-64 system call numbers by name, from the kernel's UAPI header (linux-libc-dev): a
//! `syscalls/sys_enter_NAME` tracepoint needs NAME's number, and tracefs (whose event formats do
//! not list it anyway) is root's. The x86-64 numbers are ABI: they never change.

use std::fmt::Write;

const HEADER: &str = "/usr/include/x86_64-linux-gnu/asm/unistd_64.h";

fn main() {
    println!("cargo:rerun-if-changed={HEADER}");
    let text = std::fs::read_to_string(HEADER).unwrap_or_else(|e| panic!("{HEADER}: {e} (install linux-libc-dev)"));
    let mut table = String::from(
        "/// (name, number) of every x86-64 system call, from asm/unistd_64.h.\npub const SYSCALL_NUMBERS: &[(&str, i64)] = &[\n",
    );
    for line in text.lines() {
        let mut words = line.split_whitespace();
        if let (Some("#define"), Some(name), Some(number)) = (words.next(), words.next(), words.next()) {
            if let (Some(name), Ok(number)) = (name.strip_prefix("__NR_"), number.parse::<i64>()) {
                writeln!(table, "    ({name:?}, {number}),").expect("write to a String");
            }
        }
    }
    table.push_str("];\n");
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("syscall_numbers.rs");
    std::fs::write(out, table).expect("write OUT_DIR/syscall_numbers.rs");
}
