//! Roles, the permissions they give, and the queue-name patterns they are granted on.
//!
//! A pattern is a queue name (`payments`), a prefix and a `*` (`orders.*`, `inbox:*`: every
//! name that starts with the prefix, templates and dead-letter queues included), or `*`
//! alone (every queue). Nothing is allowed unless a grant allows it.

use std::fmt;

use cascade_core::QueueName;
use serde::Deserialize;

use crate::SecurityError;

/// What an identity may do on the queues of a grant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Enqueue, and get, update and delete events.
    Producer,
    /// Take, complete and extend leases.
    Consumer,
    /// Create, delete and purge queues; apply pipelines; list and redrive dead letters.
    Admin,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Producer => "producer",
            Role::Consumer => "consumer",
            Role::Admin => "admin",
        }
    }
}

/// What a call needs on the queue it names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Permission {
    /// The producer role.
    Produce,
    /// The consumer role.
    Consume,
    /// The admin role.
    Administer,
    /// Any role: a queue's config and counts, a pipeline's definition.
    Read,
}

impl Permission {
    /// What the permission lets one do, to complete "may not … queue 'q'".
    pub(crate) fn verb(self) -> &'static str {
        match self {
            Permission::Produce => "produce to",
            Permission::Consume => "consume from",
            Permission::Administer => "administer",
            Permission::Read => "read",
        }
    }

    pub(crate) fn role_needed(self) -> &'static str {
        match self {
            Permission::Produce => "producer",
            Permission::Consume => "consumer",
            Permission::Administer => "admin",
            Permission::Read => "producer, consumer or admin",
        }
    }

    fn given_by(self, role: Role) -> bool {
        match self {
            Permission::Produce => role == Role::Producer,
            Permission::Consume => role == Role::Consumer,
            Permission::Administer => role == Role::Admin,
            Permission::Read => true,
        }
    }
}

/// A queue-name pattern of a grant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueuePattern(String);

impl QueuePattern {
    /// `field` names the pattern in errors (`identities[0].grants[1].queues[2]`).
    pub fn parse(text: &str, field: &str) -> Result<QueuePattern, SecurityError> {
        if text == "*" {
            return Ok(QueuePattern(text.to_owned()));
        }
        // A pattern is spelt as a queue name or a template is.
        QueueName::parse_field(text, field)
            .map_err(|e| SecurityError::invalid(field, format!("{e}; or * for every queue")))?;
        Ok(QueuePattern(text.to_owned()))
    }

    pub fn matches(&self, queue: &str) -> bool {
        match self.0.strip_suffix('*') {
            Some(prefix) => queue.starts_with(prefix),
            None => queue == self.0,
        }
    }

    /// The names this pattern covers all start with this.
    pub fn prefix(&self) -> &str {
        self.0.strip_suffix('*').unwrap_or(&self.0)
    }

    /// Whether it matches every queue.
    pub fn is_everything(&self) -> bool {
        self.0 == "*"
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A role on some queues.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    pub role: Role,
    pub queues: Vec<QueuePattern>,
}

impl Grant {
    pub fn allows(&self, permission: Permission, queue: &str) -> bool {
        permission.given_by(self.role) && self.queues.iter().any(|p| p.matches(queue))
    }
}

/// Grants as a person reads them: `producer on orders.*, inbox:*; admin on *`.
pub(crate) struct Described<'a>(pub &'a [Grant]);

impl fmt::Display for Described<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("none");
        }
        for (i, grant) in self.0.iter().enumerate() {
            let patterns: Vec<&str> = grant.queues.iter().map(QueuePattern::as_str).collect();
            let sep = if i == 0 { "" } else { "; " };
            write!(f, "{sep}{} on {}", grant.role.as_str(), patterns.join(", "))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(text: &str) -> QueuePattern {
        QueuePattern::parse(text, "queues[0]").expect(text)
    }

    #[test]
    fn patterns_match_a_name_a_prefix_or_everything() {
        assert!(pattern("orders.*").matches("orders.ship"));
        assert!(pattern("orders.*").matches("orders.ship.dlq"));
        assert!(pattern("orders.*").matches("orders.*"));
        assert!(!pattern("orders.*").matches("orders"));
        assert!(!pattern("orders.*").matches("payments.charge"));
        assert!(pattern("inbox:*").matches("inbox:alice"));
        assert!(pattern("payments").matches("payments"));
        assert!(!pattern("payments").matches("payments.dlq"));
        assert!(pattern("*").matches("anything:at.all"));
        assert_eq!(pattern("inbox:*").prefix(), "inbox:");
    }

    #[test]
    fn a_bad_pattern_is_named() {
        let err = QueuePattern::parse("orders/*", "identities[2].grants[0].queues[1]")
            .expect_err("a slash");
        assert!(
            err.to_string()
                .starts_with("identities[2].grants[0].queues[1]: "),
            "{err}"
        );
        assert!(err.to_string().ends_with("or * for every queue"), "{err}");
    }

    #[test]
    fn a_grant_gives_its_role_on_its_queues_and_read_everywhere_it_covers() {
        let grant = Grant {
            role: Role::Producer,
            queues: vec![pattern("orders.*")],
        };
        assert!(grant.allows(Permission::Produce, "orders.new"));
        assert!(grant.allows(Permission::Read, "orders.new"));
        assert!(!grant.allows(Permission::Consume, "orders.new"));
        assert!(!grant.allows(Permission::Administer, "orders.new"));
        assert!(!grant.allows(Permission::Produce, "payments"));
        let grants = [
            grant,
            Grant {
                role: Role::Admin,
                queues: vec![pattern("*"), pattern("x")],
            },
        ];
        assert_eq!(
            Described(&grants).to_string(),
            "producer on orders.*; admin on *, x"
        );
        assert_eq!(Described(&[]).to_string(), "none");
    }
}
