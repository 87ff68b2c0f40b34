//! Files the standard library cannot make.

use std::{ffi::CString, io, path::Path};

/// Makes a FIFO at `path` with permission bits `mode`.
pub fn mkfifo(path: &Path, mode: u32) -> io::Result<()> {
    let c_path = CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // SAFETY: mkfifo reads a NUL-terminated path, which `c_path` holds for the call.
    if unsafe { libc::mkfifo(c_path.as_ptr(), mode as libc::mode_t) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileTypeExt as _;

    #[test]
    fn a_fifo_is_made() {
        let path = std::env::temp_dir().join(format!("probetop-fifo-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        mkfifo(&path, 0o600).expect("mkfifo");
        let kind = std::fs::symlink_metadata(&path).expect("stat").file_type();
        let _ = std::fs::remove_file(&path);
        assert!(kind.is_fifo());
        assert!(mkfifo(Path::new("/nonexistent-dir/x"), 0o600).is_err());
    }
}
