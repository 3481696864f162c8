# pybroker._fast: Cython fast paths. Deliberately empty: a missing extension must be an
# ImportError at its import site, never a silent pure-Python fallback.
