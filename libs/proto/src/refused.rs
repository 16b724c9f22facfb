//! How the gateway says, in a status's metadata, that it refused a request whole for what its
//! items are, and which items were at fault: what a client that batches on its callers'
//! behalf reads to send the items again in a way that gets each its own verdict.

/// The metadata key of a status that refuses a request whole for what its items are rather
/// than for who sent it or the server's state: nothing of it was applied, and the same items
/// sent in smaller requests (one by one, say) each get a verdict of their own. Its value
/// names the reason ([`RefusedWhole::as_str`]).
pub const REFUSED_WHOLE_KEY: &str = "cascade-refused-whole";

/// The metadata key that comes with [`RefusedWhole::ForbiddenItem`]: the indices of the items
/// outside the caller's grants, in the request's order ([`item_list`]). The others may go
/// again together, without those.
pub const FORBIDDEN_ITEMS_KEY: &str = "cascade-forbidden-items";

/// The most bytes an [`item_list`] takes: a status's metadata travels in HTTP/2 trailers,
/// which clients bound (16 KiB by default for hyper's). It holds every index below 1,000
/// (`ingest.max_batch_items`' default); items left off a full list are found when the rest
/// is sent again.
const MAX_ITEM_LIST_BYTES: usize = 4096;

/// Why a request was refused whole ([`REFUSED_WHOLE_KEY`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefusedWhole {
    /// More items than `ingest.max_batch_items`.
    TooManyItems,
    /// More bytes than the gateway reads in one request (`ingest.max_batch_bytes`).
    TooLarge,
    /// An item outside the caller's grants: the status names the first, and
    /// [`FORBIDDEN_ITEMS_KEY`] lists them all.
    ForbiddenItem,
}

impl RefusedWhole {
    const ALL: [RefusedWhole; 3] = [
        RefusedWhole::TooManyItems,
        RefusedWhole::TooLarge,
        RefusedWhole::ForbiddenItem,
    ];

    /// The reason a [`REFUSED_WHOLE_KEY`] value names; `None` for one this build does not know.
    pub fn parse(value: &str) -> Option<RefusedWhole> {
        RefusedWhole::ALL.into_iter().find(|r| r.as_str() == value)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RefusedWhole::TooManyItems => "too-many-items",
            RefusedWhole::TooLarge => "too-large",
            RefusedWhole::ForbiddenItem => "forbidden-item",
        }
    }
}

/// Marks `status` as the refusal of a whole request for `reason` ([`REFUSED_WHOLE_KEY`]),
/// listing the items outside the caller's grants, `forbidden` (ascending indices), when there
/// are any ([`FORBIDDEN_ITEMS_KEY`]).
pub fn mark_refused_whole(status: &mut tonic::Status, reason: RefusedWhole, forbidden: &[usize]) {
    let metadata = status.metadata_mut();
    metadata.insert(
        REFUSED_WHOLE_KEY,
        tonic::metadata::MetadataValue::from_static(reason.as_str()),
    );
    // Digits and commas: always a valid metadata value.
    if let (false, Ok(list)) = (forbidden.is_empty(), item_list(forbidden).parse()) {
        metadata.insert(FORBIDDEN_ITEMS_KEY, list);
    }
}

/// `indices` (ascending) as a [`FORBIDDEN_ITEMS_KEY`] value, `0,3,17`: as many as fit in
/// 4 KiB, from the first.
pub fn item_list(indices: &[usize]) -> String {
    let mut list = String::new();
    for index in indices {
        let item = index.to_string();
        let comma = usize::from(!list.is_empty());
        if list.len() + comma + item.len() > MAX_ITEM_LIST_BYTES {
            break;
        }
        if comma == 1 {
            list.push(',');
        }
        list.push_str(&item);
    }
    list
}

/// The indices of an [`item_list`]; `None` unless it is one: a non-empty list of ascending
/// decimal numbers, so that a client that drops them always sends fewer items again.
pub fn parse_item_list(value: &str) -> Option<Vec<usize>> {
    let number = |item: &str| {
        let digits = !item.is_empty() && item.bytes().all(|b| b.is_ascii_digit());
        digits.then(|| item.parse().ok()).flatten()
    };
    let indices = value
        .split(',')
        .map(number)
        .collect::<Option<Vec<usize>>>()?;
    indices.is_sorted_by(|a, b| a < b).then_some(indices)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_reads_back_as_it_was_written() {
        for reason in RefusedWhole::ALL {
            assert_eq!(RefusedWhole::parse(reason.as_str()), Some(reason));
        }
        assert_eq!(RefusedWhole::parse("too-slow"), None);
    }

    #[test]
    fn an_item_list_reads_back_as_it_was_written() {
        assert_eq!(item_list(&[0, 3, 17]), "0,3,17");
        assert_eq!(parse_item_list("0,3,17"), Some(vec![0, 3, 17]));
        assert_eq!(parse_item_list("7"), Some(vec![7]));
        for not_a_list in ["", "1,,2", "3,1", "2,2", "-1", "+1", "1, 2", "x"] {
            assert_eq!(parse_item_list(not_a_list), None, "{not_a_list:?}");
        }
    }

    #[test]
    fn every_item_of_a_batch_of_the_default_limit_fits_the_list() {
        let indices: Vec<usize> = (0..1000).collect();
        assert_eq!(parse_item_list(&item_list(&indices)), Some(indices));
    }

    #[test]
    fn a_long_item_list_keeps_to_its_bound_from_the_first_item() {
        let indices: Vec<usize> = (100_000..102_000).collect();
        let list = item_list(&indices);
        assert!(list.len() <= MAX_ITEM_LIST_BYTES, "{}", list.len());
        let read = parse_item_list(&list).expect("a list");
        assert_eq!(read, indices[..read.len()]);
        assert_eq!(read.len(), (MAX_ITEM_LIST_BYTES + 1) / 7, "as many as fit");
    }
}
