"""Typed decoding of URBD record images (standard library only, plus ``ebcdic`` for cp1047).

``parse_format_buffer``/``layout_from_conf`` and ``layout_from_gfft`` describe an image as a
:class:`RecordLayout`; ``decode_payload`` turns image bytes into typed values by column,
``encode_payload`` does the reverse (tests, simulator); ``spark_ddl`` gives the Spark schema.
See README.md in this directory for formats, code pages and assumptions.
"""

from .arch import Form, payload_form
from .decode import PayloadDecoder, decode_payload, is_empty
from .encode import PayloadEncoder, encode_payload
from .errors import LayoutError, PayloadError
from .formatbuffer import layout_from_conf, parse_format_buffer
from .gfft import gfft_key, layout_from_gfft
from .ibmfloat import float_to_ibm, ibm_to_float
from .layout import FieldSpec, Filler, GroupSpec, LayoutKey, RecordLayout
from .registry import LayoutRegistry
from .schema import spark_ddl, spark_type

__all__ = [
    "FieldSpec",
    "Filler",
    "Form",
    "GroupSpec",
    "LayoutError",
    "LayoutKey",
    "LayoutRegistry",
    "PayloadDecoder",
    "PayloadEncoder",
    "PayloadError",
    "RecordLayout",
    "decode_payload",
    "encode_payload",
    "float_to_ibm",
    "gfft_key",
    "ibm_to_float",
    "is_empty",
    "layout_from_conf",
    "layout_from_gfft",
    "parse_format_buffer",
    "payload_form",
    "spark_ddl",
    "spark_type",
]
