//! Generates the gRPC contract and the bus messages from `proto/`. protoc comes vendored
//! (nothing to install); `PROTOC` overrides it.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    println!("cargo:rerun-if-changed={}", root.display());
    println!("cargo:rerun-if-env-changed=PROTOC");
    let mut config = tonic_prost_build::Config::new();
    // Payloads decode as views of the buffer they arrived in, with no copy; the conversion to
    // domain values decides which stay views (`convert::payload_from_proto`).
    config.bytes(["."]);
    let mut includes = vec![root.clone()];
    if std::env::var_os("PROTOC").is_none() {
        config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
        includes.push(protoc_bin_vendored::include_path()?);
    }
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    tonic_prost_build::configure()
        .file_descriptor_set_path(out.join("cascade_descriptor.bin"))
        .compile_with_config(
            config,
            &[
                root.join("cascade/v1/cascade.proto"),
                root.join("cascade/bus/v1/bus.proto"),
            ],
            &includes,
        )?;
    Ok(())
}
