//! Files roundtrip names itself inside a directory it was given (the flight recorder's `--keep-dir`): the
//! directory is opened once ([`open_dir`], `O_DIRECTORY|O_NOFOLLOW`) and every file is created, examined and
//! removed relative to that descriptor, never through a path that could be swapped for a symbolic link
//! in between. The three `*at` calls are not in std; each wraps one libc call on a descriptor the `File` owns
//! and a NUL-terminated name, and checks its result (unsafe is allowed here by [`crate::sys`]).

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Opens the directory `path` (`O_DIRECTORY|O_NOFOLLOW`: a symbolic link or anything but a directory fails,
/// with `ENOTDIR` or `ELOOP`).
pub fn open_dir(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

fn c_name(name: &str) -> io::Result<CString> {
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?} is not a plain file name"),
        ));
    }
    CString::new(Path::new(name).as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL in a file name"))
}

/// `openat(dir, name, O_CREAT|O_EXCL|O_NOFOLLOW|O_WRONLY|O_CLOEXEC, mode)`: a new file in `dir`, never one that
/// exists and never through a symbolic link (either fails with `EEXIST`). `mode` is set exactly (`fchmod`
/// after the create, so the umask does not change it).
pub fn create_new_at(dir: &File, name: &str, mode: u32) -> io::Result<File> {
    let c = c_name(name)?;
    // SAFETY: `dir` owns a valid descriptor for the call's duration and `c` is NUL-terminated; the result is
    // checked before it becomes an owned descriptor.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c.as_ptr(),
            libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_WRONLY | libc::O_CLOEXEC,
            mode as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by openat and is owned by nobody else.
    let f = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    use std::os::unix::fs::PermissionsExt;
    f.set_permissions(std::fs::Permissions::from_mode(mode))?;
    Ok(f)
}

/// `unlinkat(dir, name, 0)`: removes the entry `name` of `dir` (a symbolic link itself, never its target).
pub fn unlink_at(dir: &File, name: &str) -> io::Result<()> {
    let c = c_name(name)?;
    // SAFETY: as in `create_new_at`.
    let r = unsafe { libc::unlinkat(dir.as_raw_fd(), c.as_ptr(), 0) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// What [`stat_at`] found.
#[derive(Debug, Clone, Copy)]
pub struct EntryStat {
    /// A regular file (not a link, not a directory).
    pub regular: bool,
    /// Its size in bytes.
    pub bytes: u64,
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`: the entry itself, a symbolic link not followed.
pub fn stat_at(dir: &File, name: &str) -> io::Result<EntryStat> {
    let c = c_name(name)?;
    // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as in `create_new_at`; `st` is a valid place for the kernel to write.
    let r = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            c.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(EntryStat {
        regular: st.st_mode & libc::S_IFMT == libc::S_IFREG,
        bytes: st.st_size as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_new_at_refuses_a_dangling_link_and_sets_the_mode_exactly() {
        let d = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(d.path().join("victim"), d.path().join("a.pcap")).unwrap();
        let dir = open_dir(d.path()).unwrap();
        let e = create_new_at(&dir, "a.pcap", 0o600).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        assert!(!d.path().join("victim").exists());
        let f = create_new_at(&dir, "b.pcap", 0o600).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(f.metadata().unwrap().permissions().mode() & 0o777, 0o600);
        assert!(stat_at(&dir, "b.pcap").unwrap().regular);
        assert!(!stat_at(&dir, "a.pcap").unwrap().regular);
        unlink_at(&dir, "a.pcap").unwrap();
        assert!(create_new_at(&dir, "../x", 0o600).is_err());
        // A link to a directory is not opened as the directory.
        std::os::unix::fs::symlink(d.path(), d.path().join("dirlink")).unwrap();
        assert!(open_dir(&d.path().join("dirlink")).is_err());
    }
}
