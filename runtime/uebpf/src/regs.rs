//! The context of uprobe, uretprobe and kprobe programs on x86-64: the kernel's `struct pt_regs`,
//! field for field, so the same program reads the same registers at the same offsets.

/// `struct pt_regs` (arch/x86/include/asm/ptrace.h), 168 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
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
    pub orig_ax: u64,
    pub ip: u64,
    pub cs: u64,
    pub flags: u64,
    pub sp: u64,
    pub ss: u64,
}

const NAMES: [&str; 21] = [
    "r15", "r14", "r13", "r12", "bp", "bx", "r11", "r10", "r9", "r8", "ax", "cx", "dx", "si", "di", "orig_ax", "ip", "cs",
    "flags", "sp", "ss",
];

impl PtRegs {
    /// Integer arguments in System V order (di, si, dx, cx, r8, r9), as PT_REGS_PARM1..6 read them.
    pub fn with_args(args: &[u64]) -> PtRegs {
        let mut regs = PtRegs::default();
        for (slot, &value) in [&mut regs.di, &mut regs.si, &mut regs.dx, &mut regs.cx, &mut regs.r8, &mut regs.r9].into_iter().zip(args) {
            *slot = value;
        }
        regs
    }

    /// Sets a register by its pt_regs field name (`di`, `ax`, ...).
    pub fn set(&mut self, name: &str, value: u64) -> Result<(), String> {
        let index = NAMES.iter().position(|n| *n == name).ok_or_else(|| format!("unknown register `{name}` (pt_regs has: {})", NAMES.join(", ")))?;
        self.as_bytes_mut()[index * 8..index * 8 + 8].copy_from_slice(&value.to_ne_bytes());
        Ok(())
    }

    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: repr(C) struct of 21 u64s, no padding.
        unsafe { std::slice::from_raw_parts_mut((self as *mut PtRegs).cast::<u8>(), std::mem::size_of::<PtRegs>()) }
    }
}

const _: () = assert!(std::mem::size_of::<PtRegs>() == 168);
