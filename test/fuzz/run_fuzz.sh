#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# [fuzz] Builds the wire-format fuzzer with clang (-fsanitize=fuzzer,address,undefined) in its
# own directory and runs it for FUZZ_SECONDS (default 20) from the checked-in seed corpus.
# Exits 77 (skipped) naming what is missing when clang or libFuzzer is not installed
# (Debian 12 and 13: apt-get install clang libclang-rt-dev; scripts/install-deps.sh installs them).
# Usage: run_fuzz.sh SOURCE_DIR BUILD_DIR [SECONDS]
set -u
src=$1 out=$2 secs=${3:-${FUZZ_SECONDS:-20}}
cxx=$(command -v clang++ || command -v clang++-14 || true)
if [ -z "$cxx" ]; then
  echo "fuzz: SKIPPED: clang++ not found (apt-get install clang libclang-rt-dev)"
  exit 77
fi
mkdir -p "$out"
probe="$out/probe.cc"
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' \
  >"$probe"
if ! "$cxx" -fsanitize=fuzzer "$probe" -o "$out/probe" 2>"$out/probe.log"; then
  echo "fuzz: SKIPPED: $cxx cannot link libFuzzer (apt-get install libclang-rt-dev):"
  head -3 "$out/probe.log"
  exit 77
fi
core="$src/core/src"
sources=("$src/test/fuzz/message_fuzzer.cc" "$core/message.cc" "$core/status.cc" "$core/types.cc")
flags=(-std=c++17 -O1 -g -I"$src/core/include" -I"$out/generated")
mkdir -p "$out/generated/hvd"
[ -f "$out/generated/hvd/config.h" ] || printf '#pragma once\n' >"$out/generated/hvd/config.h"
set -e
"$cxx" "${flags[@]}" -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  "${sources[@]}" -o "$out/message_fuzzer"
work="$out/corpus"
rm -rf "$work"
mkdir -p "$work"
cp "$src"/test/fuzz/corpus/messages/* "$work"/
set +e
"$out/message_fuzzer" -max_total_time="$secs" -max_len=4096 -print_final_stats=1 \
  -artifact_prefix="$out/" "$work" 2>&1 | tail -25
rc=${PIPESTATUS[0]}
if [ "$rc" -ne 0 ]; then
  echo "fuzz: FAILED (exit $rc): a crash, an over-read or a round-trip mismatch; input in $out/"
  exit 1
fi
echo "fuzz: PASSED ($secs s)"
