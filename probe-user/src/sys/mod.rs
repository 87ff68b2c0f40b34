//! The raw system calls, behind safe functions: each `unsafe` of probe-user that talks
//! to the kernel directly is here, with its SAFETY line, and its callers use the safe
//! wrappers (anonymous and executable memory: [`mem`]). Every file of /proc probetop
//! reads is named here too, with one parser of each format: per-process files, sysctls,
//! kallsyms ([`procfs`]) and the memory map ([`maps`]), and the cgroup v2 member lists
//! ([`cgroup`]), tracefs, mounted when absent ([`tracefs`]), and the kernel log ([`kmsg`]). A leaf: it uses nothing of the
//! crate. BPF maps and programs go through aya; the few `bpf(2)` commands aya 0.14 does
//! not have are [`bpf`]'s. The lines probetop writes to stderr go through [`stderr`],
//! which holds them while the TUI has the terminal. The one HTTP client (debuginfod,
//! `--otlp`) and the roots its https trusts are [`http`]'s.

pub(crate) mod bpf;
pub(crate) mod cgroup;
pub(crate) mod clock;
pub(crate) mod cpu;
pub(crate) mod files;
pub(crate) mod http;
pub(crate) mod kmsg;
pub(crate) mod limits;
pub(crate) mod maps;
pub(crate) mod mem;
pub(crate) mod perf;
pub(crate) mod process;
pub(crate) mod procfs;
pub(crate) mod stderr;
pub(crate) mod tracefs;

pub(crate) use stderr::say;
