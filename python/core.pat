# Patterns for nanobind's stubgen (python/CMakeLists.txt): the exception types module.cpp creates.
# stubgen leaves them out, as their module is bulkbloom (where __init__.py re-exports them).
^_core\.Error$:
    class Error(Exception):
        \doc

^_core\.FormatError$:
    class FormatError(Error, ValueError):
        \doc

^_core\.IoError$:
    class IoError(Error, OSError):
        \doc

^_core\.BackendUnavailable$:
    class BackendUnavailable(Error):
        \doc
