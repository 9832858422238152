//! What the safety analysis knows of a 64-bit value: unsigned and signed ranges and known bits
//! (a "tnum": `value` holds the known bits, `mask` the unknown ones), as the kernel's verifier
//! tracks them (kernel/bpf/tnum.c, `reg_bounds_sync` in kernel/bpf/verifier.c). Every operation
//! over-approximates: the true value always lies in what is computed.

/// Known bits: bit i is known to be `value`'s bit i where `mask`'s bit i is 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Tnum {
    pub value: u64,
    pub mask: u64,
}

impl Tnum {
    pub const UNKNOWN: Tnum = Tnum { value: 0, mask: u64::MAX };

    pub fn constant(value: u64) -> Tnum {
        Tnum { value, mask: 0 }
    }

    /// The bits every value in [min, max] shares (tnum_range).
    pub fn range(min: u64, max: u64) -> Tnum {
        let chi = min ^ max;
        let bits = 64 - chi.leading_zeros();
        if bits > 63 {
            return Tnum::UNKNOWN;
        }
        let delta = (1u64 << bits) - 1;
        Tnum { value: min & !delta, mask: delta }
    }

    pub fn is_constant(self) -> bool {
        self.mask == 0
    }

    pub fn add(self, other: Tnum) -> Tnum {
        let sm = self.mask.wrapping_add(other.mask);
        let sv = self.value.wrapping_add(other.value);
        let sigma = sm.wrapping_add(sv);
        let chi = sigma ^ sv;
        let mu = chi | self.mask | other.mask;
        Tnum { value: sv & !mu, mask: mu }
    }

    pub fn sub(self, other: Tnum) -> Tnum {
        let dv = self.value.wrapping_sub(other.value);
        let alpha = dv.wrapping_add(self.mask);
        let beta = dv.wrapping_sub(other.mask);
        let chi = alpha ^ beta;
        let mu = chi | self.mask | other.mask;
        Tnum { value: dv & !mu, mask: mu }
    }

    pub fn and(self, other: Tnum) -> Tnum {
        let alpha = self.value | self.mask;
        let beta = other.value | other.mask;
        let value = self.value & other.value;
        Tnum { value, mask: alpha & beta & !value }
    }

    pub fn or(self, other: Tnum) -> Tnum {
        let value = self.value | other.value;
        Tnum { value, mask: (self.mask | other.mask) & !value }
    }

    pub fn xor(self, other: Tnum) -> Tnum {
        let mask = self.mask | other.mask;
        Tnum { value: (self.value ^ other.value) & !mask, mask }
    }

    /// Products of known values; otherwise the low bits known to be zero in both survive.
    pub fn mul(self, other: Tnum) -> Tnum {
        if self.is_constant() && other.is_constant() {
            return Tnum::constant(self.value.wrapping_mul(other.value));
        }
        let zeros = (self.value | self.mask).trailing_zeros() + (other.value | other.mask).trailing_zeros();
        if zeros >= 64 {
            Tnum::constant(0)
        } else {
            Tnum { value: 0, mask: u64::MAX << zeros }
        }
    }

    pub fn shl(self, shift: u32) -> Tnum {
        Tnum { value: self.value << shift, mask: self.mask << shift }
    }

    pub fn shr(self, shift: u32) -> Tnum {
        Tnum { value: self.value >> shift, mask: self.mask >> shift }
    }

    pub fn sar(self, shift: u32) -> Tnum {
        Tnum { value: ((self.value as i64) >> shift) as u64, mask: ((self.mask as i64) >> shift) as u64 }
    }

    /// The values both allow.
    pub fn intersect(self, other: Tnum) -> Tnum {
        let value = self.value | other.value;
        let mask = self.mask & other.mask;
        Tnum { value: value & !mask, mask }
    }

    /// The low 32 bits, zero-extended.
    pub fn low32(self) -> Tnum {
        Tnum { value: self.value & 0xffff_ffff, mask: self.mask & 0xffff_ffff }
    }

    /// True if every value `other` allows, `self` allows too.
    pub fn contains(self, other: Tnum) -> bool {
        other.mask & !self.mask == 0 && other.value & !self.mask == self.value
    }
}

/// Ranges and known bits of one value. An empty range (min above max) marks a path that cannot
/// happen (a branch the value's range rules out).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Scalar {
    pub umin: u64,
    pub umax: u64,
    pub smin: i64,
    pub smax: i64,
    pub bits: Tnum,
}

impl Scalar {
    pub fn unknown() -> Scalar {
        Scalar { umin: 0, umax: u64::MAX, smin: i64::MIN, smax: i64::MAX, bits: Tnum::UNKNOWN }
    }

    pub fn constant(value: u64) -> Scalar {
        Scalar { umin: value, umax: value, smin: value as i64, smax: value as i64, bits: Tnum::constant(value) }
    }

    /// Any value in [0, max].
    pub fn up_to(max: u64) -> Scalar {
        Scalar::unsigned(0, max)
    }

    pub fn unsigned(min: u64, max: u64) -> Scalar {
        let mut s = Scalar { umin: min, umax: max, ..Scalar::unknown() };
        s.sync();
        s
    }

    fn from_bits(bits: Tnum) -> Scalar {
        let mut s = Scalar { bits, ..Scalar::unknown() };
        s.sync();
        s
    }

    pub fn value(&self) -> Option<u64> {
        (self.umin == self.umax).then_some(self.umin)
    }

    pub fn is_empty(&self) -> bool {
        self.umin > self.umax || self.smin > self.smax
    }

    /// Makes the ranges and the known bits agree, each narrowed by the others (reg_bounds_sync).
    pub fn sync(&mut self) {
        for _ in 0..2 {
            let b = self.bits;
            self.umin = self.umin.max(b.value);
            self.umax = self.umax.min(b.value | b.mask);
            const SIGN: u64 = 1 << 63;
            self.smin = self.smin.max((b.value | (b.mask & SIGN)) as i64);
            self.smax = self.smax.min((b.value | (b.mask & !SIGN)) as i64);
            // An unsigned range within one sign half is a signed range too, and the reverse.
            if (self.umin as i64) <= (self.umax as i64) {
                self.smin = self.smin.max(self.umin as i64);
                self.smax = self.smax.min(self.umax as i64);
            }
            if (self.smin as u64) <= (self.smax as u64) {
                self.umin = self.umin.max(self.smin as u64);
                self.umax = self.umax.min(self.smax as u64);
            }
            if self.is_empty() {
                return;
            }
            self.bits = self.bits.intersect(Tnum::range(self.umin, self.umax));
        }
    }

    /// The low 32 bits of the value, zero-extended (what a 32-bit ALU operation reads).
    pub fn low32(&self) -> Scalar {
        if self.umax <= u64::from(u32::MAX) {
            *self
        } else {
            Scalar::from_bits(self.bits.low32())
        }
    }

    /// True if every value `other` can hold, `self` can hold too (state pruning).
    pub fn contains(&self, other: &Scalar) -> bool {
        self.umin <= other.umin
            && other.umax <= self.umax
            && self.smin <= other.smin
            && other.smax <= self.smax
            && self.bits.contains(other.bits)
    }

    /// Narrows the unsigned bounds to [lo, hi] (what an operation's bounds say of its result).
    fn narrow_unsigned(&mut self, lo: u64, hi: u64) {
        self.umin = self.umin.max(lo);
        self.umax = self.umax.min(hi);
    }

    /// As `narrow_unsigned`, for the signed bounds.
    fn narrow_signed(&mut self, lo: i64, hi: i64) {
        self.smin = self.smin.max(lo);
        self.smax = self.smax.min(hi);
    }

    pub fn add(&self, other: &Scalar) -> Scalar {
        let mut r = Scalar::from_bits(self.bits.add(other.bits));
        if let (Some(lo), Some(hi)) = (self.umin.checked_add(other.umin), self.umax.checked_add(other.umax)) {
            r.narrow_unsigned(lo, hi);
        }
        if let (Some(lo), Some(hi)) = (self.smin.checked_add(other.smin), self.smax.checked_add(other.smax)) {
            r.narrow_signed(lo, hi);
        }
        r.sync();
        r
    }

    pub fn sub(&self, other: &Scalar) -> Scalar {
        let mut r = Scalar::from_bits(self.bits.sub(other.bits));
        if self.umin >= other.umax {
            r.narrow_unsigned(self.umin - other.umax, self.umax - other.umin);
        }
        if let (Some(lo), Some(hi)) = (self.smin.checked_sub(other.smax), self.smax.checked_sub(other.smin)) {
            r.narrow_signed(lo, hi);
        }
        r.sync();
        r
    }

    pub fn mul(&self, other: &Scalar) -> Scalar {
        let mut r = Scalar::from_bits(self.bits.mul(other.bits));
        if let (Some(lo), Some(hi)) = (self.umin.checked_mul(other.umin), self.umax.checked_mul(other.umax)) {
            r.narrow_unsigned(lo, hi);
        }
        r.sync();
        r
    }

    pub fn and(&self, other: &Scalar) -> Scalar {
        let mut r = Scalar::from_bits(self.bits.and(other.bits));
        r.umax = r.umax.min(self.umax).min(other.umax);
        r.sync();
        r
    }

    pub fn or(&self, other: &Scalar) -> Scalar {
        let mut r = Scalar::from_bits(self.bits.or(other.bits));
        r.umin = r.umin.max(self.umin).max(other.umin);
        r.sync();
        r
    }

    pub fn xor(&self, other: &Scalar) -> Scalar {
        Scalar::from_bits(self.bits.xor(other.bits))
    }

    /// `width`-bit shift left by a known amount (below `width`).
    pub fn shl(&self, shift: u32) -> Scalar {
        let mut r = Scalar::from_bits(self.bits.shl(shift));
        if self.umax.leading_zeros() >= shift {
            r.narrow_unsigned(self.umin << shift, self.umax << shift);
        }
        r.sync();
        r
    }

    pub fn shr(&self, shift: u32) -> Scalar {
        let mut r = Scalar::from_bits(self.bits.shr(shift));
        r.narrow_unsigned(self.umin >> shift, self.umax >> shift);
        r.sync();
        r
    }

    pub fn sar(&self, shift: u32) -> Scalar {
        let mut r = Scalar::from_bits(self.bits.sar(shift));
        r.narrow_signed(self.smin >> shift, self.smax >> shift);
        r.sync();
        r
    }

    /// Unsigned division by a known non-zero divisor.
    pub fn div(&self, divisor: u64) -> Scalar {
        Scalar::unsigned(self.umin / divisor, self.umax / divisor)
    }

    /// Unsigned remainder by a known non-zero divisor.
    pub fn rem(&self, divisor: u64) -> Scalar {
        if self.umax < divisor {
            *self
        } else {
            Scalar::up_to(divisor - 1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every operation's result contains the concrete result of every pair of members.
    #[test]
    fn operations_over_approximate_concrete_values() {
        let samples: [(u64, u64); 6] = [(0, 0), (3, 7), (0, 255), (100, 100), (u64::MAX - 5, u64::MAX), (1 << 40, (1 << 40) + 9)];
        let members = |(lo, hi): (u64, u64)| [lo, hi, lo + (hi - lo) / 2];
        for a_range in samples {
            for b_range in samples {
                let (a, b) = (Scalar::unsigned(a_range.0, a_range.1), Scalar::unsigned(b_range.0, b_range.1));
                for x in members(a_range) {
                    for y in members(b_range) {
                        let has = |s: Scalar, v: u64, what: &str| {
                            assert!(
                                s.umin <= v
                                    && v <= s.umax
                                    && s.smin <= v as i64
                                    && v as i64 <= s.smax
                                    && Tnum::contains(s.bits, Tnum::constant(v)),
                                "{what}: {x} {y} -> {v} not in {s:?}"
                            )
                        };
                        has(a.add(&b), x.wrapping_add(y), "add");
                        has(a.sub(&b), x.wrapping_sub(y), "sub");
                        has(a.mul(&b), x.wrapping_mul(y), "mul");
                        has(a.and(&b), x & y, "and");
                        has(a.or(&b), x | y, "or");
                        has(a.xor(&b), x ^ y, "xor");
                        for shift in [0, 1, 13, 63] {
                            has(a.shl(shift), x << shift, "shl");
                            has(a.shr(shift), x >> shift, "shr");
                            has(a.sar(shift), ((x as i64) >> shift) as u64, "sar");
                        }
                        if y != 0 && b.value().is_some() {
                            has(a.div(y), x / y, "div");
                            has(a.rem(y), x % y, "rem");
                        }
                        has(a.low32(), x & 0xffff_ffff, "low32");
                    }
                }
            }
        }
    }

    #[test]
    fn ranges_and_bits_narrow_each_other() {
        let s = Scalar::unsigned(0, 7).and(&Scalar::constant(4));
        assert_eq!((s.umin, s.umax), (0, 4));
        let mut masked = Scalar::unknown().and(&Scalar::constant(0xff));
        masked.sync();
        assert_eq!((masked.umax, masked.smin, masked.smax), (0xff, 0, 0xff));
        assert!(Scalar::unsigned(5, 3).is_empty());
        assert!(Scalar::unsigned(0, 10).contains(&Scalar::unsigned(2, 9)));
        assert!(!Scalar::unsigned(0, 10).contains(&Scalar::unsigned(2, 11)));
    }
}
