//! `nsqd.dat`: the topics and channels that exist and which are paused, in
//! Go nsqd's JSON, so either implementation loads the other's data
//! directory. Unknown keys are ignored on load, as Go's decoder does.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

#[derive(Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Metadata {
    pub topics: Option<Vec<TopicMeta>>,
    pub version: String,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct TopicMeta {
    pub name: String,
    #[serde(default)]
    pub paused: bool,
    pub channels: Option<Vec<ChannelMeta>>,
    /// nsq-rs limits, present only when set (Go nsqd ignores them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_queue_size: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_depth: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_depth_policy: Option<String>,
    /// Its own `max_age`, in nanoseconds (nsq-rs expiry; Go's encoding of a
    /// duration), present only when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_age: Option<i64>,
    /// A replicated topic's replicas (nsq-rs, docs/replication.md);
    /// absent for every unreplicated topic, so the file stays NSQ's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<u8>,
}

#[derive(Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ChannelMeta {
    pub name: String,
    #[serde(default)]
    pub paused: bool,
    /// nsq-rs settings, present only when set (Go nsqd ignores them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_letter_topic: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_depth: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_depth_policy: Option<String>,
    /// Its own `max_age`, in nanoseconds (nsq-rs expiry), present only when
    /// set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_age: Option<i64>,
}

/// The file's contents; `Ok(None)` when there is none yet. Errors are
/// worded for nsqd's startup message.
pub fn load(path: &Path) -> Result<Option<Metadata>, String> {
    let data = match std::fs::read(path) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    serde_json::from_slice(&data)
        .map(Some)
        .map_err(|e| e.to_string())
}

/// Writes the file atomically: a temp file, fsync, rename.
pub fn write(path: &Path, meta: &Metadata) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let data = serde_json::to_vec(meta).map_err(std::io::Error::other)?;
    let tmp = PathBuf::from(format!("{}.{}.tmp", path.display(), rand::random::<u32>()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(&data)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_go_nsqds_file_and_ignores_unknown_keys() {
        let go = br#"{"topics":[{"channels":[{"name":"c","paused":true,"x":1}],"name":"t","paused":false}],"version":"1.3.0","extra":2}"#;
        let m: Metadata = serde_json::from_slice(go).unwrap();
        let t = &m.topics.as_ref().unwrap()[0];
        assert_eq!((t.name.as_str(), t.paused), ("t", false));
        assert!(t.channels.as_ref().unwrap()[0].paused);
    }

    #[test]
    fn writes_go_nsqds_shape() {
        let m = Metadata {
            topics: Some(vec![TopicMeta {
                name: "t".into(),
                paused: true,
                channels: None,
                mem_queue_size: None,
                max_depth: None,
                max_depth_policy: None,
                max_age: None,
                replicas: None,
            }]),
            version: "1.3.0".into(),
        };
        let json = String::from_utf8(serde_json::to_vec(&m).unwrap()).unwrap();
        assert_eq!(
            json,
            r#"{"topics":[{"name":"t","paused":true,"channels":null}],"version":"1.3.0"}"#
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nsqd.dat");
        write(&path, &m).unwrap();
        assert_eq!(load(&path).unwrap(), Some(m));
        assert_eq!(load(&dir.path().join("none")).unwrap(), None);
    }

    #[test]
    fn a_replicated_topic_keeps_its_replicas() {
        let json = br#"{"topics":[{"name":"r","paused":false,"channels":null,"replicas":3}],"version":"1.3.0"}"#;
        let m: Metadata = serde_json::from_slice(json).unwrap();
        assert_eq!(m.topics.as_ref().unwrap()[0].replicas, Some(3));
        assert_eq!(serde_json::to_vec(&m).unwrap(), json.to_vec());
    }
}
