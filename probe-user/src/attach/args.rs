//! Argument capture: what `--args N` reads at each hit, lowered to the fetch recipes the
//! eBPF program follows ([`ArgsConfig`]).
//!
//! USDT probes say where their arguments are in their notes; function entries follow
//! the x86-64 System V calling convention; function returns give the return value.

use probe_common::{ArgSpec, ArgsConfig, MAX_ARGS, arg_kind};

use crate::resolve::ProbePoint;
use crate::resolve::usdt_args::{ArgLocation, Reg, RegRef, UsdtArg, UsdtArgError};
use crate::spec::{KeyFormat, KeySpec, ProbeKind};

/// Integer argument registers of the System V x86-64 ABI, in order.
const SYSV_ARGS: [Reg; 6] = [Reg::Rdi, Reg::Rsi, Reg::Rdx, Reg::Rcx, Reg::R8, Reg::R9];

#[derive(Debug, thiserror::Error)]
pub enum ArgsError {
    #[error("its USDT arguments {raw:?} cannot be read: {source}")]
    Usdt { raw: String, source: UsdtArgError },
    #[error("argument {index} ({form}) has a form probetop cannot read yet")]
    Unsupported { index: usize, form: String },
    #[error("argument {index} is %rip-relative, but the object's load address is unknown")]
    NoLoadBias { index: usize },
    #[error("it has no argument {index} to key by ({has} argument{} in registers or notes)", if *.has == 1 { "" } else { "s" })]
    NoSuchArg { index: usize, has: usize },
    #[error("a key and --args take more than 12 argument slots: ask for fewer --args")]
    TooManySlots,
}

/// The recipes to capture up to `count` argument values of `point`.
pub fn args_config(point: &ProbePoint, count: usize) -> Result<ArgsConfig, ArgsError> {
    let count = count.min(MAX_ARGS);
    let mut config = ArgsConfig::default();
    match (point.kind, &point.usdt) {
        (ProbeKind::Usdt, Some(site)) => {
            let args = site.args.as_ref().map_err(|source| ArgsError::Usdt {
                raw: site.args_raw.clone(),
                source: source.clone(),
            })?;
            for (index, arg) in args.iter().take(count).enumerate() {
                let absolute = match point.load_bias {
                    Some(bias) => {
                        site.arg_static_address(index, bias)
                            .map_err(|source| ArgsError::Usdt {
                                raw: site.args_raw.clone(),
                                source,
                            })?
                    }
                    None => None,
                };
                config.args[index] = lower_usdt(index, arg, absolute, point.load_bias)?;
                config.count += 1;
            }
        }
        (ProbeKind::Uretprobe, _) => {
            if count > 0 {
                config.args[0] = register(RegRef::full(Reg::Rax), 8, false);
                config.count = 1;
            }
        }
        _ => {
            for (index, reg) in SYSV_ARGS.iter().take(count).enumerate() {
                config.args[index] = register(RegRef::full(*reg), 8, false);
                config.count += 1;
            }
        }
    }
    Ok(config)
}

/// The stack pointer alone: what a latency pair's probes capture.
pub(crate) fn stack_pointer() -> ArgsConfig {
    let mut config = ArgsConfig::default();
    config.args[0] = register(RegRef::full(Reg::Rsp), 8, false);
    config.count = 1;
    config
}

/// Appends the slots of `key` (of `point`) to `config`: the argument's value, or for a
/// string the first bytes it points at, 8 to a slot. Returns the first slot's index.
pub(crate) fn append_key(
    config: &mut ArgsConfig,
    point: &ProbePoint,
    key: &KeySpec,
) -> Result<usize, ArgsError> {
    let index = usize::from(key.arg);
    let all = args_config(point, index + 1)?;
    if (all.count as usize) <= index {
        return Err(ArgsError::NoSuchArg {
            index,
            has: all.count as usize,
        });
    }
    let spec = all.args[index];
    let at = config.count as usize;
    let slots = key.slots();
    if at + slots > MAX_ARGS {
        return Err(ArgsError::TooManySlots);
    }
    for slot in 0..slots {
        config.args[at + slot] = match key.format {
            KeyFormat::Str => ArgSpec {
                deref: 1 + 8 * slot as u32,
                ..spec
            },
            _ => spec,
        };
    }
    config.count += slots as u32;
    Ok(at)
}

fn register(reg: RegRef, size: u8, signed: bool) -> ArgSpec {
    ArgSpec {
        kind: arg_kind::REG,
        reg_off: u32::from(reg.pt_regs_offset()),
        reg_shift: u32::from(reg.shift),
        bitshift: 64 - 8 * u32::from(size),
        signed: u32::from(signed),
        ..Default::default()
    }
}

/// One USDT argument as a fetch recipe; `absolute` is its runtime address when it is a
/// memory operand that depends on no register.
fn lower_usdt(
    index: usize,
    arg: &UsdtArg,
    absolute: Option<u64>,
    load_bias: Option<u64>,
) -> Result<ArgSpec, ArgsError> {
    let sized = |spec: ArgSpec| ArgSpec {
        bitshift: 64 - 8 * u32::from(arg.size),
        signed: u32::from(arg.signed),
        ..spec
    };
    let spec = match &arg.location {
        ArgLocation::Constant { value } => ArgSpec {
            kind: arg_kind::CONST,
            offset: *value as u64,
            ..Default::default()
        },
        ArgLocation::Register { reg } => register(*reg, arg.size, arg.signed),
        ArgLocation::RipRelative { .. }
        | ArgLocation::Memory {
            base: None,
            index: None,
            ..
        } => {
            let address = absolute.ok_or(ArgsError::NoLoadBias { index })?;
            ArgSpec {
                kind: arg_kind::MEM_ABS,
                offset: address,
                ..Default::default()
            }
        }
        ArgLocation::Memory {
            base: Some(base),
            index: reg_index,
            scale,
            disp,
        } => {
            // A displacement naming a symbol moves with the object's load address.
            let offset = match &disp.symbol {
                Some(_) => {
                    let bias = load_bias.ok_or(ArgsError::NoLoadBias { index })?;
                    (disp.offset as u64).wrapping_add(bias)
                }
                None => disp.offset as u64,
            };
            match reg_index {
                None => ArgSpec {
                    kind: arg_kind::REG_DEREF,
                    reg_off: u32::from(base.pt_regs_offset()),
                    offset,
                    ..Default::default()
                },
                Some(reg_index) => ArgSpec {
                    kind: arg_kind::REG_INDEXED,
                    reg_off: u32::from(base.pt_regs_offset()),
                    index_off: u32::from(reg_index.pt_regs_offset()),
                    scale: u32::from(*scale),
                    offset,
                    ..Default::default()
                },
            }
        }
        ArgLocation::Memory { base: None, .. } => {
            return Err(ArgsError::Unsupported {
                index,
                form: "an index register without a base".into(),
            });
        }
    };
    Ok(match arg.location {
        ArgLocation::Register { .. } => spec,
        _ => sized(spec),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resolve::usdt_args::parse_args;

    fn lowered(text: &str) -> Vec<ArgSpec> {
        parse_args(text)
            .expect("parses")
            .iter()
            .enumerate()
            .map(|(i, a)| lower_usdt(i, a, None, Some(0)).expect("lowers"))
            .collect()
    }

    #[test]
    fn every_register_form() {
        let [rdi, ah, r8w] = lowered("-4@%edi 1@%ah 2@%r8w")[..] else {
            panic!("three args")
        };
        assert_eq!(
            (rdi.kind, rdi.reg_off, rdi.bitshift, rdi.signed),
            (arg_kind::REG, 112, 32, 1)
        );
        assert_eq!((ah.reg_off, ah.reg_shift, ah.bitshift), (80, 8, 56));
        assert_eq!((r8w.reg_off, r8w.bitshift, r8w.signed), (72, 48, 0));
    }

    #[test]
    fn constants_and_memory() {
        let [c, deref, indexed] = lowered("-4@$-5 8@-16(%rbp) 8@8(%rax,%rdx,8)")[..] else {
            panic!("three args")
        };
        assert_eq!(
            (c.kind, c.offset as i64, c.signed),
            (arg_kind::CONST, -5, 1)
        );
        assert_eq!(
            (deref.kind, deref.reg_off, deref.offset as i64),
            (arg_kind::REG_DEREF, 32, -16)
        );
        assert_eq!(
            (
                indexed.kind,
                indexed.reg_off,
                indexed.index_off,
                indexed.scale,
                indexed.offset
            ),
            (arg_kind::REG_INDEXED, 80, 96, 8, 8)
        );
    }

    #[test]
    fn rip_relative_needs_its_runtime_address() {
        let args = parse_args("8@counter+16(%rip)").expect("parses");
        let spec = lower_usdt(0, &args[0], Some(0x5555_0000_1010), Some(0x5555_0000_0000))
            .expect("lowers");
        assert_eq!(
            (spec.kind, spec.offset),
            (arg_kind::MEM_ABS, 0x5555_0000_1010)
        );
        assert!(matches!(
            lower_usdt(0, &args[0], None, None),
            Err(ArgsError::NoLoadBias { index: 0 })
        ));
    }
}
