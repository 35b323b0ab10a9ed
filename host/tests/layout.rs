//! The house: the host's modules are built in floors (see `host/src/lib.rs`
//! and ARCHITECTURE.md). This test reads every file of `host/src`, collects
//! what it imports from the crate (`use crate::…`, `use super::…` and paths
//! written inline), and fails on
//!
//! - an arrow that points up or sideways between top-level modules (a
//!   module may only import modules on floors below its own, so the plugin
//!   runtime and the writer, both on floor 4, never import each other);
//! - a circle of files (`a` imports `b` imports `a`, directly or around a
//!   ring), counting a `mod.rs`'s re-exports as imports of its children, so
//!   a child that imports its own folder's facade is a circle too;
//! - a file of more than [`MAX_LINES`] lines (`main.rs` and tests included):
//!   split it by the concerns it holds.
//!
//! Test modules (`#[cfg(test)] mod tests`) are not read: tests may reach
//! anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Floors, bottom first. A top-level module missing here fails the test:
/// a new folder must say where it stands.
const FLOORS: &[(&str, u32)] = &[
    ("telemetry", 1),
    ("action", 1),
    ("queue", 1),
    ("files", 1),
    ("cluster", 2),
    ("lease", 2),
    ("cache", 3),
    ("plugin", 4),
    ("writer", 4),
    ("controller", 5),
    ("source", 5),
    ("admission", 5),
    ("change", 6),
    ("app", 7),
    ("explore", 7),
    ("commands", 8),
    // The binary's own modules (`main.rs`'s `mod cli`): clap types and each
    // command's glue. They reach the library as `rekon::…` (not read here);
    // nothing in the library may import them.
    ("cli", 9),
];

/// The most lines a file of `host/src` may have.
const MAX_LINES: usize = 1_000;

type ModPath = Vec<String>;

fn floor(top: &str) -> Option<u32> {
    FLOORS.iter().find(|(m, _)| *m == top).map(|(_, f)| *f)
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read host/src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `controller/runner.rs` → `[controller, runner]`; `controller/mod.rs` →
/// `[controller]`; `lib.rs` → `[]`.
fn module_of(root: &Path, file: &Path) -> ModPath {
    let rel = file.strip_prefix(root).expect("file under root");
    let mut parts: Vec<String> = rel
        .with_extension("")
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts
}

/// The source without comments and without its test module.
fn code_of(source: &str) -> String {
    // The test module: `#[cfg(test)]` followed by `mod tests` (any
    // visibility) on the next line.
    let test_module = source.match_indices("#[cfg(test)]\n").find(|(i, m)| {
        let next = source[i + m.len()..].lines().next().unwrap_or("");
        next.trim_start()
            .trim_start_matches("pub(crate) ")
            .starts_with("mod tests")
    });
    let source = match test_module {
        Some((i, _)) => &source[..i],
        None => source,
    };
    source
        .lines()
        .map(|l| match l.find("//") {
            // `//` inside a string literal ("http://…") is rare in `use`
            // lines and harmless elsewhere: at worst a path is missed.
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `a::{b, c::{d, e}}` → `[a::b, a::c::d, a::c::e]`.
fn expand(prefix: &[String], tree: &str, out: &mut Vec<ModPath>) {
    let tree = tree.trim();
    if let Some(open) = tree.find('{') {
        let head: Vec<String> = tree[..open]
            .split("::")
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect();
        let close = tree.rfind('}').expect("balanced braces in a use tree");
        let mut base = prefix.to_vec();
        base.extend(head);
        let inner = &tree[open + 1..close];
        let (mut depth, mut start) = (0, 0);
        for (i, ch) in inner.char_indices() {
            match ch {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand(&base, &inner[start..i], out);
                    start = i + 1;
                }
                _ => {}
            }
        }
        expand(&base, &inner[start..], out);
    } else {
        let item = tree.split(" as ").next().unwrap_or(tree);
        let mut path = prefix.to_vec();
        path.extend(
            item.split("::")
                .map(str::trim)
                .filter(|s| !s.is_empty() && *s != "self" && *s != "*")
                .map(String::from),
        );
        if path.len() > prefix.len() || !prefix.is_empty() {
            out.push(path);
        }
    }
}

/// Every crate path a file names: `use` trees and inline `crate::a::b`.
fn paths_of(module: &ModPath, code: &str, modules: &BTreeSet<ModPath>) -> Vec<ModPath> {
    // `super` of `a/b.rs` is `a`; of `a/b/mod.rs` (module `a/b`) also `a`.
    let parent: ModPath = module[..module.len().saturating_sub(1)].to_vec();
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("use ") {
        let before = rest[..i].chars().last();
        rest = &rest[i + 4..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let Some(end) = rest.find(';') else { break };
        let tree = rest[..end].trim();
        let tree = tree.strip_prefix("pub ").unwrap_or(tree);
        if let Some(t) = tree.strip_prefix("crate::") {
            expand(&[], t, &mut out);
        } else if let Some(t) = tree.strip_prefix("super::") {
            expand(&parent, t, &mut out);
        } else {
            // `use child::X` (or `self::child::X`): a module of this file's
            // own, which is how a `mod.rs` re-exports its children.
            let t = tree.strip_prefix("self::").unwrap_or(tree);
            let first = t.split("::").next().unwrap_or("").trim();
            let mut child = module.clone();
            child.push(first.to_owned());
            if modules.contains(&child) {
                expand(module, t, &mut out);
            }
        }
    }
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        let path: ModPath = rest
            .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
            .next()
            .unwrap_or("")
            .split("::")
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect();
        out.push(path);
    }
    out
}

/// The file a path lands in: its longest prefix that is a module.
fn resolve(modules: &BTreeSet<ModPath>, path: &[String]) -> Option<ModPath> {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|p| modules.contains(p))
}

fn graph() -> BTreeMap<ModPath, BTreeSet<ModPath>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let sources: BTreeMap<ModPath, String> = files
        .iter()
        .filter(|f| !f.ends_with("main.rs"))
        .map(|f| {
            let source = std::fs::read_to_string(f).expect("read source");
            (module_of(&root, f), code_of(&source))
        })
        .collect();
    let modules: BTreeSet<ModPath> = sources.keys().cloned().collect();
    sources
        .iter()
        .map(|(module, code)| {
            let deps = paths_of(module, code, &modules)
                .iter()
                .filter_map(|p| resolve(&modules, p))
                .filter(|d| d != module && !d.is_empty())
                .collect();
            (module.clone(), deps)
        })
        .collect()
}

fn name(m: &ModPath) -> String {
    if m.is_empty() {
        "lib".to_owned()
    } else {
        m.join("/")
    }
}

#[test]
fn every_top_level_module_has_a_floor() {
    let missing: Vec<String> = graph()
        .keys()
        .filter_map(|m| m.first())
        .filter(|top| floor(top).is_none())
        .map(String::clone)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    assert!(
        missing.is_empty(),
        "modules without a floor in host/tests/layout.rs (and ARCHITECTURE.md): {missing:?}"
    );
}

#[test]
fn arrows_only_point_down() {
    let mut wrong = Vec::new();
    for (module, deps) in graph() {
        let Some(top) = module.first() else { continue };
        let Some(here) = floor(top) else { continue };
        for dep in deps {
            let there_top = &dep[0];
            if there_top == top {
                continue;
            }
            let there = floor(there_top).unwrap_or(u32::MAX);
            if there >= here {
                wrong.push(format!(
                    "{} (floor {here}) imports {} (floor {there})",
                    name(&module),
                    name(&dep)
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports that do not point down:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn no_file_imports_a_file_that_imports_it_back() {
    let graph = graph();
    // Tarjan's strongly connected components: any with two or more files
    // is a circle.
    struct State<'a> {
        graph: &'a BTreeMap<ModPath, BTreeSet<ModPath>>,
        index: BTreeMap<&'a ModPath, usize>,
        low: BTreeMap<&'a ModPath, usize>,
        stack: Vec<&'a ModPath>,
        on_stack: BTreeSet<&'a ModPath>,
        next: usize,
        circles: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a ModPath) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on_stack.insert(v);
        let graph = s.graph;
        for w in graph.get(v).into_iter().flatten() {
            let Some((w, _)) = graph.get_key_value(w) else {
                continue;
            };
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(name(w));
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.circles.push(component);
            }
        }
    }
    let mut state = State {
        graph: &graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        circles: Vec::new(),
    };
    for v in graph.keys() {
        if !state.index.contains_key(v) {
            visit(&mut state, v);
        }
    }
    assert!(
        state.circles.is_empty(),
        "files that import each other (directly or around a ring): {:?}",
        state.circles
    );
}

#[test]
fn no_file_is_over_a_thousand_lines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    assert!(files.len() > 50, "only {} files read", files.len());
    let mut over = Vec::new();
    for file in &files {
        let rel = file
            .strip_prefix(&root)
            .expect("file under root")
            .to_string_lossy()
            .replace('\\', "/");
        let lines = std::fs::read_to_string(file)
            .expect("read source")
            .lines()
            .count();
        if lines > MAX_LINES {
            over.push(format!("host/src/{rel}: {lines} lines"));
        }
    }
    assert!(
        over.is_empty(),
        "files over {MAX_LINES} lines (split them by concern):\n{}",
        over.join("\n")
    );
}

#[test]
fn the_reader_sees_real_imports() {
    // The parser must see the arrows that do exist, or the tests above
    // would pass on an empty graph.
    let graph = graph();
    let has = |from: &str, to: &str| {
        let from: ModPath = from.split('/').map(String::from).collect();
        let to: ModPath = to.split('/').map(String::from).collect();
        graph.get(&from).is_some_and(|d| d.contains(&to))
    };
    assert!(has("writer/perform", "action"), "{graph:?}");
    assert!(has("action", "action/actions"));
    assert!(has("controller/manager", "controller/reconciler"));
    assert!(has("plugin/loaded", "plugin/runtime"));
    assert!(has("app/ops", "app/reporting"));
    assert!(has("app", "change/shadow"));
    assert!(graph.len() > 50, "only {} files read", graph.len());
}

/// kube-sim is linked for `rekon plugin explore` alone: no other module of
/// the host may use it, so `rekon run` never depends on it.
#[test]
fn only_the_explorer_uses_kube_sim() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let offenders: Vec<String> = files
        .iter()
        .filter(|f| module_of(&root, f).first().map(String::as_str) != Some("explore"))
        // A `tests.rs` beside a module is its `#[cfg(test)] mod tests;`.
        .filter(|f| f.file_name().is_none_or(|n| n != "tests.rs"))
        .filter(|f| {
            let source = std::fs::read_to_string(f).expect("read a source file");
            code_of(&source).contains("kube_sim")
        })
        .map(|f| f.strip_prefix(&root).unwrap_or(f).display().to_string())
        .collect();
    assert!(
        offenders.is_empty(),
        "only host/src/explore may use kube_sim (rekon run must never depend on it): {offenders:?}"
    );
}
