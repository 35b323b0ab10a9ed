"""widgets in Python, the stricter build (``rekon-py-build widgets_py_strict``):
``widgets_py`` with sizes up to ``STRICT_MAX_SIZE`` (5) instead of 10, as the
Rust build's feature ``strict``. The e2e ``admission_objects.rs`` runs it as a
Plugin object's shadow, then promotes it.
"""
from __future__ import annotations

from widgets_py import STRICT_MAX_SIZE, admission_up_to, plugin

admission = admission_up_to(STRICT_MAX_SIZE)

try:  # the component's exports; absent natively (pytest)
    from rekon_sdk.component import export_plugin
    from rekon_sdk.component_admission import export_admission

    Guest = export_plugin(plugin)
    Admission = export_admission(admission)
except ImportError:
    pass
