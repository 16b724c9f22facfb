//! Every Cascade binary allocates with mimalloc. The system allocator cost the gateway alone
//! about a fifth of its CPU under load (`malloc_consolidate` and friends in its profile), and
//! a binary added later would quietly go without it.

use std::path::PathBuf;

#[test]
fn every_service_binary_declares_mimalloc_as_its_global_allocator() {
    let services = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../services");
    let mut checked = Vec::new();
    for entry in std::fs::read_dir(&services).expect("list services/") {
        let main = entry.expect("entry").path().join("src/main.rs");
        let Ok(source) = std::fs::read_to_string(&main) else {
            continue;
        };
        let declared = source.lines().collect::<Vec<_>>().windows(2).any(|pair| {
            pair[0].trim() == "#[global_allocator]" && pair[1].contains("mimalloc::MiMalloc")
        });
        assert!(
            declared,
            "{} does not declare mimalloc::MiMalloc as its #[global_allocator]",
            main.display()
        );
        checked.push(main);
    }
    assert!(
        checked.len() >= 6,
        "found only {checked:?}: every service has a main.rs"
    );
}
