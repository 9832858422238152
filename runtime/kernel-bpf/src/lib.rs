//! The kernel as an eBPF engine: BPF_PROG_LOAD and BPF_PROG_TEST_RUN through raw bpf(2).
//!
//! Programs are XDP programs so that `BPF_PROG_TEST_RUN` can feed them a data buffer and return
//! the buffer as the program left it. uebpf programs expect `r1` = data address and `r2` = data
//! length; [`XdpProgram::load`] prefixes the bytecode with a small adapter that turns the XDP
//! context into exactly that (and proves to the verifier that `len` bytes are readable).
//!
//! Hand-written against the kernel's UAPI because this crate loads bytecode, not objects: one
//! BPF_PROG_LOAD and BPF_PROG_TEST_RUN per program, which no object loader is needed for
//! (libbpf is what tracecost's C tools use for objects).

use std::fmt;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const BPF_MAP_CREATE: libc::c_int = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_int = 2;
const BPF_PROG_LOAD: libc::c_int = 5;
const BPF_MAP_FREEZE: libc::c_int = 22;
const BPF_PROG_TEST_RUN: libc::c_int = 10;
const BPF_PROG_TYPE_XDP: u32 = 6;
/// Smallest packet XDP test runs accept (an Ethernet header).
pub const MIN_DATA_LEN: usize = 14;
/// Instructions the adapter prepends; bytecode offsets seen by the kernel shift by this much.
pub const ADAPTER_LEN: usize = 8;

/// `union bpf_attr` as used by BPF_PROG_LOAD (the fields up to expected_attach_type).
#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

/// `union bpf_attr` as used by BPF_PROG_TEST_RUN.
#[repr(C)]
#[derive(Default)]
struct TestRunAttr {
    prog_fd: u32,
    retval: u32,
    data_size_in: u32,
    data_size_out: u32,
    data_in: u64,
    data_out: u64,
    repeat: u32,
    duration: u32,
    ctx_size_in: u32,
    ctx_size_out: u32,
    ctx_in: u64,
    ctx_out: u64,
    flags: u32,
    cpu: u32,
    batch_size: u32,
    _pad: u32,
}

/// A failed bpf(2) call: which command, errno, and the verifier log when there is one.
#[derive(Debug)]
pub struct KernelError {
    pub command: &'static str,
    pub errno: std::io::Error,
    pub verifier_log: String,
}

impl fmt::Display for KernelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bpf({}) failed: {}", self.command, self.errno)?;
        if !self.verifier_log.is_empty() {
            write!(f, "\nverifier log:\n{}", self.verifier_log)?;
        }
        Ok(())
    }
}

impl std::error::Error for KernelError {}

fn bpf<T>(cmd: libc::c_int, attr: &mut T) -> libc::c_long {
    // SAFETY: attr is a live, correctly laid out bpf_attr prefix of size_of::<T>() bytes.
    unsafe { libc::syscall(libc::SYS_bpf, cmd, attr as *mut T, std::mem::size_of::<T>()) }
}

/// Checks that this process can load and test-run BPF programs (root, bpf(2) present), so
/// callers can fail with one clear message instead of an errno from deep inside a test.
pub fn check_access() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("needs root: BPF_PROG_LOAD of XDP programs and BPF_PROG_TEST_RUN require CAP_BPF/CAP_SYS_ADMIN".into());
    }
    // exit with r0 = 0: the smallest program the verifier accepts.
    let probe = [0xb7, 0, 0, 0, 0, 0, 0, 0, 0x95, 0, 0, 0, 0, 0, 0, 0];
    XdpProgram::load_raw(&probe).map(drop).map_err(|e| format!("the kernel refuses BPF programs here: {e}"))
}

/// Encodes one instruction (opcode, dst, src, off, imm) for the adapter.
fn insn(opcode: u8, dst: u8, src: u8, off: i16, imm: i32) -> [u8; 8] {
    let (o, i) = (off.to_le_bytes(), imm.to_le_bytes());
    [opcode, (src << 4) | dst, o[0], o[1], i[0], i[1], i[2], i[3]]
}

/// r1 = xdp->data, r2 = data_len, after proving `data + data_len <= data_end`; otherwise the
/// program returns u32::MAX (no corpus program does, so a short packet is noticed).
fn adapter(data_len: usize) -> Vec<u8> {
    let len = i32::try_from(data_len).expect("XDP packets are far below 2 GiB");
    let code: [[u8; 8]; ADAPTER_LEN] = [
        insn(0x61, 2, 1, 4, 0),   // ldxw r2, [r1+4]   data_end
        insn(0x61, 1, 1, 0, 0),   // ldxw r1, [r1+0]   data
        insn(0xbf, 3, 1, 0, 0),   // mov64 r3, r1
        insn(0x07, 3, 0, 0, len), // add64 r3, len
        insn(0xbd, 3, 2, 2, 0),   // jle r3, r2, +2
        insn(0xb4, 0, 0, 0, -1),  // mov32 r0, -1
        insn(0x95, 0, 0, 0, 0),   // exit
        insn(0xb7, 2, 0, 0, len), // mov64 r2, len
    ];
    code.concat()
}

/// BPF_PROG_LOAD of `code` as XDP; with `log`, the verifier writes its log there (the kernel
/// keeps the log's tail when it does not fit).
fn prog_load(code: &[u8], log: Option<&mut [u8]>) -> Result<OwnedFd, std::io::Error> {
    prog_load_typed(BPF_PROG_TYPE_XDP, code, log)
}

fn prog_load_typed(prog_type: u32, code: &[u8], log: Option<&mut [u8]>) -> Result<OwnedFd, std::io::Error> {
    let license = c"GPL";
    let (log_level, log_size, log_buf) = match log {
        Some(log) => (1, log.len() as u32, log.as_mut_ptr() as u64),
        None => (0, 0, 0),
    };
    let mut attr = ProgLoadAttr {
        prog_type,
        insn_cnt: (code.len() / 8) as u32,
        insns: code.as_ptr() as u64,
        license: license.as_ptr() as u64,
        log_level,
        log_size,
        log_buf,
        ..Default::default()
    };
    attr.prog_name[..6].copy_from_slice(b"uebpf\0");
    let fd = bpf(BPF_PROG_LOAD, &mut attr);
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: bpf(BPF_PROG_LOAD) returned a new file descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Outcome of one BPF_PROG_TEST_RUN.
#[derive(Clone, Copy, Debug)]
pub struct TestRun {
    /// The program's r0, truncated to 32 bits by the kernel.
    pub retval: u32,
    /// Mean nanoseconds per repetition as the kernel measured it (integer, truncated).
    pub duration_ns: u32,
}

/// An XDP program loaded into the kernel (closed on drop).
pub struct XdpProgram {
    fd: OwnedFd,
}

impl XdpProgram {
    /// Loads `body` (expects r1 = data, r2 = data length) behind the XDP adapter, for packets of
    /// exactly `data_len` bytes.
    pub fn load(body: &[u8], data_len: usize) -> Result<XdpProgram, KernelError> {
        let mut code = adapter(data_len);
        code.extend_from_slice(body);
        XdpProgram::load_raw(&code)
    }

    /// Loads `code` as an XDP program as is. The first attempt asks for no verifier log (a log of
    /// a program with loops can outgrow any buffer, which itself fails the load with ENOSPC);
    /// only a rejected program is loaded again to fetch the log's tail for the error.
    pub fn load_raw(code: &[u8]) -> Result<XdpProgram, KernelError> {
        let fd = match prog_load(code, None) {
            Ok(fd) => fd,
            Err(errno) => {
                let mut log = vec![0u8; 1 << 20];
                let verifier_log = match prog_load(code, Some(&mut log)) {
                    // Accepted the second time: nothing to explain beyond the first errno.
                    Ok(_) => String::new(),
                    Err(_) => {
                        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
                        String::from_utf8_lossy(&log[..end]).into_owned()
                    }
                };
                return Err(KernelError { command: "BPF_PROG_LOAD", errno, verifier_log });
            }
        };
        Ok(XdpProgram { fd })
    }

    /// Runs the program `repeat` times (at least once) on `data`; afterwards `data` holds the
    /// packet as the last run left it.
    pub fn test_run(&self, data: &mut [u8], repeat: u32) -> Result<TestRun, KernelError> {
        let input = data.to_vec();
        let mut attr = TestRunAttr {
            prog_fd: self.fd.as_raw_fd() as u32,
            data_size_in: input.len() as u32,
            data_size_out: data.len() as u32,
            data_in: input.as_ptr() as u64,
            data_out: data.as_mut_ptr() as u64,
            repeat,
            ..Default::default()
        };
        if bpf(BPF_PROG_TEST_RUN, &mut attr) < 0 {
            let errno = std::io::Error::last_os_error();
            return Err(KernelError { command: "BPF_PROG_TEST_RUN", errno, verifier_log: String::new() });
        }
        Ok(TestRun { retval: attr.retval, duration_ns: attr.duration })
    }
}

/// `union bpf_attr` as used by BPF_MAP_CREATE (the fields up to map_flags).
#[repr(C)]
#[derive(Default)]
struct MapCreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
}

/// `union bpf_attr` as used by BPF_MAP_UPDATE_ELEM and BPF_MAP_FREEZE.
#[repr(C)]
#[derive(Default)]
struct MapElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

fn failed(command: &'static str) -> KernelError {
    KernelError { command, errno: std::io::Error::last_os_error(), verifier_log: String::new() }
}

/// A kernel map, for programs loaded with [`load_verdict`] to name by fd.
pub struct KernelMap {
    fd: OwnedFd,
}

impl KernelMap {
    pub fn create(map_type: u32, key_size: u32, value_size: u32, max_entries: u32, map_flags: u32) -> Result<KernelMap, KernelError> {
        let mut attr = MapCreateAttr { map_type, key_size, value_size, max_entries, map_flags };
        let fd = bpf(BPF_MAP_CREATE, &mut attr);
        if fd < 0 {
            return Err(failed("BPF_MAP_CREATE"));
        }
        // SAFETY: a descriptor the kernel just gave us.
        Ok(KernelMap { fd: unsafe { OwnedFd::from_raw_fd(fd as i32) } })
    }

    pub fn fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    pub fn update(&self, key: &[u8], value: &[u8]) -> Result<(), KernelError> {
        let mut attr =
            MapElemAttr { map_fd: self.fd() as u32, key: key.as_ptr() as u64, value: value.as_ptr() as u64, ..Default::default() };
        if bpf(BPF_MAP_UPDATE_ELEM, &mut attr) < 0 {
            return Err(failed("BPF_MAP_UPDATE_ELEM"));
        }
        Ok(())
    }

    /// BPF_MAP_FREEZE: no more writes from the syscall side (as libbpf does to `.rodata`).
    pub fn freeze(&self) -> Result<(), KernelError> {
        let mut attr = MapElemAttr { map_fd: self.fd() as u32, ..Default::default() };
        if bpf(BPF_MAP_FREEZE, &mut attr) < 0 {
            return Err(failed("BPF_MAP_FREEZE"));
        }
        Ok(())
    }
}

/// The kernel verifier's verdict on `code` as a program of type `prog_type` (GPL): Ok if it
/// loads, else the error with the verifier's log.
pub fn load_verdict(prog_type: u32, code: &[u8]) -> Result<(), KernelError> {
    let mut log = vec![0u8; 1 << 20];
    match prog_load_typed(prog_type, code, Some(&mut log)) {
        Ok(_) => Ok(()),
        Err(errno) => {
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            Err(KernelError { command: "BPF_PROG_LOAD", errno, verifier_log: String::from_utf8_lossy(&log[..end]).into_owned() })
        }
    }
}
