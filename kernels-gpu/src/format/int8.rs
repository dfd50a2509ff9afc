//! Byte caches: int8 per head (D bytes `q + 128`, symmetric, q in
//! -127..=127, `x ≈ q·scale`, one f32 scale per row in scales, for K
//! and V each), fp8 e4m3 per head (D e4m3 bytes, `x ≈ e4m3·scale`, the
//! same scales) and fp8 e4m3 per tensor (D e4m3 bytes, one scale for
//! all of K and one for V, device scalars). The three share everything
//! but how a byte becomes fp16 ([`ByteCode`]) and where the scales go.
//!
//! Bytes are converted to fp16 in registers, straight into mma B
//! fragments (exact: |q| ≤ 127, and every e4m3 value is an f16; two
//! instructions per pair); the body converts Q to fp16 once (exactly,
//! scaled by a power of two per row). Per-row scales multiply score
//! columns (K) and P (V); per-tensor ones fold into Q's row factors (K,
//! `KvFormat::tensor_scales`) and the output's `1 / l` (V), so their key
//! loop is a 16-bit format's plus the conversion. sm_90 has no 8-bit
//! `ldmatrix`:
//! - K: one 64-bit shared load per row and 32 dims gives bytes `8c .. 8c+8`,
//!   used as the logical dims `2c, 2c+1 | 2c+8, 2c+9` of the B fragments of
//!   two k-chunks; Q is stored in that order (`q_position`);
//! - V (B fragment `V[2c, 2c+1 | 2c+8, 2c+9][d]`, keys along k): a 16-bit
//!   `ldmatrix .trans` over byte rows (one `.x4` per 32 dims) hands each
//!   thread two keys × two adjacent dims; a `prmt` splits them into an
//!   even-dim and an odd-dim fragment (`V_DIMS_INTERLEAVED`).

use core::marker::PhantomData;

use super::{swizzled, Half, KvFormat, LinearRows, StageTiles, TileLayout, HALF_TILE};
use crate::arch::{math, mma, shared};

/// How a format's bytes become fp16, and where its scales are.
pub trait ByteCode {
    /// The cache format of the table this code stores.
    const FORMAT: decode_attn_abi::KvFormat;
    /// Some byte values are NaN codes (e4m3's `S.1111.111`). A stage's
    /// rows past a work item's end, which the wgmma kernels convert with
    /// the rest, hold stale bytes (a bulk copy writes only the item's
    /// rows): their P is 0, but `0 · NaN` is NaN, so the conversion writes
    /// zeros there (`stage_to_half`). Every int8 byte is finite.
    const HAS_NAN: bool;
    /// Bytes `lo` and `hi` (0..4) of `w` as an fp16 pair (`lo`'s value in
    /// the low half), exactly.
    fn pair(w: u32, lo: u32, hi: u32) -> u32;
}

/// int8: bytes `q + 128`.
pub struct OffsetInt8;

impl ByteCode for OffsetInt8 {
    const FORMAT: decode_attn_abi::KvFormat = decode_attn_abi::KvFormat::Int8;
    const HAS_NAN: bool = false;
    #[inline(always)]
    fn pair(w: u32, lo: u32, hi: u32) -> u32 {
        // Bytes are stored offset by 128 (`docs/formats.md`): f16 0x64XX is
        // 1024 + XX, so one prmt and one subtraction of 1024 + 128 give q.
        let h = math::prmt(w, 0x6464_6464, lo | (4 << 4) | (hi << 8) | (4 << 12));
        math::sub_f16x2(h, 0x6480_6480)
    }
}

/// fp8 e4m3 bytes, with one scale per row (`PER_TENSOR = false`, the
/// `Fp8PerHead` format) or per tensor (`Fp8`).
pub struct E4m3<const PER_TENSOR: bool>;

impl<const PER_TENSOR: bool> ByteCode for E4m3<PER_TENSOR> {
    const FORMAT: decode_attn_abi::KvFormat = if PER_TENSOR { decode_attn_abi::KvFormat::Fp8 } else { decode_attn_abi::KvFormat::Fp8PerHead };
    const HAS_NAN: bool = true;
    #[inline(always)]
    fn pair(w: u32, lo: u32, hi: u32) -> u32 {
        // The two bytes side by side (`hi` above `lo`), then one cvt.
        math::f16x2_from_e4m3x2(math::prmt(w, 0, lo | (hi << 4) | (4 << 8) | (4 << 12)))
    }
}

/// A byte cache of queries `Q` whose bytes are `C`.
pub struct ByteKv<Q, C>(PhantomData<(Q, C)>);

/// int8 per head.
pub type Int8Kv<Q> = ByteKv<Q, OffsetInt8>;
/// fp8 e4m3 per head.
pub type Fp8PerHeadKv<Q> = ByteKv<Q, E4m3<false>>;
/// fp8 e4m3 per tensor.
pub type Fp8Kv<Q> = ByteKv<Q, E4m3<true>>;

// Both query dtypes compute in fp16: bytes become fp16 with two
// instructions per pair (`ByteCode`), and Q is converted exactly.
impl<Q: Half, C: ByteCode> KvFormat for ByteKv<Q, C> {
    const FORMAT: decode_attn_abi::KvFormat = C::FORMAT;
    type Compute = super::F16;
    type Query = Q;
    const SCALED: bool = !C::FORMAT.tensor_scaled();
    /// Per-row scales: P is multiplied by V's scale before it is packed to
    /// fp16, and the softmax base puts the largest product at 2^14 to 2^15
    /// (`state::scale_exponent`): no room for slack (and skipping only
    /// unmoved maxima, slack 0, measured 1–2 % slower on grid B: the vote
    /// costs more than the rescales it skips). Per-tensor scales leave P as the 16-bit formats
    /// do (terms ≤ 256 times e4m3 values ≤ 448, accumulated in f32).
    const RESCALE_SLACK: Option<f32> = if C::FORMAT.tensor_scaled() { Some(8.0) } else { None };
    const V_DIMS_INTERLEAVED: bool = true;
    /// `k_fragment_pair(m)` reads bytes `8c .. 8c+8` of dims `32m ..` as
    /// logical dims 2c, 2c+1, 2c+8, 2c+9 of k-chunk 2m (bytes 0..4) and of
    /// k-chunk 2m+1 (bytes 4..8).
    #[inline(always)]
    fn q_position(dim: u32) -> (u32, u32) {
        let (m, c, j) = (dim / 32, (dim % 32) / 8, dim % 8);
        let jj = j % 4;
        (2 * m + j / 4, 2 * c + (jj & 1) + 8 * (jj >> 1))
    }
    /// Tile `2m` holds the even dims of `16m .. 16m + 16`, tile `2m + 1` the odd.
    #[inline(always)]
    fn v_dim(nt: u32, n: u32) -> u32 {
        16 * (nt / 2) + 2 * n + nt % 2
    }


    /// One 64-bit load per key row serves two k-chunks (`q_position`).
    #[inline(always)]
    unsafe fn k_fragment_pair<const D: usize>(tile: u32, key: u32, kp: u32, lane: u32) -> [[u32; 4]; 2] {
        let (g, c) = (lane / 4, lane % 4);
        // Bytes 8c .. 8c+8 of the 32-byte block kp: 16-byte chunk 2kp + c/2.
        let at = |row: u32| tile + swizzled(row, 2 * kp + c / 2, D as u32) + 8 * (c % 2);
        let [a0, a1] = shared::ld_shared_v2_u32(at(key + g));
        let [b0, b1] = shared::ld_shared_v2_u32(at(key + 8 + g));
        let frag = |w0: u32, w1: u32| [C::pair(w0, 0, 1), C::pair(w0, 2, 3), C::pair(w1, 0, 1), C::pair(w1, 2, 3)];
        [frag(a0, b0), frag(a1, b1)]
    }

    /// One `ldmatrix .x4 .trans` serves two 16-dim tiles.
    #[inline(always)]
    unsafe fn v_fragment_pair<const D: usize>(tile: u32, key: u32, mp: u32, lane: u32) -> [[u32; 4]; 2] {
        // Lanes 0..16 address keys 0..16 of chunk 2mp, lanes 16..32 of 2mp+1.
        let [w0, w1, w2, w3] = mma::ldmatrix_x4_trans(tile + swizzled(key + lane % 16, 2 * mp + lane / 16, D as u32));
        // w = [v(2c, 2g), v(2c, 2g+1), v(2c+1, 2g), v(2c+1, 2g+1)] (dims
        // relative to the chunk): bytes 0, 2 are dim 2g, bytes 1, 3 dim 2g+1.
        let frag = |a: u32, b: u32| [C::pair(a, 0, 2), C::pair(b, 0, 2), C::pair(a, 1, 3), C::pair(b, 1, 3)];
        [frag(w0, w1), frag(w2, w3)]
    }

    /// Exact values (the body applies the scales): a 16-byte chunk of a
    /// row (16 dims) becomes two 16-bit chunks, two instructions per pair.
    /// Codes with NaNs (`ByteCode::HAS_NAN`) must not leave a NaN in rows
    /// at or past `valid` (stale bytes): the warp-specialised producer
    /// (`EAGER`) writes zeros there — a test and four selects per job, on
    /// the stage that ends a work item only; the unspecialised kernels,
    /// at their 128-register cap (the row test cost them spills), read
    /// NaN codes as −448 everywhere (one `max.f16x2` a pair).
    #[inline(always)]
    unsafe fn stage_to_half<const D: usize, const EAGER: bool, const HALVES: usize>(stage: StageTiles, key: u32, valid: u32, k_half: u32, v_half: u32, row: u32, t: u32) {
        if C::HAS_NAN && !EAGER {
            convert_stage::<C, D, EAGER, HALVES, false, true>(stage, key, valid, k_half, v_half, row, t)
        } else if C::HAS_NAN && key + HALVES as u32 * decode_attn_abi::WGMMA_KEYS > valid {
            convert_stage::<C, D, EAGER, HALVES, true, false>(stage, key, valid, k_half, v_half, row, t)
        } else {
            convert_stage::<C, D, EAGER, HALVES, false, false>(stage, key, valid, k_half, v_half, row, t)
        }
    }
}

/// [`KvFormat::stage_to_half`] of a byte cache; `MASK`: rows `key + r` at
/// or past `valid` become zeros; `FINITE`: NaN codes become −448.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn convert_stage<C: ByteCode, const D: usize, const EAGER: bool, const HALVES: usize, const MASK: bool, const FINITE: bool>(stage: StageTiles, key: u32, valid: u32, k_half: u32, v_half: u32, row: u32, t: u32) {
    let chunks = D as u32 / 16;
    const JOBS: usize = (2 * decode_attn_abi::WGMMA_KEYS / 8 * 8 / 16) as usize;
    const { assert!(D == 128 && (HALVES == 1 || HALVES == 2)) };
    let job = |h: usize, i: usize| {
        let (is_v, r, c) = decode_attn_abi::wgmma_conversion_job(t, i as u32, chunks);
        let r = r + h as u32 * decode_attn_abi::WGMMA_KEYS;
        let (src, dst) = if is_v { (stage.v, v_half) } else { (stage.k, k_half) };
        (src + LinearRows.at(key + r, c, D as u32), dst + HALF_TILE.at(row + r, 2 * c, 0), dst + HALF_TILE.at(row + r, 2 * c + 1, 0), key + r < valid)
    };
    let mut eager = [[[0u32; 4]; JOBS]; HALVES];
    if EAGER {
        for (h, jobs) in eager.iter_mut().enumerate() {
            for (i, w) in jobs.iter_mut().enumerate() {
                *w = shared::ld_shared_v4_u32(job(h, i).0);
            }
        }
    }
    for (h, jobs) in eager.iter().enumerate() {
        for (i, early) in jobs.iter().enumerate() {
            let (src, lo, hi, live) = job(h, i);
            let w = if EAGER { *early } else { shared::ld_shared_v4_u32(src) };
            let w = if MASK && !live { [0; 4] } else { w };
            let pair = |w: u32, lo: u32, hi: u32| if FINITE { math::max_f16x2(C::pair(w, lo, hi), 0xdf00_df00) } else { C::pair(w, lo, hi) };
            let half = |a: u32, b: u32| [pair(a, 0, 1), pair(a, 2, 3), pair(b, 0, 1), pair(b, 2, 3)];
            shared::st_shared_v4_u32(lo, half(w[0], w[1]));
            shared::st_shared_v4_u32(hi, half(w[2], w[3]));
        }
    }
}
