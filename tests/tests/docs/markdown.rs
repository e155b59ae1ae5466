//! What the doc test reads in a Markdown file: the fenced shell blocks
//! marked runnable, the output expected after them, the links, and the
//! anchors the headings make (as GitHub names them).
//!
//! The markers are HTML comments, invisible where the page is rendered,
//! each on the line right before a fence:
//!
//! * `<!-- run -->` before a ```` ```sh ```` block: the block runs;
//! * `<!-- output -->` before a block (any language) following a runnable
//!   one: what that block must print (docs/README.md, "How the docs are
//!   tested", says how it is matched); `<!-- output, any order -->` where
//!   the lines may come in any order.

use std::collections::HashSet;

pub const RUN: &str = "<!-- run -->";
pub const OUTPUT: &str = "<!-- output -->";
pub const OUTPUT_ANY_ORDER: &str = "<!-- output, any order -->";

/// A runnable block: its fence's line (1-based) and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    pub line: usize,
    pub code: String,
    pub output: Option<Expected>,
}

/// The output a runnable block must print.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    pub line: usize,
    pub text: String,
    pub any_order: bool,
}

/// A link's target as written (`path`, `path#anchor`, `#anchor`, a URL).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub line: usize,
    pub target: String,
}

#[derive(Debug, Default)]
pub struct Page {
    pub blocks: Vec<Block>,
    pub links: Vec<Link>,
    pub anchors: HashSet<String>,
    /// Shell blocks without the marker (documentation only).
    pub unmarked_shell: usize,
}

/// A fence as it opens: its indentation, character, length and info string.
struct Fence {
    indent: usize,
    ch: char,
    len: usize,
    info: String,
}

fn fence_open(line: &str) -> Option<Fence> {
    let indent = line.len() - line.trim_start().len();
    let rest = &line[indent..];
    let ch = rest.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let len = rest.chars().take_while(|c| *c == ch).count();
    (len >= 3).then(|| Fence {
        indent,
        ch,
        len,
        info: rest[len..].trim().to_string(),
    })
}

fn fence_closes(fence: &Fence, line: &str) -> bool {
    let t = line.trim();
    t.len() >= fence.len && t.chars().all(|c| c == fence.ch)
}

fn is_shell(info: &str) -> bool {
    matches!(
        info.split_whitespace().next().unwrap_or(""),
        "sh" | "bash" | "shell"
    )
}

/// Reads one page; an error names the line of a misplaced marker.
pub fn parse(text: &str) -> Result<Page, String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut page = Page::default();
    let mut slugs = Slugger::default();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let marker = match line.trim() {
            RUN => Some(RUN),
            OUTPUT => Some(OUTPUT),
            OUTPUT_ANY_ORDER => Some(OUTPUT_ANY_ORDER),
            _ => None,
        };
        if let Some(marker) = marker {
            let fence = lines
                .get(i + 1)
                .and_then(|l| fence_open(l))
                .ok_or_else(|| format!("line {}: {marker} is not followed by a fence", i + 1))?;
            let (body, end) = fenced(&lines, i + 1, &fence)?;
            if marker == RUN {
                if !is_shell(&fence.info) {
                    return Err(format!(
                        "line {}: {RUN} before a block that is not sh",
                        i + 1
                    ));
                }
                page.blocks.push(Block {
                    line: i + 2,
                    code: body,
                    output: None,
                });
            } else {
                let last = page
                    .blocks
                    .last_mut()
                    .filter(|b| b.output.is_none())
                    .ok_or_else(|| {
                        format!(
                            "line {}: {OUTPUT} without a runnable block before it",
                            i + 1
                        )
                    })?;
                last.output = Some(Expected {
                    line: i + 2,
                    text: body,
                    any_order: marker == OUTPUT_ANY_ORDER,
                });
            }
            i = end + 1;
            continue;
        }
        if let Some(fence) = fence_open(line) {
            if is_shell(&fence.info) {
                page.unmarked_shell += 1;
            }
            let (_, end) = fenced(&lines, i, &fence)?;
            i = end + 1;
            continue;
        }
        if let Some(heading) = heading(line) {
            page.anchors.insert(slugs.slug(&heading));
        }
        for anchor in html_anchors(line) {
            page.anchors.insert(anchor);
        }
        for target in links(line) {
            page.links.push(Link {
                line: i + 1,
                target,
            });
        }
        i += 1;
    }
    Ok(page)
}

/// The text of the block whose fence opens at `open`, its indentation
/// removed, and the index of its closing line.
fn fenced(lines: &[&str], open: usize, fence: &Fence) -> Result<(String, usize), String> {
    let mut body = String::new();
    for (j, l) in lines.iter().enumerate().skip(open + 1) {
        if fence_closes(fence, l) {
            return Ok((body, j));
        }
        let cut = l.len() - l.trim_start().len();
        body.push_str(&l[cut.min(fence.indent)..]);
        body.push('\n');
    }
    Err(format!("line {}: a fence that never closes", open + 1))
}

fn heading(line: &str) -> Option<String> {
    let t = line.trim_start();
    let hashes = t.chars().take_while(|c| *c == '#').count();
    if !(1..=6).contains(&hashes) || line.len() - t.len() > 3 {
        return None;
    }
    let rest = &t[hashes..];
    if !rest.starts_with(' ') {
        return None;
    }
    Some(rest.trim().trim_end_matches('#').trim().to_string())
}

/// `name="…"` and `id="…"` of inline HTML (explicit anchors).
fn html_anchors(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    for key in ["<a name=\"", " id=\""] {
        let mut rest = line;
        while let Some(at) = rest.find(key) {
            rest = &rest[at + key.len()..];
            if let Some(end) = rest.find('"') {
                out.push(rest[..end].to_string());
            }
        }
    }
    out
}

/// The line with its code spans blanked out, so that `[x](y)` inside
/// backticks is not taken for a link.
fn without_code_spans(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
            out.push(' ');
        } else if in_code {
            out.push(' ');
        } else {
            out.push(c);
        }
    }
    out
}

/// Inline link targets (`[text](target "title")`, images too) and
/// reference definitions (`[label]: target`).
pub fn links(line: &str) -> Vec<String> {
    let plain = without_code_spans(line);
    let mut out = Vec::new();
    let t = plain.trim_start();
    if t.starts_with('[') {
        if let Some(end) = t.find("]:") {
            if let Some(target) = t[end + 2..].split_whitespace().next() {
                out.push(target.trim_matches(['<', '>']).to_string());
                return out;
            }
        }
    }
    let mut rest = plain.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let mut depth = 0;
        let mut end = None;
        for (k, c) in after.char_indices() {
            match c {
                '(' => depth += 1,
                ')' if depth == 0 => {
                    end = Some(k);
                    break;
                }
                ')' => depth -= 1,
                _ => {}
            }
        }
        let Some(end) = end else { break };
        if let Some(target) = after[..end].split_whitespace().next() {
            out.push(target.trim_matches(['<', '>']).to_string());
        }
        rest = &after[end..];
    }
    out
}

/// GitHub's heading anchors: the rendered text lowercased, every
/// character but letters, digits, spaces, `-` and `_` dropped, spaces
/// made `-`; a repeated anchor gets `-1`, `-2`, ….
#[derive(Default)]
pub struct Slugger {
    seen: HashSet<String>,
}

impl Slugger {
    pub fn slug(&mut self, heading: &str) -> String {
        let base = slug(heading);
        let mut s = base.clone();
        let mut n = 0;
        while !self.seen.insert(s.clone()) {
            n += 1;
            s = format!("{base}-{n}");
        }
        s
    }
}

fn slug(heading: &str) -> String {
    // The rendered text: a link's text stays, its target goes; code and
    // emphasis marks go.
    let mut text = String::new();
    let mut rest = heading;
    while let Some(at) = rest.find("](") {
        text.push_str(&rest[..at]);
        rest = &rest[at + 2..];
        rest = rest.find(')').map_or("", |e| &rest[e + 1..]);
    }
    text.push_str(rest);
    text.to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_are_githubs() {
        let mut s = Slugger::default();
        assert_eq!(
            s.slug("Groups smaller than the cluster (built: `placement.rs`)"),
            "groups-smaller-than-the-cluster-built-placementrs"
        );
        assert_eq!(
            s.slug("`--sync-every=1` means \"fsynced\""),
            "--sync-every1-means-fsynced"
        );
        assert_eq!(s.slug("See [the page](x.md) now"), "see-the-page-now");
        assert_eq!(s.slug("Tests"), "tests");
        assert_eq!(s.slug("Tests"), "tests-1");
    }

    #[test]
    fn markers_blocks_and_links() {
        let text = "# Title\n\nSee [a](a.md#x) and `[not](a link)`.\n\n<!-- run -->\n```sh\nnsqd &\n```\n\n<!-- output -->\n```text\nOK\n```\n\n```sh\nnot run\n```\n\n[ref]: docs/b.md\n  - item\n\n    <!-- run -->\n    ```sh\n    curl x\n    ```\n";
        let p = parse(text).unwrap();
        assert_eq!(p.blocks.len(), 2);
        assert_eq!(p.blocks[0].line, 6);
        assert_eq!(p.blocks[0].code, "nsqd &\n");
        assert_eq!(
            p.blocks[0].output,
            Some(Expected {
                line: 11,
                text: "OK\n".into(),
                any_order: false
            })
        );
        assert_eq!(p.blocks[1].code, "curl x\n");
        assert_eq!(p.unmarked_shell, 1);
        let targets: Vec<&str> = p.links.iter().map(|l| l.target.as_str()).collect();
        assert_eq!(targets, ["a.md#x", "docs/b.md"]);
        assert!(p.anchors.contains("title"));
    }

    #[test]
    fn misplaced_markers_are_errors() {
        assert!(parse("<!-- run -->\ntext\n").is_err());
        assert!(parse("<!-- run -->\n```text\nx\n```\n").is_err());
        assert!(parse("<!-- output -->\n```text\nx\n```\n").is_err());
        assert!(parse("<!-- run -->\n```sh\nx\n").is_err());
    }
}
