//! The small files beside a group's segments (`vote`, `committed`,
//! `purged`, `snapshot`): written whole to a temporary file, fsynced,
//! renamed over the old one, and the directory fsynced, so a crash leaves
//! either the old value or the new one. Never: segments.
//!
//! Each file is `u32 BE CRC32 of the rest | postcard of the value`; a file
//! whose CRC does not match is an error, never read as "no value" (that
//! would forget a vote).

use std::fs;
use std::io::{self, Write};
use std::path::Path;

use serde::de::DeserializeOwned;
use serde::Serialize;

/// Replaces `dir/name` with `value`, durably.
pub fn write<T: Serialize>(dir: &Path, name: &str, value: &T) -> io::Result<()> {
    let body = postcard::to_stdvec(value).map_err(io::Error::other)?;
    let tmp = dir.join(format!("{name}.tmp"));
    let mut f = fs::File::create(&tmp)?;
    f.write_all(&crc32fast::hash(&body).to_be_bytes())?;
    f.write_all(&body)?;
    f.sync_all()?;
    drop(f);
    fs::rename(&tmp, dir.join(name))?;
    fs::File::open(dir)?.sync_all()
}

/// The value in `dir/name`, `None` when the file does not exist.
pub fn read<T: DeserializeOwned>(dir: &Path, name: &str) -> io::Result<Option<T>> {
    let path = dir.join(name);
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let bad = |what: &str| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: {what}", path.display()),
        )
    };
    if bytes.len() < 4 {
        return Err(bad("shorter than its checksum"));
    }
    let (crc, body) = bytes.split_at(4);
    if crc32fast::hash(body).to_be_bytes() != crc {
        return Err(bad("checksum mismatch"));
    }
    postcard::from_bytes(body)
        .map(Some)
        .map_err(|e| bad(&e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_corruption() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(read::<u64>(d.path(), "v").unwrap(), None);
        write(d.path(), "v", &7u64).unwrap();
        write(d.path(), "v", &9u64).unwrap();
        assert_eq!(read::<u64>(d.path(), "v").unwrap(), Some(9));
        assert!(!d.path().join("v.tmp").exists());
        let mut b = fs::read(d.path().join("v")).unwrap();
        *b.last_mut().unwrap() ^= 1;
        fs::write(d.path().join("v"), b).unwrap();
        assert!(read::<u64>(d.path(), "v").is_err());
    }
}
