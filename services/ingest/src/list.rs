//! Merging the shards' pages of `ListQueues` into one page.
//!
//! Each shard is asked for `size` names after the token, so the first `size` names of the
//! merge are complete: a name missing from a shard's page sorts after every name it
//! returned. The page token is the last name returned (opaque to clients), which is also
//! what each shard takes as its own token. A template is stored on every shard and appears
//! once.

use cascade_proto::v1::{ListQueuesResponse, Queue};

pub(crate) fn merge_queue_pages(pages: Vec<ListQueuesResponse>, size: usize) -> ListQueuesResponse {
    let mut more = pages.iter().any(|page| !page.next_page_token.is_empty());
    let mut queues: Vec<Queue> = pages.into_iter().flat_map(|page| page.queues).collect();
    // Stable: of a template's copies, shard 0's is kept.
    queues.sort_by(|a, b| a.name.cmp(&b.name));
    queues.dedup_by(|later, kept| later.name == kept.name);
    if queues.len() > size {
        queues.truncate(size);
        more = true;
    }
    let next_page_token = match (more, queues.last()) {
        (true, Some(last)) => last.name.clone(),
        _ => String::new(),
    };
    ListQueuesResponse {
        queues,
        next_page_token,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(names: &[&str], more: bool) -> ListQueuesResponse {
        ListQueuesResponse {
            queues: names
                .iter()
                .map(|name| Queue {
                    name: (*name).to_owned(),
                    config: None,
                })
                .collect(),
            next_page_token: match (more, names.last()) {
                (true, Some(last)) => (*last).to_owned(),
                _ => String::new(),
            },
        }
    }

    fn names(response: &ListQueuesResponse) -> Vec<&str> {
        response.queues.iter().map(|q| q.name.as_str()).collect()
    }

    #[test]
    fn pages_merge_in_name_order_with_templates_once() {
        let merged = merge_queue_pages(
            vec![page(&["a", "c", "t:*"], false), page(&["b", "t:*"], false)],
            10,
        );
        assert_eq!(names(&merged), ["a", "b", "c", "t:*"]);
        assert_eq!(merged.next_page_token, "");
    }

    #[test]
    fn a_full_page_has_a_token_after_its_last_name() {
        let merged = merge_queue_pages(vec![page(&["a", "d"], true), page(&["b", "c"], false)], 2);
        assert_eq!(names(&merged), ["a", "b"]);
        assert_eq!(merged.next_page_token, "b");
        // A shard with more left, even when all it sent fit: the client asks again.
        let merged = merge_queue_pages(vec![page(&["a"], true), page(&[], false)], 5);
        assert_eq!(merged.next_page_token, "a");
        assert_eq!(merge_queue_pages(vec![], 5).next_page_token, "");
    }
}
