//! The `probetop` binary: everything is in the library's [`probe_user::main`], so the
//! crate's items are private to it and the compiler sees what is unused.

fn main() -> std::process::ExitCode {
    probe_user::main()
}
