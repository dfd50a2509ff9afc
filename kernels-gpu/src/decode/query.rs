//! Q into the block: staged into shared memory as it is (16-bit caches at
//! head_dim 256), or converted to the compute type with a power-of-two
//! scale per row (quantized caches), and read back as MMA fragments.

use decode_attn_abi::{DecodeParams, MMA_M};

use super::block::{qo_row_addr, token_head};
use crate::arch::{memory, mma, shared, warp};
use crate::format::{swizzled, Half, KvFormat};

/// Copies the block's Q rows (`warps_m * 16`, zero-filled past the last
/// row) into the swizzled shared tile at `q_tile`, in the first cp.async
/// group, which the first pipeline wait covers.
#[inline(always)]
pub(crate) unsafe fn stage_q<const D: usize>(p: &DecodeParams, batch: u32, kvh: u32, row0: u32, q_tile: u32, tid: u32, nthreads: u32) {
    let chunks_per_row = (D / 8) as u32;
    let rows_total = p.group * p.q_len;
    let mut c = tid;
    while c < p.warps_m * MMA_M * chunks_per_row {
        let local = c / chunks_per_row;
        let chunk = c % chunks_per_row;
        let global = row0 + local;
        let valid = local < p.rows_per_block && global < rows_total;
        let (token, head) = if valid { token_head(p, kvh, global) } else { (0, kvh * p.group) };
        let src = qo_row_addr::<D>(p.q, p, batch, token, head) + chunk as u64 * 16;
        memory::cp_async_16(q_tile + swizzled(local, chunk, (D * 2) as u32), src, if valid { 16 } else { 0 });
        c += nthreads;
    }
}

/// Converts the block's Q rows (`rows` of them, zeros past the last row)
/// from the query's type to the compute type into the shared tile, one warp
/// per row: each row is scaled by `2^(13 - ⌊log2 max|q|⌋)` (exact, and
/// below fp16's 65504), its inverse (times a per-tensor format's K scale,
/// `KvFormat::tensor_scales`) goes to `q_scales[row]`, and head dims are
/// stored in the order `F::k_fragment_pair` reads K in.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn convert_q<F: KvFormat, const D: usize>(p: &DecodeParams, batch: u32, kvh: u32, row0: u32, rows: u32, q_tile: u32, q_scales: u32, warp: u32, nwarps: u32, lane: u32) {
    let at = |r: u32, dim: u32| {
        let (kc, logical) = F::q_position(dim);
        q_tile + swizzled(r, 2 * kc + logical / 8, (D * 2) as u32) + 2 * (logical % 8)
    };
    convert_q_to::<F, D, 1>(p, batch, kvh, row0, rows, at, q_scales, warp, nwarps, lane)
}

/// [`convert_q`] into any layout: element (row, head dim) of the tile at
/// `at(row, dim)`. `BATCH`: rows per warp whose loads are all issued before
/// the first row is converted (each row's loads are a global round trip;
/// one at a time they were 6-12 % of a one-block-per-SM kernel's samples
/// on grid B); the warp's rows past `BATCH` go one at a time.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn convert_q_to<F: KvFormat, const D: usize, const BATCH: usize>(
    p: &DecodeParams,
    batch: u32,
    kvh: u32,
    row0: u32,
    rows: u32,
    at: impl Fn(u32, u32) -> u32,
    q_scales: u32,
    warp: u32,
    nwarps: u32,
    lane: u32,
) {
    const { assert!(D / 32 >= 2 && D % 32 == 0 && D <= 256 && BATCH >= 1) };
    let per_lane = (D / 32) as u32;
    // A per-tensor format's K scale joins each row's factor (1 otherwise).
    let k_scale = F::tensor_scales(p).0;
    let rows_total = p.group * p.q_len;
    let row_src = |r: u32| {
        let global = row0 + r;
        let valid = r < p.rows_per_block && global < rows_total;
        let (token, head) = if valid { token_head(p, kvh, global) } else { (0, kvh * p.group) };
        (valid, qo_row_addr::<D>(p.q, p, batch, token, head) + (lane * per_lane * 2) as u64)
    };
    // Converts row r from its words (2 per head dims 0..64, 64..128, …).
    let convert = |r: u32, words: [u32; 4]| {
        let mut x = [0f32; 8];
        let mut amax = 0f32;
        for w in 0..(D / 64) {
            let (a, b) = F::Query::unpack(words[w]);
            x[2 * w] = a;
            x[2 * w + 1] = b;
            amax = amax.max(a.abs()).max(b.abs());
        }
        let amax = warp::warp_max(amax);
        let (inv, scale) = q_row_scale(amax);
        #[allow(clippy::needless_range_loop)] // constant indices keep `x` in registers
        for j in 0..D / 32 {
            shared::st_shared_u16(at(r, lane * per_lane + j as u32), F::Compute::pack(x[j] * inv, 0.0));
        }
        if lane == 0 {
            shared::st_shared_f32(q_scales + 4 * r, scale * k_scale);
        }
    };
    let mut r = warp;
    if BATCH > 1 {
        // The warp's first `BATCH` rows: every load first, then the rows
        // (constant indices keep the words in registers).
        let mut early = [[0u32; 4]; BATCH];
        unrolled::<BATCH>(|i| {
            let (valid, src) = row_src(warp + i as u32 * nwarps);
            if warp + (i as u32) * nwarps < rows && valid {
                for j in 0..D / 64 {
                    early[i][j] = memory::ld_global_nc_u32(src + 4 * j as u64);
                }
            }
        });
        unrolled::<BATCH>(|i| {
            if warp + (i as u32) * nwarps < rows {
                convert(warp + i as u32 * nwarps, early[i]);
            }
        });
        r += BATCH as u32 * nwarps;
    }
    // (Rows one at a time stay written out as they were: the kernels at
    // their register caps are laid out around them.)
    while r < rows {
        let (valid, src) = row_src(r);
        let mut x = [0f32; 8];
        let mut amax = 0f32;
        for w in 0..(D / 64) {
            let (a, b) = if valid { F::Query::unpack(memory::ld_global_nc_u32(src + 4 * w as u64)) } else { (0.0, 0.0) };
            x[2 * w] = a;
            x[2 * w + 1] = b;
            amax = amax.max(a.abs()).max(b.abs());
        }
        let amax = warp::warp_max(amax);
        let (inv, scale) = q_row_scale(amax);
        #[allow(clippy::needless_range_loop)] // constant indices keep `x` in registers
        for j in 0..D / 32 {
            let v = x[j];
            shared::st_shared_u16(at(r, lane * per_lane + j as u32), F::Compute::pack(v * inv, 0.0));
        }
        if lane == 0 {
            shared::st_shared_f32(q_scales + 4 * r, scale * k_scale);
        }
        r += nwarps;
    }
}

/// `f(0)`, …, `f(N - 1)`, each call with a constant index (a loop that the
/// compiler leaves rolled indexes its arrays, which then go to the stack).
#[inline(always)]
fn unrolled<const N: usize>(mut f: impl FnMut(usize)) {
    const { assert!(N <= 8) };
    macro_rules! at {
        ($($i:literal)*) => {$(
            if $i < N {
                f($i);
            }
        )*};
    }
    at!(0 1 2 3 4 5 6 7);
}

/// The power of two a converted Q row is multiplied by (`inv`, so that its
/// largest magnitude `amax` lands near 2^13 in 16 bits) and its inverse,
/// the row's scale.
#[inline(always)]
pub(crate) fn q_row_scale(amax: f32) -> (f32, f32) {
    if amax > 0.0 {
        let e = (amax.to_bits() >> 23) & 0xFF;
        let inv = f32::from_bits((267u32.saturating_sub(e)).clamp(1, 254) << 23);
        (inv, 1.0 / inv)
    } else {
        (1.0, 1.0)
    }
}

/// A fragment of Q rows `16 * warp_m ..` and head dims `16 * kc ..` from the
/// shared tile written by [`stage_q`] or [`convert_q`].
#[inline(always)]
pub(crate) unsafe fn q_fragment<const D: usize>(q_tile: u32, warp_m: u32, kc: u32, lane: u32) -> [u32; 4] {
    // Matrix j = lane / 8: rows (j % 2) * 8 .. +8, dims 16 kc + (j / 2) * 8 .. +8.
    let j = lane / 8;
    let row = warp_m * MMA_M + (j % 2) * 8 + lane % 8;
    mma::ldmatrix_x4(q_tile + swizzled(row, kc * 2 + j / 2, (D * 2) as u32))
}
