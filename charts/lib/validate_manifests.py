#!/usr/bin/env python3
"""Validates rendered Kubernetes manifests (multi-document YAML files) against the Kubernetes
JSON schemas that the kubernetes-validate package ships (strict: unknown fields are errors),
for each Kubernetes version given. Custom resources (monitoring.coreos.com) are not in those
schemas: they are written to --crd-out for validate_crds.mjs. Exits 1 on any problem.

Usage: validate_manifests.py --k8s 1.25.0 [--k8s ...] --crd-out FILE RENDERED.yaml...
"""
import argparse
import json
import sys

import kubernetes_validate
import yaml

CRD_GROUPS = ("monitoring.coreos.com/",)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--k8s", action="append", required=True, help="Kubernetes version")
    ap.add_argument("--crd-out", required=True)
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    problems, crds, count = [], [], 0
    for path in a.files:
        with open(path) as f:
            docs = [d for d in yaml.safe_load_all(f) if d is not None]
        if not docs:
            problems.append(f"{path}: no manifests rendered")
        seen = set()
        for doc in docs:
            count += 1
            where = f"{path}: {doc.get('kind', '?')}/{doc.get('metadata', {}).get('name', '?')}"
            if not isinstance(doc, dict) or not doc.get("apiVersion") or not doc.get("kind"):
                problems.append(f"{where}: not a Kubernetes object (apiVersion, kind)")
                continue
            key = (doc["apiVersion"], doc["kind"], doc.get("metadata", {}).get("name"))
            if key in seen:
                problems.append(f"{where}: rendered twice")
            seen.add(key)
            if doc["apiVersion"].startswith(CRD_GROUPS):
                crds.append({"where": where, "object": doc})
                continue
            for version in a.k8s:
                try:
                    kubernetes_validate.validate(doc, version, strict=True)
                except kubernetes_validate.ValidationError as e:
                    loc = "/".join(str(p) for p in e.path)
                    problems.append(f"{where}: Kubernetes {version}: {loc}: {e.message}")
                except kubernetes_validate.SchemaNotFoundError as e:
                    problems.append(f"{where}: {e.message}")
    with open(a.crd_out, "w") as f:
        json.dump(crds, f)
    for p in problems:
        print(f"[validate] {p}", file=sys.stderr)
    print(f"[validate] {count} manifests in {len(a.files)} renders: "
          f"{count - len(crds)} checked against the Kubernetes {', '.join(a.k8s)} schemas "
          f"(kubernetes-validate {kubernetes_validate.__version__}, strict), "
          f"{len(crds)} custom resources left to validate_crds.mjs; "
          f"{len(problems)} problem(s)", file=sys.stderr)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
