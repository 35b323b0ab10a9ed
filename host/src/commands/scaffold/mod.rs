//! `rekon plugin new`: a plugin project that builds outside this
//! repository with its language's own tools — a Rust crate (`rust.rs`), a
//! TypeScript package (`typescript.rs`) or a Python project (`python.rs`),
//! each generated from the same plugin name and primary (`project.rs`),
//! with admission webhooks on request (`admission.rs`).
//!
//! ```no_run
//! use rekon::commands::scaffold::{Scaffold, SdkSource};
//! let dir = Scaffold::new("cm-stamper", SdkSource::Path("/src/rekon/guest-sdk".into()))
//!     .primary("v1/ConfigMap")?
//!     .write("/tmp".as_ref())?;
//! assert!(dir.join("Cargo.toml").is_file());
//! # Ok::<(), rekon::commands::scaffold::ScaffoldError>(())
//! ```

mod admission;
mod project;
mod python;
mod rust;
mod typescript;

use std::path::{Path, PathBuf};

use project::{Primary, Project};

/// Why a crate could not be scaffolded.
#[derive(Debug, thiserror::Error)]
pub enum ScaffoldError {
    /// The plugin name is not a DNS label.
    #[error("plugin name {0:?} is not a DNS label (lowercase letters, digits and '-', at most 63)")]
    Name(String),
    /// `--primary` is not `GROUP/VERSION/KIND` (or `VERSION/KIND` for the core group).
    #[error("primary {0:?} is not GROUP/VERSION/KIND (or VERSION/KIND for the core group): {1}")]
    Primary(String, &'static str),
    /// The SDK cannot be taken from where it was asked to be.
    #[error("{0}")]
    Sdk(String),
    /// The target directory exists.
    #[error("{0} already exists; choose another name or --dir")]
    Exists(PathBuf),
    /// Writing a file failed.
    #[error("failed to write {path}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// Where the generated crate takes `rekon-sdk` from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SdkSource {
    /// A checkout's `guest-sdk` directory.
    Path(PathBuf),
    /// A git repository holding the rekon workspace.
    Git(String),
}

/// The language of the generated plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Lang {
    /// A Rust crate on `rekon-sdk` (`guest-sdk/`).
    #[default]
    Rust,
    /// An npm package on `@rekon/sdk` (`sdk/typescript/`).
    TypeScript,
    /// A Python project on `rekon_sdk` (`sdk/python/`).
    Python,
}

impl Lang {
    /// The SDK's directory in a rekon checkout.
    #[must_use]
    pub fn sdk_dir(self) -> &'static str {
        match self {
            Lang::Rust => "guest-sdk",
            Lang::TypeScript => "sdk/typescript",
            Lang::Python => "sdk/python",
        }
    }
}

/// What to generate.
#[derive(Debug, Clone)]
pub struct Scaffold {
    project: Project,
    sdk: SdkSource,
    lang: Lang,
}

impl Scaffold {
    /// A plugin `name` whose primary is a ConfigMap.
    #[must_use]
    pub fn new(name: &str, sdk: SdkSource) -> Self {
        Self {
            project: Project {
                name: name.to_owned(),
                primary: Primary::parse("v1/ConfigMap").expect("ConfigMap is built in"),
                admission: false,
            },
            sdk,
            lang: Lang::Rust,
        }
    }

    /// The language of the project (Rust by default).
    #[must_use]
    pub fn lang(mut self, lang: Lang) -> Self {
        self.lang = lang;
        self
    }

    /// Whether the plugin also admits its objects (a validating and a
    /// mutating webhook, with a test).
    #[must_use]
    pub fn admission(mut self, admission: bool) -> Self {
        self.project.admission = admission;
        self
    }

    /// The primary resource: `GROUP/VERSION/KIND`, or `VERSION/KIND` for the
    /// core group. A built-in kind is used through its k8s-openapi type; any
    /// other kind becomes a custom resource the plugin defines, with a CRD.
    ///
    /// # Errors
    /// [`ScaffoldError::Primary`] when the text is not a resource.
    pub fn primary(mut self, gvk: &str) -> Result<Self, ScaffoldError> {
        self.project.primary =
            Primary::parse(gvk).map_err(|why| ScaffoldError::Primary(gvk.to_owned(), why))?;
        Ok(self)
    }

    /// Writes the crate into `parent/<name>` and returns that directory.
    ///
    /// # Errors
    /// An invalid name, an existing directory, or an I/O error.
    pub fn write(&self, parent: &Path) -> Result<PathBuf, ScaffoldError> {
        if !rekon_rules::registration::is_dns_label(&self.project.name) {
            return Err(ScaffoldError::Name(self.project.name.clone()));
        }
        let dir = parent.join(&self.project.name);
        if dir.exists() {
            return Err(ScaffoldError::Exists(dir));
        }
        let files: Vec<(String, String)> = match self.lang {
            Lang::Rust => self
                .files()
                .into_iter()
                .map(|(path, text)| (path.to_owned(), text))
                .collect(),
            Lang::TypeScript | Lang::Python => {
                let SdkSource::Path(sdk) = &self.sdk else {
                    return Err(ScaffoldError::Sdk(format!(
                        "the {:?} SDK is not published; pass --sdk-path PATH/TO/REKON/{}",
                        self.lang,
                        self.lang.sdk_dir()
                    )));
                };
                if self.lang == Lang::TypeScript {
                    typescript::files(&self.project, sdk)
                } else {
                    python::files(&self.project, sdk)
                }
            }
        };
        for (path, text) in files {
            let path = dir.join(path);
            let write = || {
                std::fs::create_dir_all(path.parent().unwrap_or(&dir))?;
                std::fs::write(&path, text)
            };
            write().map_err(|source| ScaffoldError::Write {
                path: path.clone(),
                source,
            })?;
        }
        Ok(dir)
    }

    /// The files of the crate, relative to its directory.
    #[must_use]
    pub fn files(&self) -> Vec<(&'static str, String)> {
        let sdk = match &self.sdk {
            SdkSource::Path(p) => format!("{{ path = {:?} }}", p.display().to_string()),
            SdkSource::Git(url) => format!("{{ git = {url:?} }}"),
        };
        rust::files(&self.project, &sdk)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_crate_stands_alone() {
        let s = Scaffold::new(
            "cm-stamper",
            SdkSource::Git("https://example.com/rekon".into()),
        );
        let files = s.files();
        let cargo = &files[0].1;
        assert!(cargo.contains("\n[workspace]\n"), "{cargo}");
        assert!(!cargo.contains("workspace = true"), "{cargo}");
        assert!(cargo.contains(r#"rekon-sdk = { git = "https://example.com/rekon" }"#));
        assert!(cargo.contains("[profile.release]"));
        let readme = &files[3].1;
        let first = readme
            .lines()
            .find(|l| l.starts_with("rustup") || l.starts_with("cargo"));
        assert_eq!(
            first.map(|l| l.split('#').next().unwrap_or_default().trim()),
            Some("rustup target add wasm32-wasip2")
        );
        assert!(files[1].1.contains("pub struct CmStamperPlugin;"));
    }

    #[test]
    fn typescript_and_python_projects_depend_on_the_sdk_by_path_only() {
        let dir = tempfile::tempdir().unwrap();
        let ts = Scaffold::new("cm-ts", SdkSource::Path("/rekon/sdk/typescript".into()))
            .lang(Lang::TypeScript)
            .write(dir.path())
            .unwrap();
        let package = std::fs::read_to_string(ts.join("package.json")).unwrap();
        assert!(
            package.contains(r#""@rekon/sdk": "file:/rekon/sdk/typescript""#),
            "{package}"
        );
        assert!(
            package.contains("--wit /rekon/sdk/typescript/wit"),
            "{package}"
        );
        assert_eq!(
            std::fs::read_to_string(ts.join(".npmrc"))
                .unwrap()
                .lines()
                .last(),
            Some("install-links=true")
        );
        assert!(ts.join("src/component.ts").is_file() && ts.join("test/plugin.test.ts").is_file());
        // Exploring without a scenario is one npm script away.
        let scripts: serde_json::Value = serde_json::from_str(&package).unwrap();
        assert_eq!(
            scripts["scripts"]["explore"],
            "rekon plugin explore dist/cm_ts.wasm --max-plans 40 --out explore-out"
        );
        assert!(
            scripts["scripts"]["explore:scenario"]
                .as_str()
                .is_some_and(|s| s.contains("--scenario explore/scenario.yaml")),
            "{package}"
        );
        let py = Scaffold::new("pool-py", SdkSource::Path("/rekon/sdk/python".into()))
            .lang(Lang::Python)
            .primary("widgets.example.com/v1/Widget")
            .unwrap()
            .write(dir.path())
            .unwrap();
        let pyproject = std::fs::read_to_string(py.join("pyproject.toml")).unwrap();
        assert!(
            pyproject.contains("rekon-sdk @ file:///rekon/sdk/python"),
            "{pyproject}"
        );
        assert!(py.join("pool_py.py").is_file() && py.join("crd.json").is_file());
        // Every README shows exploring without a scenario.
        let rust = Scaffold::new("cm-rs", SdkSource::Path("/rekon/guest-sdk".into()))
            .write(dir.path())
            .unwrap();
        for (project, wasm) in [
            (&rust, "target/wasm32-wasip2/release/cm_rs.wasm"),
            (&ts, "dist/cm_ts.wasm"),
            (&py, "dist/pool_py.wasm"),
        ] {
            let readme = std::fs::read_to_string(project.join("README.md")).unwrap();
            let free = format!("rekon plugin explore {wasm} --max-plans 40");
            assert!(
                readme.contains(&free) || readme.contains("npm run explore "),
                "{readme}"
            );
        }
        let git =
            Scaffold::new("x", SdkSource::Git("https://example.com/r".into())).lang(Lang::Python);
        assert!(matches!(git.write(dir.path()), Err(ScaffoldError::Sdk(_))));
    }

    #[test]
    fn admission_adds_the_webhooks_and_their_test_in_each_language() {
        let dir = tempfile::tempdir().unwrap();
        let sdk = |d: &str| SdkSource::Path(format!("/rekon/{d}").into());
        let read = |p: PathBuf| std::fs::read_to_string(p).unwrap();
        for admission in [false, true] {
            let rs = Scaffold::new(&format!("rs-{admission}"), sdk("guest-sdk"))
                .admission(admission)
                .write(dir.path())
                .unwrap();
            let lib = read(rs.join("src/lib.rs"));
            assert_eq!(lib.contains("impl Admission for"), admission, "{lib}");
            let export = if admission {
                "Plugin, admission);"
            } else {
                "Plugin);"
            };
            assert!(lib.contains(export), "{lib}");
            assert_eq!(rs.join("tests/admission.rs").is_file(), admission);

            let ts = Scaffold::new(&format!("ts-{admission}"), sdk("sdk/typescript"))
                .lang(Lang::TypeScript)
                .admission(admission)
                .write(dir.path())
                .unwrap();
            let component = read(ts.join("src/component.ts"));
            assert_eq!(
                component.contains("export const admission = exportAdmission(handlers);"),
                admission,
                "{component}"
            );
            assert_eq!(ts.join("src/admission.ts").is_file(), admission);
            assert_eq!(ts.join("test/admission.test.ts").is_file(), admission);

            let py = Scaffold::new(&format!("py-{admission}"), sdk("sdk/python"))
                .lang(Lang::Python)
                .admission(admission)
                .write(dir.path())
                .unwrap();
            let module = read(py.join(format!("py_{admission}.py")));
            assert_eq!(
                module.contains("    Admission = export_admission(admission)\n"),
                admission,
                "{module}"
            );
            assert_eq!(module.contains("@admission.mutate(KIND"), admission);
            assert_eq!(py.join("tests/test_admission.py").is_file(), admission);
            assert_eq!(
                read(py.join("README.md")).contains("## Admission"),
                admission
            );
        }
    }

    #[test]
    fn an_invalid_name_or_existing_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let s = Scaffold::new("Bad_Name", SdkSource::Path("/sdk".into()));
        assert!(matches!(s.write(dir.path()), Err(ScaffoldError::Name(_))));
        let s = Scaffold::new("ok", SdkSource::Path("/sdk".into()));
        s.write(dir.path()).unwrap();
        assert!(matches!(s.write(dir.path()), Err(ScaffoldError::Exists(_))));
    }
}
