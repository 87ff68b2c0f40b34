//! Files the standard library cannot make, and files read without trusting them.

use std::{
    ffi::CString,
    fs,
    io::{self, Read as _},
    os::unix::fs::{FileTypeExt as _, OpenOptionsExt as _},
    path::Path,
};

/// What [`read_bounded`] accepts besides a regular file.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Accept {
    /// A pipe or FIFO, read until its writer closes it (`-f <(...)`): only for a path
    /// the user named, who then holds the other end.
    pub pipes: bool,
    /// A symbolic link as the last component (refused with `O_NOFOLLOW` otherwise: a
    /// file probetop writes itself is never one).
    pub links: bool,
}

/// Why [`read_bounded`] read nothing.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BoundedReadError {
    #[error("{0}")]
    Io(#[from] io::Error),
    /// Not a regular file (nor a pipe where pipes are accepted): what it is.
    #[error("{0}, not a regular file")]
    NotRegular(&'static str),
    #[error("more than {max} bytes")]
    TooBig { max: u64 },
}

/// A file's bytes, at most `max` of them, read without trusting what the path names: the
/// open never blocks (`O_NONBLOCK`: a FIFO with no writer would wait forever), the kind
/// is checked on the open descriptor (`fstat`, so a swap after a check cannot slip a
/// device in), and no more than `max + 1` bytes are ever read (`/dev/zero`, a sparse
/// file of gigabytes).
pub(crate) fn read_bounded(
    path: &Path,
    max: u64,
    accept: Accept,
) -> Result<Vec<u8>, BoundedReadError> {
    let mut flags = libc::O_NONBLOCK | libc::O_CLOEXEC;
    if !accept.links {
        flags |= libc::O_NOFOLLOW;
    }
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) if !accept.links => BoundedReadError::NotRegular("a symbolic link"),
            _ => BoundedReadError::Io(e),
        })?;
    let meta = file.metadata()?;
    let kind = meta.file_type();
    if kind.is_fifo() && accept.pipes {
        // The user's pipe: opened again to wait for its writer (a FIFO whose writer
        // comes later reads as empty until then), through the descriptor so that it
        // is the same FIFO.
        use std::os::fd::AsRawFd as _;
        let again = fs::File::open(format!("/proc/self/fd/{}", file.as_raw_fd()))?;
        return read_at_most(again, max);
    } else if !kind.is_file() {
        return Err(BoundedReadError::NotRegular(if kind.is_dir() {
            "a directory"
        } else if kind.is_char_device() || kind.is_block_device() {
            "a device"
        } else if kind.is_fifo() {
            "a FIFO"
        } else if kind.is_socket() {
            "a socket"
        } else {
            "a special file"
        }));
    } else if meta.len() > max {
        return Err(BoundedReadError::TooBig { max });
    }
    read_at_most(file, max)
}

/// At most `max` bytes of `file`, read to its end.
fn read_at_most(file: fs::File, max: u64) -> Result<Vec<u8>, BoundedReadError> {
    let mut bytes = Vec::new();
    file.take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(BoundedReadError::TooBig { max });
    }
    Ok(bytes)
}

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

    const STRICT: Accept = Accept {
        pipes: false,
        links: false,
    };

    #[test]
    fn bounded_reads_refuse_what_is_not_a_small_regular_file() {
        let dir = std::env::temp_dir().join(format!("probetop-bounded-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("dir");
        let small = dir.join("small");
        fs::write(&small, b"12345").expect("write");
        assert_eq!(read_bounded(&small, 5, STRICT).expect("fits"), b"12345");
        let e = read_bounded(&small, 4, STRICT).expect_err("too big");
        assert_eq!(e.to_string(), "more than 4 bytes");
        // A sparse file of 4 GiB is refused by its size, not read.
        let sparse = dir.join("sparse");
        fs::File::create(&sparse)
            .and_then(|f| f.set_len(4 << 30))
            .expect("sparse");
        assert!(matches!(
            read_bounded(&sparse, 1 << 20, STRICT),
            Err(BoundedReadError::TooBig { .. })
        ));
        // A FIFO with no writer: refused at once, not waited on.
        let fifo = dir.join("fifo");
        mkfifo(&fifo, 0o600).expect("mkfifo");
        let e = read_bounded(&fifo, 100, STRICT).expect_err("a FIFO");
        assert_eq!(e.to_string(), "a FIFO, not a regular file");
        // A link to a device: refused as a link, or as a device where links are followed.
        let zero = dir.join("zero");
        std::os::unix::fs::symlink("/dev/zero", &zero).expect("symlink");
        let e = read_bounded(&zero, 100, STRICT).expect_err("a link");
        assert_eq!(e.to_string(), "a symbolic link, not a regular file");
        let follow = Accept {
            pipes: true,
            links: true,
        };
        let e = read_bounded(&zero, 100, follow).expect_err("a device");
        assert_eq!(e.to_string(), "a device, not a regular file");
        assert_eq!(
            read_bounded(&dir, 100, STRICT)
                .expect_err("a dir")
                .to_string(),
            "a directory, not a regular file"
        );
        let _ = fs::remove_dir_all(&dir);
    }
}
