//! The docs are tested: every shell block of README.md and docs/ marked
//! runnable (`<!-- run -->`) runs against the built binaries, page by
//! page, and prints what the block marked as its output (`<!-- output -->`)
//! says; and every relative link of every Markdown file of the repository
//! leads to a file that exists, and to a heading of it where it names one.
//! How to write such blocks: docs/README.md, "How the docs are tested".

mod markdown;
mod runner;

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use markdown::Page;
use nsq_tests::{bin_dir, workspace_root};

/// Pages whose runnable blocks run: the README and docs/ (only those
/// whose path contains `NSQ_DOC_PAGE`, when it is set).
fn runnable_pages() -> Vec<PathBuf> {
    let root = workspace_root();
    let mut pages = vec![root.join("README.md")];
    pages.extend(markdown_files(&root.join("docs")));
    let only = std::env::var("NSQ_DOC_PAGE").unwrap_or_default();
    pages.retain(|p| rel(p).contains(&only));
    pages
}

/// Every Markdown file under `dir`, build output and installed packages
/// aside, sorted.
fn markdown_files(dir: &Path) -> Vec<PathBuf> {
    const SKIP: &[&str] = &["target", "node_modules", ".venv", ".git", "fixtures"];
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if p.is_dir() {
            if !SKIP.contains(&name.as_str()) {
                out.extend(markdown_files(&p));
            }
        } else if name.ends_with(".md") {
            out.push(p);
        }
    }
    out.sort();
    out
}

fn read_page(path: &Path) -> Page {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    markdown::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", rel(path)))
}

fn rel(path: &Path) -> String {
    path.strip_prefix(workspace_root())
        .unwrap_or(path)
        .display()
        .to_string()
}

/// Runs one page's blocks; the failures, each with the block and what it
/// printed.
fn run_page(path: &Path, page: &Page, tmp: &Path) -> Vec<String> {
    let ports = runner::Ports::for_texts(
        page.blocks
            .iter()
            .flat_map(|b| {
                [
                    Some(b.code.as_str()),
                    b.output.as_ref().map(|o| o.text.as_str()),
                ]
            })
            .flatten(),
    );
    let blocks: Vec<(String, usize)> = page
        .blocks
        .iter()
        .map(|b| (ports.rewrite(&b.code), b.line))
        .collect();
    let dir = runner::page_dir(tmp, Path::new(&rel(path)));
    let script = runner::script(&blocks, &ports, &bin_dir(), &dir);
    let run = runner::run(&script, &bin_dir(), &dir, blocks.len());
    let mut failures = Vec::new();
    if let Some(why) = &run.failure {
        // The block that was running: the last one that printed anything.
        let last = run.outputs.iter().rposition(|o| !o.is_empty()).unwrap_or(0);
        failures.push(format!(
            "{}: {why}\n-- the block at line {}:\n{}-- its output:\n{}\n-- the daemons' log:\n{}",
            rel(path),
            blocks[last].1,
            blocks[last].0,
            run.outputs[last],
            tail(&run.daemons, 40)
        ));
        return failures;
    }
    for (i, b) in page.blocks.iter().enumerate() {
        let Some(want) = &b.output else { continue };
        if let Err(e) = runner::shows(&run.outputs[i], &ports.rewrite(&want.text), want.any_order) {
            failures.push(format!(
                "{}: the block at line {} does not print the output at line {}: {e}\n-- it printed:\n{}",
                rel(path),
                b.line,
                want.line,
                run.outputs[i]
            ));
        }
    }
    failures
}

#[test]
fn every_runnable_block_runs_and_prints_what_its_page_says() {
    let tmp = tempfile::tempdir().unwrap();
    let pages: Vec<(PathBuf, Page)> = runnable_pages()
        .into_iter()
        .map(|p| {
            let page = read_page(&p);
            (p, page)
        })
        .filter(|(_, page)| !page.blocks.is_empty())
        .collect();
    let blocks: usize = pages.iter().map(|(_, p)| p.blocks.len()).sum();
    let commands: usize = pages
        .iter()
        .flat_map(|(_, p)| &p.blocks)
        .map(|b| runner::commands(&b.code).len())
        .sum();
    assert!(commands > 0, "no runnable block in README.md or docs/");
    // A few pages at a time: each mostly waits on the daemons it starts.
    let failures = Mutex::new(Vec::new());
    let next = Mutex::new(pages.iter());
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| loop {
                let Some((path, page)) = next.lock().unwrap().next() else {
                    break;
                };
                let f = run_page(path, page, tmp.path());
                failures.lock().unwrap().extend(f);
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    eprintln!(
        "doc test: {commands} commands in {blocks} blocks on {} pages",
        pages.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn every_relative_link_of_every_markdown_file_resolves() {
    let root = workspace_root();
    let files = markdown_files(&root);
    let pages: Vec<(PathBuf, Page)> = files.iter().map(|f| (f.clone(), read_page(f))).collect();
    let anchors_of = |path: &Path| {
        pages
            .iter()
            .find(|(p, _)| p == path)
            .map(|(_, page)| &page.anchors)
    };
    let mut broken = Vec::new();
    let mut checked = 0;
    for (path, page) in &pages {
        for link in &page.links {
            let t = link.target.as_str();
            if t.contains("://") || t.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (file, anchor) = match t.split_once('#') {
                Some((f, a)) => (f, Some(a)),
                None => (t, None),
            };
            let target = if file.is_empty() {
                path.clone()
            } else {
                normalize(&path.parent().unwrap().join(file))
            };
            let problem = if !target.exists() {
                Some(format!("{} does not exist", rel(&target)))
            } else if let Some(anchor) = anchor.filter(|_| t.contains(".md") || file.is_empty()) {
                match anchors_of(&target) {
                    Some(a) if a.contains(anchor) => None,
                    Some(_) => Some(format!("{} has no heading #{anchor}", rel(&target))),
                    None => None,
                }
            } else {
                None
            };
            if let Some(p) = problem {
                broken.push(format!("{}:{}: {t}: {p}", rel(path), link.line));
            }
        }
    }
    eprintln!(
        "doc test: {checked} relative links in {} files",
        files.len()
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The last `n` lines of `text`.
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// `a/b/../c` as `a/c` (without touching the file system).
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}
