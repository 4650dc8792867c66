#!/usr/bin/env python3
"""Validates every kustomize overlay under k8s/overlays, as rendered by kustomize.

For each overlay:
  * every object against the Kubernetes OpenAPI schemas (kubernetes-validate, strict: unknown fields
    are errors), for the oldest and newest Kubernetes versions the overlay supports;
  * the PodMonitor (a CRD, no schema offline) selects the Deployment's pods and names a real port;
  * Services select pods and target named ports that exist; volumes name ConfigMaps that exist;
  * the files in the sluice ConfigMap pass `sluice config check`, and Envoy's config passes
    `envoy --mode validate` (the real binaries, so the manifests carry configs that load).

usage: validate-k8s.py KUSTOMIZE SLUICE ENVOY
"""
import os
import pathlib
import subprocess
import sys
import tempfile

import kubernetes_validate
import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
# Native sidecars (initContainers with restartPolicy: Always) are on by default from 1.29.
VERSIONS = {"classic-sidecar": ["1.25.0", "1.37.0"]}
DEFAULT_VERSIONS = ["1.29.0", "1.37.0"]
USER_CREATED_SECRETS = {"sluice-redis"}  # README: kubectl create secret generic sluice-redis ...


def fail(overlay, message):
    sys.exit(f"k8s/{overlay}: {message}")


def pod_templates(objects):
    for o in objects:
        if o["kind"] in ("Deployment", "StatefulSet"):
            yield o, o["spec"]["template"]


def containers(template):
    spec = template["spec"]
    return spec.get("containers", []) + spec.get("initContainers", [])


def matches(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


def check_references(overlay, objects):
    by_kind = {}
    for o in objects:
        by_kind.setdefault(o["kind"], {})[o["metadata"]["name"]] = o
    for owner, template in pod_templates(objects):
        labels = template["metadata"]["labels"]
        if not matches(owner["spec"]["selector"]["matchLabels"], labels):
            fail(overlay, f"{owner['metadata']['name']}: selector does not match its pod labels")
        for volume in template["spec"].get("volumes", []):
            if "configMap" in volume and volume["configMap"]["name"] not in by_kind.get("ConfigMap", {}):
                fail(overlay, f"volume {volume['name']} names a missing ConfigMap")
        for c in containers(template):
            for env in c.get("env", []):
                ref = env.get("valueFrom", {}).get("secretKeyRef")
                if ref and ref["name"] not in USER_CREATED_SECRETS | set(by_kind.get("Secret", {})):
                    fail(overlay, f"{c['name']}: env {env['name']} names an unknown Secret")

    def named_ports(selector):
        templates = [t for _, t in pod_templates(objects) if matches(selector, t["metadata"]["labels"])]
        if not templates:
            return None
        return {p["name"] for t in templates for c in containers(t) for p in c.get("ports", []) if "name" in p}

    for name, svc in by_kind.get("Service", {}).items():
        ports = named_ports(svc["spec"]["selector"])
        if ports is None:
            fail(overlay, f"Service {name} selects no pods")
        for p in svc["spec"]["ports"]:
            if isinstance(p["targetPort"], str) and p["targetPort"] not in ports:
                fail(overlay, f"Service {name} targets port {p['targetPort']!r}, pods have {sorted(ports)}")
    policies = by_kind.get("NetworkPolicy", {})
    if not policies:
        fail(overlay, "no NetworkPolicy")
    for name, np in policies.items():
        ports = named_ports(np["spec"]["podSelector"]["matchLabels"])
        if ports is None:
            fail(overlay, f"NetworkPolicy {name} selects no pods")
        opened = {p["port"] for rule in np["spec"].get("ingress", []) for p in rule.get("ports", [])}
        for port in opened:
            if port not in ports:
                fail(overlay, f"NetworkPolicy {name} opens port {port!r}, pods have {sorted(ports)}")
        if "sluice-grpc" in opened or any("ports" not in rule for rule in np["spec"].get("ingress", [])):
            fail(overlay, f"NetworkPolicy {name} opens sluice's gRPC port (decisions and the Quota API)")
    monitors = by_kind.get("PodMonitor", {})
    if not monitors:
        fail(overlay, "no PodMonitor")
    for name, pm in monitors.items():
        ports = named_ports(pm["spec"]["selector"]["matchLabels"])
        if ports is None:
            fail(overlay, f"PodMonitor {name} selects no pods")
        for ep in pm["spec"]["podMetricsEndpoints"]:
            if ep["port"] not in ports:
                fail(overlay, f"PodMonitor {name} scrapes port {ep['port']!r}, pods have {sorted(ports)}")


def check_configs(overlay, objects, sluice, envoy):
    maps = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ConfigMap"}
    app = next(t for o, t in pod_templates(objects) if o["metadata"]["name"] == "app")
    # The app pod's volumes name the ConfigMaps (Envoy's carries kustomize's hash suffix).
    volumes = {v["name"]: v["configMap"]["name"] for v in app["spec"]["volumes"] if "configMap" in v}
    with tempfile.TemporaryDirectory() as tmp:
        for volume in ("sluice-config", "envoy-config"):
            d = pathlib.Path(tmp, volume)
            d.mkdir()
            for file, text in maps[volumes[volume]]["data"].items():
                (d / file).write_text(text)
        # The password comes from a Secret at run time; config check only needs it set.
        run(overlay, [sluice, "config", "check", str(pathlib.Path(tmp, "sluice-config", "sluice.yaml"))],
            env={"REDIS_PASSWORD": "placeholder"})
        run(overlay, [envoy, "--mode", "validate", "-c", str(pathlib.Path(tmp, "envoy-config", "envoy.yaml")), "-l", "error"])


def run(overlay, cmd, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})})
    if r.returncode != 0:
        fail(overlay, f"{' '.join(cmd[:3])} failed:\n{r.stdout}{r.stderr}")


def main():
    kustomize, sluice, envoy = sys.argv[1:4]
    overlays = sorted(p for p in (ROOT / "k8s" / "overlays").iterdir() if p.is_dir())
    for path in overlays:
        overlay = f"overlays/{path.name}"
        rendered = subprocess.run([kustomize, "build", str(path)], capture_output=True, text=True)
        if rendered.returncode != 0:
            fail(overlay, f"kustomize build failed:\n{rendered.stderr}")
        objects = [o for o in yaml.safe_load_all(rendered.stdout) if o]
        versions = VERSIONS.get(path.name, DEFAULT_VERSIONS)
        for version in versions:
            for o in objects:
                if o["apiVersion"].startswith("monitoring.coreos.com/"):
                    continue  # a CRD: checked by check_references
                try:
                    kubernetes_validate.validate(o, version, strict=True)
                except kubernetes_validate.ValidationError as e:
                    fail(overlay, f"{o['kind']}/{o['metadata']['name']} invalid for Kubernetes {version}: {e.message} at {list(e.path)}")
        check_references(overlay, objects)
        check_configs(overlay, objects, sluice, envoy)
        kinds = ", ".join(sorted({o["kind"] for o in objects}))
        print(f"k8s/{overlay}: {len(objects)} objects valid ({kinds}) on Kubernetes {' and '.join(versions)}; sluice and Envoy configs load")


if __name__ == "__main__":
    main()
