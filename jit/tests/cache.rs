//! The kernel cache: compiled once per signature, found again in memory, then on disk by a new
//! cache (another process would do the same), recompiled when the file is damaged; keys tell
//! launch signatures apart.

mod common;

use common::{compare, plan, sizes_for, types, Harness, Launch};
use symsched_jit::cache::{KernelCache, Source};
use symsched_jit::compile::CompileOptions;
use symsched_jit::{DType, KernelSpec, ReduceOp};

#[test]
fn memory_then_disk_then_recompiled_when_damaged() {
    let dir = tempfile::tempdir().expect("temp dir");
    let p = plan("allreduce_two_shot", 2);
    let spec = KernelSpec {
        plan: &p,
        rank: 1,
        channel: 0,
        types: types(DType::Bf16, None),
        op: ReduceOp::Max,
    };
    let a = KernelCache::new(Some(dir.path().to_path_buf()), CompileOptions::default()).unwrap();
    let (k1, s1) = a.get(&spec).unwrap();
    assert_eq!(s1, Source::Compiled);
    assert!(k1.compile_time > std::time::Duration::ZERO);
    let file = dir.path().join(format!("{}.o", k1.key));
    assert!(file.exists());
    let (k2, s2) = a.get(&spec).unwrap();
    assert_eq!(s2, Source::Memory);
    assert!(std::sync::Arc::ptr_eq(&k1, &k2));

    let b = KernelCache::new(Some(dir.path().to_path_buf()), CompileOptions::default()).unwrap();
    assert_eq!(b.get(&spec).unwrap().1, Source::Disk);
    // The disk cache's kernels run (both ranks through `b`).
    let sizes = sizes_for(&p, 515, 0);
    let l = Launch {
        plan: &p,
        types: spec.types,
        op: spec.op,
        sizes: &sizes,
    };
    compare(&b, &Harness::default(), &l, 2, 1).expect("kernels from the cache match");

    std::fs::write(&file, b"not an object").unwrap();
    let c = KernelCache::new(Some(dir.path().to_path_buf()), CompileOptions::default()).unwrap();
    assert_eq!(c.get(&spec).unwrap().1, Source::Compiled);
    assert!(std::fs::read(&file).unwrap().len() > 100, "rewritten");
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty());
}

#[test]
fn keys_tell_signatures_apart() {
    let c = KernelCache::new(None, CompileOptions::default()).unwrap();
    let p2 = plan("allreduce_two_shot", 2);
    let p3 = plan("allreduce_two_shot", 3);
    let base = KernelSpec {
        plan: &p2,
        rank: 0,
        channel: 0,
        types: types(DType::F32, None),
        op: ReduceOp::Sum,
    };
    let k = c.key(&base);
    for other in [
        KernelSpec { rank: 1, ..base },
        KernelSpec {
            op: ReduceOp::Avg,
            ..base
        },
        KernelSpec {
            types: types(DType::F32, Some(DType::Bf16)),
            ..base
        },
        KernelSpec { plan: &p3, ..base },
    ] {
        assert_ne!(c.key(&other), k);
    }
    assert_eq!(c.key(&base), k);
}

/// A rank with several channels has one kernel per channel: the channel is part of its key.
#[test]
fn keys_tell_the_channels_of_a_rank_apart() {
    let c = KernelCache::new(None, CompileOptions::default()).unwrap();
    let p = plan("reduce_scatter_push_channels", 2);
    assert_eq!(symsched_jit::kernel_channels(&p, 1), vec![0, 1]);
    let base = KernelSpec {
        plan: &p,
        rank: 1,
        channel: 0,
        types: types(DType::F32, None),
        op: ReduceOp::Sum,
    };
    assert_ne!(c.key(&base), c.key(&KernelSpec { channel: 1, ..base }));
    assert_eq!(c.key(&base), c.key(&base));
}
