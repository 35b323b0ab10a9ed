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
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or_else(|| Path::new("."));
    std::fs::create_dir_all(dir)?;
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = dir.join(format!(
        ".{name}.{}.{:016x}.tmp",
        std::process::id(),
        rand::random::<u64>()
    ));
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
    // Directories cannot be opened for fsync everywhere (Windows); where
    // they can, the rename is only durable once the directory is synced.
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
