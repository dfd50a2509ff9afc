//! Deterministic random inputs for tests and benchmarks: normal values, or
//! heavy-tailed ones with outlier channels (never all zeros).

/// SplitMix64: small, fast, reproducible from a seed.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in (0, 1].
    pub fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }
    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        let (u, v) = (self.uniform(), self.uniform());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Distribution {
    /// N(0, 1).
    Normal,
    /// Student-t-like tails, and every 16th channel scaled ×8 (the outlier
    /// channels real K caches show).
    HeavyTailed,
}

/// `n` values whose last dimension has `channels` entries.
pub fn random_values(rng: &mut Rng, n: usize, channels: usize, dist: Distribution) -> Vec<f32> {
    (0..n)
        .map(|i| match dist {
            Distribution::Normal => rng.normal() as f32,
            Distribution::HeavyTailed => {
                let chi = (rng.normal().powi(2) + rng.normal().powi(2) + rng.normal().powi(2)) / 3.0;
                let t = rng.normal() / chi.sqrt().max(0.05);
                let outlier = if (i % channels) % 16 == 3 { 8.0 } else { 1.0 };
                (t * outlier).clamp(-1000.0, 1000.0) as f32
            }
        })
        .collect()
}

pub fn to_bf16(x: &[f32]) -> Vec<half::bf16> {
    x.iter().map(|&v| half::bf16::from_f32(v)).collect()
}
pub fn to_f16(x: &[f32]) -> Vec<half::f16> {
    x.iter().map(|&v| half::f16::from_f32(v)).collect()
}
/// The values after a round trip through bf16 (what the GPU sees).
pub fn round_bf16(x: &[f32]) -> Vec<f32> {
    x.iter().map(|&v| half::bf16::from_f32(v).to_f32()).collect()
}
pub fn round_f16(x: &[f32]) -> Vec<f32> {
    x.iter().map(|&v| half::f16::from_f32(v).to_f32()).collect()
}
