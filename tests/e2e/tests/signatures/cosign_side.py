#!/usr/bin/env python3
"""The independent side of the plugin-signature tests: cosign's tag format
(`sha256-<hex>.sig`, simple-signing payload, signature in the layer
annotation `dev.cosignproject.cosign/signature`) read, written and tampered
with by Python's `cryptography` and plain HTTP against the registry, sharing
no code with rekon.

    cosign_side.py verify   REGISTRY REPO DIGEST PUB.pem
    cosign_side.py sign     REGISTRY REPO DIGEST PREFIX ALG [--carry-key]
    cosign_side.py edit-payload   REGISTRY REPO DIGEST
    cosign_side.py copy-signature REGISTRY REPO FROM_DIGEST TO_DIGEST
    cosign_side.py sign-blob FILE PREFIX ALG OUT

`sign-blob` is `cosign sign-blob --key PREFIX.key --output-signature OUT
FILE` (the key made first when PREFIX.key does not exist).

`sign` makes a new key (ALG: ecdsa-p256 or ed25519), writes PREFIX.key
(PKCS#8) and PREFIX.pub, and appends its signature; `--carry-key` attaches
the signer's public key to the signature as cosign attaches a certificate
(`dev.sigstore.cosign/certificate`). Exit status 0 on success; `verify`
prints how many signatures verify and exits 1 when none does.
"""

import base64
import hashlib
import json
import sys
import urllib.error
import urllib.request

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
SIMPLE_SIGNING = "application/vnd.dev.cosign.simplesigning.v1+json"
SIGNATURE = "dev.cosignproject.cosign/signature"
CERTIFICATE = "dev.sigstore.cosign/certificate"


def sha256(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def tag_of(digest):
    return digest.replace(":", "-", 1) + ".sig"


def request(method, url, data=None, headers=None):
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    with urllib.request.urlopen(req, timeout=20) as resp:
        return resp.status, dict(resp.headers), resp.read()


def get_manifest(registry, repo, ref):
    try:
        _, _, body = request(
            "GET",
            f"http://{registry}/v2/{repo}/manifests/{ref}",
            headers={"Accept": OCI_MANIFEST},
        )
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return None
        raise
    return json.loads(body)


def get_blob(registry, repo, digest):
    _, _, body = request("GET", f"http://{registry}/v2/{repo}/blobs/{digest}")
    if sha256(body) != digest:
        raise SystemExit(f"blob {digest} does not hash to its digest")
    return body


def put_blob(registry, repo, data):
    digest = sha256(data)
    _, headers, _ = request("POST", f"http://{registry}/v2/{repo}/blobs/uploads/")
    location = headers.get("Location") or headers.get("location")
    if location.startswith("/"):
        location = f"http://{registry}{location}"
    sep = "&" if "?" in location else "?"
    request(
        "PUT",
        f"{location}{sep}digest={digest}",
        data=data,
        headers={"Content-Type": "application/octet-stream"},
    )
    return digest


def put_signature_manifest(registry, repo, digest, layers):
    config = json.dumps(
        {
            "architecture": "",
            "created": "0001-01-01T00:00:00Z",
            "history": [{"created": "0001-01-01T00:00:00Z"}],
            "os": "",
            "rootfs": {"type": "layers", "diff_ids": [l["digest"] for l in layers]},
            "config": {},
        },
        separators=(",", ":"),
    ).encode()
    config_digest = put_blob(registry, repo, config)
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "size": len(config),
            "digest": config_digest,
        },
        "layers": layers,
    }
    request(
        "PUT",
        f"http://{registry}/v2/{repo}/manifests/{tag_of(digest)}",
        data=json.dumps(manifest).encode(),
        headers={"Content-Type": OCI_MANIFEST},
    )


def payload_for(registry, repo, digest, optional=None):
    doc = {
        "critical": {
            "identity": {"docker-reference": f"{registry}/{repo}"},
            "image": {"docker-manifest-digest": digest},
            "type": "cosign container image signature",
        },
        "optional": optional,
    }
    return json.dumps(doc, separators=(",", ":")).encode()


def verifies(public, payload, signature):
    try:
        if isinstance(public, ec.EllipticCurvePublicKey):
            public.verify(signature, payload, ec.ECDSA(hashes.SHA256()))
        elif isinstance(public, ed25519.Ed25519PublicKey):
            public.verify(signature, payload)
        else:
            raise SystemExit(f"unsupported key type {type(public).__name__}")
        return True
    except InvalidSignature:
        return False


def verify(registry, repo, digest, pub_file):
    with open(pub_file, "rb") as f:
        public = serialization.load_pem_public_key(f.read())
    manifest = get_manifest(registry, repo, tag_of(digest))
    if manifest is None:
        print("no signature manifest")
        return 1
    good = 0
    for layer in manifest["layers"]:
        if layer["mediaType"] != SIMPLE_SIGNING:
            continue
        payload = get_blob(registry, repo, layer["digest"])
        signature = base64.b64decode(layer["annotations"][SIGNATURE])
        claims = json.loads(payload)
        if (
            verifies(public, payload, signature)
            and claims["critical"]["image"]["docker-manifest-digest"] == digest
            and claims["critical"]["type"] == "cosign container image signature"
        ):
            good += 1
    print(f"{good} signature(s) verify")
    return 0 if good else 1


def sign(registry, repo, digest, prefix, alg, carry_key):
    if alg == "ecdsa-p256":
        key = ec.generate_private_key(ec.SECP256R1())
        sign_payload = lambda p: key.sign(p, ec.ECDSA(hashes.SHA256()))
    elif alg == "ed25519":
        key = ed25519.Ed25519PrivateKey.generate()
        sign_payload = key.sign
    else:
        raise SystemExit(f"unknown algorithm {alg}")
    private_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    public_pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    with open(prefix + ".key", "wb") as f:
        f.write(private_pem)
    with open(prefix + ".pub", "wb") as f:
        f.write(public_pem)
    payload = payload_for(registry, repo, digest)
    annotations = {SIGNATURE: base64.b64encode(sign_payload(payload)).decode()}
    if carry_key:
        annotations[CERTIFICATE] = public_pem.decode()
    layer = {
        "mediaType": SIMPLE_SIGNING,
        "size": len(payload),
        "digest": put_blob(registry, repo, payload),
        "annotations": annotations,
    }
    existing = get_manifest(registry, repo, tag_of(digest))
    layers = (existing or {}).get("layers", []) + [layer]
    put_signature_manifest(registry, repo, digest, layers)
    return 0


def edit_payload(registry, repo, digest):
    """Every payload gets an extra annotation; the signatures stay."""
    manifest = get_manifest(registry, repo, tag_of(digest))
    layers = []
    for layer in manifest["layers"]:
        doc = json.loads(get_blob(registry, repo, layer["digest"]))
        doc["optional"] = dict(doc.get("optional") or {}, edited="yes")
        payload = json.dumps(doc, separators=(",", ":")).encode()
        layers.append(dict(layer, size=len(payload), digest=put_blob(registry, repo, payload)))
    put_signature_manifest(registry, repo, digest, layers)
    return 0


def copy_signature(registry, repo, from_digest, to_digest):
    manifest = get_manifest(registry, repo, tag_of(from_digest))
    request(
        "PUT",
        f"http://{registry}/v2/{repo}/manifests/{tag_of(to_digest)}",
        data=json.dumps(manifest).encode(),
        headers={"Content-Type": OCI_MANIFEST},
    )
    return 0


def sign_blob(path, prefix, alg, out):
    """cosign sign-blob: the base64 signature over the file's bytes in OUT,
    with the key at PREFIX.key (made first, with PREFIX.pub, if absent)."""
    import os

    if not os.path.exists(prefix + ".key"):
        if alg == "ecdsa-p256":
            key = ec.generate_private_key(ec.SECP256R1())
        elif alg == "ed25519":
            key = ed25519.Ed25519PrivateKey.generate()
        else:
            raise SystemExit(f"unknown algorithm {alg}")
        with open(prefix + ".key", "wb") as f:
            f.write(
                key.private_bytes(
                    serialization.Encoding.PEM,
                    serialization.PrivateFormat.PKCS8,
                    serialization.NoEncryption(),
                )
            )
        with open(prefix + ".pub", "wb") as f:
            f.write(
                key.public_key().public_bytes(
                    serialization.Encoding.PEM,
                    serialization.PublicFormat.SubjectPublicKeyInfo,
                )
            )
    with open(prefix + ".key", "rb") as f:
        key = serialization.load_pem_private_key(f.read(), password=None)
    with open(path, "rb") as f:
        data = f.read()
    if isinstance(key, ec.EllipticCurvePrivateKey):
        signature = key.sign(data, ec.ECDSA(hashes.SHA256()))
    else:
        signature = key.sign(data)
    with open(out, "wb") as f:
        f.write(base64.b64encode(signature))
    return 0


def main(argv):
    command, args = argv[1], argv[2:]
    if command == "verify":
        return verify(*args)
    if command == "sign":
        carry = "--carry-key" in args
        args = [a for a in args if a != "--carry-key"]
        return sign(*args, carry)
    if command == "edit-payload":
        return edit_payload(*args)
    if command == "copy-signature":
        return copy_signature(*args)
    if command == "sign-blob":
        return sign_blob(*args)
    raise SystemExit(f"unknown command {command}")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
