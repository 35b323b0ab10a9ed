"""widgets in Python, the build with a CEL policy (``rekon-py-build
widgets_py_policies``: world ``admission-policies-plugin``, since it defines
``Admission`` and ``Policies``): ``widgets_py`` plus a policy the API server
evaluates itself (``rekon policies``), no webhook called: a Widget's name is
not ``forbidden``. The TypeScript widgets' ``component-policies.ts`` declares
the same one.
"""
from __future__ import annotations

from rekon_sdk import Policy, PolicyValidation

from widgets_py import WIDGET, admission, plugin

POLICIES = [
    Policy(
        "name",
        [WIDGET],
        [
            PolicyValidation(
                "object.metadata.name != 'forbidden'",
                message_expression="'the name ' + object.metadata.name + ' is not allowed'",
                reason="invalid",
            )
        ],
    )
]

try:  # the component's exports; absent natively (pytest)
    from rekon_sdk.component import export_plugin
    from rekon_sdk.component_admission import export_admission
    from rekon_sdk.component_policies import export_policies

    Guest = export_plugin(plugin)
    Admission = export_admission(admission)
    Policies = export_policies(POLICIES)
except ImportError:
    pass
