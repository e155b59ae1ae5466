//! Deterministic mutations of seed inputs: a splitmix64 generator and the
//! handful of edits that find parser bugs without coverage feedback (bit
//! flips, interesting bytes, truncation, random insertions, duplicated or
//! spliced pieces, big-endian size fields set to their edge values). The
//! same seed always yields the same inputs, so a failure printed with its
//! seed and iteration can be replayed exactly.

/// splitmix64: tiny, fast, and good enough to spread mutations; a failure is
/// reproduced from its seed, so nothing here needs to be unpredictable.
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

    /// Uniform enough in `0..n` for n far below 2^32; `n` must be > 0.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    pub fn byte(&mut self) -> u8 {
        self.next_u64() as u8
    }
}

/// Bytes that sit on the edges parsers test: NUL, all ones, the sign
/// boundary, and the separators of NSQ's line protocols.
const INTERESTING: [u8; 6] = [0x00, 0xff, 0x7f, 0x80, b'\n', b' '];

/// Edge values for a 4-byte big-endian size or count: 0, 1, i32::MAX, -1,
/// i32::MIN.
const SIZES: [[u8; 4]; 5] = [
    [0, 0, 0, 0],
    [0, 0, 0, 1],
    [0x7f, 0xff, 0xff, 0xff],
    [0xff, 0xff, 0xff, 0xff],
    [0x80, 0, 0, 0],
];

/// One input derived from `seeds`: a random seed with 1 to 4 edits.
pub fn mutant(rng: &mut Rng, seeds: &[Vec<u8>]) -> Vec<u8> {
    let mut data = seeds[rng.below(seeds.len())].clone();
    for _ in 0..1 + rng.below(4) {
        edit(rng, &mut data, seeds);
    }
    data
}

fn edit(rng: &mut Rng, data: &mut Vec<u8>, seeds: &[Vec<u8>]) {
    let len = data.len();
    match rng.below(8) {
        0 if len > 0 => {
            let i = rng.below(len);
            data[i] ^= 1 << rng.below(8);
        }
        1 if len > 0 => {
            let i = rng.below(len);
            data[i] = INTERESTING[rng.below(INTERESTING.len())];
        }
        2 if len > 0 => data.truncate(rng.below(len)),
        3 => {
            let at = rng.below(len + 1);
            let n = 1 + rng.below(8);
            let bytes: Vec<u8> = (0..n).map(|_| rng.byte()).collect();
            data.splice(at..at, bytes);
        }
        4 if len > 0 => {
            // A piece of the input repeated elsewhere: doubled commands,
            // records or chunks.
            let from = rng.below(len);
            let to = from + 1 + rng.below((len - from).min(64));
            let piece = data[from..to].to_vec();
            let at = rng.below(len + 1);
            data.splice(at..at, piece);
        }
        5 => {
            // This input's head on another seed's tail.
            let other = &seeds[rng.below(seeds.len())];
            let cut = rng.below(len + 1);
            let from = rng.below(other.len() + 1);
            data.truncate(cut);
            data.extend_from_slice(&other[from..]);
        }
        6 if len >= 4 => {
            // Size fields mostly follow a command line (V2 bodies, lookupd's
            // IDENTIFY) or start a record: prefer the byte after a `\n`.
            let after_nl: Vec<usize> = data
                .iter()
                .enumerate()
                .filter(|&(i, &b)| b == b'\n' && i + 5 <= len)
                .map(|(i, _)| i + 1)
                .collect();
            let at = if !after_nl.is_empty() && rng.below(2) == 0 {
                after_nl[rng.below(after_nl.len())]
            } else {
                rng.below(len - 3)
            };
            data[at..at + 4].copy_from_slice(&SIZES[rng.below(SIZES.len())]);
        }
        7 if len > 0 => {
            // Drop a piece: a missing length, a short body.
            let from = rng.below(len);
            let to = from + 1 + rng.below((len - from).min(16));
            data.drain(from..to);
        }
        _ => data.push(INTERESTING[rng.below(INTERESTING.len())]),
    }
}

/// `data` as lowercase hex, for the failure report.
pub fn hex(data: &[u8]) -> String {
    data.iter().map(|b| format!("{b:02x}")).collect()
}
