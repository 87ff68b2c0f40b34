//! The kernel log (`/dev/kmsg`), read as root: some refusals are explained only there
//! (the uprobe layer's `ref_ctr_offset mismatch` names the semaphore offset another
//! probe holds on a site, which no other interface returns).

use std::{io, io::Read as _, os::unix::fs::OpenOptionsExt as _};

/// The messages still in the kernel's log buffer, oldest first (each record's first
/// line, without its `prio,seq,time,flags;` prefix). Never blocks.
pub(crate) fn messages() -> io::Result<Vec<String>> {
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open("/dev/kmsg")?;
    let mut out = Vec::new();
    // One record per read; a record is at most ~8 KiB (PRINTK_MESSAGE_MAX plus prefix).
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let text = String::from_utf8_lossy(&buf[..n]);
                let first = text.lines().next().unwrap_or("");
                if let Some((_, message)) = first.split_once(';') {
                    out.push(message.to_string());
                }
            }
            // Records overwritten while reading: the read goes on from the next kept one.
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}
