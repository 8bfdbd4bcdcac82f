//! Symmetric layout of a plan's buffers and int32 signal pad for one launch size.

use crate::{DType, KernelError};
use symsched_plan::{ElemClass, LaunchSizes, Plan};

/// Bytes per signal line (one int32 per 64-byte line, as the generated kernel addresses them).
pub const SIGNAL_LINE: usize = 64;

/// Where each buffer and the signal pad live inside every rank's heap segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeapLayout {
    pub buf_offset: Vec<usize>,
    /// Bytes reserved per buffer: the largest rank's extent.
    pub buf_bytes: Vec<usize>,
    pub elem: Vec<DType>,
    pub signal_offset: usize,
    pub n_signals: usize,
    /// GM scratch of kernels with matmul steps (0 bytes otherwise), after the signal pad.
    pub workspace_offset: usize,
    pub workspace_bytes: usize,
    pub total: usize,
}

fn align64(x: usize) -> usize {
    x.div_ceil(64) * 64
}

impl HeapLayout {
    /// Layout for `plan` with the given data and wire types (accumulators as the runtime picks them).
    pub fn new(
        plan: &Plan,
        data: DType,
        wire: DType,
        sizes: &LaunchSizes,
    ) -> Result<Self, KernelError> {
        let mut off = 0usize;
        let (mut buf_offset, mut buf_bytes, mut elem) = (vec![], vec![], vec![]);
        for b in &plan.buffers {
            let t = match b.elem {
                ElemClass::Data => data,
                ElemClass::Wire => wire,
                ElemClass::Acc => data.accumulator(),
            };
            let mut max = 0u64;
            for r in 0..plan.group_size {
                max = max.max(b.total_len(r, sizes)?);
            }
            let bytes = usize::try_from(max * t.size())
                .map_err(|_| KernelError::Run(format!("buffer `{}` too large", b.name)))?;
            buf_offset.push(off);
            buf_bytes.push(bytes);
            elem.push(t);
            off = align64(off + bytes.max(1));
        }
        let signal_offset = off;
        let n_signals = plan.signals.len();
        let workspace_offset = align64(signal_offset + n_signals.max(1) * SIGNAL_LINE);
        let workspace_bytes = usize::try_from(crate::lower::workspace_bytes(plan, sizes)?)
            .map_err(|_| KernelError::Run("matmul workspace too large".into()))?;
        Ok(HeapLayout {
            buf_offset,
            buf_bytes,
            elem,
            signal_offset,
            n_signals,
            workspace_offset,
            workspace_bytes,
            total: workspace_offset + workspace_bytes,
        })
    }
}
