//! What probetop itself needs from the kernel before it touches the target.

use std::fs;

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

#[derive(Debug, thiserror::Error)]
pub enum PrivilegeError {
    #[error(
        "probetop needs root, or the capabilities CAP_BPF and CAP_PERFMON, to load eBPF programs and open uprobes: run it with sudo"
    )]
    Missing,
    #[error(
        "probetop refuses to run setuid or setgid: it loads kernel programs on behalf of whoever runs it; run it as root instead"
    )]
    Setuid,
    #[error("cannot read /proc/self/status to check capabilities: {0}")]
    Unreadable(#[from] std::io::Error),
}

/// Fails when run setuid/setgid, or unless the effective capabilities allow loading BPF
/// and opening uprobes.
pub fn check() -> Result<(), PrivilegeError> {
    // SAFETY: these getters have no preconditions and cannot fail.
    let (uid, euid, gid, egid) = unsafe {
        (
            libc::getuid(),
            libc::geteuid(),
            libc::getgid(),
            libc::getegid(),
        )
    };
    if uid != euid || gid != egid {
        return Err(PrivilegeError::Setuid);
    }
    let status = fs::read_to_string("/proc/self/status")?;
    let effective = effective_caps(&status).unwrap_or(0);
    if has_needed(effective) {
        Ok(())
    } else {
        Err(PrivilegeError::Missing)
    }
}

fn effective_caps(status: &str) -> Option<u64> {
    let hex = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
    u64::from_str_radix(hex.trim(), 16).ok()
}

fn has_needed(caps: u64) -> bool {
    let has = |cap: u32| caps & (1 << cap) != 0;
    has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capability_sets() {
        let status = "Name:\tx\nCapEff:\t000001ffffffffff\n";
        assert_eq!(effective_caps(status), Some(0x1ff_ffff_ffff));
        assert!(has_needed(0x1ff_ffff_ffff));
        assert!(has_needed(1 << CAP_SYS_ADMIN));
        assert!(has_needed((1 << CAP_BPF) | (1 << CAP_PERFMON)));
        assert!(!has_needed(1 << CAP_BPF));
        assert!(!has_needed(0));
    }
}
