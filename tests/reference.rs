//! The f64 reference against a direct transcription of the formula.

use decode_attn::reference::{decode_attention, relative_l2_error};
use decode_attn::testing::{random_values, Distribution, Rng};
use decode_attn::{DecodeShape, KvLayout};

/// softmax(scale · q·k) · v over keys t < limit, written the naive way.
fn naive_row(q: &[f32], keys: &[Vec<f32>], values: &[Vec<f32>], scale: f64) -> Vec<f64> {
    let logits: Vec<f64> = keys.iter().map(|k| scale * q.iter().zip(k).map(|(&a, &b)| a as f64 * b as f64).sum::<f64>()).collect();
    let z: f64 = logits.iter().map(|&s| s.exp()).sum();
    (0..q.len()).map(|d| logits.iter().zip(values).map(|(&s, v)| s.exp() / z * v[d] as f64).sum()).collect()
}

#[test]
fn matches_naive_softmax_with_causal_gqa_and_ragged_lengths() {
    for layout in [KvLayout::Nhd, KvLayout::Hnd] {
        let mut shape = DecodeShape::bf16(2, 4, 2, 64, 3, 20);
        shape.kv_layout = layout;
        let lens = [20u32, 3];
        let mut rng = Rng::new(3);
        let q = random_values(&mut rng, shape.q_elems() as usize, 64, Distribution::Normal);
        let kv = shape.kv_elems_required().unwrap() as usize;
        let k = random_values(&mut rng, kv, 64, Distribution::HeavyTailed);
        let v = random_values(&mut rng, kv, 64, Distribution::Normal);
        let out = decode_attention(&shape, &lens, &q, &k, &v).unwrap();
        let st = shape.kv_strides();
        for b in 0..2usize {
            for i in 0..3usize {
                let visible = lens[b] as usize - 3 + 1 + i;
                for h in 0..4usize {
                    let row = |src: &[f32], t: usize| {
                        let at = (b as u64 * st.batch + t as u64 * st.token + (h / 2) as u64 * st.head) as usize;
                        src[at..at + 64].to_vec()
                    };
                    let keys: Vec<_> = (0..visible).map(|t| row(&k, t)).collect();
                    let values: Vec<_> = (0..visible).map(|t| row(&v, t)).collect();
                    let qrow = &q[((b * 3 + i) * 4 + h) * 64..][..64];
                    let expect = naive_row(qrow, &keys, &values, 1.0 / 8.0);
                    let got = &out[((b * 3 + i) * 4 + h) * 64..][..64];
                    for (x, y) in got.iter().zip(&expect) {
                        assert!((x - y).abs() < 1e-9 * (1.0 + y.abs()), "{layout:?} b{b} i{i} h{h}: {x} vs {y}");
                    }
                }
            }
        }
    }
}

#[test]
fn one_visible_key_returns_its_value() {
    let shape = DecodeShape::bf16(1, 1, 1, 64, 1, 4);
    let q = vec![1.0f32; 64];
    let k = vec![0.5f32; 4 * 64];
    let v: Vec<f32> = (0..4 * 64).map(|i| i as f32).collect();
    let out = decode_attention(&shape, &[1], &q, &k, &v).unwrap();
    assert!(out.iter().zip(&v[..64]).all(|(&o, &x)| (o - x as f64).abs() < 1e-12));
}

#[test]
fn relative_error_flags_nan_and_measures_l2() {
    let c = relative_l2_error(&[1.0, 2.0], &[1.0, 2.0]).unwrap();
    assert_eq!((c.rel_l2, c.nonfinite, c.compared), (0.0, false, 2));
    let c = relative_l2_error(&[1.0, 0.0], &[0.0, 1.0]).unwrap();
    assert!((c.rel_l2 - 2f64.sqrt()).abs() < 1e-12);
    let c = relative_l2_error(&[f32::NAN, 1.0], &[1.0, 1.0]).unwrap();
    assert!(c.nonfinite && !c.passes(1e-2));
    // A NaN in the reference is an error, never an element left out (it
    // would pass a wrong kernel on that row).
    assert!(relative_l2_error(&[5.0, 1.0], &[f64::NAN, 1.0]).is_err());
}

#[test]
fn parallel_reference_equals_the_serial_one() {
    let shape = DecodeShape::bf16(5, 4, 2, 64, 2, 50);
    let lens = [50u32, 2, 17, 33, 49];
    let mut rng = Rng::new(9);
    let q = random_values(&mut rng, shape.q_elems() as usize, 64, Distribution::Normal);
    let kv = shape.kv_elems_required().unwrap() as usize;
    let k = random_values(&mut rng, kv, 64, Distribution::Normal);
    let v = random_values(&mut rng, kv, 64, Distribution::Normal);
    let serial = decode_attention(&shape, &lens, &q, &k, &v).unwrap();
    let all: Vec<usize> = (0..5).collect();
    let par = decode_attn::reference::decode_attention_threads(&shape, &lens, &q, &k, &v, &all, 3).unwrap();
    assert!(serial.iter().zip(&par).all(|(a, b)| a.to_bits() == b.to_bits()));
}
