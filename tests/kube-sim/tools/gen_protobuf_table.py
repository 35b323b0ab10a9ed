#!/usr/bin/env python3
"""Builds data/protobuf-messages.txt, the message table kube-sim's protobuf
decoder reads, from the upstream Kubernetes sources.

Usage: gen_protobuf_table.py API_REPO APIMACHINERY_REPO > data/protobuf-messages.txt

API_REPO is a checkout of k8s.io/api, APIMACHINERY_REPO of k8s.io/apimachinery.
Field numbers, names and types come from each package's generated.proto;
whether a field is a pointer and whether its JSON tag has omitempty comes
from the Go struct tags in types.go (the proto says neither), so the
decoder can omit zero values exactly where Go's JSON encoder does.

Line format:
  M <message full name>
  F <number> <json name> <type> <flags>
type is a scalar (string int32 int64 bool bytes double), map:<k>:<v>, or a
message full name; flags: r = repeated, p = pointer (a zero on the wire is
kept), k = no omitempty (a zero is kept), i = inlined into the parent
(`json:",inline"`), - = none. "M <name> L" marks a Go slice type
(`type ExtraValue []string`) whose JSON is the array of its one field.
"""
import os
import re
import sys

API_PACKAGES = [
    "core/v1", "apps/v1", "batch/v1", "rbac/v1", "networking/v1", "policy/v1",
    "autoscaling/v1", "autoscaling/v2", "coordination/v1", "events/v1",
    "discovery/v1", "node/v1", "scheduling/v1", "storage/v1",
    "authorization/v1", "authentication/v1", "certificates/v1",
    "admissionregistration/v1",
]
MACHINERY_PACKAGES = ["pkg/apis/meta/v1"]

MSG_RE = re.compile(r"^message (\w+) \{")
FIELD_RE = re.compile(
    r"^\s*(optional|repeated)?\s*(map<\s*([\w.]+)\s*,\s*([\w.]+)\s*>|[\w.]+)\s+(\w+)\s*=\s*(\d+)\s*;")
GO_FIELD_RE = re.compile(
    r'^\s*(?:\w+\s+)?(\*?)[\w.\[\]*]+\s+`json:"([^"]*)"[^`]*protobuf:"[^"]*name=(\w+)')
GO_STRUCT_RE = re.compile(r"^type (\w+) struct \{")
GO_INLINE_RE = re.compile(r'^\s*\*?[\w.]+\s+`json:"(?:,inline)?"\s+protobuf:"bytes,(\d+)')
GO_SLICE_RE = re.compile(r"^type (\w+) \[\]\w+$")


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(re.sub(r"//.*", "", l) for l in text.splitlines())


def qualify(t, package):
    scalars = {"string", "int32", "int64", "bool", "bytes", "double", "float", "uint32", "uint64"}
    if t in scalars:
        return t
    if t.startswith("."):
        return t[1:]
    return f"{package}.{t}"


def go_tags(path):
    """(struct, proto name) -> (pointer, omitempty) from types*.go files."""
    out = {}
    for fn in sorted(os.listdir(path)):
        if not fn.endswith(".go") or fn.startswith("zz_") or fn.endswith("_test.go"):
            continue
        struct = None
        with open(os.path.join(path, fn), encoding="utf-8") as f:
            for line in f:
                m = GO_SLICE_RE.match(line.strip())
                if m:
                    out[(m.group(1), None)] = "slice"
                    continue
                m = GO_STRUCT_RE.match(line)
                if m:
                    struct = m.group(1)
                    continue
                if line.startswith("}"):
                    struct = None
                    continue
                if struct is None:
                    continue
                m = GO_INLINE_RE.match(line)
                if m:
                    out[(struct, int(m.group(1)))] = "inline"
                    continue
                m = GO_FIELD_RE.match(line)
                if m:
                    ptr, json_tag, pname = m.groups()
                    out[(struct, pname)] = (ptr == "*", "omitempty" in json_tag.split(",")[1:])
    return out


def emit(proto_path, go_path, package, lines):
    tags = go_tags(go_path)
    text = strip_comments(open(proto_path, encoding="utf-8").read())
    msg = None
    depth = 0
    for line in text.splitlines():
        m = MSG_RE.match(line)
        if m and depth == 0:
            msg = m.group(1)
            slice_ = tags.get((msg, None)) == "slice"
            lines.append(f"M {package}.{msg}" + (" L" if slice_ else ""))
            depth = 1
            continue
        if msg is None:
            continue
        depth += line.count("{") - line.count("}")
        if depth <= 0:
            msg = None
            depth = 0
            continue
        m = FIELD_RE.match(line)
        if not m:
            continue
        label, ty, mk, mv, name, num = m.groups()
        if mk:
            t = f"map:{qualify(mk, package)}:{qualify(mv, package)}"
        else:
            t = qualify(ty, package)
        ptr, omit = tags.get((msg, name), (False, True))
        flags = ""
        if tags.get((msg, int(num))) == "inline":
            flags += "i"
        if label == "repeated":
            flags += "r"
        if ptr:
            flags += "p"
        if not omit:
            flags += "k"
        lines.append(f"F {num} {name} {t} {flags or '-'}")


def main():
    api, machinery = sys.argv[1], sys.argv[2]
    lines = []
    for p in API_PACKAGES:
        emit(os.path.join(api, p, "generated.proto"), os.path.join(api, p),
             "k8s.io.api." + p.replace("/", "."), lines)
    for p in MACHINERY_PACKAGES:
        emit(os.path.join(machinery, p, "generated.proto"), os.path.join(machinery, p),
             "k8s.io.apimachinery." + p.replace("/", "."), lines)
    print("# Generated by tools/gen_protobuf_table.py from k8s.io/api and")
    print("# k8s.io/apimachinery (generated.proto + types.go). Do not edit.")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
