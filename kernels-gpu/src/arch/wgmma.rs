//! Hopper's warpgroup MMA (`wgmma.mma_async`, sm_90a) for `Family::Wgmma`.
//!
//! A warpgroup is 4 consecutive warps (`warp / 4`); one `wgmma` computes a
//! 64-row tile, warp `w % 4` of the group holding rows `16 (w % 4) ..+16` in
//! exactly the `mma.m16n8k16` layouts (`arch::mma`): the accumulator's n8
//! tile `j` is registers `4j .. 4j+4`, and an A operand from registers is
//! the m16k16 A fragment. B (and a shared A) are read from shared memory
//! through a [`descriptor`] of the 128-byte swizzled layout
//! (`format::Swizzle128`): column blocks of 64 16-bit values per row, rows
//! 128 bytes apart, 16-byte chunks XORed with the row's index mod 8. (The
//! unswizzled layout needs a quarter-warp's copies spread over 8 rows to
//! avoid bank conflicts, so each warp read half lines of the cache: ncu
//! showed L2 60 % hits and 79 % busy, the kernel 1.5× slower than wide.)
//!
//! Each function issues its MMAs, commits them and waits for them inside
//! one `asm!` block, so no register it names is touched while they run; a
//! `wgmma.fence` first orders the warps' earlier register writes (a
//! rescaled accumulator, a new P) before the MMAs read them.

/// A shared-memory matrix descriptor of the 128-byte swizzled layout, its
/// pattern starting on a 1024-byte boundary (base offset 0): the operand
/// starts at `addr`; `stride` bytes separate groups of 8 rows (K-major) or
/// of 8 keys (MN-major), `leading` bytes the 64-element column blocks of an
/// MN-major operand (K-major: unused, 16). As CUTLASS's `make_gmma_desc`
/// (SW128). Addresses and offsets are kept in 16-byte units in 14-bit
/// fields (shared memory stays below 256 KiB), so the MMA functions add
/// their steps' offsets to the low 32-bit word alone: the start address
/// never carries into the leading offset (two 64-bit adds per descriptor
/// were a quarter of the step's instructions).
#[inline(always)]
pub const fn descriptor(addr: u32, leading: u32, stride: u32) -> u64 {
    field(addr) | field(leading) << 16 | field(stride) << 32 | SWIZZLE_128B << 62
}

/// Layout type of the descriptor's bits 62-63: 128-byte swizzle.
const SWIZZLE_128B: u64 = 1;

/// A byte address or offset as a descriptor field (16-byte units, 14 bits).
#[inline(always)]
const fn field(bytes: u32) -> u64 {
    ((bytes >> 4) & 0x3FFF) as u64
}

/// A score MMA over head_dim 128 as the function `$name` (see the
/// instances in [`wgmma_d128`]): eight `m64n$nk16` steps over Q's and K's
/// tiles, the accumulator's `$len` registers named by the list (n8 tile `j`
/// in elements `4j .. 4j+4`).
macro_rules! wgmma_scores_d128 {
    ($(#[$doc:meta])* $name:ident, $ty:literal, $n:literal, $len:literal, [$s0:ident = $i0:literal $(, $s:ident = $i:literal)*]) => {
        $(#[$doc])*
        #[inline(always)]
        pub unsafe fn $name(q: u64, k: u64) -> [f32; $len] {
            let mut s = [0f32; $len];
            core::arch::asm!(
                concat!(
                    "{{\n.reg .pred first, acc;\n.reg .b64 qd, kd;\n.reg .b32 ql, qh, kl, kh, qa, ka;\n",
                    "mov.b64 {{ql, qh}}, {q};\nmov.b64 {{kl, kh}}, {k};\n",
                    "setp.ne.b32 first, {z}, 0;\nsetp.eq.b32 acc, {z}, 0;\nwgmma.fence.sync.aligned;\n",
                    "wgmma.mma_async.sync.aligned.m64n", $n, "k16.f32.", $ty, ".", $ty, " {{{", stringify!($s0), "}" $(, ", {", stringify!($s), "}")*, "}}, {q}, {k}, first, 1, 1, 0, 0;\n",
                    "add.u32 qa, ql, 2;\nadd.u32 ka, kl, 2;\nmov.b64 qd, {{qa, qh}};\nmov.b64 kd, {{ka, kh}};\n",
                    "wgmma.mma_async.sync.aligned.m64n", $n, "k16.f32.", $ty, ".", $ty, " {{{", stringify!($s0), "}" $(, ", {", stringify!($s), "}")*, "}}, qd, kd, acc, 1, 1, 0, 0;\n",
                    "add.u32 qa, ql, 4;\nadd.u32 ka, kl, 4;\nmov.b64 qd, {{qa, qh}};\nmov.b64 kd, {{ka, kh}};\n",
                    "wgmma.mma_async.sync.aligned.m64n", $n, "k16.f32.", $ty, ".", $ty, " {{{", stringify!($s0), "}" $(, ", {", stringify!($s), "}")*, "}}, qd, kd, acc, 1, 1, 0, 0;\n",
                    "add.u32 qa, ql, 6;\nadd.u32 ka, kl, 6;\nmov.b64 qd, {{qa, qh}};\nmov.b64 kd, {{ka, kh}};\n",
                    "wgmma.mma_async.sync.aligned.m64n", $n, "k16.f32.", $ty, ".", $ty, " {{{", stringify!($s0), "}" $(, ", {", stringify!($s), "}")*, "}}, qd, kd, acc, 1, 1, 0, 0;\n",
                    "add.u32 qa, ql, 512;\nadd.u32 ka, kl, 512;\nmov.b64 qd, {{qa, qh}};\nmov.b64 kd, {{ka, kh}};\n",
                    "wgmma.mma_async.sync.aligned.m64n", $n, "k16.f32.", $ty, ".", $ty, " {{{", stringify!($s0), "}" $(, ", {", stringify!($s), "}")*, "}}, qd, kd, acc, 1, 1, 0, 0;\n",
                    "add.u32 qa, ql, 514;\nadd.u32 ka, kl, 514;\nmov.b64 qd, {{qa, qh}};\nmov.b64 kd, {{ka, kh}};\n",
                    "wgmma.mma_async.sync.aligned.m64n", $n, "k16.f32.", $ty, ".", $ty, " {{{", stringify!($s0), "}" $(, ", {", stringify!($s), "}")*, "}}, qd, kd, acc, 1, 1, 0, 0;\n",
                    "add.u32 qa, ql, 516;\nadd.u32 ka, kl, 516;\nmov.b64 qd, {{qa, qh}};\nmov.b64 kd, {{ka, kh}};\n",
                    "wgmma.mma_async.sync.aligned.m64n", $n, "k16.f32.", $ty, ".", $ty, " {{{", stringify!($s0), "}" $(, ", {", stringify!($s), "}")*, "}}, qd, kd, acc, 1, 1, 0, 0;\n",
                    "add.u32 qa, ql, 518;\nadd.u32 ka, kl, 518;\nmov.b64 qd, {{qa, qh}};\nmov.b64 kd, {{ka, kh}};\n",
                    "wgmma.mma_async.sync.aligned.m64n", $n, "k16.f32.", $ty, ".", $ty, " {{{", stringify!($s0), "}" $(, ", {", stringify!($s), "}")*, "}}, qd, kd, acc, 1, 1, 0, 0;\n",
                    "wgmma.commit_group.sync.aligned;\nwgmma.wait_group.sync.aligned 0;\n}}"
                ),
                q = in(reg64) q, k = in(reg64) k, z = in(reg32) 0u32,
                $s0 = out(reg32) s[$i0], $($s = out(reg32) s[$i],)*
                options(nostack)
            );
            s
        }
    };
}

/// A P·V MMA over head_dim 128 as the function `$name` (see the instances
/// in [`wgmma_d128`]): one `m64n128k16` step per A fragment of P (`a[h]`:
/// keys `16h ..`), V's 16 keys of step `h` 2048 bytes after step `h − 1`'s;
/// the list names the registers of fragments 1 ..
macro_rules! wgmma_pv_d128 {
    ($(#[$doc:meta])* $name:ident, $ty:literal, $frags:literal, [$(($h:literal: $b0:ident, $b1:ident, $b2:ident, $b3:ident)),*]) => {
        $(#[$doc])*
        #[inline(always)]
        pub unsafe fn $name(o: &mut [[f32; 4]; 16], a: [[u32; 4]; $frags], v: u64) {
            core::arch::asm!(
                concat!(
                    "{{\n.reg .pred acc;\n.reg .b64 vd;\n.reg .b32 vl, vh;\n",
                    "setp.eq.b32 acc, {z}, 0;\nwgmma.fence.sync.aligned;\n",
                    "wgmma.mma_async.sync.aligned.m64n128k16.f32.", $ty, ".", $ty, " {{{o0}, {o1}, {o2}, {o3}, {o4}, {o5}, {o6}, {o7}, {o8}, {o9}, {o10}, {o11}, {o12}, {o13}, {o14}, {o15}, {o16}, {o17}, {o18}, {o19}, {o20}, {o21}, {o22}, {o23}, {o24}, {o25}, {o26}, {o27}, {o28}, {o29}, {o30}, {o31}, {o32}, {o33}, {o34}, {o35}, {o36}, {o37}, {o38}, {o39}, {o40}, {o41}, {o42}, {o43}, {o44}, {o45}, {o46}, {o47}, {o48}, {o49}, {o50}, {o51}, {o52}, {o53}, {o54}, {o55}, {o56}, {o57}, {o58}, {o59}, {o60}, {o61}, {o62}, {o63}}}, {{{a0}, {a1}, {a2}, {a3}}}, {v}, acc, 1, 1, 1;\n",
                    "mov.b64 {{vl, vh}}, {v};\n",
                    $(
                        "add.u32 vl, vl, 128;\nmov.b64 vd, {{vl, vh}};\n",
                        "wgmma.mma_async.sync.aligned.m64n128k16.f32.", $ty, ".", $ty, " {{{o0}, {o1}, {o2}, {o3}, {o4}, {o5}, {o6}, {o7}, {o8}, {o9}, {o10}, {o11}, {o12}, {o13}, {o14}, {o15}, {o16}, {o17}, {o18}, {o19}, {o20}, {o21}, {o22}, {o23}, {o24}, {o25}, {o26}, {o27}, {o28}, {o29}, {o30}, {o31}, {o32}, {o33}, {o34}, {o35}, {o36}, {o37}, {o38}, {o39}, {o40}, {o41}, {o42}, {o43}, {o44}, {o45}, {o46}, {o47}, {o48}, {o49}, {o50}, {o51}, {o52}, {o53}, {o54}, {o55}, {o56}, {o57}, {o58}, {o59}, {o60}, {o61}, {o62}, {o63}}}, {{{", stringify!($b0), "}, {", stringify!($b1), "}, {", stringify!($b2), "}, {", stringify!($b3), "}}}, vd, acc, 1, 1, 1;\n",
                    )*
                    "wgmma.commit_group.sync.aligned;\nwgmma.wait_group.sync.aligned 0;\n}}"
                ),
                v = in(reg64) v, z = in(reg32) 0u32,
                o0 = inout(reg32) o[0][0], o1 = inout(reg32) o[0][1], o2 = inout(reg32) o[0][2], o3 = inout(reg32) o[0][3],
                o4 = inout(reg32) o[1][0], o5 = inout(reg32) o[1][1], o6 = inout(reg32) o[1][2], o7 = inout(reg32) o[1][3],
                o8 = inout(reg32) o[2][0], o9 = inout(reg32) o[2][1], o10 = inout(reg32) o[2][2], o11 = inout(reg32) o[2][3],
                o12 = inout(reg32) o[3][0], o13 = inout(reg32) o[3][1], o14 = inout(reg32) o[3][2], o15 = inout(reg32) o[3][3],
                o16 = inout(reg32) o[4][0], o17 = inout(reg32) o[4][1], o18 = inout(reg32) o[4][2], o19 = inout(reg32) o[4][3],
                o20 = inout(reg32) o[5][0], o21 = inout(reg32) o[5][1], o22 = inout(reg32) o[5][2], o23 = inout(reg32) o[5][3],
                o24 = inout(reg32) o[6][0], o25 = inout(reg32) o[6][1], o26 = inout(reg32) o[6][2], o27 = inout(reg32) o[6][3],
                o28 = inout(reg32) o[7][0], o29 = inout(reg32) o[7][1], o30 = inout(reg32) o[7][2], o31 = inout(reg32) o[7][3],
                o32 = inout(reg32) o[8][0], o33 = inout(reg32) o[8][1], o34 = inout(reg32) o[8][2], o35 = inout(reg32) o[8][3],
                o36 = inout(reg32) o[9][0], o37 = inout(reg32) o[9][1], o38 = inout(reg32) o[9][2], o39 = inout(reg32) o[9][3],
                o40 = inout(reg32) o[10][0], o41 = inout(reg32) o[10][1], o42 = inout(reg32) o[10][2], o43 = inout(reg32) o[10][3],
                o44 = inout(reg32) o[11][0], o45 = inout(reg32) o[11][1], o46 = inout(reg32) o[11][2], o47 = inout(reg32) o[11][3],
                o48 = inout(reg32) o[12][0], o49 = inout(reg32) o[12][1], o50 = inout(reg32) o[12][2], o51 = inout(reg32) o[12][3],
                o52 = inout(reg32) o[13][0], o53 = inout(reg32) o[13][1], o54 = inout(reg32) o[13][2], o55 = inout(reg32) o[13][3],
                o56 = inout(reg32) o[14][0], o57 = inout(reg32) o[14][1], o58 = inout(reg32) o[14][2], o59 = inout(reg32) o[14][3],
                o60 = inout(reg32) o[15][0], o61 = inout(reg32) o[15][1], o62 = inout(reg32) o[15][2], o63 = inout(reg32) o[15][3],
                a0 = in(reg32) a[0][0], a1 = in(reg32) a[0][1], a2 = in(reg32) a[0][2], a3 = in(reg32) a[0][3],
                $($b0 = in(reg32) a[$h][0], $b1 = in(reg32) a[$h][1], $b2 = in(reg32) a[$h][2], $b3 = in(reg32) a[$h][3],)*
                options(nostack)
            );
        }
    };
}

macro_rules! wgmma_d128 {
    ($scores:ident, $pv:ident, $scores64:ident, $pv64:ident, $ty:literal) => {
        wgmma_scores_d128!(
            /// `S = Q·Kᵀ` for one 64-row tile of Q and 32 keys, head_dim 128:
            /// eight `m64n32k16` steps. `q` describes Q (K-major: rows × dims)
            /// and `k` the 32 keys' K rows (K-major: keys × dims), both in
            /// tiles of 64 rows: step `j`'s dims are 32 bytes on within a
            /// column block, and dims 64.. are in the next block, 8192 bytes
            /// on. Returns the accumulator: n8 tile `j` (keys `8j..`) in
            /// elements `4j..4j+4`.
            ///
            /// # Safety
            /// All 128 threads of the warpgroup call it together (it is
            /// `.sync.aligned`); both tiles hold finite values landed by
            /// `cp.async` before a block barrier (no proxy fence: as CUTLASS's
            /// cp.async GMMA mainloop, `decode::pipeline`).
            $scores, $ty, 32, 16, [s0 = 0, s1 = 1, s2 = 2, s3 = 3, s4 = 4, s5 = 5, s6 = 6, s7 = 7, s8 = 8, s9 = 9, s10 = 10, s11 = 11, s12 = 12, s13 = 13, s14 = 14, s15 = 15]
        );
        wgmma_scores_d128!(
            /// The score MMA of a 64-key step: as the 32-key one, eight
            /// `m64n64k16` steps over the tile's 64 K rows.
            ///
            /// # Safety
            /// As the 32-key score MMA.
            $scores64, $ty, 64, 32, [s0 = 0, s1 = 1, s2 = 2, s3 = 3, s4 = 4, s5 = 5, s6 = 6, s7 = 7, s8 = 8, s9 = 9, s10 = 10, s11 = 11, s12 = 12, s13 = 13, s14 = 14, s15 = 15, s16 = 16, s17 = 17, s18 = 18, s19 = 19, s20 = 20, s21 = 21, s22 = 22, s23 = 23, s24 = 24, s25 = 25, s26 = 26, s27 = 27, s28 = 28, s29 = 29, s30 = 30, s31 = 31]
        );
        wgmma_pv_d128!(
            /// `O += P·V` for 32 keys and head_dim 128: two `m64n128k16` steps
            /// with P from registers (`a[h]`: the A fragment of keys `16h..`)
            /// and V through `v`, its 32 keys' rows MN-major (keys × dims, dims
            /// contiguous; the second step's 16 keys 2048 bytes on). `o[j]` is
            /// the accumulator's n8 tile `j` (dims `8j..`).
            ///
            /// # Safety
            /// As the score MMA.
            $pv, $ty, 2, [(1: a4, a5, a6, a7)]
        );
        wgmma_pv_d128!(
            /// The P·V MMA of a 64-key step: as the 32-key one, four
            /// `m64n128k16` steps (`a[h]`: keys `16h..`).
            ///
            /// # Safety
            /// As the 32-key P·V MMA.
            $pv64, $ty, 4, [(1: a4, a5, a6, a7), (2: a8, a9, a10, a11), (3: a12, a13, a14, a15)]
        );
    };
}
wgmma_d128!(scores_bf16_d128, pv_bf16_d128, scores64_bf16_d128, pv64_bf16_d128, "bf16");
wgmma_d128!(scores_f16_d128, pv_f16_d128, scores64_f16_d128, pv64_f16_d128, "f16");

