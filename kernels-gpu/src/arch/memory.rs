//! Global memory: asynchronous copies into shared memory, vector loads/stores.

/// `cp.async.cg.shared.global` of 16 bytes; when `src_bytes` is 0 nothing is
/// read and the 16 destination bytes are zero-filled.
///
/// The copy asks L2 for the 128 bytes around it (`.L2::128B`): a 64-byte
/// int4 row of an NHD cache shares its 128 bytes with the next kv head's
/// row, which that head's block (reading the same tokens at about the same
/// time) then finds in L2. Measured on an H100: int4-g32 grid C 128K 12 %
/// and D (128, 2K) 5 % faster, every other row unchanged; `.L2::256B` no
/// better (docs/perf.md, "Cache hints").
///
/// # Safety
/// `dst` must be a 16-byte aligned shared address of the block; `src` a
/// 16-byte aligned global address readable for `src_bytes` (0..=16) bytes;
/// the destination bytes past `src_bytes` are zero-filled.
#[inline(always)]
pub unsafe fn cp_async_16(dst: u32, src: u64, src_bytes: u32) {
    core::arch::asm!("cp.async.cg.shared.global.L2::128B [{d}], [{s}], 16, {n};",
        d = in(reg32) dst, s = in(reg64) src, n = in(reg32) src_bytes, options(nostack));
}

/// `cp.async.ca.shared.global` of 4 bytes (`src_bytes` of them read, the
/// rest zero-filled).
///
/// # Safety
/// As [`cp_async_16`], for 4-byte aligned addresses.
#[inline(always)]
pub unsafe fn cp_async_4(dst: u32, src: u64, src_bytes: u32) {
    core::arch::asm!("cp.async.ca.shared.global [{d}], [{s}], 4, {n};",
        d = in(reg32) dst, s = in(reg64) src, n = in(reg32) src_bytes, options(nostack));
}

/// `cp.async.ca.shared.global` of 8 bytes.
///
/// # Safety
/// As [`cp_async_16`], for 8-byte aligned addresses.
#[inline(always)]
pub unsafe fn cp_async_8(dst: u32, src: u64, src_bytes: u32) {
    core::arch::asm!("cp.async.ca.shared.global [{d}], [{s}], 8, {n};",
        d = in(reg32) dst, s = in(reg64) src, n = in(reg32) src_bytes, options(nostack));
}

/// `cp.async.commit_group`: closes the group of copies issued so far.
#[inline(always)]
pub fn cp_async_commit() {
    // SAFETY: only bookkeeping of this thread's outstanding copies.
    unsafe { core::arch::asm!("cp.async.commit_group;", options(nostack)) }
}

/// `cp.async.wait_group N`: waits until at most `N` groups are pending.
#[inline(always)]
pub fn cp_async_wait<const N: u32>() {
    // SAFETY: waits on this thread's own copies; acts as a compiler barrier
    // for the shared memory the copies write.
    unsafe { core::arch::asm!("cp.async.wait_group {n};", n = const N, options(nostack)) }
}

/// `cp.async.bulk.prefetch.L2.global`: starts bringing `bytes` (a
/// multiple of 16) from `addr` (16-byte aligned) into L2; nothing waits
/// for it (sm_90).
#[inline(always)]
pub unsafe fn prefetch_l2_bulk(addr: u64, bytes: u32) {
    core::arch::asm!("cp.async.bulk.prefetch.L2.global [{a}], {n};", a = in(reg64) addr, n = in(reg32) bytes, options(nostack, preserves_flags));
}

/// `prefetch.global.L1`: brings the line of `addr` into this SM's L1, so
/// that a later load of it hits instead of waiting on L2 or HBM.
///
/// # Safety
/// `addr` must be a global address.
#[inline(always)]
pub unsafe fn prefetch_l1(addr: u64) {
    core::arch::asm!("prefetch.global.L1 [{a}];", a = in(reg64) addr, options(nostack, preserves_flags));
}

/// `ld.global.nc.b32`: read-only load through the non-coherent cache.
///
/// # Safety
/// `addr` must be a 4-byte aligned global address, readable and not written
/// during the kernel.
#[inline(always)]
pub unsafe fn ld_global_nc_u32(addr: u64) -> u32 {
    let r: u32;
    core::arch::asm!("ld.global.nc.b32 {r}, [{a}];", r = out(reg32) r, a = in(reg64) addr,
        options(readonly, nostack, pure));
    r
}

/// `ld.global.nc.v4.f32`.
///
/// # Safety
/// `addr` must be a 16-byte aligned readable global address.
#[inline(always)]
pub unsafe fn ld_global_nc_v4_f32(addr: u64) -> [f32; 4] {
    let (x, y, z, w): (f32, f32, f32, f32);
    core::arch::asm!("ld.global.nc.v4.f32 {{{x}, {y}, {z}, {w}}}, [{a}];", a = in(reg64) addr,
        x = out(reg32) x, y = out(reg32) y, z = out(reg32) z, w = out(reg32) w,
        options(readonly, nostack, pure));
    [x, y, z, w]
}

/// `ld.global.nc.f32`.
///
/// # Safety
/// `addr` must be a 4-byte aligned readable global address.
#[inline(always)]
pub unsafe fn ld_global_nc_f32(addr: u64) -> f32 {
    let r: f32;
    core::arch::asm!("ld.global.nc.f32 {r}, [{a}];", r = out(reg32) r, a = in(reg64) addr,
        options(readonly, nostack, pure));
    r
}

/// `st.global.v4.f32`.
///
/// # Safety
/// `addr` must be a 16-byte aligned writable global address.
#[inline(always)]
pub unsafe fn st_global_v4_f32(addr: u64, v: [f32; 4]) {
    core::arch::asm!("st.global.v4.f32 [{a}], {{{x}, {y}, {z}, {w}}};", a = in(reg64) addr,
        x = in(reg32) v[0], y = in(reg32) v[1], z = in(reg32) v[2], w = in(reg32) v[3],
        options(nostack));
}

/// `st.global.f32`.
///
/// # Safety
/// `addr` must be a 4-byte aligned writable global address.
#[inline(always)]
pub unsafe fn st_global_f32(addr: u64, v: f32) {
    core::arch::asm!("st.global.f32 [{a}], {v};", a = in(reg64) addr, v = in(reg32) v, options(nostack));
}

/// `st.global.v2.b32` (e.g. four packed 16-bit values).
///
/// # Safety
/// `addr` must be an 8-byte aligned writable global address.
#[inline(always)]
pub unsafe fn st_global_v2_u32(addr: u64, v: [u32; 2]) {
    core::arch::asm!("st.global.v2.b32 [{a}], {{{x}, {y}}};", a = in(reg64) addr,
        x = in(reg32) v[0], y = in(reg32) v[1], options(nostack));
}

/// `st.global.v4.b32` (e.g. eight packed 16-bit values).
///
/// # Safety
/// `addr` must be a 16-byte aligned writable global address.
#[inline(always)]
pub unsafe fn st_global_v4_u32(addr: u64, v: [u32; 4]) {
    core::arch::asm!("st.global.v4.b32 [{a}], {{{x}, {y}, {z}, {w}}};", a = in(reg64) addr,
        x = in(reg32) v[0], y = in(reg32) v[1], z = in(reg32) v[2], w = in(reg32) v[3],
        options(nostack));
}

/// `st.global.b32`.
///
/// # Safety
/// `addr` must be a 4-byte aligned writable global address.
#[inline(always)]
pub unsafe fn st_global_u32(addr: u64, v: u32) {
    core::arch::asm!("st.global.b32 [{a}], {v};", a = in(reg64) addr, v = in(reg32) v, options(nostack));
}

/// `ld.global.nc.v2.b32`: 8 bytes.
///
/// # Safety
/// `addr` must be an 8-byte aligned readable global address.
#[inline(always)]
pub unsafe fn ld_global_nc_v2_u32(addr: u64) -> [u32; 2] {
    let (a, b): (u32, u32);
    core::arch::asm!("ld.global.nc.v2.b32 {{{a}, {b}}}, [{p}];", a = out(reg32) a, b = out(reg32) b, p = in(reg64) addr,
        options(readonly, nostack, pure));
    [a, b]
}

/// `st.global.b8`.
///
/// # Safety
/// `addr` must be a writable global address.
#[inline(always)]
pub unsafe fn st_global_u8(addr: u64, v: u32) {
    core::arch::asm!("st.global.b8 [{p}], {v};", p = in(reg64) addr, v = in(reg32) v, options(nostack));
}

/// `st.global.b16`.
///
/// # Safety
/// `addr` must be a 2-byte aligned writable global address.
#[inline(always)]
pub unsafe fn st_global_u16(addr: u64, v: u32) {
    core::arch::asm!("{{ .reg .b16 h; cvt.u16.u32 h, {v}; st.global.b16 [{p}], h; }}", p = in(reg64) addr, v = in(reg32) v, options(nostack));
}

/// `ld.global.nc.u8`, zero-extended.
///
/// # Safety
/// `addr` must be a readable global address.
#[inline(always)]
pub unsafe fn ld_global_nc_u8(addr: u64) -> u32 {
    let r: u32;
    core::arch::asm!("ld.global.nc.u8 {r}, [{a}];", r = out(reg32) r, a = in(reg64) addr,
        options(readonly, nostack, pure));
    r
}

/// `ld.global.nc.b16`, zero-extended.
///
/// # Safety
/// `addr` must be a 2-byte aligned readable global address.
#[inline(always)]
pub unsafe fn ld_global_nc_u16(addr: u64) -> u32 {
    let r: u32;
    core::arch::asm!("{{ .reg .b16 h; ld.global.nc.b16 h, [{a}]; cvt.u32.u16 {r}, h; }}", r = out(reg32) r, a = in(reg64) addr,
        options(readonly, nostack, pure));
    r
}

/// `ld.global.cg.f32`: a load served by L2, never by this SM's L1 (which
/// may hold a line of the same address from before another block wrote it).
///
/// # Safety
/// `addr` must be a 4-byte aligned readable global address.
#[inline(always)]
pub unsafe fn ld_global_cg_f32(addr: u64) -> f32 {
    let r: f32;
    core::arch::asm!("ld.global.cg.f32 {r}, [{a}];", r = out(reg32) r, a = in(reg64) addr, options(nostack, readonly));
    r
}

/// `ld.global.cg.v4.f32` (see [`ld_global_cg_f32`]).
///
/// # Safety
/// `addr` must be a 16-byte aligned readable global address.
#[inline(always)]
pub unsafe fn ld_global_cg_v4_f32(addr: u64) -> [f32; 4] {
    let (x, y, z, w): (f32, f32, f32, f32);
    core::arch::asm!("ld.global.cg.v4.f32 {{{x}, {y}, {z}, {w}}}, [{a}];", a = in(reg64) addr,
        x = out(reg32) x, y = out(reg32) y, z = out(reg32) z, w = out(reg32) w, options(nostack, readonly));
    [x, y, z, w]
}

/// `atom.acq_rel.gpu.global.add.u32`: adds `v` at `addr` and returns the
/// old value, releasing this thread's earlier accesses (and, after a block
/// barrier, those of the block it observed) and acquiring those released
/// to `addr` before it. One `MEMBAR` before the atomic and an L1
/// invalidation after, where `fence.acq_rel.gpu` on both sides of a
/// relaxed atomic takes a second `MEMBAR` after it (SASS, sm_90a).
///
/// # Safety
/// `addr` must be a 4-byte aligned global address of the kernel's.
#[inline(always)]
pub unsafe fn atom_add_acq_rel_gpu_u32(addr: u64, v: u32) -> u32 {
    let r: u32;
    core::arch::asm!("atom.acq_rel.gpu.global.add.u32 {r}, [{a}], {v};", r = out(reg32) r, a = in(reg64) addr, v = in(reg32) v, options(nostack));
    r
}
