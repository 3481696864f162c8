# Python face of pybroker._fast.request_read (tests; the fast paths cimport it).
from typing_extensions import Buffer

def read_fields(frame: Buffer, names: list[str], short_names: bool = False,
                long_names_code: int = -1, ext_fields_max: int = 1024,
                response: bool = False) -> dict | None:
    """The request (``response``: the response) the fast path reads from one whole frame with
    the field table ``names``, or None when the Python path takes it: ``code``, ``opaque``,
    ``flag``, ``fields`` (wire name -> str), ``body``."""
