"""Real peers: adapters that hold published serving engines' block managers to the reference.

The engines' own files are never part of pagedkv: ``make peers-fetch`` downloads their published
wheels (``sources.fetch``), unpacks only the block-manager files into an ignored cache
(``.peers/``) and deletes the wheels; ``sources.load`` imports those files with pagedkv's small
stand-ins (``standins/``) in place of the rest of each engine. The findings are
``specs/peers.md``.
"""
