//! Shared-memory layouts the kernels rely on, checked on the CPU: the
//! quantized wgmma kernels' conversion jobs cover each step once and meet no
//! bank conflicts.

use decode_attn_abi::{wgmma_conversion_job, WGMMA_KEYS, WGMMA_M};
use std::collections::HashSet;

/// Byte offset of 16-byte chunk `c` of row `r` in a 16-bit `Swizzle128` tile
/// of `WGMMA_M` rows (the kernel's `format::Swizzle128`).
fn swizzle128(r: u32, c: u32) -> u32 {
    (c / 8) * WGMMA_M * 128 + r * 128 + (((c % 8) ^ (r % 8)) << 4)
}

/// The 16-byte bank group (of 8) a shared address falls in.
fn bank_group(addr: u32) -> u32 {
    (addr / 16) % 8
}

/// int8 (8 raw chunks of 16 dims per 128-byte row, two 16-bit chunks each)
/// and int4 (4 raw chunks of 32 dims per 64-byte row, four 16-bit chunks each).
const FORMATS: [(&str, u32, u32); 2] = [("int8", 8, 2), ("int4", 4, 4)];

#[test]
fn every_raw_chunk_of_a_step_is_converted_exactly_once() {
    for (name, chunks, _) in FORMATS {
        let jobs_per_thread = 2 * WGMMA_KEYS * chunks / 128;
        let mut seen = HashSet::new();
        for t in 0..128 {
            for i in 0..jobs_per_thread {
                let (v, r, c) = wgmma_conversion_job(t, i, chunks);
                assert!(r < WGMMA_KEYS && c < chunks, "{name}: thread {t} job {i} → row {r} chunk {c}");
                assert!(seen.insert((v, r, c)), "{name}: ({v}, {r}, {c}) converted twice");
            }
        }
        assert_eq!(seen.len() as u32, 2 * WGMMA_KEYS * chunks, "{name}");
    }
}

#[test]
fn a_quarter_warp_reads_and_writes_eight_different_bank_groups() {
    for (name, chunks, outs) in FORMATS {
        let row_bytes = 16 * chunks;
        for first_row in [0, WGMMA_KEYS] {
            for i in 0..2 * WGMMA_KEYS * chunks / 128 {
                for quarter in 0..16 {
                    let jobs: Vec<_> = (8 * quarter..8 * quarter + 8).map(|t| wgmma_conversion_job(t, i, chunks)).collect();
                    let reads: HashSet<u32> = jobs.iter().map(|&(_, r, c)| bank_group((first_row + r) * row_bytes + 16 * c)).collect();
                    assert_eq!(reads.len(), 8, "{name}: job {i}, quarter-warp {quarter} reads {jobs:?}");
                    for k in 0..outs {
                        let writes: HashSet<u32> = jobs.iter().map(|&(_, r, c)| bank_group(swizzle128(first_row + r, outs * c + k))).collect();
                        assert_eq!(writes.len(), 8, "{name}: job {i}, quarter-warp {quarter}, store {k}: {jobs:?}");
                    }
                }
            }
        }
    }
}
