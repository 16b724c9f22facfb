//! The `queue` label: a queue's family, so that per-user queues (`inbox:alice`) are counted
//! under their template (`inbox:*`) and never become series of their own.

/// `queue`'s label value. A queue a template covers (it extends the template's prefix by at
/// least one character) gets the template's name; with several, the most specific (longest
/// prefix). The dead-letter queue of a covered queue (`inbox:alice.dlq`) gets
/// `<template>.dlq` (`inbox:*.dlq`), so dead letters do not count as its family's backlog.
/// Any other queue is named as it is: plain queues and stages are created explicitly, so
/// they are few. Entries of `templates` that do not end in `*` are ignored.
///
/// Call it only for queues that exist or match a template: the name of a refused request
/// is the caller's, and could be anything.
pub fn queue_family(queue: &str, templates: &[String]) -> String {
    // The dead-letter rule first: `inbox:alice.dlq` also extends `inbox:`.
    if let Some(stem) = queue.strip_suffix(DEAD_LETTER_SUFFIX)
        && let Some(template) = covering_template(stem, templates)
    {
        return format!("{template}{DEAD_LETTER_SUFFIX}");
    }
    match covering_template(queue, templates) {
        Some(template) => template.to_owned(),
        None => queue.to_owned(),
    }
}

const DEAD_LETTER_SUFFIX: &str = ".dlq";

fn covering_template<'t>(queue: &str, templates: &'t [String]) -> Option<&'t str> {
    if queue.ends_with('*') {
        return None;
    }
    templates
        .iter()
        .filter_map(|t| t.strip_suffix('*').map(|prefix| (t.as_str(), prefix)))
        .filter(|(_, prefix)| queue.len() > prefix.len() && queue.starts_with(prefix))
        .max_by_key(|(_, prefix)| prefix.len())
        .map(|(template, _)| template)
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
