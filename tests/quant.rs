//! The int8 per-head quantizer on the CPU (the GPU kernels reproduce its
//! bits; `tests/gpu/quant.rs` checks that on a GPU).

use decode_attn::quant::{dequantize_cache_int8, dequantize_int8_row, quantize_cache_int8, quantize_int8_row};
use decode_attn::testing::{problem_inputs, Distribution};
use decode_attn::{DecodeShape, KvFormat, KvLayout};
use proptest::prelude::*;

#[test]
fn the_largest_magnitude_maps_to_127_and_zero_rows_stay_zero() {
    let mut q = [0i8; 4];
    let s = quantize_int8_row(&[0.5, -2.0, 1.0, 0.0], &mut q);
    assert_eq!(q, [32, -127, 64, 0]);
    assert_eq!(s, 2.0 / 127.0);
    let s = quantize_int8_row(&[0.0; 4], &mut q);
    assert_eq!((s, q), (0.0, [0; 4]));
}

proptest! {
    #[test]
    fn round_trip_error_is_at_most_half_a_step(x in prop::collection::vec(-1e4f32..1e4, 64)) {
        let mut q = vec![0i8; 64];
        let s = quantize_int8_row(&x, &mut q);
        let mut back = vec![0f32; 64];
        dequantize_int8_row(&q, s, &mut back);
        for (a, b) in x.iter().zip(&back) {
            // Half a step, plus the f32 rounding of `x / s` and `q · s` at
            // |x|'s magnitude (a few ulps: a drawn -8461.549 came back 4e-4
            // past half a step of 77.27).
            prop_assert!((a - b).abs() <= 0.5 * s * (1.0 + 1e-5) + 4.0 * f32::EPSILON * a.abs() + 1e-30, "{a} -> {b} (scale {s})");
        }
        prop_assert!(q.iter().all(|&v| v != -128));
    }
}

#[test]
fn a_cache_quantizes_only_its_rows_in_either_layout() {
    for layout in [KvLayout::Nhd, KvLayout::Hnd] {
        let shape = DecodeShape { kv_format: KvFormat::Int8, kv_layout: layout, ..DecodeShape::bf16(2, 4, 2, 64, 1, 10) };
        let lens = [10u32, 3];
        let (_, k, _) = problem_inputs(&shape, &lens, Distribution::Normal, 1, 1).unwrap();
        let (data, scales) = quantize_cache_int8(&shape, &lens, &k).unwrap();
        // One scale per row that exists (13 tokens × 2 heads); the rest,
        // padding included, stays NaN.
        let present = scales.iter().filter(|s| !s.is_nan()).count();
        assert_eq!(present, 13 * 2, "{layout:?}");
        assert_eq!(scales.len(), 2 * 2 * 12, "[batch, Hkv, len rounded up to 4]");
        let back = dequantize_cache_int8(&shape, &lens, &data, &scales).unwrap();
        for (a, b) in k.iter().zip(&back) {
            assert_eq!(a.is_nan(), b.is_nan(), "{layout:?}: a row and its dequantized copy disagree on being a row");
        }
    }
}

#[test]
fn overlapping_sequence_regions_are_quantized_serially_with_the_same_bits() {
    // One sequence: NHD (own region, threaded path) vs the same rows through
    // strides with a zero batch stride (serial path).
    let nhd = DecodeShape { kv_format: KvFormat::Int8, ..DecodeShape::bf16(1, 2, 2, 64, 1, 12) };
    let strided = DecodeShape { kv_layout: KvLayout::Strided { batch: 0, token: 128, head: 64 }, ..nhd.clone() };
    let lens = [9u32];
    let (_, k, _) = problem_inputs(&nhd, &lens, Distribution::HeavyTailed, 3, 1).unwrap();
    let a = quantize_cache_int8(&nhd, &lens, &k).unwrap();
    let b = quantize_cache_int8(&strided, &lens, &k).unwrap();
    assert_eq!(a.0, b.0);
    assert!(a.1.iter().zip(&b.1).all(|(x, y)| x.to_bits() == y.to_bits()));
    let (da, db) = (dequantize_cache_int8(&nhd, &lens, &a.0, &a.1).unwrap(), dequantize_cache_int8(&strided, &lens, &b.0, &b.1).unwrap());
    assert!(da.iter().zip(&db).all(|(x, y)| x.to_bits() == y.to_bits()));
}

#[test]
fn int4_groups_round_trip_within_half_a_step_and_use_the_kernel_nibble_order() {
    use decode_attn::quant::{dequantize_int4_row, int4_slot, quantize_int4_row};
    // Dims 0..8 of a word go to slots 0 4 1 5 2 6 3 7.
    assert_eq!((0..8).map(int4_slot).collect::<Vec<_>>(), [0, 4, 1, 5, 2, 6, 3, 7]);
    let x: Vec<f32> = (0..64).map(|i| ((i * 37 % 64) as f32 - 20.0) * 0.25).collect();
    let (mut bytes, mut side) = (vec![0u8; 32], vec![0u32; 2]);
    quantize_int4_row(&x, 32, &mut bytes, &mut side);
    let mut back = vec![0f32; 64];
    dequantize_int4_row(&bytes, &side, 32, &mut back);
    for (g, xs) in x.chunks(32).enumerate() {
        let s = decode_attn::half::f16::from_bits(side[g] as u16).to_f32();
        for (i, &v) in xs.iter().enumerate() {
            let err = (v - back[g * 32 + i]).abs();
            assert!(err <= 0.5 * s + 0.01 * v.abs().max(1.0), "group {g} dim {i}: {v} -> {} (scale {s})", back[g * 32 + i]);
        }
    }
    // A constant group has scale 0 and comes back exactly (its zero).
    let mut side1 = vec![0u32; 1];
    quantize_int4_row(&[1.5; 32], 32, &mut bytes[..16], &mut side1);
    dequantize_int4_row(&bytes[..16], &side1, 32, &mut back[..32]);
    assert!(back[..32].iter().all(|&v| v == 1.5));
}

/// fp8 e4m3: the CPU twin of `cvt.rn.satfinite.e4m3x2.f32`.
mod e4m3 {
    use decode_attn::quant::{e4m3_from_f32, e4m3_to_f32, E4M3_MAX, E4M3_NAN};

    /// The nearest finite e4m3 code by search over all of them: ties to the
    /// even code (mantissa bit 0 clear), beyond 448 saturated.
    fn nearest(x: f32) -> u8 {
        if x.is_nan() {
            return E4M3_NAN;
        }
        let sign = if x.is_sign_negative() { 0x80 } else { 0 };
        let a = x.abs() as f64;
        if a >= E4M3_MAX as f64 {
            return sign | 0x7e;
        }
        let mut best = 0u8;
        for code in 0..=0x7eu8 {
            let (v, b) = (e4m3_to_f32(code) as f64, e4m3_to_f32(best) as f64);
            let (dv, db) = ((v - a).abs(), (b - a).abs());
            if dv < db || (dv == db && code % 2 == 0 && best % 2 == 1) {
                best = code;
            }
        }
        sign | best
    }

    #[test]
    fn codes_decode_to_the_format_s_values() {
        assert_eq!(e4m3_to_f32(0x00), 0.0);
        assert_eq!(e4m3_to_f32(0x01), 2f32.powi(-9), "smallest subnormal");
        assert_eq!(e4m3_to_f32(0x07), 7.0 * 2f32.powi(-9), "largest subnormal");
        assert_eq!(e4m3_to_f32(0x08), 2f32.powi(-6), "smallest normal");
        assert_eq!(e4m3_to_f32(0x38), 1.0);
        assert_eq!(e4m3_to_f32(0x7e), E4M3_MAX);
        assert_eq!(e4m3_to_f32(0xfe), -E4M3_MAX);
        assert!(e4m3_to_f32(0x7f).is_nan() && e4m3_to_f32(0xff).is_nan());
    }

    #[test]
    fn every_finite_code_round_trips() {
        for code in (0..=255u8).filter(|c| c & 0x7f != 0x7f) {
            assert_eq!(e4m3_from_f32(e4m3_to_f32(code)), code, "code {code:#04x}");
        }
    }

    #[test]
    fn rounds_to_nearest_even_and_saturates() {
        // Every 16411th f32 (both signs, every exponent) and every f32 near
        // the codes' midpoints and the range's edges.
        let mut xs: Vec<f32> = (0..u32::MAX / 16411).map(|i| f32::from_bits(i * 16411)).collect();
        for code in 0..0x7eu8 {
            let (lo, hi) = (e4m3_to_f32(code), e4m3_to_f32(code + 1));
            let mid = (lo + hi) / 2.0;
            for x in [mid, f32::from_bits(mid.to_bits() - 1), f32::from_bits(mid.to_bits() + 1), lo, hi] {
                xs.extend([x, -x]);
            }
        }
        xs.extend([448.0, 463.99, 464.0, 480.0, 1e30, f32::MAX, f32::INFINITY, f32::MIN_POSITIVE, 1e-45]);
        for x in xs.iter().flat_map(|&x| [x, -x]) {
            assert_eq!(e4m3_from_f32(x), nearest(x), "x = {x:e} ({:#010x})", x.to_bits());
        }
        assert_eq!(e4m3_from_f32(f32::NAN), E4M3_NAN);
        assert_eq!(e4m3_from_f32(f32::NEG_INFINITY), 0xfe);
        assert_eq!(e4m3_from_f32(-0.0), 0x80);
    }
}

/// fp8 rows: per-row scales (`Fp8PerHead`) and a given scale (`Fp8`).
mod fp8_rows {
    use decode_attn::quant::{dequantize_fp8_row, e4m3_to_f32, quantize_fp8_row, quantize_fp8_row_scaled, E4M3_MAX};

    fn row(seed: u32) -> Vec<f32> {
        // Deterministic values over several decades, both signs.
        (0..128u32).map(|i| ((i.wrapping_mul(2654435761) ^ seed) % 2001) as f32 / 1000.0 - 1.0).map(|v| v * 10f32.powi((v * 3.0) as i32)).collect()
    }

    #[test]
    fn a_row_s_largest_magnitude_maps_to_448() {
        let x = row(7);
        let mut q = vec![0u8; x.len()];
        let scale = quantize_fp8_row(&x, &mut q);
        let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
        assert_eq!(scale, amax / E4M3_MAX);
        assert!(q.iter().any(|&c| c & 0x7f == 0x7e), "some code is ±448");
        assert!(q.iter().all(|&c| c & 0x7f != 0x7f), "no NaN from finite input");
    }

    #[test]
    fn dequantized_values_are_within_half_a_step_of_the_input() {
        for seed in 0..16 {
            let x = row(seed);
            let mut q = vec![0u8; x.len()];
            let scale = quantize_fp8_row(&x, &mut q);
            let mut y = vec![0f32; x.len()];
            dequantize_fp8_row(&q, scale, &mut y);
            for ((&a, &b), &c) in x.iter().zip(&y).zip(&q) {
                // Half the code's spacing (3 mantissa bits: 2^-4 relative
                // for normals, 2^-10 · scale absolute for subnormals),
                // plus f32 rounding of the scaling.
                let step = if c & 0x78 == 0 { 2f32.powi(-9) } else { e4m3_to_f32(c & 0x7f) / 8.0 };
                assert!((a - b).abs() <= 0.5 * step * scale * 1.0001 + 1e-30, "{a} -> {b} (code {c:#04x}, scale {scale})");
            }
        }
    }

    #[test]
    fn an_all_zero_row_stores_zeros_and_scale_zero() {
        let mut q = vec![0xffu8; 64];
        assert_eq!(quantize_fp8_row(&[0.0; 64], &mut q), 0.0);
        assert!(q.iter().all(|&c| c == 0));
    }

    #[test]
    fn a_given_scale_saturates_beyond_448_times_it() {
        let mut q = [0u8; 4];
        quantize_fp8_row_scaled(&[1.0, -1e6, 1e6, f32::NAN], 0.5, &mut q);
        assert_eq!(q, [0x40, 0xfe, 0x7e, 0x7f]);
    }
}

/// fp8 per tensor: a whole cache under one scale.
mod fp8_caches {
    use decode_attn::quant::{dequantize_cache, e4m3_from_f32, fp8_tensor_scale, quantize_cache, quantize_cache_fp8};
    use decode_attn::{DecodeShape, KvFormat};

    #[test]
    fn a_cache_s_largest_magnitude_maps_to_448_and_its_scale_is_the_one_side_word() {
        let shape = DecodeShape { kv_format: KvFormat::Fp8, ..DecodeShape::bf16(2, 4, 2, 64, 1, 10) };
        let lens = [10u32, 3];
        let n = shape.kv_elems_required().unwrap() as usize;
        let plain: Vec<f32> = (0..n).map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0).collect();
        let (data, side) = quantize_cache(&shape, &lens, &plain).unwrap();
        // The amax over the rows t < len only.
        let st = shape.kv_strides();
        let mut amax = 0f32;
        for (b, &len) in lens.iter().enumerate() {
            for t in 0..len as u64 {
                for h in 0..2u64 {
                    let at = (b as u64 * st.batch + t * st.token + h * st.head) as usize;
                    amax = plain[at..at + 64].iter().fold(amax, |m, v| m.max(v.abs()));
                }
            }
        }
        assert_eq!(side, vec![fp8_tensor_scale(amax).to_bits()]);
        assert_eq!(data, quantize_cache_fp8(&shape, &lens, &plain, fp8_tensor_scale(amax)).unwrap());
        assert!(data.iter().any(|&c| c & 0x7f == 0x7e), "some value reaches ±448");
        let back = dequantize_cache(&shape, &lens, &data, &side).unwrap();
        let at = (st.batch + 2 * st.token + st.head) as usize;
        assert_eq!(data[at], e4m3_from_f32(plain[at] * (1.0 / fp8_tensor_scale(amax))));
        assert!(back[at].is_finite() && back[(st.batch + 5 * st.token) as usize].is_nan(), "rows past a length stay NaN");
    }

    #[test]
    fn an_all_zero_cache_takes_scale_one() {
        assert_eq!(fp8_tensor_scale(0.0), 1.0);
        assert_eq!(fp8_tensor_scale(448.0), 1.0);
    }
}

/// DeepSeek V3.2's latent rows (`Fp8DsMla`): 656 bytes a token, 512 e4m3
/// codes under four power-of-two scales (one per 128 values), then the
/// scales (f32, little-endian), then the 64 RoPE values as bf16.
mod ds_mla_rows {
    use decode_attn::half::bf16;
    use decode_attn::quant::{dequantize_cache, dequantize_ds_mla_row, ds_mla_group_scale, e4m3_to_f32, quantize_cache, quantize_ds_mla_row, DS_MLA_ROW_BYTES};
    use decode_attn::{DecodeShape, KvFormat};

    #[test]
    fn a_group_s_scale_is_the_least_power_of_two_that_maps_it_under_448() {
        let p = |k: i32| 2f32.powi(k);
        for (amax, scale) in [(0.0, 0.0), (448.0, 1.0), (449.0, 2.0), (1.0, p(-8)), (0.875, p(-9)), (896.0, 2.0), (896.5, 4.0), (3e38, p(120)), (1e-37, p(-126)), (1e-42, p(-126))] {
            assert_eq!(ds_mla_group_scale(amax), scale, "amax {amax:e}");
        }
        let mut x = 1e-30f32;
        while x < 1e38 {
            let s = ds_mla_group_scale(x);
            assert!(s.to_bits() & 0x7F_FFFF == 0 && x <= 448.0 * s && (s == p(-126) || x > 224.0 * s), "amax {x:e}: scale {s:e}");
            x *= 1.37;
        }
    }

    fn latent_row(seed: u32) -> Vec<f32> {
        // Four groups of their own magnitudes, both signs, some zeros; RoPE values bf16.
        (0..576u32)
            .map(|i| {
                let v = ((i.wrapping_mul(2654435761) ^ seed) % 2001) as f32 / 1000.0 - 1.0;
                let mag = [1e-3f32, 1.0, 300.0, 5e4, 1.0][(i / 128) as usize];
                bf16::from_f32(if i % 11 == 0 { 0.0 } else { v * mag }).to_f32()
            })
            .collect()
    }

    #[test]
    fn a_row_holds_its_codes_its_scales_and_its_rope_values_in_deepseek_s_order() {
        let x = latent_row(3);
        let mut row = vec![0u8; DS_MLA_ROW_BYTES];
        quantize_ds_mla_row(&x, &mut row);
        for g in 0..4 {
            let amax = x[128 * g..128 * (g + 1)].iter().fold(0f32, |m, v| m.max(v.abs()));
            let scale = f32::from_le_bytes(row[512 + 4 * g..516 + 4 * g].try_into().unwrap());
            assert_eq!(scale, ds_mla_group_scale(amax), "group {g}");
            for i in 128 * g..128 * (g + 1) {
                assert_eq!(row[i], decode_attn::quant::e4m3_from_f32(x[i] / scale), "value {i}");
            }
        }
        for i in 0..64 {
            assert_eq!(u16::from_le_bytes([row[528 + 2 * i], row[529 + 2 * i]]), bf16::from_f32(x[512 + i]).to_bits(), "RoPE value {i}");
        }
    }

    #[test]
    fn dequantized_values_are_each_code_times_its_scale_exactly_and_rope_as_stored() {
        for seed in 0..8 {
            let x = latent_row(seed);
            let mut row = vec![0u8; DS_MLA_ROW_BYTES];
            quantize_ds_mla_row(&x, &mut row);
            let mut y = vec![0f32; 576];
            dequantize_ds_mla_row(&row, &mut y);
            for i in 0..512 {
                let scale = f32::from_le_bytes(row[512 + 4 * (i / 128)..][..4].try_into().unwrap());
                // A power-of-two scale: the product is exact, and a bf16.
                assert_eq!(y[i], e4m3_to_f32(row[i]) * scale);
                assert_eq!(bf16::from_f32(y[i]).to_f32(), y[i]);
                // Within half a code step (2^-4 relative; subnormal codes 2^-10 · scale).
                assert!((x[i] - y[i]).abs() <= (x[i].abs() / 16.0).max(scale * 2f32.powi(-10)) * 1.0001, "{} -> {}", x[i], y[i]);
            }
            assert_eq!(&y[512..], &x[512..]);
        }
    }

    #[test]
    fn a_cache_takes_bf16_rows_of_576_and_holds_rows_of_656_bytes() {
        let shape = DecodeShape { kv_format: KvFormat::Fp8DsMla, ..DecodeShape::latent(2, 16, 1, 5) };
        let lens = [3u32, 5];
        let plain: Vec<f32> = (0..2 * 5).flat_map(latent_row).collect();
        let (data, scales) = quantize_cache(&shape, &lens, &plain).unwrap();
        assert!(scales.is_empty());
        assert_eq!(data.len(), 2 * 5 * 656);
        let back = dequantize_cache(&shape, &lens, &data, &[]).unwrap();
        assert_eq!(back.len(), 2 * 5 * 576);
        for (b, &len) in lens.iter().enumerate() {
            for t in 0..5usize {
                let (at, from) = ((b * 5 + t) * 656, (b * 5 + t) * 576);
                if t < len as usize {
                    let mut want = vec![0u8; 656];
                    quantize_ds_mla_row(&plain[from..from + 576], &mut want);
                    assert_eq!(&data[at..at + 656], &want[..], "row ({b}, {t})");
                    assert!(back[from..from + 576].iter().all(|v| v.is_finite()));
                } else {
                    assert!(data[at..at + 656].iter().all(|&x| x == 0) && back[from..from + 576].iter().all(|v| v.is_nan()), "row ({b}, {t}) past the length");
                }
            }
        }
    }
}
