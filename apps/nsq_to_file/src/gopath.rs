//! Go's slash-path helpers (`path.Clean`, `path.Join`, `filepath.Split`)
//! as nsq_to_file uses them to build in-progress and final file names.
//! Keeping Go's cleaning rules matters because the final name is found by
//! cutting the work-dir prefix off the (cleaned) in-progress path.

/// `path.Clean`.
pub fn clean(p: &str) -> String {
    if p.is_empty() {
        return ".".into();
    }
    let rooted = p.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for seg in p.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|l| *l != "..") {
                    parts.pop();
                } else if !rooted {
                    parts.push("..");
                }
            }
            s => parts.push(s),
        }
    }
    let joined = parts.join("/");
    match (rooted, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".into(),
        (false, false) => joined,
    }
}

/// `path.Join` / `filepath.Join`: non-empty elements joined by `/`, cleaned.
pub fn join(elems: &[&str]) -> String {
    let parts: Vec<&str> = elems.iter().copied().filter(|e| !e.is_empty()).collect();
    if parts.is_empty() {
        return String::new();
    }
    clean(&parts.join("/"))
}

/// `filepath.Split`: directory (with its trailing `/`) and file.
pub fn split(p: &str) -> (&str, &str) {
    match p.rfind('/') {
        Some(i) => (&p[..=i], &p[i + 1..]),
        None => ("", p),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_cleaning() {
        assert_eq!(clean("/tmp/work/"), "/tmp/work");
        assert_eq!(clean("./work/a/../b"), "work/b");
        assert_eq!(clean("../../x"), "../../x");
        assert_eq!(clean("/../x"), "/x");
        assert_eq!(clean(""), ".");
        assert_eq!(join(&["/tmp/", "t.host.log"]), "/tmp/t.host.log");
        assert_eq!(join(&["", "a"]), "a");
        assert_eq!(split("/a/b.log"), ("/a/", "b.log"));
        assert_eq!(split("b.log"), ("", "b.log"));
    }
}
