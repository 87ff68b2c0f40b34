//! What probetop itself needs from the kernel before it touches the target.

use crate::sys;

const CAP_SYS_PTRACE: u32 = 19;
const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

#[derive(Debug, thiserror::Error)]
pub(crate) enum PrivilegeError {
    #[error(
        "probetop needs root, or the capabilities CAP_BPF and CAP_PERFMON, to load eBPF programs and open uprobes: run it with sudo"
    )]
    Missing,
    #[error(
        "probetop refuses to run setuid or setgid: it loads kernel programs on behalf of whoever runs it; run it as root instead"
    )]
    Setuid,
    #[error("cannot read /proc/self/status to check capabilities: {0}")]
    Unreadable(std::io::Error),
}

/// Fails when run setuid/setgid, or unless the effective capabilities allow loading BPF
/// and opening uprobes.
pub(crate) fn check() -> Result<(), PrivilegeError> {
    if sys::process::runs_setid() {
        return Err(PrivilegeError::Setuid);
    }
    let status = sys::procfs::own_status().map_err(PrivilegeError::Unreadable)?;
    let effective = effective_caps(&status).unwrap_or(0);
    if has_needed(effective) {
        Ok(())
    } else {
        Err(PrivilegeError::Missing)
    }
}

/// What to do when the kernel refuses to show another process's /proc files: the
/// advice depends on who probetop runs as, since "run as root" is no help to root.
pub(crate) fn denied_advice() -> &'static str {
    if !sys::process::is_root() {
        return "; run probetop as root";
    }
    let effective = sys::procfs::own_status()
        .ok()
        .and_then(|status| effective_caps(&status))
        .unwrap_or(0);
    denied_advice_for_root(effective)
}

fn denied_advice_for_root(effective: u64) -> &'static str {
    if effective & (1 << CAP_SYS_PTRACE) == 0 {
        "; probetop runs as root but without CAP_SYS_PTRACE, which reading another user's process needs: run it with that capability (a container or capsh may have dropped it)"
    } else {
        "; the kernel refuses it even to root: the process may be in another user namespace (a container) or a security module (Yama, SELinux, AppArmor) may deny it; run probetop in the process's own namespace"
    }
}

fn effective_caps(status: &str) -> Option<u64> {
    u64::from_str_radix(sys::procfs::status_field(status, "CapEff:")?, 16).ok()
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

    #[test]
    fn root_is_never_told_to_run_as_root() {
        for caps in [0, 1 << CAP_SYS_PTRACE, 0x1ff_ffff_ffff] {
            let advice = denied_advice_for_root(caps);
            assert!(!advice.contains("as root;"), "{advice}");
            assert!(!advice.ends_with("run probetop as root"), "{advice}");
        }
        assert!(denied_advice_for_root(0).contains("CAP_SYS_PTRACE"));
    }
}
