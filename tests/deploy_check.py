"""Checks Kubernetes manifests offline: every document of every file given against the Kubernetes API schemas
that the kubernetes-validate package ships (strict: unknown fields fail), and custom resources the package has
no schema for (monitoring.coreos.com: PodMonitor) against the schema kept in tests/fixtures/deploy/.
Prints one line per document; exits 1 when any fails. Used by tests/deploy.rs.

Usage: python3 tests/deploy_check.py KUBERNETES_VERSION FILE..."""
import json
import os
import sys

import jsonschema
import kubernetes_validate
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
CUSTOM = {
    ("monitoring.coreos.com/v1", "PodMonitor"): os.path.join(HERE, "fixtures", "deploy", "podmonitor.schema.json"),
}

version = sys.argv[1]
failed = 0
for path in sys.argv[2:]:
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d is not None]
    if not docs:
        print(f"FAIL {path}: no document")
        failed += 1
    for doc in docs:
        what = f"{path}: {doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
        key = (doc.get("apiVersion"), doc.get("kind"))
        try:
            if key in CUSTOM:
                with open(CUSTOM[key]) as s:
                    jsonschema.validate(doc, json.load(s))
                how = "own schema"
            else:
                kubernetes_validate.validate(doc, version, True)
                how = f"Kubernetes {version} schema, strict"
            print(f"ok {what} ({how})")
        except Exception as e:  # every failure is reported, whatever raised it
            print(f"FAIL {what}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else e!r}")
            failed += 1
sys.exit(1 if failed else 0)
