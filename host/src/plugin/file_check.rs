//! What a plugin file must pass before the registry compiles it
//! ([`FileCheck`], set by `rekon run --require-signatures` /
//! `--signature-key`), and where its signature file is.

use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What a plugin file must pass before it is compiled: given its path, its
/// bytes and the content of its signature file (`None`: there is none);
/// `Err` says why it is refused. The registry knows no keys: the check is
/// built above (`rekon run` verifies cosign blob signatures).
pub type FileCheck = Arc<dyn Fn(&Path, &[u8], Option<&[u8]>) -> Result<(), String> + Send + Sync>;

/// The signature file of plugin file `x.wasm`: `x.wasm.sig` (cosign's
/// `sign-blob --output-signature`).
#[must_use]
pub fn signature_file(plugin_file: &Path) -> PathBuf {
    let mut name = plugin_file.as_os_str().to_owned();
    name.push(".sig");
    PathBuf::from(name)
}

/// The file a signature file belongs to (see [`signature_file`]), if it
/// names a `.wasm` file that is not hidden.
pub(super) fn plugin_file_of_signature(signature: &Path) -> Option<PathBuf> {
    let name = signature.file_name()?.to_str()?.strip_suffix(".sig")?;
    (name.ends_with(".wasm") && !name.starts_with('.')).then(|| signature.with_file_name(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_file_sits_beside_its_plugin_file() {
        let sig = signature_file(Path::new("/p/chaos.wasm"));
        assert_eq!(sig, Path::new("/p/chaos.wasm.sig"));
        assert_eq!(
            plugin_file_of_signature(&sig).as_deref(),
            Some(Path::new("/p/chaos.wasm"))
        );
        assert_eq!(plugin_file_of_signature(Path::new("/p/.x.wasm.sig")), None);
        assert_eq!(plugin_file_of_signature(Path::new("/p/x.sig")), None);
    }
}
