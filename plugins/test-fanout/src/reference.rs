//! Image references, checked without building a regex.
//!
//! `oci-spec`'s `Reference::from_str` (the distribution project's grammar)
//! is the authority, but it builds its regex (Unicode classes, a 20 MiB
//! size limit) on first use, and a plugin gets a fresh instance per call:
//! measured in the host (`cargo bench -p rekon-host --bench admission`,
//! debug host, loaded machine), a validating review took p50 120 ms with it
//! against 0.45 ms for the widgets plugin. So [`parse`] walks the same
//! grammar by hand for ASCII input and hands anything else (a non-ASCII
//! tag, which the grammar's Unicode `\w` admits) to `oci-spec` itself. The
//! results and errors are `oci-spec`'s: `tests/reference.rs` checks them
//! against `Reference::from_str` on every string of a generated corpus.
//!
//! The grammar (anchored; `oci-spec` 0.10's `REFERENCE_REGEXP`):
//!
//! ```text
//! reference  := name [":" tag] ["@" digest]
//! name       := [domain "/"] component ("/" component)*
//! domain     := label ("." label)* [":" [0-9]+]     label := [a-zA-Z0-9] | [a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]
//! component  := [a-z0-9]+ (("." | "_" | "__" | "-"*) [a-z0-9]+)*
//! tag        := \w [\w.-]{0,127}
//! digest     := [A-Za-z][A-Za-z0-9]* ([-_+.][A-Za-z][A-Za-z0-9]*)* ":" [0-9a-fA-F]{32,}
//! ```

use std::str::FromStr;

pub use oci_spec::distribution::ParseError;
use oci_spec::distribution::Reference;

/// The parts of a reference the plugin reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    /// `docker.io` when none is given (`index.docker.io` is read as it).
    pub registry: String,
    /// With `library/` for a Docker Hub name of one component.
    pub repository: String,
    /// The tag; `latest` when neither tag nor digest is given.
    pub tag: Option<String>,
    /// The digest (`sha256:…`).
    pub digest: Option<String>,
}

/// Parses `s` as `oci-spec`'s `Reference::from_str` does, with its errors.
///
/// # Errors
/// The `ParseError` `oci-spec` gives for `s`.
pub fn parse(s: &str) -> Result<Parsed, ParseError> {
    if !s.is_ascii() {
        return Reference::from_str(s).map(|r| Parsed {
            registry: r.registry().to_owned(),
            repository: r.repository().to_owned(),
            tag: r.tag().map(str::to_owned),
            digest: r.digest().map(str::to_owned),
        });
    }
    if s.is_empty() {
        return Err(ParseError::NameEmpty);
    }
    let (rest, digest) = match s.split_once('@') {
        Some((rest, digest)) => (rest, Some(digest)),
        None => (s, None),
    };
    // A ':' with no '/' after it cannot be a domain's port (a '/' follows
    // the domain): it starts the tag.
    let (name, tag) = match rest.rfind(':') {
        Some(i) if !rest[i..].contains('/') => (&rest[..i], Some(&rest[i + 1..])),
        _ => (rest, None),
    };
    if !is_name(name) || !tag.is_none_or(is_tag) || !digest.is_none_or(is_digest) {
        return Err(ParseError::ReferenceInvalidFormat);
    }
    let (registry, repository) = split_domain(name);
    if repository.len() > 255 {
        return Err(ParseError::NameTooLong);
    }
    if let Some(digest) = digest {
        let (algorithm, hex) = digest
            .split_once(':')
            .ok_or(ParseError::DigestInvalidFormat)?;
        let want = match algorithm {
            "sha256" => 64,
            "sha384" => 96,
            "sha512" => 128,
            _ => return Err(ParseError::DigestUnsupported),
        };
        if hex.len() != want {
            return Err(ParseError::DigestInvalidLength);
        }
    }
    let tag = match (tag, digest) {
        (None, None) => Some("latest"),
        (tag, _) => tag,
    };
    Ok(Parsed {
        registry,
        repository,
        tag: tag.map(str::to_owned),
        digest: digest.map(str::to_owned),
    })
}

fn is_name(name: &str) -> bool {
    let mut parts = name.split('/');
    let first = parts.next().unwrap_or_default();
    let rest: Vec<&str> = parts.collect();
    let all_components = is_component(first) && rest.iter().all(|c| is_component(c));
    let domain_first = !rest.is_empty() && is_domain(first) && rest.iter().all(|c| is_component(c));
    all_components || domain_first
}

fn is_component(c: &str) -> bool {
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let bytes = c.as_bytes();
    if !bytes.first().is_some_and(|&b| alnum(b)) || !bytes.last().is_some_and(|&b| alnum(b)) {
        return false;
    }
    // Every run of separators between alphanumerics: ".", "_", "__" or dashes.
    let mut i = 0;
    while i < bytes.len() {
        if alnum(bytes[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && !alnum(bytes[i]) {
            i += 1;
        }
        let run = &c[start..i];
        let ok = matches!(run, "." | "_" | "__") || run.bytes().all(|b| b == b'-');
        if !ok {
            return false;
        }
    }
    true
}

fn is_domain(d: &str) -> bool {
    let (host, port) = match d.split_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (d, None),
    };
    let label = |l: &str| {
        let b = l.as_bytes();
        !b.is_empty()
            && b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric()
            && b.iter().all(|&c| c.is_ascii_alphanumeric() || c == b'-')
    };
    host.split('.').all(label)
        && port.is_none_or(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// ASCII only (non-ASCII input goes to `oci-spec`): `\w` is `[A-Za-z0-9_]`.
fn is_tag(t: &str) -> bool {
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let b = t.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && word(b[0])
        && b.iter().all(|&c| word(c) || c == b'.' || c == b'-')
}

fn is_digest(d: &str) -> bool {
    let Some((algorithm, hex)) = d.split_once(':') else {
        return false;
    };
    let alpha_then_alnum = |part: &str| {
        let b = part.as_bytes();
        !b.is_empty() && b[0].is_ascii_alphabetic() && b.iter().all(u8::is_ascii_alphanumeric)
    };
    let algorithm_ok = algorithm.split(['-', '_', '+', '.']).all(alpha_then_alnum);
    algorithm_ok && hex.len() >= 32 && hex.bytes().all(|b| b.is_ascii_hexdigit())
}

/// `oci-spec`'s `split_domain`: the registry and the repository of a name.
fn split_domain(name: &str) -> (String, String) {
    let (mut domain, mut remainder) = match name.split_once('/') {
        Some((left, right)) if left.contains(['.', ':']) || left == "localhost" => {
            (left.to_owned(), right.to_owned())
        }
        _ => ("docker.io".to_owned(), name.to_owned()),
    };
    if domain == "index.docker.io" {
        domain = "docker.io".to_owned();
    }
    if domain == "docker.io" && !remainder.contains('/') {
        remainder = format!("library/{remainder}");
    }
    (domain, remainder)
}
