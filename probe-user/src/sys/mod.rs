//! The raw system calls and `/proc` readers, behind safe functions: every `unsafe` of
//! probe-user that talks to the kernel directly is here, each with its SAFETY line.
//! A leaf: it uses nothing of the crate. BPF maps and programs go through aya; the few
//! `bpf(2)` commands aya 0.14 does not have are [`bpf`]'s.

pub mod process;
