#!/usr/bin/env bash
# Builds the provider and leaves it where libfabric looks for it: libfabric loads
# lib<name>-fi.so from FI_PROVIDER_PATH, Cargo names the library libmyri_fabric.so.
#   transport/fabric/install.sh [debug|release]   (default release)
#   FI_PROVIDER_PATH=$PWD/target/release/fi fi_info -p myri
set -euo pipefail
cd "$(dirname "$0")/../.."
profile=${1:-release}
if [ "$profile" = release ]; then flag=--release; else flag=; fi
cargo build -p myri-fabric $flag
dir="${CARGO_TARGET_DIR:-target}/$profile"
mkdir -p "$dir/fi"
cp "$dir/libmyri_fabric.so" "$dir/fi/libmyri-fi.so"
echo "FI_PROVIDER_PATH=$PWD/$dir/fi"
