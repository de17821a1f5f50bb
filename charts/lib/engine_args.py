#!/usr/bin/env python3
"""Parses the engine command line a render of charts/recache gives its engine container with
that engine's own argument parser (vLLM's `make_arg_parser`, SGLang's `ServerArgs`), so an
unknown flag or a malformed --kv-events-config / --kv-transfer-config fails here. Run it with
the Python of a venv that has the engine installed (the testbed's). Exits 1 on any problem.

Usage: ENGINE_PYTHON engine_args.py RENDERED.yaml...
"""
import argparse
import sys

import yaml


def engine_command(path):
    for d in yaml.safe_load_all(open(path)):
        if d and d["kind"] == "StatefulSet":
            for c in d["spec"]["template"]["spec"]["containers"]:
                if c["name"] == "engine":
                    return c["command"]
    raise SystemExit(f"{path}: no engine container")


def main():
    for path in sys.argv[1:]:
        check(path)


def check(path):
    cmd = engine_command(path)
    module, args = cmd[2], cmd[3:]
    if module == "vllm.entrypoints.openai.api_server":
        import vllm
        from vllm.entrypoints.launchers.cli_args import make_arg_parser
        from vllm.utils.argparse_utils import FlexibleArgumentParser

        ns = make_arg_parser(FlexibleArgumentParser()).parse_args(args)
        assert ns.kv_events_config.enable_kv_cache_events, "KV events off"
        what = f"vLLM {vllm.__version__}: kv_events_config endpoint {ns.kv_events_config.endpoint}"
        if ns.kv_transfer_config is not None:  # the item pool's connector
            kt = ns.kv_transfer_config
            # A block the connector cannot load (a store miss) must be recomputed, not fail.
            assert kt.kv_load_failure_policy == "recompute", kt.kv_load_failure_policy
            store = kt.kv_connector_extra_config.get("store")
            what += f"; kv_transfer_config {kt.kv_connector} (failures: recompute, store: {store})"
    elif module == "sglang.launch_server":
        import sglang
        from sglang.srt.server_args import ServerArgs

        p = argparse.ArgumentParser()
        ServerArgs.add_cli_args(p)
        ns = p.parse_args(args)
        what = f"SGLang {sglang.__version__}: kv_events_config {ns.kv_events_config}"
    else:
        raise SystemExit(f"{path}: unknown engine module {module}")
    print(f"[engine-args] {path}: parsed by {what}", file=sys.stderr)


if __name__ == "__main__":
    main()
