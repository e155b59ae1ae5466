//! Unit tests of the entries' encoding (`core::replicated`): every kind
//! round-trips, the documented layout, and every malformed payload is an
//! error.

use super::*;

fn id(n: u64) -> MessageId {
    MessageId::from_guid(n)
}

/// One entry of every kind, with fields that are not all zero.
fn every_kind() -> Vec<Entry> {
    let (t, c) = ("orders".to_string(), "billing#ephemeral".to_string());
    vec![
        Entry::TopicCreate {
            topic: t.clone(),
            replicas: 3,
        },
        Entry::Publish {
            topic: t.clone(),
            messages: vec![
                Published {
                    id: id(1),
                    timestamp: 1_700_000_000_123_456_789,
                    defer_ms: 0,
                    body: Bytes::from_static(b"first"),
                },
                Published {
                    id: id(u64::MAX),
                    timestamp: -1,
                    defer_ms: 3_600_000,
                    body: Bytes::new(),
                },
            ],
        },
        Entry::Publish {
            topic: t.clone(),
            messages: Vec::new(),
        },
        Entry::ChannelCreate {
            topic: t.clone(),
            channel: c.clone(),
        },
        Entry::ChannelDelete {
            topic: t.clone(),
            channel: c.clone(),
        },
        Entry::ChannelPause {
            topic: t.clone(),
            channel: c.clone(),
            paused: true,
        },
        Entry::ChannelPause {
            topic: t.clone(),
            channel: c.clone(),
            paused: false,
        },
        Entry::ChannelEmpty {
            topic: t.clone(),
            channel: c.clone(),
            up_to: u64::MAX - 1,
        },
        Entry::Finished {
            topic: t.clone(),
            channel: c.clone(),
            cursor: Cursor {
                index: 42,
                offset: 7,
            },
            ids: vec![id(9), id(10), id(1 << 40)],
        },
        Entry::Deferred {
            topic: t.clone(),
            channel: c.clone(),
            until: vec![(id(4), 1_796_000_000_000), (id(5), -1)],
        },
        Entry::TopicPause {
            topic: t.clone(),
            paused: true,
        },
        Entry::TopicPause {
            topic: t.clone(),
            paused: false,
        },
        Entry::ChannelReset {
            topic: t.clone(),
            channel: c.clone(),
            to: 1 << 50,
            only_new: true,
        },
        Entry::ChannelReset {
            topic: t.clone(),
            channel: c.clone(),
            to: 0,
            only_new: false,
        },
        Entry::Retention {
            topic: t.clone(),
            age_ms: 86_400_000,
            bytes: 1 << 33,
        },
        Entry::TopicEmpty { topic: t.clone() },
        Entry::TopicDelete { topic: t },
        Entry::Serving {
            node: 1023,
            address: "nsqd-2.example:4150".into(),
        },
    ]
}

#[test]
fn every_kind_round_trips() {
    for e in every_kind() {
        let bytes = e.encode().unwrap();
        assert_eq!(bytes[0], VERSION, "{e:?}");
        assert_eq!(Entry::decode(bytes).unwrap(), e);
        match e {
            Entry::Serving { .. } => assert_eq!(e.topic(), None),
            _ => assert_eq!(e.topic(), Some("orders")),
        }
    }
}

#[test]
fn the_layout_is_the_documented_one() {
    let e = Entry::TopicCreate {
        topic: "ab".into(),
        replicas: 3,
    };
    assert_eq!(&e.encode().unwrap()[..], &[1, 1, 2, b'a', b'b', 3]);
    let e = Entry::Publish {
        topic: "t".into(),
        messages: vec![Published {
            id: MessageId(*b"0123456789abcdef"),
            timestamp: 2,
            defer_ms: 3,
            body: Bytes::from_static(b"xy"),
        }],
    };
    let mut want = vec![1, 2, 1, b't', 0, 0, 0, 1];
    want.extend_from_slice(b"0123456789abcdef");
    want.extend_from_slice(&2i64.to_be_bytes());
    want.extend_from_slice(&3u64.to_be_bytes());
    want.extend_from_slice(&[0, 0, 0, 2, b'x', b'y']);
    assert_eq!(&e.encode().unwrap()[..], &want[..]);
    let e = Entry::TopicPause {
        topic: "t".into(),
        paused: true,
    };
    assert_eq!(&e.encode().unwrap()[..], &[1, 10, 1, b't', 1]);
    let e = Entry::TopicEmpty { topic: "t".into() };
    assert_eq!(&e.encode().unwrap()[..], &[1, 11, 1, b't']);
    let e = Entry::Deferred {
        topic: "t".into(),
        channel: "c".into(),
        until: vec![(MessageId(*b"0123456789abcdef"), 7)],
    };
    let mut want = vec![1, 12, 1, b't', 1, b'c', 0, 0, 0, 1];
    want.extend_from_slice(b"0123456789abcdef");
    want.extend_from_slice(&7i64.to_be_bytes());
    assert_eq!(&e.encode().unwrap()[..], &want[..]);
    let e = Entry::ChannelReset {
        topic: "t".into(),
        channel: "c".into(),
        to: 5,
        only_new: true,
    };
    assert_eq!(
        &e.encode().unwrap()[..],
        &[1, 13, 1, b't', 1, b'c', 0, 0, 0, 0, 0, 0, 0, 5, 1]
    );
    let e = Entry::Retention {
        topic: "t".into(),
        age_ms: 2,
        bytes: 3,
    };
    assert_eq!(
        &e.encode().unwrap()[..],
        &[1, 14, 1, b't', 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 3]
    );
    let e = Entry::Serving {
        node: 2,
        address: "h:1".into(),
    };
    assert_eq!(
        &e.encode().unwrap()[..],
        &[1, 9, 0, 0, 0, 0, 0, 0, 0, 2, 3, b'h', b':', b'1']
    );
}

#[test]
fn bodies_share_the_payload() {
    let e = Entry::Publish {
        topic: "t".into(),
        messages: vec![Published {
            id: id(1),
            timestamp: 0,
            defer_ms: 0,
            body: Bytes::from(vec![7u8; 1000]),
        }],
    };
    let payload = e.encode().unwrap();
    let range = payload.as_ptr_range();
    let Entry::Publish { messages, .. } = Entry::decode(payload.clone()).unwrap() else {
        panic!("not a publish");
    };
    assert!(range.contains(&messages[0].body.as_ptr()), "copied");
}

#[test]
fn every_truncation_is_an_error() {
    for e in every_kind() {
        let bytes = e.encode().unwrap();
        for cut in 0..bytes.len() {
            let r = Entry::decode(bytes.slice(..cut));
            assert!(r.is_err(), "{e:?} cut at {cut} decoded: {r:?}");
        }
    }
    assert_eq!(Entry::decode(Bytes::new()), Err(DecodeError::Empty));
    assert_eq!(
        Entry::decode(Bytes::from_static(&[1])),
        Err(DecodeError::Truncated("kind"))
    );
    assert_eq!(
        Entry::decode(Bytes::from_static(&[1, 1, 5, b'a'])),
        Err(DecodeError::Truncated("topic"))
    );
}

#[test]
fn unknown_versions_kinds_and_bad_fields_are_errors() {
    let good = Entry::TopicCreate {
        topic: "t".into(),
        replicas: 1,
    }
    .encode()
    .unwrap();
    for v in [0u8, 2, 255] {
        let mut b = good.to_vec();
        b[0] = v;
        assert_eq!(Entry::decode(b.into()), Err(DecodeError::Version(v)));
    }
    for k in [0u8, 200, 255] {
        let mut b = good.to_vec();
        b[1] = k;
        assert_eq!(Entry::decode(b.into()), Err(DecodeError::Kind(k)));
    }
    let mut b = good.to_vec();
    b.push(0);
    assert_eq!(Entry::decode(b.into()), Err(DecodeError::Trailing(1)));
    // A name that is not UTF-8.
    assert_eq!(
        Entry::decode(Bytes::from_static(&[1, 8, 1, 0xff])),
        Err(DecodeError::Utf8("topic"))
    );
    // A paused flag that is neither.
    assert_eq!(
        Entry::decode(Bytes::from_static(&[1, 5, 1, b't', 1, b'c', 2])),
        Err(DecodeError::Flag(2))
    );
    assert_eq!(
        Entry::decode(Bytes::from_static(&[1, 10, 1, b't', 7])),
        Err(DecodeError::Flag(7))
    );
}

#[test]
fn huge_counts_do_not_allocate_before_failing() {
    // A publish claiming u32::MAX messages in a few bytes.
    let b = Bytes::from_static(&[1, 2, 1, b't', 0xff, 0xff, 0xff, 0xff, 0]);
    assert_eq!(
        Entry::decode(b),
        Err(DecodeError::Truncated("message header"))
    );
    let b = Bytes::from_static(&[
        1, 7, 1, b't', 1, b'c', 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff,
    ]);
    assert_eq!(
        Entry::decode(b),
        Err(DecodeError::Truncated("finished ids"))
    );
    // A body length past the end.
    let mut b = vec![1, 2, 1, b't', 0, 0, 0, 1];
    b.extend_from_slice(&[b'0'; 16]);
    b.extend_from_slice(&[0; 16]);
    b.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 1]);
    assert_eq!(
        Entry::decode(b.into()),
        Err(DecodeError::Truncated("message body"))
    );
}

#[test]
fn names_longer_than_a_byte_holds_are_encode_errors() {
    let e = Entry::TopicDelete {
        topic: "x".repeat(256),
    };
    assert_eq!(
        e.encode(),
        Err(EncodeError::NameTooLong {
            what: "topic",
            len: 256
        })
    );
    let e = Entry::ChannelCreate {
        topic: "t".into(),
        channel: "c".repeat(300),
    };
    assert!(matches!(
        e.encode(),
        Err(EncodeError::NameTooLong {
            what: "channel",
            ..
        })
    ));
}

#[test]
fn limits_round_trip_in_the_documented_layout_and_bad_policies_are_errors() {
    use crate::core::limits::{Limit, Policy};
    let topic_limit = Entry::Limit {
        topic: "t".into(),
        channel: None,
        limit: Limit {
            max_depth: 2,
            policy: Policy::Reject,
        },
    };
    let mut want = vec![1, 15, 1, b't', 0];
    want.extend_from_slice(&2u64.to_be_bytes());
    want.push(0);
    let bytes = topic_limit.encode().unwrap();
    assert_eq!(&bytes[..], &want[..]);
    assert_eq!(Entry::decode(bytes.clone()).unwrap(), topic_limit);
    assert_eq!(topic_limit.topic(), Some("t"));
    let channel_limit = Entry::Limit {
        topic: "t".into(),
        channel: Some("c".into()),
        limit: Limit {
            max_depth: u64::MAX,
            policy: Policy::DropOldest,
        },
    };
    let encoded = channel_limit.encode().unwrap();
    assert_eq!(encoded[encoded.len() - 1], 1);
    assert_eq!(Entry::decode(encoded.clone()).unwrap(), channel_limit);
    for cut in 0..encoded.len() {
        assert!(Entry::decode(encoded.slice(..cut)).is_err(), "cut {cut}");
    }
    let mut bad = want.clone();
    *bad.last_mut().unwrap() = 2;
    assert_eq!(Entry::decode(bad.into()), Err(DecodeError::Policy(2)));
}

#[test]
fn the_kinds_of_protocol_1_need_1_and_every_later_kind_2() {
    let first: Vec<Entry> = every_kind()
        .into_iter()
        .filter(|e| e.encode().unwrap()[1] <= DEFERRED)
        .collect();
    assert!(first.len() >= 12, "every kind of the first build is listed");
    for e in &first {
        assert_eq!(protocol_of(&e.encode().unwrap()), 1, "{e:?}");
    }
    for e in every_kind() {
        let p = e.encode().unwrap();
        if p[1] > DEFERRED {
            assert_eq!(protocol_of(&p), 2, "{e:?}: a kind after Deferred");
        }
    }
    assert_eq!(protocol_of(&[VERSION, DEFERRED + 1, 0]), 2);
    assert_eq!(
        protocol_of(&[VERSION + 1, TOPIC_CREATE]),
        2,
        "another encoding"
    );
    assert_eq!(
        protocol_of(&[]),
        2,
        "nothing a protocol 1 member would read"
    );
}

#[test]
fn a_publish_tells_its_topic_and_count_without_decoding() {
    for e in every_kind() {
        let bytes = e.encode().unwrap();
        let want = match &e {
            Entry::Publish { topic, messages } => Some((topic.as_str(), messages.len() as u64)),
            _ => None,
        };
        assert_eq!(Entry::published(&bytes), want, "{e:?}");
        for cut in 0..bytes.len().min(12) {
            if let Some((t, _)) = Entry::published(&bytes[..cut]) {
                panic!("cut at {cut} told {t}");
            }
        }
    }
}
