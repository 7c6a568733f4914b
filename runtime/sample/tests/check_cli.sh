#!/bin/sh
# Checks the command-line contract of a built sample runtime (no GPU needed).
# usage: tests/check_cli.sh <build-dir>      (binaries in <build-dir>/bin)
set -u
bin="${1:?usage: check_cli.sh <build-dir>}/bin"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
failures=0

# expect <rc> <stdout-first-line|-> <stderr-first-line|-> <command...>
# "-" means: that stream must be empty.
expect() {
  want_rc="$1"; want_out="$2"; want_err="$3"; shift 3
  "$@" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  got_out="$(head -n 1 "$tmp/out")"
  got_err="$(head -n 1 "$tmp/err")"
  ok=1
  [ "$rc" = "$want_rc" ] || ok=0
  if [ "$want_out" = "-" ]; then [ -s "$tmp/out" ] && ok=0; else [ "$got_out" = "$want_out" ] || ok=0; fi
  if [ "$want_err" = "-" ]; then [ -s "$tmp/err" ] && ok=0; else [ "$got_err" = "$want_err" ] || ok=0; fi
  if [ "$ok" = 1 ]; then
    echo "ok   $*"
  else
    echo "FAIL $*"
    echo "     rc=$rc (want $want_rc)"
    echo "     stdout: $got_out"
    echo "     stderr: $got_err"
    failures=$((failures + 1))
  fi
}

serve="$bin/ninfer-serve"
cli="$bin/ninfer"
serve_usage='usage: ninfer-serve <model.ninfer> [--host H] [--port N] [--api-key-file FILE] [--model-id ID] [--max-context N] [--prefill-chunk N] [--kv-dtype bf16|int8] [--deployment-profile ID] [--selftest] [--version]'
cli_usage='usage: ninfer <model.ninfer> --prompt TEXT [--max-tokens N] [--max-context N] [--prefill-chunk N] [--kv-dtype bf16|int8] [--selftest] [--version]'

# --version: one line, identical after the binary name, matching the marker record.
for b in ninfer-serve ninfer ninfer_bench; do
  [ -x "$bin/$b" ] || continue
  "$bin/$b" --version >"$tmp/v.$b" 2>"$tmp/e.$b"; rc=$?
  lines=$(wc -l <"$tmp/v.$b")
  if [ "$rc" != 0 ] || [ "$lines" != 1 ] || [ -s "$tmp/e.$b" ] \
     || ! grep -Eq "^$b upstream_base_sha=[0-9a-f]{40} patch_stack_sha=[0-9a-f]{40} build_profile=[a-z0-9][a-z0-9._-]* build_type=[^ ]+ cxx_compiler=[^ ]+ cuda_compiler=[^ ]+ cuda_toolkit=[^ ]+ cuda_architecture=(86|89|90|120a) source_dirty=(true|false)\$" "$tmp/v.$b"; then
    echo "FAIL $b --version: rc=$rc lines=$lines: $(cat "$tmp/v.$b")"; failures=$((failures + 1))
  else
    echo "ok   $b --version"
  fi
  cut -d' ' -f2- "$tmp/v.$b" >"$tmp/t.$b"
  record="$(LC_ALL=C grep -a -o 'NINFER-BUILD-IDENTITY:v1 [^[:cntrl:]]*' "$bin/$b" | head -n 1)"
  if [ "NINFER-BUILD-IDENTITY:v1 $(cat "$tmp/t.$b")" = "$record" ]; then
    echo "ok   $b identity record in file bytes"
  else
    echo "FAIL $b identity record: '$record'"; failures=$((failures + 1))
  fi
done
if ! cmp -s "$tmp/t.ninfer-serve" "$tmp/t.ninfer"; then
  echo "FAIL ninfer and ninfer-serve --version differ after the name"; failures=$((failures + 1))
fi

expect 0 "$serve_usage" - "$serve" --help
expect 0 "$serve_usage" - "$serve" -h
expect 0 "$cli_usage" - "$cli" --help

expect 1 - "error: artifact path is required" "$serve"
expect 1 - "error: artifact path is required" "$serve" --port 9000
expect 1 - "error: unknown argument: --bogus" "$serve" m.ninfer --bogus
expect 1 - "error: missing value for --port" "$serve" m.ninfer --port
expect 1 - "error: unexpected argument: extra" "$serve" m.ninfer extra
for p in 0 65536 -1 abc 80x ""; do
  expect 1 - "error: --port must be in [1,65535]" "$serve" m.ninfer --port "$p"
done
for c in 0 100 -128 abc 129; do
  expect 1 - "error: --prefill-chunk must be a positive multiple of 128" "$serve" m.ninfer --prefill-chunk "$c"
done
for c in 0 -5 abc 1.5; do
  expect 1 - "error: --max-context must be a positive integer" "$serve" m.ninfer --max-context "$c"
done
expect 1 - "error: --kv-dtype must be bf16 or int8" "$serve" m.ninfer --kv-dtype fp8
expect 1 - "error: NInfer accepts only .ninfer artifacts" "$serve" model.gguf
expect 1 - "error: NInfer accepts only .ninfer artifacts" "$serve" model.gguf --port 9000 --prefill-chunk 256 --max-context 4096 --kv-dtype int8
# 203.0.113.0/24 (TEST-NET-3) is not a local address: bind fails before any CUDA call.
expect 1 - "error: failed to bind 203.0.113.1:8080" "$serve" m.ninfer --host 203.0.113.1
if command -v python3 >/dev/null 2>&1; then
  python3 -c 'import socket,sys,time
s=socket.socket(); s.bind(("127.0.0.1",0)); s.listen(1); print(s.getsockname()[1]); sys.stdout.flush(); time.sleep(30)' >"$tmp/port" &
  holder=$!
  i=0; while [ ! -s "$tmp/port" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
  port="$(cat "$tmp/port")"
  expect 1 - "error: failed to bind 127.0.0.1:$port" "$serve" m.ninfer --port "$port"
  kill "$holder" 2>/dev/null
fi
# After a successful bind the server reports loading, then fails on CUDA (no
# driver: cudaGetDeviceCount) or, with a GPU, on the missing artifact.
free_port=18080
if command -v python3 >/dev/null 2>&1; then
  free_port="$(python3 -c 'import socket
s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
fi
expect 1 - "ninfer-serve: loading model..." "$serve" "$tmp/missing.ninfer" --port "$free_port"
second="$(sed -n 2p "$tmp/err")"
case "$second" in
  "error: cudaGetDeviceCount failed: "*|"error: cannot open artifact: $tmp/missing.ninfer")
    echo "ok   ninfer-serve after bind: $second" ;;
  *) echo "FAIL ninfer-serve after bind: '$second'"; failures=$((failures + 1)) ;;
esac

expect 1 - "error: .ninfer model path is required" "$cli"
expect 1 - "error: unknown argument: --bogus" "$cli" m.ninfer --prompt hi --bogus
expect 1 - "error: missing value for --prompt" "$cli" m.ninfer --prompt
expect 1 - "error: --prompt is required" "$cli" m.ninfer
expect 1 - "error: --kv-dtype must be bf16 or int8" "$cli" m.ninfer --prompt hi --kv-dtype f16
expect 1 - "error: NInfer accepts only .ninfer artifacts" "$cli" m.bin --prompt hi

if [ "$failures" = 0 ]; then
  echo "all checks passed"
  exit 0
fi
echo "$failures check(s) failed"
exit 1
