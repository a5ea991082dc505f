"""pagedkv's stand-ins for what the peers' block-manager files import from the rest of their
engine: only the names those files use, each as small as the use allows. Clearly ours; nothing
here is copied from an engine."""
