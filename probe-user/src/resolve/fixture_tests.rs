//! Resolution checked against real fixtures (fixtures/build, `cargo xtask fixtures`).
