//! Hopper's warpgroup MMA (`wgmma.mma_async`, sm_90a) for `Variant::Wgmma`.
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

macro_rules! wgmma_d128 {
    ($scores:ident, $pv:ident, $ty:literal) => {
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
        #[inline(always)]
        pub unsafe fn $scores(q: u64, k: u64) -> [f32; 16] {
            let mut s = [0f32; 16];
            core::arch::asm!(
                concat!(
                    "{{\n.reg .pred first, acc;\n.reg .b64 qd, kd;\n.reg .b32 ql, qh, kl, kh, qa, ka;\n",
                    "mov.b64 {{ql, qh}}, {q};\nmov.b64 {{kl, kh}}, {k};\n",
                    "setp.ne.b32 first, {z}, 0;\nsetp.eq.b32 acc, {z}, 0;\nwgmma.fence.sync.aligned;\n",
                    "wgmma.mma_async.sync.aligned.m64n32k16.f32.", $ty, ".", $ty, " {{{s0}, {s1}, {s2}, {s3}, {s4}, {s5}, {s6}, {s7}, {s8}, {s9}, {s10}, {s11}, {s12}, {s13}, {s14}, {s15}}}, {q}, {k}, first, 1, 1, 0, 0;\n",
                    "add.u32 qa, ql, 2;\nadd.u32 ka, kl, 2;\nmov.b64 qd, {{qa, qh}};\nmov.b64 kd, {{ka, kh}};\n",
                    "wgmma.mma_async.sync.aligned.m64n32k16.f32.", $ty, ".", $ty, " {{{s0}, {s1}, {s2}, {s3}, {s4}, {s5}, {s6}, {s7}, {s8}, {s9}, {s10}, {s11}, {s12}, {s13}, {s14}, {s15}}}, qd, kd, acc, 1, 1, 0, 0;\n",
                    "add.u32 qa, ql, 4;\nadd.u32 ka, kl, 4;\nmov.b64 qd, {{qa, qh}};\nmov.b64 kd, {{ka, kh}};\n",
                    "wgmma.mma_async.sync.aligned.m64n32k16.f32.", $ty, ".", $ty, " {{{s0}, {s1}, {s2}, {s3}, {s4}, {s5}, {s6}, {s7}, {s8}, {s9}, {s10}, {s11}, {s12}, {s13}, {s14}, {s15}}}, qd, kd, acc, 1, 1, 0, 0;\n",
                    "add.u32 qa, ql, 6;\nadd.u32 ka, kl, 6;\nmov.b64 qd, {{qa, qh}};\nmov.b64 kd, {{ka, kh}};\n",
                    "wgmma.mma_async.sync.aligned.m64n32k16.f32.", $ty, ".", $ty, " {{{s0}, {s1}, {s2}, {s3}, {s4}, {s5}, {s6}, {s7}, {s8}, {s9}, {s10}, {s11}, {s12}, {s13}, {s14}, {s15}}}, qd, kd, acc, 1, 1, 0, 0;\n",
                    "add.u32 qa, ql, 512;\nadd.u32 ka, kl, 512;\nmov.b64 qd, {{qa, qh}};\nmov.b64 kd, {{ka, kh}};\n",
                    "wgmma.mma_async.sync.aligned.m64n32k16.f32.", $ty, ".", $ty, " {{{s0}, {s1}, {s2}, {s3}, {s4}, {s5}, {s6}, {s7}, {s8}, {s9}, {s10}, {s11}, {s12}, {s13}, {s14}, {s15}}}, qd, kd, acc, 1, 1, 0, 0;\n",
                    "add.u32 qa, ql, 514;\nadd.u32 ka, kl, 514;\nmov.b64 qd, {{qa, qh}};\nmov.b64 kd, {{ka, kh}};\n",
                    "wgmma.mma_async.sync.aligned.m64n32k16.f32.", $ty, ".", $ty, " {{{s0}, {s1}, {s2}, {s3}, {s4}, {s5}, {s6}, {s7}, {s8}, {s9}, {s10}, {s11}, {s12}, {s13}, {s14}, {s15}}}, qd, kd, acc, 1, 1, 0, 0;\n",
                    "add.u32 qa, ql, 516;\nadd.u32 ka, kl, 516;\nmov.b64 qd, {{qa, qh}};\nmov.b64 kd, {{ka, kh}};\n",
                    "wgmma.mma_async.sync.aligned.m64n32k16.f32.", $ty, ".", $ty, " {{{s0}, {s1}, {s2}, {s3}, {s4}, {s5}, {s6}, {s7}, {s8}, {s9}, {s10}, {s11}, {s12}, {s13}, {s14}, {s15}}}, qd, kd, acc, 1, 1, 0, 0;\n",
                    "add.u32 qa, ql, 518;\nadd.u32 ka, kl, 518;\nmov.b64 qd, {{qa, qh}};\nmov.b64 kd, {{ka, kh}};\n",
                    "wgmma.mma_async.sync.aligned.m64n32k16.f32.", $ty, ".", $ty, " {{{s0}, {s1}, {s2}, {s3}, {s4}, {s5}, {s6}, {s7}, {s8}, {s9}, {s10}, {s11}, {s12}, {s13}, {s14}, {s15}}}, qd, kd, acc, 1, 1, 0, 0;\n",
                    "wgmma.commit_group.sync.aligned;\nwgmma.wait_group.sync.aligned 0;\n}}"
                ),
                q = in(reg64) q, k = in(reg64) k, z = in(reg32) 0u32,
                    s0 = out(reg32) s[0], s1 = out(reg32) s[1], s2 = out(reg32) s[2], s3 = out(reg32) s[3],
                    s4 = out(reg32) s[4], s5 = out(reg32) s[5], s6 = out(reg32) s[6], s7 = out(reg32) s[7],
                    s8 = out(reg32) s[8], s9 = out(reg32) s[9], s10 = out(reg32) s[10], s11 = out(reg32) s[11],
                    s12 = out(reg32) s[12], s13 = out(reg32) s[13], s14 = out(reg32) s[14], s15 = out(reg32) s[15],
                options(nostack)
            );
            s
        }

        /// `O += P·V` for 32 keys and head_dim 128: two `m64n128k16` steps
        /// with P from registers (`a[h]`: the A fragment of keys `16h..`)
        /// and V through `v`, its 32 keys' rows MN-major (keys × dims, dims
        /// contiguous; the second step's 16 keys 2048 bytes on). `o[j]` is
        /// the accumulator's n8 tile `j` (dims `8j..`).
        ///
        /// # Safety
        /// As the score MMA.
        #[inline(always)]
        pub unsafe fn $pv(o: &mut [[f32; 4]; 16], a: [[u32; 4]; 2], v: u64) {
            core::arch::asm!(
                concat!(
                    "{{\n.reg .pred acc;\n.reg .b64 vd;\n.reg .b32 vl, vh;\n",
                    "setp.eq.b32 acc, {z}, 0;\nwgmma.fence.sync.aligned;\n",
                    "wgmma.mma_async.sync.aligned.m64n128k16.f32.", $ty, ".", $ty, " {{{o0}, {o1}, {o2}, {o3}, {o4}, {o5}, {o6}, {o7}, {o8}, {o9}, {o10}, {o11}, {o12}, {o13}, {o14}, {o15}, {o16}, {o17}, {o18}, {o19}, {o20}, {o21}, {o22}, {o23}, {o24}, {o25}, {o26}, {o27}, {o28}, {o29}, {o30}, {o31}, {o32}, {o33}, {o34}, {o35}, {o36}, {o37}, {o38}, {o39}, {o40}, {o41}, {o42}, {o43}, {o44}, {o45}, {o46}, {o47}, {o48}, {o49}, {o50}, {o51}, {o52}, {o53}, {o54}, {o55}, {o56}, {o57}, {o58}, {o59}, {o60}, {o61}, {o62}, {o63}}}, {{{a0}, {a1}, {a2}, {a3}}}, {v}, acc, 1, 1, 1;\n",
                    "mov.b64 {{vl, vh}}, {v};\nadd.u32 vl, vl, 128;\nmov.b64 vd, {{vl, vh}};\n",
                    "wgmma.mma_async.sync.aligned.m64n128k16.f32.", $ty, ".", $ty, " {{{o0}, {o1}, {o2}, {o3}, {o4}, {o5}, {o6}, {o7}, {o8}, {o9}, {o10}, {o11}, {o12}, {o13}, {o14}, {o15}, {o16}, {o17}, {o18}, {o19}, {o20}, {o21}, {o22}, {o23}, {o24}, {o25}, {o26}, {o27}, {o28}, {o29}, {o30}, {o31}, {o32}, {o33}, {o34}, {o35}, {o36}, {o37}, {o38}, {o39}, {o40}, {o41}, {o42}, {o43}, {o44}, {o45}, {o46}, {o47}, {o48}, {o49}, {o50}, {o51}, {o52}, {o53}, {o54}, {o55}, {o56}, {o57}, {o58}, {o59}, {o60}, {o61}, {o62}, {o63}}}, {{{a4}, {a5}, {a6}, {a7}}}, vd, acc, 1, 1, 1;\n",
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
                    a0 = in(reg32) a[0][0], a1 = in(reg32) a[0][1], a2 = in(reg32) a[0][2], a3 = in(reg32) a[0][3], a4 = in(reg32) a[1][0], a5 = in(reg32) a[1][1], a6 = in(reg32) a[1][2], a7 = in(reg32) a[1][3],
                options(nostack)
            );
        }
    };
}
wgmma_d128!(scores_bf16_d128, pv_bf16_d128, "bf16");
wgmma_d128!(scores_f16_d128, pv_f16_d128, "f16");

macro_rules! wgmma_d128_64 {
    ($scores:ident, $pv:ident, $ty:literal) => {
        /// The score MMA of a 64-key step: `S = Q·Kᵀ` for one 64-row tile
        /// of Q and 64 keys, head_dim 128, eight `m64n64k16` steps (as the
        /// 32-key form, with the tile's 64 K rows). Returns the
        /// accumulator: n8 tile `j` (keys `8j..`) in elements `4j..4j+4`.
        ///
        /// # Safety
        /// As the 32-key score MMA.
        #[inline(always)]
        pub unsafe fn $scores(q: u64, k: u64) -> [f32; 32] {
            let mut s = [0f32; 32];
            core::arch::asm!(
                concat!(
                    "{{\n.reg .pred first, acc;\n.reg .b64 qd, kd;\n.reg .b32 ql, qh, kl, kh, qa, ka;\n",
                    "mov.b64 {{ql, qh}}, {q};\nmov.b64 {{kl, kh}}, {k};\n",
                    "setp.ne.b32 first, {z}, 0;\nsetp.eq.b32 acc, {z}, 0;\nwgmma.fence.sync.aligned;\n",
                    "wgmma.mma_async.sync.aligned.m64n64k16.f32.", $ty, ".", $ty, " {{{s0}, {s1}, {s2}, {s3}, {s4}, {s5}, {s6}, {s7}, {s8}, {s9}, {s10}, {s11}, {s12}, {s13}, {s14}, {s15}, {s16}, {s17}, {s18}, {s19}, {s20}, {s21}, {s22}, {s23}, {s24}, {s25}, {s26}, {s27}, {s28}, {s29}, {s30}, {s31}}}, {q}, {k}, first, 1, 1, 0, 0;\n",
                    "add.u32 qa, ql, 2;\nadd.u32 ka, kl, 2;\nmov.b64 qd, {{qa, qh}};\nmov.b64 kd, {{ka, kh}};\n",
                    "wgmma.mma_async.sync.aligned.m64n64k16.f32.", $ty, ".", $ty, " {{{s0}, {s1}, {s2}, {s3}, {s4}, {s5}, {s6}, {s7}, {s8}, {s9}, {s10}, {s11}, {s12}, {s13}, {s14}, {s15}, {s16}, {s17}, {s18}, {s19}, {s20}, {s21}, {s22}, {s23}, {s24}, {s25}, {s26}, {s27}, {s28}, {s29}, {s30}, {s31}}}, qd, kd, acc, 1, 1, 0, 0;\n",
                    "add.u32 qa, ql, 4;\nadd.u32 ka, kl, 4;\nmov.b64 qd, {{qa, qh}};\nmov.b64 kd, {{ka, kh}};\n",
                    "wgmma.mma_async.sync.aligned.m64n64k16.f32.", $ty, ".", $ty, " {{{s0}, {s1}, {s2}, {s3}, {s4}, {s5}, {s6}, {s7}, {s8}, {s9}, {s10}, {s11}, {s12}, {s13}, {s14}, {s15}, {s16}, {s17}, {s18}, {s19}, {s20}, {s21}, {s22}, {s23}, {s24}, {s25}, {s26}, {s27}, {s28}, {s29}, {s30}, {s31}}}, qd, kd, acc, 1, 1, 0, 0;\n",
                    "add.u32 qa, ql, 6;\nadd.u32 ka, kl, 6;\nmov.b64 qd, {{qa, qh}};\nmov.b64 kd, {{ka, kh}};\n",
                    "wgmma.mma_async.sync.aligned.m64n64k16.f32.", $ty, ".", $ty, " {{{s0}, {s1}, {s2}, {s3}, {s4}, {s5}, {s6}, {s7}, {s8}, {s9}, {s10}, {s11}, {s12}, {s13}, {s14}, {s15}, {s16}, {s17}, {s18}, {s19}, {s20}, {s21}, {s22}, {s23}, {s24}, {s25}, {s26}, {s27}, {s28}, {s29}, {s30}, {s31}}}, qd, kd, acc, 1, 1, 0, 0;\n",
                    "add.u32 qa, ql, 512;\nadd.u32 ka, kl, 512;\nmov.b64 qd, {{qa, qh}};\nmov.b64 kd, {{ka, kh}};\n",
                    "wgmma.mma_async.sync.aligned.m64n64k16.f32.", $ty, ".", $ty, " {{{s0}, {s1}, {s2}, {s3}, {s4}, {s5}, {s6}, {s7}, {s8}, {s9}, {s10}, {s11}, {s12}, {s13}, {s14}, {s15}, {s16}, {s17}, {s18}, {s19}, {s20}, {s21}, {s22}, {s23}, {s24}, {s25}, {s26}, {s27}, {s28}, {s29}, {s30}, {s31}}}, qd, kd, acc, 1, 1, 0, 0;\n",
                    "add.u32 qa, ql, 514;\nadd.u32 ka, kl, 514;\nmov.b64 qd, {{qa, qh}};\nmov.b64 kd, {{ka, kh}};\n",
                    "wgmma.mma_async.sync.aligned.m64n64k16.f32.", $ty, ".", $ty, " {{{s0}, {s1}, {s2}, {s3}, {s4}, {s5}, {s6}, {s7}, {s8}, {s9}, {s10}, {s11}, {s12}, {s13}, {s14}, {s15}, {s16}, {s17}, {s18}, {s19}, {s20}, {s21}, {s22}, {s23}, {s24}, {s25}, {s26}, {s27}, {s28}, {s29}, {s30}, {s31}}}, qd, kd, acc, 1, 1, 0, 0;\n",
                    "add.u32 qa, ql, 516;\nadd.u32 ka, kl, 516;\nmov.b64 qd, {{qa, qh}};\nmov.b64 kd, {{ka, kh}};\n",
                    "wgmma.mma_async.sync.aligned.m64n64k16.f32.", $ty, ".", $ty, " {{{s0}, {s1}, {s2}, {s3}, {s4}, {s5}, {s6}, {s7}, {s8}, {s9}, {s10}, {s11}, {s12}, {s13}, {s14}, {s15}, {s16}, {s17}, {s18}, {s19}, {s20}, {s21}, {s22}, {s23}, {s24}, {s25}, {s26}, {s27}, {s28}, {s29}, {s30}, {s31}}}, qd, kd, acc, 1, 1, 0, 0;\n",
                    "add.u32 qa, ql, 518;\nadd.u32 ka, kl, 518;\nmov.b64 qd, {{qa, qh}};\nmov.b64 kd, {{ka, kh}};\n",
                    "wgmma.mma_async.sync.aligned.m64n64k16.f32.", $ty, ".", $ty, " {{{s0}, {s1}, {s2}, {s3}, {s4}, {s5}, {s6}, {s7}, {s8}, {s9}, {s10}, {s11}, {s12}, {s13}, {s14}, {s15}, {s16}, {s17}, {s18}, {s19}, {s20}, {s21}, {s22}, {s23}, {s24}, {s25}, {s26}, {s27}, {s28}, {s29}, {s30}, {s31}}}, qd, kd, acc, 1, 1, 0, 0;\n",
                    "wgmma.commit_group.sync.aligned;\nwgmma.wait_group.sync.aligned 0;\n}}"
                ),
                q = in(reg64) q, k = in(reg64) k, z = in(reg32) 0u32,
                    s0 = out(reg32) s[0], s1 = out(reg32) s[1], s2 = out(reg32) s[2], s3 = out(reg32) s[3],
                    s4 = out(reg32) s[4], s5 = out(reg32) s[5], s6 = out(reg32) s[6], s7 = out(reg32) s[7],
                    s8 = out(reg32) s[8], s9 = out(reg32) s[9], s10 = out(reg32) s[10], s11 = out(reg32) s[11],
                    s12 = out(reg32) s[12], s13 = out(reg32) s[13], s14 = out(reg32) s[14], s15 = out(reg32) s[15],
                    s16 = out(reg32) s[16], s17 = out(reg32) s[17], s18 = out(reg32) s[18], s19 = out(reg32) s[19],
                    s20 = out(reg32) s[20], s21 = out(reg32) s[21], s22 = out(reg32) s[22], s23 = out(reg32) s[23],
                    s24 = out(reg32) s[24], s25 = out(reg32) s[25], s26 = out(reg32) s[26], s27 = out(reg32) s[27],
                    s28 = out(reg32) s[28], s29 = out(reg32) s[29], s30 = out(reg32) s[30], s31 = out(reg32) s[31],
                options(nostack)
            );
            s
        }

        /// The P·V MMA of a 64-key step: `O += P·V` for 64 keys and
        /// head_dim 128, four `m64n128k16` steps with P from registers
        /// (`a[h]`: the A fragment of keys `16h..`) and V through `v`, its
        /// keys' rows MN-major (step `h`'s 16 keys `2048 h` bytes on).
        ///
        /// # Safety
        /// As the 32-key P·V MMA.
        #[inline(always)]
        pub unsafe fn $pv(o: &mut [[f32; 4]; 16], a: [[u32; 4]; 4], v: u64) {
            core::arch::asm!(
                concat!(
                    "{{\n.reg .pred acc;\n.reg .b64 vd;\n.reg .b32 vl, vh, va;\n",
                    "setp.eq.b32 acc, {z}, 0;\nwgmma.fence.sync.aligned;\nmov.b64 {{vl, vh}}, {v};\n",
                    "wgmma.mma_async.sync.aligned.m64n128k16.f32.", $ty, ".", $ty, " {{{o0}, {o1}, {o2}, {o3}, {o4}, {o5}, {o6}, {o7}, {o8}, {o9}, {o10}, {o11}, {o12}, {o13}, {o14}, {o15}, {o16}, {o17}, {o18}, {o19}, {o20}, {o21}, {o22}, {o23}, {o24}, {o25}, {o26}, {o27}, {o28}, {o29}, {o30}, {o31}, {o32}, {o33}, {o34}, {o35}, {o36}, {o37}, {o38}, {o39}, {o40}, {o41}, {o42}, {o43}, {o44}, {o45}, {o46}, {o47}, {o48}, {o49}, {o50}, {o51}, {o52}, {o53}, {o54}, {o55}, {o56}, {o57}, {o58}, {o59}, {o60}, {o61}, {o62}, {o63}}}, {{{a0}, {a1}, {a2}, {a3}}}, {v}, acc, 1, 1, 1;\n",
                    "add.u32 va, vl, 128;\nmov.b64 vd, {{va, vh}};\n",
                    "wgmma.mma_async.sync.aligned.m64n128k16.f32.", $ty, ".", $ty, " {{{o0}, {o1}, {o2}, {o3}, {o4}, {o5}, {o6}, {o7}, {o8}, {o9}, {o10}, {o11}, {o12}, {o13}, {o14}, {o15}, {o16}, {o17}, {o18}, {o19}, {o20}, {o21}, {o22}, {o23}, {o24}, {o25}, {o26}, {o27}, {o28}, {o29}, {o30}, {o31}, {o32}, {o33}, {o34}, {o35}, {o36}, {o37}, {o38}, {o39}, {o40}, {o41}, {o42}, {o43}, {o44}, {o45}, {o46}, {o47}, {o48}, {o49}, {o50}, {o51}, {o52}, {o53}, {o54}, {o55}, {o56}, {o57}, {o58}, {o59}, {o60}, {o61}, {o62}, {o63}}}, {{{a4}, {a5}, {a6}, {a7}}}, vd, acc, 1, 1, 1;\n",
                    "add.u32 va, vl, 256;\nmov.b64 vd, {{va, vh}};\n",
                    "wgmma.mma_async.sync.aligned.m64n128k16.f32.", $ty, ".", $ty, " {{{o0}, {o1}, {o2}, {o3}, {o4}, {o5}, {o6}, {o7}, {o8}, {o9}, {o10}, {o11}, {o12}, {o13}, {o14}, {o15}, {o16}, {o17}, {o18}, {o19}, {o20}, {o21}, {o22}, {o23}, {o24}, {o25}, {o26}, {o27}, {o28}, {o29}, {o30}, {o31}, {o32}, {o33}, {o34}, {o35}, {o36}, {o37}, {o38}, {o39}, {o40}, {o41}, {o42}, {o43}, {o44}, {o45}, {o46}, {o47}, {o48}, {o49}, {o50}, {o51}, {o52}, {o53}, {o54}, {o55}, {o56}, {o57}, {o58}, {o59}, {o60}, {o61}, {o62}, {o63}}}, {{{a8}, {a9}, {a10}, {a11}}}, vd, acc, 1, 1, 1;\n",
                    "add.u32 va, vl, 384;\nmov.b64 vd, {{va, vh}};\n",
                    "wgmma.mma_async.sync.aligned.m64n128k16.f32.", $ty, ".", $ty, " {{{o0}, {o1}, {o2}, {o3}, {o4}, {o5}, {o6}, {o7}, {o8}, {o9}, {o10}, {o11}, {o12}, {o13}, {o14}, {o15}, {o16}, {o17}, {o18}, {o19}, {o20}, {o21}, {o22}, {o23}, {o24}, {o25}, {o26}, {o27}, {o28}, {o29}, {o30}, {o31}, {o32}, {o33}, {o34}, {o35}, {o36}, {o37}, {o38}, {o39}, {o40}, {o41}, {o42}, {o43}, {o44}, {o45}, {o46}, {o47}, {o48}, {o49}, {o50}, {o51}, {o52}, {o53}, {o54}, {o55}, {o56}, {o57}, {o58}, {o59}, {o60}, {o61}, {o62}, {o63}}}, {{{a12}, {a13}, {a14}, {a15}}}, vd, acc, 1, 1, 1;\n",
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
                    a4 = in(reg32) a[1][0], a5 = in(reg32) a[1][1], a6 = in(reg32) a[1][2], a7 = in(reg32) a[1][3],
                    a8 = in(reg32) a[2][0], a9 = in(reg32) a[2][1], a10 = in(reg32) a[2][2], a11 = in(reg32) a[2][3],
                    a12 = in(reg32) a[3][0], a13 = in(reg32) a[3][1], a14 = in(reg32) a[3][2], a15 = in(reg32) a[3][3],
                options(nostack)
            );
        }
    };
}
wgmma_d128_64!(scores64_bf16_d128, pv64_bf16_d128, "bf16");
wgmma_d128_64!(scores64_f16_d128, pv64_f16_d128, "f16");
