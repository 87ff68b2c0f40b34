//! Anonymous memory: mmap, madvise, mprotect and munmap behind two owning types. The
//! calibration workload walks one (its data footprint) and runs code written into
//! another (its code footprint).

use std::io;

const PAGE: usize = 4096;

/// Anonymous read-write memory, unmapped when dropped.
#[derive(Debug)]
pub(crate) struct Mapping {
    ptr: *mut u8,
    len: usize,
}

impl Mapping {
    /// At least `len` (and at least one) bytes of zeroed read-write memory, rounded up to
    /// whole pages, in small pages, every page faulted in.
    pub(crate) fn new(len: usize) -> io::Result<Self> {
        let len = len.max(1).next_multiple_of(PAGE);
        // SAFETY: a fresh private anonymous mapping; no existing memory is touched.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let mut mapping = Self {
            ptr: ptr.cast(),
            len,
        };
        // Small pages, so walking the buffer takes one TLB entry per 4 KiB, as a
        // server's heap does, instead of one per 2 MiB. Advice only: a refusal is
        // harmless.
        // SAFETY: the range is the mapping just made.
        unsafe { libc::madvise(ptr, len, libc::MADV_NOHUGEPAGE) };
        // Fault every page in now, so no page fault lands in a measured run.
        for page in mapping.bytes_mut().iter_mut().step_by(PAGE) {
            // Volatile: a zero page written with zero must still be written.
            // SAFETY: `page` is a valid, exclusive reference into the mapping.
            unsafe { std::ptr::write_volatile(page, 1) };
        }
        Ok(mapping)
    }

    /// The whole mapping (a multiple of the page size).
    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: the mapping is `len` readable bytes, alive as long as `self`, and
        // written only through `&mut self`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` makes this the only view.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    /// The same memory made read-execute: no longer writable, so it no longer gives
    /// out `&mut`.
    pub(crate) fn into_executable(self) -> io::Result<Executable> {
        // SAFETY: mprotect on exactly this mapping; `self` is consumed, so no mutable
        // view of it is left.
        let protected =
            unsafe { libc::mprotect(self.ptr.cast(), self.len, libc::PROT_READ | libc::PROT_EXEC) };
        if protected != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Executable(self))
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`; no reference to it outlives
        // `self`.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// Read-execute anonymous memory, unmapped when dropped.
#[derive(Debug)]
pub(crate) struct Executable(Mapping);

impl Executable {
    /// The first byte: where code written before [`Mapping::into_executable`] starts.
    /// Calling it is the caller's `unsafe`, on what it wrote there.
    pub(crate) fn start(&self) -> *const u8 {
        self.0.ptr
    }

    #[cfg(test)]
    pub(crate) fn bytes(&self) -> &[u8] {
        self.0.bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapped_zeroed_then_executable() {
        let mut map = Mapping::new(5000).expect("mmap");
        assert_eq!(map.bytes().len(), 2 * PAGE);
        // Every page was touched with a 1 at its start, the rest is zero.
        assert_eq!(map.bytes().iter().filter(|b| **b == 1).count(), 2);
        map.bytes_mut()[1] = 0xc3;
        let exec = map.into_executable().expect("mprotect");
        assert_eq!(exec.bytes()[..2], [1, 0xc3]);
        assert!(!exec.start().is_null());
    }
}
