//! Untyped views of device buffers, so one `run` signature serves every
//! dtype and KV format while the element type is still checked.

use std::marker::PhantomData;

use cust::memory::{DeviceCopy, DeviceSlice};

/// Element types a device buffer may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ElemType {
    Bf16,
    F16,
    /// Bytes (int8 cache rows).
    U8,
    /// f32 (scales of quantized caches).
    F32,
    /// u32 (sequence lengths on the device).
    U32,
    /// i32 (block tables: page ids).
    I32,
}

impl ElemType {
    pub fn size_bytes(self) -> usize {
        match self {
            ElemType::Bf16 | ElemType::F16 => 2,
            ElemType::U8 => 1,
            ElemType::F32 | ElemType::U32 | ElemType::I32 => 4,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            ElemType::Bf16 => "bf16",
            ElemType::F16 => "f16",
            ElemType::U8 => "u8",
            ElemType::F32 => "f32",
            ElemType::U32 => "u32",
            ElemType::I32 => "i32",
        }
    }
}

/// Address, length (elements) and element type of one buffer.
#[derive(Clone, Copy, Debug)]
pub struct BufferDesc {
    pub addr: u64,
    pub len: usize,
    pub elem: ElemType,
}

/// Host types that name an [`ElemType`].
pub trait Element: DeviceCopy {
    const ELEM: ElemType;
}
impl Element for half::bf16 {
    const ELEM: ElemType = ElemType::Bf16;
}
impl Element for half::f16 {
    const ELEM: ElemType = ElemType::F16;
}
impl Element for u8 {
    const ELEM: ElemType = ElemType::U8;
}
impl Element for f32 {
    const ELEM: ElemType = ElemType::F32;
}
impl Element for u32 {
    const ELEM: ElemType = ElemType::U32;
}
impl Element for i32 {
    const ELEM: ElemType = ElemType::I32;
}

/// A read-only device buffer: address, length and element type.
#[derive(Clone, Copy, Debug)]
pub struct TensorRef<'a> {
    pub(crate) addr: u64,
    pub(crate) len: usize,
    pub(crate) elem: ElemType,
    _borrow: PhantomData<&'a ()>,
}

/// A device buffer the library writes.
#[derive(Debug)]
pub struct TensorMut<'a> {
    pub(crate) addr: u64,
    pub(crate) len: usize,
    pub(crate) elem: ElemType,
    _borrow: PhantomData<&'a mut ()>,
}

impl<'a> TensorRef<'a> {
    /// A view of raw device memory, for buffers not owned through cust.
    ///
    /// # Safety
    /// `addr .. addr + len * elem.size_bytes()` must be device memory of the
    /// current context, valid and not written by others while in use.
    pub unsafe fn from_raw(addr: u64, len: usize, elem: ElemType) -> Self {
        TensorRef { addr, len, elem, _borrow: PhantomData }
    }
}

impl<'a> TensorMut<'a> {
    /// # Safety
    /// As [`TensorRef::from_raw`], and the memory must be writable.
    pub unsafe fn from_raw(addr: u64, len: usize, elem: ElemType) -> Self {
        TensorMut { addr, len, elem, _borrow: PhantomData }
    }
}

/// The accessors both views share (they differ only in the borrow).
macro_rules! view_methods {
    ($view:ident) => {
        impl<'a> $view<'a> {
            pub fn len(&self) -> usize {
                self.len
            }
            pub fn is_empty(&self) -> bool {
                self.len == 0
            }
            /// The device address.
            pub fn addr(&self) -> u64 {
                self.addr
            }
            pub fn elem(&self) -> ElemType {
                self.elem
            }
            /// Address, length and type, as the buffer checks take them.
            pub(crate) fn desc(&self) -> BufferDesc {
                BufferDesc { addr: self.addr, len: self.len, elem: self.elem }
            }
            /// The bytes from `offset` to the end, as elements of `elem`
            /// (`None` past the end): a part of one buffer that holds
            /// several tensors. For a written buffer the caller makes sure
            /// that parts taken from one buffer are written at disjoint
            /// elements.
            pub(crate) fn tail(&self, offset: u64, elem: ElemType) -> Option<$view<'a>> {
                let bytes = (self.len as u64).checked_mul(self.elem.size_bytes() as u64)?.checked_sub(offset)?;
                Some($view { addr: self.addr.checked_add(offset)?, len: (bytes / elem.size_bytes() as u64) as usize, elem, _borrow: PhantomData })
            }
        }
    };
}
view_methods!(TensorRef);
view_methods!(TensorMut);

impl<'a, T: Element> From<&'a DeviceSlice<T>> for TensorRef<'a> {
    fn from(s: &'a DeviceSlice<T>) -> Self {
        TensorRef { addr: s.as_device_ptr().as_raw(), len: s.len(), elem: T::ELEM, _borrow: PhantomData }
    }
}

impl<'a, T: Element> From<&'a mut DeviceSlice<T>> for TensorMut<'a> {
    fn from(s: &'a mut DeviceSlice<T>) -> Self {
        TensorMut { addr: s.as_device_ptr().as_raw(), len: s.len(), elem: T::ELEM, _borrow: PhantomData }
    }
}

impl<'a, T: Element> From<&'a cust::memory::DeviceBuffer<T>> for TensorRef<'a> {
    fn from(s: &'a cust::memory::DeviceBuffer<T>) -> Self {
        TensorRef::from(&**s)
    }
}

impl<'a, T: Element> From<&'a mut cust::memory::DeviceBuffer<T>> for TensorMut<'a> {
    fn from(s: &'a mut cust::memory::DeviceBuffer<T>) -> Self {
        TensorMut::from(&mut **s)
    }
}
