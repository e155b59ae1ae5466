//! Topic discovery: NSQ's `TopicDiscoverer`. With `--topic` the set is
//! fixed; without, every `--topic-refresh` the union of `GET /topics` over
//! all lookupds is taken and a file logger is started for each new topic
//! matching `--topic-pattern`. Topics are never dropped. SIGHUP is passed
//! to every logger; SIGINT/SIGTERM stop them all and wait for their files
//! to be closed.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use regex::Regex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::file_logger::{self, LoggerHandle, Settings};
use crate::logf;

pub struct Discoverer {
    pub settings: Arc<Settings>,
    pub cfg: nsq_client::Config,
    pub topics: Vec<String>,
    pub topic_pattern: String,
    /// `None`: never refresh (Go's `time.Tick` of a non-positive duration).
    pub topic_refresh: Option<Duration>,
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
}

impl Discoverer {
    pub async fn run(self, term: CancellationToken, mut hup: tokio::signal::unix::Signal) {
        // Go's regexp.MatchString: a pattern that does not compile matches nothing.
        let pattern =
            (!self.topic_pattern.is_empty()).then(|| Regex::new(&self.topic_pattern).ok());
        let mut loggers: HashMap<String, LoggerHandle> = HashMap::new();
        self.update_topics(&mut loggers, &pattern, &self.topics)
            .await;
        let mut ticker = match self.topic_refresh {
            Some(d) if self.topics.is_empty() => {
                Some(tokio::time::interval_at(tokio::time::Instant::now() + d, d))
            }
            _ => None,
        };
        loop {
            tokio::select! {
                _ = async { ticker.as_mut().unwrap().tick().await }, if ticker.is_some() => {
                    match get_lookupd_topics(&self.settings.lookupd_http_addrs, self.connect_timeout, self.request_timeout).await {
                        Ok(topics) => self.update_topics(&mut loggers, &pattern, &topics).await,
                        Err(e) => logf::error(format!("could not retrieve topic list: {e}")),
                    }
                }
                _ = term.cancelled() => break,
                _ = hup.recv() => {
                    for l in loggers.values() {
                        l.hup();
                    }
                }
            }
        }
        for l in loggers.values_mut() {
            l.term();
        }
        for (_, l) in loggers {
            l.wait().await;
        }
    }

    async fn update_topics(
        &self,
        loggers: &mut HashMap<String, LoggerHandle>,
        pattern: &Option<Option<Regex>>,
        topics: &[String],
    ) {
        for topic in topics {
            if loggers.contains_key(topic) {
                continue;
            }
            let allowed = match pattern {
                None => true,
                Some(Some(re)) => re.is_match(topic),
                Some(None) => false,
            };
            if !allowed {
                logf::warn(format!(
                    "skipping topic {topic} (doesn't match pattern {})",
                    self.topic_pattern
                ));
                continue;
            }
            match file_logger::start(self.settings.clone(), topic, self.cfg.clone()).await {
                Ok(l) => {
                    loggers.insert(topic.clone(), l);
                }
                Err(e) => logf::error(format!("couldn't create logger for new topic {topic}: {e}")),
            }
        }
    }
}

/// NSQ's `GetLookupdTopics`: the sorted union of every lookupd's
/// `/topics`; any failure is an error (with the topics still listed, which
/// the discoverer ignores, as NSQ's does).
pub async fn get_lookupd_topics(
    addrs: &[String],
    connect_timeout: Duration,
    request_timeout: Duration,
) -> Result<Vec<String>, String> {
    let mut set = JoinSet::new();
    for addr in addrs {
        let addr = addr.clone();
        set.spawn(async move {
            let endpoint = format!("http://{addr}/topics");
            get_v1_topics(&addr, connect_timeout, request_timeout)
                .await
                .map_err(|e| format!("Get \"{endpoint}\": {e}"))
        });
    }
    let mut topics = BTreeSet::new();
    let mut errs = Vec::new();
    while let Some(r) = set.join_next().await {
        match r {
            Ok(Ok(t)) => topics.extend(t),
            Ok(Err(e)) => errs.push(e),
            Err(e) => errs.push(e.to_string()),
        }
    }
    if !errs.is_empty() && errs.len() == addrs.len() {
        return Err(format!(
            "failed to query any nsqlookupd: {}",
            errs.join("\n")
        ));
    }
    if !errs.is_empty() {
        return Err(errs.join("\n"));
    }
    Ok(topics.into_iter().collect())
}

/// `GET /topics` with NSQ's v1 `Accept` header; `{"topics":[...]}`.
async fn get_v1_topics(
    addr: &str,
    connect_timeout: Duration,
    request_timeout: Duration,
) -> Result<Vec<String>, String> {
    let mut stream = match tokio::time::timeout(connect_timeout, TcpStream::connect(addr)).await {
        Err(_) => return Err(format!("dial tcp {addr}: i/o timeout")),
        Ok(Err(e)) => {
            return Err(format!(
                "dial tcp {addr}: connect: {}",
                logf::errno_text(&e)
            ))
        }
        Ok(Ok(s)) => s,
    };
    let req = format!(
        "GET /topics HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: Go-http-client/1.1\r\nAccept: application/vnd.nsq; version=1.0\r\nConnection: close\r\n\r\n"
    );
    let exchange = async {
        stream.write_all(req.as_bytes()).await?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await?;
        Ok::<_, std::io::Error>(raw)
    };
    let raw = match tokio::time::timeout(request_timeout, exchange).await {
        Err(_) => {
            return Err(
                "context deadline exceeded (Client.Timeout exceeded while awaiting headers)".into(),
            )
        }
        Ok(Err(e)) => return Err(logf::errno_text(&e)),
        Ok(Ok(raw)) => raw,
    };
    let (status, body) = nsq_client::lookup::parse_http_response(&raw)?;
    if status != 200 {
        return Err(format!(
            "got response {status} {:?}",
            String::from_utf8_lossy(&body)
        ));
    }
    let v: serde_json::Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
    Ok(v.get("topics")
        .and_then(|t| t.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|t| t.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default())
}
