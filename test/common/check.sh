# SPDX-License-Identifier: Apache-2.0
# Sourced by the test scripts: `check WHAT COMMAND...` runs COMMAND, prints "ok: WHAT" or
# "FAIL: WHAT" and on failure sets fail=1 (the script exits with it at the end).
fail=0
check() {
  local what=$1
  shift
  if "$@"; then
    echo "ok: $what"
  else
    echo "FAIL: $what"
    fail=1
  fi
}
