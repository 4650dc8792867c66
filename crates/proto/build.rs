//! Compiles sluice's own protos and extracts the descriptors of Envoy's two services for reflection.
//!
//! Envoy's Rust types come from `envoy-types`, which does not export a descriptor set, but ships the
//! one it was generated from (`src/generated/types.bin`). We keep only the files that
//! `envoy.service.auth.v3` and `envoy.service.ratelimit.v3` need (transitively), so gRPC reflection
//! can describe every service sluice serves without carrying all of Envoy's API.

use std::collections::{BTreeSet, HashMap};
use std::env;
use std::path::{Path, PathBuf};

use prost::Message;
use prost_types::{FileDescriptorProto, FileDescriptorSet};

/// The Envoy files whose services sluice serves.
const ENVOY_ROOTS: &[&str] = &[
    "envoy/service/auth/v3/external_auth.proto",
    "envoy/service/ratelimit/v3/rls.proto",
    "envoy/service/rate_limit_quota/v3/rlqs.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out_dir = PathBuf::from(env::var("OUT_DIR")?);
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // protoc and the well-known-type includes come from protoc-bin-vendored, so a fresh machine
    // builds sluice without installing protoc.
    let protoc_include = protoc_bin_vendored::include_path()?;
    let proto_root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../proto");
    let protos =
        ["quota", "usage", "holds"].map(|p| proto_root.join(format!("sluice/v1/{p}.proto")));
    for p in &protos {
        println!("cargo:rerun-if-changed={}", p.display());
    }
    println!("cargo:rerun-if-env-changed=SLUICE_ENVOY_TYPES_DIR");

    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc);
    tonic_prost_build::configure()
        .file_descriptor_set_path(out_dir.join("sluice_descriptor.bin"))
        .compile_with_config(config, &protos, &[proto_root, protoc_include])?;

    let envoy_set = std::fs::read(envoy_types_bin()?)?;
    let filtered = filter_descriptor_set(&envoy_set, ENVOY_ROOTS)?;
    std::fs::write(out_dir.join("envoy_descriptor.bin"), filtered)?;
    Ok(())
}

/// Finds `envoy-types`' shipped descriptor set in the cargo registry (or `SLUICE_ENVOY_TYPES_DIR`).
fn envoy_types_bin() -> Result<PathBuf, String> {
    let rel = "src/generated/types.bin";
    if let Ok(dir) = env::var("SLUICE_ENVOY_TYPES_DIR") {
        return Ok(Path::new(&dir).join(rel));
    }
    let cargo_home = env::var("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|_| env::var("HOME").map(|h| Path::new(&h).join(".cargo")))
        .map_err(|_| "neither CARGO_HOME nor HOME is set".to_string())?;
    let want = format!("envoy-types-{}", envoy_types_version());
    let registry = cargo_home.join("registry/src");
    let mut found = Vec::new();
    for index in std::fs::read_dir(&registry).map_err(|e| format!("{}: {e}", registry.display()))? {
        let candidate = index
            .map_err(|e| e.to_string())?
            .path()
            .join(&want)
            .join(rel);
        if candidate.is_file() {
            found.push(candidate);
        }
    }
    found.sort();
    found.pop().ok_or_else(|| {
        format!(
            "could not find {want}/{rel} under {}; set SLUICE_ENVOY_TYPES_DIR to the envoy-types source directory",
            registry.display()
        )
    })
}

/// The envoy-types version this crate was resolved against, read from the workspace lock file.
fn envoy_types_version() -> String {
    let lock = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.lock");
    println!("cargo:rerun-if-changed={}", lock.display());
    let text = std::fs::read_to_string(&lock).unwrap_or_default();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if line == "name = \"envoy-types\""
            && let Some(v) = lines.next().and_then(|l| l.strip_prefix("version = \""))
        {
            return v.trim_end_matches('"').to_string();
        }
    }
    "0.7.7".to_string()
}

/// Keeps `roots` and every file they import, transitively; returns the encoded set.
fn filter_descriptor_set(encoded: &[u8], roots: &[&str]) -> Result<Vec<u8>, String> {
    let set = FileDescriptorSet::decode(encoded).map_err(|e| e.to_string())?;
    let by_name: HashMap<&str, &FileDescriptorProto> =
        set.file.iter().map(|f| (f.name(), f)).collect();
    let mut keep = BTreeSet::new();
    let mut todo: Vec<&str> = roots.to_vec();
    while let Some(name) = todo.pop() {
        if !keep.insert(name.to_string()) {
            continue;
        }
        let file = by_name
            .get(name)
            .ok_or_else(|| format!("{name} is not in envoy-types' descriptor set"))?;
        todo.extend(file.dependency.iter().map(String::as_str));
    }
    let file = set
        .file
        .iter()
        .filter(|f| keep.contains(f.name()))
        .cloned()
        .collect();
    Ok(FileDescriptorSet { file }.encode_to_vec())
}
