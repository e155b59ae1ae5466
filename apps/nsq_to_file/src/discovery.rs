//! Topic discovery: NSQ's `TopicDiscoverer`. With `--topic` the set is
//! fixed; without, every `--topic-refresh` the union of `GET /topics` over
//! all lookupds is taken and a file logger is started for each new topic
//! matching `--topic-pattern`. Topics are never dropped. SIGHUP is passed
//! to every logger; SIGINT/SIGTERM stop them all and wait for their files
//! to be closed.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use nsq_protocol::lookupd::Topics;
use regex::Regex;
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
                    match get_lookupd_topics(&self.settings.lookupd_http_addrs, self.connect_timeout, self.request_timeout, &self.cfg).await {
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
/// the discoverer ignores, as NSQ's does). `https://` lookupds are
/// verified with the consumers' TLS settings (`--consumer-opt`).
pub async fn get_lookupd_topics(
    addrs: &[String],
    connect_timeout: Duration,
    request_timeout: Duration,
    cfg: &nsq_client::Config,
) -> Result<Vec<String>, String> {
    let tls = nsq_http::tls::ClientTls {
        root_ca_file: cfg.tls_root_ca_file.as_deref().unwrap_or_default(),
        insecure_skip_verify: cfg.tls_insecure_skip_verify,
        ..Default::default()
    }
    .config()?;
    let client = nsq_http::Client::new(
        nsq_http::ClientOptions::new(connect_timeout, request_timeout)
            .secret(cfg.http_secret.as_deref().unwrap_or_default())
            .tls(tls),
    );
    let mut set = JoinSet::new();
    for addr in addrs {
        let client = client.clone();
        let url = format!("{}/topics", nsq_http::url::base_url(addr));
        set.spawn(async move {
            client
                .get_v1::<Topics>(&url)
                .await
                .map(|t| t.topics)
                .map_err(|e| e.to_string())
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
