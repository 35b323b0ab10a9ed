"""An admission webhook on the Python standard library only (http.server +
ssl), written as an outside author would: kube-sim's webhook tests register
it and call it through kubectl.

Usage: webhook.py CERT_PEM KEY_PEM. Prints the port it listens on, then
serves until killed.
  /mutate   adds the annotation python-webhook: was-here (JSONPatch)
  /validate denies a ConfigMap holding the key "forbidden"
"""
import base64
import http.server
import json

import https_json


class Hook(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        req = review["request"]
        resp = {"uid": req["uid"], "allowed": True}
        obj = req.get("object") or {}
        if self.path.startswith("/mutate"):
            if (obj.get("metadata") or {}).get("annotations"):
                ops = [{"op": "add", "path": "/metadata/annotations/python-webhook", "value": "was-here"}]
            else:
                ops = [{"op": "add", "path": "/metadata/annotations", "value": {"python-webhook": "was-here"}}]
            resp["patchType"] = "JSONPatch"
            resp["patch"] = base64.b64encode(json.dumps(ops).encode()).decode()
        elif self.path.startswith("/validate"):
            if "forbidden" in (obj.get("data") or {}):
                resp["allowed"] = False
                resp["status"] = {"code": 403, "message": "python says no"}
        https_json.reply(self, {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": resp})

    def log_message(self, *args):
        pass


def main():
    https_json.serve(Hook)


if __name__ == "__main__":
    main()
