#!/usr/bin/env python3
"""Applies an Istio EnvoyFilter's patches to a sidecar-like Envoy config and checks it loads.

Istio is not here to apply deploy/examples/migrating/istio-envoyfilter.yaml, so this does what
its patches ask on a minimal inbound listener (an HTTP connection manager ending in the router,
a virtual host for the patched port) and runs the real Envoy on the result with
`--mode validate`: the rate-limit filter, the cluster it calls and the `rate_limits` it sends must
be a config Envoy accepts. What is not checked: how Istio matches the patches (context, port,
filter chain) on a real sidecar.

usage: validate-envoyfilter.py ENVOY FILE
"""
import copy
import subprocess
import sys
import tempfile

import yaml

HCM = "envoy.filters.network.http_connection_manager"
ROUTER = "envoy.filters.http.router"


def sidecar(port):
    """A minimal inbound listener on `port`, as an Istio sidecar has one per service port."""
    return {
        "static_resources": {
            "listeners": [{
                "name": f"inbound|{port}",
                "address": {"socket_address": {"address": "127.0.0.1", "port_value": port}},
                "filter_chains": [{"filters": [{
                    "name": HCM,
                    "typed_config": {
                        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                        "stat_prefix": "inbound",
                        "route_config": {"name": f"inbound|{port}", "virtual_hosts": [{
                            "name": "inbound|http|%d" % port,
                            "domains": ["*"],
                            "routes": [{"match": {"prefix": "/"}, "direct_response": {"status": 200}}],
                        }]},
                        "http_filters": [{
                            "name": ROUTER,
                            "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"},
                        }],
                    },
                }]}],
            }],
            "clusters": [],
        }
    }


def apply(config, patch):
    """One configPatch, as Istio applies it to the listener, cluster or virtual host."""
    kind, operation = patch["applyTo"], patch["patch"]["operation"]
    value = copy.deepcopy(patch["patch"]["value"])
    resources = config["static_resources"]
    hcm = resources["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    if kind == "HTTP_FILTER" and operation == "INSERT_BEFORE":
        wanted = patch["match"]["listener"]["filterChain"]["filter"]["subFilter"]["name"]
        names = [f["name"] for f in hcm["http_filters"]]
        if wanted not in names:
            sys.exit(f"HTTP_FILTER: no {wanted} to insert before")
        hcm["http_filters"].insert(names.index(wanted), value)
    elif kind == "CLUSTER" and operation == "ADD":
        resources["clusters"].append(value)
    elif kind == "VIRTUAL_HOST" and operation == "MERGE":
        for host in hcm["route_config"]["virtual_hosts"]:
            host.update(value)
    else:
        sys.exit(f"{kind} {operation}: not a patch this check knows")


def main(envoy, path):
    with open(path) as f:
        filters = [d for d in yaml.safe_load_all(f) if d and d.get("kind") == "EnvoyFilter"]
    if not filters:
        sys.exit(f"{path}: no EnvoyFilter")
    for envoy_filter in filters:
        patches = envoy_filter["spec"]["configPatches"]
        ports = [p["match"].get("routeConfiguration", {}).get("portNumber") for p in patches]
        config = sidecar(next((p for p in ports if p), 9080))
        for patch in patches:
            apply(config, patch)
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as out:
            yaml.safe_dump(config, out)
            out.flush()
            done = subprocess.run([envoy, "--mode", "validate", "-c", out.name, "-l", "error"],
                                  capture_output=True, text=True)
        name = envoy_filter["metadata"]["name"]
        if done.returncode != 0:
            sys.exit(f"{path}: EnvoyFilter {name}: envoy --mode validate failed:\n{done.stdout}{done.stderr}")
        print(f"{path}: EnvoyFilter {name}: {len(patches)} patches applied, envoy --mode validate OK")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
