//! The `queue` label: a queue's family, so that per-user queues (`inbox:alice`) are counted
//! under their template (`inbox:*`) and never become series of their own.

/// `queue`'s label value: its family by [`cascade_core::queue_family`] (a covered queue
/// under its template, `inbox:alice` → `inbox:*`, its dead-letter queue under
/// `<template>.dlq`, any other queue as it is).
///
/// Call it only for queues that exist or match a template: the name of a refused request
/// is the caller's, and could be anything.
pub fn queue_family(queue: &str, templates: &[String]) -> String {
    cascade_core::queue_family(queue, templates.iter().map(String::as_str)).into_owned()
}

#[cfg(test)]
mod tests {
    use super::queue_family;

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
                queue_family(queue, templates),
                family,
                "{queue} with {templates:?}"
            );
        }
    }
}
