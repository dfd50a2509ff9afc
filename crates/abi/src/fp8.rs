//! fp8 e4m3 (OCP "E4M3FN", NVIDIA `__nv_fp8_e4m3`): 1 sign bit, 4 exponent
//! bits (bias 7), 3 mantissa bits; no infinities, `S.1111.111` is NaN, the
//! largest finite magnitude is 448 and the smallest 2^-9 (subnormal).
//!
//! [`e4m3_from_f32`] is the rounding of PTX `cvt.rn.satfinite.e4m3x2.f32`:
//! to nearest, ties to even, finite values and infinities beyond the range
//! saturating to ±448, NaN to NaN. The GPU cache kernels convert with that
//! instruction and the CPU quantizer with this function, so both give the
//! same bits (`tests/quant.rs` checks every f32 class against an
//! exhaustive nearest-value search; the GPU tests compare the two).

/// The NaN this codec writes (`S.1111.111` with the sign clear), as
/// `cvt.rn.satfinite` does.
pub const E4M3_NAN: u8 = 0x7f;

/// The largest finite e4m3 magnitude.
pub const E4M3_MAX: f32 = 448.0;

/// `x` in e4m3: round to nearest, ties to even; beyond ±448 (infinities
/// included) saturates to ±448; NaN gives [`E4M3_NAN`].
pub const fn e4m3_from_f32(x: f32) -> u8 {
    if x.is_nan() {
        return E4M3_NAN;
    }
    let sign = if x.is_sign_negative() { 0x80u8 } else { 0 };
    let a = x.abs();
    if a >= E4M3_MAX {
        return sign | 0x7e;
    }
    let bits = a.to_bits();
    let exp = (bits >> 23) as i32 - 127;
    let magnitude = if exp < -6 {
        // Subnormal range (below 2^-6): multiples of 2^-9. `a · 2^9` is
        // exact in f32; its rounding gives the subnormal's mantissa, and
        // 8 (2^-6 itself) is the smallest normal's code.
        round_ties_even_small(a * 512.0)
    } else {
        // a = m · 2^(exp − 3) with m in [8, 16): round m, carrying into
        // the exponent at 16.
        let m = round_ties_even_small(a * pow2(3 - exp));
        let (e, m) = if m == 16 { (exp + 1, 8) } else { (exp, m) };
        let code = (((e + 7) as u32) << 3) | (m - 8);
        // Rounded up to 480 (the NaN code's magnitude): saturate.
        if code > 0x7e {
            0x7e
        } else {
            code
        }
    };
    sign | magnitude as u8
}

/// The value of e4m3 code `b` (NaN for `S.1111.111`).
pub const fn e4m3_to_f32(b: u8) -> f32 {
    let magnitude = b & 0x7f;
    let v = if magnitude == 0x7f {
        f32::NAN
    } else {
        let e = (magnitude >> 3) as i32;
        let m = (magnitude & 7) as f32;
        if e == 0 {
            m * pow2(-9)
        } else {
            (8.0 + m) * pow2(e - 10)
        }
    };
    if b & 0x80 != 0 {
        -v
    } else {
        v
    }
}

/// `2^e` for the exponents these conversions use (−9 … 9), exactly.
const fn pow2(e: i32) -> f32 {
    f32::from_bits(((e + 127) as u32) << 23)
}

/// `round_ties_even(x)` for `0 ≤ x < 2^23`, as an integer (`const`, where
/// `f32::round_ties_even` is not).
const fn round_ties_even_small(x: f32) -> u32 {
    let floor = x as u32;
    let frac = x - floor as f32;
    if frac > 0.5 || (frac == 0.5 && floor % 2 == 1) {
        floor + 1
    } else {
        floor
    }
}
