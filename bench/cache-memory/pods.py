"""Creates N pods shaped like session pods, bound to the kwok nodes, with a thread pool; or
deletes every pod of the namespace at once. Used by run.sh; talks to the cluster with the
official Python client.

    pods.py KUBECONFIG NAMESPACE N         create N pods
    pods.py KUBECONFIG NAMESPACE delete    delete them all (one collection delete, grace 0)
"""

import sys
from concurrent.futures import ThreadPoolExecutor

from kubernetes import client, config


def pod(i):
    name = "telo-run-bench-%05d" % i
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {
            "app.kubernetes.io/managed-by": "telo-operator", "telo.run/session": name[9:]}},
        "spec": {
            "nodeName": "kwok-node-%d" % (i % 2),
            "restartPolicy": "Never", "automountServiceAccountToken": False,
            "securityContext": {"runAsNonRoot": True, "runAsUser": 1000,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "session", "image": "registry.local/telo-session:0123456789abcdef",
                "command": ["telo", "run", "/app/app/telo.yaml", "--no-cache-write"],
                "stdin": True, "tty": True,
                "env": [{"name": "TELO_REGISTRY_URL", "value": "https://registry.telo.run"},
                        {"name": "HOME", "value": "/home/telo"}],
                "resources": {"limits": {"cpu": "500m", "memory": "512Mi"},
                              "requests": {"cpu": "500m", "memory": "512Mi"}},
                "securityContext": {"allowPrivilegeEscalation": False,
                                    "readOnlyRootFilesystem": True,
                                    "capabilities": {"drop": ["ALL"]}},
                "volumeMounts": [{"name": "app", "mountPath": "/app"},
                                 {"name": "tmp", "mountPath": "/tmp"}]}],
            "volumes": [{"name": "app", "emptyDir": {}}, {"name": "tmp", "emptyDir": {}}]}}


def main():
    kubeconfig, namespace, what = sys.argv[1], sys.argv[2], sys.argv[3]
    cfg = client.Configuration()
    config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    cfg.connection_pool_maxsize = 32
    core = client.CoreV1Api(client.ApiClient(cfg))
    if what == "delete":
        # One request and no grace: the namespace controller would delete 10,000 pods one by one
        # and kwok would finish each, loading the shared cluster for minutes after the bench.
        core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
        return
    count = int(what)
    with ThreadPoolExecutor(max_workers=32) as pool:
        list(pool.map(lambda i: core.create_namespaced_pod(namespace, pod(i)), range(count)))


if __name__ == "__main__":
    main()
