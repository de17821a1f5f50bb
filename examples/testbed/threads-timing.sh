#!/usr/bin/env bash
# examples/testbed/threads-timing.sh — the OpenMP thread check behind docs/gr-throughput.md:
# each engine alone on the machine (start, one warm-up prompt, 6 cold prompts, stop), two
# rounds of: an item pool engine with vLLM's own reservation for a KV connector
# (VLLM_CPU_NUM_OF_RESERVED_CPU=0: what vLLM 0.32 fell back to on 2 cores), a plain engine,
# and an item pool engine as `up` starts it now. One JSON line per engine on stdout; each
# engine's "core ids" line from its log on stderr.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
HOME_TB="${RECACHE_TESTBED_HOME:-$HOME/.cache/recache-testbed}"
one() {  # name, an env assignment, up args...
  local name=$1 envset=$2; shift 2
  local url
  url=$(env "$envset" examples/testbed/up --name "$name" "$@" 2>/dev/null | sed -n 's/^UPSTREAM=//p')
  grep -h "core ids" "$HOME_TB/run/$name/server.log" | tail -1 >&2
  python3 examples/testbed/cold_prefill_timing.py "$url" warm 1 99 >/dev/null
  python3 examples/testbed/cold_prefill_timing.py "$url" "$name" 6 5
  examples/testbed/down --name "$name" >/dev/null 2>&1
}
for _ in 1 2; do
  one cxa-pool-2threads VLLM_CPU_NUM_OF_RESERVED_CPU=0 --item-pool --item-pool-bytes 65536 --kv-blocks 512
  one cxa-plain X=1 --kv-blocks 512
  one cxa-pool-fixed X=1 --item-pool --item-pool-bytes 65536 --kv-blocks 512
done
