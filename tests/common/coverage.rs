//! Work-list coverage checks shared by the planner tests (CPU only).

use decode_attn_abi::DIRECT_OUTPUT;

/// Every sequence's keys [first, len) are covered by its work items exactly
/// once — first = 0, or under a window its first new token's first key
/// aligned down to `Plan::window_align` (no earlier key is read) — and
/// split sequences own exactly the partial slots their merge item names;
/// cluster plans as [`assert_covers_in_clusters`].
pub fn assert_covers(p: &decode_attn::Plan) {
    if p.cluster() > 1 {
        return assert_covers_in_clusters(p);
    }
    let mut slots_seen = vec![false; p.num_slots() as usize];
    let mut by_seq: Vec<Vec<_>> = vec![Vec::new(); p.seq_lens().len()];
    for w in p.work() {
        by_seq[w.batch as usize].push(*w);
    }
    for (b, items) in by_seq.iter_mut().enumerate() {
        items.sort_by_key(|w| w.kv_start);
        let len = p.seq_lens()[b];
        let s = p.shape();
        let visible = s.variant.window.map_or(0, |w| (len - s.q_len).saturating_sub(w));
        let first = p.first_key(b);
        assert!(first <= visible && visible - first < p.window_align(), "sequence {b}'s work starts at {first}, its window at {visible}");
        let mut next = first;
        for w in items.iter() {
            assert_eq!(w.kv_start, next, "gap or overlap in sequence {b}");
            assert!(w.kv_end > w.kv_start, "empty chunk in sequence {b}");
            next = w.kv_end;
        }
        assert_eq!(next, p.seq_lens()[b], "sequence {b} not covered to its length");
        let merge = p.merges().iter().find(|m| m.batch == b as u32);
        if items.len() == 1 {
            assert_eq!(items[0].partial_slot, DIRECT_OUTPUT);
            assert!(merge.is_none());
        } else {
            let m = merge.expect("split sequence without a merge item");
            assert_eq!(m.num_slots as usize, items.len());
            for w in items.iter() {
                assert!((m.first_slot..m.first_slot + m.num_slots).contains(&w.partial_slot));
                assert!(!std::mem::replace(&mut slots_seen[w.partial_slot as usize], true), "slot used twice");
            }
        }
    }
    assert!(slots_seen.iter().all(|&s| s), "unused partial slot");
}

/// A cluster plan: no global partials; each sequence has one item per
/// cluster rank, consecutive, chunk c at rank c, chunks past its end empty
/// (at its end); the kernels' grid-x mapping reaches every (item, kv head)
/// once, a cluster's ranks one sequence's chunks.
pub fn assert_covers_in_clusters(p: &decode_attn::Plan) {
    let c = p.cluster() as usize;
    assert!((2..=8).contains(&c) && c.is_power_of_two(), "cluster of {c} blocks");
    assert_eq!(p.num_slots(), 0, "a cluster merge has no global partials");
    assert!(p.merges().is_empty());
    assert_eq!(p.work().len(), c * p.seq_lens().len());
    let mut seen = vec![false; p.seq_lens().len()];
    for group in p.work().chunks(c) {
        let b = group[0].batch as usize;
        assert!(!std::mem::replace(&mut seen[b], true), "sequence {b} in two clusters");
        let len = p.seq_lens()[b];
        let chunks = len.div_ceil(p.chunk_keys()) as usize;
        assert!(chunks <= c);
        let mut next = 0u32;
        for (rank, w) in group.iter().enumerate() {
            assert_eq!(w.batch as usize, b, "a cluster spans two sequences");
            assert_eq!(w.kv_start, next, "gap or overlap in sequence {b}");
            if rank < chunks {
                assert!(w.kv_end > w.kv_start, "empty chunk {rank} of {chunks} in sequence {b}");
                assert_eq!(w.partial_slot, if chunks == 1 { DIRECT_OUTPUT } else { rank as u32 });
            } else {
                assert_eq!(w.kv_end, w.kv_start, "chunk {rank} past the end of sequence {b} is not empty");
            }
            next = w.kv_end;
        }
        assert_eq!(next, len, "sequence {b} not covered to its length");
    }
    let heads = p.shape().num_kv_heads;
    let (gx, _, _) = p.grid();
    let mut reached = vec![false; p.work().len() * heads as usize];
    for x in 0..gx {
        let log2 = c.trailing_zeros();
        let (item, kvh) = (decode_attn_abi::decode_block_item(x, heads, log2), decode_attn_abi::decode_block_kv_head(x, heads, log2));
        assert_eq!(item as usize / c, (x / c as u32 / heads) as usize, "block {x} outside its cluster's sequence");
        assert_eq!(item as usize % c, x as usize % c, "block {x} is not its chunk's rank");
        assert!(!std::mem::replace(&mut reached[item as usize * heads as usize + kvh as usize], true), "(item, head) reached twice");
    }
    assert!(reached.iter().all(|&r| r));
}
