//! Reading a `torch.Tensor` from native code, straight from the object, building no Python
//! value: the torch types both cached calls check against (`a2a_hit`, `tensor_hit`) and the
//! alltoall's per-tensor checks (`tensor_hit` reads fewer attributes for heap tensors).

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;

/// `torch.Tensor` and `torch.strided`, looked up once.
static TORCH: PyOnceLock<(Py<PyType>, Py<PyAny>)> = PyOnceLock::new();

/// `torch.Tensor` and `torch.strided`.
pub(crate) fn torch_types(py: Python<'_>) -> PyResult<(Bound<'_, PyType>, Bound<'_, PyAny>)> {
    let (tensor, strided) = TORCH.get_or_try_init(py, || -> PyResult<_> {
        let torch = py.import("torch")?;
        Ok((
            torch.getattr("Tensor")?.cast_into::<PyType>()?.unbind(),
            torch.getattr("strided")?.unbind(),
        ))
    })?;
    Ok((tensor.bind(py).clone(), strided.bind(py).clone()))
}

/// What a launch needs from one tensor that passed the checks.
pub(crate) struct Seen {
    pub(crate) ptr: usize,
    pub(crate) numel: u64,
    pub(crate) contiguous: bool,
}

/// The checks `symsched.torch.adapter.TorchAdapter.scan_list` made per tensor: a CPU strided tensor of `dtype` (and, when
/// autograd records, not one that requires grad: that call takes the differentiable form).
/// `dtype` None: the caller already read it.
pub(crate) fn see(
    t: &Bound<'_, PyAny>,
    tensor: &Bound<'_, PyType>,
    strided: &Bound<'_, PyAny>,
    dtype: Option<&Bound<'_, PyAny>>,
    grad: bool,
) -> PyResult<Option<Seen>> {
    let py = t.py();
    if !t.is_instance(tensor)?
        || dtype.is_some_and(|d| !t.getattr(intern!(py, "dtype")).is_ok_and(|x| x.is(d)))
        || !t.getattr(intern!(py, "is_cpu"))?.is_truthy()?
        || !t.getattr(intern!(py, "layout"))?.is(strided)
        || (grad && t.getattr(intern!(py, "requires_grad"))?.is_truthy()?)
    {
        return Ok(None);
    }
    Ok(Some(Seen {
        numel: t.call_method0(intern!(py, "numel"))?.extract()?,
        ptr: t.call_method0(intern!(py, "data_ptr"))?.extract()?,
        contiguous: t.call_method0(intern!(py, "is_contiguous"))?.is_truthy()?,
    }))
}
