//! The f64 reference against a direct transcription of the formula.

use decode_attn::reference::{decode_attention, relative_l2_error};
use decode_attn::testing::{random_values, Distribution, Rng};
use decode_attn::{DecodeShape, VariantSpec, KvLayout};

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

/// The reference of a draft tree (speculative decoding): a chain (token i
/// sees tokens 0..=i at positions
/// len − q_len + i) is the causal step bit for bit, with and without a
/// window and ALiBi; a token of a tree attends to the prefix and to the
/// new tokens its mask names and no others (changing another's K and V
/// leaves its row unchanged, changing one it sees changes it); masks
/// without a token's own bit or with a later token's, and positions
/// outside the prefix length plus the token's index, are errors naming the
/// entry.
#[test]
fn a_draft_tree_sees_the_prefix_and_its_ancestors_and_a_chain_is_the_causal_step() {
    use decode_attn::reference::{decode_attention_with, HeadInputs, TreeInputs};
    let ql = 4usize;
    let lens = [40u32, 9];
    let chain_masks: Vec<u8> = (0..2).flat_map(|_| (0..ql).map(|i| ((1u16 << (i + 1)) - 1) as u8)).collect();
    let chain_pos: Vec<u32> = lens.iter().flat_map(|&l| (0..ql as u32).map(move |i| l - ql as u32 + i)).collect();
    let slopes = [0.25f32, 0.5, 0.125, 1.0];
    for (window, alibi) in [(None, false), (Some(5), false), (None, true), (Some(2), true)] {
        let shape = DecodeShape { variant: VariantSpec { window, alibi, ..VariantSpec::STANDARD }, ..DecodeShape::bf16(2, 4, 2, 64, ql as u32, 40) };
        let mut rng = Rng::new(17);
        let q = random_values(&mut rng, shape.q_elems() as usize, 64, Distribution::Normal);
        let kv = shape.kv_elems_required().unwrap() as usize;
        let k = random_values(&mut rng, kv, 64, Distribution::HeavyTailed);
        let v = random_values(&mut rng, kv, 64, Distribution::Normal);
        let heads = HeadInputs { alibi_slopes: alibi.then_some(&slopes[..]), ..Default::default() };
        let run = |tree: Option<TreeInputs>, k: &[f32], v: &[f32]| decode_attention_with(&shape, &lens, &q, k, v, &HeadInputs { tree, ..heads }, &[0, 1], 1).unwrap();
        let causal = run(None, &k, &v);
        assert_eq!(run(Some(TreeInputs { masks: &chain_masks, positions: &chain_pos }), &k, &v), causal, "a chain is the causal step (window {window:?}, alibi {alibi})");
        // A tree of root 0 with children 1 and 2, and 3 under 1: depths 0, 1, 1, 2.
        let tree_masks: Vec<u8> = (0..2).flat_map(|_| [0b0001u8, 0b0011, 0b0101, 0b1011]).collect();
        let tree_pos: Vec<u32> = lens.iter().flat_map(|&l| [0u32, 1, 1, 2].map(|depth| l - ql as u32 + depth)).collect();
        let tree = TreeInputs { masks: &tree_masks, positions: &tree_pos };
        let base = run(Some(tree), &k, &v);
        let d = 64usize;
        let st = shape.kv_strides();
        // Token 2 does not see token 1 (its sibling) or 3: their rows may change.
        let (b, hkv) = (0usize, 0usize);
        let mut k2 = k.clone();
        let mut v2 = v.clone();
        for j in [1usize, 3] {
            let at = (b as u64 * st.batch + (lens[b] as u64 - ql as u64 + j as u64) * st.token + hkv as u64 * st.head) as usize;
            k2[at..at + d].iter_mut().for_each(|x| *x += 3.0);
            v2[at..at + d].iter_mut().for_each(|x| *x -= 2.0);
        }
        let changed = run(Some(tree), &k2, &v2);
        let row = |out: &[f64], i: usize, h: usize| out[((b * ql + i) * 4 + h) * d..][..d].to_vec();
        for h in 0..2 {
            // Query heads 0 and 1 read kv head 0.
            assert_eq!(row(&changed, 2, h), row(&base, 2, h), "token 2 sees neither its sibling nor 3");
            assert_eq!(row(&changed, 0, h), row(&base, 0, h), "the root sees no new token but itself");
            assert_ne!(row(&changed, 1, h), row(&base, 1, h), "token 1 sees itself");
            assert_ne!(row(&changed, 3, h), row(&base, 3, h), "token 3 sees its parent 1");
        }
        // Errors: a mask without the token's own bit; a position past the sequence.
        let mut bad = tree_masks.clone();
        bad[5] = 0b0001;
        let e = decode_attention_with(&shape, &lens, &q, &k, &v, &HeadInputs { tree: Some(TreeInputs { masks: &bad, positions: &tree_pos }), ..heads }, &[0, 1], 1).unwrap_err().to_string();
        assert!(e.contains("tree_masks[5]") && e.contains("bit 1 set"), "{e}");
        let mut far = tree_pos.clone();
        far[6] = lens[1];
        let e = decode_attention_with(&shape, &lens, &q, &k, &v, &HeadInputs { tree: Some(TreeInputs { masks: &tree_masks, positions: &far }), ..heads }, &[0, 1], 1).unwrap_err().to_string();
        assert!(e.contains("tree_positions[6]"), "{e}");
        let mut later = tree_masks.clone();
        later[1] = 0b0111;
        let e = decode_attention_with(&shape, &lens, &q, &k, &v, &HeadInputs { tree: Some(TreeInputs { masks: &later, positions: &tree_pos }), ..heads }, &[0, 1], 1).unwrap_err().to_string();
        assert!(e.contains("tree_masks[1]") && e.contains("no bit above 1"), "{e}");
        let mut deep = tree_pos.clone();
        deep[5] = lens[1] - ql as u32 + 2;
        let e = decode_attention_with(&shape, &lens, &q, &k, &v, &HeadInputs { tree: Some(TreeInputs { masks: &tree_masks, positions: &deep }), ..heads }, &[0, 1], 1).unwrap_err().to_string();
        assert!(e.contains("tree_positions[5]") && e.contains("depth of at most 1"), "{e}");
    }
}

/// MLA's absorbed form (`docs/design/mla.md`): V is the first `dims.v`
/// values of each latent row. With V's other values zero, the generic
/// reference over the same rows as K and V gives the same first `dims.v`
/// outputs (and zeros after them), for MQA, ragged lengths and several new
/// tokens.
#[test]
fn latent_attention_reads_v_as_the_first_values_of_each_row() {
    use decode_attn::reference::{latent_attention, LatentShape};
    use decode_attn_abi::HeadDims;
    let (dq, dv) = (128usize, 64usize);
    let shape = DecodeShape::bf16(2, 4, 1, dq as u32, 3, 40);
    let lens = [40u32, 5];
    let mut rng = Rng::new(11);
    let q = random_values(&mut rng, shape.q_elems() as usize, dq, Distribution::Normal);
    let rows = random_values(&mut rng, shape.kv_elems_required().unwrap() as usize, dq, Distribution::HeavyTailed);
    let v: Vec<f32> = rows.chunks(dq).flat_map(|r| r[..dv].iter().copied().chain(std::iter::repeat_n(0.0, dq - dv))).collect();
    let generic = decode_attention(&shape, &lens, &q, &rows, &v).unwrap();
    let latent = LatentShape { batch: 2, num_q_heads: 4, q_len: 3, max_seq_len: 40, dims: HeadDims { qk: dq as u32, v: dv as u32 }, scale: shape.softmax_scale() };
    let out = latent_attention(&latent, &lens, &q, &rows).unwrap();
    assert_eq!(out.len(), 2 * 3 * 4 * dv);
    for (o, g) in out.chunks(dv).zip(generic.chunks(dq)) {
        for (a, b) in o.iter().zip(&g[..dv]) {
            assert!((a - b).abs() <= 1e-12 * b.abs().max(1.0), "{a} vs {b}");
        }
        assert!(g[dv..].iter().all(|&x| x == 0.0));
    }
}

/// Every bad latent problem is an error naming what is wrong.
#[test]
fn latent_attention_names_what_is_wrong() {
    use decode_attn::reference::{latent_attention, LatentShape};
    use decode_attn_abi::HeadDims;
    let ok = LatentShape { batch: 1, num_q_heads: 2, q_len: 2, max_seq_len: 4, dims: HeadDims { qk: 8, v: 4 }, scale: 0.5 };
    let (q, rows) = (vec![0.5f32; 2 * 2 * 8], vec![0.25f32; 4 * 8]);
    latent_attention(&ok, &[4], &q, &rows).unwrap();
    let fails = |s: &LatentShape, lens: &[u32], q: &[f32], rows: &[f32], param: &str| {
        let e = latent_attention(s, lens, q, rows).unwrap_err().to_string();
        assert!(e.starts_with(&format!("invalid `{param}`")), "{param}: {e}");
    };
    fails(&LatentShape { dims: HeadDims { qk: 8, v: 9 }, ..ok }, &[4], &q, &rows, "dims.v");
    fails(&LatentShape { q_len: 9, ..ok }, &[4], &q, &rows, "q_len");
    fails(&LatentShape { scale: f32::NAN, ..ok }, &[4], &q, &rows, "scale");
    fails(&ok, &[1], &q, &rows, "seq_lens[0]");
    fails(&ok, &[5], &q, &rows, "seq_lens[0]");
    fails(&ok, &[4, 4], &q, &rows, "seq_lens");
    fails(&ok, &[4], &q[1..], &rows, "q");
    fails(&ok, &[4], &q, &rows[1..], "rows");
    let mut nan = rows.clone();
    nan[3] = f32::NAN;
    fails(&ok, &[4], &q, &nan, "reference row (sequence 0, new token 0, query head 0)");
}

/// DeepSeek V3's dims (576 / 512, scale 1/√192) against the formula written
/// the naive way, one query head at a time.
#[test]
fn latent_attention_matches_the_formula_at_deepseek_dims() {
    use decode_attn::reference::{latent_attention, LatentShape};
    use decode_attn_abi::HeadDims;
    let (dq, dv, cap) = (576usize, 512usize, 33usize);
    let s = LatentShape { batch: 2, num_q_heads: 3, q_len: 2, max_seq_len: cap as u32, dims: HeadDims { qk: dq as u32, v: dv as u32 }, scale: 1.0 / 192f32.sqrt() };
    let lens = [33u32, 2];
    let mut rng = Rng::new(29);
    let q = random_values(&mut rng, 2 * 2 * 3 * dq, dq, Distribution::Normal);
    let rows = random_values(&mut rng, 2 * cap * dq, dq, Distribution::HeavyTailed);
    let out = latent_attention(&s, &lens, &q, &rows).unwrap();
    for b in 0..2usize {
        for i in 0..2usize {
            let visible = lens[b] as usize - 2 + i + 1;
            let keys: Vec<&[f32]> = rows[b * cap * dq..].chunks(dq).take(visible).collect();
            for h in 0..3usize {
                let at = (b * 2 + i) * 3 + h;
                let qrow = &q[at * dq..][..dq];
                let logits: Vec<f64> = keys.iter().map(|k| s.scale as f64 * qrow.iter().zip(k.iter()).map(|(&a, &x)| a as f64 * x as f64).sum::<f64>()).collect();
                let m = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let z: f64 = logits.iter().map(|&l| (l - m).exp()).sum();
                for d in 0..dv {
                    let want: f64 = logits.iter().zip(&keys).map(|(&l, k)| (l - m).exp() / z * k[d] as f64).sum();
                    let got = out[at * dv + d];
                    assert!((got - want).abs() <= 1e-10 * want.abs().max(1.0), "b {b} i {i} h {h} d {d}: {got} vs {want}");
                }
            }
        }
    }
}
