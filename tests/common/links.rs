//! The links of a Markdown page, as GitHub resolves them: shared by the
//! docs' link check (`tests/doc_examples.rs`) and the release tarball's
//! (`tests/dist.rs`), so both read a page the same way.

use std::collections::{BTreeMap, BTreeSet};

/// The relative links of a page: (target as written, line).
pub fn links(text: &str) -> Vec<(String, usize)> {
    let mut links = Vec::new();
    let mut in_fence = false;
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            let target = after[..end].trim();
            if !target.contains("://") && !target.starts_with("mailto:") {
                links.push((target.to_string(), n + 1));
            }
            rest = &after[end..];
        }
    }
    links
}

/// GitHub's anchors for a page's headings (and its explicit `<a id>`s).
pub fn anchors(text: &str) -> BTreeSet<String> {
    let mut anchors = BTreeSet::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut in_fence = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("<a id=\"") {
            let after = &rest[at + 7..];
            let end = after.find('"').unwrap();
            anchors.insert(after[..end].to_string());
            rest = &after[end..];
        }
        let Some(title) = line.strip_prefix('#') else {
            continue;
        };
        let title = title.trim_start_matches('#');
        if !title.starts_with(' ') {
            continue;
        }
        let slug: String = title
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let n = seen.entry(slug.clone()).or_default();
        anchors.insert(if *n == 0 {
            slug.clone()
        } else {
            format!("{slug}-{n}")
        });
        *n += 1;
    }
    anchors
}
