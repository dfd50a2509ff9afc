//! The CPU quantizer of the quantized cache formats, whose arithmetic the
//! GPU kernels (`kernels-gpu/src/quant.rs`, launched by
//! `DecodeAttention::{quantize_kv, append_kv, dequantize_kv}`) repeat
//! operation for operation in IEEE f32 so both give the same bits.
//!
//! Per (sequence, token, kv head) row of D values: `amax = max |x|`,
//! `inv = 127 / amax`, `q = round_ties_even(x · inv)`, stored scale
//! `amax / 127`; an all-zero row stores q = 0. Dequantized: `q · scale`.
//! Cache bytes hold `q + 128` (offset binary, 1..=255), which the kernels
//! turn into fp16 with one `prmt` and one subtraction. fp8 rows are e4m3
//! codes of `x · (448 / amax)` per row (fp8 per head) or `x / scale` for
//! a given per-tensor scale (fp8), rounded as `cvt.rn.satfinite`.

use decode_attn_abi::KvFormat;

/// fp8 e4m3 conversions the cache kernels repeat bit for bit
/// (`cvt.rn.satfinite.e4m3x2.f32`).
pub use decode_attn_abi::{ds_mla_group_scale, e4m3_from_f32, e4m3_to_f32, int4_bound, row_factors, tensor_factors, E4M3_MAX, E4M3_NAN, INT4_LIMIT};
use decode_attn_abi::{DS_MLA_GROUP, DS_MLA_LATENT, DS_MLA_ROPE_AT, DS_MLA_SCALES_AT, MLA_DIMS};

use crate::error::{ensure, Error, Result};
use crate::shape::DecodeShape;

/// Quantizes one row; returns its scale.
pub fn quantize_int8_row(x: &[f32], q: &mut [i8]) -> f32 {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let (lift, inv) = row_factors(amax, 127.0);
    for (o, &v) in q.iter_mut().zip(x) {
        *o = ((v * lift * inv).round_ties_even() as i32).clamp(-127, 127) as i8;
    }
    amax / 127.0
}

/// The values a quantized row stands for.
pub fn dequantize_int8_row(q: &[i8], scale: f32, out: &mut [f32]) {
    for (o, &v) in out.iter_mut().zip(q) {
        *o = v as f32 * scale;
    }
}

/// Quantizes one row to fp8 e4m3 with its own scale (the `Fp8PerHead`
/// rule, int8's with 448 for 127): `amax = max |x|`, `inv = 448 / amax`,
/// `q = e4m3(x · inv)`; returns the scale `amax / 448` (0 and zero codes
/// for an all-zero row). Rows below 2^-100 are lifted by 2^64 first
/// ([`row_factors`]), so `inv` never overflows.
pub fn quantize_fp8_row(x: &[f32], q: &mut [u8]) -> f32 {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let (lift, inv) = row_factors(amax, E4M3_MAX);
    for (o, &v) in q.iter_mut().zip(x) {
        *o = e4m3_from_f32(v * lift * inv);
    }
    amax / E4M3_MAX
}

/// Quantizes one row to fp8 e4m3 under a given scale (the per-tensor `Fp8`
/// rule): `q = e4m3(x · (1 / scale))`, values beyond ±448 · scale
/// saturated; a scale below 2^-100 lifted as [`row_factors`], and one
/// that is not positive gives zero codes ([`tensor_factors`]: the GPU
/// kernel's rule for a device scale it cannot reject).
pub fn quantize_fp8_row_scaled(x: &[f32], scale: f32, q: &mut [u8]) {
    let (lift, inv) = tensor_factors(scale);
    for (o, &v) in q.iter_mut().zip(x) {
        *o = e4m3_from_f32(v * lift * inv);
    }
}

/// The values an fp8 row stands for under `scale`.
pub fn dequantize_fp8_row(q: &[u8], scale: f32, out: &mut [f32]) {
    for (o, &v) in out.iter_mut().zip(q) {
        *o = e4m3_to_f32(v) * scale;
    }
}

/// Bytes of an `Fp8DsMla` row (DeepSeek V3.2's token layout): 512 e4m3
/// latent values, four f32 scales, 64 bf16 RoPE values.
pub const DS_MLA_ROW_BYTES: usize = KvFormat::Fp8DsMla.row_bytes(MLA_DIMS.qk) as usize;
const DS_SCALES_AT: usize = DS_MLA_SCALES_AT as usize;
const DS_ROPE_AT: usize = DS_MLA_ROPE_AT as usize;

/// Quantizes one latent row (576 values, bf16 as the GPU reads them) to
/// DeepSeek V3.2's 656-byte layout (`Fp8DsMla`): per group of 128 latent
/// values the scale [`ds_mla_group_scale`] of its largest magnitude (a
/// power of two), `q = e4m3(x · (1 / scale))` (0 codes for an all-zero
/// group); the 64 RoPE values' bf16 bits as they are (values that are not
/// bf16 are rounded to it). The CPU twin of the GPU's quantize / append,
/// bit for bit.
pub fn quantize_ds_mla_row(x: &[f32], out: &mut [u8]) {
    let latent = DS_MLA_LATENT as usize;
    for (g, xs) in x[..latent].chunks(DS_MLA_GROUP as usize).enumerate() {
        let amax = xs.iter().fold(0f32, |m, v| m.max(v.abs()));
        let scale = ds_mla_group_scale(amax);
        let inv = if scale > 0.0 { 1.0 / scale } else { 0.0 };
        for (i, &v) in xs.iter().enumerate() {
            out[g * DS_MLA_GROUP as usize + i] = e4m3_from_f32(v * inv);
        }
        out[DS_SCALES_AT + 4 * g..][..4].copy_from_slice(&scale.to_le_bytes());
    }
    for (i, &v) in x[latent..].iter().enumerate() {
        out[DS_ROPE_AT + 2 * i..][..2].copy_from_slice(&half::bf16::from_f32(v).to_bits().to_le_bytes());
    }
}

/// The 576 values an `Fp8DsMla` row stands for: each latent value
/// `bf16(e4m3 · scale)` (the f32 product rounded once to bf16, as the
/// kernels convert it; exact for a power-of-two scale), then the RoPE
/// values.
pub fn dequantize_ds_mla_row(row: &[u8], out: &mut [f32]) {
    let latent = DS_MLA_LATENT as usize;
    for (i, o) in out[..latent].iter_mut().enumerate() {
        let g = i / DS_MLA_GROUP as usize;
        let scale = f32::from_le_bytes(row[DS_SCALES_AT + 4 * g..][..4].try_into().expect("4 bytes"));
        *o = half::bf16::from_f32(e4m3_to_f32(row[i]) * scale).to_f32();
    }
    for (i, o) in out[latent..].iter_mut().enumerate() {
        *o = half::bf16::from_bits(u16::from_le_bytes([row[DS_ROPE_AT + 2 * i], row[DS_ROPE_AT + 2 * i + 1]])).to_f32();
    }
}

/// Slot of dim `p` (0..8) of a 32-bit word: nibbles are stored in the order
/// `p0 p2 p4 p6 p1 p3 p5 p7` (the kernels' magic-number extraction order).
pub fn int4_slot(p: usize) -> usize {
    if p % 2 == 0 {
        p / 2
    } else {
        4 + p / 2
    }
}

/// Quantizes one row group-wise to int4: `bytes` gets D/2 bytes (nibbles in
/// `int4_slot` order), `scales` one word per group: fp16 scale (low half) and
/// fp16 zero (high half). Per group: `lo = min`, `hi = max` (both clamped
/// to `±INT4_LIMIT`, so scale, zero and every dequantized value stay
/// finite fp16), `scale = f16((hi - lo) / 15)`,
/// `zero = f16(lo)`, `q = clamp(round_ties_even((x - zero) / scale), 0, 15)`
/// with the rounded scale and zero (q = 0 where the scale is 0).
pub fn quantize_int4_row(x: &[f32], group: usize, bytes: &mut [u8], scales: &mut [u32]) {
    for (gi, (xs, sz)) in x.chunks(group).zip(scales.iter_mut()).enumerate() {
        let lo = int4_bound(xs.iter().copied().fold(f32::INFINITY, f32::min));
        let hi = int4_bound(xs.iter().copied().fold(f32::NEG_INFINITY, f32::max));
        let (s16, z16) = (half::f16::from_f32((hi - lo) / 15.0), half::f16::from_f32(lo));
        *sz = s16.to_bits() as u32 | ((z16.to_bits() as u32) << 16);
        let (s, z) = (s16.to_f32(), z16.to_f32());
        for (i, &v) in xs.iter().enumerate() {
            let q = if s > 0.0 { (((v - z) / s).round_ties_even() as i32).clamp(0, 15) as u8 } else { 0 };
            let dim = gi * group + i;
            let (word, slot) = (dim / 8, int4_slot(dim % 8));
            let byte = &mut bytes[word * 4 + slot / 2];
            *byte = if slot % 2 == 0 { (*byte & 0xF0) | q } else { (*byte & 0x0F) | (q << 4) };
        }
    }
}

/// The values an int4 row stands for: `q · scale + zero` rounded once to
/// fp16 (the fp16 fma the kernels compute; `docs/formats.md`).
pub fn dequantize_int4_row(bytes: &[u8], scales: &[u32], group: usize, out: &mut [f32]) {
    for (dim, o) in out.iter_mut().enumerate() {
        let slot = int4_slot(dim % 8);
        let byte = bytes[dim / 8 * 4 + slot / 2];
        let q = if slot % 2 == 0 { byte & 0xF } else { byte >> 4 };
        let sz = scales[dim / group];
        let (s, z) = (half::f16::from_bits(sz as u16).to_f64(), half::f16::from_bits((sz >> 16) as u16).to_f64());
        // One fp16 fma, as the kernels compute it: q·s + z in f64 (exact
        // but for extreme scale / zero ratios), then one rounding to fp16.
        *o = half::f16::from_f64(q as f64 * s + z).to_f32();
    }
}

/// Quantizes the rows `t < seq_lens[b]` of a cache held as f32 values in
/// the shape's layout (its twin's, [`DecodeShape::plain_shape`]), for any
/// quantized format: value bytes in the cache's
/// byte layout (other bytes 0) and scales as 32-bit words in
/// `shape.scale_strides()` order (int8: f32 bits of the scale; int4: one word
/// per group; entries of missing rows are NaN bits, `0x7FC0_0000`; none
/// for fp8-ds-mla, whose rows hold their scales).
///
/// fp8 (per tensor) takes the scale [`fp8_tensor_scale`] of the rows and
/// returns it as its one scale word.
pub fn quantize_cache(shape: &DecodeShape, seq_lens: &[u32], plain: &[f32]) -> Result<(Vec<u8>, Vec<u32>)> {
    match shape.kv_format {
        KvFormat::Fp8DsMla => {
            let twin = shape.plain_shape();
            check_quantized(&twin, seq_lens, plain.len(), "plain")?;
            let (d, row) = (shape.head_dim as usize, DS_MLA_ROW_BYTES);
            let mut data = vec![0u8; shape.kv_bytes_required().unwrap_or(0) as usize];
            let (st, pt) = (shape.kv_strides(), twin.kv_strides());
            for (b, &len) in seq_lens.iter().enumerate() {
                for t in 0..len as u64 {
                    let (at, from) = ((b as u64 * st.batch + t * st.token) as usize, (b as u64 * pt.batch + t * pt.token) as usize);
                    quantize_ds_mla_row(&plain[from..from + d], &mut data[at..at + row]);
                }
            }
            Ok((data, Vec::new()))
        }
        KvFormat::Fp8 => {
            check_quantized(shape, seq_lens, plain.len(), "plain")?;
            let mut amax = 0f32;
            for_each_row_in_order(shape, seq_lens, |at| amax = plain[at..at + shape.head_dim as usize].iter().fold(amax, |m, v| m.max(v.abs())));
            let scale = fp8_tensor_scale(amax);
            Ok((quantize_cache_fp8(shape, seq_lens, plain, scale)?, vec![scale.to_bits()]))
        }
        KvFormat::Int8 | KvFormat::Fp8PerHead => {
            let (d, s) = quantize_cache_per_head(shape, seq_lens, plain)?;
            Ok((d, s.into_iter().map(f32::to_bits).collect()))
        }
        f => {
            let group = f.group().ok_or_else(|| Error::invalid("kv_format", "a quantized format", f.name()))? as usize;
            check_quantized(shape, seq_lens, plain.len(), "plain")?;
            let d = shape.head_dim as usize;
            let words = d / group;
            let mut data = vec![0u8; shape.kv_bytes_required().unwrap_or(0) as usize];
            let mut scales = vec![f32::NAN.to_bits(); (shape.scale_bytes_required().unwrap_or(0) / 4) as usize];
            let (out, sides) = (Shared::new(&mut data), Shared::new(&mut scales));
            for_each_row(shape, seq_lens, |at, si| {
                // SAFETY: each row and its scale words go to one thread.
                let (bytes, sz) = unsafe { (out.slice(at / 2, d / 2), sides.slice(si * words, words)) };
                quantize_int4_row(&plain[at..at + d], group, bytes, sz);
            });
            Ok((data, scales))
        }
    }
}

/// The f32 values of a quantized cache's rows `t < seq_lens[b]`, in the
/// shape's twin's layout ([`DecodeShape::plain_shape`]; other elements
/// NaN), for any quantized format.
/// (fp8 per tensor: `scales[0]` holds the scale's bits.)
pub fn dequantize_cache(shape: &DecodeShape, seq_lens: &[u32], data: &[u8], scales: &[u32]) -> Result<Vec<f32>> {
    match shape.kv_format {
        KvFormat::Fp8DsMla => {
            check_quantized(shape, seq_lens, data.len(), "data")?;
            let twin = shape.plain_shape();
            let (d, row) = (shape.head_dim as usize, DS_MLA_ROW_BYTES);
            let mut out = vec![f32::NAN; twin.kv_elems_required().unwrap_or(0) as usize];
            let (st, pt) = (shape.kv_strides(), twin.kv_strides());
            for (b, &len) in seq_lens.iter().enumerate() {
                for t in 0..len as u64 {
                    let (at, to) = ((b as u64 * st.batch + t * st.token) as usize, (b as u64 * pt.batch + t * pt.token) as usize);
                    dequantize_ds_mla_row(&data[at..at + row], &mut out[to..to + d]);
                }
            }
            Ok(out)
        }
        KvFormat::Fp8 => {
            let scale = scales.first().map(|&w| f32::from_bits(w)).ok_or_else(|| Error::invalid("scales", "the tensor's scale", "an empty slice"))?;
            // As `quantize_cache_fp8` takes it: a code times a scale that is
            // not positive and finite stands for no value.
            ensure(scale.is_finite() && scale > 0.0, "scales[0]", "a positive finite f32 scale", scale)?;
            check_quantized(shape, seq_lens, data.len(), "data")?;
            let d = shape.head_dim as usize;
            let mut out = vec![f32::NAN; data.len()];
            let shared = Shared::new(&mut out);
            for_each_row(shape, seq_lens, |at, _| {
                // SAFETY: each row goes to one thread (`for_each_row`).
                dequantize_fp8_row(&data[at..at + d], scale, unsafe { shared.slice(at, d) });
            });
            Ok(out)
        }
        KvFormat::Int8 | KvFormat::Fp8PerHead => {
            let scales: Vec<f32> = scales.iter().map(|&w| f32::from_bits(w)).collect();
            dequantize_cache_per_head(shape, seq_lens, data, &scales, "scales")
        }
        f => {
            let group = f.group().ok_or_else(|| Error::invalid("kv_format", "a quantized format", f.name()))? as usize;
            check_quantized(shape, seq_lens, data.len() * 2, "data")?;
            let d = shape.head_dim as usize;
            let words = d / group;
            ensure((scales.len() as u64) * 4 >= shape.scale_bytes_required().unwrap_or(u64::MAX), "scales", "the scales of every row", scales.len())?;
            let mut out = vec![f32::NAN; shape.kv_elems_required().unwrap_or(0) as usize];
            let shared = Shared::new(&mut out);
            for_each_row(shape, seq_lens, |at, si| {
                // SAFETY: each row goes to one thread.
                let row = unsafe { shared.slice(at, d) };
                dequantize_int4_row(&data[at / 2..at / 2 + d / 2], &scales[si * words..][..words], group, row);
            });
            Ok(out)
        }
    }
}

/// The per-tensor scale that maps a tensor's largest magnitude `amax` to
/// e4m3's largest finite value: `amax / 448` (1 for an all-zero tensor,
/// whose codes are all zero under any scale).
pub fn fp8_tensor_scale(amax: f32) -> f32 {
    if amax > 0.0 {
        amax / E4M3_MAX
    } else {
        1.0
    }
}

/// Quantizes the rows `t < seq_lens[b]` of a cache held as f32 values in
/// the shape's layout to fp8 e4m3 under one given scale (the `Fp8`
/// format; positive and finite): bytes in the same layout, other bytes 0.
/// The CPU twin of `DecodeAttention::quantize_kv` for fp8.
pub fn quantize_cache_fp8(shape: &DecodeShape, seq_lens: &[u32], plain: &[f32], scale: f32) -> Result<Vec<u8>> {
    ensure(shape.kv_format == KvFormat::Fp8, "kv_format", "fp8", shape.kv_format.name())?;
    ensure(scale.is_finite() && scale > 0.0, "scale", "a positive finite f32", scale)?;
    check_quantized(shape, seq_lens, plain.len(), "plain")?;
    let d = shape.head_dim as usize;
    let mut data = vec![0u8; shape.kv_elems_required().unwrap_or(0) as usize];
    let out = Shared::new(&mut data);
    for_each_row(shape, seq_lens, |at, _| {
        // SAFETY: each row goes to one thread (`for_each_row`).
        quantize_fp8_row_scaled(&plain[at..at + d], scale, unsafe { out.slice(at, d) });
    });
    Ok(data)
}

/// Calls `f(element offset of the row)` for every row `t < seq_lens[b]`
/// of every kv head, in order on this thread.
fn for_each_row_in_order(shape: &DecodeShape, seq_lens: &[u32], mut f: impl FnMut(usize)) {
    let st = shape.kv_strides();
    for (b, &len) in seq_lens.iter().enumerate() {
        for t in 0..len as u64 {
            for h in 0..shape.num_kv_heads as u64 {
                f((b as u64 * st.batch + t * st.token + h * st.head) as usize);
            }
        }
    }
}

fn check_quantized(shape: &DecodeShape, seq_lens: &[u32], values: usize, name: &str) -> Result<()> {
    shape.validate()?;
    // The CPU quantizer walks rows by the layout's strides; a pool's rows
    // are found through a block table, which it does not take (sequence b
    // would be read from page b).
    ensure(!shape.is_paged(), "kv_layout", "a contiguous or strided layout (the CPU quantizer takes no block table)", "a paged layout")?;
    shape.validate_seq_lens(seq_lens)?;
    let need = shape.kv_elems_required().unwrap_or(u64::MAX);
    ensure(values as u64 >= need, name, format!("at least {need} values"), values)
}

/// Quantizes the rows `t < seq_lens[b]` of a cache held as f32 values in
/// the shape's layout (`shape.kv_strides()`, elements): bytes `q + 128` in
/// the same layout (other bytes 0) and scales in `shape.scale_strides()` (other
/// entries NaN, so a kernel that reads a row past a length cannot pass).
/// Rows are quantized in parallel.
pub fn quantize_cache_int8(shape: &DecodeShape, seq_lens: &[u32], plain: &[f32]) -> Result<(Vec<u8>, Vec<f32>)> {
    ensure(shape.kv_format == KvFormat::Int8, "kv_format", "int8", shape.kv_format.name())?;
    quantize_cache_per_head(shape, seq_lens, plain)
}

/// [`quantize_cache_int8`] for either per-head byte format (int8, fp8 per
/// head): bytes in the layout, one f32 scale per row.
fn quantize_cache_per_head(shape: &DecodeShape, seq_lens: &[u32], plain: &[f32]) -> Result<(Vec<u8>, Vec<f32>)> {
    check_cache_shape(shape, seq_lens, plain.len(), "plain")?;
    let d = shape.head_dim as usize;
    let fp8 = shape.kv_format == KvFormat::Fp8PerHead;
    let mut data = vec![0u8; shape.kv_elems_required().unwrap_or(0) as usize];
    let mut scales = vec![f32::NAN; (shape.scale_bytes_required().unwrap_or(0) / 4) as usize];
    let (out, row_scales) = (Shared::new(&mut data), Shared::new(&mut scales));
    for_each_row(shape, seq_lens, |at, s| {
        // SAFETY: each row and scale goes to one thread (`for_each_row`).
        let (row, scale) = unsafe { (out.slice(at, d), row_scales.slice(s, 1)) };
        if fp8 {
            scale[0] = quantize_fp8_row(&plain[at..at + d], row);
        } else {
            let mut q = [0i8; 256];
            scale[0] = quantize_int8_row(&plain[at..at + d], &mut q[..d]);
            for (o, &v) in row.iter_mut().zip(&q[..d]) {
                *o = (v as i32 + 128) as u8;
            }
        }
    });
    Ok((data, scales))
}

/// The f32 values of a quantized cache's rows `t < seq_lens[b]`, in the
/// shape's layout (other elements NaN): what the attention kernels compute with.
pub fn dequantize_cache_int8(shape: &DecodeShape, seq_lens: &[u32], data: &[u8], scales: &[f32]) -> Result<Vec<f32>> {
    ensure(shape.kv_format == KvFormat::Int8, "kv_format", "int8", shape.kv_format.name())?;
    dequantize_cache_per_head(shape, seq_lens, data, scales, "scales")
}

/// [`dequantize_cache_int8`] for either per-head byte format.
fn dequantize_cache_per_head(shape: &DecodeShape, seq_lens: &[u32], data: &[u8], scales: &[f32], scales_name: &str) -> Result<Vec<f32>> {
    check_cache_shape(shape, seq_lens, data.len(), "data")?;
    ensure((scales.len() as u64) * 4 >= shape.scale_bytes_required().unwrap_or(u64::MAX), scales_name, "one scale per row of the cache", scales.len())?;
    let d = shape.head_dim as usize;
    let fp8 = shape.kv_format == KvFormat::Fp8PerHead;
    let mut out = vec![f32::NAN; data.len()];
    let shared = Shared::new(&mut out);
    for_each_row(shape, seq_lens, |at, si| {
        // SAFETY: each row goes to one thread (`for_each_row`).
        let row = unsafe { shared.slice(at, d) };
        let s = scales[si];
        if fp8 {
            dequantize_fp8_row(&data[at..at + d], s, row);
        } else {
            for (o, &byte) in row.iter_mut().zip(&data[at..at + d]) {
                *o = (byte as i32 - 128) as f32 * s;
            }
        }
    });
    Ok(out)
}

/// Calls `f(element offset of the row, index of its scale)` for every row
/// `t < seq_lens[b]` of every kv head. When the layout keeps rows (and
/// sequences) disjoint, as every built-in layout does, rows are spread over
/// all threads; otherwise they run in order on one.
fn for_each_row(shape: &DecodeShape, seq_lens: &[u32], f: impl Fn(usize, usize) + Sync) {
    let (st, ss) = (shape.kv_strides(), shape.scale_strides());
    let (d, hkv, n) = (shape.head_dim as u64, shape.num_kv_heads as u64, shape.max_seq_len as u64);
    let extent = (n - 1) * st.token + (hkv - 1) * st.head + d;
    let token_major = st.head >= d && st.token >= hkv * st.head;
    let head_major = st.token >= d && st.head >= n * st.token;
    let disjoint = (token_major || head_major) && (shape.batch == 1 || st.batch >= extent);
    let rows: Vec<(u32, u32, u32)> =
        seq_lens.iter().enumerate().flat_map(|(b, &len)| (0..len).flat_map(move |t| (0..hkv as u32).map(move |h| (b as u32, t, h)))).collect();
    let run = |rows: &[(u32, u32, u32)]| {
        for &(b, t, h) in rows {
            let at = b as u64 * st.batch + t as u64 * st.token + h as u64 * st.head;
            let scale_at = b as u64 * ss.batch + t as u64 * ss.token + h as u64 * ss.head;
            f(at as usize, scale_at as usize);
        }
    };
    if !disjoint {
        return run(&rows);
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::thread::scope(|s| {
        for part in rows.chunks(rows.len().div_ceil(threads).max(256)) {
            s.spawn(|| run(part));
        }
    });
}

fn check_cache_shape(shape: &DecodeShape, seq_lens: &[u32], len: usize, name: &str) -> Result<()> {
    ensure(matches!(shape.kv_format, KvFormat::Int8 | KvFormat::Fp8PerHead), "kv_format", "int8 or fp8-per-head", shape.kv_format.name())?;
    check_quantized(shape, seq_lens, len, name)
}

/// A buffer that threads write at disjoint places (`for_each_row` hands
/// each row, and each scale, to exactly one thread).
struct Shared<T>(*mut T, usize);
unsafe impl<T: Send> Sync for Shared<T> {}
impl<T> Shared<T> {
    fn new(v: &mut [T]) -> Self {
        Shared(v.as_mut_ptr(), v.len())
    }
    /// # Safety
    /// No other thread accesses `at .. at + len` meanwhile.
    unsafe fn slice(&self, at: usize, len: usize) -> &mut [T] {
        assert!(at + len <= self.1, "row past the buffer");
        std::slice::from_raw_parts_mut(self.0.add(at), len)
    }
}
