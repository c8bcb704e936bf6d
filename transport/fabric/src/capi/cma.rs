//! `process_vm_readv`, the one system call of the single-copy path ([`crate::cma`]): a
//! read of another process's memory into this process's buffers, the posted receive's
//! (raw, the application's) or a slice.

use crate::cma::{CmaError, RemoteRead};
use libc::{c_void, iovec};

/// Reads from process `pid` the `remote` ranges, in order, into the `local` buffers, in
/// order; the bytes read, or the `errno`.
///
/// # Safety
///
/// Each local iovec must be memory of this process writable for its length, and not
/// otherwise borrowed while the call runs.
unsafe fn readv(pid: i32, local: &[iovec], remote: &[iovec]) -> Result<usize, i32> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: the caller vouches for the local iovecs; the remote ones are addresses
        // in another process, which the kernel checks (EFAULT) and this process never
        // dereferences. Both arrays are live for the call, their lengths passed with them.
        let n = unsafe {
            libc::process_vm_readv(
                pid,
                local.as_ptr(),
                local.len() as libc::c_ulong,
                remote.as_ptr(),
                remote.len() as libc::c_ulong,
                0,
            )
        };
        if n < 0 {
            return Err(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO));
        }
        Ok(n as usize)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (pid, local, remote);
        Err(libc::ENOSYS)
    }
}

fn remote(addr: u64, len: usize) -> iovec {
    iovec {
        iov_base: addr as usize as *mut c_void,
        iov_len: len,
    }
}

/// The remote side of a read of `n` bytes from `from`: the bytes, then the sender's
/// nonce word (read after them: see [`crate::cma`], "Reads").
fn remotes(from: &RemoteRead, n: usize) -> [iovec; 2] {
    [remote(from.addr, n), remote(from.word, 8)]
}

/// Reads `dst.len()` bytes from `from` into `dst` (see [`crate::cma::read`]).
pub(crate) fn read_into(from: &RemoteRead, dst: &mut [u8]) -> Result<(), CmaError> {
    let mut guard = [0u8; 8];
    let n = dst.len();
    let local = [
        iovec {
            iov_base: dst.as_mut_ptr().cast(),
            iov_len: n,
        },
        iovec {
            iov_base: guard.as_mut_ptr().cast(),
            iov_len: 8,
        },
    ];
    // SAFETY: both local iovecs are slices this function borrows mutably for the call.
    let got = unsafe { readv(from.pid, &local, &remotes(from, n)) };
    crate::cma::check(got, n, guard, from.nonce)
}

/// Reads `n` bytes from `from` into the application's buffers `iov` (`(base, len)`
/// pairs), from the first byte on; `n` is at most their total length.
///
/// # Safety
///
/// Each `(base, len)` is memory of this process writable for `len` bytes (a posted
/// receive's buffer, which the application keeps valid until the receive completes).
pub(super) unsafe fn read_into_iov(
    from: &RemoteRead,
    iov: &[(usize, usize)],
    n: usize,
) -> Result<(), CmaError> {
    let mut guard = [0u8; 8];
    let mut local: smallvec::SmallVec<[iovec; 4]> = smallvec::SmallVec::new();
    let mut left = n;
    for &(base, len) in iov {
        if left == 0 {
            break;
        }
        let take = len.min(left);
        local.push(iovec {
            iov_base: base as *mut c_void,
            iov_len: take,
        });
        left -= take;
    }
    if left > 0 {
        return Err(CmaError::Short { got: 0, want: n });
    }
    local.push(iovec {
        iov_base: guard.as_mut_ptr().cast(),
        iov_len: 8,
    });
    // SAFETY: the caller vouches for each buffer, of which no more than its length is
    // named; the guard is a local array borrowed for the call.
    let got = unsafe { readv(from.pid, &local, &remotes(from, n)) };
    crate::cma::check(got, n, guard, from.nonce)
}
