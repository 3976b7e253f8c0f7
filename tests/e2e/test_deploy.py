"""deploy/: the Kubernetes manifests as `kubectl kustomize` renders them (no
cluster needed) and the Dockerfile.

Checks what a broken deployment would get wrong: the kinds, probe paths and
ports, Triton's three ports, the HPA scaling on the custom Pods metric
avg_time_queue_ms, the prometheus-adapter rule that produces it (both Triton
series, a 30 s window, valid PromQL per promtool), the drain (preStop and a
grace period longer than harkd's exit timeout), and that every harkd flag
the Deployment passes exists in the harkd that was built."""
import json
import os
import re
import shutil
import subprocess
import tempfile
import unittest

import yaml

from harness import BIN_DIR, SOURCE_DIR, main

DEPLOY = os.path.join(SOURCE_DIR, "deploy")
KUSTOMIZATION = os.path.join(DEPLOY, "kubernetes")


def render():
    kubectl = shutil.which("kubectl")
    if not kubectl:
        raise AssertionError("kubectl not found on PATH: run scripts/setup.sh, which installs "
                             "Debian's kubernetes-client when no kubectl is present")
    out = subprocess.run([kubectl, "kustomize", KUSTOMIZATION], capture_output=True,
                         text=True, timeout=120)
    if out.returncode != 0:
        raise AssertionError(f"kubectl kustomize {KUSTOMIZATION} failed:\n{out.stderr}")
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def flag_names(args):
    """--name of each flag in a container's args (--name=value or --name value)."""
    return [a.split("=", 1)[0] for a in args if a.startswith("--")]


def harkd_flags():
    out = subprocess.run([os.path.join(BIN_DIR, "harkd"), "--help"], capture_output=True,
                         text=True, timeout=30)
    return set(re.findall(r"--[a-z][a-z0-9-]*", out.stdout + out.stderr))


def flag_value(args, name):
    for i, a in enumerate(args):
        if a == name:
            return args[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


class Kustomization(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.docs = render()

    def one(self, kind, name=None):
        found = [d for d in self.docs if d["kind"] == kind
                 and (name is None or d["metadata"]["name"] == name)]
        self.assertEqual(len(found), 1, f"expected one {kind} {name or ''}, got {len(found)}")
        return found[0]

    def container(self):
        containers = self.one("Deployment")["spec"]["template"]["spec"]["containers"]
        self.assertEqual(len(containers), 1)
        return containers[0]

    def test_kinds(self):
        kinds = sorted({(d["apiVersion"], d["kind"]) for d in self.docs})
        for want in [("apps/v1", "Deployment"), ("v1", "Service"),
                     ("autoscaling/v2", "HorizontalPodAutoscaler"),
                     ("monitoring.coreos.com/v1", "ServiceMonitor"), ("v1", "ConfigMap"),
                     ("networking.k8s.io/v1", "Ingress")]:
            self.assertIn(want, kinds)

    def test_ports(self):
        ports = {p["name"]: p["containerPort"] for p in self.container()["ports"]}
        self.assertEqual(ports, {"http": 8000, "grpc": 8001, "metrics": 8002})
        svc = self.one("Service")
        sports = {p["name"]: (p["port"], p["targetPort"]) for p in svc["spec"]["ports"]}
        self.assertEqual(sports, {"http": (8000, "http"), "grpc": (8001, "grpc"),
                                  "metrics": (8002, "metrics")})
        # The Service must select the Deployment's pods.
        labels = self.one("Deployment")["spec"]["template"]["metadata"]["labels"]
        for k, v in svc["spec"]["selector"].items():
            self.assertEqual(labels.get(k), v)

    def test_probes(self):
        c = self.container()
        for probe, path in [("livenessProbe", "/v2/health/live"),
                            ("readinessProbe", "/v2/health/ready")]:
            get = c[probe]["httpGet"]
            self.assertEqual(get["path"], path, probe)
            self.assertIn(get["port"], ("http", 8000), probe)

    def test_resources(self):
        res = self.container()["resources"]
        for part in ("requests", "limits"):
            self.assertIn("cpu", res[part])
            self.assertIn("memory", res[part])
        # Measured (docs/operations.md, "Sizing"): 818 MiB RSS with the asr
        # model's 8 decoders, peaks up to 1191 MiB with 1000 streams
        # connected. A limit below that gets the pod OOM-killed under load.
        units = {"Mi": 1, "Gi": 1024}
        for part in ("requests", "limits"):
            mem = res[part]["memory"]
            m = re.fullmatch(r"(\d+)(Mi|Gi)", mem)
            self.assertIsNotNone(m, mem)
            self.assertGreater(int(m.group(1)) * units[m.group(2)], 1191, part)

    def test_drain(self):
        pod = self.one("Deployment")["spec"]["template"]["spec"]
        c = self.container()
        self.assertIn("preStop", c["lifecycle"])
        exit_timeout = flag_value(c["args"], "--exit-timeout-secs")
        self.assertEqual(exit_timeout, "30")
        pre_stop = c["lifecycle"]["preStop"]["exec"]["command"]
        self.assertEqual(pre_stop[0], "sleep")
        # The grace period covers the preStop hook and the drain after it.
        self.assertGreater(pod["terminationGracePeriodSeconds"],
                           int(exit_timeout) + int(pre_stop[1]))

    def test_harkd_knows_every_flag(self):
        known = harkd_flags()
        c = self.container()
        self.assertIn("--model-repository", flag_names(c["args"]))
        for flag in flag_names(c["args"]):
            self.assertIn(flag, known, f"the Deployment passes {flag}, which harkd --help "
                                       "does not list")

    def test_hpa(self):
        hpa = self.one("HorizontalPodAutoscaler")
        spec = hpa["spec"]
        self.assertEqual(spec["scaleTargetRef"]["kind"], "Deployment")
        self.assertEqual(spec["scaleTargetRef"]["name"], self.one("Deployment")["metadata"]["name"])
        self.assertGreater(spec["maxReplicas"], spec["minReplicas"])
        self.assertEqual(len(spec["metrics"]), 1)
        metric = spec["metrics"][0]
        self.assertEqual(metric["type"], "Pods")
        self.assertEqual(metric["pods"]["metric"]["name"], "avg_time_queue_ms")
        self.assertEqual(metric["pods"]["target"]["type"], "AverageValue")

    def test_service_monitor(self):
        sm = self.one("ServiceMonitor")
        svc = self.one("Service")
        for k, v in sm["spec"]["selector"]["matchLabels"].items():
            self.assertEqual(svc["metadata"]["labels"].get(k), v)
        ep = sm["spec"]["endpoints"]
        self.assertEqual([e["port"] for e in ep], ["metrics"])
        self.assertEqual(ep[0].get("path", "/metrics"), "/metrics")
        # Two samples must fall in the rule's 30 s window.
        self.assertLessEqual(int(ep[0]["interval"].rstrip("s")), 15)

    def adapter_rule(self):
        cm = self.one("ConfigMap", "hark-prometheus-adapter")
        rules = yaml.safe_load(cm["data"]["config.yaml"])["rules"]
        named = [r for r in rules if r["name"]["as"] == "avg_time_queue_ms"]
        self.assertEqual(len(named), 1)
        return named[0]

    def test_adapter_rule(self):
        rule = self.adapter_rule()
        q = rule["metricsQuery"]
        for series in ("nv_inference_queue_duration_us", "nv_inference_request_success"):
            self.assertRegex(q, series + r"\{<<\.LabelMatchers>>\}\[30s\]")
        self.assertIn("/ 1000", q)
        self.assertEqual(rule["resources"]["overrides"]["pod"], {"resource": "pod"})
        self.assertIn("nv_inference_queue_duration_us", rule["seriesQuery"])

    def test_adapter_query_is_valid_promql(self):
        promtool = shutil.which("promtool")
        if not promtool:
            self.fail("promtool not found: run scripts/setup.sh (package prometheus)")
        q = self.adapter_rule()["metricsQuery"]
        # What the adapter substitutes for one pod.
        q = q.replace("<<.LabelMatchers>>", 'namespace="default",pod="hark-0"')
        q = q.replace("<<.GroupBy>>", "pod")
        with tempfile.NamedTemporaryFile("w", suffix=".yml") as f:
            yaml.safe_dump({"groups": [{"name": "hark", "rules": [
                {"record": "avg_time_queue_ms", "expr": q}]}]}, f)
            f.flush()
            out = subprocess.run([promtool, "check", "rules", f.name], capture_output=True,
                                 text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)

    def test_ingress(self):
        grpc = self.one("Ingress", "hark-grpc")
        self.assertEqual(grpc["metadata"]["annotations"]
                         ["nginx.ingress.kubernetes.io/backend-protocol"], "GRPC")
        http = self.one("Ingress", "hark-http")
        self.assertGreaterEqual(int(http["metadata"]["annotations"]
                                    ["nginx.ingress.kubernetes.io/proxy-read-timeout"]), 600)
        for ing, port in ((grpc, "grpc"), (http, "http")):
            backends = [p["backend"]["service"] for r in ing["spec"]["rules"]
                        for p in r["http"]["paths"]]
            self.assertEqual(backends, [{"name": "hark", "port": {"name": port}}])


class Dockerfile(unittest.TestCase):
    def setUp(self):
        with open(os.path.join(DEPLOY, "Dockerfile")) as f:
            self.lines = [ln.strip() for ln in f if ln.strip() and not ln.lstrip().startswith("#")]
        self.text = "\n".join(self.lines)

    def test_base_and_build(self):
        self.assertEqual(self.lines[0], "FROM debian:bookworm")
        # The README's own scripts, not a second hand-kept recipe.
        self.assertIn("scripts/setup.sh", self.text)
        self.assertIn("scripts/build.sh", self.text)
        self.assertNotIn("apt-get install", self.text)

    def test_ports_signal_user(self):
        expose = [ln for ln in self.lines if ln.startswith("EXPOSE")]
        self.assertEqual(len(expose), 1)
        self.assertEqual(sorted(expose[0].split()[1:]), ["8000", "8001", "8002"])
        self.assertIn("STOPSIGNAL SIGTERM", self.lines)
        users = [ln.split()[1] for ln in self.lines if ln.startswith("USER")]
        self.assertTrue(users and users[-1] not in ("root", "0"), users)

    def test_runs_harkd_on_a_repository(self):
        self.assertRegex(self.text, r'ENTRYPOINT \[".*/bin/harkd"\]')
        cmd = [ln for ln in self.lines if ln.startswith("CMD ")]
        self.assertEqual(len(cmd), 1)
        args = json.loads(cmd[0][4:])
        self.assertIn("--model-repository", args)
        known = harkd_flags()
        for flag in flag_names(args):
            self.assertIn(flag, known, f"the Dockerfile passes {flag}, which harkd --help "
                                       "does not list")


if __name__ == "__main__":
    main()
