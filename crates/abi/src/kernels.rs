//! The one table of kernel identities. Each entry point exists once here;
//! `kernels-gpu` expands the tables into its `extern "ptx-kernel"` functions
//! and this crate expands them into the name look-ups the host uses, so a
//! kernel cannot be named on one side and missing on the other.
//!
//! A table macro takes the name of a macro and calls it with every entry:
//! `decode_kernel_table!(m)` calls `m! { name => (KvFormat, Dtype, head_dim, Family, Addressing, Merge[, Specialized | Capacity]); ... }`.

use crate::{Addressing, Dtype, KvFormat, Family};

/// Attention kernels: `name => (KvFormat family, Q/O Dtype family, head_dim, Family, Addressing, Merge[, Specialized | Capacity | HeadPair])`
/// (the last marker: [`KernelForm`]);
/// every (format, dtype, head_dim) has the families that serve it
/// (`Family::serves`), both addressings and both merges: `Global` kernels merge split sequences through global
/// memory, `Cluster` ones (`decode_cluster_*`) in a thread-block cluster.
/// Where the wgmma kernels can be warp-specialised
/// (`wgmma_specializable`: strided quantized caches) both forms exist; the
/// `Specialized` ones are `decode_*wgmma_ws_*`.
/// The strided wide kernels of 16-bit caches at head dims 64 and 128 have
/// a `Capacity` twin (`decode_capacity_*`), launched for capacity plans of
/// device lengths (CUDA-graph steps): its blocks of a sequence's first
/// chunk issue their first copies before their length arrives. The same
/// code in the planned launches' kernels slowed them (docs/perf.md,
/// twentieth session).
/// The cluster code is compiled only into the `Cluster` kernels: in the
/// others, at their register caps, it moved ptxas to re-read special
/// registers in the stage loop (narrow int4-g32: 2 % slower, docs/perf.md).
/// The narrow int8 kernels at head dim 128 have a `HeadPair` form
/// (`decode_narrow_pair_*`, `decode_paged_narrow_pair_*`): blocks of two
/// adjacent kv heads, for token-major caches and pools
/// (docs/design/nhd-head-groups.md).
#[macro_export]
macro_rules! decode_kernel_table {
    ($m:ident) => {
        $m! {
            decode_kv_bf16_q_bf16_d64 => (Bf16, Bf16, 64, Wide, Strided, Global);
            decode_narrow_kv_bf16_q_bf16_d64 => (Bf16, Bf16, 64, Narrow, Strided, Global);
            decode_kv_bf16_q_bf16_d128 => (Bf16, Bf16, 128, Wide, Strided, Global);
            decode_narrow_kv_bf16_q_bf16_d128 => (Bf16, Bf16, 128, Narrow, Strided, Global);
            decode_kv_bf16_q_bf16_d256 => (Bf16, Bf16, 256, Wide, Strided, Global);
            decode_narrow_kv_bf16_q_bf16_d256 => (Bf16, Bf16, 256, Narrow, Strided, Global);
            decode_kv_f16_q_f16_d64 => (F16, F16, 64, Wide, Strided, Global);
            decode_narrow_kv_f16_q_f16_d64 => (F16, F16, 64, Narrow, Strided, Global);
            decode_kv_f16_q_f16_d128 => (F16, F16, 128, Wide, Strided, Global);
            decode_narrow_kv_f16_q_f16_d128 => (F16, F16, 128, Narrow, Strided, Global);
            decode_kv_f16_q_f16_d256 => (F16, F16, 256, Wide, Strided, Global);
            decode_narrow_kv_f16_q_f16_d256 => (F16, F16, 256, Narrow, Strided, Global);
            decode_capacity_kv_bf16_q_bf16_d64 => (Bf16, Bf16, 64, Wide, Strided, Global, Capacity);
            decode_capacity_kv_bf16_q_bf16_d128 => (Bf16, Bf16, 128, Wide, Strided, Global, Capacity);
            decode_capacity_kv_f16_q_f16_d64 => (F16, F16, 64, Wide, Strided, Global, Capacity);
            decode_capacity_kv_f16_q_f16_d128 => (F16, F16, 128, Wide, Strided, Global, Capacity);
            decode_kv_int8_q_bf16_d64 => (Int8, Bf16, 64, Wide, Strided, Global);
            decode_narrow_kv_int8_q_bf16_d64 => (Int8, Bf16, 64, Narrow, Strided, Global);
            decode_kv_int8_q_bf16_d128 => (Int8, Bf16, 128, Wide, Strided, Global);
            decode_narrow_kv_int8_q_bf16_d128 => (Int8, Bf16, 128, Narrow, Strided, Global);
            decode_narrow_pair_kv_int8_q_bf16_d128 => (Int8, Bf16, 128, Narrow, Strided, Global, HeadPair);
            decode_kv_int8_q_bf16_d256 => (Int8, Bf16, 256, Wide, Strided, Global);
            decode_narrow_kv_int8_q_bf16_d256 => (Int8, Bf16, 256, Narrow, Strided, Global);
            decode_kv_int8_q_f16_d64 => (Int8, F16, 64, Wide, Strided, Global);
            decode_narrow_kv_int8_q_f16_d64 => (Int8, F16, 64, Narrow, Strided, Global);
            decode_kv_int8_q_f16_d128 => (Int8, F16, 128, Wide, Strided, Global);
            decode_narrow_kv_int8_q_f16_d128 => (Int8, F16, 128, Narrow, Strided, Global);
            decode_narrow_pair_kv_int8_q_f16_d128 => (Int8, F16, 128, Narrow, Strided, Global, HeadPair);
            decode_kv_int8_q_f16_d256 => (Int8, F16, 256, Wide, Strided, Global);
            decode_narrow_kv_int8_q_f16_d256 => (Int8, F16, 256, Narrow, Strided, Global);
            decode_kv_int4g32_q_bf16_d64 => (Int4G32, Bf16, 64, Wide, Strided, Global);
            decode_narrow_kv_int4g32_q_bf16_d64 => (Int4G32, Bf16, 64, Narrow, Strided, Global);
            decode_kv_int4g32_q_bf16_d128 => (Int4G32, Bf16, 128, Wide, Strided, Global);
            decode_narrow_kv_int4g32_q_bf16_d128 => (Int4G32, Bf16, 128, Narrow, Strided, Global);
            decode_kv_int4g32_q_bf16_d256 => (Int4G32, Bf16, 256, Wide, Strided, Global);
            decode_narrow_kv_int4g32_q_bf16_d256 => (Int4G32, Bf16, 256, Narrow, Strided, Global);
            decode_kv_int4g32_q_f16_d64 => (Int4G32, F16, 64, Wide, Strided, Global);
            decode_narrow_kv_int4g32_q_f16_d64 => (Int4G32, F16, 64, Narrow, Strided, Global);
            decode_kv_int4g32_q_f16_d128 => (Int4G32, F16, 128, Wide, Strided, Global);
            decode_narrow_kv_int4g32_q_f16_d128 => (Int4G32, F16, 128, Narrow, Strided, Global);
            decode_kv_int4g32_q_f16_d256 => (Int4G32, F16, 256, Wide, Strided, Global);
            decode_narrow_kv_int4g32_q_f16_d256 => (Int4G32, F16, 256, Narrow, Strided, Global);
            decode_kv_int4g64_q_bf16_d64 => (Int4G64, Bf16, 64, Wide, Strided, Global);
            decode_narrow_kv_int4g64_q_bf16_d64 => (Int4G64, Bf16, 64, Narrow, Strided, Global);
            decode_kv_int4g64_q_bf16_d128 => (Int4G64, Bf16, 128, Wide, Strided, Global);
            decode_narrow_kv_int4g64_q_bf16_d128 => (Int4G64, Bf16, 128, Narrow, Strided, Global);
            decode_kv_int4g64_q_bf16_d256 => (Int4G64, Bf16, 256, Wide, Strided, Global);
            decode_narrow_kv_int4g64_q_bf16_d256 => (Int4G64, Bf16, 256, Narrow, Strided, Global);
            decode_kv_int4g64_q_f16_d64 => (Int4G64, F16, 64, Wide, Strided, Global);
            decode_narrow_kv_int4g64_q_f16_d64 => (Int4G64, F16, 64, Narrow, Strided, Global);
            decode_kv_int4g64_q_f16_d128 => (Int4G64, F16, 128, Wide, Strided, Global);
            decode_narrow_kv_int4g64_q_f16_d128 => (Int4G64, F16, 128, Narrow, Strided, Global);
            decode_kv_int4g64_q_f16_d256 => (Int4G64, F16, 256, Wide, Strided, Global);
            decode_narrow_kv_int4g64_q_f16_d256 => (Int4G64, F16, 256, Narrow, Strided, Global);
            decode_kv_int4g128_q_bf16_d128 => (Int4G128, Bf16, 128, Wide, Strided, Global);
            decode_narrow_kv_int4g128_q_bf16_d128 => (Int4G128, Bf16, 128, Narrow, Strided, Global);
            decode_kv_int4g128_q_bf16_d256 => (Int4G128, Bf16, 256, Wide, Strided, Global);
            decode_narrow_kv_int4g128_q_bf16_d256 => (Int4G128, Bf16, 256, Narrow, Strided, Global);
            decode_kv_int4g128_q_f16_d128 => (Int4G128, F16, 128, Wide, Strided, Global);
            decode_narrow_kv_int4g128_q_f16_d128 => (Int4G128, F16, 128, Narrow, Strided, Global);
            decode_kv_int4g128_q_f16_d256 => (Int4G128, F16, 256, Wide, Strided, Global);
            decode_narrow_kv_int4g128_q_f16_d256 => (Int4G128, F16, 256, Narrow, Strided, Global);
            decode_paged_kv_bf16_q_bf16_d64 => (Bf16, Bf16, 64, Wide, Paged, Global);
            decode_paged_narrow_kv_bf16_q_bf16_d64 => (Bf16, Bf16, 64, Narrow, Paged, Global);
            decode_paged_kv_bf16_q_bf16_d128 => (Bf16, Bf16, 128, Wide, Paged, Global);
            decode_paged_narrow_kv_bf16_q_bf16_d128 => (Bf16, Bf16, 128, Narrow, Paged, Global);
            decode_paged_kv_bf16_q_bf16_d256 => (Bf16, Bf16, 256, Wide, Paged, Global);
            decode_paged_narrow_kv_bf16_q_bf16_d256 => (Bf16, Bf16, 256, Narrow, Paged, Global);
            decode_paged_kv_f16_q_f16_d64 => (F16, F16, 64, Wide, Paged, Global);
            decode_paged_narrow_kv_f16_q_f16_d64 => (F16, F16, 64, Narrow, Paged, Global);
            decode_paged_kv_f16_q_f16_d128 => (F16, F16, 128, Wide, Paged, Global);
            decode_paged_narrow_kv_f16_q_f16_d128 => (F16, F16, 128, Narrow, Paged, Global);
            decode_paged_kv_f16_q_f16_d256 => (F16, F16, 256, Wide, Paged, Global);
            decode_paged_narrow_kv_f16_q_f16_d256 => (F16, F16, 256, Narrow, Paged, Global);
            decode_paged_kv_int8_q_bf16_d64 => (Int8, Bf16, 64, Wide, Paged, Global);
            decode_paged_narrow_kv_int8_q_bf16_d64 => (Int8, Bf16, 64, Narrow, Paged, Global);
            decode_paged_kv_int8_q_bf16_d128 => (Int8, Bf16, 128, Wide, Paged, Global);
            decode_paged_narrow_kv_int8_q_bf16_d128 => (Int8, Bf16, 128, Narrow, Paged, Global);
            decode_paged_narrow_pair_kv_int8_q_bf16_d128 => (Int8, Bf16, 128, Narrow, Paged, Global, HeadPair);
            decode_paged_kv_int8_q_bf16_d256 => (Int8, Bf16, 256, Wide, Paged, Global);
            decode_paged_narrow_kv_int8_q_bf16_d256 => (Int8, Bf16, 256, Narrow, Paged, Global);
            decode_paged_kv_int8_q_f16_d64 => (Int8, F16, 64, Wide, Paged, Global);
            decode_paged_narrow_kv_int8_q_f16_d64 => (Int8, F16, 64, Narrow, Paged, Global);
            decode_paged_kv_int8_q_f16_d128 => (Int8, F16, 128, Wide, Paged, Global);
            decode_paged_narrow_kv_int8_q_f16_d128 => (Int8, F16, 128, Narrow, Paged, Global);
            decode_paged_narrow_pair_kv_int8_q_f16_d128 => (Int8, F16, 128, Narrow, Paged, Global, HeadPair);
            decode_paged_kv_int8_q_f16_d256 => (Int8, F16, 256, Wide, Paged, Global);
            decode_paged_narrow_kv_int8_q_f16_d256 => (Int8, F16, 256, Narrow, Paged, Global);
            decode_paged_kv_int4g32_q_bf16_d64 => (Int4G32, Bf16, 64, Wide, Paged, Global);
            decode_paged_narrow_kv_int4g32_q_bf16_d64 => (Int4G32, Bf16, 64, Narrow, Paged, Global);
            decode_paged_kv_int4g32_q_bf16_d128 => (Int4G32, Bf16, 128, Wide, Paged, Global);
            decode_paged_narrow_kv_int4g32_q_bf16_d128 => (Int4G32, Bf16, 128, Narrow, Paged, Global);
            decode_paged_kv_int4g32_q_bf16_d256 => (Int4G32, Bf16, 256, Wide, Paged, Global);
            decode_paged_narrow_kv_int4g32_q_bf16_d256 => (Int4G32, Bf16, 256, Narrow, Paged, Global);
            decode_paged_kv_int4g32_q_f16_d64 => (Int4G32, F16, 64, Wide, Paged, Global);
            decode_paged_narrow_kv_int4g32_q_f16_d64 => (Int4G32, F16, 64, Narrow, Paged, Global);
            decode_paged_kv_int4g32_q_f16_d128 => (Int4G32, F16, 128, Wide, Paged, Global);
            decode_paged_narrow_kv_int4g32_q_f16_d128 => (Int4G32, F16, 128, Narrow, Paged, Global);
            decode_paged_kv_int4g32_q_f16_d256 => (Int4G32, F16, 256, Wide, Paged, Global);
            decode_paged_narrow_kv_int4g32_q_f16_d256 => (Int4G32, F16, 256, Narrow, Paged, Global);
            decode_paged_kv_int4g64_q_bf16_d64 => (Int4G64, Bf16, 64, Wide, Paged, Global);
            decode_paged_narrow_kv_int4g64_q_bf16_d64 => (Int4G64, Bf16, 64, Narrow, Paged, Global);
            decode_paged_kv_int4g64_q_bf16_d128 => (Int4G64, Bf16, 128, Wide, Paged, Global);
            decode_paged_narrow_kv_int4g64_q_bf16_d128 => (Int4G64, Bf16, 128, Narrow, Paged, Global);
            decode_paged_kv_int4g64_q_bf16_d256 => (Int4G64, Bf16, 256, Wide, Paged, Global);
            decode_paged_narrow_kv_int4g64_q_bf16_d256 => (Int4G64, Bf16, 256, Narrow, Paged, Global);
            decode_paged_kv_int4g64_q_f16_d64 => (Int4G64, F16, 64, Wide, Paged, Global);
            decode_paged_narrow_kv_int4g64_q_f16_d64 => (Int4G64, F16, 64, Narrow, Paged, Global);
            decode_paged_kv_int4g64_q_f16_d128 => (Int4G64, F16, 128, Wide, Paged, Global);
            decode_paged_narrow_kv_int4g64_q_f16_d128 => (Int4G64, F16, 128, Narrow, Paged, Global);
            decode_paged_kv_int4g64_q_f16_d256 => (Int4G64, F16, 256, Wide, Paged, Global);
            decode_paged_narrow_kv_int4g64_q_f16_d256 => (Int4G64, F16, 256, Narrow, Paged, Global);
            decode_paged_kv_int4g128_q_bf16_d128 => (Int4G128, Bf16, 128, Wide, Paged, Global);
            decode_paged_narrow_kv_int4g128_q_bf16_d128 => (Int4G128, Bf16, 128, Narrow, Paged, Global);
            decode_paged_kv_int4g128_q_bf16_d256 => (Int4G128, Bf16, 256, Wide, Paged, Global);
            decode_paged_narrow_kv_int4g128_q_bf16_d256 => (Int4G128, Bf16, 256, Narrow, Paged, Global);
            decode_paged_kv_int4g128_q_f16_d128 => (Int4G128, F16, 128, Wide, Paged, Global);
            decode_paged_narrow_kv_int4g128_q_f16_d128 => (Int4G128, F16, 128, Narrow, Paged, Global);
            decode_paged_kv_int4g128_q_f16_d256 => (Int4G128, F16, 256, Wide, Paged, Global);
            decode_paged_narrow_kv_int4g128_q_f16_d256 => (Int4G128, F16, 256, Narrow, Paged, Global);
            decode_cluster_kv_bf16_q_bf16_d64 => (Bf16, Bf16, 64, Wide, Strided, Cluster);
            decode_cluster_narrow_kv_bf16_q_bf16_d64 => (Bf16, Bf16, 64, Narrow, Strided, Cluster);
            decode_cluster_kv_bf16_q_bf16_d128 => (Bf16, Bf16, 128, Wide, Strided, Cluster);
            decode_cluster_narrow_kv_bf16_q_bf16_d128 => (Bf16, Bf16, 128, Narrow, Strided, Cluster);
            decode_cluster_kv_bf16_q_bf16_d256 => (Bf16, Bf16, 256, Wide, Strided, Cluster);
            decode_cluster_narrow_kv_bf16_q_bf16_d256 => (Bf16, Bf16, 256, Narrow, Strided, Cluster);
            decode_cluster_kv_f16_q_f16_d64 => (F16, F16, 64, Wide, Strided, Cluster);
            decode_cluster_narrow_kv_f16_q_f16_d64 => (F16, F16, 64, Narrow, Strided, Cluster);
            decode_cluster_kv_f16_q_f16_d128 => (F16, F16, 128, Wide, Strided, Cluster);
            decode_cluster_narrow_kv_f16_q_f16_d128 => (F16, F16, 128, Narrow, Strided, Cluster);
            decode_cluster_kv_f16_q_f16_d256 => (F16, F16, 256, Wide, Strided, Cluster);
            decode_cluster_narrow_kv_f16_q_f16_d256 => (F16, F16, 256, Narrow, Strided, Cluster);
            decode_cluster_kv_int8_q_bf16_d64 => (Int8, Bf16, 64, Wide, Strided, Cluster);
            decode_cluster_narrow_kv_int8_q_bf16_d64 => (Int8, Bf16, 64, Narrow, Strided, Cluster);
            decode_cluster_kv_int8_q_bf16_d128 => (Int8, Bf16, 128, Wide, Strided, Cluster);
            decode_cluster_narrow_kv_int8_q_bf16_d128 => (Int8, Bf16, 128, Narrow, Strided, Cluster);
            decode_cluster_kv_int8_q_bf16_d256 => (Int8, Bf16, 256, Wide, Strided, Cluster);
            decode_cluster_narrow_kv_int8_q_bf16_d256 => (Int8, Bf16, 256, Narrow, Strided, Cluster);
            decode_cluster_kv_int8_q_f16_d64 => (Int8, F16, 64, Wide, Strided, Cluster);
            decode_cluster_narrow_kv_int8_q_f16_d64 => (Int8, F16, 64, Narrow, Strided, Cluster);
            decode_cluster_kv_int8_q_f16_d128 => (Int8, F16, 128, Wide, Strided, Cluster);
            decode_cluster_narrow_kv_int8_q_f16_d128 => (Int8, F16, 128, Narrow, Strided, Cluster);
            decode_cluster_kv_int8_q_f16_d256 => (Int8, F16, 256, Wide, Strided, Cluster);
            decode_cluster_narrow_kv_int8_q_f16_d256 => (Int8, F16, 256, Narrow, Strided, Cluster);
            decode_cluster_kv_int4g32_q_bf16_d64 => (Int4G32, Bf16, 64, Wide, Strided, Cluster);
            decode_cluster_narrow_kv_int4g32_q_bf16_d64 => (Int4G32, Bf16, 64, Narrow, Strided, Cluster);
            decode_cluster_kv_int4g32_q_bf16_d128 => (Int4G32, Bf16, 128, Wide, Strided, Cluster);
            decode_cluster_narrow_kv_int4g32_q_bf16_d128 => (Int4G32, Bf16, 128, Narrow, Strided, Cluster);
            decode_cluster_kv_int4g32_q_bf16_d256 => (Int4G32, Bf16, 256, Wide, Strided, Cluster);
            decode_cluster_narrow_kv_int4g32_q_bf16_d256 => (Int4G32, Bf16, 256, Narrow, Strided, Cluster);
            decode_cluster_kv_int4g32_q_f16_d64 => (Int4G32, F16, 64, Wide, Strided, Cluster);
            decode_cluster_narrow_kv_int4g32_q_f16_d64 => (Int4G32, F16, 64, Narrow, Strided, Cluster);
            decode_cluster_kv_int4g32_q_f16_d128 => (Int4G32, F16, 128, Wide, Strided, Cluster);
            decode_cluster_narrow_kv_int4g32_q_f16_d128 => (Int4G32, F16, 128, Narrow, Strided, Cluster);
            decode_cluster_kv_int4g32_q_f16_d256 => (Int4G32, F16, 256, Wide, Strided, Cluster);
            decode_cluster_narrow_kv_int4g32_q_f16_d256 => (Int4G32, F16, 256, Narrow, Strided, Cluster);
            decode_cluster_kv_int4g64_q_bf16_d64 => (Int4G64, Bf16, 64, Wide, Strided, Cluster);
            decode_cluster_narrow_kv_int4g64_q_bf16_d64 => (Int4G64, Bf16, 64, Narrow, Strided, Cluster);
            decode_cluster_kv_int4g64_q_bf16_d128 => (Int4G64, Bf16, 128, Wide, Strided, Cluster);
            decode_cluster_narrow_kv_int4g64_q_bf16_d128 => (Int4G64, Bf16, 128, Narrow, Strided, Cluster);
            decode_cluster_kv_int4g64_q_bf16_d256 => (Int4G64, Bf16, 256, Wide, Strided, Cluster);
            decode_cluster_narrow_kv_int4g64_q_bf16_d256 => (Int4G64, Bf16, 256, Narrow, Strided, Cluster);
            decode_cluster_kv_int4g64_q_f16_d64 => (Int4G64, F16, 64, Wide, Strided, Cluster);
            decode_cluster_narrow_kv_int4g64_q_f16_d64 => (Int4G64, F16, 64, Narrow, Strided, Cluster);
            decode_cluster_kv_int4g64_q_f16_d128 => (Int4G64, F16, 128, Wide, Strided, Cluster);
            decode_cluster_narrow_kv_int4g64_q_f16_d128 => (Int4G64, F16, 128, Narrow, Strided, Cluster);
            decode_cluster_kv_int4g64_q_f16_d256 => (Int4G64, F16, 256, Wide, Strided, Cluster);
            decode_cluster_narrow_kv_int4g64_q_f16_d256 => (Int4G64, F16, 256, Narrow, Strided, Cluster);
            decode_cluster_kv_int4g128_q_bf16_d128 => (Int4G128, Bf16, 128, Wide, Strided, Cluster);
            decode_cluster_narrow_kv_int4g128_q_bf16_d128 => (Int4G128, Bf16, 128, Narrow, Strided, Cluster);
            decode_cluster_kv_int4g128_q_bf16_d256 => (Int4G128, Bf16, 256, Wide, Strided, Cluster);
            decode_cluster_narrow_kv_int4g128_q_bf16_d256 => (Int4G128, Bf16, 256, Narrow, Strided, Cluster);
            decode_cluster_kv_int4g128_q_f16_d128 => (Int4G128, F16, 128, Wide, Strided, Cluster);
            decode_cluster_narrow_kv_int4g128_q_f16_d128 => (Int4G128, F16, 128, Narrow, Strided, Cluster);
            decode_cluster_kv_int4g128_q_f16_d256 => (Int4G128, F16, 256, Wide, Strided, Cluster);
            decode_cluster_narrow_kv_int4g128_q_f16_d256 => (Int4G128, F16, 256, Narrow, Strided, Cluster);
            decode_cluster_paged_kv_bf16_q_bf16_d64 => (Bf16, Bf16, 64, Wide, Paged, Cluster);
            decode_cluster_paged_narrow_kv_bf16_q_bf16_d64 => (Bf16, Bf16, 64, Narrow, Paged, Cluster);
            decode_cluster_paged_kv_bf16_q_bf16_d128 => (Bf16, Bf16, 128, Wide, Paged, Cluster);
            decode_cluster_paged_narrow_kv_bf16_q_bf16_d128 => (Bf16, Bf16, 128, Narrow, Paged, Cluster);
            decode_cluster_paged_kv_bf16_q_bf16_d256 => (Bf16, Bf16, 256, Wide, Paged, Cluster);
            decode_cluster_paged_narrow_kv_bf16_q_bf16_d256 => (Bf16, Bf16, 256, Narrow, Paged, Cluster);
            decode_cluster_paged_kv_f16_q_f16_d64 => (F16, F16, 64, Wide, Paged, Cluster);
            decode_cluster_paged_narrow_kv_f16_q_f16_d64 => (F16, F16, 64, Narrow, Paged, Cluster);
            decode_cluster_paged_kv_f16_q_f16_d128 => (F16, F16, 128, Wide, Paged, Cluster);
            decode_cluster_paged_narrow_kv_f16_q_f16_d128 => (F16, F16, 128, Narrow, Paged, Cluster);
            decode_cluster_paged_kv_f16_q_f16_d256 => (F16, F16, 256, Wide, Paged, Cluster);
            decode_cluster_paged_narrow_kv_f16_q_f16_d256 => (F16, F16, 256, Narrow, Paged, Cluster);
            decode_cluster_paged_kv_int8_q_bf16_d64 => (Int8, Bf16, 64, Wide, Paged, Cluster);
            decode_cluster_paged_narrow_kv_int8_q_bf16_d64 => (Int8, Bf16, 64, Narrow, Paged, Cluster);
            decode_cluster_paged_kv_int8_q_bf16_d128 => (Int8, Bf16, 128, Wide, Paged, Cluster);
            decode_cluster_paged_narrow_kv_int8_q_bf16_d128 => (Int8, Bf16, 128, Narrow, Paged, Cluster);
            decode_cluster_paged_kv_int8_q_bf16_d256 => (Int8, Bf16, 256, Wide, Paged, Cluster);
            decode_cluster_paged_narrow_kv_int8_q_bf16_d256 => (Int8, Bf16, 256, Narrow, Paged, Cluster);
            decode_cluster_paged_kv_int8_q_f16_d64 => (Int8, F16, 64, Wide, Paged, Cluster);
            decode_cluster_paged_narrow_kv_int8_q_f16_d64 => (Int8, F16, 64, Narrow, Paged, Cluster);
            decode_cluster_paged_kv_int8_q_f16_d128 => (Int8, F16, 128, Wide, Paged, Cluster);
            decode_cluster_paged_narrow_kv_int8_q_f16_d128 => (Int8, F16, 128, Narrow, Paged, Cluster);
            decode_cluster_paged_kv_int8_q_f16_d256 => (Int8, F16, 256, Wide, Paged, Cluster);
            decode_cluster_paged_narrow_kv_int8_q_f16_d256 => (Int8, F16, 256, Narrow, Paged, Cluster);
            decode_cluster_paged_kv_int4g32_q_bf16_d64 => (Int4G32, Bf16, 64, Wide, Paged, Cluster);
            decode_cluster_paged_narrow_kv_int4g32_q_bf16_d64 => (Int4G32, Bf16, 64, Narrow, Paged, Cluster);
            decode_cluster_paged_kv_int4g32_q_bf16_d128 => (Int4G32, Bf16, 128, Wide, Paged, Cluster);
            decode_cluster_paged_narrow_kv_int4g32_q_bf16_d128 => (Int4G32, Bf16, 128, Narrow, Paged, Cluster);
            decode_cluster_paged_kv_int4g32_q_bf16_d256 => (Int4G32, Bf16, 256, Wide, Paged, Cluster);
            decode_cluster_paged_narrow_kv_int4g32_q_bf16_d256 => (Int4G32, Bf16, 256, Narrow, Paged, Cluster);
            decode_cluster_paged_kv_int4g32_q_f16_d64 => (Int4G32, F16, 64, Wide, Paged, Cluster);
            decode_cluster_paged_narrow_kv_int4g32_q_f16_d64 => (Int4G32, F16, 64, Narrow, Paged, Cluster);
            decode_cluster_paged_kv_int4g32_q_f16_d128 => (Int4G32, F16, 128, Wide, Paged, Cluster);
            decode_cluster_paged_narrow_kv_int4g32_q_f16_d128 => (Int4G32, F16, 128, Narrow, Paged, Cluster);
            decode_cluster_paged_kv_int4g32_q_f16_d256 => (Int4G32, F16, 256, Wide, Paged, Cluster);
            decode_cluster_paged_narrow_kv_int4g32_q_f16_d256 => (Int4G32, F16, 256, Narrow, Paged, Cluster);
            decode_cluster_paged_kv_int4g64_q_bf16_d64 => (Int4G64, Bf16, 64, Wide, Paged, Cluster);
            decode_cluster_paged_narrow_kv_int4g64_q_bf16_d64 => (Int4G64, Bf16, 64, Narrow, Paged, Cluster);
            decode_cluster_paged_kv_int4g64_q_bf16_d128 => (Int4G64, Bf16, 128, Wide, Paged, Cluster);
            decode_cluster_paged_narrow_kv_int4g64_q_bf16_d128 => (Int4G64, Bf16, 128, Narrow, Paged, Cluster);
            decode_cluster_paged_kv_int4g64_q_bf16_d256 => (Int4G64, Bf16, 256, Wide, Paged, Cluster);
            decode_cluster_paged_narrow_kv_int4g64_q_bf16_d256 => (Int4G64, Bf16, 256, Narrow, Paged, Cluster);
            decode_cluster_paged_kv_int4g64_q_f16_d64 => (Int4G64, F16, 64, Wide, Paged, Cluster);
            decode_cluster_paged_narrow_kv_int4g64_q_f16_d64 => (Int4G64, F16, 64, Narrow, Paged, Cluster);
            decode_cluster_paged_kv_int4g64_q_f16_d128 => (Int4G64, F16, 128, Wide, Paged, Cluster);
            decode_cluster_paged_narrow_kv_int4g64_q_f16_d128 => (Int4G64, F16, 128, Narrow, Paged, Cluster);
            decode_cluster_paged_kv_int4g64_q_f16_d256 => (Int4G64, F16, 256, Wide, Paged, Cluster);
            decode_cluster_paged_narrow_kv_int4g64_q_f16_d256 => (Int4G64, F16, 256, Narrow, Paged, Cluster);
            decode_cluster_paged_kv_int4g128_q_bf16_d128 => (Int4G128, Bf16, 128, Wide, Paged, Cluster);
            decode_cluster_paged_narrow_kv_int4g128_q_bf16_d128 => (Int4G128, Bf16, 128, Narrow, Paged, Cluster);
            decode_cluster_paged_kv_int4g128_q_bf16_d256 => (Int4G128, Bf16, 256, Wide, Paged, Cluster);
            decode_cluster_paged_narrow_kv_int4g128_q_bf16_d256 => (Int4G128, Bf16, 256, Narrow, Paged, Cluster);
            decode_cluster_paged_kv_int4g128_q_f16_d128 => (Int4G128, F16, 128, Wide, Paged, Cluster);
            decode_cluster_paged_narrow_kv_int4g128_q_f16_d128 => (Int4G128, F16, 128, Narrow, Paged, Cluster);
            decode_cluster_paged_kv_int4g128_q_f16_d256 => (Int4G128, F16, 256, Wide, Paged, Cluster);
            decode_cluster_paged_narrow_kv_int4g128_q_f16_d256 => (Int4G128, F16, 256, Narrow, Paged, Cluster);
            decode_wgmma_kv_bf16_q_bf16_d128 => (Bf16, Bf16, 128, Wgmma, Strided, Global);
            decode_wgmma_kv_f16_q_f16_d128 => (F16, F16, 128, Wgmma, Strided, Global);
            decode_cluster_wgmma_kv_bf16_q_bf16_d128 => (Bf16, Bf16, 128, Wgmma, Strided, Cluster);
            decode_cluster_wgmma_kv_f16_q_f16_d128 => (F16, F16, 128, Wgmma, Strided, Cluster);
            decode_paged_wgmma_kv_bf16_q_bf16_d128 => (Bf16, Bf16, 128, Wgmma, Paged, Global);
            decode_paged_wgmma_kv_f16_q_f16_d128 => (F16, F16, 128, Wgmma, Paged, Global);
            decode_cluster_paged_wgmma_kv_bf16_q_bf16_d128 => (Bf16, Bf16, 128, Wgmma, Paged, Cluster);
            decode_cluster_paged_wgmma_kv_f16_q_f16_d128 => (F16, F16, 128, Wgmma, Paged, Cluster);
            decode_wgmma_kv_int8_q_bf16_d128 => (Int8, Bf16, 128, Wgmma, Strided, Global);
            decode_wgmma_ws_kv_int8_q_bf16_d128 => (Int8, Bf16, 128, Wgmma, Strided, Global, Specialized);
            decode_cluster_wgmma_kv_int8_q_bf16_d128 => (Int8, Bf16, 128, Wgmma, Strided, Cluster);
            decode_cluster_wgmma_ws_kv_int8_q_bf16_d128 => (Int8, Bf16, 128, Wgmma, Strided, Cluster, Specialized);
            decode_paged_wgmma_kv_int8_q_bf16_d128 => (Int8, Bf16, 128, Wgmma, Paged, Global);
            decode_cluster_paged_wgmma_kv_int8_q_bf16_d128 => (Int8, Bf16, 128, Wgmma, Paged, Cluster);
            decode_wgmma_kv_int8_q_f16_d128 => (Int8, F16, 128, Wgmma, Strided, Global);
            decode_wgmma_ws_kv_int8_q_f16_d128 => (Int8, F16, 128, Wgmma, Strided, Global, Specialized);
            decode_cluster_wgmma_kv_int8_q_f16_d128 => (Int8, F16, 128, Wgmma, Strided, Cluster);
            decode_cluster_wgmma_ws_kv_int8_q_f16_d128 => (Int8, F16, 128, Wgmma, Strided, Cluster, Specialized);
            decode_paged_wgmma_kv_int8_q_f16_d128 => (Int8, F16, 128, Wgmma, Paged, Global);
            decode_cluster_paged_wgmma_kv_int8_q_f16_d128 => (Int8, F16, 128, Wgmma, Paged, Cluster);
            decode_wgmma_kv_int4g32_q_bf16_d128 => (Int4G32, Bf16, 128, Wgmma, Strided, Global);
            decode_wgmma_ws_kv_int4g32_q_bf16_d128 => (Int4G32, Bf16, 128, Wgmma, Strided, Global, Specialized);
            decode_cluster_wgmma_kv_int4g32_q_bf16_d128 => (Int4G32, Bf16, 128, Wgmma, Strided, Cluster);
            decode_cluster_wgmma_ws_kv_int4g32_q_bf16_d128 => (Int4G32, Bf16, 128, Wgmma, Strided, Cluster, Specialized);
            decode_paged_wgmma_kv_int4g32_q_bf16_d128 => (Int4G32, Bf16, 128, Wgmma, Paged, Global);
            decode_cluster_paged_wgmma_kv_int4g32_q_bf16_d128 => (Int4G32, Bf16, 128, Wgmma, Paged, Cluster);
            decode_wgmma_kv_int4g32_q_f16_d128 => (Int4G32, F16, 128, Wgmma, Strided, Global);
            decode_wgmma_ws_kv_int4g32_q_f16_d128 => (Int4G32, F16, 128, Wgmma, Strided, Global, Specialized);
            decode_cluster_wgmma_kv_int4g32_q_f16_d128 => (Int4G32, F16, 128, Wgmma, Strided, Cluster);
            decode_cluster_wgmma_ws_kv_int4g32_q_f16_d128 => (Int4G32, F16, 128, Wgmma, Strided, Cluster, Specialized);
            decode_paged_wgmma_kv_int4g32_q_f16_d128 => (Int4G32, F16, 128, Wgmma, Paged, Global);
            decode_cluster_paged_wgmma_kv_int4g32_q_f16_d128 => (Int4G32, F16, 128, Wgmma, Paged, Cluster);
            decode_wgmma_kv_int4g64_q_bf16_d128 => (Int4G64, Bf16, 128, Wgmma, Strided, Global);
            decode_wgmma_ws_kv_int4g64_q_bf16_d128 => (Int4G64, Bf16, 128, Wgmma, Strided, Global, Specialized);
            decode_cluster_wgmma_kv_int4g64_q_bf16_d128 => (Int4G64, Bf16, 128, Wgmma, Strided, Cluster);
            decode_cluster_wgmma_ws_kv_int4g64_q_bf16_d128 => (Int4G64, Bf16, 128, Wgmma, Strided, Cluster, Specialized);
            decode_paged_wgmma_kv_int4g64_q_bf16_d128 => (Int4G64, Bf16, 128, Wgmma, Paged, Global);
            decode_cluster_paged_wgmma_kv_int4g64_q_bf16_d128 => (Int4G64, Bf16, 128, Wgmma, Paged, Cluster);
            decode_wgmma_kv_int4g64_q_f16_d128 => (Int4G64, F16, 128, Wgmma, Strided, Global);
            decode_wgmma_ws_kv_int4g64_q_f16_d128 => (Int4G64, F16, 128, Wgmma, Strided, Global, Specialized);
            decode_cluster_wgmma_kv_int4g64_q_f16_d128 => (Int4G64, F16, 128, Wgmma, Strided, Cluster);
            decode_cluster_wgmma_ws_kv_int4g64_q_f16_d128 => (Int4G64, F16, 128, Wgmma, Strided, Cluster, Specialized);
            decode_paged_wgmma_kv_int4g64_q_f16_d128 => (Int4G64, F16, 128, Wgmma, Paged, Global);
            decode_cluster_paged_wgmma_kv_int4g64_q_f16_d128 => (Int4G64, F16, 128, Wgmma, Paged, Cluster);
            decode_wgmma_kv_int4g128_q_bf16_d128 => (Int4G128, Bf16, 128, Wgmma, Strided, Global);
            decode_wgmma_ws_kv_int4g128_q_bf16_d128 => (Int4G128, Bf16, 128, Wgmma, Strided, Global, Specialized);
            decode_cluster_wgmma_kv_int4g128_q_bf16_d128 => (Int4G128, Bf16, 128, Wgmma, Strided, Cluster);
            decode_cluster_wgmma_ws_kv_int4g128_q_bf16_d128 => (Int4G128, Bf16, 128, Wgmma, Strided, Cluster, Specialized);
            decode_paged_wgmma_kv_int4g128_q_bf16_d128 => (Int4G128, Bf16, 128, Wgmma, Paged, Global);
            decode_cluster_paged_wgmma_kv_int4g128_q_bf16_d128 => (Int4G128, Bf16, 128, Wgmma, Paged, Cluster);
            decode_wgmma_kv_int4g128_q_f16_d128 => (Int4G128, F16, 128, Wgmma, Strided, Global);
            decode_wgmma_ws_kv_int4g128_q_f16_d128 => (Int4G128, F16, 128, Wgmma, Strided, Global, Specialized);
            decode_cluster_wgmma_kv_int4g128_q_f16_d128 => (Int4G128, F16, 128, Wgmma, Strided, Cluster);
            decode_cluster_wgmma_ws_kv_int4g128_q_f16_d128 => (Int4G128, F16, 128, Wgmma, Strided, Cluster, Specialized);
            decode_paged_wgmma_kv_int4g128_q_f16_d128 => (Int4G128, F16, 128, Wgmma, Paged, Global);
            decode_cluster_paged_wgmma_kv_int4g128_q_f16_d128 => (Int4G128, F16, 128, Wgmma, Paged, Cluster);
        }
    };
}

/// Split-merge kernels: `name => (Dtype family of O, head_dim)`.
#[macro_export]
macro_rules! merge_kernel_table {
    ($m:ident) => {
        $m! {
            merge_bf16_d64 => (Bf16, 64);
            merge_bf16_d128 => (Bf16, 128);
            merge_bf16_d256 => (Bf16, 256);
            merge_f16_d64 => (F16, 64);
            merge_f16_d128 => (F16, 128);
            merge_f16_d256 => (F16, 256);
        }
    };
}

/// Cache store / quantize / dequantize kernels: `name => (cache KvFormat,
/// 16-bit Dtype, head_dim, direction)`; a 16-bit format's `Quantize` is a
/// plain copy into the cache (its append).
#[macro_export]
macro_rules! quant_kernel_table {
    ($m:ident) => {
        $m! {
            store_bf16_d64 => (Bf16, Bf16, 64, Quantize);
            store_bf16_d128 => (Bf16, Bf16, 128, Quantize);
            store_bf16_d256 => (Bf16, Bf16, 256, Quantize);
            store_f16_d64 => (F16, F16, 64, Quantize);
            store_f16_d128 => (F16, F16, 128, Quantize);
            store_f16_d256 => (F16, F16, 256, Quantize);
            quantize_int8_from_bf16_d64 => (Int8, Bf16, 64, Quantize);
            quantize_int8_from_bf16_d128 => (Int8, Bf16, 128, Quantize);
            quantize_int8_from_bf16_d256 => (Int8, Bf16, 256, Quantize);
            quantize_int8_from_f16_d64 => (Int8, F16, 64, Quantize);
            quantize_int8_from_f16_d128 => (Int8, F16, 128, Quantize);
            quantize_int8_from_f16_d256 => (Int8, F16, 256, Quantize);
            dequantize_int8_to_bf16_d64 => (Int8, Bf16, 64, Dequantize);
            dequantize_int8_to_bf16_d128 => (Int8, Bf16, 128, Dequantize);
            dequantize_int8_to_bf16_d256 => (Int8, Bf16, 256, Dequantize);
            dequantize_int8_to_f16_d64 => (Int8, F16, 64, Dequantize);
            dequantize_int8_to_f16_d128 => (Int8, F16, 128, Dequantize);
            dequantize_int8_to_f16_d256 => (Int8, F16, 256, Dequantize);
            quantize_int4g32_from_bf16_d64 => (Int4G32, Bf16, 64, Quantize);
            dequantize_int4g32_to_bf16_d64 => (Int4G32, Bf16, 64, Dequantize);
            quantize_int4g32_from_bf16_d128 => (Int4G32, Bf16, 128, Quantize);
            dequantize_int4g32_to_bf16_d128 => (Int4G32, Bf16, 128, Dequantize);
            quantize_int4g32_from_bf16_d256 => (Int4G32, Bf16, 256, Quantize);
            dequantize_int4g32_to_bf16_d256 => (Int4G32, Bf16, 256, Dequantize);
            quantize_int4g32_from_f16_d64 => (Int4G32, F16, 64, Quantize);
            dequantize_int4g32_to_f16_d64 => (Int4G32, F16, 64, Dequantize);
            quantize_int4g32_from_f16_d128 => (Int4G32, F16, 128, Quantize);
            dequantize_int4g32_to_f16_d128 => (Int4G32, F16, 128, Dequantize);
            quantize_int4g32_from_f16_d256 => (Int4G32, F16, 256, Quantize);
            dequantize_int4g32_to_f16_d256 => (Int4G32, F16, 256, Dequantize);
            quantize_int4g64_from_bf16_d64 => (Int4G64, Bf16, 64, Quantize);
            dequantize_int4g64_to_bf16_d64 => (Int4G64, Bf16, 64, Dequantize);
            quantize_int4g64_from_bf16_d128 => (Int4G64, Bf16, 128, Quantize);
            dequantize_int4g64_to_bf16_d128 => (Int4G64, Bf16, 128, Dequantize);
            quantize_int4g64_from_bf16_d256 => (Int4G64, Bf16, 256, Quantize);
            dequantize_int4g64_to_bf16_d256 => (Int4G64, Bf16, 256, Dequantize);
            quantize_int4g64_from_f16_d64 => (Int4G64, F16, 64, Quantize);
            dequantize_int4g64_to_f16_d64 => (Int4G64, F16, 64, Dequantize);
            quantize_int4g64_from_f16_d128 => (Int4G64, F16, 128, Quantize);
            dequantize_int4g64_to_f16_d128 => (Int4G64, F16, 128, Dequantize);
            quantize_int4g64_from_f16_d256 => (Int4G64, F16, 256, Quantize);
            dequantize_int4g64_to_f16_d256 => (Int4G64, F16, 256, Dequantize);
            quantize_int4g128_from_bf16_d128 => (Int4G128, Bf16, 128, Quantize);
            dequantize_int4g128_to_bf16_d128 => (Int4G128, Bf16, 128, Dequantize);
            quantize_int4g128_from_bf16_d256 => (Int4G128, Bf16, 256, Quantize);
            dequantize_int4g128_to_bf16_d256 => (Int4G128, Bf16, 256, Dequantize);
            quantize_int4g128_from_f16_d128 => (Int4G128, F16, 128, Quantize);
            dequantize_int4g128_to_f16_d128 => (Int4G128, F16, 128, Dequantize);
            quantize_int4g128_from_f16_d256 => (Int4G128, F16, 256, Quantize);
            dequantize_int4g128_to_f16_d256 => (Int4G128, F16, 256, Dequantize);
        }
    };
}

/// Which way a quant kernel converts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuantDirection {
    /// 16-bit rows → cache rows: quantized rows + side data, or (16-bit
    /// formats) the rows themselves.
    Quantize,
    /// Quantized rows + side data → 16-bit rows.
    Dequantize,
}

/// One quantize / dequantize kernel of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuantKernel {
    pub format: KvFormat,
    pub dtype: Dtype,
    pub head_dim: u32,
    pub direction: QuantDirection,
    pub name: &'static str,
}

macro_rules! quant_list {
    ($($name:ident => ($f:ident, $q:ident, $d:literal, $dir:ident);)*) => {
        /// Every quantize / dequantize kernel in the PTX module.
        pub const QUANT_KERNELS: &[QuantKernel] = &[$(QuantKernel {
            format: KvFormat::$f,
            dtype: Dtype::$q,
            head_dim: $d,
            direction: QuantDirection::$dir,
            name: stringify!($name),
        },)*];
    };
}
quant_kernel_table!(quant_list);

/// Name of the quant kernel for a (format, 16-bit dtype, head_dim, direction).
pub const fn quant_kernel_name(format: KvFormat, dtype: Dtype, head_dim: u32, direction: QuantDirection) -> Option<&'static str> {
    let mut i = 0;
    while i < QUANT_KERNELS.len() {
        let k = &QUANT_KERNELS[i];
        if k.format as u32 == format as u32 && k.dtype as u32 == dtype as u32 && k.head_dim == head_dim && k.direction as u32 == direction as u32 {
            return Some(k.name);
        }
        i += 1;
    }
    None
}

/// One attention kernel of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeKernel {
    pub format: KvFormat,
    pub dtype: Dtype,
    pub head_dim: u32,
    pub family: Family,
    pub addressing: Addressing,
    /// Merges split sequences in a thread-block cluster (`DecodeParams::cluster_log2`).
    pub cluster: bool,
    /// A warp-specialised wgmma kernel (`wgmma_specializable`): a producer
    /// warpgroup of [`WGMMA_PRODUCER_WARPS`](crate::WGMMA_PRODUCER_WARPS)
    /// after the compute warpgroups.
    pub specialized: bool,
    /// A capacity kernel (`Capacity` entries): launched for capacity plans
    /// of device lengths, where it differs from its twin only in when its
    /// first copies are issued.
    pub capacity: bool,
    /// Adjacent kv heads one block reads (`HeadPair` entries: 2). In a
    /// token-major cache their rows of a token are one piece of
    /// `2 · row_bytes`: 128-byte int8 rows read as 256-byte ones, which HBM
    /// serves as fast as head-major rows (docs/design/nhd-head-groups.md).
    pub heads_per_block: u32,
    pub name: &'static str,
}

/// One split-merge kernel of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MergeKernel {
    pub dtype: Dtype,
    pub head_dim: u32,
    pub name: &'static str,
}

impl DecodeKernel {
    /// Registers per thread the kernel is compiled within (PTX `.maxnreg`),
    /// where the planner counts on the occupancy, head dims up to 128:
    /// - the narrow kernels of the quantized formats run 8-warp blocks two
    ///   per SM (65536 registers / 512 threads = 128). Without the cap, code
    ///   added after the key loop (the split merge) moved some from 128 to
    ///   130 registers and so to one block per SM;
    /// - the wide kernels run grid B's 6-warp blocks two per SM (65536 / 384,
    ///   rounded down to the allocation unit of 8: 168). The paged bf16 one
    ///   used 200 (187 with 2-chunk address batches), one block per SM;
    /// - the wgmma kernels run two 8-warp blocks per SM (128), except the
    ///   warp-specialised ones (`specialized`): one 12-warp block
    ///   (65536 / 384: 168).
    pub const fn register_cap(&self) -> Option<u32> {
        match self.family {
            Family::Narrow if self.format.is_quantized() && self.head_dim <= 128 => Some(128),
            Family::Wide if self.head_dim <= 128 => Some(168),
            Family::Wgmma if self.specialized => Some(168),
            Family::Wgmma => Some(128),
            _ => None,
        }
    }
}

/// `true` for a table entry's `Cluster` merge.
#[macro_export]
macro_rules! cluster_merge {
    (Global) => {
        false
    };
    (Cluster) => {
        true
    };
}

/// The form of a table entry, from its optional last marker: `Plain`
/// (none), `Specialized` (a warp-specialised wgmma kernel), `Capacity` (a
/// capacity twin) or `HeadPair` (a narrow kernel of two adjacent kv heads a
/// block).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelForm {
    Plain,
    Specialized,
    Capacity,
    HeadPair,
}

impl KernelForm {
    pub const fn specialized(self) -> bool {
        matches!(self, KernelForm::Specialized)
    }
    pub const fn capacity(self) -> bool {
        matches!(self, KernelForm::Capacity)
    }
    /// Kv heads one block reads (`DecodeKernel::heads_per_block`).
    pub const fn heads_per_block(self) -> u32 {
        if matches!(self, KernelForm::HeadPair) {
            2
        } else {
            1
        }
    }
}

/// The [`KernelForm`] of a table entry's optional last marker.
#[macro_export]
macro_rules! kernel_form {
    () => {
        $crate::KernelForm::Plain
    };
    ($form:ident) => {
        $crate::KernelForm::$form
    };
}

macro_rules! decode_list {
    ($($name:ident => ($f:ident, $q:ident, $d:literal, $v:ident, $a:ident, $m:ident $(, $s:ident)?);)*) => {
        /// Every attention kernel in the PTX module.
        pub const DECODE_KERNELS: &[DecodeKernel] = &[$(DecodeKernel {
            format: KvFormat::$f,
            dtype: Dtype::$q,
            head_dim: $d,
            family: Family::$v,
            addressing: Addressing::$a,
            cluster: cluster_merge!($m),
            specialized: kernel_form!($($s)?).specialized(),
            capacity: kernel_form!($($s)?).capacity(),
            heads_per_block: kernel_form!($($s)?).heads_per_block(),
            name: stringify!($name),
        },)*];
    };
}
decode_kernel_table!(decode_list);

macro_rules! merge_list {
    ($($name:ident => ($q:ident, $d:literal);)*) => {
        /// Every split-merge kernel in the PTX module.
        pub const MERGE_KERNELS: &[MergeKernel] = &[$(MergeKernel { dtype: Dtype::$q, head_dim: $d, name: stringify!($name) },)*];
    };
}
merge_kernel_table!(merge_list);

/// Utility kernels (random fill, busy-wait, length advance), by the names
/// their params use.
pub const UTILITY_KERNELS: [&str; 4] = [crate::FILL_KERNEL_BF16, crate::FILL_KERNEL_F16, crate::SLEEP_KERNEL, crate::ADVANCE_KERNEL];

/// Name of the attention kernel for a (format, dtype, head_dim, family,
/// addressing, cluster merge, warp specialisation, capacity form, kv heads
/// per block), or `None` when the table has no such kernel.
#[allow(clippy::too_many_arguments)]
pub const fn decode_kernel_name(
    format: KvFormat,
    dtype: Dtype,
    head_dim: u32,
    family: Family,
    addressing: Addressing,
    cluster: bool,
    specialized: bool,
    capacity: bool,
    heads_per_block: u32,
) -> Option<&'static str> {
    let mut i = 0;
    while i < DECODE_KERNELS.len() {
        let k = &DECODE_KERNELS[i];
        if k.format as u32 == format as u32
            && k.dtype as u32 == dtype as u32
            && k.head_dim == head_dim
            && k.family as u32 == family as u32
            && k.addressing as u32 == addressing as u32
            && k.cluster == cluster
            && k.specialized == specialized
            && k.capacity == capacity
            && k.heads_per_block == heads_per_block
        {
            return Some(k.name);
        }
        i += 1;
    }
    None
}

/// Name of the split-merge kernel for a (dtype, head_dim).
pub const fn merge_kernel_name(dtype: Dtype, head_dim: u32) -> Option<&'static str> {
    let mut i = 0;
    while i < MERGE_KERNELS.len() {
        let k = &MERGE_KERNELS[i];
        if k.dtype as u32 == dtype as u32 && k.head_dim == head_dim {
            return Some(k.name);
        }
        i += 1;
    }
    None
}
