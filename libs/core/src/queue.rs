//! Queue names. A name is 1-200 bytes of `[A-Za-z0-9._:-]`; a template (`inbox:*`) ends in
//! one `*` and gives the config of every queue whose name extends its prefix.

use std::borrow::{Borrow, Cow};
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{Error, excerpt};
use crate::text::is_queue_char;

/// The longest queue name, in bytes.
pub const MAX_QUEUE_NAME_BYTES: usize = 200;
const RULE: &str = "must be 1-200 bytes of [A-Za-z0-9._:-] (a template ends in '*')";
/// What a queue's default dead-letter queue adds to its name, and a template family's to its
/// (`inbox:*.dlq` holds the dead-letter queues of `inbox:*`'s queues).
pub const DEAD_LETTER_SUFFIX: &str = ".dlq";

/// A validated queue name or template.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct QueueName(String);

impl QueueName {
    /// Parses a name given in the field `queue`.
    pub fn parse(input: &str) -> Result<QueueName, Error> {
        QueueName::parse_field(input, "queue")
    }

    /// Parses a name given in another field, e.g. `name` or `advance.to`.
    pub fn parse_field(input: &str, field: &str) -> Result<QueueName, Error> {
        check(input, field)?;
        Ok(QueueName(input.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn is_template(&self) -> bool {
        self.0.ends_with('*')
    }

    /// The part before the `*` of a template; `None` for a plain name.
    pub fn template_prefix(&self) -> Option<&str> {
        self.0.strip_suffix('*')
    }

    /// Whether this template covers `name`: a plain name that extends the prefix by 1+ chars.
    pub fn template_matches(&self, name: &QueueName) -> bool {
        match self.template_prefix() {
            Some(prefix) => {
                !name.is_template() && name.0.len() > prefix.len() && name.0.starts_with(prefix)
            }
            None => false,
        }
    }

    /// `<name>.dlq`, the dead-letter queue used when the config names none.
    pub fn dead_letter_default(&self) -> Result<QueueName, Error> {
        if self.is_template() {
            return Err(Error::invalid(
                "queue",
                format!(
                    "template {} has no dead-letter queue of its own; each matching queue uses <name>.dlq",
                    excerpt(&self.0)
                ),
            ));
        }
        let name = format!("{}{DEAD_LETTER_SUFFIX}", self.0);
        if name.len() > MAX_QUEUE_NAME_BYTES {
            return Err(Error::invalid(
                "queue",
                format!(
                    "its default dead-letter queue <name>.dlq would be {} bytes, over 200: use a name of at most {} bytes, or configure dead_letter_queue",
                    name.len(),
                    MAX_QUEUE_NAME_BYTES - DEAD_LETTER_SUFFIX.len()
                ),
            ));
        }
        Ok(QueueName(name))
    }

    /// Whether the name is that of a default dead-letter queue, `<name>.dlq`.
    pub fn is_default_dead_letter(&self) -> bool {
        self.0.ends_with(DEAD_LETTER_SUFFIX)
    }

    /// Whether the default dead-letter queue `<name>.dlq` can exist: for a template, that of
    /// the shortest queue it matches. A queue without one could never dead-letter an event.
    pub fn check_dead_letter_room(&self) -> Result<(), Error> {
        let Some(prefix) = self.template_prefix() else {
            return self.dead_letter_default().map(drop);
        };
        let shortest = prefix.len() + 1 + DEAD_LETTER_SUFFIX.len();
        if shortest > MAX_QUEUE_NAME_BYTES {
            return Err(Error::invalid(
                "queue",
                format!(
                    "the default dead-letter queue <name>.dlq of every queue this template matches would be over 200 bytes: use a prefix of at most {} bytes, or configure dead_letter_queue",
                    MAX_QUEUE_NAME_BYTES - DEAD_LETTER_SUFFIX.len() - 1
                ),
            ));
        }
        Ok(())
    }
}

fn check(input: &str, field: &str) -> Result<(), Error> {
    if input.is_empty() {
        return Err(Error::invalid(
            field,
            format!("{RULE}, got an empty string"),
        ));
    }
    if input.len() > MAX_QUEUE_NAME_BYTES {
        return Err(Error::invalid(
            field,
            format!("{RULE}, got {} bytes", input.len()),
        ));
    }
    let body = input.strip_suffix('*').unwrap_or(input);
    if let Some((at, bad)) = body.char_indices().find(|&(_, c)| !is_queue_char(c)) {
        let detail = if bad == '*' {
            " (only as the last character)"
        } else {
            ""
        };
        return Err(Error::invalid(
            field,
            format!("{RULE}, got {bad:?} at byte {at}{detail}"),
        ));
    }
    Ok(())
}

impl fmt::Display for QueueName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for QueueName {
    type Err = Error;

    fn from_str(input: &str) -> Result<QueueName, Error> {
        QueueName::parse(input)
    }
}

impl TryFrom<String> for QueueName {
    type Error = Error;

    fn try_from(input: String) -> Result<QueueName, Error> {
        check(&input, "queue")?;
        Ok(QueueName(input))
    }
}

impl From<QueueName> for String {
    fn from(name: QueueName) -> String {
        name.0
    }
}

impl Borrow<str> for QueueName {
    fn borrow(&self) -> &str {
        &self.0
    }
}

/// `queue`'s family: what metrics label it with and the status page sums it under, so that
/// per-user queues (`inbox:alice`) count under their template (`inbox:*`). A queue a
/// template covers (it extends the template's prefix by at least one character) gets the
/// template's name; with several, the most specific (longest prefix). The dead-letter queue
/// of a covered queue (`inbox:alice.dlq`) gets `<template>.dlq` (`inbox:*.dlq`), so dead
/// letters do not count as its family's backlog. Any other queue is named as it is, and so is
/// a template (`inbox:*`). Entries of `templates` that do not end in `*` are ignored.
pub fn queue_family<'a, T>(queue: &'a str, templates: T) -> Cow<'a, str>
where
    T: IntoIterator<Item = &'a str> + Clone,
{
    // The dead-letter rule first: `inbox:alice.dlq` also extends `inbox:`.
    if let Some(stem) = queue.strip_suffix(DEAD_LETTER_SUFFIX)
        && let Some(template) = covering_template(stem, templates.clone())
    {
        return Cow::Owned(format!("{template}{DEAD_LETTER_SUFFIX}"));
    }
    Cow::Borrowed(covering_template(queue, templates).unwrap_or(queue))
}

fn covering_template<'a>(
    queue: &str,
    templates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    if queue.ends_with('*') {
        return None;
    }
    templates
        .into_iter()
        .filter_map(|t| t.strip_suffix('*').map(|prefix| (t, prefix)))
        .filter(|(_, prefix)| queue.len() > prefix.len() && queue.starts_with(prefix))
        .max_by_key(|(_, prefix)| prefix.len())
        .map(|(template, _)| template)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(text: &str) -> QueueName {
        QueueName::parse(text).expect("valid name")
    }

    #[test]
    fn valid_names() {
        for good in [
            "a",
            "orders",
            "p.stage-1",
            "inbox:alice_01",
            "inbox:*",
            "*",
            &"q".repeat(200),
        ] {
            assert_eq!(name(good).as_str(), good);
        }
        assert!(name("inbox:*").is_template());
        assert!(!name("inbox:a").is_template());
    }

    #[test]
    fn invalid_names_say_what_is_valid() {
        let cases = [
            (
                "",
                "queue: must be 1-200 bytes of [A-Za-z0-9._:-] (a template ends in '*'), got an empty string",
            ),
            (
                &"q".repeat(203),
                "queue: must be 1-200 bytes of [A-Za-z0-9._:-] (a template ends in '*'), got 203 bytes",
            ),
            (
                "a b",
                "queue: must be 1-200 bytes of [A-Za-z0-9._:-] (a template ends in '*'), got ' ' at byte 1",
            ),
            (
                "a>",
                "queue: must be 1-200 bytes of [A-Za-z0-9._:-] (a template ends in '*'), got '>' at byte 1",
            ),
            (
                "a*b",
                "queue: must be 1-200 bytes of [A-Za-z0-9._:-] (a template ends in '*'), got '*' at byte 1 (only as the last character)",
            ),
            (
                "a**",
                "queue: must be 1-200 bytes of [A-Za-z0-9._:-] (a template ends in '*'), got '*' at byte 1 (only as the last character)",
            ),
        ];
        for (input, message) in cases {
            assert_eq!(
                QueueName::parse(input).expect_err(input).to_string(),
                message
            );
        }
        let err = QueueName::parse_field("bad name", "advance.to").expect_err("space");
        assert_eq!(err.field(), "advance.to");
    }

    #[test]
    fn families() {
        let templates: Vec<String> = ["inbox:*", "inbox:vip:*", "plain", "*"]
            .into_iter()
            .map(String::from)
            .collect();
        let only_inbox = vec!["inbox:*".to_owned()];
        let table: [(&str, &[String], &str); 12] = [
            ("inbox:alice", &only_inbox, "inbox:*"),
            ("inbox:a", &only_inbox, "inbox:*"),
            // The bare prefix is not covered (a template needs 1+ more characters).
            ("inbox:", &only_inbox, "inbox:"),
            ("outbox:alice", &only_inbox, "outbox:alice"),
            ("orders.validate", &only_inbox, "orders.validate"),
            ("inbox:alice.dlq", &only_inbox, "inbox:*.dlq"),
            ("orders.dlq", &only_inbox, "orders.dlq"),
            ("inbox:*", &only_inbox, "inbox:*"),
            ("anything", &[], "anything"),
            // The most specific template wins, whatever the order.
            ("inbox:vip:bob", &templates, "inbox:vip:*"),
            ("inbox:bob", &templates, "inbox:*"),
            // The catch-all template covers everything else; "plain" is no template.
            ("plain", &templates, "*"),
        ];
        for (queue, templates, family) in table {
            assert_eq!(
                queue_family(queue, templates.iter().map(String::as_str)),
                family,
                "{queue} with {templates:?}"
            );
        }
    }

    #[test]
    fn template_matching() {
        let template = name("inbox:*");
        assert!(template.template_matches(&name("inbox:alice")));
        assert!(template.template_matches(&name("inbox:a.dlq")));
        assert!(!template.template_matches(&name("inbox:")));
        assert!(!template.template_matches(&name("inbox:x*")));
        assert!(!template.template_matches(&name("outbox:alice")));
        assert!(!name("inbox:alice").template_matches(&name("inbox:alice")));
        assert!(name("*").template_matches(&name("anything")));
        assert_eq!(template.template_prefix(), Some("inbox:"));
    }

    #[test]
    fn dead_letter_default() {
        assert_eq!(name("orders").dead_letter_default(), Ok(name("orders.dlq")));
        assert!(name(&"q".repeat(196)).dead_letter_default().is_ok());
        let err = name(&"q".repeat(197))
            .dead_letter_default()
            .expect_err("too long");
        assert!(err.to_string().contains("201 bytes, over 200"), "{err}");
        assert!(name("inbox:*").dead_letter_default().is_err());
    }

    #[test]
    fn dead_letter_room() {
        assert!(name(&"q".repeat(196)).check_dead_letter_room().is_ok());
        assert!(name(&"q".repeat(197)).check_dead_letter_room().is_err());
        assert!(
            name(&format!("{}*", "t".repeat(195)))
                .check_dead_letter_room()
                .is_ok()
        );
        let err = name(&format!("{}*", "t".repeat(196)))
            .check_dead_letter_room()
            .expect_err("no match could dead-letter");
        assert!(err.to_string().contains("at most 195 bytes"), "{err}");
    }
}
