//! Quantization error of every quantized KV format against the unquantized
//! (bf16) cache, on the CPU: relative L2 error of K, of V and of the
//! attention output O (f64 reference on both caches), for normal and for
//! heavy-tailed inputs with outlier channels. `cargo xtask quant-error`.

use decode_attn::quant::{dequantize_cache, quantize_cache};
use decode_attn::reference::{decode_attention_threads, relative_l2_error};
use decode_attn::testing::{problem_inputs, round_bf16, Distribution};
use decode_attn::{DecodeShape, KvFormat};

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
    for format in KvFormat::ALL.into_iter().filter(|f| f.is_quantized()) {
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
    Ok(())
}
