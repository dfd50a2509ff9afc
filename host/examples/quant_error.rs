//! Quantization error of every quantized KV format against the unquantized
//! (bf16) cache, on the CPU: relative L2 error of K, of V and of the
//! attention output O (f64 reference on both caches), for normal and for
//! heavy-tailed inputs with outlier channels; then MLA's latent rows (576
//! values, V the first 512) in fp8 with a scale per token, every value
//! quantized (`Fp8PerHead`, the library's), against two ways that keep
//! the 64 RoPE values in bf16 (one scale over the 512 latent values; or
//! `fp8-ds-mla`, DeepSeek V3.2's 656-byte rows: a power-of-two scale per
//! 128). `cargo xtask quant-error`.

use decode_attn::quant::{dequantize_cache, dequantize_ds_mla_row, dequantize_fp8_row, quantize_cache, quantize_ds_mla_row, quantize_fp8_row, DS_MLA_ROW_BYTES};
use decode_attn::reference::{decode_attention_threads, latent_attention, relative_l2_error, LatentShape};
use decode_attn::testing::{problem_inputs, random_values, round_bf16, Distribution, Rng};
use decode_attn::{DecodeShape, KvFormat, MLA_DIMS};

fn rel_l2(a: &[f32], b: &[f32]) -> f64 {
    let (mut num, mut den) = (0f64, 0f64);
    for (&x, &y) in a.iter().zip(b) {
        if y.is_nan() {
            continue;
        }
        num += (x as f64 - y as f64).powi(2);
        den += (y as f64).powi(2);
    }
    (num / den).sqrt()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    // Grid A's head layout (8 query heads on 1 kv head), D = 128, 4 × 2048 tokens.
    let lens = vec![2048u32; 4];
    let plain = DecodeShape::bf16(4, 8, 1, 128, 1, 2048);
    println!("| format | inputs | ‖ΔK‖/‖K‖ | ‖ΔV‖/‖V‖ | ‖ΔO‖/‖O‖ |");
    println!("|---|---|---:|---:|---:|");
    // (fp8-ds-mla holds latent rows alone: below.)
    for format in KvFormat::ALL.into_iter().filter(|f| f.is_quantized() && !f.latent_only()) {
        let shape = DecodeShape { kv_format: format, ..plain.clone() };
        for dist in [Distribution::Normal, Distribution::HeavyTailed] {
            let (q, k, v) = problem_inputs(&shape, &lens, dist, 42, threads)?;
            let (q, k, v) = (round_bf16(&q), round_bf16(&k), round_bf16(&v));
            let (kd, ks) = quantize_cache(&shape, &lens, &k)?;
            let (vd, vs) = quantize_cache(&shape, &lens, &v)?;
            let (k8, v8) = (dequantize_cache(&shape, &lens, &kd, &ks)?, dequantize_cache(&shape, &lens, &vd, &vs)?);
            let all: Vec<usize> = (0..shape.batch as usize).collect();
            let o_ref = decode_attention_threads(&plain, &lens, &q, &k, &v, &all, threads)?;
            let o_q = decode_attention_threads(&plain, &lens, &q, &k8, &v8, &all, threads)?;
            let o_q32: Vec<f32> = o_q.iter().map(|&x| x as f32).collect();
            let o_err = relative_l2_error(&o_q32, &o_ref)?.rel_l2;
            let name = match dist {
                Distribution::Normal => "normal",
                _ => "heavy-tailed, outlier channels ×8",
            };
            println!("| {} | {name} | {:.2e} | {:.2e} | {:.2e} |", format.name(), rel_l2(&k8, &k), rel_l2(&v8, &v), o_err);
        }
    }
    latent_rows()
}

/// fp8 latent rows: the row (K: all 576 values; V: the first 512) and O
/// errors of three ways to quantize them, 16 query heads (DeepSeek V3 at
/// tensor-parallel 8), 2 × 2048 tokens, DeepSeek's scale 1/√192.
fn latent_rows() -> Result<(), Box<dyn std::error::Error>> {
    let (d, dv, hq, n) = (MLA_DIMS.qk as usize, MLA_DIMS.v as usize, 16u32, 2048u32);
    let shape = LatentShape { batch: 2, num_q_heads: hq, q_len: 1, max_seq_len: n, dims: MLA_DIMS, scale: 1.0 / 192f32.sqrt() };
    let lens = vec![n; 2];
    println!();
    println!("| latent rows (MLA, fp8 e4m3) | inputs | ‖ΔK‖/‖K‖ | ‖ΔV‖/‖V‖ | ‖ΔO‖/‖O‖ |");
    println!("|---|---|---:|---:|---:|");
    for dist in [Distribution::Normal, Distribution::HeavyTailed] {
        let mut rng = Rng::new(42);
        let q = round_bf16(&random_values(&mut rng, 2 * hq as usize * d, d, dist));
        let rows = round_bf16(&random_values(&mut rng, 2 * n as usize * d, d, dist));
        let o_ref = latent_attention(&shape, &lens, &q, &rows)?;
        // Each way quantizes a row's groups (ranges of values) with a scale
        // apiece (`amax / 448`) and keeps the rest bf16; or (no groups) as
        // the `fp8-ds-mla` format does, its CPU twin's rows.
        let ways: [(&str, &[(usize, usize)]); 3] = [
            ("one scale per token, RoPE quantized too (`fp8-per-head`)", &[(0, 576)]),
            ("one scale per token over the 512 latent values, RoPE bf16", &[(0, 512)]),
            ("`fp8-ds-mla`: a power-of-two scale per 128 latent values, RoPE bf16 (V3.2's 656-byte rows)", &[]),
        ];
        for (name, groups) in ways {
            let mut seen = rows.clone();
            for row in seen.chunks_mut(d) {
                if groups.is_empty() {
                    let mut bytes = vec![0u8; DS_MLA_ROW_BYTES];
                    quantize_ds_mla_row(row, &mut bytes);
                    dequantize_ds_mla_row(&bytes, row);
                }
                for &(a, b) in groups {
                    let mut codes = vec![0u8; b - a];
                    let s = quantize_fp8_row(&row[a..b], &mut codes);
                    dequantize_fp8_row(&codes, s, &mut row[a..b]);
                }
            }
            let o = latent_attention(&shape, &lens, &q, &seen)?;
            let o32: Vec<f32> = o.iter().map(|&x| x as f32).collect();
            let v = |x: &[f32]| x.chunks(d).flat_map(|r| r[..dv].to_vec()).collect::<Vec<f32>>();
            let inputs = if matches!(dist, Distribution::Normal) { "normal" } else { "heavy-tailed, outlier channels ×8" };
            println!("| {name} | {inputs} | {:.2e} | {:.2e} | {:.2e} |", rel_l2(&seen, &rows), rel_l2(&v(&seen), &v(&rows)), relative_l2_error(&o32, &o_ref)?.rel_l2);
        }
    }
    Ok(())
}
