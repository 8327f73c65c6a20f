#!/usr/bin/env python3
"""Checks docs/deploy: the Kubernetes manifests pass yamllint and say what docs/deploy.md promises
(the library from a hostPath under LD_PRELOAD, never /etc/ld.so.preload; the exporter's port); the
Grafana dashboard is JSON whose every uvmpool_* metric and label is in what uvmpool-stat serves for a
preloaded program on the simulated driver. The Dockerfile is not built here (no Docker in CI).

usage: deploy_check.py DEPLOY_DIR YAMLLINT PRELOAD SIM_DIR CLIENT UVMPOOL_STAT
"""
import glob
import json
import os
import re
import subprocess
import sys
import time

import yaml

PORT = 9442


def fail(msg):
    print("FAILED: " + msg)
    sys.exit(1)


def check_manifests(deploy, yamllint):
    if not os.access(yamllint, os.X_OK):
        fail(f"{yamllint} is missing: bash scripts/install-deps.sh installs yamllint")
    files = sorted(glob.glob(os.path.join(deploy, "kubernetes", "*.yaml")))
    if len(files) < 2:
        fail(f"manifests missing in {deploy}/kubernetes")
    r = subprocess.run([yamllint, "--strict", "-c", os.path.join(deploy, "yamllint.yaml"), *files],
                       capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"yamllint:\n{r.stdout}{r.stderr}")
    kinds = {}
    for f in files:
        for doc in yaml.safe_load_all(open(f)):
            kinds.setdefault(doc["kind"], []).append(doc)
            if "ld.so.preload" in json.dumps(doc):  # comments may say why not; the manifest itself must not
                fail(f"{f} uses /etc/ld.so.preload")
    dockerfile = [line for line in open(os.path.join(deploy, "Dockerfile")) if not line.lstrip().startswith("#")]
    if "ld.so.preload" in "".join(dockerfile):
        fail("the Dockerfile uses /etc/ld.so.preload")
    daemonset = kinds["DaemonSet"][0]["spec"]["template"]["spec"]
    if not any("hostPath" in v for v in daemonset["volumes"]):
        fail("the DaemonSet installs onto no hostPath")
    pod = kinds["Pod"][0]["spec"]
    trainer = pod["containers"][0]
    env = {e["name"]: e for e in trainer["env"]}
    mounts = {m["name"]: m["mountPath"] for m in trainer["volumeMounts"]}
    preload = env["LD_PRELOAD"]["value"]
    if not any(preload.startswith(path + "/") for path in mounts.values()):
        fail(f"LD_PRELOAD={preload} is not under a mounted volume {mounts}")
    for name in ("UVMPOOL_DEVICE_LIMIT", "POD_NAME", "POD_NAMESPACE", "CONTAINER_NAME"):
        if name not in env:
            fail(f"the pod does not set {name}")
    ports = [p["containerPort"] for spec in (daemonset, pod) for c in spec["containers"] for p in c.get("ports", [])]
    if ports != [PORT, PORT] or f"EXPOSE {PORT}" not in open(os.path.join(deploy, "Dockerfile")).read():
        fail(f"exporter ports {ports} and the Dockerfile's EXPOSE disagree with {PORT}")
    return len(files)


def served_metrics(preload, sim, client, tool):
    """Families and label names uvmpool-stat serves for a program that runs in a pod."""
    env = dict(os.environ, LD_PRELOAD=preload, LD_LIBRARY_PATH=sim, UVMPOOL_DEVICE_LIMIT="256M",
               UVMPOOL_SIM_DEVICE_MEMORY="1G", UVMPOOL_STATS_INTERVAL="10", POD_NAME="p", POD_NAMESPACE="n",
               CONTAINER_NAME="c")
    proc = subprocess.Popen([client, "--hold"], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        pid = re.match(r"ready (\d+)", proc.stdout.readline()).group(1)
        for _ in range(300):  # until the publisher (every 10 ms) has shown the device
            text = subprocess.run([tool, "--prometheus", pid], capture_output=True, text=True, timeout=30).stdout
            if "uvmpool_live_bytes{" in text:
                break
            time.sleep(0.01)
    finally:
        proc.communicate("go\n", timeout=60)
    families = set(re.findall(r"^# TYPE (\S+) ", text, re.M))
    labels = set(re.findall(r'[{,]([a-z_]+)="', text))
    return families, labels


def check_dashboard(deploy, families, labels):
    dashboard = json.load(open(os.path.join(deploy, "grafana-uvmpool.json")))
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    exprs += [v["query"]["query"] for v in dashboard["templating"]["list"] if isinstance(v.get("query"), dict)]
    used = set(re.findall(r"\buvmpool_[a-z_]+", " ".join(exprs)))
    if not used or used - families:
        fail(f"the dashboard uses metrics uvmpool-stat does not serve: {sorted(used - families)}")
    used_labels = set(re.findall(r"\b(namespace|pod|container|device|uuid|pid|program)\b", " ".join(exprs)))
    if used_labels - labels:
        fail(f"the dashboard uses labels not served: {sorted(used_labels - labels)}")
    return len(used)


def main():
    deploy, yamllint, preload, sim, client, tool = sys.argv[1:7]
    manifests = check_manifests(deploy, yamllint)
    families, labels = served_metrics(preload, sim, client, tool)
    metrics = check_dashboard(deploy, families, labels)
    print(f"deploy: ok ({manifests} manifests, dashboard with {metrics} metrics, all served)")


if __name__ == "__main__":
    main()
