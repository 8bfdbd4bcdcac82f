//! The committed C header must be exactly what cbindgen generates from the current source.
//! To refresh it after changing the ABI: `SYMSCHED_BLESS=1 cargo test -p symsched-capi --test header`.

use std::path::PathBuf;

#[test]
fn header_is_current() {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let config =
        cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(&crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header")
        .write(&mut generated);
    let generated = String::from_utf8(generated).expect("UTF-8 header");
    let path = crate_dir.join("../include/symsched.h");
    if std::env::var_os("SYMSCHED_BLESS").is_some() {
        std::fs::write(&path, &generated).expect("write header");
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "runtime/include/symsched.h is stale; regenerate with SYMSCHED_BLESS=1 cargo test -p symsched-capi --test header"
    );
    for f in [
        "symsched_init_from_env",
        "symsched_put_with_signal",
        "symsched_last_error",
        "SYMSCHED_STATUS_PEER_DIED",
        "SYMSCHED_CMP_LE",
        "SYMSCHED_STATUS_DISAGREEMENT",
        "symsched_group_abort",
        "symsched_group_reset_after_abort",
    ] {
        assert!(generated.contains(f), "{f} missing from the header");
    }
}
