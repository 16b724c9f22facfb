//! The identities file: who can call the gateway, how each proves it, and what each may do.
//!
//! ```toml
//! [[identities]]
//! name = "orders-producer"
//! token_sha256 = "<hex SHA-256 of the token>"   # printf %s "$TOKEN" | sha256sum
//! # token_sha256 = ["<old>", "<new>"]           # several while a token is rotated
//! certificate_names = ["orders.example.com"]     # or a client certificate with this DNS name
//! grants = [{ role = "producer", queues = ["orders.*"] }]
//! quotas = { enqueue_rate = 1000, max_payload = "64KiB", max_queues = 10 }
//! ```
//!
//! Tokens are stored only as their hashes, so the file holds no secret. Every name, token
//! hash and certificate name is unique; a file with any invalid entry is refused whole.

use std::collections::HashMap;
use std::sync::Arc;

use cascade_core::units::serde_size;
use serde::Deserialize;

use crate::SecurityError;
use crate::grant::{Described, Grant, Permission, QueuePattern, Role};
use crate::quota::Quotas;

/// One identity: its name (in logs, the audit log and error messages), grants and quotas.
#[derive(Debug)]
pub struct Identity {
    pub name: String,
    pub grants: Vec<Grant>,
    pub quotas: Quotas,
}

impl Identity {
    pub fn allows(&self, permission: Permission, queue: &str) -> bool {
        self.grants.iter().any(|g| g.allows(permission, queue))
    }

    /// PERMISSION_DENIED naming the identity, the queue and the role missing.
    pub fn check(&self, permission: Permission, queue: &str) -> Result<(), SecurityError> {
        if self.allows(permission, queue) {
            return Ok(());
        }
        Err(SecurityError::PermissionDenied {
            identity: self.name.clone(),
            permission,
            queue: queue.to_owned(),
            grants: Described(&self.grants).to_string(),
        })
    }

    /// The patterns this identity administers.
    pub fn admin_patterns(&self) -> impl Iterator<Item = &QueuePattern> {
        self.grants
            .iter()
            .filter(|g| g.role == Role::Admin)
            .flat_map(|g| g.queues.iter())
    }
}

/// The identities of a file, found by token hash or certificate name.
#[derive(Debug, Default)]
pub struct Identities {
    by_token: HashMap<[u8; 32], Arc<Identity>>,
    by_certificate_name: HashMap<String, Arc<Identity>>,
    count: usize,
}

impl Identities {
    /// Parses and checks an identities file; errors name the entry and field
    /// (`identities[2].token_sha256`).
    pub fn parse(text: &str) -> Result<Identities, SecurityError> {
        let file: File = toml::from_str(text).map_err(|e| {
            SecurityError::invalid("identities file", e.message().to_owned() + &at(&e, text))
        })?;
        let mut identities = Identities::default();
        let mut names = HashMap::new();
        for (i, entry) in file.identities.into_iter().enumerate() {
            let field = |name: &str| format!("identities[{i}].{name}");
            if entry.name.trim().is_empty() {
                return Err(SecurityError::invalid(field("name"), "must not be empty"));
            }
            if let Some(first) = names.insert(entry.name.clone(), i) {
                return Err(SecurityError::invalid(
                    field("name"),
                    format!("'{}' is also the name of identities[{first}]", entry.name),
                ));
            }
            let hashes: Vec<String> = match entry.token_sha256 {
                None => Vec::new(),
                Some(Hashes::One(hex)) => vec![hex],
                Some(Hashes::Several(list)) => list,
            };
            let tokens = hashes
                .iter()
                .enumerate()
                .map(|(t, hex)| {
                    let name = match hashes.len() {
                        1 => "token_sha256".to_owned(),
                        _ => format!("token_sha256[{t}]"),
                    };
                    parse_sha256(hex, &field(&name)).map(|hash| (name, hash))
                })
                .collect::<Result<Vec<_>, _>>()?;
            if tokens.is_empty() && entry.certificate_names.is_empty() {
                return Err(SecurityError::invalid(
                    field("token_sha256"),
                    "an identity needs a token_sha256, certificate_names, or both",
                ));
            }
            let grants = entry
                .grants
                .into_iter()
                .enumerate()
                .map(|(g, grant)| grant.parse(&field(&format!("grants[{g}]"))))
                .collect::<Result<Vec<_>, _>>()?;
            let identity = Arc::new(Identity {
                name: entry.name,
                grants,
                quotas: entry.quotas.into(),
            });
            for (name, hash) in tokens {
                if identities
                    .by_token
                    .insert(hash, Arc::clone(&identity))
                    .is_some()
                {
                    return Err(SecurityError::invalid(
                        field(&name),
                        "is the token hash of another identity too (or twice of this one)",
                    ));
                }
            }
            for (n, name) in entry.certificate_names.into_iter().enumerate() {
                if name.is_empty() {
                    return Err(SecurityError::invalid(
                        field(&format!("certificate_names[{n}]")),
                        "must not be empty",
                    ));
                }
                let previous = identities
                    .by_certificate_name
                    .insert(name.to_ascii_lowercase(), Arc::clone(&identity));
                if previous.is_some() {
                    return Err(SecurityError::invalid(
                        field(&format!("certificate_names[{n}]")),
                        format!("'{name}' proves another identity too"),
                    ));
                }
            }
            identities.count += 1;
        }
        Ok(identities)
    }

    /// The identity whose token hashes to `hash`.
    pub fn by_token_hash(&self, hash: &[u8; 32]) -> Option<&Arc<Identity>> {
        self.by_token.get(hash)
    }

    /// The identity a client certificate with these DNS names proves (the first that does).
    pub fn by_certificate<'a>(
        &self,
        names: impl IntoIterator<Item = &'a str>,
    ) -> Option<&Arc<Identity>> {
        names
            .into_iter()
            .find_map(|name| self.by_certificate_name.get(&name.to_ascii_lowercase()))
    }

    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    identities: Vec<Entry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: String,
    token_sha256: Option<Hashes>,
    #[serde(default)]
    certificate_names: Vec<String>,
    #[serde(default)]
    grants: Vec<GrantEntry>,
    #[serde(default)]
    quotas: QuotasEntry,
}

/// One token hash, or several while a token is rotated.
#[derive(Deserialize)]
#[serde(untagged)]
enum Hashes {
    One(String),
    Several(Vec<String>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GrantEntry {
    role: Role,
    queues: Vec<String>,
}

impl GrantEntry {
    fn parse(self, field: &str) -> Result<Grant, SecurityError> {
        if self.queues.is_empty() {
            return Err(SecurityError::invalid(
                format!("{field}.queues"),
                "must name at least one queue pattern (orders.*, inbox:*, or * for every queue)",
            ));
        }
        let queues = self
            .queues
            .iter()
            .enumerate()
            .map(|(q, text)| QueuePattern::parse(text, &format!("{field}.queues[{q}]")))
            .collect::<Result<_, _>>()?;
        Ok(Grant {
            role: self.role,
            queues,
        })
    }
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct QuotasEntry {
    enqueue_rate: Option<u32>,
    max_payload: Option<Size>,
    max_queues: Option<u64>,
}

/// A size written like `64KiB`.
#[derive(Deserialize)]
struct Size(#[serde(with = "serde_size")] u64);

impl From<QuotasEntry> for Quotas {
    fn from(entry: QuotasEntry) -> Quotas {
        Quotas {
            enqueue_rate: entry.enqueue_rate,
            max_payload: entry.max_payload.map(|Size(bytes)| bytes),
            max_queues: entry.max_queues,
        }
    }
}

/// 64 hexadecimal digits, as `sha256sum` prints them.
fn parse_sha256(hex: &str, field: &str) -> Result<[u8; 32], SecurityError> {
    let bad = || {
        SecurityError::invalid(
            field,
            "must be the 64 hexadecimal digits of the token's SHA-256 (printf %s \"$TOKEN\" | sha256sum)",
        )
    };
    if hex.len() != 64 {
        return Err(bad());
    }
    let mut hash = [0u8; 32];
    for (byte, pair) in hash.iter_mut().zip(hex.as_bytes().chunks_exact(2)) {
        let pair = std::str::from_utf8(pair).map_err(|_| bad())?;
        *byte = u8::from_str_radix(pair, 16).map_err(|_| bad())?;
    }
    Ok(hash)
}

/// Where in `text` a TOML error is: ` (line N)`.
fn at(err: &toml::de::Error, text: &str) -> String {
    match err.span() {
        Some(span) => format!(" (line {})", text[..span.start].lines().count().max(1)),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token::token_sha256;

    fn file(entries: &str) -> Result<Identities, SecurityError> {
        Identities::parse(entries)
    }

    #[test]
    fn identities_are_found_by_token_hash_and_certificate_name() {
        let text = format!(
            r#"
[[identities]]
name = "orders-producer"
token_sha256 = "{}"
grants = [{{ role = "producer", queues = ["orders.*"] }}]
quotas = {{ enqueue_rate = 100, max_payload = "1KiB", max_queues = 3 }}

[[identities]]
name = "worker"
certificate_names = ["Worker.Example.com"]
grants = [{{ role = "consumer", queues = ["orders.*"] }}, {{ role = "admin", queues = ["*"] }}]
"#,
            token_sha256("s3cret")
        );
        let identities = file(&text).expect("valid");
        assert_eq!(identities.len(), 2);
        let hash = crate::token::sha256(b"s3cret");
        let producer = identities.by_token_hash(&hash).expect("by token");
        assert_eq!(producer.name, "orders-producer");
        assert_eq!(producer.quotas.max_payload, Some(1024));
        assert!(producer.allows(Permission::Produce, "orders.new"));
        let err = producer
            .check(Permission::Consume, "orders.new")
            .expect_err("a producer only");
        assert_eq!(
            err.to_string(),
            "identity 'orders-producer' may not consume from queue 'orders.new': it needs the consumer role on a pattern that matches it (its grants: producer on orders.*)"
        );
        let worker = identities
            .by_certificate(["other.example.com", "worker.example.com"])
            .expect("by certificate name, in any case");
        assert_eq!(worker.name, "worker");
        assert_eq!(worker.admin_patterns().count(), 1);
        assert!(identities.by_certificate(["nobody"]).is_none());
    }

    #[test]
    fn a_bad_entry_refuses_the_file_and_is_named() {
        let cases = [
            (
                "[[identities]]\nname = \"\"\ntoken_sha256 = \"00\"",
                "identities[0].name: must not be empty",
            ),
            (
                "[[identities]]\nname = \"a\"\ntoken_sha256 = \"xyz\"",
                "identities[0].token_sha256: must be the 64 hexadecimal digits",
            ),
            (
                "[[identities]]\nname = \"a\"",
                "identities[0].token_sha256: an identity needs",
            ),
            (
                "[[identities]]\nname = \"a\"\ncertificate_names = [\"a\"]\ngrants = [{ role = \"admin\", queues = [] }]",
                "identities[0].grants[0].queues: must name at least one",
            ),
            (
                "[[identities]]\nname = \"a\"\ncertificate_names = [\"a\"]\n[[identities]]\nname = \"a\"\ncertificate_names = [\"b\"]",
                "identities[1].name: 'a' is also the name of identities[0]",
            ),
            (
                "[[identities]]\nname = \"a\"\ncertificate_names = [\"a\"]\n[[identities]]\nname = \"b\"\ncertificate_names = [\"A\"]",
                "identities[1].certificate_names[0]: 'A' proves another identity too",
            ),
            (
                "[[identities]]\nname = \"a\"\ntoken = \"plain\"",
                "identities file: unknown field `token`",
            ),
        ];
        for (text, expected) in cases {
            let err = file(text).expect_err(text).to_string();
            assert!(err.starts_with(expected), "{text}:\n{err}");
        }
        let same = token_sha256("t");
        let twice = format!(
            "[[identities]]\nname = \"a\"\ntoken_sha256 = \"{same}\"\n[[identities]]\nname = \"b\"\ntoken_sha256 = \"{}\"",
            same.to_uppercase()
        );
        assert!(
            file(&twice)
                .expect_err("one token, two identities")
                .to_string()
                .starts_with("identities[1].token_sha256: is the token hash of another identity")
        );
    }

    #[test]
    fn a_rotated_token_and_its_successor_both_prove_the_identity() {
        let text = format!(
            "[[identities]]\nname = \"a\"\ntoken_sha256 = [\"{}\", \"{}\"]",
            token_sha256("old"),
            token_sha256("new")
        );
        let identities = file(&text).expect("valid");
        for token in [b"old".as_slice(), b"new"] {
            let hash = crate::token::sha256(token);
            assert_eq!(identities.by_token_hash(&hash).expect("found").name, "a");
        }
        let bad = format!(
            "[[identities]]\nname = \"a\"\ntoken_sha256 = [\"{}\", \"x\"]",
            token_sha256("old")
        );
        assert!(
            file(&bad)
                .expect_err("a bad second hash")
                .to_string()
                .starts_with("identities[0].token_sha256[1]: ")
        );
    }

    #[test]
    fn an_empty_file_has_no_identities() {
        assert!(file("").expect("valid").is_empty());
    }
}
