"""The oracle's own corpus of wrong variants (``specs/corpus.md``): one or more for each clause of
the spec, each a named fixture that ``pagedkv check`` must reject with its default budget.

``pools`` holds the wrong pools (the reference pool with one bug), ``policies`` the reference
under one policy option's other value, ``registry`` every variant with the clauses it breaks,
and ``measure`` runs them and writes the table of ``specs/corpus.md``.
"""
