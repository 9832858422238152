//! The register frame handlers receive: the kernel's x86-64 `struct pt_regs`, field for field,
//! so a BPF program's `PT_REGS_PARM1..6`, `PT_REGS_RC`, `PT_REGS_IP` and `PT_REGS_SP` read the
//! same offsets as on a kernel uprobe.

/// x86-64 `struct pt_regs` (arch/x86/include/asm/ptrace.h), 168 bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PtRegs {
    pub r15: u64,
    pub r14: u64,
    pub r13: u64,
    pub r12: u64,
    pub bp: u64,
    pub bx: u64,
    pub r11: u64,
    pub r10: u64,
    pub r9: u64,
    pub r8: u64,
    pub ax: u64,
    pub cx: u64,
    pub dx: u64,
    pub si: u64,
    pub di: u64,
    /// -1, as the kernel sets it outside system calls.
    pub orig_ax: u64,
    /// Entry probe: the hooked address. Return probe: the address the function returns to.
    pub ip: u64,
    pub cs: u64,
    pub flags: u64,
    /// Entry probe: the stack pointer at the hooked address (it points at the return address).
    /// Return probe: the stack pointer after the return (entry value + 8).
    pub sp: u64,
    pub ss: u64,
}

const NAMES: [&str; 21] = [
    "r15", "r14", "r13", "r12", "bp", "bx", "r11", "r10", "r9", "r8", "ax", "cx", "dx", "si", "di", "orig_ax", "ip", "cs", "flags", "sp",
    "ss",
];

impl PtRegs {
    /// The first six integer arguments (System V), as `PT_REGS_PARM1..6`.
    pub fn args(&self) -> [u64; 6] {
        [self.di, self.si, self.dx, self.cx, self.r8, self.r9]
    }

    /// A frame whose integer arguments (System V order: di, si, dx, cx, r8, r9) are `args`, as
    /// PT_REGS_PARM1..6 read them; every other register 0. For running a program on a made-up call.
    pub fn with_args(args: &[u64]) -> PtRegs {
        let mut regs = PtRegs::default();
        for (slot, &value) in [&mut regs.di, &mut regs.si, &mut regs.dx, &mut regs.cx, &mut regs.r8, &mut regs.r9].into_iter().zip(args) {
            *slot = value;
        }
        regs
    }

    /// Sets a register by its pt_regs field name (`di`, `ax`, ...).
    pub fn set(&mut self, name: &str, value: u64) -> Result<(), String> {
        let index = NAMES
            .iter()
            .position(|n| *n == name)
            .ok_or_else(|| format!("unknown register `{name}` (pt_regs has: {})", NAMES.join(", ")))?;
        self.as_bytes_mut()[index * 8..index * 8 + 8].copy_from_slice(&value.to_ne_bytes());
        Ok(())
    }

    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: repr(C) struct of 21 u64s, no padding.
        unsafe { std::slice::from_raw_parts_mut((self as *mut PtRegs).cast::<u8>(), std::mem::size_of::<PtRegs>()) }
    }
}

/// Byte offsets the stubs write; checked against the struct below.
pub(crate) const OFFSET_IP: i32 = 128;
pub(crate) const OFFSET_CS: i32 = 136;
pub(crate) const OFFSET_FLAGS: i32 = 144;
pub(crate) const OFFSET_SP: i32 = 152;
pub(crate) const OFFSET_SS: i32 = 160;
pub(crate) const SIZE: i32 = 168;
/// The selectors user code runs with on x86-64 Linux (__USER_CS, __USER_DS).
pub(crate) const USER_CS: i32 = 0x33;
pub(crate) const USER_SS: i32 = 0x2b;

const _: () = {
    assert!(std::mem::size_of::<PtRegs>() == SIZE as usize);
    assert!(std::mem::offset_of!(PtRegs, ip) == OFFSET_IP as usize);
    assert!(std::mem::offset_of!(PtRegs, cs) == OFFSET_CS as usize);
    assert!(std::mem::offset_of!(PtRegs, flags) == OFFSET_FLAGS as usize);
    assert!(std::mem::offset_of!(PtRegs, sp) == OFFSET_SP as usize);
    assert!(std::mem::offset_of!(PtRegs, ss) == OFFSET_SS as usize);
};
