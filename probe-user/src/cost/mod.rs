//! The whole cost of a hit: what a probe costs the traced process, per probe, live.
//!
//! The handler time probetop has always shown is only the part inside its own BPF
//! program. A hit also costs the trap into the kernel, the uprobe lookup, emulating or
//! single-stepping the probed instruction, and the way back: several times more. This
//! module puts the pieces together, and uses only the leaf modules (spec, target, the
//! shared histogram), so every stage may use it:
//!
//! - [`classes`]: the cost class of each probe site, from the probed instruction;
//! - [`dispatch`]: kernel dispatch time as measured (`attach::dispatch` loads the
//!   fentry/fexit programs that measure it);
//! - [`calibration`]: per-class costs measured on this machine by `probetop calibrate`
//!   (the top-level `calibrate` module), cached;
//! - [`estimate`]: the whole cost per hit and the CPU share, per probe;
//! - [`bpf_stats`]: other BPF programs on the target's probes, and what they cost.
//!
//! Joining these to resolved points is `resolve::costs`; reporting them,
//! `present::cost_report`.

pub mod assume;
pub mod bpf_stats;
pub mod budget;
pub mod calibration;
pub mod classes;
pub mod dispatch;
pub mod estimate;
pub mod gap;
pub mod insitu;
pub mod others;
pub mod sites;
pub mod stats;
pub mod work;

pub use estimate::{ProbeCost, cpu_share};

use classes::CostClass;

/// A cost tag for a probe's name on screen: only the classes worth a second look.
pub fn label_tag(cost: &ProbeCost) -> Option<&'static str> {
    match cost.site.as_ref()?.class {
        CostClass::SingleStepped => Some("[sstep]"),
        CostClass::Refused => Some("[refused]"),
        CostClass::Optimized => Some("[opt]"),
        CostClass::Unsafe => Some("[UNSAFE]"),
        _ => None,
    }
}
