//! The executor's knobs come from the one registry (`config::ExecOptions::from_env`), and a
//! malformed value is a typed error wherever the environment is read: building the options, an
//! in-process world, a runtime configuration. One test in its own binary, because it changes
//! the process environment.

use symsched_runtime::config::{ExecOptions, DEFAULT_NT_MIN_BYTES};
use symsched_runtime::exec::{ExecError, Executor, Fabric, LocalWorld};
use symsched_runtime::{RuntimeConfig, RuntimeError};

const KNOBS: [&str; 6] = [
    "SYMSCHED_FUSE",
    "SYMSCHED_NT_COPY",
    "SYMSCHED_NT_MIN_BYTES",
    "SYMSCHED_A2A_LARGE_PULL",
    "SYMSCHED_TRACE",
    "SYMSCHED_BACKEND",
];

fn clear() {
    for k in KNOBS {
        std::env::remove_var(k);
    }
}

#[test]
fn knobs_are_read_once_validated_and_passed_in() {
    clear();
    // The disk cache of compiled kernels is derived from HOME / XDG_CACHE_HOME (the session's).
    let from_env = ExecOptions::from_env().expect("defaults");
    assert_eq!(
        ExecOptions {
            jit_cache_dir: None,
            ..from_env
        },
        ExecOptions::default()
    );
    let d = ExecOptions::default();
    assert!(d.fuse && d.nt_copy && d.a2a_large_pull && d.trace.is_none());
    assert_eq!(d.nt_min_bytes, DEFAULT_NT_MIN_BYTES);

    // Documented values are read, empty is unset.
    std::env::set_var("SYMSCHED_FUSE", "0");
    std::env::set_var("SYMSCHED_NT_COPY", "1");
    std::env::set_var("SYMSCHED_NT_MIN_BYTES", " 131072 ");
    std::env::set_var("SYMSCHED_A2A_LARGE_PULL", "");
    let o = ExecOptions::from_env().expect("valid knobs");
    assert_eq!(
        o,
        ExecOptions {
            fuse: false,
            nt_copy: true,
            nt_min_bytes: 131072,
            a2a_large_pull: true,
            trace: None,
            // Derived from HOME / XDG_CACHE_HOME, which belong to the session.
            jit_cache_dir: o.jit_cache_dir.clone(),
            ..ExecOptions::default()
        }
    );
    // ... and reach the executor through the world it runs on.
    let world = LocalWorld::new(1, 1 << 16).expect("world");
    let fab = world
        .world_group()
        .expect("group")
        .fabric(0)
        .expect("fabric");
    assert_eq!(fab.exec_options(), &o);
    assert_eq!(Executor::new(fab.clone()).options(), &o);
    let other = ExecOptions {
        nt_copy: false,
        ..o.clone()
    };
    assert_eq!(Executor::with_options(fab, other.clone()).options(), &other);
    clear();

    // Garbage is a typed error naming the variable, from every place that reads it.
    for (var, bad) in [
        ("SYMSCHED_FUSE", "maybe"),
        ("SYMSCHED_NT_COPY", "yes"),
        ("SYMSCHED_NT_MIN_BYTES", "abc"),
        ("SYMSCHED_NT_MIN_BYTES", "-1"),
        ("SYMSCHED_A2A_LARGE_PULL", "2"),
        ("SYMSCHED_BACKEND", "llvm"),
    ] {
        std::env::set_var(var, bad);
        match ExecOptions::from_env() {
            Err(RuntimeError::Env { var: v, reason }) => {
                assert_eq!(v, var);
                assert!(reason.contains(bad), "{var}={bad}: {reason}");
            }
            other => panic!("{var}={bad}: {other:?}"),
        }
        match LocalWorld::new(1, 1 << 16) {
            Err(ExecError::Core(e)) => {
                assert!(matches!(*e, RuntimeError::Env { var: v, .. } if v == var))
            }
            Err(e) => panic!("{var}={bad}: {e}"),
            Ok(_) => panic!("{var}={bad}: world accepted"),
        }
        assert!(matches!(
            RuntimeConfig::local(0, 1, "/tmp/unused".into()),
            Err(RuntimeError::Env { var: v, .. }) if v == var
        ));
        std::env::remove_var(var);
    }
    std::env::set_var("SYMMETRIC_MEMORY_SIGNAL_TIMEOUT_MS", "soon");
    assert!(LocalWorld::new(1, 1 << 16).is_err());
    std::env::remove_var("SYMMETRIC_MEMORY_SIGNAL_TIMEOUT_MS");
    assert!(LocalWorld::new(1, 1 << 16).is_ok());
}
