"""Kubernetes' validation of label keys and values, worded as the API server
words it: the Python twin of the Rust crate ``rekon_rules::validation``
(``rules/src/validation.rs``), which a Python component cannot link. Both
port ``k8s.io/apimachinery/pkg/util/validation`` (``IsQualifiedName``,
``IsValidLabelValue``, ``IsDNS1123Subdomain``) and ``field.Error``'s
rendering message for message (the doubled space after each example
included); ``sdk/python/tests/test_validation.py`` checks the same cases as
the Rust unit tests, so the two stay one rule.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

QUALIFIED_NAME_MAX_LENGTH = 63
DNS1123_SUBDOMAIN_MAX_LENGTH = 253

_QUALIFIED_NAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_QUALIFIED_NAME_ERR = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
_LABEL_VALUE_FMT = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?"
_LABEL_VALUE_ERR = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
_DNS1123_SUBDOMAIN_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_DNS1123_SUBDOMAIN_ERR = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"

# ASCII only, as Go's regexp classes are (Python's [A-Za-z0-9] is ASCII too; fullmatch anchors).
_QUALIFIED_NAME_RE = re.compile(_QUALIFIED_NAME_FMT)
_DNS1123_SUBDOMAIN_RE = re.compile(_DNS1123_SUBDOMAIN_FMT)


def _max_len_error(length: int) -> str:
    return f"must be no more than {length} characters"


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    return f"{msg} (e.g. " + " or ".join(f"'{e}', " for e in examples) + f"regex used for validation is '{fmt}')"


def is_dns1123_subdomain(value: str) -> list[str]:
    """Why ``value`` is not a DNS-1123 subdomain; empty when it is."""
    errs = []
    if len(value) > DNS1123_SUBDOMAIN_MAX_LENGTH:
        errs.append(_max_len_error(DNS1123_SUBDOMAIN_MAX_LENGTH))
    if not _DNS1123_SUBDOMAIN_RE.fullmatch(value):
        errs.append(_regex_error(_DNS1123_SUBDOMAIN_ERR, _DNS1123_SUBDOMAIN_FMT, "example.com"))
    return errs


def is_qualified_name(value: str) -> list[str]:
    """Why ``value`` is not a qualified name (label, taint, annotation keys); empty when it is."""
    errs = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs += [f"prefix part {m}" for m in is_dns1123_subdomain(prefix)]
    else:
        return [
            "a qualified name "
            + _regex_error(_QUALIFIED_NAME_ERR, _QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > QUALIFIED_NAME_MAX_LENGTH:
        errs.append("name part " + _max_len_error(QUALIFIED_NAME_MAX_LENGTH))
    if not _QUALIFIED_NAME_RE.fullmatch(name):
        errs.append("name part " + _regex_error(_QUALIFIED_NAME_ERR, _QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc"))
    return errs


def is_valid_label_value(value: str) -> list[str]:
    """Why ``value`` is not a label value (taint values too); empty when it is."""
    errs = []
    if len(value) > QUALIFIED_NAME_MAX_LENGTH:
        errs.append(_max_len_error(QUALIFIED_NAME_MAX_LENGTH))
    if value and not _QUALIFIED_NAME_RE.fullmatch(value):
        errs.append(_regex_error(_LABEL_VALUE_ERR, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    return errs


def _quote(s: str) -> str:
    # Rust's {:?} and Go's %q agree on the ASCII label keys and values quoted here.
    return json.dumps(s, ensure_ascii=False)


@dataclass(frozen=True)
class FieldError:
    """One field error as the API server renders it (``field.Error``)."""

    field: str
    body: str

    @staticmethod
    def invalid(field: str, value: str, detail: str) -> "FieldError":
        return FieldError(field, f"Invalid value: {_quote(value)}: {detail}")

    @staticmethod
    def not_supported(field: str, value: str, supported: list[str]) -> "FieldError":
        return FieldError(field, f"Unsupported value: {_quote(value)}: supported values: " + ", ".join(_quote(s) for s in supported))

    @staticmethod
    def required(field: str, detail: str = "") -> "FieldError":
        return FieldError(field, f"Required value: {detail}" if detail else "Required value")

    @staticmethod
    def forbidden(field: str, detail: str) -> "FieldError":
        return FieldError(field, f"Forbidden: {detail}")

    def __str__(self) -> str:
        return f"{self.field}: {self.body}"


def key_path(parent: str, key: str) -> str:
    """A map key in a field path: ``spec.labels[team]``."""
    return f"{parent}[{key}]"


def invalid_message(kind: str, group: str, name: str, errors: list[FieldError]) -> str:
    """The API server's message for an invalid object: ``Kind.group "name" is invalid: ...``."""
    qualified = f"{kind}.{group}" if group else kind
    rendered = [str(e) for e in errors]
    body = rendered[0] if len(rendered) == 1 else "[" + ", ".join(rendered) + "]"
    return f"{qualified} {_quote(name)} is invalid: {body}"
