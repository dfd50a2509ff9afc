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

/// The 128 accumulator operands of [`asm_o128`] as a wgmma's D list
/// (`{o0, .., o127}`, braces escaped for `asm!`).
macro_rules! o128 {
    () => {
        "{{{o0}, {o1}, {o2}, {o3}, {o4}, {o5}, {o6}, {o7}, {o8}, {o9}, {o10}, {o11}, {o12}, {o13}, {o14}, {o15}, {o16}, {o17}, {o18}, {o19}, {o20}, {o21}, {o22}, {o23}, {o24}, {o25}, {o26}, {o27}, {o28}, {o29}, {o30}, {o31}, {o32}, {o33}, {o34}, {o35}, {o36}, {o37}, {o38}, {o39}, {o40}, {o41}, {o42}, {o43}, {o44}, {o45}, {o46}, {o47}, {o48}, {o49}, {o50}, {o51}, {o52}, {o53}, {o54}, {o55}, {o56}, {o57}, {o58}, {o59}, {o60}, {o61}, {o62}, {o63}, {o64}, {o65}, {o66}, {o67}, {o68}, {o69}, {o70}, {o71}, {o72}, {o73}, {o74}, {o75}, {o76}, {o77}, {o78}, {o79}, {o80}, {o81}, {o82}, {o83}, {o84}, {o85}, {o86}, {o87}, {o88}, {o89}, {o90}, {o91}, {o92}, {o93}, {o94}, {o95}, {o96}, {o97}, {o98}, {o99}, {o100}, {o101}, {o102}, {o103}, {o104}, {o105}, {o106}, {o107}, {o108}, {o109}, {o110}, {o111}, {o112}, {o113}, {o114}, {o115}, {o116}, {o117}, {o118}, {o119}, {o120}, {o121}, {o122}, {o123}, {o124}, {o125}, {o126}, {o127}}}"
    };
}

/// `core::arch::asm!` with the 128 accumulator operands `o0` .. `o127` of a
/// 64 × 256 f32 tile (`o: &mut [[f32; 4]; 32]`, a warpgroup's half of an
/// MLA block's O) after the given template and operands: the two MLA P·V
/// MMAs' one list.
macro_rules! asm_o128 {
    ($o:ident; $($args:tt)*) => {
        core::arch::asm!(
            $($args)*
            o0 = inout(reg32) $o[0][0],
            o1 = inout(reg32) $o[0][1],
            o2 = inout(reg32) $o[0][2],
            o3 = inout(reg32) $o[0][3],
            o4 = inout(reg32) $o[1][0],
            o5 = inout(reg32) $o[1][1],
            o6 = inout(reg32) $o[1][2],
            o7 = inout(reg32) $o[1][3],
            o8 = inout(reg32) $o[2][0],
            o9 = inout(reg32) $o[2][1],
            o10 = inout(reg32) $o[2][2],
            o11 = inout(reg32) $o[2][3],
            o12 = inout(reg32) $o[3][0],
            o13 = inout(reg32) $o[3][1],
            o14 = inout(reg32) $o[3][2],
            o15 = inout(reg32) $o[3][3],
            o16 = inout(reg32) $o[4][0],
            o17 = inout(reg32) $o[4][1],
            o18 = inout(reg32) $o[4][2],
            o19 = inout(reg32) $o[4][3],
            o20 = inout(reg32) $o[5][0],
            o21 = inout(reg32) $o[5][1],
            o22 = inout(reg32) $o[5][2],
            o23 = inout(reg32) $o[5][3],
            o24 = inout(reg32) $o[6][0],
            o25 = inout(reg32) $o[6][1],
            o26 = inout(reg32) $o[6][2],
            o27 = inout(reg32) $o[6][3],
            o28 = inout(reg32) $o[7][0],
            o29 = inout(reg32) $o[7][1],
            o30 = inout(reg32) $o[7][2],
            o31 = inout(reg32) $o[7][3],
            o32 = inout(reg32) $o[8][0],
            o33 = inout(reg32) $o[8][1],
            o34 = inout(reg32) $o[8][2],
            o35 = inout(reg32) $o[8][3],
            o36 = inout(reg32) $o[9][0],
            o37 = inout(reg32) $o[9][1],
            o38 = inout(reg32) $o[9][2],
            o39 = inout(reg32) $o[9][3],
            o40 = inout(reg32) $o[10][0],
            o41 = inout(reg32) $o[10][1],
            o42 = inout(reg32) $o[10][2],
            o43 = inout(reg32) $o[10][3],
            o44 = inout(reg32) $o[11][0],
            o45 = inout(reg32) $o[11][1],
            o46 = inout(reg32) $o[11][2],
            o47 = inout(reg32) $o[11][3],
            o48 = inout(reg32) $o[12][0],
            o49 = inout(reg32) $o[12][1],
            o50 = inout(reg32) $o[12][2],
            o51 = inout(reg32) $o[12][3],
            o52 = inout(reg32) $o[13][0],
            o53 = inout(reg32) $o[13][1],
            o54 = inout(reg32) $o[13][2],
            o55 = inout(reg32) $o[13][3],
            o56 = inout(reg32) $o[14][0],
            o57 = inout(reg32) $o[14][1],
            o58 = inout(reg32) $o[14][2],
            o59 = inout(reg32) $o[14][3],
            o60 = inout(reg32) $o[15][0],
            o61 = inout(reg32) $o[15][1],
            o62 = inout(reg32) $o[15][2],
            o63 = inout(reg32) $o[15][3],
            o64 = inout(reg32) $o[16][0],
            o65 = inout(reg32) $o[16][1],
            o66 = inout(reg32) $o[16][2],
            o67 = inout(reg32) $o[16][3],
            o68 = inout(reg32) $o[17][0],
            o69 = inout(reg32) $o[17][1],
            o70 = inout(reg32) $o[17][2],
            o71 = inout(reg32) $o[17][3],
            o72 = inout(reg32) $o[18][0],
            o73 = inout(reg32) $o[18][1],
            o74 = inout(reg32) $o[18][2],
            o75 = inout(reg32) $o[18][3],
            o76 = inout(reg32) $o[19][0],
            o77 = inout(reg32) $o[19][1],
            o78 = inout(reg32) $o[19][2],
            o79 = inout(reg32) $o[19][3],
            o80 = inout(reg32) $o[20][0],
            o81 = inout(reg32) $o[20][1],
            o82 = inout(reg32) $o[20][2],
            o83 = inout(reg32) $o[20][3],
            o84 = inout(reg32) $o[21][0],
            o85 = inout(reg32) $o[21][1],
            o86 = inout(reg32) $o[21][2],
            o87 = inout(reg32) $o[21][3],
            o88 = inout(reg32) $o[22][0],
            o89 = inout(reg32) $o[22][1],
            o90 = inout(reg32) $o[22][2],
            o91 = inout(reg32) $o[22][3],
            o92 = inout(reg32) $o[23][0],
            o93 = inout(reg32) $o[23][1],
            o94 = inout(reg32) $o[23][2],
            o95 = inout(reg32) $o[23][3],
            o96 = inout(reg32) $o[24][0],
            o97 = inout(reg32) $o[24][1],
            o98 = inout(reg32) $o[24][2],
            o99 = inout(reg32) $o[24][3],
            o100 = inout(reg32) $o[25][0],
            o101 = inout(reg32) $o[25][1],
            o102 = inout(reg32) $o[25][2],
            o103 = inout(reg32) $o[25][3],
            o104 = inout(reg32) $o[26][0],
            o105 = inout(reg32) $o[26][1],
            o106 = inout(reg32) $o[26][2],
            o107 = inout(reg32) $o[26][3],
            o108 = inout(reg32) $o[27][0],
            o109 = inout(reg32) $o[27][1],
            o110 = inout(reg32) $o[27][2],
            o111 = inout(reg32) $o[27][3],
            o112 = inout(reg32) $o[28][0],
            o113 = inout(reg32) $o[28][1],
            o114 = inout(reg32) $o[28][2],
            o115 = inout(reg32) $o[28][3],
            o116 = inout(reg32) $o[29][0],
            o117 = inout(reg32) $o[29][1],
            o118 = inout(reg32) $o[29][2],
            o119 = inout(reg32) $o[29][3],
            o120 = inout(reg32) $o[30][0],
            o121 = inout(reg32) $o[30][1],
            o122 = inout(reg32) $o[30][2],
            o123 = inout(reg32) $o[30][3],
            o124 = inout(reg32) $o[31][0],
            o125 = inout(reg32) $o[31][1],
            o126 = inout(reg32) $o[31][2],
            o127 = inout(reg32) $o[31][3],
            options(nostack)
        )
    };
}

/// `$body!("f16")` where `$f16`, else `$body!("bf16")`: an MLA MMA's
/// operand type (`decode::mla`'s `f16_mma`).
macro_rules! with_type {
    ($f16:expr, $body:ident) => {
        if $f16 {
            $body!("f16")
        } else {
            $body!("bf16")
        }
    };
}

/// `O[:, half] += P·V[:, half]` of the MLA family for 64 rows, 64 keys and
/// 256 of V's 512 columns: 4 `m64n256k16` steps, P from shared memory
/// (`p`: the 64 × 64 P tile, K-major, one swizzled column block; each k16
/// step 32 bytes on) and V through `v` (the stage's rows MN-major: 4
/// column blocks of 64 dims, `leading` 8192 bytes apart, each k16 step 16
/// keys × 128 bytes on). `o[j]` is the accumulator's n8 tile `j` (columns
/// `8j..` of the half).
///
/// P and V are bf16, or f16 where `f16` (`decode::mla`'s `f16_mma`).
///
/// # Safety
/// As [`mla_scores64`]; P was stored by the warps and fenced for the
/// tensor cores (`fence.proxy.async`) before a barrier.
#[inline(always)]
pub unsafe fn mla_pv(o: &mut [[f32; 4]; 32], p: u64, v: u64, f16: bool) {
    macro_rules! PV {
        ($ty:literal, $ops:literal) => {
            concat!("wgmma.mma_async.sync.aligned.m64n256k16.f32.", $ty, ".", $ty, " ", o128!(), ", ", $ops, ", acc, 1, 1, 0, 1;\n")
        };
    }
    macro_rules! BODY {
        ($ty:literal) => {
            asm_o128!(o;
                concat!(
                    "{{\n.reg .pred acc;\n.reg .b64 pd, vd;\n.reg .b32 pl, ph, vl, vh, pa, va;\n",
                    "mov.b64 {{pl, ph}}, {p};\nmov.b64 {{vl, vh}}, {v};\n",
                    "setp.eq.b32 acc, {z}, 0;\nwgmma.fence.sync.aligned;\n",
                    PV!($ty, "{p}, {v}"),
                    "add.u32 pa, pl, 2;\nadd.u32 va, vl, 128;\nmov.b64 pd, {{pa, ph}};\nmov.b64 vd, {{va, vh}};\n", PV!($ty, "pd, vd"),
                    "add.u32 pa, pl, 4;\nadd.u32 va, vl, 256;\nmov.b64 pd, {{pa, ph}};\nmov.b64 vd, {{va, vh}};\n", PV!($ty, "pd, vd"),
                    "add.u32 pa, pl, 6;\nadd.u32 va, vl, 384;\nmov.b64 pd, {{pa, ph}};\nmov.b64 vd, {{va, vh}};\n", PV!($ty, "pd, vd"),
                    "wgmma.commit_group.sync.aligned;\nwgmma.wait_group.sync.aligned 0;\n}}"
                ),
                p = in(reg64) p, v = in(reg64) v, z = in(reg32) 0u32,
            )
        };
    }
    with_type!(f16, BODY);
}

macro_rules! mla_score {
    ($ty:literal, $($ops:literal),+) => {
        concat!("wgmma.mma_async.sync.aligned.m64n64k16.f32.", $ty, ".", $ty, " {{{s0}, {s1}, {s2}, {s3}, {s4}, {s5}, {s6}, {s7}, {s8}, {s9}, {s10}, {s11}, {s12}, {s13}, {s14}, {s15}, {s16}, {s17}, {s18}, {s19}, {s20}, {s21}, {s22}, {s23}, {s24}, {s25}, {s26}, {s27}, {s28}, {s29}, {s30}, {s31}}}, ", $($ops),+, ", 1, 1, 0, 0;\n")
    };
}
macro_rules! mla_score_r {
    ($ty:literal, $ops:literal) => {
        concat!("wgmma.mma_async.sync.aligned.m64n64k16.f32.", $ty, ".", $ty, " {{{s0}, {s1}, {s2}, {s3}, {s4}, {s5}, {s6}, {s7}, {s8}, {s9}, {s10}, {s11}, {s12}, {s13}, {s14}, {s15}, {s16}, {s17}, {s18}, {s19}, {s20}, {s21}, {s22}, {s23}, {s24}, {s25}, {s26}, {s27}, {s28}, {s29}, {s30}, {s31}}}, ", $ops, ", acc, 1, 1, 0;\n")
    };
}
// The MLA scores' pieces (`mla_scores64`): the m64n64k16 step with
// Q from the tile (`mla_score`) and from registers (`mla_score_r`).
//
// The wait for column block `c` (its barrier `8 c` bytes on) and its
// four k16 steps from the Q tile (descriptors `512 c` on), the first
// step's accumulate predicate `$first` ("first" zero-fills). The
// `wgmma.fence` after each wait: without it, ptxas met the wait loop's
// branch between MMAs, inserted a warpgroup arrive of its own and
// serialized every wgmma of the kernel (its info C7520); with it, the
// 16-head rows went from 97 to 104 % of the copy roofline and the
// 128-head rows from 486 to 561-619 TFLOPS (docs/perf.md, "MLA kernel").
macro_rules! mla_block {
    ($ty:literal, $label:literal, $bar:literal, $at:literal, $first:literal) => {
        concat!(
            "add.u32 ba, {bars}, ", $bar, ";\n", $label, ":\nmbarrier.try_wait.parity.shared::cta.b64 ready, [ba], {parity};\n@!ready bra ", $label, ";\nwgmma.fence.sync.aligned;\n",
            "add.u32 qb, ql, ", $at, ";\nadd.u32 kb, kl, ", $at, ";\nmov.b64 qd, {{qb, qh}};\nmov.b64 kd, {{kb, kh}};\n", mla_score!($ty, "qd, kd, ", $first),
            "add.u32 qa, qb, 2;\nadd.u32 ka, kb, 2;\nmov.b64 qd, {{qa, qh}};\nmov.b64 kd, {{ka, kh}};\n", mla_score!($ty, "qd, kd, acc"),
            "add.u32 qa, qb, 4;\nadd.u32 ka, kb, 4;\nmov.b64 qd, {{qa, qh}};\nmov.b64 kd, {{ka, kh}};\n", mla_score!($ty, "qd, kd, acc"),
            "add.u32 qa, qb, 6;\nadd.u32 ka, kb, 6;\nmov.b64 qd, {{qa, qh}};\nmov.b64 kd, {{ka, kh}};\n", mla_score!($ty, "qd, kd, acc"),
        )
    };
}
// The RoPE block (8): Q's fragments from registers (the fence as above).
macro_rules! mla_rope {
    ($ty:literal) => {
        concat!(
            "add.u32 ba, {bars}, 64;\nW8:\nmbarrier.try_wait.parity.shared::cta.b64 ready, [ba], {parity};\n@!ready bra W8;\nwgmma.fence.sync.aligned;\n",
            "add.u32 ka, kl, 4096;\nmov.b64 kd, {{ka, kh}};\n", mla_score_r!($ty, "{{{r00}, {r01}, {r02}, {r03}}}, kd"),
            "add.u32 ka, kl, 4098;\nmov.b64 kd, {{ka, kh}};\n", mla_score_r!($ty, "{{{r10}, {r11}, {r12}, {r13}}}, kd"),
            "add.u32 ka, kl, 4100;\nmov.b64 kd, {{ka, kh}};\n", mla_score_r!($ty, "{{{r20}, {r21}, {r22}, {r23}}}, kd"),
            "add.u32 ka, kl, 4102;\nmov.b64 kd, {{ka, kh}};\n", mla_score_r!($ty, "{{{r30}, {r31}, {r32}, {r33}}}, kd"),
        )
    };
}

/// `S = Q·Kᵀ` of the MLA family (`decode::mla`) for a 64-row tile of Q and
/// one stage's 64 keys over the latent rows' 576 dims: 36 `m64n64k16`
/// steps. Q's first 512 dims come from the Q tile (`q`, K-major in the
/// 128-byte swizzled layout: the column blocks of 64 dims 8192 bytes apart,
/// descriptor +512; the k16 steps of a block 32 bytes, +2), its last 64
/// (the RoPE part) from registers (`rq[s]`: the A fragment of dims
/// `512 + 16 s ..`), the keys' rows through `k` (the stage, laid out as Q's
/// tile). Column block `c` of the stage is waited for on the mbarrier at
/// `bars + 8 c` (phase `parity`) before its four steps, in the order
/// `ORDER` names (`ScoreOrder`): the first steps run while the later
/// blocks land. Q and the keys are bf16, or f16 where `f16`. Returns the
/// accumulator: n8 tile `j` (keys `8j..`) in elements `4j..4j+4`.
///
/// # Safety
/// All 128 threads of the warpgroup call it together; the Q tile holds
/// values landed before a barrier; each barrier completes its phase once
/// the stage's copies of its column block landed (`cp.async.mbarrier.arrive`).
// (Its wait loops' labels are local to the asm's `{ }` block, a PTX
// scope: each inlined copy has its own, as CUTLASS's barrier waits.)
#[allow(named_asm_labels)]
#[inline(always)]
pub unsafe fn mla_scores64<const ORDER: u32>(q: u64, k: u64, rq: &[[u32; 4]; 4], bars: u32, parity: u32, f16: bool) -> [f32; 32] {
    let mut s = [0f32; 32];
    macro_rules! SCORES {
        ($($body:tt)*) => {
            core::arch::asm!(
                concat!(
                    "{{\n.reg .pred first, acc, ready;\n.reg .b64 qd, kd;\n.reg .b32 ql, qh, kl, kh, qa, ka, qb, kb, ba;\n",
                    "mov.b64 {{ql, qh}}, {q};\nmov.b64 {{kl, kh}}, {k};\n",
                    "setp.ne.b32 first, {z}, 0;\nsetp.eq.b32 acc, {z}, 0;\nwgmma.fence.sync.aligned;\n",
                    $($body)*,
                    "wgmma.commit_group.sync.aligned;\nwgmma.wait_group.sync.aligned 0;\n}}"
                ),
                q = in(reg64) q, k = in(reg64) k, z = in(reg32) 0u32, bars = in(reg32) bars, parity = in(reg32) parity,
                r00 = in(reg32) rq[0][0],
                r01 = in(reg32) rq[0][1],
                r02 = in(reg32) rq[0][2],
                r03 = in(reg32) rq[0][3],
                r10 = in(reg32) rq[1][0],
                r11 = in(reg32) rq[1][1],
                r12 = in(reg32) rq[1][2],
                r13 = in(reg32) rq[1][3],
                r20 = in(reg32) rq[2][0],
                r21 = in(reg32) rq[2][1],
                r22 = in(reg32) rq[2][2],
                r23 = in(reg32) rq[2][3],
                r30 = in(reg32) rq[3][0],
                r31 = in(reg32) rq[3][1],
                r32 = in(reg32) rq[3][2],
                r33 = in(reg32) rq[3][3],
                s0 = out(reg32) s[0],
                s1 = out(reg32) s[1],
                s2 = out(reg32) s[2],
                s3 = out(reg32) s[3],
                s4 = out(reg32) s[4],
                s5 = out(reg32) s[5],
                s6 = out(reg32) s[6],
                s7 = out(reg32) s[7],
                s8 = out(reg32) s[8],
                s9 = out(reg32) s[9],
                s10 = out(reg32) s[10],
                s11 = out(reg32) s[11],
                s12 = out(reg32) s[12],
                s13 = out(reg32) s[13],
                s14 = out(reg32) s[14],
                s15 = out(reg32) s[15],
                s16 = out(reg32) s[16],
                s17 = out(reg32) s[17],
                s18 = out(reg32) s[18],
                s19 = out(reg32) s[19],
                s20 = out(reg32) s[20],
                s21 = out(reg32) s[21],
                s22 = out(reg32) s[22],
                s23 = out(reg32) s[23],
                s24 = out(reg32) s[24],
                s25 = out(reg32) s[25],
                s26 = out(reg32) s[26],
                s27 = out(reg32) s[27],
                s28 = out(reg32) s[28],
                s29 = out(reg32) s[29],
                s30 = out(reg32) s[30],
                s31 = out(reg32) s[31],
                options(nostack)
            )
        };
    }
    macro_rules! ORDERED {
        ($ty:literal) => {
            match ORDER {
                ScoreOrder::IN_ORDER => SCORES!(
                    mla_block!($ty, "W0", "0", "0", "first"), mla_block!($ty, "W1", "8", "512", "acc"), mla_block!($ty, "W2", "16", "1024", "acc"), mla_block!($ty, "W3", "24", "1536", "acc"),
                    mla_block!($ty, "W4", "32", "2048", "acc"), mla_block!($ty, "W5", "40", "2560", "acc"), mla_block!($ty, "W6", "48", "3072", "acc"), mla_block!($ty, "W7", "56", "3584", "acc"), mla_rope!($ty)
                ),
                ScoreOrder::LEFT_FIRST => SCORES!(
                    mla_block!($ty, "W0", "0", "0", "first"), mla_block!($ty, "W1", "8", "512", "acc"), mla_block!($ty, "W2", "16", "1024", "acc"), mla_block!($ty, "W3", "24", "1536", "acc"), mla_rope!($ty),
                    mla_block!($ty, "W4", "32", "2048", "acc"), mla_block!($ty, "W5", "40", "2560", "acc"), mla_block!($ty, "W6", "48", "3072", "acc"), mla_block!($ty, "W7", "56", "3584", "acc")
                ),
                _ => SCORES!(
                    mla_block!($ty, "W4", "32", "2048", "first"), mla_block!($ty, "W5", "40", "2560", "acc"), mla_block!($ty, "W6", "48", "3072", "acc"), mla_block!($ty, "W7", "56", "3584", "acc"), mla_rope!($ty),
                    mla_block!($ty, "W0", "0", "0", "acc"), mla_block!($ty, "W1", "8", "512", "acc"), mla_block!($ty, "W2", "16", "1024", "acc"), mla_block!($ty, "W3", "24", "1536", "acc")
                ),
            }
        };
    }
    with_type!(f16, ORDERED);
    s
}

/// The order of [`mla_scores64`]'s column blocks: each warpgroup
/// waits first for the blocks its stage's loads issue first
/// (`decode::mla`, docs/perf.md "MLA kernel").
pub struct ScoreOrder;

impl ScoreOrder {
    /// Blocks 0..8, the RoPE block last.
    pub const IN_ORDER: u32 = 0;
    /// The left half of V (blocks 0..4), the RoPE block, the right half.
    pub const LEFT_FIRST: u32 = 1;
    /// The right half of V (blocks 4..8), the RoPE block, the left half.
    pub const RIGHT_FIRST: u32 = 2;
}
/// `O[:, half] += P·V[:, half]` of the MLA family with P from registers:
/// as [`mla_pv`], the A fragment of keys `16 h ..` in `a[h]` (the
/// score accumulator's n8 tiles `2h, 2h + 1`, packed).
///
/// # Safety
/// As [`mla_pv`].
#[inline(always)]
pub unsafe fn mla_pv_regs(o: &mut [[f32; 4]; 32], a: [[u32; 4]; 4], v: u64, f16: bool) {
    macro_rules! PV {
        ($ty:literal, $ops:literal) => {
            concat!("wgmma.mma_async.sync.aligned.m64n256k16.f32.", $ty, ".", $ty, " ", o128!(), ", ", $ops, ", acc, 1, 1, 1;\n")
        };
    }
    macro_rules! BODY {
        ($ty:literal) => {
            asm_o128!(o;
                concat!(
                    "{{\n.reg .pred acc;\n.reg .b64 vd;\n.reg .b32 vl, vh, va;\n",
                    "mov.b64 {{vl, vh}}, {v};\n",
                    "setp.eq.b32 acc, {z}, 0;\nwgmma.fence.sync.aligned;\n",
                    PV!($ty, "{{{a00}, {a01}, {a02}, {a03}}}, {v}"),
                    "add.u32 va, vl, 128;\nmov.b64 vd, {{va, vh}};\n", PV!($ty, "{{{a10}, {a11}, {a12}, {a13}}}, vd"),
                    "add.u32 va, vl, 256;\nmov.b64 vd, {{va, vh}};\n", PV!($ty, "{{{a20}, {a21}, {a22}, {a23}}}, vd"),
                    "add.u32 va, vl, 384;\nmov.b64 vd, {{va, vh}};\n", PV!($ty, "{{{a30}, {a31}, {a32}, {a33}}}, vd"),
                    "wgmma.commit_group.sync.aligned;\nwgmma.wait_group.sync.aligned 0;\n}}"
                ),
                v = in(reg64) v, z = in(reg32) 0u32,
                a00 = in(reg32) a[0][0],
                a01 = in(reg32) a[0][1],
                a02 = in(reg32) a[0][2],
                a03 = in(reg32) a[0][3],
                a10 = in(reg32) a[1][0],
                a11 = in(reg32) a[1][1],
                a12 = in(reg32) a[1][2],
                a13 = in(reg32) a[1][3],
                a20 = in(reg32) a[2][0],
                a21 = in(reg32) a[2][1],
                a22 = in(reg32) a[2][2],
                a23 = in(reg32) a[2][3],
                a30 = in(reg32) a[3][0],
                a31 = in(reg32) a[3][1],
                a32 = in(reg32) a[3][2],
                a33 = in(reg32) a[3][3],
            )
        };
    }
    with_type!(f16, BODY);
}

/// One `m64n16k16` step of the transposed MLA form's scores (A the keys'
/// tile, B Q's, both K-major from shared memory), into `s0 .. s7`.
macro_rules! mla_t_score {
    ($ty:literal, $($ops:literal),+) => {
        concat!("wgmma.mma_async.sync.aligned.m64n16k16.f32.", $ty, ".", $ty, " {{{s0}, {s1}, {s2}, {s3}, {s4}, {s5}, {s6}, {s7}}}, ", $($ops),+, ", 1, 1, 0, 0;\n")
    };
}
// The wait for column block `c` of the stage (its barrier `8 c` bytes on)
// and its four k16 steps: the keys' block `512 c` descriptor units on (64
// rows × 128 bytes), Q's `128 c` (16 rows × 128 bytes); the fence after
// the wait as in `mla_block`.
macro_rules! mla_t_block {
    ($ty:literal, $label:literal, $bar:literal, $k_at:literal, $q_at:literal, $first:literal) => {
        concat!(
            "add.u32 ba, {bars}, ", $bar, ";\n", $label, ":\nmbarrier.try_wait.parity.shared::cta.b64 ready, [ba], {parity};\n@!ready bra ", $label, ";\nwgmma.fence.sync.aligned;\n",
            "add.u32 kb, kl, ", $k_at, ";\nadd.u32 qb, ql, ", $q_at, ";\nmov.b64 kd, {{kb, kh}};\nmov.b64 qd, {{qb, qh}};\n", mla_t_score!($ty, "kd, qd, ", $first),
            "add.u32 ka, kb, 2;\nadd.u32 qa, qb, 2;\nmov.b64 kd, {{ka, kh}};\nmov.b64 qd, {{qa, qh}};\n", mla_t_score!($ty, "kd, qd, acc"),
            "add.u32 ka, kb, 4;\nadd.u32 qa, qb, 4;\nmov.b64 kd, {{ka, kh}};\nmov.b64 qd, {{qa, qh}};\n", mla_t_score!($ty, "kd, qd, acc"),
            "add.u32 ka, kb, 6;\nadd.u32 qa, qb, 6;\nmov.b64 kd, {{ka, kh}};\nmov.b64 qd, {{qa, qh}};\n", mla_t_score!($ty, "kd, qd, acc"),
        )
    };
}

/// `Sᵀ = K·Qᵀ` of the MLA family's transposed form (`decode::mla_transposed`)
/// for one stage's 64 keys and a 16-row Q tile over the latent rows' 576
/// dims: 36 `wgmma m64n16k16` steps, the keys along M. `k` describes the
/// stage (K-major, 128-byte swizzled, column blocks of 64 dims 8192 bytes
/// apart), `q` the Q tile (K-major, its column blocks 2048 bytes apart);
/// column block `c` is waited for on the mbarrier at `bars + 8 c` (phase
/// `parity`) before its four steps, in order. Returns the accumulator:
/// element `e` is key `16 (warp % 4) + g + 8 ((e / 2) % 2)` of row
/// `8 (e / 4) + c2 + e % 2` (`g = lane / 4`, `c2 = 2 (lane % 4)`).
///
/// Q and the keys are bf16 (fp8 per token's f16 MMAs are
/// [`mla_t_scores_e4m3`]'s).
///
/// # Safety
/// As [`mla_scores64`].
#[allow(named_asm_labels)]
#[inline(always)]
pub unsafe fn mla_t_scores(k: u64, q: u64, bars: u32, parity: u32) -> [f32; 8] {
    let mut s = [0f32; 8];
    macro_rules! BODY {
        ($ty:literal) => {
            core::arch::asm!(
                concat!(
                    "{{\n.reg .pred first, acc, ready;\n.reg .b64 qd, kd;\n.reg .b32 ql, qh, kl, kh, qa, ka, qb, kb, ba;\n",
                    "mov.b64 {{ql, qh}}, {q};\nmov.b64 {{kl, kh}}, {k};\n",
                    "setp.ne.b32 first, {z}, 0;\nsetp.eq.b32 acc, {z}, 0;\nwgmma.fence.sync.aligned;\n",
                    mla_t_block!($ty, "T0", "0", "0", "0", "first"),
                    mla_t_block!($ty, "T1", "8", "512", "128", "acc"),
                    mla_t_block!($ty, "T2", "16", "1024", "256", "acc"),
                    mla_t_block!($ty, "T3", "24", "1536", "384", "acc"),
                    mla_t_block!($ty, "T4", "32", "2048", "512", "acc"),
                    mla_t_block!($ty, "T5", "40", "2560", "640", "acc"),
                    mla_t_block!($ty, "T6", "48", "3072", "768", "acc"),
                    mla_t_block!($ty, "T7", "56", "3584", "896", "acc"),
                    mla_t_block!($ty, "T8", "64", "4096", "1024", "acc"),
                    "wgmma.commit_group.sync.aligned;\nwgmma.wait_group.sync.aligned 0;\n}}"
                ),
                q = in(reg64) q, k = in(reg64) k, z = in(reg32) 0u32, bars = in(reg32) bars, parity = in(reg32) parity,
                s0 = out(reg32) s[0],
                s1 = out(reg32) s[1],
                s2 = out(reg32) s[2],
                s3 = out(reg32) s[3],
                s4 = out(reg32) s[4],
                s5 = out(reg32) s[5],
                s6 = out(reg32) s[6],
                s7 = out(reg32) s[7],
                options(nostack)
            )
        };
    }
    BODY!("bf16");
    s
}

/// One `m64n16k16` step of the transposed form's P·V: `$d` the M-tile's
/// accumulator list, V's tile `$v` descriptor units on (read transposed:
/// dims along M), Pᵀ's k16 step `$p` units on.
macro_rules! mla_t_pv_step {
    ($ty:literal, $d:literal, $v:literal, $p:literal) => {
        concat!(
            "add.u32 va, vl, ", $v, ";\nadd.u32 pa, pl, ", $p, ";\nmov.b64 vd, {{va, vh}};\nmov.b64 pd, {{pa, ph}};\n",
            "wgmma.mma_async.sync.aligned.m64n16k16.f32.", $ty, ".", $ty, " ", $d, ", vd, pd, acc, 1, 1, 1, 0;\n"
        )
    };
}

/// `Oᵀ += Vᵀ·Pᵀ` of the MLA family's transposed form for one stage's 64
/// keys: 8 M-tiles of 64 of V's 512 dims × 4 k16 steps of 16 keys, 32
/// `wgmma m64n16k16` steps. `v` describes the stage (as the scores' `k`;
/// read MN-major, `tnspA`: M-tile `j` its column block `j`, 8192 bytes on,
/// each k16 step 16 keys × 128 bytes on), `p` the Pᵀ tile (16 rows × 64
/// keys, K-major, one swizzled column block; each k16 step 32 bytes on).
/// `o[j]` is M-tile `j`'s accumulator, laid out as [`mla_t_scores`]'s
/// (dims for keys). P and V are bf16.
///
/// # Safety
/// As [`mla_pv`].
#[inline(always)]
pub unsafe fn mla_t_pv(o: &mut [[f32; 8]; 8], p: u64, v: u64) {
    macro_rules! BODY {
        ($ty:literal) => {
            core::arch::asm!(
                concat!(
                    "{{\n.reg .pred acc;\n.reg .b64 pd, vd;\n.reg .b32 pl, ph, vl, vh, pa, va;\n",
                    "mov.b64 {{pl, ph}}, {p};\nmov.b64 {{vl, vh}}, {v};\n",
                    "setp.eq.b32 acc, {z}, 0;\nwgmma.fence.sync.aligned;\n",
                    mla_t_pv_step!($ty, "{{{o0}, {o1}, {o2}, {o3}, {o4}, {o5}, {o6}, {o7}}}", "0", "0"),
                    mla_t_pv_step!($ty, "{{{o0}, {o1}, {o2}, {o3}, {o4}, {o5}, {o6}, {o7}}}", "128", "2"),
                    mla_t_pv_step!($ty, "{{{o0}, {o1}, {o2}, {o3}, {o4}, {o5}, {o6}, {o7}}}", "256", "4"),
                    mla_t_pv_step!($ty, "{{{o0}, {o1}, {o2}, {o3}, {o4}, {o5}, {o6}, {o7}}}", "384", "6"),
                    mla_t_pv_step!($ty, "{{{o8}, {o9}, {o10}, {o11}, {o12}, {o13}, {o14}, {o15}}}", "512", "0"),
                    mla_t_pv_step!($ty, "{{{o8}, {o9}, {o10}, {o11}, {o12}, {o13}, {o14}, {o15}}}", "640", "2"),
                    mla_t_pv_step!($ty, "{{{o8}, {o9}, {o10}, {o11}, {o12}, {o13}, {o14}, {o15}}}", "768", "4"),
                    mla_t_pv_step!($ty, "{{{o8}, {o9}, {o10}, {o11}, {o12}, {o13}, {o14}, {o15}}}", "896", "6"),
                    mla_t_pv_step!($ty, "{{{o16}, {o17}, {o18}, {o19}, {o20}, {o21}, {o22}, {o23}}}", "1024", "0"),
                    mla_t_pv_step!($ty, "{{{o16}, {o17}, {o18}, {o19}, {o20}, {o21}, {o22}, {o23}}}", "1152", "2"),
                    mla_t_pv_step!($ty, "{{{o16}, {o17}, {o18}, {o19}, {o20}, {o21}, {o22}, {o23}}}", "1280", "4"),
                    mla_t_pv_step!($ty, "{{{o16}, {o17}, {o18}, {o19}, {o20}, {o21}, {o22}, {o23}}}", "1408", "6"),
                    mla_t_pv_step!($ty, "{{{o24}, {o25}, {o26}, {o27}, {o28}, {o29}, {o30}, {o31}}}", "1536", "0"),
                    mla_t_pv_step!($ty, "{{{o24}, {o25}, {o26}, {o27}, {o28}, {o29}, {o30}, {o31}}}", "1664", "2"),
                    mla_t_pv_step!($ty, "{{{o24}, {o25}, {o26}, {o27}, {o28}, {o29}, {o30}, {o31}}}", "1792", "4"),
                    mla_t_pv_step!($ty, "{{{o24}, {o25}, {o26}, {o27}, {o28}, {o29}, {o30}, {o31}}}", "1920", "6"),
                    mla_t_pv_step!($ty, "{{{o32}, {o33}, {o34}, {o35}, {o36}, {o37}, {o38}, {o39}}}", "2048", "0"),
                    mla_t_pv_step!($ty, "{{{o32}, {o33}, {o34}, {o35}, {o36}, {o37}, {o38}, {o39}}}", "2176", "2"),
                    mla_t_pv_step!($ty, "{{{o32}, {o33}, {o34}, {o35}, {o36}, {o37}, {o38}, {o39}}}", "2304", "4"),
                    mla_t_pv_step!($ty, "{{{o32}, {o33}, {o34}, {o35}, {o36}, {o37}, {o38}, {o39}}}", "2432", "6"),
                    mla_t_pv_step!($ty, "{{{o40}, {o41}, {o42}, {o43}, {o44}, {o45}, {o46}, {o47}}}", "2560", "0"),
                    mla_t_pv_step!($ty, "{{{o40}, {o41}, {o42}, {o43}, {o44}, {o45}, {o46}, {o47}}}", "2688", "2"),
                    mla_t_pv_step!($ty, "{{{o40}, {o41}, {o42}, {o43}, {o44}, {o45}, {o46}, {o47}}}", "2816", "4"),
                    mla_t_pv_step!($ty, "{{{o40}, {o41}, {o42}, {o43}, {o44}, {o45}, {o46}, {o47}}}", "2944", "6"),
                    mla_t_pv_step!($ty, "{{{o48}, {o49}, {o50}, {o51}, {o52}, {o53}, {o54}, {o55}}}", "3072", "0"),
                    mla_t_pv_step!($ty, "{{{o48}, {o49}, {o50}, {o51}, {o52}, {o53}, {o54}, {o55}}}", "3200", "2"),
                    mla_t_pv_step!($ty, "{{{o48}, {o49}, {o50}, {o51}, {o52}, {o53}, {o54}, {o55}}}", "3328", "4"),
                    mla_t_pv_step!($ty, "{{{o48}, {o49}, {o50}, {o51}, {o52}, {o53}, {o54}, {o55}}}", "3456", "6"),
                    mla_t_pv_step!($ty, "{{{o56}, {o57}, {o58}, {o59}, {o60}, {o61}, {o62}, {o63}}}", "3584", "0"),
                    mla_t_pv_step!($ty, "{{{o56}, {o57}, {o58}, {o59}, {o60}, {o61}, {o62}, {o63}}}", "3712", "2"),
                    mla_t_pv_step!($ty, "{{{o56}, {o57}, {o58}, {o59}, {o60}, {o61}, {o62}, {o63}}}", "3840", "4"),
                    mla_t_pv_step!($ty, "{{{o56}, {o57}, {o58}, {o59}, {o60}, {o61}, {o62}, {o63}}}", "3968", "6"),
                    "wgmma.commit_group.sync.aligned;\nwgmma.wait_group.sync.aligned 0;\n}}"
                ),
                p = in(reg64) p, v = in(reg64) v, z = in(reg32) 0u32,
                o0 = inout(reg32) o[0][0], o1 = inout(reg32) o[0][1], o2 = inout(reg32) o[0][2], o3 = inout(reg32) o[0][3], o4 = inout(reg32) o[0][4], o5 = inout(reg32) o[0][5], o6 = inout(reg32) o[0][6], o7 = inout(reg32) o[0][7],
                o8 = inout(reg32) o[1][0], o9 = inout(reg32) o[1][1], o10 = inout(reg32) o[1][2], o11 = inout(reg32) o[1][3], o12 = inout(reg32) o[1][4], o13 = inout(reg32) o[1][5], o14 = inout(reg32) o[1][6], o15 = inout(reg32) o[1][7],
                o16 = inout(reg32) o[2][0], o17 = inout(reg32) o[2][1], o18 = inout(reg32) o[2][2], o19 = inout(reg32) o[2][3], o20 = inout(reg32) o[2][4], o21 = inout(reg32) o[2][5], o22 = inout(reg32) o[2][6], o23 = inout(reg32) o[2][7],
                o24 = inout(reg32) o[3][0], o25 = inout(reg32) o[3][1], o26 = inout(reg32) o[3][2], o27 = inout(reg32) o[3][3], o28 = inout(reg32) o[3][4], o29 = inout(reg32) o[3][5], o30 = inout(reg32) o[3][6], o31 = inout(reg32) o[3][7],
                o32 = inout(reg32) o[4][0], o33 = inout(reg32) o[4][1], o34 = inout(reg32) o[4][2], o35 = inout(reg32) o[4][3], o36 = inout(reg32) o[4][4], o37 = inout(reg32) o[4][5], o38 = inout(reg32) o[4][6], o39 = inout(reg32) o[4][7],
                o40 = inout(reg32) o[5][0], o41 = inout(reg32) o[5][1], o42 = inout(reg32) o[5][2], o43 = inout(reg32) o[5][3], o44 = inout(reg32) o[5][4], o45 = inout(reg32) o[5][5], o46 = inout(reg32) o[5][6], o47 = inout(reg32) o[5][7],
                o48 = inout(reg32) o[6][0], o49 = inout(reg32) o[6][1], o50 = inout(reg32) o[6][2], o51 = inout(reg32) o[6][3], o52 = inout(reg32) o[6][4], o53 = inout(reg32) o[6][5], o54 = inout(reg32) o[6][6], o55 = inout(reg32) o[6][7],
                o56 = inout(reg32) o[7][0], o57 = inout(reg32) o[7][1], o58 = inout(reg32) o[7][2], o59 = inout(reg32) o[7][3], o60 = inout(reg32) o[7][4], o61 = inout(reg32) o[7][5], o62 = inout(reg32) o[7][6], o63 = inout(reg32) o[7][7],
                options(nostack)
            )
        };
    }
    BODY!("bf16");
}

/// Two raw e4m3 keys' 16-byte chunks (`$x0 .. $x3` key `g`'s, `$x4 ..
/// $x7` key `g + 8`'s) of a J block of [`mla_t_scores_e4m3`], `$o0` and
/// `$o1` bytes past the thread's first key.
macro_rules! t_e4m3_load {
    ($x:literal, $o0:literal, $o1:literal) => {
        concat!(
            "ld.shared.v4.b32 {{", $x, "0, ", $x, "1, ", $x, "2, ", $x, "3}}, [kp+", $o0, "];\n",
            "ld.shared.v4.b32 {{", $x, "4, ", $x, "5, ", $x, "6, ", $x, "7}}, [kp+", $o1, "];\n"
        )
    };
}
/// Step `$s`'s A fragment `$a0 .. $a3` from words `$s` (key `g`) and `$s4`
/// (key `g + 8`) of the raw set `$x`: each word's low e4m3 pair the
/// fragment's first two dims, its high pair the two eight on.
macro_rules! t_e4m3_a {
    ($x:literal, $s:literal, $s4:literal, $a:literal) => {
        concat!(
            "mov.b32 {{hl, hh}}, ", $x, $s, ";\ncvt.rn.f16x2.e4m3x2 ", $a, "0, hl;\ncvt.rn.f16x2.e4m3x2 ", $a, "2, hh;\n",
            "mov.b32 {{hl, hh}}, ", $x, $s4, ";\ncvt.rn.f16x2.e4m3x2 ", $a, "1, hl;\ncvt.rn.f16x2.e4m3x2 ", $a, "3, hh;\n"
        )
    };
}
/// One score step of shape `$shape` (`m64n16k16`, `m64n32k16`) into the
/// accumulator list `$acc`, A from registers `$a0 .. $a3`, Q's step `$q`
/// descriptor units on.
macro_rules! t_e4m3_mma {
    ($shape:literal, $acc:literal, $a:literal, $q:literal, $pred:literal) => {
        concat!(
            "add.u32 qa, ql, ", $q, ";\nmov.b64 qd, {{qa, qh}};\n",
            "wgmma.mma_async.sync.aligned.", $shape, ".f32.f16.f16 ", $acc, ", {{",
            $a, "0, ", $a, "1, ", $a, "2, ", $a, "3}}, qd, ", $pred, ", 1, 1, 0;\n"
        )
    };
}
/// A J block (64 dims, four k16 steps) of [`mla_t_scores_e4m3`]: the raw
/// set `$x` converted into the A sets `$a0 .. $a3`, the four MMAs
/// committed as a group, then the wait for the group before (whose A
/// registers the next block rewrites).
macro_rules! t_e4m3_j {
    ($shape:literal, $acc:literal, $x:literal, [$a0:literal, $a1:literal, $a2:literal, $a3:literal], [$q0:literal, $q1:literal, $q2:literal, $q3:literal], $first:literal) => {
        concat!(
            t_e4m3_a!($x, "0", "4", $a0), t_e4m3_a!($x, "1", "5", $a1), t_e4m3_a!($x, "2", "6", $a2), t_e4m3_a!($x, "3", "7", $a3),
            "wgmma.fence.sync.aligned;\n",
            t_e4m3_mma!($shape, $acc, $a0, $q0, $first), t_e4m3_mma!($shape, $acc, $a1, $q1, "acc"), t_e4m3_mma!($shape, $acc, $a2, $q2, "acc"), t_e4m3_mma!($shape, $acc, $a3, $q3, "acc"),
            "wgmma.commit_group.sync.aligned;\nwgmma.wait_group.sync.aligned 1;\n"
        )
    };
}
/// The body of [`mla_t_scores_e4m3`] (`m64n16k16`) and
/// [`mla_t32_scores_e4m3`] (`m64n32k16`): the stage's barrier (label
/// `$label`), then nine J blocks, J block `j`'s Q steps at `$qj`.
macro_rules! t_e4m3_scores {
    ($shape:literal, $acc:literal, $label:literal, $q0:tt, $q1:tt, $q2:tt, $q3:tt, $q4:tt, $q5:tt, $q6:tt, $q7:tt, $q8:tt) => {
        concat!(
            "{{\n.reg .pred first, acc, ready;\n.reg .b64 qd;\n.reg .b16 hl, hh;\n",
            ".reg .b32 ql, qh, qa, kp, xa<8>, xb<8>, paa<4>, pab<4>, pac<4>, pad<4>, pba<4>, pbb<4>, pbc<4>, pbd<4>;\n",
            "mov.b32 kp, {k};\nmov.b64 {{ql, qh}}, {q};\n",
            "setp.ne.b32 first, {z}, 0;\nsetp.eq.b32 acc, {z}, 0;\n",
            $label, ":\nmbarrier.try_wait.parity.shared::cta.b64 ready, [{bar}], {parity};\n@!ready bra ", $label, ";\nwgmma.fence.sync.aligned;\n",
            t_e4m3_load!("xa", "0", "{n0}"),
            t_e4m3_load!("xb", "64", "{n1}"), t_e4m3_j!($shape, $acc, "xa", ["paa", "pab", "pac", "pad"], $q0, "first"),
            t_e4m3_load!("xa", "128", "{n2}"), t_e4m3_j!($shape, $acc, "xb", ["pba", "pbb", "pbc", "pbd"], $q1, "acc"),
            t_e4m3_load!("xb", "192", "{n3}"), t_e4m3_j!($shape, $acc, "xa", ["paa", "pab", "pac", "pad"], $q2, "acc"),
            t_e4m3_load!("xa", "256", "{n4}"), t_e4m3_j!($shape, $acc, "xb", ["pba", "pbb", "pbc", "pbd"], $q3, "acc"),
            t_e4m3_load!("xb", "320", "{n5}"), t_e4m3_j!($shape, $acc, "xa", ["paa", "pab", "pac", "pad"], $q4, "acc"),
            t_e4m3_load!("xa", "384", "{n6}"), t_e4m3_j!($shape, $acc, "xb", ["pba", "pbb", "pbc", "pbd"], $q5, "acc"),
            t_e4m3_load!("xb", "448", "{n7}"), t_e4m3_j!($shape, $acc, "xa", ["paa", "pab", "pac", "pad"], $q6, "acc"),
            t_e4m3_load!("xa", "512", "{n8}"), t_e4m3_j!($shape, $acc, "xb", ["pba", "pbb", "pbc", "pbd"], $q7, "acc"),
            t_e4m3_j!($shape, $acc, "xa", ["paa", "pab", "pac", "pad"], $q8, "acc"),
            "wgmma.wait_group.sync.aligned 0;\n}}"
        )
    };
}

/// `Sᵀ = K·Qᵀ` of the transposed form's ring kernel (`decode::mla_t_ring`,
/// fp8 a scale per token) for one stage's 64 keys, the keys' e4m3 bytes
/// read from their ring slot and converted into `wgmma`'s A registers (f16,
/// exactly): 36 `m64n16k16` steps in 9 groups of four, a group's bytes
/// loaded and converted while the group before runs.
///
/// The contraction's order is the Q tile's: the thread's A fragment of
/// step `4 J + s` (dims `2c, 2c + 1, 2c + 8, 2c + 9`, `c = lane % 4`) is
/// bytes `64 J + 16 c + 4 s ..+4` of its keys' rows, so `k` is the
/// thread's first key's row plus `16 c`, its second key's row 8 rows on
/// ([`PT_KEY2`]); Q's tile holds its dims in that order
/// (`mla_t_ring::q_to_f16_permuted`). The stage is waited for on the
/// mbarrier at `bar` (phase `parity`). Returns the accumulator as
/// [`mla_t_scores`]'s, its M rows the thread's two keys.
///
/// # Safety
/// As [`mla_scores64`]; `k .. k + PT_KEY2 + 576` in the block's shared memory.
#[allow(named_asm_labels)]
#[inline(always)]
pub unsafe fn mla_t_scores_e4m3(k: u32, q: u64, bar: u32, parity: u32) -> [f32; 8] {
    let mut s = [0f32; 8];
    core::arch::asm!(
        t_e4m3_scores!("m64n16k16", "{{{s0}, {s1}, {s2}, {s3}, {s4}, {s5}, {s6}, {s7}}}", "R0", ["0", "2", "4", "6"], ["128", "130", "132", "134"], ["256", "258", "260", "262"], ["384", "386", "388", "390"], ["512", "514", "516", "518"], ["640", "642", "644", "646"], ["768", "770", "772", "774"], ["896", "898", "900", "902"], ["1024", "1026", "1028", "1030"]),
        n0 = const PT_KEY2, n1 = const PT_KEY2 + 64, n2 = const PT_KEY2 + 128, n3 = const PT_KEY2 + 192, n4 = const PT_KEY2 + 256, n5 = const PT_KEY2 + 320, n6 = const PT_KEY2 + 384, n7 = const PT_KEY2 + 448, n8 = const PT_KEY2 + 512,
        k = in(reg32) k, q = in(reg64) q, z = in(reg32) 0u32, bar = in(reg32) bar, parity = in(reg32) parity,
        s0 = out(reg32) s[0],
        s1 = out(reg32) s[1],
        s2 = out(reg32) s[2],
        s3 = out(reg32) s[3],
        s4 = out(reg32) s[4],
        s5 = out(reg32) s[5],
        s6 = out(reg32) s[6],
        s7 = out(reg32) s[7],
        options(nostack)
    );
    s
}
/// One score step of [`mla_t_scores_ds`] / [`mla_t32_scores_ds`] (shape
/// `$shape`, type `$ty`) into the accumulator list `$d` with A from the
/// register list `$a`, Q's step `$q` descriptor units on.
macro_rules! t_ds_mma {
    ($shape:literal, $ty:literal, $d:literal, $a:expr, $q:literal, $pred:literal) => {
        concat!(
            "add.u32 qa, ql, ", $q, ";\nmov.b64 qd, {{qa, qh}};\n",
            "wgmma.mma_async.sync.aligned.", $shape, ".f32.", $ty, ".", $ty, " ", $d, ", ", $a, ", qd, ", $pred, ", 1, 1, 0;\n"
        )
    };
}
/// A J block (64 latent dims, four k16 steps) into the accumulator list
/// `$acc` (`ga`): the raw set `$x` converted into the A sets `$a0 ..
/// $a3`, the four MMAs committed as a group, then the wait until at most
/// `$wait` groups are pending (0 where the group's accumulator is folded
/// next).
macro_rules! t_ds_j {
    ($shape:literal, $acc:literal, $x:literal, [$a0:literal, $a1:literal, $a2:literal, $a3:literal], [$q0:literal, $q1:literal, $q2:literal, $q3:literal], $first:literal, $wait:literal) => {
        concat!(
            t_e4m3_a!($x, "0", "4", $a0), t_e4m3_a!($x, "1", "5", $a1), t_e4m3_a!($x, "2", "6", $a2), t_e4m3_a!($x, "3", "7", $a3),
            "wgmma.fence.sync.aligned;\n",
            t_ds_mma!($shape, "f16", $acc, concat!("{{", $a0, "0, ", $a0, "1, ", $a0, "2, ", $a0, "3}}"), $q0, $first),
            t_ds_mma!($shape, "f16", $acc, concat!("{{", $a1, "0, ", $a1, "1, ", $a1, "2, ", $a1, "3}}"), $q1, "acc"),
            t_ds_mma!($shape, "f16", $acc, concat!("{{", $a2, "0, ", $a2, "1, ", $a2, "2, ", $a2, "3}}"), $q2, "acc"),
            t_ds_mma!($shape, "f16", $acc, concat!("{{", $a3, "0, ", $a3, "1, ", $a3, "2, ", $a3, "3}}"), $q3, "acc"),
            "wgmma.commit_group.sync.aligned;\nwgmma.wait_group.sync.aligned ", $wait, ";\n"
        )
    };
}
/// Scores `s$e0 .. s$e3` (an n8 column group's four elements: the first
/// two the thread's first key's, the others its second's) times (`mul`)
/// or plus times (`fma`) the accumulator `$g`'s and the keys' scales `sa`,
/// `sb`.
macro_rules! t_ds_fold4 {
    ($g:literal, [$e0:literal, $e1:literal, $e2:literal, $e3:literal], mul) => {
        concat!(
            "mul.rn.f32 {s", $e0, "}, ", $g, $e0, ", sa;\nmul.rn.f32 {s", $e1, "}, ", $g, $e1, ", sa;\n",
            "mul.rn.f32 {s", $e2, "}, ", $g, $e2, ", sb;\nmul.rn.f32 {s", $e3, "}, ", $g, $e3, ", sb;\n"
        )
    };
    ($g:literal, [$e0:literal, $e1:literal, $e2:literal, $e3:literal], fma) => {
        concat!(
            "fma.rn.f32 {s", $e0, "}, ", $g, $e0, ", sa, {s", $e0, "};\nfma.rn.f32 {s", $e1, "}, ", $g, $e1, ", sa, {s", $e1, "};\n",
            "fma.rn.f32 {s", $e2, "}, ", $g, $e2, ", sb, {s", $e2, "};\nfma.rn.f32 {s", $e3, "}, ", $g, $e3, ", sb, {s", $e3, "};\n"
        )
    };
}
/// The scores (the column groups `$groups`) plus (`fma`) or as (`mul`)
/// the complete scale group in the accumulator `$g` times its keys'
/// scales: the thread's first key's at `sp + $o0`, its second's at `sp +
/// $o1`.
macro_rules! t_ds_fold {
    ($g:literal, $o0:literal, $o1:literal, $op:ident, [$($group:tt),*]) => {
        concat!("ld.shared.f32 sa, [sp+", $o0, "];\nld.shared.f32 sb, [sp+", $o1, "];\n", $(t_ds_fold4!($g, $group, $op)),*)
    };
}
/// `s$e += ga$e` for the column groups `$groups`.
macro_rules! t_ds_sum {
    ([$([$e0:literal, $e1:literal, $e2:literal, $e3:literal]),*]) => {
        concat!($("add.f32 {s", $e0, "}, {s", $e0, "}, ga", $e0, ";\nadd.f32 {s", $e1, "}, {s", $e1, "}, ga", $e1, ";\nadd.f32 {s", $e2, "}, {s", $e2, "}, ga", $e2, ";\nadd.f32 {s", $e3, "}, {s", $e3, "}, ga", $e3, ";\n"),*)
    };
}
/// The body of [`mla_t_scores_ds`] (`m64n16k16`) and
/// [`mla_t32_scores_ds`] (`m64n32k16`): the accumulator list `$acc`
/// (declared `$ga`) of the column groups `$groups`, the barrier's label
/// `$label`, the eight latent J blocks' Q steps `$q0 .. $q7` and the RoPE
/// block's `$r`.
macro_rules! t_ds_scores {
    ($shape:literal, $acc:literal, $ga:literal, $label:literal, $groups:tt, $q0:tt, $q1:tt, $q2:tt, $q3:tt, $q4:tt, $q5:tt, $q6:tt, $q7:tt, [$r0:literal, $r1:literal, $r2:literal, $r3:literal]) => {
        concat!(
            "{{\n.reg .pred first, acc, ready;\n.reg .b64 qd;\n.reg .b16 hl, hh;\n.reg .f32 sa, sb, ", $ga, ";\n",
            ".reg .b32 ql, qh, qa, kp, sp, rp, xa<8>, xb<8>, paa<4>, pab<4>, pac<4>, pad<4>, pba<4>, pbb<4>, pbc<4>, pbd<4>;\n",
            "mov.b32 kp, {k};\nmov.b32 sp, {sp};\nmov.b32 rp, {rp};\nmov.b64 {{ql, qh}}, {q};\n",
            "setp.ne.b32 first, {z}, 0;\nsetp.eq.b32 acc, {z}, 0;\n",
            $label, ":\nmbarrier.try_wait.parity.shared::cta.b64 ready, [{bar}], {parity};\n@!ready bra ", $label, ";\nwgmma.fence.sync.aligned;\n",
            t_e4m3_load!("xa", "0", "{n0}"),
            t_e4m3_load!("xb", "64", "{n1}"), t_ds_j!($shape, $acc, "xa", ["paa", "pab", "pac", "pad"], $q0, "first", "1"),
            t_e4m3_load!("xa", "128", "{n2}"), t_ds_j!($shape, $acc, "xb", ["pba", "pbb", "pbc", "pbd"], $q1, "acc", "0"),
            t_ds_fold!("ga", "0", "{n0}", mul, $groups),
            t_e4m3_load!("xb", "192", "{n3}"), t_ds_j!($shape, $acc, "xa", ["paa", "pab", "pac", "pad"], $q2, "first", "1"),
            t_e4m3_load!("xa", "256", "{n4}"), t_ds_j!($shape, $acc, "xb", ["pba", "pbb", "pbc", "pbd"], $q3, "acc", "0"),
            t_ds_fold!("ga", "4", "{f1}", fma, $groups),
            t_e4m3_load!("xb", "320", "{n5}"), t_ds_j!($shape, $acc, "xa", ["paa", "pab", "pac", "pad"], $q4, "first", "1"),
            t_e4m3_load!("xa", "384", "{n6}"), t_ds_j!($shape, $acc, "xb", ["pba", "pbb", "pbc", "pbd"], $q5, "acc", "0"),
            t_ds_fold!("ga", "8", "{f2}", fma, $groups),
            t_e4m3_load!("xb", "448", "{n7}"), t_ds_j!($shape, $acc, "xa", ["paa", "pab", "pac", "pad"], $q6, "first", "1"),
            t_ds_j!($shape, $acc, "xb", ["pba", "pbb", "pbc", "pbd"], $q7, "acc", "0"),
            t_ds_fold!("ga", "12", "{f3}", fma, $groups),
            "ld.shared.v4.b32 {{xa0, xa1, xa2, xa3}}, [rp];\nld.shared.v4.b32 {{xa4, xa5, xa6, xa7}}, [rp+16];\n",
            "ld.shared.v4.b32 {{xb0, xb1, xb2, xb3}}, [rp+{n0}];\nld.shared.v4.b32 {{xb4, xb5, xb6, xb7}}, [rp+{r1}];\n",
            "wgmma.fence.sync.aligned;\n",
            t_ds_mma!($shape, "bf16", $acc, "{{xa0, xb0, xa1, xb1}}", $r0, "first"),
            t_ds_mma!($shape, "bf16", $acc, "{{xa2, xb2, xa3, xb3}}", $r1, "acc"),
            t_ds_mma!($shape, "bf16", $acc, "{{xa4, xb4, xa5, xb5}}", $r2, "acc"),
            t_ds_mma!($shape, "bf16", $acc, "{{xa6, xb6, xa7, xb7}}", $r3, "acc"),
            "wgmma.commit_group.sync.aligned;\nwgmma.wait_group.sync.aligned 0;\n",
            t_ds_sum!($groups),
            "}}"
        )
    };
}

/// The bytes from a thread's first key's row to its second's in the ring
/// of `format`: the keys of its accumulator rows `g`, `g + 8` are 8 apart
/// (`decode::mla_t_ring::key_of`).
const fn second_key(format: decode_attn_abi::KvFormat) -> u32 {
    match decode_attn_abi::mla_t_ring(format) {
        Some(ring) => 8 * ring.row,
        None => 0,
    }
}
const DS_KEY2: u32 = second_key(decode_attn_abi::KvFormat::Fp8DsMla);
const PT_KEY2: u32 = second_key(decode_attn_abi::KvFormat::Fp8PerHead);

/// `Sᵀ = K·Qᵀ` of the transposed form's ring kernel for fp8-ds-mla
/// (`decode::mla_t_ring`: DeepSeek V3.2's 656-byte rows back to back in
/// the ring) for one stage's 64 keys: as [`mla_t_scores_e4m3`] over the
/// 512 e4m3 latent dims (`k` the thread's first key's row plus `16 c`, its
/// second key 8 rows on, [`DS_KEY2`]), each
/// scale group's 128 dims (two J blocks) into the accumulator `ga`, which
/// is waited for, multiplied by its keys' scales (`sp`: the first key's
/// four f32 scales, the row's byte 512) and summed before the next group
/// starts (one accumulator, not two: the registers of a third warpgroup);
/// then the 64 bf16 RoPE dims (`rp`: the first key's row's byte `528 + 32
/// c`, 16 dims a thread a key, the contraction in the latent blocks'
/// order) by four bf16 MMAs against Q's RoPE block (bf16, permuted as the
/// others), unscaled. Returns `Σ_g s_g · (Q·e4m3)_g + Q·RoPE` as
/// [`mla_t_scores`]'s accumulator.
///
/// # Safety
/// As [`mla_t_scores_e4m3`], for the ring's fp8-ds-mla rows.
#[allow(named_asm_labels)]
#[inline(always)]
pub unsafe fn mla_t_scores_ds(k: u32, sp: u32, rp: u32, q: u64, bar: u32, parity: u32) -> [f32; 8] {
    let mut s = [0f32; 8];
    core::arch::asm!(
        t_ds_scores!("m64n16k16", "{{ga0, ga1, ga2, ga3, ga4, ga5, ga6, ga7}}", "ga<8>", "D0", [["0", "1", "2", "3"], ["4", "5", "6", "7"]], ["0", "2", "4", "6"], ["128", "130", "132", "134"], ["256", "258", "260", "262"], ["384", "386", "388", "390"], ["512", "514", "516", "518"], ["640", "642", "644", "646"], ["768", "770", "772", "774"], ["896", "898", "900", "902"], ["1024", "1026", "1028", "1030"]),
        n0 = const DS_KEY2, n1 = const DS_KEY2 + 64, n2 = const DS_KEY2 + 128, n3 = const DS_KEY2 + 192, n4 = const DS_KEY2 + 256, n5 = const DS_KEY2 + 320, n6 = const DS_KEY2 + 384, n7 = const DS_KEY2 + 448,
        f1 = const DS_KEY2 + 4, f2 = const DS_KEY2 + 8, f3 = const DS_KEY2 + 12, r1 = const DS_KEY2 + 16,
        k = in(reg32) k, sp = in(reg32) sp, rp = in(reg32) rp, q = in(reg64) q, z = in(reg32) 0u32, bar = in(reg32) bar, parity = in(reg32) parity,
        s0 = out(reg32) s[0],
        s1 = out(reg32) s[1],
        s2 = out(reg32) s[2],
        s3 = out(reg32) s[3],
        s4 = out(reg32) s[4],
        s5 = out(reg32) s[5],
        s6 = out(reg32) s[6],
        s7 = out(reg32) s[7],
        options(nostack)
    );
    s
}

/// The four words (4 e4m3 dims each) of one k16 step's keys `c`, `c + 4`,
/// `c + 8`, `c + 12` for one M-tile pair of [`mla_t_pv_e4m3`]: the step's
/// base register `$v` plus the offsets `$o0 .. $o3` (operands).
macro_rules! t_pv_load {
    ($w:literal, $v:literal, $o0:literal, $o1:literal, $o2:literal, $o3:literal) => {
        concat!(
            "ld.shared.b32 ", $w, "0, [", $v, "+", $o0, "];\nld.shared.b32 ", $w, "1, [", $v, "+", $o1, "];\n",
            "ld.shared.b32 ", $w, "2, [", $v, "+", $o2, "];\nld.shared.b32 ", $w, "3, [", $v, "+", $o3, "];\n"
        )
    };
}
/// The e4m3 pair of byte `lo` of two words (`prmt` selector `$sel`:
/// bytes `b` of `$w0` and `$w1`, then bytes `b + 1`) as the f16 pairs `$lo`
/// (dim `b`) and `$hi` (dim `b + 1`).
macro_rules! t_pv_pair {
    ($w0:expr, $w1:expr, $sel:literal, $lo:expr, $hi:expr) => {
        concat!("prmt.b32 pr, ", $w0, ", ", $w1, ", ", $sel, ";\nmov.b32 {{hl, hh}}, pr;\ncvt.rn.f16x2.e4m3x2 ", $lo, ", hl;\ncvt.rn.f16x2.e4m3x2 ", $hi, ", hh;\n")
    };
}
/// An M-tile pair and k16 step of [`mla_t_pv_e4m3`]: the words `$w0 ..
/// $w3` as the A fragments `$t` (the pair's first M-tile: the words'
/// bytes 0, 1) and `$u` (bytes 2, 3), the two MMAs against the P tile's
/// step `$p` descriptor units on (an operand), committed as a group, then
/// the wait for the group before.
macro_rules! t_pv_j {
    ($shape:literal, $w:literal, $t:literal, $u:literal, $d0:literal, $d1:literal, $p:literal) => {
        concat!(
            t_pv_pair!(concat!($w, "0"), concat!($w, "1"), "0x5140", concat!($t, "0"), concat!($t, "1")),
            t_pv_pair!(concat!($w, "2"), concat!($w, "3"), "0x5140", concat!($t, "2"), concat!($t, "3")),
            t_pv_pair!(concat!($w, "0"), concat!($w, "1"), "0x7362", concat!($u, "0"), concat!($u, "1")),
            t_pv_pair!(concat!($w, "2"), concat!($w, "3"), "0x7362", concat!($u, "2"), concat!($u, "3")),
            "wgmma.fence.sync.aligned;\nadd.u32 pa, pl, ", $p, ";\nmov.b64 pd, {{pa, ph}};\n",
            "wgmma.mma_async.sync.aligned.", $shape, ".f32.f16.f16 ", $d0, ", {{", $t, "0, ", $t, "1, ", $t, "2, ", $t, "3}}, pd, acc, 1, 1, 0;\n",
            "wgmma.mma_async.sync.aligned.", $shape, ".f32.f16.f16 ", $d1, ", {{", $u, "0, ", $u, "1, ", $u, "2, ", $u, "3}}, pd, acc, 1, 1, 0;\n",
            "wgmma.commit_group.sync.aligned;\nwgmma.wait_group.sync.aligned 1;\n"
        )
    };
}
/// The body of [`mla_t_pv_e4m3`] (`m64n16k16`) and [`mla_t32_pv_e4m3`]
/// (`m64n32k16`): 16 groups of an M-tile pair `i` (accumulator lists
/// `$d(2i)`, `$d(2i + 1)`) and a k16 step, each pair's words loaded while
/// the group before runs.
macro_rules! t_pv_body {
    ($shape:literal, $d0:literal, $d1:literal, $d2:literal, $d3:literal, $d4:literal, $d5:literal, $d6:literal, $d7:literal) => {
        concat!(
            "{{\n.reg .pred acc;\n.reg .b64 pd;\n.reg .b16 hl, hh;\n",
            ".reg .b32 pl, ph, pa, v0, v1, v2, v3, pr, wa<4>, wb<4>, ta<4>, tb<4>, ua<4>, ub<4>;\n",
            "mov.b32 v0, {v};\nadd.u32 v1, v0, {s1};\nadd.u32 v2, v0, {s2};\nadd.u32 v3, v0, {s3};\n",
            "mov.b64 {{pl, ph}}, {p};\nsetp.eq.b32 acc, {z}, 0;\nwgmma.fence.sync.aligned;\n",
            t_pv_load!("wa", "v0", "{a00}", "{a01}", "{a02}", "{a03}"),
            t_pv_load!("wb", "v0", "{a10}", "{a11}", "{a12}", "{a13}"), t_pv_j!($shape, "wa", "ta", "ua", $d0, $d1, "{p00}"),
            t_pv_load!("wa", "v0", "{a20}", "{a21}", "{a22}", "{a23}"), t_pv_j!($shape, "wb", "tb", "ub", $d2, $d3, "{p10}"),
            t_pv_load!("wb", "v0", "{a30}", "{a31}", "{a32}", "{a33}"), t_pv_j!($shape, "wa", "ta", "ua", $d4, $d5, "{p20}"),
            t_pv_load!("wa", "v1", "{a00}", "{a01}", "{a02}", "{a03}"), t_pv_j!($shape, "wb", "tb", "ub", $d6, $d7, "{p30}"),
            t_pv_load!("wb", "v1", "{a10}", "{a11}", "{a12}", "{a13}"), t_pv_j!($shape, "wa", "ta", "ua", $d0, $d1, "{p01}"),
            t_pv_load!("wa", "v1", "{a20}", "{a21}", "{a22}", "{a23}"), t_pv_j!($shape, "wb", "tb", "ub", $d2, $d3, "{p11}"),
            t_pv_load!("wb", "v1", "{a30}", "{a31}", "{a32}", "{a33}"), t_pv_j!($shape, "wa", "ta", "ua", $d4, $d5, "{p21}"),
            t_pv_load!("wa", "v2", "{a00}", "{a01}", "{a02}", "{a03}"), t_pv_j!($shape, "wb", "tb", "ub", $d6, $d7, "{p31}"),
            t_pv_load!("wb", "v2", "{a10}", "{a11}", "{a12}", "{a13}"), t_pv_j!($shape, "wa", "ta", "ua", $d0, $d1, "{p02}"),
            t_pv_load!("wa", "v2", "{a20}", "{a21}", "{a22}", "{a23}"), t_pv_j!($shape, "wb", "tb", "ub", $d2, $d3, "{p12}"),
            t_pv_load!("wb", "v2", "{a30}", "{a31}", "{a32}", "{a33}"), t_pv_j!($shape, "wa", "ta", "ua", $d4, $d5, "{p22}"),
            t_pv_load!("wa", "v3", "{a00}", "{a01}", "{a02}", "{a03}"), t_pv_j!($shape, "wb", "tb", "ub", $d6, $d7, "{p32}"),
            t_pv_load!("wb", "v3", "{a10}", "{a11}", "{a12}", "{a13}"), t_pv_j!($shape, "wa", "ta", "ua", $d0, $d1, "{p03}"),
            t_pv_load!("wa", "v3", "{a20}", "{a21}", "{a22}", "{a23}"), t_pv_j!($shape, "wb", "tb", "ub", $d2, $d3, "{p13}"),
            t_pv_load!("wb", "v3", "{a30}", "{a31}", "{a32}", "{a33}"), t_pv_j!($shape, "wa", "ta", "ua", $d4, $d5, "{p23}"),
            t_pv_j!($shape, "wb", "tb", "ub", $d6, $d7, "{p33}"),
            "wgmma.wait_group.sync.aligned 0;\n}}"
        )
    };
}

/// `Oᵀ += Vᵀ·Pᵀ` of the transposed form's ring kernel for one stage: Vᵀ's
/// fragments from the keys' e4m3 bytes in their ring slot (rows `ROW`
/// bytes apart), converted in registers (f16, exactly), 32 `m64n16k16`
/// steps in 16 groups of an M-tile pair and a k16 step. The thread (warp
/// `w` of its warpgroup, `g = lane / 4`, `c = lane % 4`) reads 4 bytes a
/// key at `v` = its step's key `c` row + `32 w + 4 g` (`+ 128 i` for the
/// pair `i`): M-tile `2 i + t`'s rows `g`, `g + 8` are dims `128 i + 32 w +
/// 4 g + 2 t` and one on, and a k16 step's K columns `2c, 2c + 1, 2c + 8,
/// 2c + 9` are its keys `c`, `c + 4`, `c + 8`, `c + 12`: Pᵀ's tile (`p`, as
/// [`mla_t_pv`]'s) holds its keys in that order, and O's dims come out in
/// this one (`mla_t_ring::ring_dim`). P is f16. Where `GROUPED`, the pair
/// `i` (dims `128 i ..`: fp8-ds-mla's scale group `i`) reads its own P
/// tile, `i` tiles (2048 bytes each) past `p`'s. Where `SPREAD` (rows back
/// to back, 16 bytes past a multiple of 128: fp8-ds-mla's), `v` is the
/// step's key `2 c` row and its K columns `2c, 2c + 1, 2c + 8, 2c + 9`
/// are those keys themselves: the four rows a load reads lie 32 bytes
/// apart in the banks.
///
/// # Safety
/// As [`mla_pv`]; the stage's slot in the block's shared memory.
#[inline(always)]
pub unsafe fn mla_t_pv_e4m3<const ROW: u32, const GROUPED: bool, const SPREAD: bool>(o: &mut [[f32; 8]; 8], p: u64, v: u32) {
    core::arch::asm!(
        t_pv_body!("m64n16k16", "{{{o0}, {o1}, {o2}, {o3}, {o4}, {o5}, {o6}, {o7}}}", "{{{o8}, {o9}, {o10}, {o11}, {o12}, {o13}, {o14}, {o15}}}", "{{{o16}, {o17}, {o18}, {o19}, {o20}, {o21}, {o22}, {o23}}}", "{{{o24}, {o25}, {o26}, {o27}, {o28}, {o29}, {o30}, {o31}}}", "{{{o32}, {o33}, {o34}, {o35}, {o36}, {o37}, {o38}, {o39}}}", "{{{o40}, {o41}, {o42}, {o43}, {o44}, {o45}, {o46}, {o47}}}", "{{{o48}, {o49}, {o50}, {o51}, {o52}, {o53}, {o54}, {o55}}}", "{{{o56}, {o57}, {o58}, {o59}, {o60}, {o61}, {o62}, {o63}}}"),
        p = in(reg64) p, v = in(reg32) v, z = in(reg32) 0u32,
        s1 = const 16 * ROW, s2 = const 32 * ROW, s3 = const 48 * ROW,
        a00 = const 128 * 0, a01 = const 128 * 0 + (if SPREAD { 1 } else { 4 }) * ROW, a02 = const 128 * 0 + 8 * ROW, a03 = const 128 * 0 + (if SPREAD { 9 } else { 12 }) * ROW,
        a10 = const 128 * 1, a11 = const 128 * 1 + (if SPREAD { 1 } else { 4 }) * ROW, a12 = const 128 * 1 + 8 * ROW, a13 = const 128 * 1 + (if SPREAD { 9 } else { 12 }) * ROW,
        a20 = const 128 * 2, a21 = const 128 * 2 + (if SPREAD { 1 } else { 4 }) * ROW, a22 = const 128 * 2 + 8 * ROW, a23 = const 128 * 2 + (if SPREAD { 9 } else { 12 }) * ROW,
        a30 = const 128 * 3, a31 = const 128 * 3 + (if SPREAD { 1 } else { 4 }) * ROW, a32 = const 128 * 3 + 8 * ROW, a33 = const 128 * 3 + (if SPREAD { 9 } else { 12 }) * ROW,
        p00 = const if GROUPED { 128 * 0 } else { 0 } + 0, p01 = const if GROUPED { 128 * 0 } else { 0 } + 2, p02 = const if GROUPED { 128 * 0 } else { 0 } + 4, p03 = const if GROUPED { 128 * 0 } else { 0 } + 6,
        p10 = const if GROUPED { 128 * 1 } else { 0 } + 0, p11 = const if GROUPED { 128 * 1 } else { 0 } + 2, p12 = const if GROUPED { 128 * 1 } else { 0 } + 4, p13 = const if GROUPED { 128 * 1 } else { 0 } + 6,
        p20 = const if GROUPED { 128 * 2 } else { 0 } + 0, p21 = const if GROUPED { 128 * 2 } else { 0 } + 2, p22 = const if GROUPED { 128 * 2 } else { 0 } + 4, p23 = const if GROUPED { 128 * 2 } else { 0 } + 6,
        p30 = const if GROUPED { 128 * 3 } else { 0 } + 0, p31 = const if GROUPED { 128 * 3 } else { 0 } + 2, p32 = const if GROUPED { 128 * 3 } else { 0 } + 4, p33 = const if GROUPED { 128 * 3 } else { 0 } + 6,
        o0 = inout(reg32) o[0][0], o1 = inout(reg32) o[0][1], o2 = inout(reg32) o[0][2], o3 = inout(reg32) o[0][3], o4 = inout(reg32) o[0][4], o5 = inout(reg32) o[0][5], o6 = inout(reg32) o[0][6], o7 = inout(reg32) o[0][7],
        o8 = inout(reg32) o[1][0], o9 = inout(reg32) o[1][1], o10 = inout(reg32) o[1][2], o11 = inout(reg32) o[1][3], o12 = inout(reg32) o[1][4], o13 = inout(reg32) o[1][5], o14 = inout(reg32) o[1][6], o15 = inout(reg32) o[1][7],
        o16 = inout(reg32) o[2][0], o17 = inout(reg32) o[2][1], o18 = inout(reg32) o[2][2], o19 = inout(reg32) o[2][3], o20 = inout(reg32) o[2][4], o21 = inout(reg32) o[2][5], o22 = inout(reg32) o[2][6], o23 = inout(reg32) o[2][7],
        o24 = inout(reg32) o[3][0], o25 = inout(reg32) o[3][1], o26 = inout(reg32) o[3][2], o27 = inout(reg32) o[3][3], o28 = inout(reg32) o[3][4], o29 = inout(reg32) o[3][5], o30 = inout(reg32) o[3][6], o31 = inout(reg32) o[3][7],
        o32 = inout(reg32) o[4][0], o33 = inout(reg32) o[4][1], o34 = inout(reg32) o[4][2], o35 = inout(reg32) o[4][3], o36 = inout(reg32) o[4][4], o37 = inout(reg32) o[4][5], o38 = inout(reg32) o[4][6], o39 = inout(reg32) o[4][7],
        o40 = inout(reg32) o[5][0], o41 = inout(reg32) o[5][1], o42 = inout(reg32) o[5][2], o43 = inout(reg32) o[5][3], o44 = inout(reg32) o[5][4], o45 = inout(reg32) o[5][5], o46 = inout(reg32) o[5][6], o47 = inout(reg32) o[5][7],
        o48 = inout(reg32) o[6][0], o49 = inout(reg32) o[6][1], o50 = inout(reg32) o[6][2], o51 = inout(reg32) o[6][3], o52 = inout(reg32) o[6][4], o53 = inout(reg32) o[6][5], o54 = inout(reg32) o[6][6], o55 = inout(reg32) o[6][7],
        o56 = inout(reg32) o[7][0], o57 = inout(reg32) o[7][1], o58 = inout(reg32) o[7][2], o59 = inout(reg32) o[7][3], o60 = inout(reg32) o[7][4], o61 = inout(reg32) o[7][5], o62 = inout(reg32) o[7][6], o63 = inout(reg32) o[7][7],
        options(nostack)
    );
}


/// `Sᵀ = K·Qᵀ` of the 32-row ring kernel (`decode::mla_t_ring32`, fp8 a
/// scale per token) for one stage's 64 keys: [`mla_t_scores_e4m3`] at
/// `m64n32k16`, each key's bytes converted once for the 32 rows of the
/// Q tile (`q`: a J block 4 KB, 256 descriptor units, on). Returns the
/// accumulator: element `e` is key half `(e / 2) % 2` (the thread's keys
/// as [`mla_t_scores_e4m3`]'s) of row `8 (e / 4) + 2c + e % 2`.
///
/// # Safety
/// As [`mla_t_scores_e4m3`].
#[allow(named_asm_labels)]
#[inline(always)]
pub unsafe fn mla_t32_scores_e4m3(k: u32, q: u64, bar: u32, parity: u32) -> [f32; 16] {
    let mut s = [0f32; 16];
    core::arch::asm!(
        t_e4m3_scores!("m64n32k16", "{{{s0}, {s1}, {s2}, {s3}, {s4}, {s5}, {s6}, {s7}, {s8}, {s9}, {s10}, {s11}, {s12}, {s13}, {s14}, {s15}}}", "W0", ["0", "2", "4", "6"], ["256", "258", "260", "262"], ["512", "514", "516", "518"], ["768", "770", "772", "774"], ["1024", "1026", "1028", "1030"], ["1280", "1282", "1284", "1286"], ["1536", "1538", "1540", "1542"], ["1792", "1794", "1796", "1798"], ["2048", "2050", "2052", "2054"]),
        n0 = const PT_KEY2, n1 = const PT_KEY2 + 64, n2 = const PT_KEY2 + 128, n3 = const PT_KEY2 + 192, n4 = const PT_KEY2 + 256, n5 = const PT_KEY2 + 320, n6 = const PT_KEY2 + 384, n7 = const PT_KEY2 + 448, n8 = const PT_KEY2 + 512,
        k = in(reg32) k, q = in(reg64) q, z = in(reg32) 0u32, bar = in(reg32) bar, parity = in(reg32) parity,
        s0 = out(reg32) s[0], s1 = out(reg32) s[1], s2 = out(reg32) s[2], s3 = out(reg32) s[3], s4 = out(reg32) s[4], s5 = out(reg32) s[5], s6 = out(reg32) s[6], s7 = out(reg32) s[7],
        s8 = out(reg32) s[8], s9 = out(reg32) s[9], s10 = out(reg32) s[10], s11 = out(reg32) s[11], s12 = out(reg32) s[12], s13 = out(reg32) s[13], s14 = out(reg32) s[14], s15 = out(reg32) s[15],
        options(nostack)
    );
    s
}


/// `Oᵀ += Vᵀ·Pᵀ` of the 32-row ring kernel (`decode::mla_t_ring32`, rows
/// `ROW` bytes apart): [`mla_t_pv_e4m3`] at `m64n32k16` against 32-row P
/// tiles (`GROUPED`: pair `i` reads tile `i`, 4096 bytes each, past `p`'s;
/// `SPREAD` as there), each key's bytes converted once for the 32 rows;
/// element `e` of `o[j]` is M row `g + 8 ((e / 2) % 2)` (dims as
/// [`mla_t_pv_e4m3`]'s) of row `8 (e / 4) + 2c + e % 2`.
///
/// # Safety
/// As [`mla_t_pv_e4m3`].
#[inline(always)]
pub unsafe fn mla_t32_pv_e4m3<const ROW: u32, const GROUPED: bool, const SPREAD: bool>(o: &mut [[f32; 16]; 8], p: u64, v: u32) {
    core::arch::asm!(
        t_pv_body!("m64n32k16", "{{{o0}, {o1}, {o2}, {o3}, {o4}, {o5}, {o6}, {o7}, {o8}, {o9}, {o10}, {o11}, {o12}, {o13}, {o14}, {o15}}}", "{{{o16}, {o17}, {o18}, {o19}, {o20}, {o21}, {o22}, {o23}, {o24}, {o25}, {o26}, {o27}, {o28}, {o29}, {o30}, {o31}}}", "{{{o32}, {o33}, {o34}, {o35}, {o36}, {o37}, {o38}, {o39}, {o40}, {o41}, {o42}, {o43}, {o44}, {o45}, {o46}, {o47}}}", "{{{o48}, {o49}, {o50}, {o51}, {o52}, {o53}, {o54}, {o55}, {o56}, {o57}, {o58}, {o59}, {o60}, {o61}, {o62}, {o63}}}", "{{{o64}, {o65}, {o66}, {o67}, {o68}, {o69}, {o70}, {o71}, {o72}, {o73}, {o74}, {o75}, {o76}, {o77}, {o78}, {o79}}}", "{{{o80}, {o81}, {o82}, {o83}, {o84}, {o85}, {o86}, {o87}, {o88}, {o89}, {o90}, {o91}, {o92}, {o93}, {o94}, {o95}}}", "{{{o96}, {o97}, {o98}, {o99}, {o100}, {o101}, {o102}, {o103}, {o104}, {o105}, {o106}, {o107}, {o108}, {o109}, {o110}, {o111}}}", "{{{o112}, {o113}, {o114}, {o115}, {o116}, {o117}, {o118}, {o119}, {o120}, {o121}, {o122}, {o123}, {o124}, {o125}, {o126}, {o127}}}"),
        p = in(reg64) p, v = in(reg32) v, z = in(reg32) 0u32,
        s1 = const 16 * ROW, s2 = const 32 * ROW, s3 = const 48 * ROW,
        a00 = const 128 * 0, a01 = const 128 * 0 + (if SPREAD { 1 } else { 4 }) * ROW, a02 = const 128 * 0 + 8 * ROW, a03 = const 128 * 0 + (if SPREAD { 9 } else { 12 }) * ROW,
        a10 = const 128 * 1, a11 = const 128 * 1 + (if SPREAD { 1 } else { 4 }) * ROW, a12 = const 128 * 1 + 8 * ROW, a13 = const 128 * 1 + (if SPREAD { 9 } else { 12 }) * ROW,
        a20 = const 128 * 2, a21 = const 128 * 2 + (if SPREAD { 1 } else { 4 }) * ROW, a22 = const 128 * 2 + 8 * ROW, a23 = const 128 * 2 + (if SPREAD { 9 } else { 12 }) * ROW,
        a30 = const 128 * 3, a31 = const 128 * 3 + (if SPREAD { 1 } else { 4 }) * ROW, a32 = const 128 * 3 + 8 * ROW, a33 = const 128 * 3 + (if SPREAD { 9 } else { 12 }) * ROW,
        p00 = const if GROUPED { 256 * 0 } else { 0 } + 0, p01 = const if GROUPED { 256 * 0 } else { 0 } + 2, p02 = const if GROUPED { 256 * 0 } else { 0 } + 4, p03 = const if GROUPED { 256 * 0 } else { 0 } + 6,
        p10 = const if GROUPED { 256 * 1 } else { 0 } + 0, p11 = const if GROUPED { 256 * 1 } else { 0 } + 2, p12 = const if GROUPED { 256 * 1 } else { 0 } + 4, p13 = const if GROUPED { 256 * 1 } else { 0 } + 6,
        p20 = const if GROUPED { 256 * 2 } else { 0 } + 0, p21 = const if GROUPED { 256 * 2 } else { 0 } + 2, p22 = const if GROUPED { 256 * 2 } else { 0 } + 4, p23 = const if GROUPED { 256 * 2 } else { 0 } + 6,
        p30 = const if GROUPED { 256 * 3 } else { 0 } + 0, p31 = const if GROUPED { 256 * 3 } else { 0 } + 2, p32 = const if GROUPED { 256 * 3 } else { 0 } + 4, p33 = const if GROUPED { 256 * 3 } else { 0 } + 6,
        o0 = inout(reg32) o[0][0], o1 = inout(reg32) o[0][1], o2 = inout(reg32) o[0][2], o3 = inout(reg32) o[0][3], o4 = inout(reg32) o[0][4], o5 = inout(reg32) o[0][5], o6 = inout(reg32) o[0][6], o7 = inout(reg32) o[0][7], o8 = inout(reg32) o[0][8], o9 = inout(reg32) o[0][9], o10 = inout(reg32) o[0][10], o11 = inout(reg32) o[0][11], o12 = inout(reg32) o[0][12], o13 = inout(reg32) o[0][13], o14 = inout(reg32) o[0][14], o15 = inout(reg32) o[0][15],
        o16 = inout(reg32) o[1][0], o17 = inout(reg32) o[1][1], o18 = inout(reg32) o[1][2], o19 = inout(reg32) o[1][3], o20 = inout(reg32) o[1][4], o21 = inout(reg32) o[1][5], o22 = inout(reg32) o[1][6], o23 = inout(reg32) o[1][7], o24 = inout(reg32) o[1][8], o25 = inout(reg32) o[1][9], o26 = inout(reg32) o[1][10], o27 = inout(reg32) o[1][11], o28 = inout(reg32) o[1][12], o29 = inout(reg32) o[1][13], o30 = inout(reg32) o[1][14], o31 = inout(reg32) o[1][15],
        o32 = inout(reg32) o[2][0], o33 = inout(reg32) o[2][1], o34 = inout(reg32) o[2][2], o35 = inout(reg32) o[2][3], o36 = inout(reg32) o[2][4], o37 = inout(reg32) o[2][5], o38 = inout(reg32) o[2][6], o39 = inout(reg32) o[2][7], o40 = inout(reg32) o[2][8], o41 = inout(reg32) o[2][9], o42 = inout(reg32) o[2][10], o43 = inout(reg32) o[2][11], o44 = inout(reg32) o[2][12], o45 = inout(reg32) o[2][13], o46 = inout(reg32) o[2][14], o47 = inout(reg32) o[2][15],
        o48 = inout(reg32) o[3][0], o49 = inout(reg32) o[3][1], o50 = inout(reg32) o[3][2], o51 = inout(reg32) o[3][3], o52 = inout(reg32) o[3][4], o53 = inout(reg32) o[3][5], o54 = inout(reg32) o[3][6], o55 = inout(reg32) o[3][7], o56 = inout(reg32) o[3][8], o57 = inout(reg32) o[3][9], o58 = inout(reg32) o[3][10], o59 = inout(reg32) o[3][11], o60 = inout(reg32) o[3][12], o61 = inout(reg32) o[3][13], o62 = inout(reg32) o[3][14], o63 = inout(reg32) o[3][15],
        o64 = inout(reg32) o[4][0], o65 = inout(reg32) o[4][1], o66 = inout(reg32) o[4][2], o67 = inout(reg32) o[4][3], o68 = inout(reg32) o[4][4], o69 = inout(reg32) o[4][5], o70 = inout(reg32) o[4][6], o71 = inout(reg32) o[4][7], o72 = inout(reg32) o[4][8], o73 = inout(reg32) o[4][9], o74 = inout(reg32) o[4][10], o75 = inout(reg32) o[4][11], o76 = inout(reg32) o[4][12], o77 = inout(reg32) o[4][13], o78 = inout(reg32) o[4][14], o79 = inout(reg32) o[4][15],
        o80 = inout(reg32) o[5][0], o81 = inout(reg32) o[5][1], o82 = inout(reg32) o[5][2], o83 = inout(reg32) o[5][3], o84 = inout(reg32) o[5][4], o85 = inout(reg32) o[5][5], o86 = inout(reg32) o[5][6], o87 = inout(reg32) o[5][7], o88 = inout(reg32) o[5][8], o89 = inout(reg32) o[5][9], o90 = inout(reg32) o[5][10], o91 = inout(reg32) o[5][11], o92 = inout(reg32) o[5][12], o93 = inout(reg32) o[5][13], o94 = inout(reg32) o[5][14], o95 = inout(reg32) o[5][15],
        o96 = inout(reg32) o[6][0], o97 = inout(reg32) o[6][1], o98 = inout(reg32) o[6][2], o99 = inout(reg32) o[6][3], o100 = inout(reg32) o[6][4], o101 = inout(reg32) o[6][5], o102 = inout(reg32) o[6][6], o103 = inout(reg32) o[6][7], o104 = inout(reg32) o[6][8], o105 = inout(reg32) o[6][9], o106 = inout(reg32) o[6][10], o107 = inout(reg32) o[6][11], o108 = inout(reg32) o[6][12], o109 = inout(reg32) o[6][13], o110 = inout(reg32) o[6][14], o111 = inout(reg32) o[6][15],
        o112 = inout(reg32) o[7][0], o113 = inout(reg32) o[7][1], o114 = inout(reg32) o[7][2], o115 = inout(reg32) o[7][3], o116 = inout(reg32) o[7][4], o117 = inout(reg32) o[7][5], o118 = inout(reg32) o[7][6], o119 = inout(reg32) o[7][7], o120 = inout(reg32) o[7][8], o121 = inout(reg32) o[7][9], o122 = inout(reg32) o[7][10], o123 = inout(reg32) o[7][11], o124 = inout(reg32) o[7][12], o125 = inout(reg32) o[7][13], o126 = inout(reg32) o[7][14], o127 = inout(reg32) o[7][15],
        options(nostack)
    );
}


/// `Sᵀ = K·Qᵀ` of the 32-row ring kernel for fp8-ds-mla
/// (`decode::mla_t_ring32`): [`mla_t_scores_ds`] at `m64n32k16` against
/// the 32-row Q tile (a J block 256 descriptor units on, the RoPE block at
/// 2048), each key's bytes converted once for the 32 rows. Returns the
/// accumulator as [`mla_t32_scores_e4m3`]'s.
///
/// # Safety
/// As [`mla_t_scores_ds`].
#[allow(named_asm_labels)]
#[inline(always)]
pub unsafe fn mla_t32_scores_ds(k: u32, sp: u32, rp: u32, q: u64, bar: u32, parity: u32) -> [f32; 16] {
    let mut s = [0f32; 16];
    core::arch::asm!(
        t_ds_scores!("m64n32k16", "{{ga0, ga1, ga2, ga3, ga4, ga5, ga6, ga7, ga8, ga9, ga10, ga11, ga12, ga13, ga14, ga15}}", "ga<16>", "X0", [["0", "1", "2", "3"], ["4", "5", "6", "7"], ["8", "9", "10", "11"], ["12", "13", "14", "15"]], ["0", "2", "4", "6"], ["256", "258", "260", "262"], ["512", "514", "516", "518"], ["768", "770", "772", "774"], ["1024", "1026", "1028", "1030"], ["1280", "1282", "1284", "1286"], ["1536", "1538", "1540", "1542"], ["1792", "1794", "1796", "1798"], ["2048", "2050", "2052", "2054"]),
        n0 = const DS_KEY2, n1 = const DS_KEY2 + 64, n2 = const DS_KEY2 + 128, n3 = const DS_KEY2 + 192, n4 = const DS_KEY2 + 256, n5 = const DS_KEY2 + 320, n6 = const DS_KEY2 + 384, n7 = const DS_KEY2 + 448,
        f1 = const DS_KEY2 + 4, f2 = const DS_KEY2 + 8, f3 = const DS_KEY2 + 12, r1 = const DS_KEY2 + 16,
        k = in(reg32) k, sp = in(reg32) sp, rp = in(reg32) rp, q = in(reg64) q, z = in(reg32) 0u32, bar = in(reg32) bar, parity = in(reg32) parity,
        s0 = out(reg32) s[0], s1 = out(reg32) s[1], s2 = out(reg32) s[2], s3 = out(reg32) s[3], s4 = out(reg32) s[4], s5 = out(reg32) s[5], s6 = out(reg32) s[6], s7 = out(reg32) s[7],
        s8 = out(reg32) s[8], s9 = out(reg32) s[9], s10 = out(reg32) s[10], s11 = out(reg32) s[11], s12 = out(reg32) s[12], s13 = out(reg32) s[13], s14 = out(reg32) s[14], s15 = out(reg32) s[15],
        options(nostack)
    );
    s
}
