# usage: apicpu.sh FAST(0|1) -> starts a testbed with the plugin, drives 30 s of width-32 retrievals, prints CPU s per retrieval of each vLLM process
cd /work/main; eval "$(tests/prereqs)" >/dev/null; export RECACHE_TESTBED_DTYPE=auto RECACHE_BEAM_FAST=$1
pkill -f "recache serve --upstream" ; examples/testbed/down --name prof >/dev/null 2>&1
eval "$(examples/testbed/up --name prof --kv-blocks 512 --retrieve-plugin 2>/dev/null)"
(RECACHE_LOG=warn target/release/recache serve --upstream $UPSTREAM --retrieve-index /tmp/items.idx.json --retrieve-align 32 --retrieve-pad-token 201 --listen 127.0.0.1:18080 > /tmp/prof-serve.log 2>&1 &)
sleep 2
python3 examples/retrieve/drive_plugin_load.py --url http://127.0.0.1:18080/v1/retrieve --items ../shared/data/items/Industrial_and_Scientific.item.json --width 32 --seconds 5 >/dev/null
API=$(pgrep -f "vllm.entrypoints.openai.api_server" | head -1); CORE=$(pgrep -f "VLLM::EngineCore"); WK=$(pgrep -f "VLLM::Worker")
cpu() { awk '{print $14+$15}' /proc/$1/stat; }
a0=$(cpu $API); c0=$(cpu $CORE); w0=$(cpu $WK)
R=$(python3 examples/retrieve/drive_plugin_load.py --url http://127.0.0.1:18080/v1/retrieve --items ../shared/data/items/Industrial_and_Scientific.item.json --width 32 --seconds 30)
a1=$(cpu $API); c1=$(cpu $CORE); w1=$(cpu $WK)
N=$(echo "$R" | python3 -c "import json,sys;print(json.load(sys.stdin)['retrievals'])")
python3 -c "
import json; n=$N; t=100.0
print(json.dumps({'fast':$1,'retrievals':n,'load':json.loads('''$R'''),'cpu_ms_per_retrieval':{'api_server':($a1-$a0)/t*1000/n,'engine_core':($c1-$c0)/t*1000/n,'worker':($w1-$w0)/t*1000/n}}))"
pkill -f "recache serve --upstream"; examples/testbed/down --name prof >/dev/null 2>&1
