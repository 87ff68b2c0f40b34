//! Where exports go on disk: checked before anything is attached, written whole or not
//! at all.
//!
//! [`check`] runs before the probes are attached, so a missing or read-only directory,
//! a symbolic link or a FIFO is one line at the start rather than a failure after the
//! whole run. [`write()`] writes every file to a temporary file beside it and renames it
//! into place: a full disk leaves the previous file (or none), never a truncated one,
//! and a FIFO or device at the path is never opened (an open of a FIFO with no reader
//! would block for good). Only regular files are written: `/dev/stdout` and other
//! devices, FIFOs and sockets are refused (the summary already goes to stdout).

use std::{
    fs, io,
    io::Write as _,
    os::unix::fs::{FileTypeExt as _, OpenOptionsExt as _, PermissionsExt as _},
    path::{Path, PathBuf},
    sync::atomic::{AtomicU32, Ordering},
};

use super::{ExportError, Report, render};

/// Symbolic links followed at most (as the kernel's own limit, ELOOP beyond).
const MAX_LINKS: usize = 40;

/// Fails, without writing anything, when `path` cannot take an export: its directory is
/// missing, not a directory or not writable (a temporary file is created there and
/// removed), it is a symbolic link (unless `follow_links`), or it exists and is not a
/// regular file.
pub(crate) fn check(path: &Path, follow_links: bool) -> Result<(), ExportError> {
    let destination = destination(path, follow_links)?;
    let dir = directory_of(&destination);
    match fs::metadata(&dir) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => {
            return Err(ExportError::NoDirectory {
                path: path.to_path_buf(),
                dir,
                why: "is not a directory",
            });
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(ExportError::NoDirectory {
                path: path.to_path_buf(),
                dir,
                why: "does not exist",
            });
        }
        Err(error) => {
            return Err(ExportError::Unwritable {
                path: path.to_path_buf(),
                dir,
                error,
            });
        }
    }
    let (file, temp) = create_temp(&destination).map_err(|error| ExportError::Unwritable {
        path: path.to_path_buf(),
        dir: dir.clone(),
        error,
    })?;
    drop(file);
    let _ = fs::remove_file(&temp);
    Ok(())
}

/// Renders `report` and writes its file(s), named as [`render`] names them; a file that
/// cannot be written is left as it was.
///
/// probetop runs as root, so unless `follow_links` it never writes through a symbolic
/// link: a link planted where a report will go cannot redirect the write onto another
/// file. With it, the file the link points to is replaced and the link kept.
pub(crate) fn write(
    report: &Report,
    path: &Path,
    follow_links: bool,
) -> Result<Vec<PathBuf>, ExportError> {
    let files = render(report, path)?;
    let mut written = Vec::with_capacity(files.len());
    for file in files {
        write_file(&file.path, &file.bytes, follow_links)?;
        written.push(file.path);
    }
    Ok(written)
}

/// Writes `bytes` to a temporary file beside `path`'s destination, flushes it to disk
/// and renames it over the destination.
pub(crate) fn write_file(path: &Path, bytes: &[u8], follow_links: bool) -> Result<(), ExportError> {
    let destination = destination(path, follow_links)?;
    let failed = |error: io::Error| ExportError::Write {
        path: path.to_path_buf(),
        error,
    };
    let (mut file, temp) = create_temp(&destination).map_err(failed)?;
    // An existing file keeps its permissions, as it did when it was overwritten in place.
    if let Ok(meta) = fs::metadata(&destination) {
        let _ = file.set_permissions(fs::Permissions::from_mode(meta.permissions().mode()));
    }
    let written = file
        .write_all(bytes)
        .and_then(|()| file.sync_all())
        .and_then(|()| fs::rename(&temp, &destination));
    if let Err(error) = written {
        let _ = fs::remove_file(&temp);
        return Err(failed(error));
    }
    Ok(())
}

/// The file an export to `path` replaces: `path` itself, or with `follow_links` what its
/// chain of symbolic links ends on. Refused: a link without `follow_links`, and anything
/// that exists and is not a regular file.
fn destination(path: &Path, follow_links: bool) -> Result<PathBuf, ExportError> {
    let mut current = path.to_path_buf();
    for _ in 0..MAX_LINKS {
        let meta = match fs::symlink_metadata(&current) {
            Ok(meta) => meta,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(current),
            // A missing or unreadable directory is said by `check` or the write.
            Err(_) => return Ok(current),
        };
        let kind = meta.file_type();
        if kind.is_symlink() {
            if !follow_links {
                return Err(ExportError::SymlinkRefused(path.to_path_buf()));
            }
            let target = fs::read_link(&current).map_err(|error| ExportError::Write {
                path: path.to_path_buf(),
                error,
            })?;
            current = directory_of(&current).join(target);
            continue;
        }
        if !kind.is_file() {
            return Err(ExportError::NotRegular {
                path: path.to_path_buf(),
                kind: kind_name(kind),
            });
        }
        return Ok(current);
    }
    Err(ExportError::Write {
        path: path.to_path_buf(),
        error: io::Error::from_raw_os_error(libc::ELOOP),
    })
}

fn kind_name(kind: fs::FileType) -> &'static str {
    if kind.is_dir() {
        "directory"
    } else if kind.is_fifo() {
        "FIFO"
    } else if kind.is_socket() {
        "socket"
    } else if kind.is_char_device() {
        "character device"
    } else if kind.is_block_device() {
        "block device"
    } else {
        "special file"
    }
}

/// The directory a file is in (`.` for a bare name).
fn directory_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// A new, empty file beside `destination` that nothing else can have opened:
/// `.NAME.probetop-PID-N.tmp`, created exclusively and never through a link.
fn create_temp(destination: &Path) -> io::Result<(fs::File, PathBuf)> {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let name = destination
        .file_name()
        .unwrap_or_default()
        .to_string_lossy();
    let dir = directory_of(destination);
    loop {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let temp = dir.join(format!(".{name}.probetop-{}-{n}.tmp", std::process::id()));
        let created = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&temp);
        match created {
            Ok(file) => return Ok((file, temp)),
            // Left by a probetop killed while writing, with this pid: take the next.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && n < 1000 => continue,
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::sample_report;
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "probetop-export-file-{name}-{}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("temp dir");
        dir
    }

    /// Files left in `dir` besides `expected`.
    fn leftovers(dir: &Path, expected: &[&str]) -> Vec<String> {
        fs::read_dir(dir)
            .expect("read dir")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| !expected.contains(&name.as_str()))
            .collect()
    }

    #[test]
    fn symlinks_are_not_followed_unless_forced() {
        let dir = temp_dir("links");
        let victim = dir.join("victim.txt");
        fs::write(&victim, "keep me").expect("victim");
        let link = dir.join("run.json");
        std::os::unix::fs::symlink(&victim, &link).expect("symlink");

        let refused = write(&sample_report(), &link, false).expect_err("must refuse");
        assert!(
            matches!(refused, ExportError::SymlinkRefused(_)),
            "{refused}"
        );
        assert!(matches!(
            check(&link, false),
            Err(ExportError::SymlinkRefused(_))
        ));
        assert_eq!(fs::read_to_string(&victim).expect("read"), "keep me");

        check(&link, true).expect("forced");
        write(&sample_report(), &link, true).expect("forced");
        assert!(
            fs::read_to_string(&victim)
                .expect("read")
                .contains("probetop")
        );
        assert!(fs::symlink_metadata(&link).expect("link").is_symlink());

        let plain = dir.join("plain.json");
        write(&sample_report(), &plain, false).expect("regular file");
        write(&sample_report(), &plain, false).expect("overwrite a regular file");
        assert_eq!(
            leftovers(&dir, &["victim.txt", "run.json", "plain.json"]),
            Vec::<String>::new()
        );
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_fifo_or_device_is_refused_without_being_opened() {
        let dir = temp_dir("fifo");
        let fifo = dir.join("r.json");
        crate::sys::files::mkfifo(&fifo, 0o644).expect("mkfifo");
        // An open would block here for good: no reader ever comes.
        let refused = check(&fifo, false).expect_err("a FIFO");
        assert_eq!(
            refused.to_string(),
            format!(
                "{} is a FIFO: probetop writes exports to regular files only; choose another path",
                fifo.display()
            )
        );
        assert!(matches!(
            write(&sample_report(), &fifo, true),
            Err(ExportError::NotRegular { kind: "FIFO", .. })
        ));
        assert!(matches!(
            check(Path::new("/dev/null"), false),
            Err(ExportError::NotRegular {
                kind: "character device",
                ..
            })
        ));
        // /dev/stdout is a link: refused as one, and as what it ends on with --force.
        assert!(check(Path::new("/dev/stdout"), false).is_err());
        assert!(check(&dir, false).is_err());
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_missing_directory_is_named() {
        let dir = temp_dir("missing");
        let path = dir.join("nowhere/r.json");
        let refused = check(&path, false).expect_err("missing directory");
        assert_eq!(
            refused.to_string(),
            format!(
                "cannot write {}: directory {} does not exist",
                path.display(),
                dir.join("nowhere").display()
            )
        );
        let file = dir.join("file");
        fs::write(&file, "").expect("file");
        let refused = check(&file.join("r.json"), false).expect_err("not a directory");
        assert!(
            refused.to_string().ends_with("is not a directory"),
            "{refused}"
        );
        check(&dir.join("r.json"), false).expect("writable");
        assert_eq!(leftovers(&dir, &["file"]), Vec::<String>::new());
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_failed_write_leaves_the_old_file_and_no_temporary() {
        // The directory vanishes between the check and the write (a full disk is
        // tests/exports.rs's, on a tmpfs of its own).
        let dir = temp_dir("vanished");
        let gone = dir.join("gone");
        fs::create_dir(&gone).expect("dir");
        let path = gone.join("r.json");
        check(&path, false).expect("writable now");
        fs::remove_dir(&gone).expect("remove");
        let failed = write_file(&path, b"{}", false).expect_err("no directory");
        assert!(
            failed
                .to_string()
                .starts_with(&format!("cannot write {}: ", path.display())),
            "{failed}"
        );
        let _ = fs::remove_dir_all(&dir);
    }
}
