//! Design study for `docs/design/int8-integer-scores.md` (CPU only): how far
//! the attention output moves when Q is represented as the kernels could
//! feed the integer tensor cores — two int8 digits, `Q ≈ (128·h + l)·2^-e`
//! per row — against Q as the fp16 kernels see it today (each row scaled by
//! a power of two and rounded to fp16). Both against exact Q, f64 reference,
//! on an int8 cache (what the kernels read). `cargo run --release --example
//! q_digits_error`.

use decode_attn::quant::{dequantize_cache, quantize_cache};
use decode_attn::reference::{decode_attention_threads, relative_l2_error};
use decode_attn::testing::{problem_inputs, round_bf16, Distribution};
use decode_attn::{DecodeShape, KvFormat};
use half::f16;

/// Each `d`-long row of `q` rounded as `f`(row, row's max |x|) returns it.
fn per_row(q: &[f32], d: usize, f: impl Fn(f32, f32) -> f32) -> Vec<f32> {
    let mut out = Vec::with_capacity(q.len());
    for row in q.chunks(d) {
        let amax = row.iter().fold(0f32, |m, x| m.max(x.abs()));
        out.extend(row.iter().map(|&x| if amax > 0.0 { f(x, amax) } else { x }));
    }
    out
}

/// Today's conversion: ×2^(13 − ⌊log2 max⌋), rounded to fp16, scaled back.
fn as_fp16(x: f32, amax: f32) -> f32 {
    let e = 13 - amax.log2().floor() as i32;
    f16::from_f32(x * 2f32.powi(e)).to_f32() * 2f32.powi(-e)
}

/// Two int8 digits: the largest power of two 2^e with max·2^e ≤ 16 319
/// (= 127·128 + 63), Qi = round(x·2^e), h = round(Qi / 128), l = Qi − 128h.
fn as_digits(x: f32, amax: f32) -> f32 {
    let e = (16319f32 / amax).log2().floor() as i32;
    let qi = (x as f64 * 2f64.powi(e)).round();
    let h = (qi / 128.0).round().clamp(-127.0, 127.0);
    let l = qi - 128.0 * h;
    assert!((-128.0..=127.0).contains(&l), "digit out of range");
    ((128.0 * h + l) * 2f64.powi(-e)) as f32
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let lens = vec![4096u32; 4];
    println!("| inputs | softmax scale | Q as fp16 (today) | Q as two int8 digits |");
    println!("|---|---|---:|---:|");
    for (dist, scale) in [(Distribution::Normal, None), (Distribution::HeavyTailed, None), (Distribution::LargeMagnitude, Some(1.0))] {
        let plain = DecodeShape { scale, ..DecodeShape::bf16(4, 8, 1, 128, 1, 4096) };
        let shape = DecodeShape { kv_format: KvFormat::Int8, ..plain.clone() };
        let (q, k, v) = problem_inputs(&shape, &lens, dist, 7, threads)?;
        let (q, k, v) = (round_bf16(&q), round_bf16(&k), round_bf16(&v));
        let (kd, ks) = quantize_cache(&shape, &lens, &k)?;
        let (vd, vs) = quantize_cache(&shape, &lens, &v)?;
        let (k8, v8) = (dequantize_cache(&shape, &lens, &kd, &ks)?, dequantize_cache(&shape, &lens, &vd, &vs)?);
        let all: Vec<usize> = (0..plain.batch as usize).collect();
        let exact = decode_attention_threads(&plain, &lens, &q, &k8, &v8, &all, threads)?;
        let err = |q2: &[f32]| -> Result<f64, Box<dyn std::error::Error>> {
            let o: Vec<f32> = decode_attention_threads(&plain, &lens, q2, &k8, &v8, &all, threads)?.iter().map(|&x| x as f32).collect();
            Ok(relative_l2_error(&o, &exact)?.rel_l2)
        };
        let (e16, edig) = (err(&per_row(&q, 128, as_fp16))?, err(&per_row(&q, 128, as_digits))?);
        println!("| {dist:?} | {} | {e16:.2e} | {edig:.2e} |", scale.map_or("1/√D".to_string(), |s| s.to_string()));
    }
    Ok(())
}
