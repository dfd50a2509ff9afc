//! Launches with a thread-block cluster dimension. `cuLaunchKernelEx`
//! (CUDA 12) postdates the driver bindings cust 0.3 ships, so it is looked
//! up at run time with `cuGetProcAddress`; its config and attribute structs
//! are declared here with the layout of CUDA 12's `cuda.h`.

use std::ffi::{c_void, CStr};

use cust::sys as cuda;

/// `CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION`.
const ATTRIBUTE_CLUSTER_DIMENSION: u32 = 4;

/// `CUlaunchAttribute`: an id, padding to 8 bytes, a 64-byte value union
/// (for the cluster dimension its first three words: x, y, z).
#[repr(C, align(8))]
struct LaunchAttribute {
    id: u32,
    _pad: u32,
    value: [u32; 16],
}

/// `CUlaunchConfig`.
#[repr(C)]
struct LaunchConfig {
    grid: [u32; 3],
    block: [u32; 3],
    shared_mem_bytes: u32,
    stream: cuda::CUstream,
    attrs: *mut LaunchAttribute,
    num_attrs: u32,
}

const _: () = assert!(std::mem::size_of::<LaunchAttribute>() == 72);
const _: () = assert!(std::mem::size_of::<LaunchConfig>() == 56);

type LaunchKernelEx = unsafe extern "C" fn(*const LaunchConfig, cuda::CUfunction, *mut *mut c_void, *mut *mut c_void) -> cuda::CUresult;

/// The driver's `cuLaunchKernelEx`, or `None` when it has none (drivers
/// before CUDA 12): plans then merge through global memory.
#[derive(Clone, Copy)]
pub(crate) struct ClusterLauncher(LaunchKernelEx);

impl ClusterLauncher {
    pub(crate) fn load() -> Option<Self> {
        let name: &CStr = c"cuLaunchKernelEx";
        let mut pfn: *mut c_void = std::ptr::null_mut();
        // SAFETY: a symbol lookup; the pointer is only used if the driver
        // returns one for the CUDA 12.0 ABI of that symbol.
        let status = unsafe { cuda::cuGetProcAddress(name.as_ptr(), &mut pfn, 12000, 0) };
        if status != cuda::CUresult::CUDA_SUCCESS || pfn.is_null() {
            return None;
        }
        // SAFETY: the driver's cuLaunchKernelEx has this signature in CUDA 12.
        Some(ClusterLauncher(unsafe { std::mem::transmute::<*mut c_void, LaunchKernelEx>(pfn) }))
    }

    /// Launches `func` as clusters of `cluster` blocks along x (`grid.0` a
    /// multiple of it).
    ///
    /// # Safety
    /// As `cuLaunchKernel`: `args` must point to the kernel's parameters and
    /// the launch shape must be valid for it.
    pub(crate) unsafe fn launch(
        &self,
        func: cuda::CUfunction,
        grid: (u32, u32, u32),
        threads: u32,
        smem: u32,
        cluster: u32,
        stream: cuda::CUstream,
        args: *mut *mut c_void,
    ) -> cuda::CUresult {
        let mut value = [0u32; 16];
        value[..3].copy_from_slice(&[cluster, 1, 1]);
        let mut attr = LaunchAttribute { id: ATTRIBUTE_CLUSTER_DIMENSION, _pad: 0, value };
        let config = LaunchConfig {
            grid: [grid.0, grid.1, grid.2],
            block: [threads, 1, 1],
            shared_mem_bytes: smem,
            stream,
            attrs: &mut attr,
            num_attrs: 1,
        };
        (self.0)(&config, func, args, std::ptr::null_mut())
    }
}
