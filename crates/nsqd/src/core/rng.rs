//! A small seeded random number generator for the core: IDENTIFY's
//! `sample_rate` and the E2E reservoir need cheap, reproducible draws, not
//! cryptographic ones. SplitMix64 keeps its whole state in 8 bytes, which
//! matters with one per channel (a 10,000-channel nsqd keeps 10,000).

#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0), by multiply-and-shift: the bias is
    /// below 2^-32 for every `n` the core uses.
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_are_uniform_enough_and_depend_only_on_the_seed() {
        let mut a = Rng::new(42);
        let mut counts = [0u32; 10];
        for _ in 0..100_000 {
            counts[a.below(10) as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (9_000..11_000).contains(&c)),
            "{counts:?}"
        );
        let (mut x, mut y) = (Rng::new(7), Rng::new(7));
        assert!((0..100).all(|_| x.next_u64() == y.next_u64()));
    }
}
