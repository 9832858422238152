//! Compiles the native C versions of the benchmark programs and the C embedding loop (which
//! includes uebpf_vm.h and uebpf.h, so the headers are checked against the Rust side at every build).

fn main() {
    println!("cargo:rerun-if-changed=csrc");
    println!("cargo:rerun-if-changed=../vm/include/uebpf_vm.h");
    println!("cargo:rerun-if-changed=../uebpf/include/uebpf.h");
    cc::Build::new()
        .files(["csrc/native.c", "csrc/embed.c"])
        .include("../vm/include")
        .include("../uebpf/include")
        .opt_level(2)
        .flag("-Wall")
        .flag("-Wextra")
        .warnings_into_errors(true)
        .compile("vmbench_c");
}
