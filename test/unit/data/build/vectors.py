#!/usr/bin/env python3
"""Reference vectors for test_build_depkey.c: the image tag of telorun/telo's k8s runner, computed
straight from its description (docs: telo-runner-behaviour.md section 6.1, runner-core
extractDependencyKey), independently of the C code.

  tag = sha256("base\0<base>\0" ["base-digest\0<digest>\0"] "telo-registry\0<url>\0"
               "import\0<src>\0"... "controller\0<purl>\0"...
               [fallback only: "file\0<path>\0<contents>\0"... by path]).hexdigest()[:32]

imports: values of `imports:` (a string or {source}) of Telo.Application / Telo.Library documents;
controllers: string items of `controllers:` of Telo.Definition documents; both de-duplicated and
sorted as JavaScript sorts strings (UTF-16 code units). A Telo.Definition with a string
`local_path`, or a file that does not parse, turns on the full-content fallback.

PyYAML resolves plain scalars by YAML 1.1 rather than the reference's YAML 1.2 core schema, so
the bundles below avoid scalars on which the two disagree (yes/no/on/off, 0o17, ...).

Run: python3 test/unit/data/build/vectors.py   (prints one "name tag" line per vector)
"""
import hashlib

import yaml

BASE = "telorun/node:latest-slim"
REGISTRY = "https://registry.telo.run"

APP = """kind: Telo.Application
metadata:
  name: hello
imports:
  Console: std/console@0.9.0
  Http:
    source: std/http-server@1.2.0
    variables: { level: info }
---
kind: Http.Server
metadata:
  name: server
port: 8080
"""

# The same imports in the other order, and another body (port).
APP_REORDERED_BODY = """kind: Telo.Application
metadata:
  name: hello
imports:
  Http:
    source: std/http-server@1.2.0
  Console: "std/console@0.9.0"
---
kind: Http.Server
metadata:
  name: server
port: 9090
"""

APP_NEW_IMPORT = APP.replace("std/console@0.9.0", "std/console@0.9.1")

DEFINITION = """kind: Telo.Definition
metadata:
  name: Thing
controllers:
  - pkg:npm/@acme/thing@1.0.0
  - pkg:npm/@acme/thing@1.0.0
  - pkg:npm/@acme/aardvark@2.0.0
  - 42
"""

LIBRARY = """kind: Telo.Library
metadata:
  name: util
imports:
  - std/sql@2.0.0
  - source: std/console@0.9.0
"""

LOCAL_DEFINITION = """kind: Telo.Definition
metadata:
  name: Local
controllers:
  - pkg:npm/@acme/local@0.1.0
local_path: ./local
"""

BROKEN = "a: b: c: :\n  - [\n"

UNICODE = """kind: Telo.Application
metadata:
  name: unicode
imports:
  Wide: "std/\uff21@1.0.0"
  Emoji: "std/\U0001F600@1.0.0"
  Accent: "std/\u00e9@1.0.0"
"""

VECTORS = [
    # name, files {path: text}, base digest
    ("app", {"app/telo.yaml": APP, "lib/thing.yaml": DEFINITION, "lib/util.yaml": LIBRARY}, None),
    ("app-reordered-body", {"app/telo.yaml": APP_REORDERED_BODY, "lib/thing.yaml": DEFINITION,
                            "lib/util.yaml": LIBRARY}, None),
    ("app-new-import", {"app/telo.yaml": APP_NEW_IMPORT, "lib/thing.yaml": DEFINITION,
                        "lib/util.yaml": LIBRARY}, None),
    ("app-digest", {"app/telo.yaml": APP, "lib/thing.yaml": DEFINITION, "lib/util.yaml": LIBRARY},
     "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"),
    ("bare", {"app/telo.yaml": "kind: Telo.Application\nmetadata:\n  name: bare\n"}, None),
    ("local-path", {"app/telo.yaml": APP, "local/def.yaml": LOCAL_DEFINITION,
                    "local/index.js": "export default 1;\n"}, None),
    ("broken", {"app/telo.yaml": APP, "z/broken.yaml": BROKEN, "a/notes.txt": "hello\n"}, None),
    ("unicode", {"app/telo.yaml": UNICODE}, None),
]


def js_sorted(strings):
    # JavaScript's default sort: by UTF-16 code units, i.e. big-endian UTF-16 bytes.
    return sorted(set(strings), key=lambda s: s.encode("utf-16-be"))


def dependency_key(files):
    imports, controllers, fallback = [], [], False
    for text in files.values():
        try:
            docs = list(yaml.safe_load_all(text))
        except yaml.YAMLError:
            fallback = True
            continue
        for doc in docs:
            if not isinstance(doc, dict):
                continue
            kind = doc.get("kind")
            if kind in ("Telo.Application", "Telo.Library") and isinstance(doc.get("imports"), (dict, list)):
                values = doc["imports"].values() if isinstance(doc["imports"], dict) else doc["imports"]
                for v in values:
                    if isinstance(v, str):
                        imports.append(v)
                    elif isinstance(v, dict) and isinstance(v.get("source"), str):
                        imports.append(v["source"])
            if kind == "Telo.Definition":
                if isinstance(doc.get("controllers"), list):
                    controllers += [c for c in doc["controllers"] if isinstance(c, str)]
                if isinstance(doc.get("local_path"), str):
                    fallback = True
    return js_sorted(imports), js_sorted(controllers), fallback


def tag(files, digest):
    imports, controllers, fallback = dependency_key(files)
    h = hashlib.sha256()
    h.update(b"base\0" + BASE.encode() + b"\0")
    if digest:
        h.update(b"base-digest\0" + digest.encode() + b"\0")
    h.update(b"telo-registry\0" + REGISTRY.encode() + b"\0")
    for s in imports:
        h.update(b"import\0" + s.encode() + b"\0")
    for c in controllers:
        h.update(b"controller\0" + c.encode() + b"\0")
    if fallback:
        for path in sorted(files, key=lambda p: p.encode("utf-16-be")):
            h.update(b"file\0" + path.encode() + b"\0" + files[path].encode() + b"\0")
    return h.hexdigest()[:32]


if __name__ == "__main__":
    for name, files, digest in VECTORS:
        print(name, tag(files, digest))
