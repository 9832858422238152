//! The format language of bpf_trace_printk (the kernel's bpf_bprintf_prepare): at most three
//! arguments; conversions d i u x X o c s p %, with flags `-0+ `, width, precision and the length
//! modifiers hh h l ll. `%s` reads the string fault-safely (an unreadable one prints empty, as in
//! the kernel). Anything else is -EINVAL, as the kernel refuses it.

use crate::probe;

/// The kernel's MAX_BPRINTF_BUF: longer messages are cut.
const MAX_MESSAGE: usize = 1024;
const MAX_STRING_ARG: usize = 256;

struct Spec {
    left: bool,
    zero: bool,
    plus: bool,
    space: bool,
    width: usize,
    precision: Option<usize>,
}

fn pad(spec: &Spec, sign: &str, body: String, numeric: bool) -> String {
    let len = sign.len() + body.len();
    if len >= spec.width {
        return format!("{sign}{body}");
    }
    let fill = spec.width - len;
    if spec.left {
        format!("{sign}{body}{}", " ".repeat(fill))
    } else if spec.zero && numeric && spec.precision.is_none() {
        format!("{sign}{}{body}", "0".repeat(fill))
    } else {
        format!("{}{sign}{body}", " ".repeat(fill))
    }
}

/// Formats `format` (NUL-terminated within its size) with `args`; Err(errno) if the kernel
/// would refuse it.
pub(crate) fn format(format: &[u8], args: &[u64]) -> Result<Vec<u8>, i32> {
    let end = format.iter().position(|&b| b == 0).ok_or(libc::EINVAL)?;
    let format = &format[..end];
    let mut out = Vec::new();
    let mut next_arg = 0;
    let mut i = 0;
    while i < format.len() {
        let c = format[i];
        i += 1;
        if c != b'%' {
            out.push(c);
            continue;
        }
        if format.get(i) == Some(&b'%') {
            out.push(b'%');
            i += 1;
            continue;
        }
        let mut spec = Spec { left: false, zero: false, plus: false, space: false, width: 0, precision: None };
        while let Some(&flag) = format.get(i) {
            match flag {
                b'-' => spec.left = true,
                b'0' => spec.zero = true,
                b'+' => spec.plus = true,
                b' ' => spec.space = true,
                _ => break,
            }
            i += 1;
        }
        let digits = |i: &mut usize| {
            let mut n = 0usize;
            while let Some(d) = format.get(*i).filter(|d| d.is_ascii_digit()) {
                n = n.saturating_mul(10).saturating_add(usize::from(d - b'0'));
                *i += 1;
            }
            n
        };
        spec.width = digits(&mut i);
        if format.get(i) == Some(&b'.') {
            i += 1;
            spec.precision = Some(digits(&mut i));
        }
        let mut bits = 32;
        if format.get(i) == Some(&b'h') {
            i += 1;
            bits = 16;
            if format.get(i) == Some(&b'h') {
                i += 1;
                bits = 8;
            }
        } else if format.get(i) == Some(&b'l') {
            i += 1;
            bits = 64;
            if format.get(i) == Some(&b'l') {
                i += 1;
            }
        }
        let conversion = *format.get(i).ok_or(libc::EINVAL)?;
        i += 1;
        let arg = *args.get(next_arg).ok_or(libc::EINVAL)?;
        next_arg += 1;
        let unsigned = if bits == 64 { arg } else { arg & ((1u64 << bits) - 1) };
        let text = match conversion {
            b'd' | b'i' => {
                let value = (unsigned << (64 - bits)) as i64 >> (64 - bits);
                let sign = if value < 0 {
                    "-"
                } else if spec.plus {
                    "+"
                } else if spec.space {
                    " "
                } else {
                    ""
                };
                pad(&spec, sign, value.unsigned_abs().to_string(), true)
            }
            b'u' => pad(&spec, "", unsigned.to_string(), true),
            b'x' => pad(&spec, "", format!("{unsigned:x}"), true),
            b'X' => pad(&spec, "", format!("{unsigned:X}"), true),
            b'o' => pad(&spec, "", format!("{unsigned:o}"), true),
            b'c' => pad(&spec, "", char::from(arg as u8).to_string(), false),
            b'p' => pad(&spec, "", format!("0x{arg:x}"), false),
            b's' => {
                let mut buf = [0u8; MAX_STRING_ARG];
                // SAFETY: buf is ours; the source is read fault-safely.
                let len = unsafe { probe::read_str(buf.as_mut_ptr(), buf.len(), arg as *const u8) };
                let text = if len > 0 { String::from_utf8_lossy(&buf[..len as usize - 1]).into_owned() } else { String::new() };
                let text: String = match spec.precision {
                    Some(p) => text.chars().take(p).collect(),
                    None => text,
                };
                pad(&spec, "", text, false)
            }
            _ => return Err(libc::EINVAL),
        };
        out.extend_from_slice(text.as_bytes());
    }
    out.truncate(MAX_MESSAGE - 1);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(fmt: &str, args: [u64; 3]) -> Result<String, i32> {
        let mut bytes = fmt.as_bytes().to_vec();
        bytes.push(0);
        format(&bytes, &args).map(|v| String::from_utf8(v).unwrap())
    }

    #[test]
    fn conversions_match_printk() {
        assert_eq!(f("a=%d b=%u c=%x", [u64::MAX, u64::MAX, 255]), Ok("a=-1 b=4294967295 c=ff".into()));
        assert_eq!(f("%ld %lld %llx", [u64::MAX, 5, 0xabc]), Ok("-1 5 abc".into()));
        assert_eq!(f("[%5d][%-4u][%04x]", [42, 7, 0xa]), Ok("[   42][7   ][000a]".into()));
        assert_eq!(f("%s!", [c"hi".as_ptr() as u64, 0, 0]), Ok("hi!".into()));
        assert_eq!(f("%s|", [8, 0, 0]), Ok("|".into()), "an unreadable string prints empty");
        assert_eq!(f("100%%", [0; 3]), Ok("100%".into()));
        assert_eq!(f("%d %d %d %d", [1, 2, 3]), Err(libc::EINVAL), "at most three arguments");
        assert_eq!(f("%q", [1, 0, 0]), Err(libc::EINVAL));
        assert_eq!(format(b"no nul", &[0; 3]), Err(libc::EINVAL));
    }
}
