//! Counts per thread (and per process) id, and which hits they cover.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Hits per thread id. Updated on every record, so hashed with [`TidHasher`]: the default
/// SipHash cost a third of recording a hit.
pub(crate) type ThreadCounts = HashMap<u32, u64, BuildHasherDefault<TidHasher>>;

/// A multiplicative hash of a thread id: thread ids are the kernel's, not chosen to
/// collide, so the flooding resistance of SipHash buys nothing here.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct TidHasher(u64);

impl Hasher for TidHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.0 = (self.0 ^ u64::from(n)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Which of a probe's hits its per-thread counts hold: they are counted from the
/// records probetop receives, so hits that reach it only as a kernel count are in none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThreadsCover {
    /// Every hit.
    EveryHit,
    /// Every hit but the dropped ones (a full ring buffer).
    NotDropped,
    /// The streamed sample only (`--mode sample`: one hit in --sample-every).
    Sampled,
    /// The hits before the probe was switched to the in-kernel histogram (`--mode auto`).
    BeforeKernelMode,
    /// None: the probe was aggregated in the kernel from the start (`--mode kernel`).
    NoneInKernelMode,
}

impl ThreadsCover {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::EveryHit => "every-hit",
            Self::NotDropped => "not-dropped",
            Self::Sampled => "sampled",
            Self::BeforeKernelMode => "before-kernel-mode",
            Self::NoneInKernelMode => "none-in-kernel-mode",
        }
    }
}
