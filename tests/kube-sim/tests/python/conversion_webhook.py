"""A CRD conversion webhook on the Python standard library only
(http.server + ssl), written as an outside author would: kube-sim's
conversion tests register it in a CRD and read and write through it.

Widget example.com: v1 (storage) has spec.replicas (integer) and
spec.color; v1alpha1 has spec.size (a string) and spec.colour.

Usage: conversion_webhook.py CERT_PEM KEY_PEM [GATE_DIR]. Prints the port
it listens on, then serves until killed.
  /convert  converts between v1alpha1 and v1 (ConversionReview v1)
  /fail     answers result.status Failure with a message
  /bad-uid  answers with another uid
  /rename   converts, but changes metadata.name (the server refuses that)
  /gate     converts once GATE_DIR/open exists; until then it writes
            GATE_DIR/arrived and waits (a test holds a write there)
"""
import http.server
import json
import os
import sys
import time

import https_json


def convert(obj, desired):
    obj = json.loads(json.dumps(obj))
    spec = obj.get("spec") or {}
    if desired == "example.com/v1":
        if "size" in spec:
            spec["replicas"] = int(spec.pop("size"))
        if "colour" in spec:
            spec["color"] = spec.pop("colour")
    else:
        if "replicas" in spec:
            spec["size"] = str(spec.pop("replicas"))
        if "color" in spec:
            spec["colour"] = spec.pop("color")
    if spec:
        obj["spec"] = spec
    obj["apiVersion"] = desired
    labels = obj.setdefault("metadata", {}).setdefault("labels", {})
    labels["converted-to"] = desired.split("/")[1]
    return obj


class Hook(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        req = review["request"]
        resp = {"uid": req["uid"], "result": {"status": "Success"}}
        if self.path.startswith("/gate"):
            gate = sys.argv[3]
            while not os.path.exists(os.path.join(gate, "open")):
                open(os.path.join(gate, "arrived"), "w").close()
                time.sleep(0.01)
        if self.path.startswith("/fail"):
            resp["result"] = {"status": "Failure", "message": "no converter for that"}
        else:
            resp["convertedObjects"] = [convert(o, req["desiredAPIVersion"]) for o in req["objects"]]
            if self.path.startswith("/bad-uid"):
                resp["uid"] = "not-the-request"
            if self.path.startswith("/rename"):
                for o in resp["convertedObjects"]:
                    o["metadata"]["name"] = "renamed"
        https_json.reply(self, {"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview", "response": resp})

    def log_message(self, *args):
        pass


def main():
    https_json.serve(Hook)


if __name__ == "__main__":
    main()
