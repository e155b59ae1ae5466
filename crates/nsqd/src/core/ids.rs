//! The ids the core keys its maps by, and the hasher for them.
//!
//! Message ids are hex of a unique 64-bit id and client ids are a counter,
//! so a cheap fold of 8-byte words plus a final avalanche (MurmurHash3's
//! fmix64, so changing low digits reach the low bits hashbrown indexes by)
//! is enough; SipHash was a tenth of the consume path's CPU.

use std::collections::HashMap;

/// A connected client, as the server numbers them (never reused).
pub type ClientId = u64;

#[derive(Default, Clone, Copy)]
pub struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.0 = self.0.rotate_left(29) ^ u64::from_be_bytes(w);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = self.0.rotate_left(29) ^ n;
    }
    fn write_usize(&mut self, _len: usize) {
        // the length prefix of a 16-byte id carries no information
    }
    fn finish(&self) -> u64 {
        let mut x = self.0;
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        x ^ (x >> 33)
    }
}

/// A map keyed by message or client ids.
pub type IdMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<IdHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequential_message_ids_spread_over_the_low_bits() {
        use std::hash::BuildHasher;
        let b = std::hash::BuildHasherDefault::<IdHasher>::default();
        let mut g = crate::core::guid::GuidFactory::new(617);
        let buckets: std::collections::HashSet<u64> = (0..4096)
            .map(|_| b.hash_one(g.next(1_796_012_200_000_000_000)) & 4095)
            .collect();
        // uniform hashing fills ~63% of 4096 buckets with 4096 keys
        assert!(
            buckets.len() > 2000,
            "only {} distinct low-bit buckets",
            buckets.len()
        );
    }
}
