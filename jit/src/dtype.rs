//! The element types a kernel is generated for: the plan's vocabulary ([`DType`],
//! [`ReduceOp`], re-exported from `symsched_plan`, where every executor and lowering takes it
//! from) and the launch's three types, one per element class, with the runtime's wire rule.

use crate::JitError;
pub use symsched_plan::{DType, ReduceOp};

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
