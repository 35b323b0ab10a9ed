//! The widgets test plugin in each language (`admission.rs`,
//! `admission_objects.rs`): Rust (`tests/plugins/widgets`, `make
//! test-plugins`), TypeScript and Python (`tests/plugins/widgets-ts`,
//! `widgets-py`, `make sdk-plugins`), each in three builds: the default
//! one, the one that converts the Widget CRD between v1alpha1 and v1, and
//! the stricter one (sizes up to 5 instead of 10).

use std::path::PathBuf;

use crate::Paths;

/// The widgets plugin built in one language.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lang {
    /// `tests/plugins/widgets`.
    Rust,
    /// `tests/plugins/widgets-ts`.
    TypeScript,
    /// `tests/plugins/widgets-py`.
    Python,
}

/// One of the widgets' builds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Build {
    /// Validates sizes up to 10, defaults the tier, reconciles.
    Default,
    /// The CRD at v1alpha1 and v1, converted both ways.
    Conversion,
    /// Sizes up to 5.
    Strict,
}

impl Lang {
    /// The component of `build` in this language.
    ///
    /// # Panics
    /// When it is missing (naming the make target that builds it): a test
    /// without its plugin fails, never skips.
    #[must_use]
    pub fn component(self, paths: &Paths, build: Build) -> PathBuf {
        let sdk = paths.root.join("dist/sdk-plugins");
        let (path, target) = match (self, build) {
            (Lang::Rust, Build::Default) => {
                (paths.test_plugins.join("widgets.wasm"), "test-plugins")
            }
            (Lang::Rust, Build::Conversion) => (
                paths.test_plugins.join("widgets-conversion.wasm"),
                "test-plugins",
            ),
            (Lang::Rust, Build::Strict) => (
                paths.test_plugins.join("widgets-strict.wasm"),
                "test-plugins",
            ),
            (Lang::TypeScript, Build::Default) => (sdk.join("widgets_ts.wasm"), "sdk-plugins"),
            (Lang::TypeScript, Build::Conversion) => {
                (sdk.join("widgets_ts_conversion.wasm"), "sdk-plugins")
            }
            (Lang::TypeScript, Build::Strict) => {
                (sdk.join("widgets_ts_strict.wasm"), "sdk-plugins")
            }
            (Lang::Python, Build::Default) => (sdk.join("widgets_py.wasm"), "sdk-plugins"),
            (Lang::Python, Build::Conversion) => {
                (sdk.join("widgets_py_conversion.wasm"), "sdk-plugins")
            }
            (Lang::Python, Build::Strict) => (sdk.join("widgets_py_strict.wasm"), "sdk-plugins"),
        };
        crate::built(path, target)
    }
}
