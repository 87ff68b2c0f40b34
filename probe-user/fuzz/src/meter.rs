//! A global allocator that counts live heap bytes and their peak, so a target can assert
//! that an input of N bytes never makes the parser hold more than a bound linear in N.
//!
//! libFuzzer's `-malloc_limit_mb`/`-rss_limit_mb` only catch blow-ups that reach hundreds
//! of MiB, which small fuzz inputs rarely do even when the growth is quadratic; a bound
//! per input byte catches the quadratic case at a few KiB already.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// Counts bytes on top of the system allocator (which the sanitizer intercepts).
pub struct Meter;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grow(n: usize) {
    let now = LIVE.fetch_add(n, Relaxed).wrapping_add(n);
    PEAK.fetch_max(now, Relaxed);
}

fn shrink(n: usize) {
    LIVE.fetch_sub(n, Relaxed);
}

// SAFETY: every call is forwarded unchanged to `System`; only counters are added.
unsafe impl GlobalAlloc for Meter {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grow(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grow(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.dealloc(ptr, layout) };
        shrink(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            // Count the new block before releasing the old one: a copying realloc holds
            // both for a moment.
            grow(new_size);
            shrink(layout.size());
        }
        p
    }
}

/// Peak heap growth over a closure's run, in bytes above what was live when it started.
pub fn peak_during<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = LIVE.load(Relaxed);
    PEAK.store(base, Relaxed);
    let out = f();
    (out, PEAK.load(Relaxed).saturating_sub(base))
}

/// Installs [`Meter`] as the global allocator of a fuzz target binary.
#[macro_export]
macro_rules! install_meter {
    () => {
        #[global_allocator]
        static METER: $crate::meter::Meter = $crate::meter::Meter;
    };
}
