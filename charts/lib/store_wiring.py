#!/usr/bin/env python3
"""Checks that a render of charts/recache with the item pool's store (itemPool.store) wires
it together: the engines' connector config and the router's --rank-pool-store name the same
store; the router owns the pools (--rank-item-pool) and the pods' recaches do not (a second
owner would send the engine evictions and labels the router does not know); the engines
recompute what they cannot load; Mooncake's "local" is the pod IP; the chart's Valkey, when
rendered, is behind a Service on its port and evicts rather than refusing writes.
With --live-out FILE, writes each in-chart Valkey's container and the connector's store
config there as JSON lines, for store_live.py (which runs where redis-py is, without YAML).
Exits 1 on any problem.

Usage: store_wiring.py [--live-out FILE] RENDERED.yaml...
"""
import argparse
import json
import sys

import yaml


def arg(args, flag):
    """The value after FLAG in ARGS, None if absent."""
    return args[args.index(flag) + 1] if flag in args else None


def container(doc, name):
    return next(c for c in doc["spec"]["template"]["spec"]["containers"] if c["name"] == name)


def check(path, live):
    docs = [d for d in yaml.safe_load_all(open(path)) if d]
    by = {(d["kind"], d["metadata"]["labels"].get("app.kubernetes.io/component")): d for d in docs}
    engine, router = by[("StatefulSet", "engine")], by[("Deployment", "router")]
    eng = container(engine, "engine")
    transfer = json.loads(arg(eng["command"], "--kv-transfer-config"))
    assert transfer.get("kv_load_failure_policy") == "recompute", "engines would fail, not recompute"
    store = transfer["kv_connector_extra_config"]["store"]
    addr = store.get("url") or store["master"]
    rargs = container(router, "recache")["args"]
    assert arg(rargs, "--rank-pool-store") == addr, f"router's store is not the engines' {addr}"
    assert arg(rargs, "--rank-item-pool"), "the router does not own the pools"
    sargs = container(engine, "recache")["args"]
    for flag in ("--rank-pool-store", "--rank-item-pool"):
        assert flag not in sargs, f"the pods' recaches get {flag}"
    what = "Redis"
    if "url" not in store:
        assert store["local"] == "$(POD_IP)", "Mooncake's local address is not the pod IP"
        env = {e["name"]: e for e in eng.get("env", [])}
        ip = env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"]
        assert ip == "status.podIP", f"POD_IP is {ip}"
        what = f"Mooncake (metadata {store['metadata']})"
    if ("StatefulSet", "store") in by:
        sts, svc = by[("StatefulSet", "store")], by[("Service", "store")]
        host, port = addr.removeprefix("redis://").split("/")[0].rsplit(":", 1)
        assert host.split(".")[0] == svc["metadata"]["name"], f"{host} is not the store's Service"
        valkey = container(sts, "valkey")
        ports = {p["name"]: p["containerPort"] for p in valkey["ports"]}
        sp = svc["spec"]["ports"][0]
        assert sp["port"] == int(port), f"the Service's port is not {port}"
        assert ports[sp["targetPort"]] == int(arg(valkey["args"], "--port")), "Valkey's port"
        labels = sts["spec"]["template"]["metadata"]["labels"]
        assert svc["spec"]["selector"].items() <= labels.items(), "the Service misses the pod"
        assert arg(valkey["args"], "--maxmemory-policy").startswith("allkeys-"), "refuses writes"
        what = f"the chart's Valkey ({valkey['image']}, maxmemory {arg(valkey['args'], '--maxmemory')})"
        live.append({"where": path, "valkey": valkey, "store": store})
    print(f"[store] {path}: engines, router and store agree on {addr}: {what}", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--live-out")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    live = []
    for path in a.files:
        check(path, live)
    if a.live_out:
        with open(a.live_out, "w") as f:
            f.writelines(json.dumps(x) + "\n" for x in live)


if __name__ == "__main__":
    main()
