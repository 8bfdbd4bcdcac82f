//! Heap segments: anonymous memfd files mapped shared. No names in /dev/shm, mode 0600, sealed
//! against resizing; the memory is freed by the kernel once every process holding it exits.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::error::RuntimeError;

/// One shared mapping of a heap segment (this rank's or a peer's).
#[derive(Debug)]
pub struct Mapping {
    base: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain shared memory; concurrent access is coordinated by the signal
// protocol (atomics with release/acquire) and bounds-checked by the callers.
unsafe impl Send for Mapping {}
// SAFETY: see above.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Start of the mapping.
    pub fn base(&self) -> *mut u8 {
        self.base
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapping is empty (never, for a valid segment).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Maps `len` bytes of `fd` shared, read-write.
    pub fn map(fd: RawFd, len: usize) -> Result<Self, RuntimeError> {
        // SAFETY: mapping a file we hold open; the result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_NORESERVE,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(RuntimeError::last_os(format!(
                "mmap of a {len}-byte heap segment"
            )));
        }
        Ok(Mapping {
            base: p as *mut u8,
            len,
        })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `map` mapped.
        unsafe {
            libc::munmap(self.base as *mut libc::c_void, self.len);
        }
    }
}

/// Creates this rank's heap segment: `memfd_create(MFD_CLOEXEC | MFD_ALLOW_SEALING)`,
/// `fchmod 0600`, `ftruncate(size)`, sealed against shrink/grow.
pub fn create_segment(rank: usize, size: u64) -> Result<OwnedFd, RuntimeError> {
    let name = std::ffi::CString::new(format!("symsched-heap-r{rank}")).expect("no NUL in name");
    // SAFETY: valid C string; result checked.
    let fd =
        unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(RuntimeError::last_os("memfd_create for the heap segment"));
    }
    // SAFETY: fd was just returned by memfd_create and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: plain syscalls on a valid fd.
    unsafe {
        if libc::fchmod(fd.as_raw_fd(), 0o600) != 0 {
            return Err(RuntimeError::last_os("fchmod 0600 of the heap segment"));
        }
        let len = libc::off_t::try_from(size).map_err(|_| {
            RuntimeError::Unavailable(format!("heap size {size} does not fit in off_t"))
        })?;
        if libc::ftruncate(fd.as_raw_fd(), len) != 0 {
            return Err(RuntimeError::last_os(format!(
                "ftruncate of the heap segment to {size} bytes"
            )));
        }
        if libc::fcntl(
            fd.as_raw_fd(),
            libc::F_ADD_SEALS,
            libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL,
        ) != 0
        {
            return Err(RuntimeError::last_os("sealing the heap segment"));
        }
    }
    Ok(fd)
}

/// Size in bytes of the file behind `fd`.
pub fn segment_size(fd: RawFd) -> Result<u64, RuntimeError> {
    // SAFETY: fstat into a zeroed struct; result checked.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(RuntimeError::last_os("fstat of a heap segment"));
    }
    Ok(st.st_size as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_is_private_and_sealed() {
        let fd = create_segment(0, 1 << 20).unwrap();
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) }, 0);
        assert_eq!(st.st_mode & 0o777, 0o600);
        assert_eq!(segment_size(fd.as_raw_fd()).unwrap(), 1 << 20);
        // Sealed: growing must fail so a peer cannot SIGBUS the others.
        assert_ne!(unsafe { libc::ftruncate(fd.as_raw_fd(), 2 << 20) }, 0);
        let m = Mapping::map(fd.as_raw_fd(), 1 << 20).unwrap();
        unsafe { *m.base().add(4096) = 7 };
        let m2 = Mapping::map(fd.as_raw_fd(), 1 << 20).unwrap();
        assert_eq!(unsafe { *m2.base().add(4096) }, 7);
    }
}
