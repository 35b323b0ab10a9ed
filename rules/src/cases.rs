//! Where recorded cases are found: the one rule `rekon plugin replay` and
//! the SDK's test kit (`assert_cases`) share, so a directory of cases means
//! the same set of files to both.

use std::path::{Path, PathBuf};

/// The case files under `dir`: every `*.json`, recursively, in path order.
///
/// # Errors
/// When a directory cannot be read.
pub fn case_files_in(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk(&p, out)?;
            } else if p.extension().is_some_and(|e| e == "json") {
                out.push(p);
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(dir, &mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_files_recursively_in_path_order() {
        let root = std::env::temp_dir().join(format!("rekon-rules-cases-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("b/inner")).unwrap();
        for f in ["b/inner/2.json", "a.json", "b/1.json", "notes.txt"] {
            std::fs::write(root.join(f), "{}").unwrap();
        }
        let found: Vec<String> = case_files_in(&root)
            .unwrap()
            .iter()
            .map(|p| p.strip_prefix(&root).unwrap().display().to_string())
            .collect();
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(found, ["a.json", "b/1.json", "b/inner/2.json"]);
        assert!(case_files_in(Path::new("/nonexistent/rekon")).is_err());
    }
}
