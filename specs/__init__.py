"""The specification shared by every pagedkv implementation.

Prose pages (``*.md``) say what each layer does; the modules here are the executable pieces both
``reference/`` and ``optimized/`` use: types, errors, the content hash, the interfaces and the
invariant predicates.
"""
