//! What the object tests share: where the project's BPF objects are.

use std::path::PathBuf;

/// `build/bpf/<name>.bpf.o` (the Makefile passes the directory as UEBPF_OBJECTS).
pub fn object(name: &str) -> PathBuf {
    let dir = std::env::var_os("UEBPF_OBJECTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../build/bpf"));
    let path = dir.join(format!("{name}.bpf.o"));
    assert!(path.exists(), "{} is missing: build the BPF objects first (make runtime-tools)", path.display());
    path
}
