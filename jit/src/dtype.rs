//! Element types and reduce ops a kernel is generated for.
//!
//! This is the host runtime's vocabulary (`runtime/src/exec/dtype.rs`, `reduce.rs`) restated
//! for the back end, which must not depend on the runtime (the runtime depends on it). The
//! names, sizes, accumulators and wire rules are the runtime's; the vocabulary is moving into
//! `plan/`, and this module goes away when it has.

use crate::JitError;
use std::fmt;

/// A concrete element type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    F32,
    F64,
    F16,
    Bf16,
    I32,
    I64,
    U8,
    /// fp8 with 4 exponent bits, 3 mantissa bits, no infinities (wire format only).
    F8E4M3,
    /// fp8 with 5 exponent bits, 2 mantissa bits (wire format only).
    F8E5M2,
}

impl DType {
    /// Every dtype, data types first.
    pub const ALL: [DType; 9] = [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::Bf16,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::F8E4M3,
        DType::F8E5M2,
    ];

    /// Parse the runtime's names (`f32`, `bf16`, `e4m3`, …, with the same aliases).
    pub fn parse(name: &str) -> Result<DType, JitError> {
        Ok(match name.to_ascii_lowercase().as_str() {
            "f32" | "float32" | "float" => DType::F32,
            "f64" | "float64" | "double" => DType::F64,
            "f16" | "float16" | "half" | "fp16" => DType::F16,
            "bf16" | "bfloat16" => DType::Bf16,
            "i32" | "int32" | "int" => DType::I32,
            "i64" | "int64" | "long" => DType::I64,
            "u8" | "uint8" => DType::U8,
            "e4m3" | "fp8_e4m3" | "f8e4m3" | "float8_e4m3fn" | "e4m3fn" | "fp8" => DType::F8E4M3,
            "e5m2" | "fp8_e5m2" | "f8e5m2" | "float8_e5m2" => DType::F8E5M2,
            _ => {
                return Err(JitError::UnknownName {
                    what: "dtype",
                    name: name.to_string(),
                })
            }
        })
    }

    /// Short name (`f32`, `bf16`, `e4m3`, …).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::F16 => "f16",
            DType::Bf16 => "bf16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U8 => "u8",
            DType::F8E4M3 => "e4m3",
            DType::F8E5M2 => "e5m2",
        }
    }

    /// Bytes per element.
    pub fn size(self) -> u64 {
        match self {
            DType::F64 | DType::I64 => 8,
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::Bf16 => 2,
            DType::U8 | DType::F8E4M3 | DType::F8E5M2 => 1,
        }
    }

    pub fn is_float(self) -> bool {
        !matches!(self, DType::I32 | DType::I64 | DType::U8)
    }

    /// Whether users may hold tensors of this type (fp8 is a wire format only).
    pub fn is_data(self) -> bool {
        !matches!(self, DType::F8E4M3 | DType::F8E5M2)
    }

    /// The accumulator for reductions over this data type.
    pub fn accumulator(self) -> DType {
        match self {
            DType::F16 | DType::Bf16 | DType::F8E4M3 | DType::F8E5M2 => DType::F32,
            d => d,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The launch's reduce op.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    /// `sum`, then one division by the group size over every written role at the end.
    Avg,
    /// NaN in the accumulated value wins; otherwise the larger (the first on ties).
    Max,
    Min,
}

impl ReduceOp {
    pub const ALL: [ReduceOp; 4] = [ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min];

    pub fn parse(name: &str) -> Result<ReduceOp, JitError> {
        Ok(match name.to_ascii_lowercase().as_str() {
            "sum" => ReduceOp::Sum,
            "avg" | "mean" => ReduceOp::Avg,
            "max" => ReduceOp::Max,
            "min" => ReduceOp::Min,
            _ => {
                return Err(JitError::UnknownName {
                    what: "reduce op",
                    name: name.to_string(),
                })
            }
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Avg => "avg",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
        }
    }
}

impl fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The three dtypes of one launch, one per [`symsched_plan::ElemClass`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ElemTypes {
    pub data: DType,
    pub wire: DType,
    pub acc: DType,
}

impl ElemTypes {
    /// The runtime's rule: `data` is a user type; integers travel as themselves, floats may use
    /// any float wire.
    ///
    /// ```
    /// use symsched_jit::{DType, ElemTypes};
    /// let t = ElemTypes::new(DType::Bf16, Some(DType::F8E5M2)).unwrap();
    /// assert_eq!(t.acc, DType::F32);
    /// assert!(ElemTypes::new(DType::I32, Some(DType::F16)).is_err());
    /// ```
    pub fn new(data: DType, wire: Option<DType>) -> Result<ElemTypes, JitError> {
        if !data.is_data() {
            return Err(JitError::Types(format!(
                "{data} is a wire format only, not a data type"
            )));
        }
        let wire = wire.unwrap_or(data);
        if data.is_float() != wire.is_float() || (!data.is_float() && wire != data) {
            return Err(JitError::Types(format!(
                "data type {data} cannot travel as {wire}"
            )));
        }
        Ok(ElemTypes {
            data,
            wire,
            acc: data.accumulator(),
        })
    }

    pub fn of(&self, class: symsched_plan::ElemClass) -> DType {
        match class {
            symsched_plan::ElemClass::Data => self.data,
            symsched_plan::ElemClass::Wire => self.wire,
            symsched_plan::ElemClass::Acc => self.acc,
        }
    }
}
