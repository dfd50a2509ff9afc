//! The kernel tables (`decode_attn_abi::DECODE_KERNELS`, `MERGE_KERNELS`,
//! `QUANT_KERNELS`) indexed by kernel id, built once a process: a plan
//! holds the indices of its kernels, and a launch reads its function at
//! that index of the loaded module, with no search.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::OnceLock;

use decode_attn_abi::{KernelId, MergeKernelId, QuantKernelId, DECODE_KERNELS, MERGE_KERNELS, QUANT_KERNELS};

fn index<K: Copy + Eq + Hash>(cell: &'static OnceLock<HashMap<K, usize>>, ids: impl Iterator<Item = K>, id: &K) -> Option<usize> {
    cell.get_or_init(|| ids.enumerate().map(|(i, k)| (k, i)).collect()).get(id).copied()
}

/// The attention kernel `id`'s index in `DECODE_KERNELS`, `None` when the
/// set has no such kernel ([`KernelId::exists`]).
pub(crate) fn decode_index(id: &KernelId) -> Option<usize> {
    static CELL: OnceLock<HashMap<KernelId, usize>> = OnceLock::new();
    index(&CELL, DECODE_KERNELS.iter().map(|k| k.id), id)
}

/// The split-merge kernel `id`'s index in `MERGE_KERNELS`.
pub(crate) fn merge_index(id: &MergeKernelId) -> Option<usize> {
    static CELL: OnceLock<HashMap<MergeKernelId, usize>> = OnceLock::new();
    index(&CELL, MERGE_KERNELS.iter().map(|k| k.id), id)
}

/// The cache kernel `id`'s index in `QUANT_KERNELS`.
pub(crate) fn quant_index(id: &QuantKernelId) -> Option<usize> {
    static CELL: OnceLock<HashMap<QuantKernelId, usize>> = OnceLock::new();
    index(&CELL, QUANT_KERNELS.iter().map(|k| k.id), id)
}
