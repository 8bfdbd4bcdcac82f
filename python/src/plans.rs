//! Compiled plans of the embedded standard library, cached per (schedule, group size, params).
//!
//! Compilation (instantiate → verify → optimise → re-verify → plan) runs once per key per
//! process; every rank compiles the same source, so every rank gets the same plan.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

use symsched_compiler::library::Library;
use symsched_compiler::pipeline::{compile, try_standard_library, CompileOptions};
use symsched_plan::{DualDecl, Plan};

type Key = (String, u32, BTreeMap<String, i64>);

fn library() -> Result<&'static Library, String> {
    static LIB: OnceLock<Result<Library, String>> = OnceLock::new();
    LIB.get_or_init(|| {
        try_standard_library().map_err(|d| {
            d.iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join("; ")
        })
    })
    .as_ref()
    .map_err(|e| format!("the embedded standard library does not load: {e}"))
}

/// Names of the standard schedules (empty if the library fails to load).
pub fn schedule_names() -> Vec<String> {
    library()
        .map(|l| l.schedules().into_iter().map(|s| s.name).collect())
        .unwrap_or_default()
}

/// The verified plan of `name` for `group_size` ranks with `params` bound.
pub fn plan(
    name: &str,
    group_size: u32,
    params: &BTreeMap<String, i64>,
) -> Result<Arc<Plan>, String> {
    static CACHE: OnceLock<Mutex<HashMap<Key, Arc<Plan>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let key = (name.to_string(), group_size, params.clone());
    if let Some(p) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return Ok(p.clone());
    }
    let lib = library()?;
    if lib.schedule(name).is_none() {
        return Err(format!(
            "unknown schedule `{name}`; the standard library has {:?}",
            schedule_names()
        ));
    }
    let compiled =
        compile(lib, name, group_size, params, &CompileOptions::default()).map_err(|d| {
            format!(
                "compiling `{name}` for {group_size} ranks with {params:?} failed: {}",
                symsched_compiler::diag::render_all(&d, lib.sources())
            )
        })?;
    let plan = Arc::new(compiled.plan);
    cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, plan.clone());
    Ok(plan)
}

/// A declared dual, resolved: its schedule name, params and collective (compiled to learn it).
pub enum Dual {
    /// The adjoint is this schedule.
    Schedule {
        name: String,
        params: BTreeMap<String, i64>,
        collective: String,
    },
    /// Identity backward, valid only for replicated downstream computation.
    IdentityAssumingReplicated,
}

/// The duals `plan` declares, with each dual schedule's collective.
pub fn duals(plan: &Plan) -> Result<Vec<Dual>, String> {
    plan.duals
        .iter()
        .map(|d| match d {
            DualDecl::Schedule { name, params } => {
                let p = self::plan(name, plan.group_size, params)?;
                Ok(Dual::Schedule {
                    name: name.clone(),
                    params: params.clone(),
                    collective: p.collective.name().to_string(),
                })
            }
            DualDecl::IdentityAssumingReplicated => Ok(Dual::IdentityAssumingReplicated),
        })
        .collect()
}
