//! Facts about a probed instruction, read from the file: its cost class (how the
//! kernel handles a uprobe there), its decoding, and the later sites a function's
//! code offers. A leaf: `resolve`, `probetop list` and `price` use it.

pub(crate) mod classes;
pub(crate) mod sites;
