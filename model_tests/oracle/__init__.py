"""The oracle: hold another implementation to the reference, from Python or over stdio.

``isomorphic`` compares through a bijection of block ids and adopts the target's allowed
choices; ``exact`` demands the same ids. See ``specs/oracle.md``.
"""
