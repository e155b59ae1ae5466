//! One topic's archive: a [`Consumer`] whose handler passes each message to
//! a router thread that appends `body\n` to the current file, rotates it,
//! and FINs messages only once they are on disk.
//!
//! The router is NSQ's `FileLogger.router` loop: it reacts to one event at
//! a time (message, sync tick, SIGHUP, stop request, consumer stopped) and
//! after each decides whether to sync (batch full, tick, rotation, HUP,
//! stopping, or the consumer is starved) and whether to close the file.
//! Sync = finish the gzip member (if any) + fsync, then FIN the batch.
//! It runs on its own OS thread because every file operation blocks; it
//! waits for events through the tokio runtime's handle.
//!
//! Files are opened under `--work-dir` and moved into `--output-dir` when
//! closed (hard link + unlink, never overwriting: the revision is bumped).
//! Any I/O failure is fatal, as in NSQ: a half-written archive must not
//! keep acknowledging messages.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::DirBuilderExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flate2::write::GzEncoder;
use flate2::Compression;
use nsq_client::{Consumer, Handler, HandlerResult, Message};
use tokio::runtime::Handle;
use tokio::sync::{mpsc, oneshot};

use crate::clock::{strftime, LocalTime};
use crate::gopath;
use crate::logf::{self, path_err};

/// Everything a file logger needs from the command line.
#[derive(Debug, Clone)]
pub struct Settings {
    pub channel: String,
    pub max_in_flight: i64,
    pub output_dir: String,
    /// Equal to `output_dir` when `--work-dir` is not given.
    pub work_dir: String,
    pub datetime_format: String,
    pub filename_format: String,
    pub host_identifier: String,
    pub gzip: bool,
    pub gzip_level: u32,
    pub skip_empty_files: bool,
    /// 0 = off.
    pub rotate_size: i64,
    pub rotate_interval: Option<Duration>,
    /// `None` for a zero or negative `--sync-interval` (NSQ panics on it).
    pub sync_interval: Option<Duration>,
    pub nsqd_tcp_addrs: Vec<String>,
    pub lookupd_http_addrs: Vec<String>,
}

/// The machine's host name as Go's `os.Hostname` reads it on Linux.
pub fn hostname() -> io::Result<String> {
    let h = std::fs::read_to_string("/proc/sys/kernel/hostname")?;
    Ok(h.trim_end_matches('\n').to_string())
}

/// The per-topic file name template: `<TOPIC>`, `<HOST>`, `<PID>` filled
/// in, `<REV>` kept (or dropped when nothing can need it), `.gz` added.
/// `<DATETIME>` and `<REV>` are filled at open time.
pub fn compute_filename_format(
    s: &Settings,
    topic: &str,
    hostname: &str,
) -> Result<String, String> {
    let short = hostname.split('.').next().unwrap_or_default();
    let identifier = if s.host_identifier.is_empty() {
        short.to_string()
    } else {
        s.host_identifier
            .replace("<SHORT_HOST>", short)
            .replace("<HOSTNAME>", hostname)
    };
    let mut cff = s.filename_format.clone();
    if s.gzip || s.rotate_size > 0 || s.rotate_interval.is_some() || s.work_dir != s.output_dir {
        if !cff.contains("<REV>") {
            return Err(
                "missing <REV> in --filename-format when gzip, rotation, or work dir enabled"
                    .into(),
            );
        }
    } else {
        cff = cff.replace("<REV>", "");
    }
    cff = cff
        .replace("<TOPIC>", topic)
        .replace("<HOST>", &identifier)
        .replace("<PID>", &std::process::id().to_string());
    if s.gzip && !cff.ends_with(".gz") {
        cff.push_str(".gz");
    }
    Ok(cff)
}

fn rev_text(rev: u64) -> String {
    format!("-{rev:06}")
}

enum Writer {
    Plain(File),
    Gzip(GzEncoder<File>),
}

struct Output {
    /// `None` only while a sync swaps the gzip member.
    writer: Option<Writer>,
    /// The in-progress path (Go's `f.out.Name()`).
    path: String,
}

/// The file side of a topic: what is open, since when, how big, which revision.
pub struct FileState {
    s: Arc<Settings>,
    /// `[topic/channel]`, the prefix of every log line.
    tag: String,
    filename_format: String,
    out: Option<Output>,
    /// The last computed name (`<DATETIME>` filled, `<REV>` not).
    filename: String,
    open_time: Instant,
    filesize: i64,
    rev: u64,
}

impl FileState {
    pub fn new(s: Arc<Settings>, topic: &str, filename_format: String) -> FileState {
        let tag = format!("[{topic}/{}]", s.channel);
        FileState {
            s,
            tag,
            filename_format,
            out: None,
            filename: String::new(),
            open_time: Instant::now(),
            filesize: 0,
            rev: 0,
        }
    }

    fn fatal(&self, msg: String) -> ! {
        logf::fatal(format!("{} {msg}", self.tag))
    }

    fn current_filename(&self) -> String {
        let datetime = strftime(&self.s.datetime_format, &LocalTime::now());
        self.filename_format.replace("<DATETIME>", &datetime)
    }

    /// Appends `data`; counts uncompressed bytes, as NSQ does.
    fn write(&mut self, data: &[u8]) -> io::Result<()> {
        let Some(out) = self.out.as_mut() else {
            return Err(io::Error::other("file already closed"));
        };
        match &mut out.writer {
            Some(Writer::Plain(f)) => f.write_all(data)?,
            Some(Writer::Gzip(g)) => g.write_all(data)?,
            None => return Err(io::Error::other("file already closed")),
        }
        self.filesize += data.len() as i64;
        Ok(())
    }

    /// Makes what was written durable: a gzip member is finished (the next
    /// writes start a new member in the same file), then fsync.
    fn sync(&mut self) -> io::Result<()> {
        let Some(out) = self.out.as_mut() else {
            return Ok(());
        };
        match out.writer.take() {
            Some(Writer::Plain(f)) => {
                let r = f.sync_all();
                out.writer = Some(Writer::Plain(f));
                r
            }
            Some(Writer::Gzip(g)) => {
                let f = g.finish()?;
                let r = f.sync_all();
                out.writer = Some(Writer::Gzip(GzEncoder::new(
                    f,
                    Compression::new(self.s.gzip_level),
                )));
                r
            }
            None => Err(io::Error::other("file already closed")),
        }
    }

    /// NSQ's `needsRotation`, with its log lines.
    fn needs_rotation(&self) -> bool {
        let Some(out) = &self.out else { return true };
        let filename = self.current_filename();
        if filename != self.filename {
            logf::info(format!("{} new filename {filename}, rotating...", self.tag));
            return true;
        }
        if let Some(interval) = self.s.rotate_interval {
            let since = self.open_time.elapsed();
            if since > interval {
                logf::info(format!(
                    "{} {} since last open, rotating...",
                    self.tag,
                    nsq_protocol::duration::format(since)
                ));
                return true;
            }
        }
        if self.s.rotate_size > 0 && self.filesize > self.s.rotate_size {
            logf::info(format!(
                "{} {} currently {} bytes (> {}), rotating...",
                self.tag, out.path, self.filesize, self.s.rotate_size
            ));
            return true;
        }
        false
    }

    /// Finishes, fsyncs and closes the current file, then moves it into the
    /// output directory if a work directory is used. Failures are fatal.
    fn close(&mut self) {
        let Some(out) = self.out.take() else { return };
        let file = match out.writer {
            Some(Writer::Plain(f)) => f,
            Some(Writer::Gzip(g)) => match g.finish() {
                Ok(f) => f,
                Err(e) => self.fatal(format!(
                    "failed to close GZIP writer: {}",
                    logf::errno_text(&e)
                )),
            },
            None => return,
        };
        if let Err(e) = file.sync_all() {
            self.fatal(format!(
                "failed to fsync output file: {}",
                path_err("sync", &out.path, &e)
            ));
        }
        drop(file);
        if self.s.work_dir == self.s.output_dir {
            return;
        }
        let src = out.path;
        let dst = gopath::join(&[
            &self.s.output_dir,
            src.strip_prefix(self.s.work_dir.as_str()).unwrap_or(&src),
        ]);
        logf::info(format!("{} moving finished file {src} to {dst}", self.tag));
        match exclusive_rename(&src, &dst) {
            Ok(()) => return,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => self.fatal(format!(
                "unable to move file from {src} to {dst}: {}",
                link_err(&src, &dst, &e)
            )),
        }
        // Taken: bump the revision in the destination name until one is free.
        let (_, filename_tmpl) = gopath::split(&self.filename);
        let (dst_dir, _) = gopath::split(&dst);
        let dst_tmpl = gopath::join(&[dst_dir, filename_tmpl]);
        let mut i = self.rev + 1;
        loop {
            logf::warn(format!(
                "{} destination file already exists: {dst}",
                self.tag
            ));
            let candidate = dst_tmpl.replace("<REV>", &rev_text(i));
            match exclusive_rename(&src, &candidate) {
                Ok(()) => {
                    logf::info(format!(
                        "{} renamed finished file {src} to {candidate} to avoid overwrite",
                        self.tag
                    ));
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => i += 1,
                Err(e) => self.fatal(format!(
                    "unable to rename file from {src} to {candidate}: {}",
                    link_err(&src, &candidate, &e)
                )),
            }
        }
    }

    /// Closes the current file and opens the next: revision 0 for a new
    /// name, else the next revision; taken revisions are skipped.
    fn update_file(&mut self) {
        self.close();
        let filename = self.current_filename();
        if filename != self.filename {
            self.rev = 0;
        } else {
            self.rev += 1;
        }
        self.filename = filename;
        self.open_time = Instant::now();
        let full_path = gopath::join(&[&self.s.work_dir, &self.filename]);
        if let Err(e) = make_dir_from_path(&full_path) {
            self.fatal(format!("unable to create dir: {e}"));
        }
        let exclusive = self.s.gzip || self.s.rotate_interval.is_some();
        loop {
            let abs = full_path.replace("<REV>", &rev_text(self.rev));
            if self.s.work_dir != self.s.output_dir {
                let output_name = gopath::join(&[
                    &self.s.output_dir,
                    abs.strip_prefix(self.s.work_dir.as_str()).unwrap_or(&abs),
                ]);
                if let Err(e) = make_dir_from_path(&output_name) {
                    self.fatal(format!("unable to create dir: {e}"));
                }
                match std::fs::metadata(&output_name) {
                    Ok(_) => {
                        logf::warn(format!(
                            "{} output file already exists: {output_name}",
                            self.tag
                        ));
                        self.rev += 1;
                        continue;
                    }
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => self.fatal(format!(
                        "unable to stat output file {output_name}: {}",
                        path_err("stat", &output_name, &e)
                    )),
                }
            }
            let mut oo = OpenOptions::new();
            oo.write(true);
            if exclusive {
                oo.create_new(true);
            } else {
                oo.create(true).append(true);
            }
            let file = match oo.open(&abs) {
                Ok(f) => f,
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    logf::warn(format!("{} working file already exists: {abs}", self.tag));
                    self.rev += 1;
                    continue;
                }
                Err(e) => self.fatal(format!(
                    "unable to open {abs}: {}",
                    path_err("open", &abs, &e)
                )),
            };
            logf::info(format!("{} opening {abs}", self.tag));
            let size = match file.metadata() {
                Ok(m) => m.len() as i64,
                Err(e) => self.fatal(format!(
                    "unable to stat file {abs}: {}",
                    path_err("stat", &abs, &e)
                )),
            };
            self.filesize = size;
            if self.s.rotate_size > 0 && size > self.s.rotate_size {
                logf::info(format!(
                    "{} {abs} currently {size} bytes (> {}), rotating...",
                    self.tag, self.s.rotate_size
                ));
                self.rev += 1;
                continue;
            }
            let writer = if self.s.gzip {
                Writer::Gzip(GzEncoder::new(file, Compression::new(self.s.gzip_level)))
            } else {
                Writer::Plain(file)
            };
            self.out = Some(Output {
                writer: Some(writer),
                path: abs,
            });
            return;
        }
    }
}

fn make_dir_from_path(path: &str) -> Result<(), String> {
    let (dir, _) = gopath::split(path);
    if dir.is_empty() {
        return Ok(());
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o770)
        .create(dir)
        .map_err(|e| path_err("mkdir", dir.trim_end_matches('/'), &e))
}

/// Hard link then unlink: fails with `AlreadyExists` instead of overwriting.
fn exclusive_rename(src: &str, dst: &str) -> io::Result<()> {
    std::fs::hard_link(src, dst)?;
    std::fs::remove_file(src)
}

fn link_err(src: &str, dst: &str, e: &io::Error) -> String {
    format!("link {src} {dst}: {}", logf::errno_text(e))
}

/// The consumer's handler: keep the message unanswered and hand it to the
/// router (one slot of buffer, like NSQ's channel).
struct ToRouter(mpsc::Sender<Message>);

impl Handler for ToRouter {
    async fn handle_message(&self, m: Message) -> HandlerResult {
        m.disable_auto_response();
        // If the router is gone the message is dropped unanswered, which
        // requeues it.
        let _ = self.0.send(m).await;
        Ok(())
    }
}

/// What the discoverer holds for a running file logger.
pub struct LoggerHandle {
    term: Option<oneshot::Sender<()>>,
    hup: mpsc::UnboundedSender<()>,
    done: oneshot::Receiver<()>,
}

impl LoggerHandle {
    pub fn term(&mut self) {
        if let Some(t) = self.term.take() {
            let _ = t.send(());
        }
    }

    pub fn hup(&self) {
        let _ = self.hup.send(());
    }

    /// Resolves when the router has closed its file and exited.
    pub async fn wait(self) {
        let _ = self.done.await;
    }
}

/// NSQ's `NewFileLogger` + starting its router: name template, consumer,
/// handler, connections. Errors mean the topic is skipped.
pub async fn start(
    s: Arc<Settings>,
    topic: &str,
    cfg: nsq_client::Config,
) -> Result<LoggerHandle, String> {
    let host = hostname().map_err(|e| path_err("open", "/proc/sys/kernel/hostname", &e))?;
    let format = compute_filename_format(&s, topic, &host)?;
    let consumer = Consumer::new(topic, &s.channel, cfg).map_err(|e| e.to_string())?;
    let (msg_tx, msg_rx) = mpsc::channel(1);
    consumer
        .add_handler(ToRouter(msg_tx))
        .map_err(|e| e.to_string())?;
    let connected = async {
        consumer.connect_to_nsqds(&s.nsqd_tcp_addrs).await?;
        consumer
            .connect_to_nsqd_lookupds(&s.lookupd_http_addrs)
            .await
    };
    if let Err(e) = connected.await {
        let c = consumer.clone();
        tokio::spawn(async move { c.stop().await });
        return Err(e.to_string());
    }
    let (term_tx, term_rx) = oneshot::channel();
    let (hup_tx, hup_rx) = mpsc::unbounded_channel();
    let (done_tx, done_rx) = oneshot::channel();
    let state = FileState::new(s.clone(), topic, format);
    let inbox = Inbox {
        msgs: msg_rx,
        term: Some(term_rx),
        hup: hup_rx,
        stopped: None,
        ticker: None,
    };
    let handle = Handle::current();
    std::thread::Builder::new()
        .name(format!("router-{topic}"))
        .spawn(move || {
            router(state, inbox, consumer, handle);
            let _ = done_tx.send(());
        })
        .map_err(|e| e.to_string())?;
    Ok(LoggerHandle {
        term: Some(term_tx),
        hup: hup_tx,
        done: done_rx,
    })
}

enum Event {
    ConsumerStopped,
    Term,
    Hup,
    Tick,
    Msg(Message),
}

struct Inbox {
    msgs: mpsc::Receiver<Message>,
    term: Option<oneshot::Receiver<()>>,
    hup: mpsc::UnboundedReceiver<()>,
    /// Armed once a stop was asked for.
    stopped: Option<oneshot::Receiver<()>>,
    ticker: Option<tokio::time::Interval>,
}

impl Inbox {
    async fn next(&mut self) -> Event {
        tokio::select! {
            _ = async { self.stopped.as_mut().unwrap().await }, if self.stopped.is_some() => {
                self.stopped = None;
                Event::ConsumerStopped
            }
            _ = async { self.term.as_mut().unwrap().await }, if self.term.is_some() => {
                self.term = None;
                Event::Term
            }
            Some(()) = self.hup.recv() => Event::Hup,
            _ = async { self.ticker.as_mut().unwrap().tick().await }, if self.ticker.is_some() => Event::Tick,
            Some(m) = self.msgs.recv() => Event::Msg(m),
            else => Event::ConsumerStopped,
        }
    }
}

/// go-nsq's `IsStarved`: holding (nearly) as many messages as RDY allows,
/// so nsqd will send nothing more until some are answered.
fn is_starved(consumer: &Consumer) -> bool {
    let st = consumer.stats();
    let threshold = (st.total_rdy as f64 * 0.85) as i64;
    st.in_flight > 0 && st.in_flight >= threshold
}

fn router(mut f: FileState, mut inbox: Inbox, consumer: Consumer, rt: Handle) {
    let Some(sync_interval) = f.s.sync_interval else {
        // What Go's time.NewTicker does with a non-positive interval.
        eprintln!("panic: non-positive interval for NewTicker");
        std::process::exit(2);
    };
    let cap = usize::try_from(f.s.max_in_flight).unwrap_or(0);
    let mut batch: Vec<Message> = Vec::with_capacity(cap);
    inbox.ticker = Some(rt.block_on(async {
        let mut t =
            tokio::time::interval_at(tokio::time::Instant::now() + sync_interval, sync_interval);
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        t
    }));
    let mut stopping = false;
    loop {
        let mut sync = false;
        let mut close_file = false;
        let mut exit = false;
        match rt.block_on(inbox.next()) {
            Event::ConsumerStopped => {
                sync = true;
                close_file = true;
                exit = true;
            }
            Event::Term => {
                inbox.ticker = None;
                stopping = true;
                let (tx, rx) = oneshot::channel();
                inbox.stopped = Some(rx);
                let c = consumer.clone();
                rt.spawn(async move {
                    c.stop().await;
                    let _ = tx.send(());
                });
            }
            Event::Hup => {
                sync = true;
                close_file = true;
            }
            Event::Tick => {
                if f.needs_rotation() {
                    if f.s.skip_empty_files {
                        close_file = true;
                    } else {
                        f.update_file();
                    }
                }
                sync = true;
            }
            Event::Msg(m) => {
                if f.needs_rotation() {
                    f.update_file();
                    sync = true;
                }
                if let Err(e) = f.write(m.body()) {
                    f.fatal(format!("writing message to disk: {}", logf::errno_text(&e)));
                }
                if let Err(e) = f.write(b"\n") {
                    f.fatal(format!("writing newline to disk: {}", logf::errno_text(&e)));
                }
                batch.push(m);
                if batch.len() >= cap {
                    sync = true;
                }
            }
        }
        // Once stopping, NSQ's closed term channel fires on every turn, so
        // every message is synced as soon as it is written.
        if (sync || stopping || is_starved(&consumer)) && !batch.is_empty() {
            logf::info(format!("{} syncing {} records to disk", f.tag, batch.len()));
            if let Err(e) = f.sync() {
                f.fatal(format!("failed syncing messages: {}", logf::errno_text(&e)));
            }
            while let Some(m) = batch.pop() {
                m.finish();
            }
        }
        if close_file {
            f.close();
        }
        if exit {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        Settings {
            channel: "nsq_to_file".into(),
            max_in_flight: 200,
            output_dir: "/tmp".into(),
            work_dir: "/tmp".into(),
            datetime_format: "%Y-%m-%d_%H".into(),
            filename_format: "<TOPIC>.<HOST><REV>.<DATETIME>.log".into(),
            host_identifier: String::new(),
            gzip: false,
            gzip_level: 6,
            skip_empty_files: false,
            rotate_size: 0,
            rotate_interval: None,
            sync_interval: Some(Duration::from_secs(30)),
            nsqd_tcp_addrs: vec![],
            lookupd_http_addrs: vec![],
        }
    }

    #[test]
    fn filename_formats() {
        let s = settings();
        assert_eq!(
            compute_filename_format(&s, "clicks", "web01.example.com").unwrap(),
            "clicks.web01.<DATETIME>.log"
        );
        let gz = Settings {
            gzip: true,
            ..settings()
        };
        assert_eq!(
            compute_filename_format(&gz, "clicks", "web01.example.com").unwrap(),
            "clicks.web01<REV>.<DATETIME>.log.gz"
        );
        let id = Settings {
            host_identifier: "<SHORT_HOST>-<HOSTNAME>".into(),
            ..settings()
        };
        assert_eq!(
            compute_filename_format(&id, "t", "a.b").unwrap(),
            "t.a-a.b.<DATETIME>.log"
        );
        let no_rev = Settings {
            rotate_size: 10,
            filename_format: "<TOPIC>.<DATETIME>.log".into(),
            ..settings()
        };
        assert_eq!(
            compute_filename_format(&no_rev, "t", "h").unwrap_err(),
            "missing <REV> in --filename-format when gzip, rotation, or work dir enabled"
        );
        let work = Settings {
            work_dir: "/w".into(),
            filename_format: "<TOPIC>.<PID>".into(),
            ..settings()
        };
        assert!(compute_filename_format(&work, "t", "h").is_err());
        let pid = Settings {
            filename_format: "<TOPIC>.<PID>".into(),
            ..settings()
        };
        assert_eq!(
            compute_filename_format(&pid, "t", "h").unwrap(),
            format!("t.{}", std::process::id())
        );
    }

    #[test]
    fn rotation_by_size_bumps_revision_and_gzip_members_concatenate() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_str().unwrap().to_string();
        let s = Arc::new(Settings {
            output_dir: d.clone(),
            work_dir: d.clone(),
            gzip: true,
            rotate_size: 5,
            ..settings()
        });
        let format = compute_filename_format(&s, "t", "h").unwrap();
        let mut f = FileState::new(s, "t", format);
        assert!(f.needs_rotation());
        f.update_file();
        f.write(b"abc\n").unwrap();
        f.sync().unwrap();
        f.write(b"de\n").unwrap();
        assert!(f.needs_rotation());
        f.update_file();
        f.write(b"x\n").unwrap();
        f.close();
        let mut names: Vec<String> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names.len(), 2);
        assert!(
            names[0].starts_with("t.h-000000.") && names[0].ends_with(".log.gz"),
            "{names:?}"
        );
        assert!(names[1].starts_with("t.h-000001."), "{names:?}");
        let first = std::fs::read(dir.path().join(&names[0])).unwrap();
        let mut text = String::new();
        io::Read::read_to_string(
            &mut flate2::read::MultiGzDecoder::new(&first[..]),
            &mut text,
        )
        .unwrap();
        assert_eq!(text, "abc\nde\n");
    }

    #[test]
    fn work_dir_files_move_without_overwriting() {
        let out = tempfile::tempdir().unwrap();
        let work = tempfile::tempdir().unwrap();
        let (o, w) = (
            out.path().to_str().unwrap().to_string(),
            work.path().to_str().unwrap().to_string(),
        );
        let s = Arc::new(Settings {
            output_dir: o.clone(),
            work_dir: w.clone(),
            ..settings()
        });
        let format = compute_filename_format(&s, "t", "h").unwrap();
        let mut f = FileState::new(s.clone(), "t", format.clone());
        f.update_file();
        f.write(b"one\n").unwrap();
        // Something else takes the next revision in the output directory.
        let taken = format
            .replace("<REV>", "-000001")
            .replace("<DATETIME>", &strftime("%Y-%m-%d_%H", &LocalTime::now()));
        std::fs::write(out.path().join(&taken), b"other\n").unwrap();
        f.close();
        f.update_file(); // rev 1 is taken in output → rev 2
        f.write(b"two\n").unwrap();
        f.close();
        assert_eq!(std::fs::read_dir(&w).unwrap().count(), 0);
        let mut names: Vec<String> = std::fs::read_dir(&o)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names.len(), 3, "{names:?}");
        assert!(names[2].contains("-000002."), "{names:?}");
        assert_eq!(
            std::fs::read_to_string(out.path().join(&names[2])).unwrap(),
            "two\n"
        );
    }
}
