//! Output files a user names (`--write`, `--report`, `--svg`, `--full-log`, `report -o`, ...), written so that
//! nobody who can write the folder chooses where roundtrip writes (roundtrip often runs as root for capture):
//!
//! - a symbolic link at the path is refused (it is never followed), and so is anything that is not a regular
//!   file, a FIFO or `-`: a directory, a device, a socket;
//! - a regular file (or a new name) is written to a temporary file beside it (same folder, created with
//!   `O_CREAT|O_EXCL|O_NOFOLLOW`, an unpredictable name, mode 0644 less the umask or the mode of the file it
//!   replaces) and renamed over the path by [`OutputFile::commit`]: re-running a command still replaces its
//!   old output, and a run that fails or is dropped before its commit leaves the old file as it was and
//!   removes its temporary file;
//! - a FIFO is opened with `O_NOFOLLOW` and written as it goes (no rename), and `-` writes to standard
//!   output, as tcpdump's `-w -`.
//!
//! Names roundtrip chooses itself inside a directory (the flight recorder) use [`at`] (`crate::sys::at`): the directory opened
//! once, each file created relative to it with `O_CREAT|O_EXCL|O_NOFOLLOW`.
#![deny(unsafe_code)]

pub use crate::sys::at;

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Writing an output file failed, or its path names something roundtrip does not write to.
#[derive(Debug, Error)]
pub enum OutputError {
    /// The path names something other than a regular file, a FIFO, a new name or `-`.
    #[error(
        "refusing to write {path}: it is {what} (give a regular file, a new name, a FIFO or - for standard output)"
    )]
    Refused {
        /// The path given.
        path: PathBuf,
        /// What is there ("a symbolic link", "a directory", ...).
        what: &'static str,
    },
    /// The folder the file would go in does not exist.
    #[error("cannot write {path}: the folder {dir} does not exist")]
    NoFolder {
        /// The path given.
        path: PathBuf,
        /// Its folder.
        dir: PathBuf,
    },
    /// The system refused an operation.
    #[error("cannot write {path}: {source}")]
    Io {
        /// The path given.
        path: PathBuf,
        /// What the system said.
        source: io::Error,
    },
}

/// What an output path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `-`: standard output.
    Stdout,
    /// A FIFO (named pipe): written directly.
    Fifo,
    /// An existing regular file: replaced by a rename.
    Regular,
    /// Nothing yet: created by a rename.
    New,
}

/// True when `path` is `-` (standard output).
pub fn is_stdout(path: &Path) -> bool {
    path.as_os_str() == "-"
}

/// What `path` names, without following a symbolic link; refuses what roundtrip does not write to (a link, a
/// directory, a device, a socket) and a path whose folder does not exist. Reads metadata only: call it before
/// any capture or connection, so a wrong path costs nothing.
pub fn check(path: &Path) -> Result<Kind, OutputError> {
    if is_stdout(path) {
        return Ok(Kind::Stdout);
    }
    if path.as_os_str().is_empty() || path.file_name().is_none() {
        return Err(OutputError::Refused {
            path: path.to_path_buf(),
            what: "not a file name",
        });
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) => {
            let t = m.file_type();
            let what = if t.is_file() {
                return Ok(Kind::Regular);
            } else if t.is_fifo() {
                return Ok(Kind::Fifo);
            } else if t.is_symlink() {
                "a symbolic link"
            } else if t.is_dir() {
                "a directory"
            } else if t.is_block_device() || t.is_char_device() {
                "a device"
            } else if t.is_socket() {
                "a socket"
            } else {
                "not a regular file"
            };
            Err(OutputError::Refused {
                path: path.to_path_buf(),
                what,
            })
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let dir = folder(path);
            match std::fs::metadata(&dir) {
                Ok(m) if m.is_dir() => Ok(Kind::New),
                _ => Err(OutputError::NoFolder {
                    path: path.to_path_buf(),
                    dir,
                }),
            }
        }
        Err(source) => Err(OutputError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// [`check`], and for a regular file or a new name whether a file can be created beside it (the folder is
/// writable: permissions, a read-only file system, /proc), by creating and removing a temporary file, so the
/// path is found wrong before a measurement rather than after it. A FIFO is not opened (it would wait for
/// its reader).
pub fn probe(path: &Path) -> Result<Kind, OutputError> {
    let kind = check(path)?;
    if matches!(kind, Kind::Regular | Kind::New) {
        let (f, temp) = create_temp(path).map_err(|source| OutputError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        drop(f);
        let _ = std::fs::remove_file(temp);
    }
    Ok(kind)
}

/// The folder `path` is in (`.` for a bare name).
fn folder(path: &Path) -> PathBuf {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

#[derive(Debug)]
enum Sink {
    Stdout(io::Stdout),
    File(File),
}

/// An output being written: see the module documentation. Dropped without [`commit`](Self::commit), a
/// regular file's temporary file is removed and the path keeps what it held.
#[derive(Debug)]
pub struct OutputFile {
    sink: Sink,
    path: PathBuf,
    /// The temporary file renamed over `path` at the commit (regular files only).
    temp: Option<PathBuf>,
    kind: Kind,
}

/// Opens `path` for writing as the module documentation says (checked again here: the path may have changed
/// since [`check`]).
pub fn create(path: &Path) -> Result<OutputFile, OutputError> {
    create_with_mode(path, None)
}

/// [`create`], a regular file getting exactly the permission bits `mode` when given (not less the umask, not
/// those of the file it replaces).
pub fn create_with_mode(path: &Path, mode: Option<u32>) -> Result<OutputFile, OutputError> {
    let kind = check(path)?;
    let io_err = |source| OutputError::Io {
        path: path.to_path_buf(),
        source,
    };
    match kind {
        Kind::Stdout => Ok(OutputFile {
            sink: Sink::Stdout(io::stdout()),
            path: path.to_path_buf(),
            temp: None,
            kind,
        }),
        Kind::Fifo => {
            let f = OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(path)
                .map_err(io_err)?;
            // Between the check and the open the FIFO may have been replaced by a regular file: never write
            // into anything but a FIFO without the rename.
            let m = f.metadata().map_err(io_err)?;
            if !m.file_type().is_fifo() {
                return Err(OutputError::Refused {
                    path: path.to_path_buf(),
                    what: "no longer a FIFO",
                });
            }
            Ok(OutputFile {
                sink: Sink::File(f),
                path: path.to_path_buf(),
                temp: None,
                kind,
            })
        }
        Kind::Regular | Kind::New => {
            // Keep the permission bits of the file replaced (a new file: 0644 less the umask).
            let keep_mode = match kind {
                _ if mode.is_some() => mode,
                Kind::Regular => std::fs::symlink_metadata(path)
                    .ok()
                    .filter(|m| m.file_type().is_file())
                    .map(|m| m.permissions().mode() & 0o777),
                _ => None,
            };
            let (f, temp) = create_temp(path).map_err(io_err)?;
            if let Some(mode) = keep_mode {
                f.set_permissions(std::fs::Permissions::from_mode(mode))
                    .map_err(io_err)?;
            }
            Ok(OutputFile {
                sink: Sink::File(f),
                path: path.to_path_buf(),
                temp: Some(temp),
                kind,
            })
        }
    }
}

/// A new file beside `path` named `.NAME.XXXXXXXXXXXX.tmp` (random), created with `O_EXCL|O_NOFOLLOW`.
fn create_temp(path: &Path) -> io::Result<(File, PathBuf)> {
    let dir = folder(path);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut last = None;
    for _ in 0..16 {
        let mut r = [0u8; 6];
        getrandom::fill(&mut r).map_err(|e| io::Error::other(e.to_string()))?;
        let hex: String = r.iter().map(|b| format!("{b:02x}")).collect();
        let temp = dir.join(format!(".{name}.{hex}.tmp"));
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&temp)
        {
            Ok(f) => return Ok((f, temp)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no temporary name was free")))
}

impl OutputFile {
    /// The path given.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What the path named when it was opened.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// Flushes and, for a regular file, renames the temporary file over the path (a symbolic link planted at
    /// the path in the meantime is replaced, not followed).
    pub fn commit(mut self) -> Result<(), OutputError> {
        let path = self.path.clone();
        let io_err = |source| OutputError::Io {
            path: path.clone(),
            source,
        };
        self.flush().map_err(io_err)?;
        if let Some(temp) = self.temp.take()
            && let Err(e) = std::fs::rename(&temp, &self.path)
        {
            let _ = std::fs::remove_file(&temp);
            return Err(io_err(e));
        }
        Ok(())
    }
}

impl Write for OutputFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &mut self.sink {
            Sink::Stdout(s) => s.write(buf),
            Sink::File(f) => f.write(buf),
        }
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match &mut self.sink {
            Sink::Stdout(s) => s.write_all(buf),
            Sink::File(f) => f.write_all(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match &mut self.sink {
            Sink::Stdout(s) => s.flush(),
            Sink::File(f) => f.flush(),
        }
    }
}

impl Drop for OutputFile {
    fn drop(&mut self) {
        if let Some(temp) = self.temp.take() {
            let _ = std::fs::remove_file(temp);
        }
    }
}

/// Writes `bytes` to `path` as the module documentation says: the whole file, or nothing changed.
pub fn write(path: &Path, bytes: &[u8]) -> Result<(), OutputError> {
    write_with_mode(path, bytes, None)
}

/// [`write`] with [`create_with_mode`]'s `mode`.
pub fn write_with_mode(path: &Path, bytes: &[u8], mode: Option<u32>) -> Result<(), OutputError> {
    let mut f = create_with_mode(path, mode)?;
    f.write_all(bytes).map_err(|source| OutputError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    f.commit()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn a_symlink_is_refused_and_its_target_untouched() {
        let d = tempfile::tempdir().unwrap();
        let target = d.path().join("target");
        std::fs::write(&target, "keep").unwrap();
        let link = d.path().join("out");
        symlink(&target, &link).unwrap();
        let e = write(&link, b"new").unwrap_err();
        assert!(e.to_string().contains("a symbolic link"), "{e}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
        // A dangling link too: nothing created at its target.
        let dangling = d.path().join("dangling");
        symlink(d.path().join("nowhere"), &dangling).unwrap();
        assert!(write(&dangling, b"x").is_err());
        assert!(!d.path().join("nowhere").exists());
    }

    #[test]
    fn a_regular_file_is_replaced_whole_and_a_dropped_one_left_alone() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("r.html");
        write(&p, b"one").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
        write(&p, b"two").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "two");
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o640
        );
        let mut f = create(&p).unwrap();
        f.write_all(b"three, unfinished").unwrap();
        drop(f);
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "two");
        let left: Vec<_> = std::fs::read_dir(d.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "the temporary file was removed");
    }

    #[test]
    fn directories_and_missing_folders_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let e = check(d.path()).unwrap_err();
        assert!(e.to_string().contains("a directory"), "{e}");
        assert!(check(&d.path().join("no/such.html")).is_err());
        assert_eq!(check(Path::new("-")).unwrap(), Kind::Stdout);
        assert_eq!(
            check(Path::new("/dev/null")).unwrap_err().to_string(),
            "refusing to write /dev/null: it is a device (give a regular file, a new name, a FIFO or - for standard output)"
        );
    }
}
