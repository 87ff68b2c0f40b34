//! x86-64 USDT argument specs (`.note.stapsdt` argument strings) as user-space data.
//!
//! Each argument is `SIZE@OPERAND`, SIZE being 1, 2, 4 or 8 bytes, negative when
//! signed, and OPERAND an AT&T operand as GCC printed it for the `nor` constraint:
//! `$5`, `%edi`, `-16(%rbp)`, `(%rax,%rdx,8)`, `-4@8(%rbx,%rcx,4)`, `sym+16(%rip)`.
//! The strings come from files, so this parser is total: anything it does not
//! understand is an error, never a panic, and work is linear in the input.

/// Most arguments a probe can have (sys/sdt.h supports 12; libbpf caps at 12 too).
pub const MAX_ARGS: usize = 12;
/// Longest argument string accepted; real ones are a few hundred bytes.
const MAX_ARGS_LEN: usize = 4096;
/// Longest symbol name in an operand.
const MAX_SYMBOL_LEN: usize = 1024;

/// A 64-bit x86-64 register, as saved in the kernel's `struct pt_regs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Reg {
    R15,
    R14,
    R13,
    R12,
    Rbp,
    Rbx,
    R11,
    R10,
    R9,
    R8,
    Rax,
    Rcx,
    Rdx,
    Rsi,
    Rdi,
    OrigRax,
    Rip,
    Cs,
    Eflags,
    Rsp,
    Ss,
}

impl Reg {
    /// Byte offset of the register in x86-64 `struct pt_regs`.
    pub fn pt_regs_offset(self) -> u16 {
        match self {
            Reg::R15 => 0,
            Reg::R14 => 8,
            Reg::R13 => 16,
            Reg::R12 => 24,
            Reg::Rbp => 32,
            Reg::Rbx => 40,
            Reg::R11 => 48,
            Reg::R10 => 56,
            Reg::R9 => 64,
            Reg::R8 => 72,
            Reg::Rax => 80,
            Reg::Rcx => 88,
            Reg::Rdx => 96,
            Reg::Rsi => 104,
            Reg::Rdi => 112,
            Reg::OrigRax => 120,
            Reg::Rip => 128,
            Reg::Cs => 136,
            Reg::Eflags => 144,
            Reg::Rsp => 152,
            Reg::Ss => 160,
        }
    }
}

/// A register operand: which 64-bit register, how many of its bytes, and where they
/// start (`%ah` is bits 8..16 of `%rax`: width 1, shift 8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub struct RegRef {
    pub reg: Reg,
    /// Width in bytes: 8 (`%rax`), 4 (`%eax`), 2 (`%ax`) or 1 (`%al`, `%ah`).
    pub width: u8,
    /// Right shift in bits to apply to the 64-bit value before truncating to `width`.
    pub shift: u8,
}

impl RegRef {
    /// The whole 64-bit register.
    pub fn full(reg: Reg) -> Self {
        Self {
            reg,
            width: 8,
            shift: 0,
        }
    }

    /// Byte offset of the underlying 64-bit register in `struct pt_regs`.
    pub fn pt_regs_offset(self) -> u16 {
        self.reg.pt_regs_offset()
    }

    /// Looks up an AT&T register name without the `%`.
    pub fn from_name(name: &str) -> Option<Self> {
        let r = |reg, width, shift| Some(RegRef { reg, width, shift });
        // The legacy eight by their historic names.
        const LEGACY: [(Reg, [&str; 4], Option<&str>); 8] = [
            (Reg::Rax, ["rax", "eax", "ax", "al"], Some("ah")),
            (Reg::Rbx, ["rbx", "ebx", "bx", "bl"], Some("bh")),
            (Reg::Rcx, ["rcx", "ecx", "cx", "cl"], Some("ch")),
            (Reg::Rdx, ["rdx", "edx", "dx", "dl"], Some("dh")),
            (Reg::Rsi, ["rsi", "esi", "si", "sil"], None),
            (Reg::Rdi, ["rdi", "edi", "di", "dil"], None),
            (Reg::Rbp, ["rbp", "ebp", "bp", "bpl"], None),
            (Reg::Rsp, ["rsp", "esp", "sp", "spl"], None),
        ];
        for (reg, names, high) in LEGACY {
            for (name_at, width) in names.iter().zip([8u8, 4, 2, 1]) {
                if *name_at == name {
                    return r(reg, width, 0);
                }
            }
            if high == Some(name) {
                return r(reg, 1, 8);
            }
        }
        const NUMBERED: [Reg; 8] = [
            Reg::R8,
            Reg::R9,
            Reg::R10,
            Reg::R11,
            Reg::R12,
            Reg::R13,
            Reg::R14,
            Reg::R15,
        ];
        if let Some(rest) = name.strip_prefix('r') {
            let digits_end = rest
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(rest.len());
            let (num, suffix) = rest.split_at(digits_end);
            // No leading zeros: `r08` is not a register.
            if !num.starts_with('0')
                && let Ok(n) = num.parse::<usize>()
                && let Some(reg) = n.checked_sub(8).and_then(|i| NUMBERED.get(i))
            {
                let width = match suffix {
                    "" => 8,
                    "d" => 4,
                    "w" => 2,
                    "b" | "l" => 1,
                    _ => return None,
                };
                return r(*reg, width, 0);
            }
        }
        match name {
            "rip" => r(Reg::Rip, 8, 0),
            "eip" => r(Reg::Rip, 4, 0),
            _ => None,
        }
    }
}

/// A constant displacement, possibly relative to a symbol: `-16`, `sym`, `sym+16`,
/// `16+sym`, `sym-8`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize)]
pub struct Displacement {
    pub symbol: Option<String>,
    pub offset: i64,
}

impl Displacement {
    /// Link-time address `symbol + offset`, looking the symbol up with `lookup`.
    pub fn link_address(&self, lookup: impl Fn(&str) -> Option<u64>) -> Result<u64, UsdtArgError> {
        let base = match &self.symbol {
            Some(sym) => lookup(sym).ok_or_else(|| UsdtArgError::UnknownSymbol(sym.clone()))?,
            None => 0,
        };
        Ok(base.wrapping_add_signed(self.offset))
    }
}

/// Where an argument's value is.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ArgLocation {
    /// `$imm`: the value itself.
    Constant { value: i64 },
    /// `%reg`: a register's value.
    Register { reg: RegRef },
    /// `disp(base,index,scale)` and its shorter forms: memory at
    /// `base + index*scale + disp`. With neither base nor index, `disp` is an absolute
    /// (link-time) address, which moves with the load bias.
    Memory {
        base: Option<RegRef>,
        index: Option<RegRef>,
        /// 1, 2, 4 or 8 (1 when there is no index).
        scale: u8,
        disp: Displacement,
    },
    /// `sym+off(%rip)`: memory at the symbol's runtime address plus `off`; resolved at
    /// attach time with the object's symbols and load bias ([`UsdtArg::static_address`]).
    RipRelative { disp: Displacement },
}

/// One parsed argument.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize)]
pub struct UsdtArg {
    /// Size in bytes: 1, 2, 4 or 8.
    pub size: u8,
    pub signed: bool,
    pub location: ArgLocation,
}

impl UsdtArg {
    /// Runtime address of a memory operand that does not depend on registers
    /// (`%rip`-relative, or absolute): `load_bias + symbol + offset`. `Ok(None)` for
    /// operands that do depend on registers or are not in memory.
    pub fn static_address(
        &self,
        lookup: impl Fn(&str) -> Option<u64>,
        load_bias: u64,
    ) -> Result<Option<u64>, UsdtArgError> {
        match &self.location {
            ArgLocation::RipRelative { disp } => {
                if disp.symbol.is_none() {
                    // `N(%rip)` is relative to the next instruction, whose address the
                    // note does not give.
                    return Err(UsdtArgError::RipWithoutSymbol);
                }
                Ok(Some(disp.link_address(lookup)?.wrapping_add(load_bias)))
            }
            ArgLocation::Memory {
                base: None,
                index: None,
                disp,
                ..
            } => Ok(Some(disp.link_address(lookup)?.wrapping_add(load_bias))),
            _ => Ok(None),
        }
    }
}

/// Why an argument string does not parse or resolve.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UsdtArgError {
    #[error("argument string is longer than {MAX_ARGS_LEN} bytes")]
    TooLong,
    #[error("more than {MAX_ARGS} arguments")]
    TooMany,
    #[error("argument {index} ({text:?}): {reason}")]
    Malformed {
        index: usize,
        text: String,
        reason: String,
    },
    #[error("symbol {0:?} of a USDT argument is not in the object's symbol table")]
    UnknownSymbol(String),
    #[error("a %rip-relative argument without a symbol cannot be resolved")]
    RipWithoutSymbol,
    #[error("USDT arguments of ELF machine {0} are not supported (x86-64 only)")]
    UnsupportedMachine(u16),
}

/// Parses a whole argument string (space-separated arguments).
pub fn parse_args(text: &str) -> Result<Vec<UsdtArg>, UsdtArgError> {
    if text.len() > MAX_ARGS_LEN {
        return Err(UsdtArgError::TooLong);
    }
    let mut args = Vec::new();
    for (index, word) in text.split_ascii_whitespace().enumerate() {
        if index >= MAX_ARGS {
            return Err(UsdtArgError::TooMany);
        }
        args.push(parse_arg(word).map_err(|reason| UsdtArgError::Malformed {
            index,
            text: truncate(word, 80),
            reason,
        })?);
    }
    Ok(args)
}

fn truncate(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((at, _)) => format!("{}...", s.get(..at).unwrap_or(s)),
        None => s.to_string(),
    }
}

/// Parses one `SIZE@OPERAND`.
pub fn parse_arg(text: &str) -> Result<UsdtArg, String> {
    let (size_text, operand) = text
        .split_once('@')
        .ok_or_else(|| "expected SIZE@OPERAND".to_string())?;
    let (signed, digits) = match size_text.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, size_text.strip_prefix('+').unwrap_or(size_text)),
    };
    let size = match digits {
        "1" => 1,
        "2" => 2,
        "4" => 4,
        "8" => 8,
        _ => return Err(format!("size {size_text:?} is not 1, 2, 4 or 8")),
    };
    let location = parse_operand(operand)?;
    Ok(UsdtArg {
        size,
        signed,
        location,
    })
}

fn parse_operand(op: &str) -> Result<ArgLocation, String> {
    if op.is_empty() {
        return Err("empty operand".into());
    }
    if let Some(imm) = op.strip_prefix('$') {
        let value = parse_int(imm).ok_or_else(|| format!("bad constant {imm:?}"))?;
        return Ok(ArgLocation::Constant { value });
    }
    if let Some(name) = op.strip_prefix('%') {
        if name.contains(':') {
            return Err("segment-relative operands (%fs:...) are not supported".into());
        }
        let reg = RegRef::from_name(name).ok_or_else(|| format!("unknown register %{name}"))?;
        return Ok(ArgLocation::Register { reg });
    }
    let (disp_text, inner) = match op.find('(') {
        Some(open) => {
            let inner = op
                .get(open + 1..)
                .and_then(|r| r.strip_suffix(')'))
                .ok_or_else(|| "unbalanced parentheses".to_string())?;
            (op.get(..open).unwrap_or(""), Some(inner))
        }
        None => (op, None),
    };
    let disp = parse_displacement(disp_text)?;
    let Some(inner) = inner else {
        if disp.symbol.is_none() && disp_text.is_empty() {
            return Err("empty operand".into());
        }
        return Ok(ArgLocation::Memory {
            base: None,
            index: None,
            scale: 1,
            disp,
        });
    };
    if inner.contains(['(', ')']) {
        return Err("nested parentheses".into());
    }
    let parts: Vec<&str> = inner.split(',').collect();
    let reg = |s: &str| -> Result<Option<RegRef>, String> {
        if s.is_empty() {
            return Ok(None);
        }
        let name = s
            .strip_prefix('%')
            .ok_or_else(|| format!("expected a register, found {s:?}"))?;
        let r = RegRef::from_name(name).ok_or_else(|| format!("unknown register {s}"))?;
        // Addresses are computed in 64 (or, with addr32, 32) bits.
        if r.width < 4 || r.shift != 0 {
            return Err(format!("{s} cannot address memory"));
        }
        Ok(Some(r))
    };
    let (base, index, scale) = match parts.as_slice() {
        [b] => (reg(b)?, None, 1),
        [b, i] => (reg(b)?, reg(i)?, 1),
        [b, i, s] => {
            let scale = match *s {
                "1" => 1,
                "2" => 2,
                "4" => 4,
                "8" => 8,
                _ => return Err(format!("scale {s:?} is not 1, 2, 4 or 8")),
            };
            (reg(b)?, reg(i)?, scale)
        }
        _ => return Err("too many commas".into()),
    };
    if base.is_none() && index.is_none() {
        return Err("memory operand without a register".into());
    }
    if index.is_some_and(|i| matches!(i.reg, Reg::Rip | Reg::Rsp)) {
        return Err("%rsp and %rip cannot be an index".into());
    }
    if let Some(b) = base
        && b.reg == Reg::Rip
    {
        if index.is_some() {
            return Err("%rip-relative operands take no index".into());
        }
        return Ok(ArgLocation::RipRelative { disp });
    }
    Ok(ArgLocation::Memory {
        base,
        index,
        scale,
        disp,
    })
}

/// Parses `[term (('+'|'-') term)*]`, terms being integers or at most one symbol (added,
/// not subtracted).
fn parse_displacement(text: &str) -> Result<Displacement, String> {
    let mut disp = Displacement {
        symbol: None,
        offset: 0,
    };
    if text.is_empty() {
        return Ok(disp);
    }
    let bytes = text.as_bytes();
    let mut i = 0;
    let mut negative = false;
    let mut expect_term = true;
    while i < bytes.len() {
        let c = bytes.get(i).copied().unwrap_or(0);
        if !expect_term {
            match c {
                b'+' => negative = false,
                b'-' => negative = true,
                _ => return Err(format!("unexpected {:?} in {text:?}", c as char)),
            }
            i += 1;
            expect_term = true;
            continue;
        }
        // A leading sign belongs to the first number.
        if c == b'-' && i == 0 {
            negative = true;
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && !matches!(bytes.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let term = text.get(start..i).unwrap_or("");
        if term.is_empty() {
            return Err(format!("missing term in {text:?}"));
        }
        if term.as_bytes().first().is_some_and(u8::is_ascii_digit) {
            // Parse with the sign, so that i64::MIN is reachable.
            let v = if negative {
                parse_int(&format!("-{term}"))
            } else {
                parse_int(term)
            };
            let v = v.ok_or_else(|| format!("bad number {term:?}"))?;
            disp.offset = disp
                .offset
                .checked_add(v)
                .ok_or_else(|| format!("offset overflows in {text:?}"))?;
        } else {
            if negative {
                return Err(format!("negated symbol in {text:?}"));
            }
            if disp.symbol.is_some() {
                return Err(format!("two symbols in {text:?}"));
            }
            if !is_symbol(term) {
                return Err(format!("bad symbol {term:?}"));
            }
            disp.symbol = Some(term.to_string());
        }
        negative = false;
        expect_term = false;
    }
    if expect_term {
        return Err(format!("dangling sign in {text:?}"));
    }
    Ok(disp)
}

fn is_symbol(s: &str) -> bool {
    s.len() <= MAX_SYMBOL_LEN
        && s.bytes()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_' || c == b'.')
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'$' | b'@'))
}

/// Decimal or `0x` hex, optionally negative, within i64 (hex may use the full u64
/// range, taken as two's complement, as assemblers print addresses).
fn parse_int(s: &str) -> Option<i64> {
    let (neg, digits) = match s.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, s),
    };
    let value = if let Some(hex) = digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        if hex.is_empty() || !hex.bytes().all(|c| c.is_ascii_hexdigit()) {
            return None;
        }
        u64::from_str_radix(hex, 16).ok()? as i64
    } else {
        if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        if neg {
            // i64::MIN has no positive counterpart: parse with the sign.
            return format!("-{digits}").parse().ok();
        }
        digits.parse().ok()?
    };
    if neg {
        value.checked_neg()
    } else {
        Some(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg(name: &str) -> RegRef {
        RegRef::from_name(name).unwrap_or_else(|| panic!("{name}"))
    }

    fn arg(s: &str) -> UsdtArg {
        parse_arg(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn pt_regs_layout() {
        let expected = [
            ("r15", 0),
            ("r14", 8),
            ("r13", 16),
            ("r12", 24),
            ("rbp", 32),
            ("rbx", 40),
            ("r11", 48),
            ("r10", 56),
            ("r9", 64),
            ("r8", 72),
            ("rax", 80),
            ("rcx", 88),
            ("rdx", 96),
            ("rsi", 104),
            ("rdi", 112),
            ("rip", 128),
            ("rsp", 152),
        ];
        for (name, off) in expected {
            assert_eq!(reg(name).pt_regs_offset(), off, "{name}");
        }
        assert_eq!(Reg::OrigRax.pt_regs_offset(), 120);
        assert_eq!(Reg::Cs.pt_regs_offset(), 136);
        assert_eq!(Reg::Eflags.pt_regs_offset(), 144);
        assert_eq!(Reg::Ss.pt_regs_offset(), 160);
    }

    #[test]
    fn every_register_width() {
        let cases = [
            ("rdi", Reg::Rdi, 8, 0),
            ("edi", Reg::Rdi, 4, 0),
            ("di", Reg::Rdi, 2, 0),
            ("dil", Reg::Rdi, 1, 0),
            ("r8", Reg::R8, 8, 0),
            ("r8d", Reg::R8, 4, 0),
            ("r8w", Reg::R8, 2, 0),
            ("r8b", Reg::R8, 1, 0),
            ("r15d", Reg::R15, 4, 0),
            ("ah", Reg::Rax, 1, 8),
            ("bh", Reg::Rbx, 1, 8),
            ("ch", Reg::Rcx, 1, 8),
            ("dh", Reg::Rdx, 1, 8),
            ("al", Reg::Rax, 1, 0),
            ("spl", Reg::Rsp, 1, 0),
            ("bpl", Reg::Rbp, 1, 0),
        ];
        for (name, r, width, shift) in cases {
            assert_eq!(
                reg(name),
                RegRef {
                    reg: r,
                    width,
                    shift
                },
                "{name}"
            );
        }
        for bad in ["r16", "r7", "r08", "r8x", "sih", "", "r", "xmm0"] {
            assert_eq!(RegRef::from_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn forms() {
        assert_eq!(
            arg("-4@$5"),
            UsdtArg {
                size: 4,
                signed: true,
                location: ArgLocation::Constant { value: 5 }
            }
        );
        assert_eq!(
            arg("8@$-0x10").location,
            ArgLocation::Constant { value: -16 }
        );
        assert_eq!(
            arg("-1@%ah").location,
            ArgLocation::Register { reg: reg("ah") }
        );
        assert_eq!(
            arg("8@-16(%rbp)").location,
            ArgLocation::Memory {
                base: Some(reg("rbp")),
                index: None,
                scale: 1,
                disp: Displacement {
                    symbol: None,
                    offset: -16
                }
            }
        );
        assert_eq!(
            arg("8@(%rax,%rdx,8)").location,
            ArgLocation::Memory {
                base: Some(reg("rax")),
                index: Some(reg("rdx")),
                scale: 8,
                disp: Displacement {
                    symbol: None,
                    offset: 0
                }
            }
        );
        assert_eq!(
            arg("-4@8(%rbx,%rcx,4)"),
            UsdtArg {
                size: 4,
                signed: true,
                location: ArgLocation::Memory {
                    base: Some(reg("rbx")),
                    index: Some(reg("rcx")),
                    scale: 4,
                    disp: Displacement {
                        symbol: None,
                        offset: 8
                    }
                }
            }
        );
        assert_eq!(
            arg("4@(,%rcx,4)").location,
            ArgLocation::Memory {
                base: None,
                index: Some(reg("rcx")),
                scale: 4,
                disp: Displacement {
                    symbol: None,
                    offset: 0
                }
            }
        );
        let rip = |s: &str, o: i64| ArgLocation::RipRelative {
            disp: Displacement {
                symbol: Some(s.into()),
                offset: o,
            },
        };
        assert_eq!(arg("8@sym+16(%rip)").location, rip("sym", 16));
        assert_eq!(arg("4@sym(%rip)").location, rip("sym", 0));
        assert_eq!(arg("8@16+sym(%rip)").location, rip("sym", 16));
        assert_eq!(arg("-4@counter.0-4(%rip)").location, rip("counter.0", -4));
        assert_eq!(
            arg("8@array+8").location,
            ArgLocation::Memory {
                base: None,
                index: None,
                scale: 1,
                disp: Displacement {
                    symbol: Some("array".into()),
                    offset: 8
                }
            }
        );
    }

    #[test]
    fn static_addresses() {
        let lookup = |s: &str| (s == "sym").then_some(0x4000);
        let a = arg("8@sym+16(%rip)");
        assert_eq!(a.static_address(lookup, 0x1000), Ok(Some(0x5010)));
        let a = arg("8@16+sym(%rip)");
        assert_eq!(a.static_address(lookup, 0), Ok(Some(0x4010)));
        let a = arg("8@nosuch(%rip)");
        assert_eq!(
            a.static_address(lookup, 0),
            Err(UsdtArgError::UnknownSymbol("nosuch".into()))
        );
        assert_eq!(
            arg("8@16(%rip)").static_address(lookup, 0),
            Err(UsdtArgError::RipWithoutSymbol)
        );
        assert_eq!(arg("8@-8(%rbp)").static_address(lookup, 0), Ok(None));
    }

    #[test]
    fn whole_strings() {
        let args = parse_args("-4@%esi -4@-24(%rbp) -4@%ecx 2@%ax 8@%rdx").expect("parse");
        assert_eq!(args.len(), 5);
        assert_eq!(parse_args("").expect("empty"), vec![]);
        assert_eq!(parse_args(&"4@$1 ".repeat(13)), Err(UsdtArgError::TooMany));
        assert_eq!(parse_args(&"x".repeat(5000)), Err(UsdtArgError::TooLong));
    }

    #[test]
    fn malformed_are_errors() {
        let bad = [
            "",
            "@",
            "4",
            "4@",
            "3@%eax",
            "16@%rax",
            "-@%eax",
            "4@%",
            "4@%foo",
            "4@$",
            "4@$x",
            "4@$99999999999999999999",
            "4@(%rax",
            "4@%rax)",
            "4@()",
            "4@(,)",
            "4@(%rax,%rbx,3)",
            "4@(%rax,%rbx,8,1)",
            "4@((%rax))",
            "4@8(%al)",
            "4@8(%ah)",
            "4@(%rax,%rsp)",
            "4@sym(%rip,%rax)",
            "4@a+b(%rip)",
            "4@-sym(%rip)",
            "4@1+(%rax)",
            "4@+",
            "4@1-",
            "4@%fs:0x28",
            "4@0x(%rax)",
            "4@1 2",
            "4@sym!(%rip)",
            "-4@--1(%rax)",
            "@@@",
            "8@(%rax)x",
            "8@x(%rax)(%rbx)",
        ];
        for s in bad {
            assert!(parse_arg(s).is_err(), "{s:?} parsed as {:?}", parse_arg(s));
        }
    }

    #[test]
    fn number_edges() {
        assert_eq!(parse_int("-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_int("9223372036854775808"), None);
        assert_eq!(parse_int("0xffffffffffffffff"), Some(-1));
        assert_eq!(parse_int("-0x8000000000000000"), None);
        assert!(parse_arg("8@-9223372036854775808(%rax)").is_ok());
        assert!(parse_arg("8@9223372036854775807+1(%rax)").is_err());
    }

    #[test]
    fn hostile_bytes_never_panic() {
        // A cheap deterministic fuzz: every prefix and many byte substitutions.
        let seeds = [
            "-4@8(%rbx,%rcx,4)",
            "8@sym+16(%rip)",
            "-1@%ah",
            "4@$-5",
            "8@(,%rax,8)",
        ];
        let alphabet = b"@%$(),+-0123456789abcdehilprswxz.:_ \xff";
        for seed in seeds {
            for end in 0..=seed.len() {
                let _ = parse_args(seed.get(..end).unwrap_or(""));
            }
            let bytes = seed.as_bytes();
            for i in 0..bytes.len() {
                for &c in alphabet {
                    let mut m = bytes.to_vec();
                    if let Some(b) = m.get_mut(i) {
                        *b = c;
                    }
                    let _ = parse_args(&String::from_utf8_lossy(&m));
                }
            }
        }
    }
}
