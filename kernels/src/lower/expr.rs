//! Size expressions as C expressions over the kernel's size-variable array.

use crate::KernelError;
use symsched_plan::{SizeExpr, SizeVar};

/// C expression for `e`, reading variable `v` as `sz_[index of v in size_vars]`.
pub fn to_c(e: &SizeExpr, vars: &[SizeVar]) -> Result<String, KernelError> {
    to_c_over(e, vars, "sz_")
}

/// C expression for `e` over the size-variable array named `array`.
pub fn to_c_over(e: &SizeExpr, vars: &[SizeVar], array: &str) -> Result<String, KernelError> {
    let to_c = |e: &SizeExpr, vars: &[SizeVar]| to_c_over(e, vars, array);
    Ok(match e {
        SizeExpr::Const(c) => format!("{c}ull"),
        SizeExpr::Var(v) => {
            let i = vars
                .iter()
                .position(|s| &s.name == v)
                .ok_or_else(|| KernelError::UnknownSizeVar(v.clone()))?;
            format!("{array}[{i}]")
        }
        SizeExpr::Add(a, b) => format!("({} + {})", to_c(a, vars)?, to_c(b, vars)?),
        SizeExpr::Mul(a, b) => format!("({} * {})", to_c(a, vars)?, to_c(b, vars)?),
        SizeExpr::CeilDiv(a, b) => format!("SymCeilDiv({}, {})", to_c(a, vars)?, to_c(b, vars)?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_nested_expressions() {
        let vars = vec![
            SizeVar {
                name: "n".into(),
                meaning: String::new(),
            },
            SizeVar {
                name: "m".into(),
                meaning: String::new(),
            },
        ];
        let e = SizeExpr::Add(
            Box::new(SizeExpr::var("m").scaled(4)),
            Box::new(SizeExpr::var("n").ceil_div(3)),
        );
        assert_eq!(
            to_c(&e, &vars).unwrap(),
            "((4ull * sz_[1]) + SymCeilDiv(sz_[0], 3ull))"
        );
        assert!(matches!(
            to_c(&SizeExpr::var("k"), &vars),
            Err(KernelError::UnknownSizeVar(_))
        ));
    }
}
