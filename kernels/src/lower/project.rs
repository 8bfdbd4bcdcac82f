//! The CANN build project of a lowered kernel: the `CMakeLists.txt` written beside the kernel,
//! step table, launch stub and header (template `templates/CMakeLists.txt`; the layout is
//! documented in docs/ascendc.md, "Building the generated files with CANN").

use super::extras::Extras;
use crate::KernelError;
use askama::Template;

/// File name of the build description in the emitted directory.
pub const CMAKE_FILE: &str = "CMakeLists.txt";

#[derive(Template)]
#[template(path = "CMakeLists.txt", escape = "none")]
struct CMakeTpl<'a> {
    name: &'a str,
    x: &'a Extras,
}

/// The `CMakeLists.txt` that builds kernel `name` (its launch stub includes the kernel) into a
/// shared library with the Ascend C toolchain.
pub fn cmake_lists(name: &str, x: &Extras) -> Result<String, KernelError> {
    Ok(CMakeTpl { name, x }.render()?)
}
