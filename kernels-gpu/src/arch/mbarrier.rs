//! Shared-memory transaction barriers (`mbarrier`, sm_90) and the bulk copies
//! that complete on them (`cp.async.bulk`, the Tensor Memory Accelerator's
//! one-dimensional form): one thread issues a whole run of contiguous bytes
//! and every thread waits on the barrier's phase, instead of each thread
//! computing the addresses of its own 16-byte `cp.async` copies.
//!
//! A copy barrier is initialised with one expected arrival per phase: the
//! issuing thread's [`arrive_expect_tx`], which also announces the bytes
//! the phase's copies will write. The phase completes when that arrival has
//! happened and all those bytes have landed; waiters name the phase by its
//! parity (the `n`-th use of a barrier waits for parity `n & 1`). Barriers
//! between warps ([`init_count`]) complete a phase when that many threads
//! have called [`arrive`]; one that hands a buffer back is waited on first
//! with parity 1, which a fresh barrier (in phase 0) reports as complete.

/// `mbarrier.init` with one expected arrival per phase.
///
/// # Safety
/// `bar` is an 8-byte aligned shared address of the block, not in use as a
/// barrier (or invalidated) and not accessed by any other thread until a
/// block barrier after [`fence_init`].
#[inline(always)]
pub unsafe fn init(bar: u32) {
    core::arch::asm!("mbarrier.init.shared::cta.b64 [{b}], 1;", b = in(reg32) bar, options(nostack));
}

/// `mbarrier.init` with `count` expected arrivals per phase.
///
/// # Safety
/// As [`init`].
#[inline(always)]
pub unsafe fn init_count(bar: u32, count: u32) {
    core::arch::asm!("mbarrier.init.shared::cta.b64 [{b}], {n};", b = in(reg32) bar, n = in(reg32) count, options(nostack));
}

/// `mbarrier.arrive` (release at CTA scope): this thread's arrival on the
/// current phase; its earlier shared-memory writes are visible to the
/// threads that then see the phase complete.
///
/// # Safety
/// `bar` was initialised; no more arrivals per phase than its count.
#[inline(always)]
pub unsafe fn arrive(bar: u32) {
    core::arch::asm!("{{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [{b}];\n}}", b = in(reg32) bar, options(nostack));
}

/// `fence.mbarrier_init.release.cluster`: orders this thread's barrier
/// initialisations before the bulk copies (async proxy) that complete on them.
#[inline(always)]
pub fn fence_init() {
    // SAFETY: a fence.
    unsafe { core::arch::asm!("fence.mbarrier_init.release.cluster;", options(nostack)) }
}

/// `mbarrier.inval`: ends the barrier's life, so its 8 bytes may be reused
/// as ordinary shared memory.
///
/// # Safety
/// No copy is pending on it and no thread waits on it any more.
#[inline(always)]
pub unsafe fn inval(bar: u32) {
    core::arch::asm!("mbarrier.inval.shared::cta.b64 [{b}];", b = in(reg32) bar, options(nostack));
}

/// `mbarrier.arrive.expect_tx`: the phase's one arrival, announcing `bytes`
/// bytes of bulk copies that complete on it.
///
/// # Safety
/// `bar` was initialised; one call per phase.
#[inline(always)]
pub unsafe fn arrive_expect_tx(bar: u32, bytes: u32) {
    core::arch::asm!("{{\n.reg .b64 state;\nmbarrier.arrive.expect_tx.shared::cta.b64 state, [{b}], {n};\n}}",
        b = in(reg32) bar, n = in(reg32) bytes, options(nostack));
}

/// `mbarrier.try_wait.parity`: whether the phase of parity `parity` has
/// completed (the instruction may wait a while for it first). On `true`, the
/// bytes its copies wrote are visible to this thread.
///
/// # Safety
/// `bar` was initialised (and the initialisation ordered before this call
/// by a block barrier).
#[inline(always)]
pub unsafe fn try_wait_parity(bar: u32, parity: u32) -> bool {
    let done: u32;
    core::arch::asm!(
        "{{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [{b}], {q};\nselp.u32 {d}, 1, 0, p;\n}}",
        b = in(reg32) bar, q = in(reg32) parity, d = out(reg32) done, options(nostack));
    done != 0
}

/// Waits until the phase of parity `parity` of `bar` has completed.
///
/// # Safety
/// As [`try_wait_parity`]; the phase's arrival must come, or this never returns.
#[inline(always)]
pub unsafe fn wait_parity(bar: u32, parity: u32) {
    while !try_wait_parity(bar, parity) {}
}

/// `cp.async.mbarrier.arrive.noinc`: one of the phase's expected arrivals,
/// made by the barrier itself once this thread's earlier `cp.async` copies
/// have landed (their bytes then visible to the threads that see the phase
/// complete).
///
/// # Safety
/// `bar` was initialised with this arrival in its count ([`init_count`]).
#[inline(always)]
pub unsafe fn cp_async_arrive_noinc(bar: u32) {
    core::arch::asm!("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [{b}];", b = in(reg32) bar, options(nostack));
}

/// `cp.async.bulk` global → shared of `bytes` bytes, completing on `bar`
/// (whose phase must expect them: [`arrive_expect_tx`]).
///
/// # Safety
/// `dst` (a shared address of the block) and `src` 16-byte aligned, `bytes`
/// a multiple of 16; `src .. src + bytes` readable; no other access to the
/// destination until the phase completes.
#[inline(always)]
pub unsafe fn bulk_copy(dst: u32, src: u64, bytes: u32, bar: u32) {
    core::arch::asm!(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [{d}], [{s}], {n}, [{b}];",
        d = in(reg32) dst, s = in(reg64) src, n = in(reg32) bytes, b = in(reg32) bar, options(nostack));
}
