"""widgets in Python, the build that converts (``rekon-py-build
widgets_py_conversion``: world ``admission-conversion-plugin``, since it
defines ``Admission`` and ``Conversion``): ``widgets_py`` with the CRD at two
versions (``crd-versions.json``, the Rust build's CRD), ``v1alpha1`` whose
``spec.amount`` is v1's ``spec.size``; storage stays v1; converted both ways
without loss. A Widget named ``CONVERT_TRAP_NAME`` makes the converter
raise ``RuntimeError`` (a trap). ``widgets_py`` keeps one version, as the
TypeScript widgets' default entry does.
"""
from __future__ import annotations

import json
from pathlib import Path

from rekon_sdk import ConversionHandlers, Context, Registration

from widgets_py import WIDGET, Widgets, admission

CONVERT_TRAP_NAME = "convert-trap"
CRD_VERSIONS = json.loads((Path(__file__).parent / "crd-versions.json").read_text())


class VersionedWidgets(Widgets):
    def register(self) -> Registration:
        registration = super().register()
        registration.crds = [CRD_VERSIONS]
        return registration


plugin = VersionedWidgets()
conversion = ConversionHandlers()


@conversion.convert(WIDGET, "v1alpha1", "v1")
def to_v1(ctx: Context, obj: dict) -> dict:
    if obj["metadata"].get("name") == CONVERT_TRAP_NAME:
        raise RuntimeError("widgets: asked to trap in convert")
    obj["spec"] = {"size": obj["spec"]["amount"]}
    return obj


@conversion.convert(WIDGET, "v1", "v1alpha1")
def to_v1alpha1(ctx: Context, obj: dict) -> dict:
    if obj["metadata"].get("name") == CONVERT_TRAP_NAME:
        raise RuntimeError("widgets: asked to trap in convert")
    obj["spec"] = {"amount": obj["spec"]["size"]}
    return obj


try:  # the component's exports; absent natively (pytest)
    from rekon_sdk.component import export_plugin
    from rekon_sdk.component_admission import export_admission
    from rekon_sdk.component_conversion import export_conversion

    Guest = export_plugin(plugin)
    Admission = export_admission(admission)
    Conversion = export_conversion(conversion)
except ImportError:
    pass
