"""API requests per object in one bench namespace, from the API server's audit log.

    python bench/sessions/audit.py CLUSTER_LOG_DIR NAMESPACE N

Counts the requests that completed (stage ResponseComplete) in NAMESPACE, per client (the user
agent's product), verb and resource[/subresource], and divides by N, so the table reads as
"requests per session" (or per pod, per Job). Only the run counts: requests from the bench's
first delete on (its teardown, and the deletions that follow) are left out, and so are watches
(one per client, not per object). The cluster's audit policy logs every request at Metadata
level; rotated logs (audit-*.log) are read too.
"""
import collections
import glob
import json
import os
import sys


def count(log_dir, ns):
    needle = '"namespace":"%s"' % ns
    seen = []
    for path in sorted(glob.glob(os.path.join(log_dir, "audit*.log"))):
        with open(path, errors="replace") as f:
            for line in f:
                if needle not in line:
                    continue
                e = json.loads(line)
                ref = e.get("objectRef", {})
                if e.get("stage") != "ResponseComplete" or ref.get("namespace") != ns:
                    continue
                seen.append(e)
    teardown = min((e["requestReceivedTimestamp"] for e in seen
                    if e["verb"] in ("delete", "deletecollection")), default="~")
    per = collections.Counter()
    for e in seen:
        if e["requestReceivedTimestamp"] >= teardown or e["verb"] == "watch":
            continue
        ref = e["objectRef"]
        agent = e.get("userAgent", "?").split("/")[0]
        resource = ref.get("resource", "?")
        if ref.get("subresource"):
            resource += "/" + ref["subresource"]
        per[(agent, e["verb"], resource)] += 1
    return per


def main():
    log_dir, ns, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    per = count(log_dir, ns)
    rows = sorted(per.items(), key=lambda kv: -kv[1])
    total = sum(v for _, v in rows)
    print("%-28s %-8s %-22s %8s %8s" % ("client", "verb", "resource", "count", "per obj"))
    for (agent, verb, resource), v in rows:
        print("%-28s %-8s %-22s %8d %8.2f" % (agent[:28], verb, resource, v, v / n))
    print("%-60s %8d %8.2f" % ("total", total, total / n))


if __name__ == "__main__":
    main()
