#!/usr/bin/env bash
# jobwarden installer. Not written yet: build with `cargo build --release` and
# run target/release/jobwarden daemon (see README.md).
echo "install.sh: not available yet; see README.md to build and run jobwarden" >&2
exit 2
