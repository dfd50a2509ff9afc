//! What the planner knows of the GPU and of a compiled kernel, and how
//! many blocks of a shape fit on one SM.

pub use decode_attn_abi::MAX_CLUSTER;

use decode_attn_abi::{Arch, KernelId};

use crate::error::{ensure, Result};
use crate::tuning::{DeviceFacts, Tuning};

/// What the planner needs to know about the GPU (read from the device by
/// `DecodeAttention::new`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The kernels' architecture on this GPU (`Arch::for_compute_capability`,
    /// or lower where `DECODE_ATTN_DEVICE_ARCH` says): which modules are
    /// loaded, so which families, merges and formats exist.
    pub arch: Arch,
    pub sm_count: u32,
    /// Dynamic + static shared memory one block may opt in to.
    pub max_smem_per_block: u32,
    pub max_smem_per_sm: u32,
    pub max_threads_per_sm: u32,
    pub regs_per_sm: u32,
    pub l2_bytes: u32,
    /// Most blocks per thread-block cluster a launch may use: 8 (the
    /// portable size) where the GPU runs Hopper's own kernels (sm_90a) and
    /// the driver has `cuLaunchKernelEx`, else 0 (no cluster merge).
    pub max_cluster: u32,
    /// What the driver reports of the GPU, which picks [`DeviceInfo::tuning`].
    pub facts: DeviceFacts,
    /// The thresholds of the `Auto` rules: the table of this GPU, or of the
    /// nearest one measured ([`Tuning::for_device`]).
    pub tuning: Tuning,
}

impl DeviceInfo {
    /// Rejects figures the planner cannot work with (zero SMs, no shared
    /// memory, ...), naming the field.
    pub fn validate(&self) -> Result<()> {
        ensure(self.sm_count >= 1, "device.sm_count", "at least 1", self.sm_count)?;
        ensure(self.max_smem_per_block >= 1, "device.max_smem_per_block", "at least 1 byte", self.max_smem_per_block)?;
        ensure(self.max_smem_per_sm >= 1, "device.max_smem_per_sm", "at least 1 byte", self.max_smem_per_sm)?;
        ensure(self.max_threads_per_sm >= 32, "device.max_threads_per_sm", "at least 32", self.max_threads_per_sm)?;
        ensure(self.regs_per_sm >= 256, "device.regs_per_sm", "at least 256", self.regs_per_sm)?;
        // The kernels merge a sequence's chunks in clusters of up to 8
        // blocks (the portable size), a power of two.
        ensure(
            self.max_cluster == 0 || (self.max_cluster.is_power_of_two() && self.max_cluster <= MAX_CLUSTER),
            "device.max_cluster",
            format!("0 (no clusters) or a power of two up to {MAX_CLUSTER}"),
            self.max_cluster,
        )?;
        let clusters = self.arch.module_for(decode_attn_abi::Merge::Cluster.needs()).is_some();
        ensure(self.max_cluster == 0 || clusters, "device.max_cluster", format!("0: {} kernels have no cluster merge", self.arch.name()), self.max_cluster)?;
        Ok(())
    }

    /// An H100 SXM's figures, for tests and examples that run without a GPU.
    pub const H100_SXM: DeviceInfo = DeviceInfo {
        arch: Arch::Sm90a,
        sm_count: 132,
        max_smem_per_block: 227 * 1024,
        max_smem_per_sm: 228 * 1024,
        max_threads_per_sm: 2048,
        regs_per_sm: 65536,
        l2_bytes: 50 * 1024 * 1024,
        max_cluster: 8,
        facts: DeviceFacts::H100_SXM,
        tuning: crate::tuning::H100_TABLE,
    };
}

/// What the compiled attention kernel allows (from `cuFuncGetAttribute`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelInfo {
    pub max_threads_per_block: u32,
    pub regs_per_thread: u32,
}

impl KernelInfo {
    pub fn validate(&self) -> Result<()> {
        ensure(
            (32..=1024).contains(&self.max_threads_per_block),
            "kernel.max_threads_per_block",
            "32..=1024",
            self.max_threads_per_block,
        )?;
        ensure((1..=255).contains(&self.regs_per_thread), "kernel.regs_per_thread", "1..=255", self.regs_per_thread)?;
        Ok(())
    }
}

/// The limits of the attention kernels a plan picks from:
/// [`DecodeAttention`](crate::DecodeAttention) reads each kernel's own from
/// the loaded module; one [`KernelInfo`] stands for every kernel of the
/// set (tests, offline planning).
pub trait KernelLimits {
    /// The limits of kernel `id`, `None` where there is no such kernel.
    fn limits(&self, id: &KernelId) -> Option<KernelInfo>;
}

impl KernelLimits for KernelInfo {
    fn limits(&self, id: &KernelId) -> Option<KernelInfo> {
        id.exists().then_some(*self)
    }
}

/// Blocks of `threads` threads using `smem` bytes that fit on one SM.
pub fn blocks_per_sm(dev: &DeviceInfo, kernel: &KernelInfo, threads: u32, smem: u32) -> u32 {
    // The driver reserves 1 KiB of shared memory per block.
    let by_smem = dev.max_smem_per_sm as u64 / (smem as u64 + 1024);
    // Registers are allocated per warp in units of 256.
    let regs_per_warp = (kernel.regs_per_thread.max(1) as u64 * 32).div_ceil(256) * 256;
    let by_regs = dev.regs_per_sm as u64 / (regs_per_warp * threads.div_ceil(32).max(1) as u64);
    let by_threads = dev.max_threads_per_sm as u64 / threads.max(1) as u64;
    by_smem.min(by_regs).min(by_threads).min(32) as u32
}
