# SPDX-License-Identifier: Apache-2.0
# Sourced by the test scripts: `check WHAT COMMAND...` runs COMMAND, prints "ok: WHAT" or
# "FAIL: WHAT" and on failure sets fail=1; `check_exit NAME OUT ERR` ends the script: its time
# since $start, the job's stdout and stderr when a check failed, exit 1 if one did.
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
check_exit() {
  echo "$1: $((SECONDS - start)) s"
  if [[ $fail -ne 0 ]]; then
    printf -- '---- stdout\n%s\n---- stderr\n%s\n' "$2" "$3"
  fi
  exit "$fail"
}
