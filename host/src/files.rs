//! Files written whole or not at all.

use std::io::Write;
use std::path::Path;

/// Writes `bytes` to `path` so that a reader, or the machine after a
/// crash, sees either the old file (or none) or all of the new one: a
/// temporary file beside it is written and fsynced, renamed over `path`,
/// and the directory fsynced so that the rename itself is durable. Creates
/// the directory if needed.
///
/// # Errors
/// Any I/O failure; the temporary file is removed then.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = directory_of(path)?;
    let tmp = temporary_beside(path, dir);
    let written = (|| {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    sync_directory(dir)
}

/// Puts the content of the file `from` at `path` as [`write_atomically`]
/// does, without reading it into memory (a compiled artifact is tens of
/// MiB): with `take`, `from` is renamed to `path` when both are on one
/// file system; else a hard link to it, or failing that a copy the kernel
/// makes (`std::fs::copy`: `copy_file_range`), fsynced, is renamed over
/// `path`. With `take` a `from` that was copied is removed afterwards.
/// `from` must not change once written (a cache entry, a staged file).
///
/// # Errors
/// Any I/O failure; the temporary file is removed then.
pub fn place_atomically(from: &Path, path: &Path, take: bool) -> std::io::Result<()> {
    let dir = directory_of(path)?;
    if take && std::fs::rename(from, path).is_ok() {
        return sync_directory(dir);
    }
    let tmp = temporary_beside(path, dir);
    let placed = (|| {
        if std::fs::hard_link(from, &tmp).is_err() {
            std::fs::copy(from, &tmp)?;
            std::fs::File::open(&tmp)?.sync_all()?;
        }
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = placed {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    if take {
        let _ = std::fs::remove_file(from);
    }
    sync_directory(dir)
}

/// The directory `path` goes into, created if needed.
fn directory_of(path: &Path) -> std::io::Result<&Path> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or_else(|| Path::new("."));
    std::fs::create_dir_all(dir)?;
    Ok(dir)
}

/// A temporary name for `path` in `dir` that no other writer picks
/// (`.NAME.<pid>.<random>.tmp`: what a crash leaves behind is recognised
/// as such and pruned).
pub(crate) fn temporary_beside(path: &Path, dir: &Path) -> std::path::PathBuf {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    dir.join(format!(
        ".{name}.{}.{:016x}.tmp",
        std::process::id(),
        rand::random::<u64>()
    ))
}

/// Directories cannot be opened for fsync everywhere (Windows); where they
/// can, a rename is only durable once the directory is synced.
fn sync_directory(dir: &Path) -> std::io::Result<()> {
    if let Ok(dir) = std::fs::File::open(dir) {
        dir.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_the_file_whole_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("nested/artifact");
        write_atomically(&path, b"first").expect("written");
        write_atomically(&path, b"second").expect("replaced");
        assert_eq!(std::fs::read(&path).expect("read"), b"second");
        let names: Vec<_> = std::fs::read_dir(path.parent().expect("dir"))
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, ["artifact"], "temporary files left behind");
    }

    #[test]
    fn places_a_file_whole_linked_copied_or_taken() {
        let dir = tempfile::tempdir().expect("tempdir");
        let from = dir.path().join("cache/entry");
        write_atomically(&from, b"artifact").expect("written");
        let placed = dir.path().join("compiled/one");
        place_atomically(&from, &placed, false).expect("placed");
        assert_eq!(std::fs::read(&placed).expect("read"), b"artifact");
        assert!(from.is_file(), "a cache entry stays where it was");
        let staged = dir.path().join("staged");
        write_atomically(&staged, b"staged").expect("written");
        place_atomically(&staged, &placed, true).expect("taken");
        assert_eq!(std::fs::read(&placed).expect("read"), b"staged");
        assert!(!staged.exists(), "a staged file is moved, not left behind");
        assert!(
            place_atomically(&dir.path().join("missing"), &placed, false).is_err(),
            "nothing to place"
        );
        assert_eq!(std::fs::read(&placed).expect("read"), b"staged");
        let names: Vec<_> = std::fs::read_dir(dir.path().join("compiled"))
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, ["one"], "temporary files left behind");
    }

    #[test]
    fn a_failed_write_leaves_the_old_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("artifact");
        write_atomically(&path, b"old").expect("written");
        // A directory where the file should go: the rename fails.
        let blocked = dir.path().join("blocked");
        std::fs::create_dir_all(blocked.join("inside")).expect("dir");
        assert!(write_atomically(&blocked, b"new").is_err());
        assert_eq!(std::fs::read(&path).expect("read"), b"old");
        let temporaries = std::fs::read_dir(dir.path())
            .expect("list")
            .filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
            })
            .count();
        assert_eq!(temporaries, 0);
    }
}
