//! Writing caches on the GPU: a whole 16-bit cache quantized, or a decode
//! step's new tokens appended at each sequence's position (quantized, or
//! copied into a 16-bit cache), and the reverse for tests and users. One
//! warp per (sequence, token, kv head) row; lane `l` owns head dims
//! `l·E .. l·E + E` (E = D / 32). Paged caches are written through the
//! block table, one page-id read per row.
//!
//! The arithmetic is the CPU quantizer's (`decode_attn::quant`), operation
//! for operation in IEEE f32, so both give the same bits: `amax = max |x|`,
//! `inv = 127 / amax`, `q = rint(x · inv)` (ties to even), scale `amax / 127`
//! (all zero for an all-zero row; rows below 2^-100 lifted by 2^64 first,
//! `decode_attn_abi::row_factors`, so no step overflows).

use decode_attn_abi::{QuantParams, QUANT_WARPS};

use crate::arch::{math, memory, thread, warp};
use crate::format::{Half, F16};

/// Row (b, t, h) of this warp and its destination token, or `None` when the
/// warp has no row (past the grid's end, or past the sequence).
#[inline(always)]
unsafe fn this_row(p: &QuantParams) -> Option<(u32, u32, u32, u32)> {
    let id = thread::block_idx_x() as u64 * QUANT_WARPS as u64 + thread::warp_id() as u64;
    let per_seq = p.rows_per_seq as u64 * p.num_kv_heads as u64;
    if id >= p.batch as u64 * per_seq {
        return None;
    }
    let b = (id / per_seq) as u32;
    let t = ((id / p.num_kv_heads as u64) % p.rows_per_seq as u64) as u32;
    let h = (id % p.num_kv_heads as u64) as u32;
    let len = *(p.seq_lens as *const u32).add(b as usize);
    if p.append != 0 {
        // New tokens sit at the end of the sequence.
        if len < p.rows_per_seq || len > p.capacity {
            return None;
        }
        Some((b, t, h, len - p.rows_per_seq + t))
    } else if t < len && t < p.capacity {
        Some((b, t, h, t))
    } else {
        None
    }
}

/// Where sequence b's token `token` sits in the cache: (batch index, token)
/// for a strided cache, (page id, token within the page) for a paged one.
/// Ids outside the pool (only an unchecked device table has them) read as
/// its last page: no id sends a write outside the pool.
#[inline(always)]
unsafe fn cache_at(p: &QuantParams, b: u32, token: u32) -> (u32, u32) {
    if p.block_table == 0 {
        return (b, token);
    }
    let entry = b as u64 * p.table_stride as u64 + (token >> p.page_shift) as u64;
    let id = (*(p.block_table as *const u32).add(entry as usize)).min(p.num_pages - 1);
    (id, token & ((1u32 << p.page_shift) - 1))
}

/// Where the plain tensor's row (b, t) sits: an append's rows are
/// `[batch, rows_per_seq, ..]`; the whole-cache directions' plain tensor has
/// the cache's layout (paged through the same table).
#[inline(always)]
fn plain_at(p: &QuantParams, b: u32, t: u32, cache: (u32, u32)) -> (u32, u32) {
    if p.append != 0 {
        (b, t)
    } else {
        cache
    }
}

/// Byte address of row (b, t, h) of a tensor at `base` with these byte strides.
#[inline(always)]
fn row_at(base: u64, strides: [u64; 3], b: u32, t: u32, h: u32) -> u64 {
    base + b as u64 * strides[0] + t as u64 * strides[1] + h as u64 * strides[2]
}

/// The plain (16-bit) tensor's row (b, t, h).
#[inline(always)]
fn plain_row(p: &QuantParams, b: u32, t: u32, h: u32) -> u64 {
    row_at(p.plain, [p.plain_stride_batch, p.plain_stride_token, p.plain_stride_head], b, t, h)
}

/// The quantized values' row (b, token, h).
#[inline(always)]
fn data_row(p: &QuantParams, b: u32, token: u32, h: u32) -> u64 {
    row_at(p.data, [p.data_stride_batch, p.data_stride_token, p.data_stride_head], b, token, h)
}

/// The scales of row (b, token, h).
#[inline(always)]
fn side_row(p: &QuantParams, b: u32, token: u32, h: u32) -> u64 {
    row_at(p.scales, [p.scale_stride_batch, p.scale_stride_token, p.scale_stride_head], b, token, h)
}

/// This lane's `E` values (dims `lane·E ..`) of a 16-bit row, as f32.
#[inline(always)]
unsafe fn load_lane_values<H: Half, const E: usize>(row: u64, lane: u32) -> [f32; E] {
    let src = row + (lane as usize * E * 2) as u64;
    let mut x = [0f32; E];
    for w in 0..E / 2 {
        let (lo, hi) = H::unpack(memory::ld_global_nc_u32(src + 4 * w as u64));
        x[2 * w] = lo;
        x[2 * w + 1] = hi;
    }
    x
}

/// The quantizing warp's row: its destination (cache batch or page, token
/// in it), kv head, the lane, and the lane's `E` source values as f32;
/// `None` when the warp has no row.
#[inline(always)]
unsafe fn source_row<H: Half, const E: usize>(p: &QuantParams) -> Option<(u32, u32, u32, u32, [f32; E])> {
    let (b, t, h, token) = this_row(p)?;
    let (cb, ct) = cache_at(p, b, token);
    let (pb, pt) = plain_at(p, b, t, (cb, ct));
    let lane = thread::lane_id();
    Some((cb, ct, h, lane, load_lane_values::<H, E>(plain_row(p, pb, pt, h), lane)))
}

/// The row's largest magnitude (every lane's values, over the warp).
#[inline(always)]
fn row_amax<const E: usize>(x: &[f32; E]) -> f32 {
    let mut amax = 0f32;
    #[allow(clippy::needless_range_loop)] // constant indices keep `x` in registers
    for i in 0..E {
        amax = amax.max(x[i].abs());
    }
    warp::warp_max(amax)
}

/// 16-bit rows → int8 rows + f32 scales.
///
/// # Safety
/// Launched by the host with buffers it checked against `p`.
#[inline(always)]
pub unsafe fn quantize_int8<H: Half, const D: usize, const E: usize>(p: &QuantParams) {
    let Some((cb, ct, h, lane, x)) = source_row::<H, E>(p) else { return };
    let amax = row_amax(&x);
    let (lift, inv) = decode_attn_abi::row_factors(amax, 127.0);
    let dst = data_row(p, cb, ct, h) + (lane as usize * E) as u64;
    let mut bytes = [0u32; E];
    #[allow(clippy::needless_range_loop)]
    for i in 0..E {
        // Stored offset by 128 (offset binary): 1..=255.
        bytes[i] = (math::rint_i32(x[i] * lift * inv).clamp(-127, 127) + 128) as u32;
    }
    if E == 2 {
        memory::st_global_u16(dst, bytes[0] | (bytes[1] << 8));
    } else {
        for w in 0..E / 4 {
            let word = bytes[4 * w] | (bytes[4 * w + 1] << 8) | (bytes[4 * w + 2] << 16) | (bytes[4 * w + 3] << 24);
            memory::st_global_u32(dst + 4 * w as u64, word);
        }
    }
    if lane == 0 {
        memory::st_global_f32(side_row(p, cb, ct, h), amax / 127.0);
    }
}

/// The dequantizing warp's row of a byte cache (int8, fp8): the lane's
/// `E` source bytes, the row's scale, and where the lane's `E` 16-bit
/// values go; `None` when the warp has no row.
#[inline(always)]
unsafe fn byte_row_out<const E: usize>(p: &QuantParams) -> Option<(u64, f32, u64)> {
    let (b, t, h, token) = this_row(p)?;
    let (cb, ct) = cache_at(p, b, token);
    let (pb, pt) = plain_at(p, b, t, (cb, ct));
    let lane = thread::lane_id();
    let src = data_row(p, cb, ct, h) + (lane as usize * E) as u64;
    let scale = memory::ld_global_nc_f32(side_row(p, cb, ct, h));
    Some((src, scale, plain_row(p, pb, pt, h) + (lane as usize * E * 2) as u64))
}

/// int8 rows + scales → 16-bit rows (the whole cache, rows `t < seq_len`).
///
/// # Safety
/// As [`quantize_int8`].
#[inline(always)]
pub unsafe fn dequantize_int8<H: Half, const D: usize, const E: usize>(p: &QuantParams) {
    let Some((src, scale, dst)) = byte_row_out::<E>(p) else { return };
    for w in 0..E / 2 {
        // Two bytes per output pair; E = 2 reads the lane's only 2 bytes.
        let pair = memory::ld_global_nc_u16(src + 2 * w as u64);
        let lo = ((pair & 0xFF) as i32 - 128) as f32 * scale;
        let hi = ((pair >> 8) as i32 - 128) as f32 * scale;
        memory::st_global_u32(dst + 4 * w as u64, H::pack(lo, hi));
    }
}

/// 16-bit rows → fp8 e4m3 rows + one f32 scale per row (`Fp8PerHead`):
/// `amax = max |x|`, `inv = 448 / amax` (lifted below 2^-100), `q = e4m3(x · inv)` by
/// `cvt.rn.satfinite` (ties to even), scale `amax / 448`; an all-zero row
/// stores zeros and scale 0. `decode_attn::quant::quantize_fp8_row` is its
/// CPU twin, bit for bit.
///
/// # Safety
/// As [`quantize_int8`].
#[inline(always)]
pub unsafe fn quantize_fp8_per_head<H: Half, const D: usize, const E: usize>(p: &QuantParams) {
    let Some((cb, ct, h, lane, x)) = source_row::<H, E>(p) else { return };
    let amax = row_amax(&x);
    let (lift, inv) = decode_attn_abi::row_factors(amax, decode_attn_abi::E4M3_MAX);
    store_e4m3_lane::<E>(data_row(p, cb, ct, h) + (lane as usize * E) as u64, &x, lift, inv);
    if lane == 0 {
        memory::st_global_f32(side_row(p, cb, ct, h), amax / decode_attn_abi::E4M3_MAX);
    }
}

/// 16-bit rows → fp8 e4m3 rows under the tensor's scale (`Fp8`), a device
/// scalar at `p.scales` (its strides 0), read, not written: `inv = 1 /
/// scale`, `q = e4m3(x · inv)` by `cvt.rn.satfinite` (values beyond ±448 ·
/// scale saturate). `decode_attn::quant::quantize_fp8_row_scaled` is its
/// CPU twin, bit for bit.
///
/// # Safety
/// As [`quantize_int8`].
#[inline(always)]
pub unsafe fn quantize_fp8_per_tensor<H: Half, const D: usize, const E: usize>(p: &QuantParams) {
    let Some((cb, ct, h, lane, x)) = source_row::<H, E>(p) else { return };
    // (A tiny device scale is lifted and a non-positive one writes zeros,
    // `decode_attn_abi::tensor_factors`: the kernel cannot reject it.)
    let (lift, inv) = decode_attn_abi::tensor_factors(memory::ld_global_nc_f32(p.scales));
    store_e4m3_lane::<E>(data_row(p, cb, ct, h) + (lane as usize * E) as u64, &x, lift, inv);
}

/// This lane's `E` values times `lift`, then `inv`, as e4m3 bytes at
/// `dst`, in order.
#[inline(always)]
unsafe fn store_e4m3_lane<const E: usize>(dst: u64, x: &[f32; E], lift: f32, inv: f32) {
    // Pairs of bytes, the first value in the low byte.
    let mut pairs = [0u32; E];
    for i in 0..E / 2 {
        pairs[i] = math::e4m3x2_from_f32(x[2 * i + 1] * lift * inv, x[2 * i] * lift * inv);
    }
    if E % 4 != 0 {
        // (E = 2, and a latent row's 18: the lane's bytes are 2-byte aligned.)
        for w in 0..E / 2 {
            memory::st_global_u16(dst + 2 * w as u64, pairs[w]);
        }
    } else {
        for w in 0..E / 4 {
            memory::st_global_u32(dst + 4 * w as u64, pairs[2 * w] | (pairs[2 * w + 1] << 16));
        }
    }
}

/// fp8 e4m3 rows + scales → 16-bit rows (the whole cache, rows `t <
/// seq_len`): `e4m3 · scale`, rounded once to the 16-bit type. Both fp8
/// formats: a per-tensor scale is scales with strides 0.
///
/// # Safety
/// As [`quantize_int8`].
#[inline(always)]
pub unsafe fn dequantize_fp8<H: Half, const D: usize, const E: usize>(p: &QuantParams) {
    let Some((src, scale, dst)) = byte_row_out::<E>(p) else { return };
    for w in 0..E / 2 {
        let (lo, hi) = F16::unpack(math::f16x2_from_e4m3x2(memory::ld_global_nc_u16(src + 2 * w as u64)));
        memory::st_global_u32(dst + 4 * w as u64, H::pack(lo * scale, hi * scale));
    }
}

/// 16-bit rows copied into a 16-bit cache (its append): each lane moves
/// its `2·E` bytes with one load and one store (a latent row's, 36 bytes,
/// with nine).
///
/// # Safety
/// As [`quantize_int8`].
#[inline(always)]
pub unsafe fn store_plain<const D: usize, const E: usize>(p: &QuantParams) {
    let Some((b, t, h, token)) = this_row(p) else { return };
    let (cb, ct) = cache_at(p, b, token);
    let (pb, pt) = plain_at(p, b, t, (cb, ct));
    let at = (thread::lane_id() as usize * E * 2) as u64;
    let (src, dst) = (plain_row(p, pb, pt, h) + at, data_row(p, cb, ct, h) + at);
    match E {
        2 => memory::st_global_u32(dst, memory::ld_global_nc_u32(src)),
        4 => memory::st_global_v2_u32(dst, memory::ld_global_nc_v2_u32(src)),
        8 => memory::st_global_v4_u32(dst, memory::ld_global_nc_v4_f32(src).map(f32::to_bits)),
        // A latent row's 18 values a lane: 36 bytes, 4-byte aligned.
        _ => {
            for w in 0..E / 2 {
                memory::st_global_u32(dst + 4 * w as u64, memory::ld_global_nc_u32(src + 4 * w as u64));
            }
        }
    }
}

/// Nibble slot of dim `p` (0..8) within its 32-bit word: `p0 p2 p4 p6 p1 p3 p5 p7`.
#[inline(always)]
fn nibble_slot(p: u32) -> u32 {
    if p % 2 == 0 {
        p / 2
    } else {
        4 + p / 2
    }
}

#[inline(always)]
fn shfl_xor_u32(v: u32, m: u32) -> u32 {
    warp::shfl_xor_f32(f32::from_bits(v), m).to_bits()
}

/// 16-bit rows → int4 rows + (fp16 scale, fp16 zero) per group of `G` dims:
/// `lo = min`, `hi = max` (both clamped to `±INT4_LIMIT`),
/// `scale = f16((hi - lo) / 15)`, `zero = f16(lo)`,
/// `q = clamp(rint((x - zero) / scale), 0, 15)` with the rounded scale and
/// zero (q = 0 where the scale is 0).
///
/// # Safety
/// As [`quantize_int8`].
#[inline(always)]
pub unsafe fn quantize_int4<H: Half, const D: usize, const E: usize, const G: u32>(p: &QuantParams) {
    let Some((cb, ct, h, lane, x)) = source_row::<H, E>(p) else { return };
    let (mut lo, mut hi) = (x[0], x[0]);
    #[allow(clippy::needless_range_loop)]
    for i in 1..E {
        lo = lo.min(x[i]);
        hi = hi.max(x[i]);
    }
    // Lanes of one group: G / E consecutive lanes.
    let mut m = 1;
    while m < G / E as u32 {
        lo = lo.min(warp::shfl_xor_f32(lo, m));
        hi = hi.max(warp::shfl_xor_f32(hi, m));
        m *= 2;
    }
    let (lo, hi) = (decode_attn_abi::int4_bound(lo), decode_attn_abi::int4_bound(hi));
    let s_bits = math::f16_bits((hi - lo) / 15.0);
    let z_bits = math::f16_bits(lo);
    let (scale, zero) = math::unpack_f16x2(s_bits | (z_bits << 16));
    let mut word = 0u32;
    #[allow(clippy::needless_range_loop)]
    for i in 0..E {
        let q = if scale > 0.0 { math::rint_i32((x[i] - zero) / scale).clamp(0, 15) as u32 } else { 0 };
        let dim = lane * E as u32 + i as u32;
        word |= q << (4 * nibble_slot(dim % 8));
    }
    // Lanes sharing a word (8 / E of them) combine their nibbles.
    let mut m = 1;
    while m < 8 / E as u32 {
        word |= shfl_xor_u32(word, m);
        m *= 2;
    }
    let first_dim = lane * E as u32;
    if first_dim % 8 == 0 {
        memory::st_global_u32(data_row(p, cb, ct, h) + (first_dim / 8 * 4) as u64, word);
    }
    if lane % (G / E as u32) == 0 {
        memory::st_global_u32(side_row(p, cb, ct, h) + 4 * (first_dim / G) as u64, s_bits | (z_bits << 16));
    }
}

/// int4 rows + scales and zeros → 16-bit rows: `f16(q·scale + zero)` (one
/// fp16 fma), then the output type.
///
/// # Safety
/// As [`quantize_int8`].
#[inline(always)]
pub unsafe fn dequantize_int4<H: Half, const D: usize, const E: usize, const G: u32>(p: &QuantParams) {
    let Some((b, t, h, token)) = this_row(p) else { return };
    let (cb, ct) = cache_at(p, b, token);
    let (pb, pt) = plain_at(p, b, t, (cb, ct));
    let lane = thread::lane_id();
    let first_dim = lane * E as u32;
    let word = memory::ld_global_nc_u32(data_row(p, cb, ct, h) + (first_dim / 8 * 4) as u64);
    let sz = memory::ld_global_nc_u32(side_row(p, cb, ct, h) + 4 * (first_dim / G) as u64);
    // (scale, scale) and (zero, zero): the value is one fp16 fma, exactly as
    // the attention kernels compute it (docs/formats.md).
    let (scale, zero) = (math::prmt(sz, 0, 0x1010), math::prmt(sz, 0, 0x3232));
    let dst = plain_row(p, pb, pt, h) + (first_dim * 2) as u64;
    for w in 0..E / 2 {
        let q = |i: u32| ((word >> (4 * nibble_slot((first_dim + i) % 8))) & 0xF) as f32;
        let (lo, hi) = math::unpack_f16x2(math::fma_f16x2(math::pack_f16x2(q(2 * w as u32), q(2 * w as u32 + 1)), scale, zero));
        memory::st_global_u32(dst + 4 * w as u64, H::pack(lo, hi));
    }
}

/// The `Fp8DsMla` row (b, token) a warp writes or reads, and its lane:
/// lane `l` owns latent values `16 l .. 16 l + 16` (of group `l / 8`) and
/// RoPE values `512 + 2 l`, `512 + 2 l + 1`.
const DS_LANE_VALUES: usize = 16;
/// Where a row's scales and its RoPE part start (bytes), and a plain
/// row's RoPE values.
const DS_SCALES_AT: u64 = decode_attn_abi::DS_MLA_SCALES_AT as u64;
const DS_ROPE_AT: u64 = decode_attn_abi::DS_MLA_ROPE_AT as u64;
const DS_PLAIN_ROPE_AT: u64 = 2 * decode_attn_abi::DS_MLA_LATENT as u64;

/// bf16 latent rows (576 values) → DeepSeek V3.2's 656-byte rows
/// (`Fp8DsMla`): per group of 128 latent values `amax = max |x|`, the
/// scale `decode_attn_abi::ds_mla_group_scale(amax)` (a power of two),
/// `q = e4m3(x · (1 / scale))` by `cvt.rn.satfinite` (exact scaling; 0
/// codes for an all-zero group); the 64 RoPE values copied as they are.
/// `decode_attn::quant::quantize_ds_mla_row` is its CPU twin, bit for bit.
/// (The table has it for bf16 rows alone: `KvFormat::required_dtype`.)
///
/// # Safety
/// As [`quantize_int8`].
#[inline(always)]
pub unsafe fn quantize_fp8_ds_mla<H: Half, const D: usize, const E: usize>(p: &QuantParams) {
    const { assert!(D == 576) };
    let Some((b, t, h, token)) = this_row(p) else { return };
    let (cb, ct) = cache_at(p, b, token);
    let (pb, pt) = plain_at(p, b, t, (cb, ct));
    let lane = thread::lane_id();
    let (src, dst) = (plain_row(p, pb, pt, h), data_row(p, cb, ct, h));
    let x = load_lane_values::<H, DS_LANE_VALUES>(src, lane);
    let mut amax = 0f32;
    for v in x {
        amax = amax.max(v.abs());
    }
    // The group's 8 lanes.
    for m in [1, 2, 4] {
        amax = amax.max(warp::shfl_xor_f32(amax, m));
    }
    let scale = decode_attn_abi::ds_mla_group_scale(amax);
    let inv = if scale > 0.0 { 1.0 / scale } else { 0.0 };
    let pairs: [u32; 8] = core::array::from_fn(|i| math::e4m3x2_from_f32(x[2 * i + 1] * inv, x[2 * i] * inv));
    memory::st_global_v4_u32(dst + 16 * lane as u64, core::array::from_fn(|w| pairs[2 * w] | (pairs[2 * w + 1] << 16)));
    if lane % 8 == 0 {
        memory::st_global_f32(dst + DS_SCALES_AT + 4 * (lane / 8) as u64, scale);
    }
    memory::st_global_u32(dst + DS_ROPE_AT + 4 * lane as u64, memory::ld_global_nc_u32(src + DS_PLAIN_ROPE_AT + 4 * lane as u64));
}

/// DeepSeek V3.2's 656-byte rows → bf16 latent rows: each latent value
/// `bf16(e4m3 · scale)` (the f32 product rounded once, as the MLA kernel
/// converts it), the RoPE values as they are.
///
/// # Safety
/// As [`quantize_int8`].
#[inline(always)]
pub unsafe fn dequantize_fp8_ds_mla<H: Half, const D: usize, const E: usize>(p: &QuantParams) {
    const { assert!(D == 576) };
    let Some((b, t, h, token)) = this_row(p) else { return };
    let (cb, ct) = cache_at(p, b, token);
    let (pb, pt) = plain_at(p, b, t, (cb, ct));
    let lane = thread::lane_id();
    let (src, dst) = (data_row(p, cb, ct, h), plain_row(p, pb, pt, h));
    let words = memory::ld_global_nc_v4_f32(src + 16 * lane as u64).map(f32::to_bits);
    let scale = memory::ld_global_nc_f32(src + DS_SCALES_AT + 4 * (lane / 8) as u64);
    let mut out = [0u32; 8];
    for (w, word) in words.iter().enumerate() {
        out[2 * w] = ds_mla_pair(word & 0xFFFF, scale);
        out[2 * w + 1] = ds_mla_pair(word >> 16, scale);
    }
    memory::st_global_v4_u32(dst + 32 * lane as u64, [out[0], out[1], out[2], out[3]]);
    memory::st_global_v4_u32(dst + 32 * lane as u64 + 16, [out[4], out[5], out[6], out[7]]);
    memory::st_global_u32(dst + DS_PLAIN_ROPE_AT + 4 * lane as u64, memory::ld_global_nc_u32(src + DS_ROPE_AT + 4 * lane as u64));
}

/// Two e4m3 bytes (the first in the low byte of `pair`) times `scale`, as
/// a bf16 pair: each value's f32 product rounded once to bf16
/// (`Fp8DsMla`'s dequantized value; the MLA kernel's conversion).
#[inline(always)]
pub fn ds_mla_pair(pair: u32, scale: f32) -> u32 {
    let (lo, hi) = math::unpack_f16x2(math::f16x2_from_e4m3x2(pair));
    math::pack_bf16x2(lo * scale, hi * scale)
}
