//! Which sockets a process holds: the inodes behind its `/proc/PID/fd` links (`socket:[INODE]`).
#![forbid(unsafe_code)]

use std::collections::HashSet;
use std::io;
use std::path::Path;

/// The socket inodes process `pid` holds open, read from `proc_root/PID/fd` (normally `/proc`).
/// A missing process is `NotFound`; a process whose fds we may not read is `PermissionDenied`.
pub fn socket_inodes(proc_root: &Path, pid: u32) -> io::Result<HashSet<u32>> {
    let dir = proc_root.join(pid.to_string()).join("fd");
    let mut out = HashSet::new();
    for entry in std::fs::read_dir(&dir)? {
        let Ok(entry) = entry else { continue };
        // An fd closed between read_dir and read_link is simply gone.
        let Ok(target) = std::fs::read_link(entry.path()) else {
            continue;
        };
        if let Some(inode) = parse_socket_link(&target.to_string_lossy()) {
            out.insert(inode);
        }
    }
    Ok(out)
}

/// Parses `socket:[12345]` into 12345.
pub fn parse_socket_link(link: &str) -> Option<u32> {
    link.strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links() {
        assert_eq!(parse_socket_link("socket:[4242]"), Some(4242));
        assert_eq!(parse_socket_link("pipe:[4242]"), None);
        assert_eq!(parse_socket_link("socket:[x]"), None);
        assert_eq!(parse_socket_link("socket:[1"), None);
    }

    #[test]
    fn own_sockets_are_found() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let set = socket_inodes(Path::new("/proc"), std::process::id()).unwrap();
        assert!(!set.is_empty());
        drop(l);
        let e = socket_inodes(Path::new("/proc"), u32::MAX).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }
}
