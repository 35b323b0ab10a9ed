"""The ``conversion`` export for componentize-py: a plugin's app module says
``Conversion = export_conversion(conversion)`` beside ``Guest``. Apart from
``component`` because it imports the bindings of world ``conversion-plugin``
(``wit_world.exports.conversion``), which other worlds do not have.
"""
from __future__ import annotations

import json

from componentize_py_types import Err  # type: ignore[import-not-found]
from wit_world.exports import conversion as wit  # type: ignore[import-not-found]

from .component import _HostBackend
from .context import Context
from .conversion import ConversionError, ConversionHandlers, ConversionRequest
from .settings import with_backend


def export_conversion(conversion: ConversionHandlers):
    """The ``Conversion`` class componentize-py exports for ``conversion``."""

    class Exported:
        def conversions(self):
            return [wit.ConversionRule(group=c.group, kind=c.kind, plural=c.plural, versions=list(c.versions))
                    for c in conversion.conversions()]

        def convert(self, object: str, desired_api_version: str) -> str:
            backend = _HostBackend()
            req = ConversionRequest(json.loads(object), desired_api_version)
            try:
                with with_backend(backend):
                    out = conversion.run_convert(Context(backend), req)
            except ConversionError as e:
                raise Err(str(e)) from None
            return json.dumps(out)

    return Exported
