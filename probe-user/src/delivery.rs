//! How a probe's hits reach user space, as user space speaks of it. The kernel's
//! `CONFIG` map holds it as a `u32` (`probe_common::mode`, shared with the eBPF
//! programs); [`DeliveryMode::raw`], [`DeliveryMode::of_config`] and [`closed`] are the
//! only conversions, so everything above compares an enum the compiler checks for
//! exhaustiveness instead of numbers.

use probe_common::{ProbeConfig, mode};

/// One probe's delivery mode (see docs/architecture.md, "Kernel side").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum DeliveryMode {
    /// Every hit is a ring buffer record.
    #[default]
    Ring,
    /// Every hit is counted in the kernel; one in `sample_every` is a record.
    Sample,
    /// Every hit is counted in the kernel; the timed ones land in an in-kernel
    /// histogram. No records.
    KernelHistogram,
}

impl DeliveryMode {
    /// The value the `CONFIG` map holds for this mode.
    pub const fn raw(self) -> u32 {
        match self {
            DeliveryMode::Ring => mode::RING,
            DeliveryMode::Sample => mode::SAMPLE,
            DeliveryMode::KernelHistogram => mode::KERNEL_HISTOGRAM,
        }
    }

    /// The mode a `CONFIG` entry holds. probetop writes no other values while the window
    /// is open (outside it, [`closed`], never read back); any other value reads as
    /// `Ring`, what the eBPF programs do with it too.
    pub const fn of_config(config: &ProbeConfig) -> Self {
        match config.mode {
            mode::SAMPLE => DeliveryMode::Sample,
            mode::KERNEL_HISTOGRAM => DeliveryMode::KernelHistogram,
            _ => DeliveryMode::Ring,
        }
    }

    /// Whether hits are counted in the kernel (every hit, records or not).
    pub const fn counts_in_kernel(self) -> bool {
        matches!(self, DeliveryMode::Sample | DeliveryMode::KernelHistogram)
    }

    /// The name exports use.
    pub const fn as_str(self) -> &'static str {
        match self {
            DeliveryMode::Ring => "ring",
            DeliveryMode::Sample => "sample",
            DeliveryMode::KernelHistogram => "kernel",
        }
    }
}

/// `config` outside the window: its probe's hits count nowhere (no record, count or gap)
/// until a mode is written again. Probes attach so, and the window opens for all of them
/// at once; the cut closes it so. Records, kernel counts and gaps then cover one set of
/// hits, where reading the counts before or after taking the time would let hits in
/// between count in one and not the other.
pub(crate) const fn closed(config: ProbeConfig) -> ProbeConfig {
    ProbeConfig {
        mode: mode::CLOSED,
        ..config
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_the_config_map_value() {
        for m in [
            DeliveryMode::Ring,
            DeliveryMode::Sample,
            DeliveryMode::KernelHistogram,
        ] {
            let config = ProbeConfig {
                mode: m.raw(),
                ..Default::default()
            };
            assert_eq!(DeliveryMode::of_config(&config), m);
        }
        let unknown = ProbeConfig {
            mode: 77,
            ..Default::default()
        };
        assert_eq!(DeliveryMode::of_config(&unknown), DeliveryMode::Ring);
    }
}
