//! Runs a page's runnable blocks as its reader would type them: in order,
//! in one bash session (a block may use what an earlier one started), in a
//! directory of its own, against the built binaries (`NSQ_BIN_DIR` first
//! on `PATH`), and then stops everything the page started.
//!
//! What the reader's terminal has and a test must not: NSQ's fixed ports
//! and the time a human takes between two commands. So every
//! `127.0.0.1:PORT` (also `localhost:` and `0.0.0.0:`) in the page is
//! rewritten to one free loopback port per port number, the daemons'
//! default listen addresses are given as such ports too (on 127.0.0.1
//! instead of every interface), and after a command that starts a daemon
//! in the background (`nsqd … &`) the session waits until that daemon
//! accepts connections on its HTTP address, or fails if it exits first.
//! Each command must succeed (`set -e`).

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nsq_tests::{free_ports, terminate, wait_timeout};

/// The daemons, the listen flags the session gives them unless the page
/// does, and the port numbers those defaults stand for (NSQ's).
const DAEMONS: &[(&str, &[(&str, u16)])] = &[
    (
        "nsqd",
        &[
            ("--tcp-address", 4150),
            ("--http-address", 4151),
            ("--https-address", 4152),
        ],
    ),
    (
        "nsqlookupd",
        &[("--tcp-address", 4160), ("--http-address", 4161)],
    ),
    ("nsqadmin", &[("--http-address", 4171)]),
    ("nsq_pubsub", &[("--http-address", 8080)]),
];

/// How long a daemon may take to listen, a page to run, and its processes
/// to stop: sized for the test command's load (every suite side by side on
/// 2 cores), where a debug nsqd's start has taken seconds.
const LISTEN_WAIT_SECS: u32 = 120;
const PAGE_WAIT: Duration = Duration::from_secs(600);
const STOP_WAIT: Duration = Duration::from_secs(30);

const HOSTS: &[&str] = &["127.0.0.1:", "localhost:", "0.0.0.0:"];

/// One free loopback port for each port number the page names.
pub struct Ports(BTreeMap<u16, u16>);

impl Ports {
    pub fn for_texts<'a>(texts: impl Iterator<Item = &'a str>) -> Ports {
        let mut wanted: Vec<u16> = DAEMONS
            .iter()
            .flat_map(|(_, flags)| flags.iter().map(|(_, port)| *port))
            .collect();
        for t in texts {
            for (_, port, _) in addresses(t) {
                if !wanted.contains(&port) {
                    wanted.push(port);
                }
            }
        }
        Ports(
            wanted
                .iter()
                .copied()
                .zip(free_ports(wanted.len()))
                .collect(),
        )
    }

    /// `text` with every `HOST:PORT` of [`HOSTS`] as `127.0.0.1:<free>`,
    /// and every port number of the page standing alone (a word of its
    /// own, as in `python3 -m http.server 4181`) as `<free>`.
    pub fn rewrite(&self, text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        let mut last = 0;
        for (start, port, end) in addresses(text) {
            out.push_str(&self.rewrite_bare(&text[last..start]));
            out.push_str(&format!("127.0.0.1:{}", self.0[&port]));
            last = end;
        }
        out.push_str(&self.rewrite_bare(&text[last..]));
        out
    }

    fn rewrite_bare(&self, text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        let mut last = 0;
        for (start, port, end) in bare_numbers(text) {
            if let Some(free) = self.0.get(&port) {
                out.push_str(&text[last..start]);
                out.push_str(&free.to_string());
                last = end;
            }
        }
        out.push_str(&text[last..]);
        out
    }

    /// The page's ports (as rewritten) that `cmd` names standing alone:
    /// what a background command listens on, where it is not a daemon
    /// whose address the session knows.
    pub fn bare_ports(&self, cmd: &str) -> Vec<u16> {
        let free: Vec<u16> = self.0.values().copied().collect();
        bare_numbers(cmd)
            .into_iter()
            .map(|(_, port, _)| port)
            .filter(|p| free.contains(p))
            .collect()
    }

    fn port(&self, port: u16) -> u16 {
        self.0[&port]
    }
}

/// Every `HOST:PORT` of [`HOSTS`] in `text`: (start, port, end).
fn addresses(text: &str) -> Vec<(usize, u16, usize)> {
    let mut found = Vec::new();
    for host in HOSTS {
        let mut from = 0;
        while let Some(at) = text[from..].find(host) {
            let start = from + at;
            let digits = start + host.len();
            let end = digits
                + text[digits..]
                    .bytes()
                    .take_while(u8::is_ascii_digit)
                    .count();
            if let Ok(port) = text[digits..end].parse::<u16>() {
                if end > digits && port > 0 {
                    found.push((start, port, end));
                }
            }
            from = digits;
        }
    }
    found.sort_unstable();
    found
}

/// Every number standing alone in `text` (no letter, digit, `.`, `:`,
/// `-`, `_` or `/` right before or after it, but for a JSON value's
/// `":`): (start, number, end).
fn bare_numbers(text: &str) -> Vec<(usize, u16, usize)> {
    let b = text.as_bytes();
    let joins = |c: u8| c.is_ascii_alphanumeric() || matches!(c, b'.' | b':' | b'-' | b'/' | b'_');
    // a JSON value, `"tcp_port":4150`, stands alone too
    let json_value = |i: usize| i >= 2 && b[i - 1] == b':' && b[i - 2] == b'"';
    let mut found = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_digit() && (i == 0 || !joins(b[i - 1]) || json_value(i)) {
            let end = i + b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
            if end == b.len() || !joins(b[end]) {
                if let Ok(n) = text[i..end].parse::<u16>() {
                    found.push((i, n, end));
                }
            }
            i = end;
        } else {
            i += 1;
        }
    }
    found
}

/// A block's commands: its lines with `\` continuations joined, a
/// here-document's lines part of its command.
pub fn commands(code: &str) -> Vec<String> {
    split(code).into_iter().map(|(cmd, _)| cmd).collect()
}

/// [`commands`], each with the index of its last line.
fn split(code: &str) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut heredoc: Option<String> = None;
    for (i, line) in code.lines().enumerate() {
        if let Some(end) = &heredoc {
            if line.trim() == end {
                heredoc = None;
                out.push((std::mem::take(&mut cur), i));
            }
            continue;
        }
        if let Some(head) = line.strip_suffix('\\') {
            cur.push_str(head);
            cur.push(' ');
            continue;
        }
        cur.push_str(line);
        if let Some(word) = heredoc_word(&cur) {
            heredoc = Some(word);
            continue;
        }
        let t = cur.trim();
        if !t.is_empty() && !t.starts_with('#') {
            out.push((cur.clone(), i));
        }
        cur.clear();
    }
    out
}

/// The word that ends the here-document `cmd` opens (`<<EOF`, `<<'EOF'`,
/// `<<-EOF`), if it opens one.
fn heredoc_word(cmd: &str) -> Option<String> {
    let cmd = without_comment(cmd);
    let at = cmd.find("<<")?;
    let rest = &cmd[at + 2..];
    if rest.starts_with('<') {
        return None;
    }
    let word: String = rest
        .trim_start_matches('-')
        .trim_start()
        .chars()
        .take_while(|c| !c.is_whitespace())
        .filter(|c| *c != '\'' && *c != '"')
        .collect();
    (!word.is_empty()).then_some(word)
}

/// The command without a trailing `# comment` (outside quotes).
fn without_comment(cmd: &str) -> &str {
    let (mut single, mut double) = (false, false);
    let mut prev = ' ';
    for (i, c) in cmd.char_indices() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '#' if !single && !double && prev.is_whitespace() => return &cmd[..i],
            _ => {}
        }
        prev = c;
    }
    cmd
}

/// Whether `cmd` runs in the background: it ends in a single `&`.
fn in_background(cmd: &str) -> bool {
    let cmd = without_comment(cmd).trim();
    cmd.ends_with('&') && !cmd.ends_with("&&")
}

/// Whether `cmd` starts a daemon in the background: its first word (after
/// any `VAR=value`) is a daemon.
fn starts_daemon(cmd: &str) -> bool {
    in_background(cmd)
        && without_comment(cmd)
            .split_whitespace()
            .find(|w| !w.contains('='))
            .is_some_and(|w| DAEMONS.iter().any(|(d, _)| *d == w))
}

/// The bash script for a page's blocks (rewritten already): the session's
/// functions, then each block, announced by `__block`, with `__settle`
/// after each command that starts a daemon.
pub fn script(blocks: &[(String, usize)], ports: &Ports, bins: &Path, dir: &Path) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "set -eo pipefail\n__bins='{}'\n__out='{}'\n__ready='{}'\n__wait={LISTEN_WAIT_SECS}\n",
        bins.display(),
        dir.join("out").display(),
        dir.join("ready").display()
    ));
    s.push_str(PRELUDE);
    for (name, flags) in DAEMONS {
        let defaults: Vec<String> = flags
            .iter()
            .map(|(flag, port)| format!("{flag}=127.0.0.1:{}", ports.port(*port)))
            .collect();
        s.push_str(&format!(
            "{name}() {{ __run {name} {} -- \"$@\"; }}\n",
            defaults.join(" ")
        ));
    }
    for (i, (code, line)) in blocks.iter().enumerate() {
        s.push_str(&format!("__block {i} 'line {line}'\n"));
        let ends: BTreeMap<usize, String> = split(code)
            .into_iter()
            .map(|(cmd, last)| (last, cmd))
            .collect();
        for (k, l) in code.lines().enumerate() {
            s.push_str(l);
            s.push('\n');
            let Some(cmd) = ends.get(&k) else { continue };
            let n = line + k + 1;
            if in_background(cmd) {
                let what = if starts_daemon(cmd) { "daemon" } else { "job" };
                let ports: Vec<String> = ports
                    .bare_ports(without_comment(cmd))
                    .iter()
                    .map(u16::to_string)
                    .collect();
                s.push_str(&format!(
                    "__settle $! {what} 'line {n}' {}\n",
                    ports.join(" ")
                ));
            }
        }
    }
    s
}

const PRELUDE: &str = r#"
__where=""
trap 'echo "doc-test: exit status $? from \`$BASH_COMMAND\` ($__where)"' ERR
# __block N WHERE: what follows is block N; its output goes to out/N.
__block() { __cur="$__out/$1"; exec >"$__cur" 2>&1 </dev/null; __where="$2"; }
# __run NAME DEFAULT... -- ARG...: the daemon NAME with the session's
# listen addresses first (a flag given again on the command line wins).
# In a background job it records the address to probe under its pid and
# becomes the daemon, so that $! is the daemon's own pid.
__run() {
    local name="$1" probe="" prev="" a defaults=()
    shift
    while [ "$1" != "--" ]; do defaults+=("$1"); shift; done
    shift
    for a in "${defaults[@]}" "$@"; do
        case "$a" in --http-address=*|-http-address=*) probe="${a#*=}" ;; esac
        case "$prev" in --http-address|-http-address) probe="$a" ;; esac
        prev="$a"
    done
    if [ "$BASHPID" != "$$" ]; then
        # written whole, then named: the waiting side never reads it half
        # written (an empty address read as "nothing to wait for")
        echo "$probe" >"$__ready/$BASHPID.part" && mv "$__ready/$BASHPID.part" "$__ready/$BASHPID"
        # its log apart from the commands' output, unless the page sends it somewhere
        if [ /dev/fd/1 -ef "$__cur" ]; then exec >>"$__out/daemons"; fi
        if [ /dev/fd/2 -ef "$__cur" ]; then exec 2>>"$__out/daemons"; fi
        exec "$__bins/$name" "${defaults[@]}" "$@"
    fi
    "$__bins/$name" "${defaults[@]}" "$@"
}
__alive() { [ -r "/proc/$1/stat" ] && [ "$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null)" != Z ]; }
__listens() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# __settle PID daemon|job WHERE PORT...: waits until the background job PID
# accepts connections on each PORT (the ports it names standing alone) and,
# a daemon, on its HTTP address; fails if it exits first or takes longer
# than $__wait s. A job that names no port is not waited for.
__settle() {
    local pid="$1" what="$2" where="$3" addr="" i p waiting
    shift 3
    for ((i = 0; i < __wait * 10; i++)); do
        waiting=""
        if [ "$what" = daemon ]; then
            if [ -e "$__ready/$pid" ]; then
                addr="$(<"$__ready/$pid")"
                [ -z "$addr" ] || __listens "${addr##*:}" || waiting="$addr"
            else
                waiting="its address"
            fi
        fi
        for p in "$@"; do __listens "$p" || waiting="$waiting 127.0.0.1:$p"; done
        [ -n "$waiting" ] || return 0
        if ! __alive "$pid"; then
            echo "doc-test: the $what started at $where exited before it listened on $waiting"
            return 1
        fi
        sleep 0.1
    done
    echo "doc-test: the $what started at $where did not listen on $waiting within $__wait s"
    return 1
}
"#;

/// What a page's run printed, block by block.
pub struct Run {
    pub outputs: Vec<String>,
    /// What the daemons started in the background logged.
    pub daemons: String,
    /// None: the session ended by itself with status 0.
    pub failure: Option<String>,
}

/// Runs `script` in `dir` (made and emptied by the caller) and stops every
/// process it started.
pub fn run(script: &str, bins: &Path, dir: &Path, blocks: usize) -> Run {
    for sub in ["out", "ready", "work"] {
        fs::create_dir_all(dir.join(sub)).expect("the page's directories");
    }
    // curl prints a progress meter when its output is not a terminal; the
    // reader's terminal shows none.
    fs::write(dir.join(".curlrc"), "silent\nshow-error\n").expect("the session's .curlrc");
    let path = dir.join("page.sh");
    fs::write(&path, script).expect("write the page's script");
    let log = fs::File::create(dir.join("session.log")).expect("the session's log");
    let path_var = format!(
        "{}:{}",
        bins.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut child = Command::new("bash")
        .arg(&path)
        .current_dir(dir.join("work"))
        .env("PATH", path_var)
        .env("NSQ_BIN_DIR", bins)
        .env("TMPDIR", dir.join("work"))
        .env("CURL_HOME", dir)
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("the session's log"))
        .stderr(log)
        // Its own process group: everything the page starts is stopped with it.
        .process_group(0)
        .spawn()
        .expect("spawn bash");
    let started = Instant::now();
    let status = wait_timeout(&mut child, PAGE_WAIT);
    let failure = match status {
        Some(st) if st.success() => None,
        Some(st) => Some(format!("the session ended with {st}")),
        None => Some(format!(
            "the session did not end within {:?}",
            started.elapsed()
        )),
    };
    stop_group(child.id());
    if status.is_none() {
        terminate(&mut child, STOP_WAIT);
    }
    let outputs = (0..blocks)
        .map(|i| fs::read_to_string(dir.join("out").join(i.to_string())).unwrap_or_default())
        .collect();
    let session = fs::read_to_string(dir.join("session.log")).unwrap_or_default();
    Run {
        outputs,
        daemons: fs::read_to_string(dir.join("out").join("daemons")).unwrap_or_default(),
        failure: failure.map(|f| {
            if session.trim().is_empty() {
                f
            } else {
                format!("{f}; bash said:\n{session}")
            }
        }),
    }
}

/// SIGTERM to the page's process group (the daemons save their state and
/// exit), then SIGKILL to whatever is left after [`STOP_WAIT`].
fn stop_group(pgid: u32) {
    use rustix::process::{kill_process_group, Pid, Signal};
    let Some(group) = i32::try_from(pgid).ok().and_then(Pid::from_raw) else {
        return;
    };
    let _ = kill_process_group(group, Signal::TERM);
    let deadline = Instant::now() + STOP_WAIT;
    while Instant::now() < deadline && group_alive(pgid) {
        std::thread::sleep(Duration::from_millis(50));
    }
    if group_alive(pgid) {
        let _ = kill_process_group(group, Signal::KILL);
    }
}

/// Whether any process of group `pgid` is still running.
fn group_alive(pgid: u32) -> bool {
    let Ok(entries) = fs::read_dir("/proc") else {
        return false;
    };
    entries.flatten().any(|e| {
        let Ok(stat) = fs::read_to_string(e.path().join("stat")) else {
            return false;
        };
        // pid (comm) state ppid pgrp …: comm may hold spaces, so after ')'.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            return false;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        f.len() > 2 && f[0] != "Z" && f[2] == pgid.to_string()
    })
}

/// Whether `actual` shows `expected`: each non-blank expected line within
/// one line of the output, where `...` stands for any text; in order,
/// unless `any_order` (then each by a line of its own).
pub fn shows(actual: &str, expected: &str, any_order: bool) -> Result<(), String> {
    let lines: Vec<&str> = actual.lines().collect();
    let mut used = vec![false; lines.len()];
    let mut from = 0;
    for want in expected
        .lines()
        .map(str::trim_end)
        .filter(|l| !l.trim().is_empty())
    {
        let parts: Vec<&str> = want.trim().split("...").collect();
        let start = if any_order { 0 } else { from };
        let hit = (start..lines.len()).find(|&k| !used[k] && contains_in_order(lines[k], &parts));
        match hit {
            Some(k) => {
                used[k] = true;
                from = k + 1;
            }
            None if any_order => return Err(format!("no line shows {want:?}")),
            None => return Err(format!("no line (in order) shows {want:?}")),
        }
    }
    Ok(())
}

fn contains_in_order(line: &str, parts: &[&str]) -> bool {
    let mut rest = line;
    for p in parts {
        match rest.find(p) {
            Some(at) => rest = &rest[at + p.len()..],
            None => return false,
        }
    }
    true
}

/// Where the pages' runs go: a directory under the test's temp dir.
pub fn page_dir(root: &Path, page: &Path) -> PathBuf {
    let name: String = page
        .to_string_lossy()
        .chars()
        .map(|c| if c.is_alphanumeric() { c } else { '_' })
        .collect();
    root.join(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_rewritten_everywhere_and_consistently() {
        let text = "nsqd --lookupd-tcp-address=127.0.0.1:4160 &\ncurl 'http://localhost:4151/pub' 0.0.0.0:4200 127.0.0.1:4200 2026/12/02 22:06:53";
        let ports = Ports::for_texts([text].into_iter());
        let out = ports.rewrite(text);
        let p = |n| ports.port(n);
        assert_eq!(
            out,
            format!("nsqd --lookupd-tcp-address=127.0.0.1:{} &\ncurl 'http://127.0.0.1:{}/pub' 127.0.0.1:{} 127.0.0.1:{} 2026/12/02 22:06:53", p(4160), p(4151), p(4200), p(4200))
        );
    }

    #[test]
    fn a_here_document_is_part_of_its_command() {
        let code = "cat >nsqd.toml <<'EOF'\ntcp_address = \"0.0.0.0:4150\"\nmem_queue_size = 10000 &\nEOF\nnsqd --config=nsqd.toml &\ncat <<< x\n";
        assert_eq!(
            split(code),
            [
                ("cat >nsqd.toml <<'EOF'".to_string(), 3),
                ("nsqd --config=nsqd.toml &".to_string(), 4),
                ("cat <<< x".to_string(), 5)
            ]
        );
    }

    #[test]
    fn commands_and_daemon_starts() {
        let code = "# start it\nnsqd --mem-queue-size=0 \\\n  --max-attempts=3 &\ncurl x   # & not a daemon\nFOO=1 nsqlookupd & # comment &&\nnsqd --version && echo ok\nnsq_tail -n 1 &\n";
        let cmds = commands(code);
        assert_eq!(cmds.len(), 5);
        let starts: Vec<bool> = cmds.iter().map(|c| starts_daemon(c)).collect();
        assert_eq!(starts, [true, false, true, false, false]);
        let background: Vec<bool> = cmds.iter().map(|c| in_background(c)).collect();
        assert_eq!(background, [true, false, true, false, true]);
    }

    #[test]
    fn a_port_standing_alone_is_rewritten_where_the_page_names_it() {
        let text = "python3 -m http.server 4181 --bind 127.0.0.1 &\nnsqd --auth-http-address=127.0.0.1:4181 --max-depth=4181x v1.4181 22:41:81 {\"port\":4181} &";
        let ports = Ports::for_texts([text].into_iter());
        let free = ports.port(4181);
        let out = ports.rewrite(text);
        assert_eq!(
            out,
            format!("python3 -m http.server {free} --bind 127.0.0.1 &\nnsqd --auth-http-address=127.0.0.1:{free} --max-depth=4181x v1.4181 22:41:81 {{\"port\":{free}}} &")
        );
        assert_eq!(ports.bare_ports(out.lines().next().unwrap()), [free]);
        assert!(ports.bare_ports("nsq_tail -n 1").is_empty());
    }

    #[test]
    fn output_is_matched_line_by_line_in_order_with_ellipses() {
        let actual =
            "[nsqd] 2026 INFO: TCP: listening on 127.0.0.1:4150\nOK{\"a\":1,\"b\":2}\nlast";
        assert!(shows(
            actual,
            "INFO: TCP: listening on ...\n\n{\"a\":1,...}\nlast\n",
            false
        )
        .is_ok());
        assert!(shows(actual, "last\nOK\n", false).is_err(), "order counts");
        assert!(
            shows(actual, "last\nOK\n", true).is_ok(),
            "unless it does not"
        );
        assert!(
            shows(actual, "last\nlast\n", true).is_err(),
            "a line of its own each"
        );
        assert!(shows(actual, "missing\n", false).is_err());
    }
}
