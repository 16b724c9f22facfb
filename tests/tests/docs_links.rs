//! The documentation stands alone: every relative link of the README, `docs/` and the READMEs
//! under `deploy/` and `helm/` leads to a file of the repository (and a `#section` of a
//! Markdown file to one of its headings, as GitHub names them), and no page points at design
//! notes that live outside the repository.

use std::path::{Path, PathBuf};

fn repository() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn pages() -> Vec<PathBuf> {
    let root = repository();
    let mut pages = vec![root.join("README.md"), root.join("helm/cascade/README.md")];
    for dir in ["docs", "deploy"] {
        collect_markdown(&root.join(dir), &mut pages);
    }
    pages
}

fn collect_markdown(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries.map(|e| e.expect("entry").path()) {
        if entry.is_dir() {
            collect_markdown(&entry, out);
        } else if entry.extension().is_some_and(|e| e == "md") {
            out.push(entry);
        }
    }
}

/// The targets of `[text](target)` links.
fn links(text: &str) -> Vec<&str> {
    text.match_indices("](")
        .filter_map(|(at, _)| {
            let rest = &text[at + 2..];
            rest.find(')').map(|end| &rest[..end])
        })
        .collect()
}

/// GitHub's anchor of a heading: lower case, spaces to `-`, other punctuation dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a page's headings (not of `#` lines inside fenced code: shell comments).
fn anchors(markdown: &str) -> Vec<String> {
    let mut in_code = false;
    let mut found = Vec::new();
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
        } else if !in_code && line.starts_with('#') {
            found.push(anchor(line.trim_start_matches('#')));
        }
    }
    found
}

#[test]
fn every_relative_link_leads_somewhere() {
    let mut broken = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).expect("read page");
        for target in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") || target.contains(' ') {
                continue;
            }
            let (file, section) = target.split_once('#').unwrap_or((target, ""));
            let path = match file.is_empty() {
                true => page.clone(),
                false => page.parent().expect("a directory").join(file),
            };
            if !path.exists() {
                broken.push(format!("{}: {target} (no such file)", page.display()));
                continue;
            }
            if !section.is_empty() && path.extension().is_some_and(|e| e == "md") {
                let linked = std::fs::read_to_string(&path).expect("read linked page");
                if !anchors(&linked).iter().any(|a| a == section) {
                    broken.push(format!("{}: {target} (no such heading)", page.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn no_page_points_outside_the_repository() {
    for page in pages() {
        let text = std::fs::read_to_string(&page).expect("read page");
        for outside in ["../shared", "DESIGN.md", "DESIGN §"] {
            assert!(
                !text.contains(outside),
                "{} mentions {outside}, which a clone does not have",
                page.display()
            );
        }
        assert!(
            issue_number(&text).is_none(),
            "{} cites {:?}: a reader has no tracker to follow; say it in the docs",
            page.display(),
            issue_number(&text)
        );
    }
}

/// The first "issue 12" or "issues #12" of `text`, if any.
fn issue_number(text: &str) -> Option<String> {
    let lower = text.to_ascii_lowercase();
    lower.match_indices("issue").find_map(|(at, word)| {
        let after = &lower[at + word.len()..];
        let after = after.strip_prefix('s').unwrap_or(after);
        let number = after.strip_prefix(' ')?;
        let number = number.strip_prefix('#').unwrap_or(number);
        let digits = number.bytes().take_while(u8::is_ascii_digit).count();
        let end = lower.len() - number.len() + digits;
        (digits > 0).then(|| text[at..end].to_owned())
    })
}

#[test]
fn issue_numbers_are_found() {
    assert_eq!(issue_number("see issue 14 for"), Some("issue 14".into()));
    assert_eq!(issue_number("Issues #3"), Some("Issues #3".into()));
    assert_eq!(issue_number("an issue of style; issue tracker"), None);
}

#[test]
fn anchors_are_named_as_github_names_them_and_code_is_no_heading() {
    let page = "# Top\n```sh\n# a comment\n```\n## Next step\n";
    assert_eq!(anchors(page), ["top", "next-step"]);
    assert_eq!(anchor(" 8. Backup and restore"), "8-backup-and-restore");
    assert_eq!(
        anchor(" Distributed mode, step by step"),
        "distributed-mode-step-by-step"
    );
}
