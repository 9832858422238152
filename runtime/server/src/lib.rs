//! libuebpf_server.so: run an unmodified libbpf loader against uebpf instead of the kernel.
//!
//! Preloaded (`LD_PRELOAD`) into a loader, it serves the loader's bpf(2) and perf_event_open(2)
//! calls (libbpf issues both through the C library's `syscall()`), the perf event ioctls, the
//! mmap of map descriptors and ring buffer readiness for epoll, from a uebpf region
//! (`/dev/shm/uebpf-$UEBPF_REGION`): maps are created there, programs pass uebpf's load-time
//! checks and are stored there, and attaching a uprobe, uretprobe or syscall tracepoint writes
//! an entry of the region's attach table, which the agent in each target reads to run the
//! programs. No privilege is needed. Calls that are not for uebpf go to the kernel untouched.
//! runtime/server/README.md lists what is served, what is refused and why.
//!
//! Modules, in layers (each uses only modules of the layers before it; tests/unit/test_imports.py
//! checks there is no circle): attr / real / lifetime, ring / autoinject, objects / epoll, perf /
//! bpf / interpose.

// Unit tests build without the interposers, which are what reach most of the code.
#![cfg_attr(test, allow(dead_code))]

mod attr;
mod autoinject;
mod bpf;
mod epoll;
// Not in unit tests: the test binary would interpose its own C library calls.
#[cfg(not(test))]
mod interpose;
mod lifetime;
mod objects;
mod perf;
mod real;
mod ring;
