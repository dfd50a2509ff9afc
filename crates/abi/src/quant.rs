//! The factors a quantizer multiplies a row by, shared by the GPU cache
//! kernels and the CPU quantizer so both take the same IEEE f32 steps.
//!
//! A row of largest magnitude `amax` is coded as `round(x · lift · inv)`
//! with `inv = top / (amax · lift)` (`top`: 127 for int8, 448 for e4m3).
//! `lift` is 1 unless `amax` is below [`TINY_AMAX`]: there `top / amax`
//! overflows f32 (below ~1.3e-36 for e4m3, ~3.7e-37 for int8; 16-bit
//! caches hold values down to 9.2e-41), and a row's zeros became NaN codes
//! (`0 · inf`) and every other value saturated. Lifted by 2^64 (exact: a
//! power of two), every step stays a normal f32, and the codes are those
//! the unlifted formula gives wherever that one is finite.

/// Rows (or per-tensor scales) below this take the lifted path: 2^-100.
pub const TINY_AMAX: f32 = f32::from_bits((127 - 100) << 23);
/// The lift of tiny rows: 2^64.
pub const TINY_LIFT: f32 = f32::from_bits((127 + 64) << 23);

/// `(lift, inv)` for a row of largest magnitude `amax` and code range
/// `top`: `(1, top / amax)`, `(2^64, top / (amax · 2^64))` below
/// [`TINY_AMAX`], `(1, 0)` for an all-zero row (zero codes).
#[inline(always)]
pub fn row_factors(amax: f32, top: f32) -> (f32, f32) {
    if !(amax > 0.0) {
        (1.0, 0.0)
    } else if amax < TINY_AMAX {
        (TINY_LIFT, top / (amax * TINY_LIFT))
    } else {
        (1.0, top / amax)
    }
}

/// `(lift, inv)` for a per-tensor `scale` (codes `x / scale`):
/// `(1, 1 / scale)`, lifted below [`TINY_AMAX`] as [`row_factors`]; a
/// scale that is not positive (or NaN) gives `(1, 0)`: zero codes, never
/// NaN ones (the host rejects such scales where it can read them; a device
/// scalar it cannot read is the caller's).
#[inline(always)]
pub fn tensor_factors(scale: f32) -> (f32, f32) {
    row_factors(scale, 1.0)
}

/// int4 groups are coded between `lo` and `hi` clamped to `±INT4_LIMIT`:
/// their fp16 scale and zero, and every dequantized `f16(q · scale +
/// zero)`, stay finite (with the bounds at fp16's 65504, the rounded
/// scale took `zero + 15 · scale` past it: infinities, then NaN in the
/// attention). Values beyond saturate; groups within are coded as before.
pub const INT4_LIMIT: f32 = 65000.0;

/// A group's `lo` or `hi` as both quantizers code it: clamped to
/// `±INT4_LIMIT`, and a zero made +0 (the GPU's `min` of +0 and −0 is −0,
/// the CPU's either, and −0 gave the zero an fp16 sign bit the other side
/// did not write).
#[inline(always)]
pub fn int4_bound(x: f32) -> f32 {
    x.clamp(-INT4_LIMIT, INT4_LIMIT) + 0.0
}

/// The scale of a group of [`crate::DS_MLA_GROUP`] latent values of an
/// `Fp8DsMla` row whose largest magnitude is `amax` (DeepSeek V3.2's rule,
/// its `ue8m0` scales): the least power of two `s` with `448 · s ≥ amax`,
/// at least 2^-126 (so `1 / s` is a finite f32, and `x · (1 / s)` exact);
/// 0 for an all-zero group (zero codes). Found from `amax`'s bits, with no
/// division, so the GPU's and the CPU's scales are the same bits.
#[inline(always)]
pub fn ds_mla_group_scale(amax: f32) -> f32 {
    if !(amax > 0.0) {
        return 0.0;
    }
    let bits = amax.to_bits();
    // amax = 1.m · 2^(e − 127) and 448 = 1.75 · 2^8: 448 · 2^k ≥ amax from
    // k = e − 135 when 1.m ≤ 1.75, else one more. (A subnormal amax, e = 0,
    // takes the least scale.)
    let e = ((bits >> 23) & 0xFF) as i32;
    let k = if e == 0 { -126 } else { e - 135 + ((bits & 0x7F_FFFF) > 0x60_0000) as i32 };
    f32::from_bits(((k.max(-126) + 127) as u32) << 23)
}
