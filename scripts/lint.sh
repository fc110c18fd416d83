#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Format check (clang-format) and static checks (clang-tidy) on hvd's own C++ sources.
# Usage: scripts/lint.sh [build-dir-with-compile_commands.json]  (FIX=1 reformats in place)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
mapfile -t files < <(git ls-files -- '*.cc' '*.h' | grep -E '^(core|ops|runner|optimizer|bindings|bench|examples|test)/')
if [[ "${FIX:-0}" == 1 ]]; then
  clang-format -i "${files[@]}"
  exit 0
fi
echo "lint: clang-format on ${#files[@]} files"
clang-format --dry-run -Werror "${files[@]}"
if [[ -f "$BUILD/compile_commands.json" ]]; then
  # The sources this build compiled (the GPU module's only where CUDA was found).
  mapfile -t srcs < <(printf '%s\n' "${files[@]}" | grep -E '^(core|ops|runner)/src/.*\.cc$' |
                        while read -r f; do grep -qF "/$f\"" "$BUILD/compile_commands.json" && echo "$f"; done)
  echo "lint: clang-tidy on ${#srcs[@]} library sources"
  # GCC's -mtls-dialect=gnu2 (core/CMakeLists.txt) is unknown to this clang: dropped for tidy.
  db=$(mktemp -d)
  trap 'rm -rf "$db"' EXIT
  sed 's/ -mtls-dialect=gnu2//g' "$BUILD/compile_commands.json" > "$db/compile_commands.json"
  printf '%s\n' "${srcs[@]}" | xargs -P "$(nproc)" -n 4 clang-tidy -p "$db" --quiet 2>/dev/null
fi
echo "lint: clean"
