//! The hand-written reference check (`test_fanout::reference`) against its
//! authority, `oci-spec`'s `Reference::from_str`: the same result (registry,
//! repository, tag, digest) or the same error on every string of a
//! generated corpus and on chosen cases.

use std::str::FromStr;

use oci_spec::distribution::Reference;
use test_fanout::reference::{Parsed, parse};

fn authority(s: &str) -> Result<Parsed, oci_spec::distribution::ParseError> {
    Reference::from_str(s).map(|r| Parsed {
        registry: r.registry().to_owned(),
        repository: r.repository().to_owned(),
        tag: r.tag().map(str::to_owned),
        digest: r.digest().map(str::to_owned),
    })
}

fn agree(s: &str) {
    assert_eq!(parse(s), authority(s), "{s:?}");
}

/// Every string of up to `len` characters over `alphabet`.
fn every(alphabet: &[char], len: usize, mut each: impl FnMut(&str)) {
    let mut current = vec![String::new()];
    for _ in 0..len {
        let mut next = Vec::with_capacity(current.len() * alphabet.len());
        for s in &current {
            for c in alphabet {
                let mut t = s.clone();
                t.push(*c);
                each(&t);
                next.push(t);
            }
        }
        current = next;
    }
}

#[test]
fn every_short_string_parses_as_oci_spec_parses_it() {
    agree("");
    let mut n = 0;
    // Each class of the grammar: lowercase, uppercase, digit, and every
    // separator it knows.
    every(&['a', 'B', '0', '.', '_', '-', ':', '/', '@'], 5, |s| {
        agree(s);
        n += 1;
    });
    every(&['a', '.', '-', '_', ':', '/'], 7, |s| {
        agree(s);
        n += 1;
    });
    assert!(n > 300_000, "{n}");
}

fn chosen() -> Vec<String> {
    let hex = |n: usize| "0123456789abcdef".repeat(8)[..n].to_owned();
    vec![
        "busybox".to_owned(),
        "busybox:1.36".to_owned(),
        "docker.io/library/busybox:latest".to_owned(),
        "index.docker.io/foo".to_owned(),
        "localhost/app".to_owned(),
        "localhost:5000/team/app:v2".to_owned(),
        "Registry.Example.com:443/a__b/c--d/e.f:T_1.2-x".to_owned(),
        "a/b___c".to_owned(),
        format!("busybox@sha256:{}", hex(64)),
        format!("busybox:1@sha256:{}", hex(64)),
        format!("busybox@sha256:{}", hex(63)),
        format!("busybox@sha384:{}", hex(96)),
        format!("busybox@sha512:{}", hex(128)),
        format!("busybox@md5:{}", hex(32)),
        format!("busybox@sha256:{}", hex(31)),
        format!("busybox@sha256+b64.x:{}", hex(64)),
        format!("busybox@sha256:{}@x", hex(64)),
        format!("busybox:{}", "t".repeat(128)),
        format!("busybox:{}", "t".repeat(129)),
        format!("a/{}", "b".repeat(253)),
        format!("a/{}", "b".repeat(254)),
        format!("example.com/{}", "b".repeat(256)),
        // Non-ASCII: handed to oci-spec itself.
        "busybox:é".to_owned(),
        "busybox:½".to_owned(),
        "bü/x".to_owned(),
    ]
}

#[test]
fn chosen_references_parse_as_oci_spec_parses_them() {
    for case in &chosen() {
        agree(case);
    }
}

/// `parse`'s answer on one line: `registry|repository|tag|digest`, or
/// `error: <message>`.
fn answer(s: &str) -> String {
    match parse(s) {
        Ok(p) => format!(
            "{}|{}|{}|{}",
            p.registry,
            p.repository,
            p.tag.unwrap_or_default(),
            p.digest.unwrap_or_default()
        ),
        Err(e) => format!("error: {e}"),
    }
}

/// The TypeScript port's parser is held to this one's answers: its test
/// (`plugins/test-fanout-ts/test/admission.test.ts`) reads this table.
#[test]
fn the_typescript_ports_table_holds_this_parsers_answers() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../test-fanout-ts/test/references.json"
    );
    let mut inputs = vec![String::new()];
    every(&['a', 'B', '0', '.', '_', '-', ':', '/', '@'], 3, |s| {
        inputs.push(s.to_owned());
    });
    inputs.extend(chosen());
    let lines: Vec<String> = inputs
        .iter()
        .map(|s| serde_json::to_string(&[s.clone(), answer(s)]).unwrap())
        .collect();
    let table = format!("[\n{}\n]\n", lines.join(",\n"));
    if std::env::var_os("REKON_BLESS").is_some() {
        std::fs::write(path, &table).expect("table written");
    }
    let checked_in = std::fs::read_to_string(path).unwrap_or_else(|e| {
        panic!(
            "{path}: {e}; write it with REKON_BLESS=1 cargo test -p test-fanout --test reference"
        )
    });
    assert!(
        checked_in == table,
        "{path} is not this parser's answers: rewrite it with REKON_BLESS=1 cargo test -p test-fanout --test reference"
    );
}
